#include "lock/store/script_client.hpp"

#include "lock/store/call_form.hpp"

#include "detail/awaitable_tokens.hpp"
#include "lock/base/errors.hpp"
#include "redis/engine.hpp"

#include <colock/error.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/container/small_vector.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <limits>

namespace colock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using std::chrono::milliseconds;

std::string_view script_reply::server_text() const noexcept {
    return ec == redis::error::server_error ? std::string_view(value.text) : std::string_view();
}

script_reply last_reply(error_code ec, redis::response&& resp) {
    if (ec && ec != redis::error::server_error)
        return {ec, {}};
    if (resp.empty())
        return {error::unexpected_reply, {}};
    return {ec, std::move(resp.back())};
}

milliseconds retry_schedule::pause(int round) const noexcept {
    // Doubling stops at 16x, long before the shift could overflow.
    return std::min(first_pause * (1 << std::clamp(round, 0, 4)), max_pause);
}

namespace {

// A script call's outcome: its answer, the last. The engine reports a server error when any
// answer of the request is one, and a library loaded by another call meanwhile answers that it
// exists: that is no error of the call's.
script_reply call_reply(error_code ec, redis::response&& resp) {
    if (ec == redis::error::server_error && !resp.empty() && !resp.back().is_error())
        ec = {};
    return last_reply(ec, std::move(resp));
}

} // namespace

namespace {

// The keys and arguments of `call` in order, as views.
boost::container::small_vector<std::string_view, 16> words_of(script_call const& call) {
    boost::container::small_vector<std::string_view, 16> words(call.keys.begin(), call.keys.end());
    if (!call.last_key.empty())
        words.push_back(call.last_key);
    words.insert(words.end(), call.more_keys.begin(), call.more_keys.end());
    words.insert(words.end(), call.args.begin(), call.args.end());
    words.insert(words.end(), call.more_args.begin(), call.more_args.end());
    return words;
}

std::size_t key_count_of(script_call const& call) {
    return call.keys.size() + (call.last_key.empty() ? 0 : 1) + call.more_keys.size();
}

} // namespace

struct script_client::owned_call {
    script const& code;
    std::size_t key_count;
    std::vector<std::string> words; // keys, then arguments

    explicit owned_call(script_call const& call) : code(call.code), key_count(key_count_of(call)) {
        auto const views = words_of(call);
        words.assign(views.begin(), views.end());
    }
};

// Pushes and connection events, from the engine's strand to the synchronizer's.
class script_client::listener final : public redis::push_listener,
                                      public redis::detail::close_hook {
public:
    listener(std::weak_ptr<channel_events> e, std::string prefix,
             asio::strand<asio::any_io_executor> s)
        : events_(std::move(e)), channel_prefix_(std::move(prefix)), strand_(std::move(s)) {}

    void on_push(resp3::value const& push) override {
        // ["message", channel, payload], or "smessage" for a sharded channel (a Cluster)
        if (push.elements.size() != 3 || (push.elements[0].as_string() != "message" &&
                                          push.elements[0].as_string() != "smessage"))
            return;
        auto self = events_.lock();
        if (!self)
            return;
        auto channel = push.elements[1].as_string();
        auto payload = push.elements[2].as_string();
        if (!channel || !payload || !channel->starts_with(channel_prefix_))
            return;
        asio::dispatch(strand_, [self, c = std::string(*channel), p = std::string(*payload)] {
            self->on_message(c, p);
        });
    }

    void on_reconnect() override {
        if (auto self = events_.lock())
            asio::dispatch(strand_, [self] { self->on_reconnect(); });
    }

    void on_close() noexcept override {
        if (auto self = events_.lock())
            self->on_close(); // on this thread: see channel_events
    }

    void on_server_change() override {
        if (auto self = events_.lock())
            asio::dispatch(strand_, [self] { self->on_server_change(); });
    }

private:
    std::weak_ptr<channel_events> events_;
    std::string const channel_prefix_;
    asio::strand<asio::any_io_executor> const strand_;
};

script_client::script_client(redis::detail::shared_engine engine,
                             asio::strand<asio::any_io_executor> strand)
    : engine_(std::move(engine))
    , scripts_(scripts_for(redis::detail::engine_shards_channels(engine_) ? script_variant::sharded
                                                                          : script_variant::plain))
    , strand_(std::move(strand))
    , form_(engine_->settings().use_functions ? call_form::function : call_form::sha) {}

script_client::~script_client() = default;

void script_client::push_call(resp3::request& req, script const& code, std::size_t key_count,
                              std::span<std::string_view const> words,
                              call_attempt const& attempt) const {
    auto const form = attempt.form;
    if (attempt.load && form == call_form::function)
        req.push("FUNCTION", "LOAD", scripts_.library);
    else if (attempt.load)
        req.push("SCRIPT", "LOAD", code.source);
    boost::container::small_vector<std::string_view, 18> command;
    auto const count = std::to_string(key_count);
    command.push_back(form == call_form::function ? std::string_view(code.function)
                                                  : std::string_view(code.sha));
    command.push_back(count);
    command.insert(command.end(), words.begin(), words.end());
    req.push_range(form == call_form::function ? "FCALL" : "EVALSHA", command);
}

call_verdict::kind_type script_client::after(redis::response& resp, std::size_t answer_at,
                                             call_attempt const& attempt) {
    auto const verdict = judge_call(resp, answer_at, attempt.load, attempt.form);
    if (verdict.kind == call_verdict::fall_back)
        fall_back(verdict.refusal);
    // Neither way is open to this user: say both, so that the fix (an ACL, or the library loaded
    // by someone allowed to) is clear.
    if (verdict.kind == call_verdict::stands && attempt.form == call_form::sha &&
        fell_back_.load(std::memory_order_relaxed) && resp.size() > answer_at &&
        refuses_sha(resp[answer_at]))
        resp[answer_at].text += both_refused_hint;
    return verdict.kind;
}

void script_client::fall_back(std::string_view refusal) {
    form_.store(call_form::sha, std::memory_order_relaxed);
    if (fell_back_.exchange(true))
        return;
    if (logs(log_level::warning))
        log(log_level::warning,
            fmt::format("the server refused Redis Functions ({}): this connection runs colock's "
                        "scripts by EVALSHA",
                        refusal));
}

namespace {

// The engine's request as an awaitable, through `token`.
template <class Token>
auto exec_on(redis::detail::shared_engine const& engine, resp3::request req, Token token) {
    return asio::async_initiate<Token, void(error_code, redis::response)>(
        [&engine](auto handler, resp3::request r) {
            redis::detail::engine_exec(engine, std::move(r), std::move(handler));
        },
        token, std::move(req));
}

asio::awaitable<std::tuple<error_code, redis::response>>
exec_through(redis::detail::shared_engine const& engine, resp3::request req,
             std::optional<asio::cancellation_slot> const& cancel_by) {
    // Not a ?: of two co_awaits: GCC 12 destroys that temporary too early.
    if (!cancel_by)
        co_return co_await exec_on(engine, std::move(req), nothrow_awaitable);
    co_return co_await exec_on(engine, std::move(req),
                               asio::bind_cancellation_slot(*cancel_by, nothrow_awaitable));
}

} // namespace

asio::awaitable<std::pair<error_code, redis::response>> script_client::exchange(
    script_call const& call, std::optional<std::pair<std::size_t, milliseconds>> wait,
    std::optional<asio::cancellation_slot> const& cancel_by, std::function<bool()> const& wanted) {
    auto const words = words_of(call);
    auto const own_cancellation = co_await asio::this_coro::cancellation_state;
    // A caller that left (its own cancellation, when no slot is given) is not asked again.
    auto const still_wanted = [&] {
        if (!cancel_by && own_cancellation.cancelled() != asio::cancellation_type::none)
            return false;
        return !wanted || wanted();
    };
    // The call's answer, counted from the back: WAIT's comes after it.
    std::size_t const from_back = wait ? 2 : 1;
    call_attempt attempt{form()};
    // At most: FCALL, missing; FUNCTION LOAD refused; EVALSHA, NOSCRIPT; SCRIPT LOAD + EVALSHA.
    for (int round = 0;; ++round) {
        resp3::request req;
        push_call(req, call.code, key_count_of(call), words, attempt);
        if (wait)
            req.push("WAIT", wait->first, wait->second.count());
        auto [ec, resp] = co_await exec_through(engine_, std::move(req), cancel_by);
        if (round < 3 && ec == redis::error::server_error && resp.size() >= from_back &&
            attempt.follow(after(resp, resp.size() - from_back, attempt)) && still_wanted())
            continue;
        co_return std::pair{ec, std::move(resp)};
    }
}

asio::awaitable<script_reply> script_client::run(script_call call,
                                                 std::optional<asio::cancellation_slot> cancel_by,
                                                 std::function<bool()> const& wanted) {
    auto [ec, resp] = co_await exchange(call, std::nullopt, cancel_by, wanted);
    co_return call_reply(ec, std::move(resp));
}

asio::awaitable<std::pair<script_reply, wait_reply>>
script_client::run_then_wait(script_call call, std::size_t replicas, milliseconds timeout,
                             asio::cancellation_slot cancel_by) {
    using result = std::pair<script_reply, wait_reply>;
    auto [ec, resp] =
        co_await exchange(call, std::pair{replicas, timeout}, std::optional(cancel_by), {});
    if (ec && ec != redis::error::server_error)
        co_return result{{ec, {}}, {}};
    if (resp.size() < 2)
        co_return result{{error::unexpected_reply, {}}, {}};
    auto& answer = resp[resp.size() - 2];
    auto const& waited = resp.back();
    wait_reply acked;
    if (waited.is_error())
        acked.refusal = waited.text;
    else
        acked.replicas = waited.as_integer().value_or(0);
    error_code const script_ec =
        answer.is_error() ? error_code(redis::error::server_error) : error_code();
    co_return result{{script_ec, std::move(answer)}, std::move(acked)};
}

asio::awaitable<script_reply> script_client::run_retrying(script_call call, retry_schedule schedule,
                                                          std::function<bool()> wanted) {
    auto deadline = std::make_shared<deadline_state>();
    watch(clock_type::now() + schedule.timeout, deadline);
    // However it ends, the shared timer stops if nothing else needs it: an armed timer would
    // keep the io_context running for the whole deadline after the work is done.
    struct unwatch_on_exit {
        script_client* self;
        std::shared_ptr<deadline_state>& watched;
        ~unwatch_on_exit() {
            watched.reset();
            self->unwatch();
        }
    } unwatch_guard{this, deadline};
    script_reply reply{asio::error::operation_aborted, {}};
    for (int round = 0; round < schedule.tries; ++round) {
        if (wanted && !wanted())
            co_return reply;
        reply = co_await run(call, deadline->stop.slot(), wanted);
        if (!reply.ec)
            co_return reply;
        if (deadline->fired)
            co_return script_reply{error::timeout, {}};
        if (!is_transient(reply.ec, reply.server_text()) || round + 1 == schedule.tries)
            co_return reply;
        lock_timer pause(strand_);
        pause.expires_after(schedule.pause(round));
        co_await pause.async_wait(
            asio::bind_cancellation_slot(deadline->stop.slot(), nothrow_awaitable));
        if (deadline->fired)
            co_return script_reply{error::timeout, {}};
    }
    co_return reply;
}

void script_client::run_detached(script_call call, std::function<void(script_reply)> done) {
    send_detached(std::make_shared<owned_call>(call), call_attempt{form()}, std::move(done));
}

void script_client::send_detached(std::shared_ptr<owned_call> call, call_attempt attempt,
                                  std::function<void(script_reply)> done) {
    boost::container::small_vector<std::string_view, 16> words(call->words.begin(),
                                                               call->words.end());
    resp3::request req;
    push_call(req, call->code, call->key_count, words, attempt);
    // The repeat, when the server lacked the script, is sent from the engine's strand, where the
    // reply arrives: it cannot go out before anything sent before it. At most three repeats, as
    // for run(): each verdict moves the attempt on.
    redis::detail::engine_exec(
        engine_, std::move(req),
        [self = shared_from_this(), call, attempt,
         done = std::move(done)](error_code ec, redis::response resp) mutable {
            if (ec == redis::error::server_error && !resp.empty() &&
                attempt.follow(self->after(resp, resp.size() - 1, attempt))) {
                self->send_detached(std::move(call), attempt, std::move(done));
                return;
            }
            if (done)
                done(call_reply(ec, std::move(resp)));
        });
}

asio::awaitable<script_reply> script_client::exec(resp3::request req, bool cancellable) {
    auto [ec, resp] = co_await exec_through(engine_, std::move(req),
                                            cancellable ? std::nullopt
                                                        : std::optional(asio::cancellation_slot()));
    co_return last_reply(ec, std::move(resp));
}

void script_client::exec_detached(resp3::request req, std::function<void(script_reply)> done) {
    redis::detail::engine_exec(engine_, std::move(req),
                               [done = std::move(done)](error_code ec, redis::response resp) {
                                   if (done)
                                       done(last_reply(ec, std::move(resp)));
                               });
}

asio::awaitable<std::pair<error_code, std::string>>
script_client::subscribe(std::string const& channel) {
    std::vector<std::string> channels(1, channel);
    auto token = uncancellable();
    auto [ec, text] = co_await asio::async_initiate<decltype(token), void(error_code, std::string)>(
        [this, &channels](auto handler) {
            redis::detail::engine_change_subscription(engine_, true, std::move(channels),
                                                      std::move(handler));
        },
        token);
    co_return std::pair<error_code, std::string>{ec, std::move(text)};
}

void script_client::unsubscribe(std::string const& channel) {
    redis::detail::engine_change_subscription(engine_, false, std::vector<std::string>(1, channel),
                                              [](error_code, std::string) {});
}

void script_client::listen(std::weak_ptr<channel_events> events, std::string channel_prefix) {
    listener_ = std::make_shared<listener>(std::move(events), std::move(channel_prefix), strand_);
    redis::detail::engine_add_listener(engine_, listener_);
    engine_->add_close_hook(listener_);
}

void script_client::stop_listening() {
    if (listener_)
        redis::detail::engine_remove_listener(engine_, listener_.get());
}

bool script_client::is_connected() const noexcept {
    return redis::detail::engine_is_connected(engine_);
}
std::string script_client::last_error_text() const {
    return redis::detail::engine_last_error_text(engine_);
}
std::uint64_t script_client::server_changes_for(std::string_view key) const noexcept {
    return redis::detail::engine_server_changes_for(engine_, key);
}
std::uint64_t script_client::reconnects() const noexcept {
    return redis::detail::engine_reconnects(engine_);
}
bool script_client::logs(log_level level) const noexcept {
    return redis::detail::engine_logs(engine_, level);
}
void script_client::log(log_level level, std::string_view line) const noexcept {
    redis::detail::engine_log(engine_, level, line);
}

void script_client::watch(clock_type::time_point at, std::shared_ptr<deadline_state> const& d) {
    // Requests finish in about the order they start: drop the finished ones up front.
    while (!deadlines_.empty() && deadlines_.front().deadline.expired())
        deadlines_.pop_front();
    // Kept in order of time; with one timeout for all (the usual case), at the back.
    auto const later = std::upper_bound(
        deadlines_.begin(), deadlines_.end(), at,
        [](clock_type::time_point t, watched_deadline const& w) { return t < w.at; });
    bool const first = later == deadlines_.begin();
    deadlines_.insert(later, watched_deadline{at, d});
    if (!deadline_timer_armed_ || first)
        arm_deadline_timer();
}

void script_client::unwatch() {
    while (!deadlines_.empty() && deadlines_.front().deadline.expired())
        deadlines_.pop_front();
    if (deadlines_.empty() && deadline_timer_armed_) {
        deadline_timer_armed_ = false;
        deadline_timer_->cancel();
    }
}

void script_client::arm_deadline_timer() {
    while (!deadlines_.empty() && deadlines_.front().deadline.expired())
        deadlines_.pop_front();
    if (deadlines_.empty()) {
        deadline_timer_armed_ = false;
        return;
    }
    deadline_timer_armed_ = true;
    if (!deadline_timer_)
        deadline_timer_.emplace(strand_);
    deadline_timer_->expires_at(deadlines_.front().at);
    deadline_timer_->async_wait([weak = weak_from_this()](error_code ec) {
        auto self = weak.lock();
        if (ec || !self)
            return;
        auto const now = clock_type::now();
        while (!self->deadlines_.empty() && self->deadlines_.front().at <= now) {
            if (auto d = self->deadlines_.front().deadline.lock()) {
                d->fired = true;
                d->stop.emit(asio::cancellation_type::terminal);
            }
            self->deadlines_.pop_front();
        }
        self->arm_deadline_timer();
    });
}

} // namespace colock::detail

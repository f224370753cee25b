// A lock set's call (one attempt, or a wait in every name's queue woken by the hand-offs'
// messages) and its lease.
#include "lock/multi/lock_set.hpp"

#include "detail/awaitable_tokens.hpp"
#include "lock/base/errors.hpp"
#include "lock/base/request_stop.hpp"
#include "lock/base/token.hpp"
#include "lock/core/acquisition.hpp"
#include "lock/core/channel_routes.hpp"

#include <colock/redis/connection.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <random>

namespace colock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using boost::system::system_error;
using std::chrono::milliseconds;

std::vector<std::string> distinct_names(std::vector<std::string> names) {
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
}

std::string shown_names(std::vector<std::string> const& names) {
    return fmt::format("{}", fmt::join(names, ", "));
}

namespace {

// Distinct among one locker's calls: with the locker's random id, every call's entry is its own.
std::atomic<std::uint64_t> entry_serial{0};

// The call's wake channels, one per name (`p{name}:w:<entry>`, where a hand-off tells it): a
// message, or a reconnection, wakes it; the locker's end or the connection's close aborts it.
// Routed in the locker's channels while the call waits, subscribed once it must sleep.
class set_wakes final : public channel_listener, public std::enable_shared_from_this<set_wakes> {
public:
    set_wakes(std::shared_ptr<locker_context> locker, std::vector<std::string> channels)
        : timer(locker->strand()), locker_(std::move(locker)), channels_(std::move(channels)) {}

    void route() {
        if (routed_)
            return;
        for (auto const& c : channels_)
            locker_->routes().add(c, weak_from_this());
        routed_ = true;
    }
    bool wants_subscription() const noexcept { return routed_ && !subscribed_ && !refused_; }
    bool subscribed() const noexcept { return subscribed_; }

    // Subscribes every channel; a refusal (an ACL user without the channels) or a failure to
    // reach the server leaves the call polling by its backoff.
    static asio::awaitable<void> subscribe(std::shared_ptr<set_wakes> self) {
        for (; self->done_ < self->channels_.size() && self->routed_; ++self->done_) {
            auto const [ec, refusal] =
                co_await self->locker_->store().subscribe(self->channels_[self->done_]);
            if (ec) {
                self->refused_ = true;
                co_return;
            }
        }
        self->subscribed_ = self->routed_;
    }

    // The call is over: nothing more to hear.
    void end() {
        if (!routed_)
            return;
        for (std::size_t i = 0; i < done_; ++i)
            locker_->store().unsubscribe(channels_[i]);
        for (auto const& c : channels_)
            locker_->routes().remove(c, this);
        routed_ = false;
        subscribed_ = false;
    }

    void on_message(std::string const& payload) override {
        if (payload == "g")
            wake();
    }
    void on_reconnect() override { wake(); }
    void on_close() override {
        // The locker is gone, or its connection closed: the routes forgot this listener.
        aborted = true;
        if (routed_)
            for (std::size_t i = 0; i < done_; ++i)
                locker_->store().unsubscribe(channels_[i]);
        done_ = 0;
        routed_ = false;
        subscribed_ = false;
        timer.cancel();
    }
    void drop_handlers() noexcept override {}

    lock_timer timer;     // the call's sleep, cut short by a wake or an abort
    bool woken = false;   // a hand-off's message, or a reconnection: ask now
    bool aborted = false; // the locker or the connection closed

private:
    void wake() {
        woken = true;
        timer.cancel();
    }

    std::shared_ptr<locker_context> const locker_;
    std::vector<std::string> const channels_;
    std::size_t done_ = 0; // the channels subscribed, in order
    bool routed_ = false;
    bool subscribed_ = false;
    bool refused_ = false;
};

// Gives the names of `token` back and takes `entry` out of their queues, in the background: a
// passing failure goes on with the retrying release on the strand.
void leave_detached(std::shared_ptr<locker_context> const& locker,
                    std::vector<lock_keys> const& keys, std::string const& entry,
                    std::string const& token) {
    locker->store().release_names_in_background(
        keys, entry, token, true, [locker, keys, entry, token] {
            asio::co_spawn(
                locker->strand(),
                [](std::shared_ptr<locker_context> l, std::vector<lock_keys> k, std::string e,
                   std::string t) -> asio::awaitable<void> {
                    co_await l->store().release_names(k, e, t, true);
                }(locker, keys, entry, token),
                asio::detached);
        });
}

} // namespace

asio::awaitable<lock_set_outcome> acquire_lock_set(std::shared_ptr<locker_context> locker,
                                                   std::vector<std::string> names, lock_options opt,
                                                   bool wait) {
    co_await asio::this_coro::reset_cancellation_state(asio::enable_partial_cancellation());
    co_await asio::this_coro::throw_if_cancelled(false);
    auto cs = co_await asio::this_coro::cancellation_state;
    auto& store = locker->store();
    lock_set_outcome out;
    names = distinct_names(std::move(names));
    auto const shown = shown_names(names);
    std::vector<lock_keys> keys;
    keys.reserve(names.size());
    for (auto const& n : names)
        keys.emplace_back(locker->prefix(), n, locker->id());
    if (auto why = store.names_refusal(keys); !why.empty()) {
        out.ec = make_error_code(error::invalid_argument);
        out.message = acquisition_message(lock_set_kind, shown, why);
        co_return out;
    }
    auto const entry = fmt::format("{}/{}", locker->id(), ++entry_serial);
    auto const token = random_token();
    std::vector<std::string> channels;
    channels.reserve(keys.size());
    for (auto const& k : keys)
        channels.push_back(k.channel_prefix + entry);
    auto const wakes = std::make_shared<set_wakes>(locker, std::move(channels));
    if (wait)
        wakes->route();
    acquisition acq(acquisition_terms::lock(opt, lock_set_kind, wait), clock_type::now());
    std::minstd_rand rng(std::random_device{}());
    auto const stopping = [&] { return wakes->aborted || cancelled(cs); };
    // The last request's: when it was sent, how long its grant is ours, the server it went to.
    auto sent_at = clock_type::now();
    auto lease_end = sent_at;
    std::uint64_t generation = 0;
    names_grant last;
    names_request request{entry, token, opt.ttl, wait};
    auto next = acq.begin_attempt(stopping());
    while (next.step == acquisition_step::ask) {
        wakes->woken = false;
        sent_at = clock_type::now();
        lease_end = sent_at + store.safe_ttl(opt.ttl);
        generation = store.server_changes(keys.front());
        {
            request_stop const stop(cs, locker->strand(), next.until);
            last = co_await store.grant_names(keys, request, stop.slot());
        }
        store_answer answer;
        answer.result = last.result;
        answer.lease_end = lease_end;
        answer.server_changed = store.server_changes(keys.front()) != generation;
        next = acq.on_answer(answer, clock_type::now(), stopping());
        while (next.step == acquisition_step::give_back) {
            // A grant for a cancelled call, or read too late: the names go back, and the entry
            // leaves the queues (a waiting call enters them again at its next attempt).
            leave_detached(locker, keys, entry, token);
            next = acq.on_given_back(true, clock_type::now(), stopping());
        }
        if (next.step == acquisition_step::wait)
            next = acq.keep_waiting(clock_type::now());
        if (next.step != acquisition_step::wait)
            break;
        if (wakes->wants_subscription() && !acq.answer().ec) {
            // Subscribe, then ask again at once: a hand-off published before the subscription
            // was confirmed reached nobody.
            co_await set_wakes::subscribe(wakes);
            next = acq.begin_attempt(stopping());
        } else if (wakes->woken) {
            next = acq.begin_attempt(stopping()); // told meanwhile: ask now
        } else {
            wakes->timer.expires_at(acq.wakes_at(clock_type::now(), wakes->subscribed(), rng));
            co_await wakes->timer.async_wait(asio::as_tuple(asio::use_awaitable));
            next = acq.on_sleep_end(clock_type::now(), wakes->woken, stopping());
        }
    }
    if (next.step == acquisition_step::finish && next.end == acquisition_end::acquired) {
        auto st = std::make_shared<lock_set_state>(locker, std::move(names), keys, entry, token,
                                                   std::move(last.fences), opt, sent_at, lease_end,
                                                   generation);
        st->hold();
        out.state = std::move(st);
    } else if (next.fails()) {
        auto failure =
            acq.failure(next, link_facts{store.is_connected(), store.last_error_text()}, shown);
        out.ec = failure.ec;
        out.message = std::move(failure.message);
    }
    wakes->end();
    if (!out.state && (acq.queued_at_server() || acq.outcome_unknown()))
        leave_detached(locker, keys, entry, token); // passes on what was reserved for it
    co_return out;
}

// ------------------------------------------------------------------ the lease

lock_set_state::lock_set_state(std::shared_ptr<locker_context> locker,
                               std::vector<std::string> names, std::vector<lock_keys> keys,
                               std::string entry, std::string token,
                               std::vector<std::int64_t> fences, lock_options const& opt,
                               clock_type::time_point acquired_at, clock_type::time_point deadline,
                               std::uint64_t server_generation)
    : lease(locker->book(),
            lease_terms{opt.ttl, opt.effective_renew_interval(), opt.auto_renew, opt.max_hold},
            acquired_at, deadline, server_generation)
    , locker_(std::move(locker))
    , names_(std::move(names))
    , keys_(std::move(keys))
    , entry_(std::move(entry))
    , token_(std::move(token))
    , fences_(std::move(fences)) {}

lease_store& lock_set_state::store() const noexcept {
    return locker_->store();
}

void lock_set_state::hold() {
    enter_book();
    start();
    locker_->keep_holder_record(ttl()); // status names the holder; a forced unlock tells it
}

asio::awaitable<lease_reply> lock_set_state::release() {
    return store().release_names(keys_, entry_, token_, false);
}

void lock_set_state::release_detached() {
    store().release_names_in_background(keys_, entry_, token_, false, [self = shared()] {
        asio::co_spawn(
            self->strand(),
            [](std::shared_ptr<lock_set_state> st) -> asio::awaitable<void> {
                co_await st->release();
            }(self),
            asio::detached);
    });
}

asio::awaitable<lease_reply> lock_set_state::extend_at_server(milliseconds ttl, bool /*renewal*/) {
    auto const reply = co_await store().extend_names(keys_, token_, ttl);
    if (!reply.ec && reply.ours)
        locker_->keep_holder_record(ttl);
    co_return reply;
}

std::uint64_t lock_set_state::current_server_generation() const noexcept {
    return store().server_changes(keys_.front());
}

bool lock_set_state::is_lease(std::string_view key, std::string_view token) const noexcept {
    return token == token_ && std::any_of(keys_.begin(), keys_.end(),
                                          [&](lock_keys const& k) { return k.key == key; });
}

void lock_set_state::give_back_now() noexcept {
    try {
        release_detached();
    } catch (...) {
        // Out of memory: the lease runs out by its ttl.
    }
}

void lock_set_state::on_lost(loss_reason why) {
    if (!store().logs(log_level::warning))
        return;
    auto const held =
        std::chrono::duration_cast<milliseconds>(clock_type::now() - acquired_at()).count();
    store().log(log_level::warning, fmt::format("the {} '{}' lost after {} ms: {}", lock_set_kind,
                                                shown_names(names_), held, to_string(why)));
}

void lock_set_state::on_renewal(clock_type::duration, bool, error_code ec) {
    if (ec && ec != error::timeout && store().logs(log_level::debug))
        store().log(log_level::debug,
                    fmt::format("renewal of the {} '{}' failed: {}; retrying", lock_set_kind,
                                shown_names(names_), ec.message()));
}

// ------------------------------------------------------------------ for awaiting callers

asio::awaitable<lock_set_outcome> await_lock_set(std::shared_ptr<locker_context> locker,
                                                 std::vector<std::string> names, lock_options opt,
                                                 bool wait) {
    auto strand = locker->strand();
    auto initiation = [strand, op = acquire_lock_set(std::move(locker), std::move(names),
                                                     std::move(opt), wait)](auto handler) mutable {
        spawn_cancellable(strand, std::move(op), std::move(handler),
                          [](auto h, std::exception_ptr e, lock_set_outcome o) {
                              std::move(h)(e, std::move(o));
                          });
    };
    auto [e, out] = co_await asio::async_initiate<decltype(nothrow_awaitable) const,
                                                  void(std::exception_ptr, lock_set_outcome)>(
        std::move(initiation), nothrow_awaitable);
    if (e)
        std::rethrow_exception(e);
    if (out.ec) {
        // As the lock's: a connection never established throws redis::connect_error.
        if (is_connect_failure(out.ec))
            throw redis::connect_error(out.ec, out.message);
        throw system_error(out.ec, out.message);
    }
    co_return std::move(out);
}

} // namespace colock::detail

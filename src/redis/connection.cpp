// The connection engine: one run loop per connection object owns the socket; a reader, a writer
// and a handshake/health coroutine share it while it is up. Everything runs on one strand.
#include <colock/redis/connection.hpp>
#include <colock/resp3/parser.hpp>

#include "../detail/completion.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <variant>

namespace colock::redis {
namespace detail {

namespace asio = boost::asio;
using boost::system::error_code;
using tcp = asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;

using connect_handler = asio::any_completion_handler<void(error_code)>;
using exec_handler = asio::any_completion_handler<void(error_code, response)>;

namespace {
constexpr auto use_nothrow = asio::as_tuple(asio::use_awaitable);
using use_nothrow_t = std::decay_t<decltype(use_nothrow)>;

bool is_cancelled(asio::cancellation_state const& cs) {
    return cs.cancelled() != asio::cancellation_type::none;
}
} // namespace

// One request on its way: queued, then written (awaiting replies), then done.
struct exec_entry {
    enum class stage { queued, written, done };

    std::string payload;
    std::size_t expected_replies = 0;
    std::size_t received = 0;
    response replies;
    std::variant<std::monostate, exec_handler, connect_handler> handler;
    asio::cancellation_slot slot;
    stage state = stage::queued;
    bool discard = false; // cancelled after it was written: its replies are read and dropped
};

using entry_ptr = std::shared_ptr<exec_entry>;

// Everything that belongs to one established socket. A new session per connection attempt,
// so a run loop that is winding down never touches its successor's state.
struct session {
    explicit session(asio::strand<asio::any_io_executor> const& strand)
        : socket(strand), wakeup(strand) {}

    tcp::socket socket;
    std::optional<asio::ssl::stream<tcp::socket&>> tls;
    asio::steady_timer wakeup;       // cancelled to wake the writer
    std::deque<entry_ptr> in_flight; // written, in order, awaiting replies
    std::vector<char> read_buffer = std::vector<char>(64 * 1024);
    std::size_t read_begin = 0;
    std::size_t read_end = 0;
    resp3::parser parser;
    std::string write_buffer;
    std::vector<entry_ptr> writing;
    bool ready = false; // handshake done: user requests may be written
    std::string run_id; // of the server this session reached; empty when unknown
};

// The run_id field of an INFO reply ("run_id:<40 hex digits>" on a line of its own); empty
// when missing or malformed, which callers treat as "unknown".
std::string parse_run_id(resp3::value const& info) {
    auto const text = info.as_string();
    if (!text)
        return {};
    constexpr std::string_view field = "run_id:";
    std::size_t pos = 0;
    while (pos < text->size()) {
        std::size_t const end = std::min(text->find('\n', pos), text->size());
        std::string_view line = text->substr(pos, end - pos);
        if (!line.empty() && line.back() == '\r')
            line.remove_suffix(1);
        if (line.starts_with(field)) {
            line.remove_prefix(field.size());
            bool const hex = !line.empty() && line.size() <= 64 &&
                             std::all_of(line.begin(), line.end(), [](char c) {
                                 return std::isxdigit(static_cast<unsigned char>(c)) != 0;
                             });
            return hex ? std::string(line) : std::string();
        }
        pos = end + 1;
    }
    return {};
}

class connection_impl : public std::enable_shared_from_this<connection_impl> {
public:
    using strand_type = asio::strand<asio::any_io_executor>;

    connection_impl(asio::any_io_executor ex, config cfg)
        : executor_(std::move(ex))
        , strand_(asio::make_strand(executor_))
        , cfg_(std::move(cfg))
        , backoff_timer_(strand_) {}

    asio::any_io_executor executor_;
    strand_type strand_;
    config cfg_;
    std::optional<asio::ssl::context> tls_context_;

    // --- state below is touched on the strand only ---
    std::deque<entry_ptr> handshake_queue_;
    std::deque<entry_ptr> user_queue_;
    // A pending async_connect. Move-constructed only (Boost 1.81's any_completion_handler
    // move assignment recurses); `done` makes exactly one outcome complete it.
    struct connect_waiter {
        explicit connect_waiter(connect_handler h)
            : handler(std::move(h)), slot(asio::get_associated_cancellation_slot(handler)) {}
        connect_handler handler;
        asio::cancellation_slot slot;
        bool done = false;
    };
    std::vector<std::shared_ptr<connect_waiter>> connect_waiters_;

    void finish_connect_waiter(std::shared_ptr<connect_waiter> const& w, error_code ec) {
        if (w->done)
            return;
        w->done = true;
        deliver(std::move(w->handler), w->slot, ec);
    }
    std::shared_ptr<session> session_;
    // Subscribed channels with the number of subscribers each: only the first SUBSCRIBE and
    // the last UNSUBSCRIBE of a channel reach the server.
    std::map<std::string, std::size_t> channels_;
    std::vector<std::shared_ptr<push_listener>> listeners_;
    asio::steady_timer backoff_timer_;
    // Shared with the run loop's completion handler: the signal must outlive the coroutine,
    // whose pending operations hold slots connected to it.
    std::shared_ptr<asio::cancellation_signal> run_cancel_;
    bool running_ = false;
    bool ever_connected_ = false;
    std::uint64_t generation_ = 0;

    struct ready_exec {
        exec_handler handler;
        asio::cancellation_slot slot;
        error_code ec;
        response replies;
    };
    std::vector<ready_exec> ready_;
    std::vector<ready_exec> flushing_;
    bool flush_posted_ = false;

    // --- readable from any thread ---
    std::atomic<bool> connected_{false};
    std::atomic<std::uint64_t> reconnects_{0};
    // Counts reconnections that reached a different server instance (another run_id) than the
    // connection before: everything the old instance held may be gone. Bumped on the strand
    // before the listeners hear of it, so a reader that saw the old value can tell that a reply
    // it holds came from before the change.
    std::atomic<std::uint64_t> server_changes_{0};
    mutable std::mutex error_mutex_; // guards last_error_text_ and server_run_id_
    std::string last_error_text_;
    std::string server_run_id_; // from INFO server; empty when the server would not say

    std::string run_id() const {
        std::lock_guard lock(error_mutex_);
        return server_run_id_;
    }

    void set_error_text(std::string text) {
        std::lock_guard lock(error_mutex_);
        last_error_text_ = std::move(text);
    }

    // ---------------------------------------------------------------- completion

    void complete(entry_ptr const& e, error_code ec) {
        if (e->state == exec_entry::stage::done)
            return;
        e->state = exec_entry::stage::done;
        auto slot = e->slot;
        if (auto* h = std::get_if<exec_handler>(&e->handler)) {
            if (!ec && std::any_of(e->replies.begin(), e->replies.end(),
                                   [](resp3::value const& v) { return v.is_error(); }))
                ec = error::server_error;
            // Batched: one strand turn delivers every reply parsed from one read.
            ready_.push_back(ready_exec{std::move(*h), slot, ec, std::move(e->replies)});
            if (!flush_posted_) {
                flush_posted_ = true;
                asio::post(strand_, [self = shared_from_this()] { self->flush_ready(); });
            }
        } else if (auto* v = std::get_if<connect_handler>(&e->handler)) {
            deliver(std::move(*v), slot, ec);
        }
        e->handler = std::monostate{};
    }

    template <class Handler, class... Args>
    void deliver(Handler handler, asio::cancellation_slot slot, Args... args) {
        colock::detail::complete_later(strand_, std::move(handler), slot, std::move(args)...);
    }

    // Delivers the batch on the handlers' own executors; inline when that executor runs on
    // this thread (a coroutine on the same io_context), which saves a post per reply.
    void flush_ready() {
        flush_posted_ = false;
        std::swap(ready_, flushing_);
        for (auto& r : flushing_)
            colock::detail::complete_now(strand_, std::move(r.handler), r.slot, r.ec,
                                         std::move(r.replies));
        flushing_.clear();
    }

    // ---------------------------------------------------------------- requests

    void enqueue(entry_ptr e, bool handshake) {
        if (e->state == exec_entry::stage::done)
            return; // cancelled before it reached the strand
        (handshake ? handshake_queue_ : user_queue_).push_back(std::move(e));
        if (!running_)
            start_run_loop();
        else
            wake_writer();
    }

    void wake_writer() {
        if (session_)
            session_->wakeup.cancel();
    }

    void cancel_entry(entry_ptr const& e, asio::cancellation_type type) {
        if (e->state == exec_entry::stage::done)
            return;
        if (e->state == exec_entry::stage::queued) {
            // Left in its queue; the writer skips entries that are done.
            complete(e, asio::error::operation_aborted);
            return;
        }
        // Written: the server may have run it. Only terminal and partial cancellation allow
        // completing without the outcome; the replies are still read and dropped.
        if ((type & (asio::cancellation_type::terminal | asio::cancellation_type::partial)) !=
            asio::cancellation_type::none) {
            e->discard = true;
            complete(e, asio::error::operation_aborted);
        }
    }

    struct cancel_handler {
        // A constructor, not an aggregate: clang 14 has no parenthesised aggregate init.
        cancel_handler(std::weak_ptr<connection_impl> i, std::weak_ptr<exec_entry> e)
            : impl(std::move(i)), entry(std::move(e)) {}

        std::weak_ptr<connection_impl> impl;
        std::weak_ptr<exec_entry> entry;

        void operator()(asio::cancellation_type type) const {
            auto self = impl.lock();
            auto e = entry.lock();
            if (!self || !e)
                return;
            // dispatch: when the strand is idle the cancellation takes effect at once, before a
            // writer already scheduled can put the request on the wire.
            asio::dispatch(self->strand_, [self, e, type] { self->cancel_entry(e, type); });
        }
    };

    entry_ptr make_entry(std::string payload, std::size_t expected) {
        auto e = std::make_shared<exec_entry>();
        e->payload = std::move(payload);
        e->expected_replies = expected;
        e->replies.reserve(expected);
        return e;
    }

    template <class Handler>
    void bind_cancellation(entry_ptr const& e, Handler const& handler) {
        auto slot = asio::get_associated_cancellation_slot(handler);
        if (slot.is_connected()) {
            e->slot = slot;
            slot.template emplace<cancel_handler>(weak_from_this(), e);
        }
    }

    void start_exec(std::string payload, std::size_t expected, exec_handler handler,
                    bool handshake) {
        auto e = make_entry(std::move(payload), expected);
        bind_cancellation(e, handler);
        e->handler = std::move(handler);
        asio::dispatch(strand_, [self = shared_from_this(), e, handshake]() mutable {
            self->enqueue(std::move(e), handshake);
        });
    }

    // ---------------------------------------------------------------- connect / close

    void start_connect(connect_handler handler) {
        auto w = std::make_shared<connect_waiter>(std::move(handler));
        if (w->slot.is_connected()) {
            // Installed on the caller's thread, where the caller emits. Only this wait is
            // abandoned; the connection is closed too when nobody else is using it.
            w->slot.assign([weak = weak_from_this(),
                            weak_w = std::weak_ptr<connect_waiter>(w)](asio::cancellation_type t) {
                if ((t & asio::cancellation_type::terminal) == asio::cancellation_type::none)
                    return;
                auto s = weak.lock();
                auto cw = weak_w.lock();
                if (s && cw)
                    asio::dispatch(s->strand_, [s, cw] { s->cancel_connect_waiter(cw); });
            });
        }
        asio::dispatch(strand_, [self = shared_from_this(), w]() mutable {
            if (w->done)
                return;
            if (self->session_ && self->session_->ready) {
                self->finish_connect_waiter(w, {});
                return;
            }
            self->connect_waiters_.push_back(w);
            if (!self->running_)
                self->start_run_loop();
        });
    }

    void cancel_connect_waiter(std::shared_ptr<connect_waiter> const& w) {
        std::erase(connect_waiters_, w);
        finish_connect_waiter(w, asio::error::operation_aborted);
        bool const in_use = !connect_waiters_.empty() || !user_queue_.empty() ||
                            (session_ && !session_->in_flight.empty());
        if (!ever_connected_ && running_ && !in_use)
            close(error::closed);
    }

    void finish_connect_waiters(error_code ec) {
        auto waiters = std::move(connect_waiters_);
        connect_waiters_.clear();
        for (auto& w : waiters)
            finish_connect_waiter(w, ec);
    }

    // Completes every entry of a queue (deque or vector) with `ec`, leaving it empty.
    template <class Queue>
    void fail_queued(Queue& queue, error_code ec) {
        auto entries = std::move(queue);
        queue.clear();
        for (auto& e : entries)
            complete(e, ec);
    }

    void close(error_code ec) {
        ++generation_;
        ever_connected_ = false;
        if (run_cancel_)
            run_cancel_->emit(asio::cancellation_type::terminal);
        run_cancel_.reset();
        running_ = false;
        connected_ = false;
        backoff_timer_.cancel();
        if (session_) {
            error_code ignored;
            session_->socket.close(ignored);
            fail_queued(session_->in_flight, ec);
            session_.reset();
        }
        fail_queued(handshake_queue_, ec);
        fail_queued(user_queue_, ec);
        finish_connect_waiters(ec);
    }

    void start_run_loop() {
        running_ = true;
        run_cancel_ = std::make_shared<asio::cancellation_signal>();
        asio::co_spawn(strand_, run_loop(shared_from_this(), generation_),
                       asio::bind_cancellation_slot(
                           run_cancel_->slot(), [keep = run_cancel_](std::exception_ptr e) {
                               if (e)
                                   std::rethrow_exception(e); // a bug: let it be seen
                           }));
    }

    // ---------------------------------------------------------------- the run loop

    static asio::awaitable<void> run_loop(std::shared_ptr<connection_impl> self,
                                          std::uint64_t generation) {
        auto backoff = self->cfg_.reconnect_initial_delay;
        for (;;) {
            auto s = std::make_shared<session>(self->strand_);
            self->session_ = s;
            error_code ec = co_await self->run_session(s);
            bool const current = generation == self->generation_;
            if (current) {
                bool const was_ready = s->ready;
                self->connected_ = false;
                self->session_.reset();
                // Written requests may have run: they fail, and are never re-sent.
                self->fail_queued(s->in_flight, was_ready || self->ever_connected_
                                                    ? error_code(error::connection_lost)
                                                    : ec);
                self->fail_queued(self->handshake_queue_, ec);
                if (!self->ever_connected_) {
                    // Nobody has seen this connection work: report instead of retrying.
                    self->running_ = false;
                    self->run_cancel_.reset();
                    self->fail_queued(self->user_queue_, ec);
                    self->finish_connect_waiters(ec);
                    co_return;
                }
                if (was_ready)
                    backoff = self->cfg_.reconnect_initial_delay;
            }
            {
                error_code ignored;
                s->socket.close(ignored);
            }
            auto cs = co_await asio::this_coro::cancellation_state;
            if (!current || is_cancelled(cs))
                co_return;
            self->backoff_timer_.expires_after(backoff);
            co_await self->backoff_timer_.async_wait(use_nothrow);
            if (generation != self->generation_ || is_cancelled(cs))
                co_return;
            backoff = std::min(backoff * 2, self->cfg_.reconnect_max_delay);
        }
    }

    asio::awaitable<error_code> run_session(std::shared_ptr<session> s) {
        asio::steady_timer deadline(strand_);
        deadline.expires_after(cfg_.connect_timeout);
        auto opened = co_await (open_transport(s) || deadline.async_wait(use_nothrow));
        if (opened.index() == 1)
            co_return error::connect_timeout;
        if (error_code ec = std::get<0>(opened)) {
            set_error_text(
                fmt::format("cannot connect to {}: {}", cfg_.to_redacted_url(), ec.message()));
            co_return ec;
        }
        auto result = co_await (read_loop(s) || write_loop(s) || handshake_and_health(s));
        co_return std::visit([](error_code ec) { return ec; }, result);
    }

    asio::awaitable<error_code> open_transport(std::shared_ptr<session> s) {
        tcp::resolver resolver(strand_);
        auto [rec, endpoints] =
            co_await resolver.async_resolve(cfg_.host, std::to_string(cfg_.port), use_nothrow);
        if (rec)
            co_return rec;
        auto [cec, ep] = co_await asio::async_connect(s->socket, endpoints, use_nothrow);
        if (cec)
            co_return cec;
        s->socket.set_option(tcp::no_delay(true), cec);
        if (cfg_.use_tls) {
            s->tls.emplace(s->socket, *tls_context_);
            // SNI; the macro SSL_set_tlsext_host_name hides an old-style cast.
            if (!::SSL_ctrl(s->tls->native_handle(), SSL_CTRL_SET_TLSEXT_HOSTNAME,
                            TLSEXT_NAMETYPE_host_name, const_cast<char*>(cfg_.host.c_str())))
                co_return error_code(asio::error::invalid_argument);
            if (cfg_.tls_verify_peer)
                s->tls->set_verify_callback(asio::ssl::host_name_verification(cfg_.host));
            auto [hec] =
                co_await s->tls->async_handshake(asio::ssl::stream_base::client, use_nothrow);
            if (hec)
                co_return hec;
        }
        co_return error_code{};
    }

    asio::awaitable<error_code> read_loop(std::shared_ptr<session> s) {
        for (;;) {
            auto& buf = s->read_buffer;
            if (s->read_begin == s->read_end) {
                s->read_begin = s->read_end = 0;
            } else if (buf.size() - s->read_end < 4096) {
                if (s->read_begin > 0) {
                    std::copy(buf.begin() + static_cast<std::ptrdiff_t>(s->read_begin),
                              buf.begin() + static_cast<std::ptrdiff_t>(s->read_end), buf.begin());
                    s->read_end -= s->read_begin;
                    s->read_begin = 0;
                }
                if (buf.size() - s->read_end < 4096)
                    buf.resize(buf.size() * 2); // a token larger than the buffer
            }
            auto into = asio::buffer(buf.data() + s->read_end, buf.size() - s->read_end);
            // if/else, not ?: of two co_awaits (GCC 12 mishandles that temporary).
            std::tuple<error_code, std::size_t> got;
            if (s->tls)
                got = co_await s->tls->async_read_some(into, use_nothrow);
            else
                got = co_await s->socket.async_read_some(into, use_nothrow);
            auto [ec, n] = got;
            if (ec)
                co_return ec;
            s->read_end += n;
            while (s->read_begin < s->read_end) {
                error_code pec;
                std::string_view const input(buf.data() + s->read_begin,
                                             s->read_end - s->read_begin);
                std::size_t const used = s->parser.consume(input, pec);
                if (pec) {
                    set_error_text(fmt::format("protocol error from {}: {}", cfg_.to_redacted_url(),
                                               pec.message()));
                    co_return pec;
                }
                s->read_begin += used;
                if (!s->parser.done())
                    break;
                if (error_code vec = on_value(*s, s->parser.release()))
                    co_return vec;
            }
        }
    }

    error_code on_value(session& s, resp3::value v) {
        if (v.type == resp3::type::push) {
            auto listeners = listeners_; // a listener may add or remove listeners
            for (auto const& l : listeners)
                l->on_push(v);
            return {};
        }
        if (s.in_flight.empty()) {
            set_error_text(fmt::format("unexpected reply from {}: {}", cfg_.to_redacted_url(),
                                       resp3::to_debug_string(v)));
            return error::unexpected_reply;
        }
        entry_ptr const& e = s.in_flight.front();
        if (!e->discard && e->state != exec_entry::stage::done)
            e->replies.push_back(std::move(v));
        if (++e->received == e->expected_replies) {
            entry_ptr done = std::move(s.in_flight.front());
            s.in_flight.pop_front();
            complete(done, {});
        }
        return {};
    }

    asio::awaitable<error_code> write_loop(std::shared_ptr<session> s) {
        auto cs = co_await asio::this_coro::cancellation_state;
        for (;;) {
            s->write_buffer.clear();
            s->writing.clear();
            take_for_write(*s, handshake_queue_);
            if (s->ready)
                take_for_write(*s, user_queue_);
            if (s->write_buffer.empty()) {
                s->wakeup.expires_at(asio::steady_timer::time_point::max());
                co_await s->wakeup.async_wait(use_nothrow);
                if (is_cancelled(cs))
                    co_return asio::error::operation_aborted;
                continue;
            }
            std::tuple<error_code, std::size_t> wrote;
            if (s->tls)
                wrote =
                    co_await asio::async_write(*s->tls, asio::buffer(s->write_buffer), use_nothrow);
            else
                wrote = co_await asio::async_write(s->socket, asio::buffer(s->write_buffer),
                                                   use_nothrow);
            auto [ec, n] = wrote;
            if (ec) {
                fail_queued(s->writing, error::connection_lost);
                co_return ec;
            }
            for (auto& e : s->writing)
                complete(e, {}); // requests without replies (subscriptions) are done once sent
        }
    }

    void take_for_write(session& s, std::deque<entry_ptr>& queue) {
        while (!queue.empty()) {
            entry_ptr e = std::move(queue.front());
            queue.pop_front();
            if (e->state == exec_entry::stage::done)
                continue; // cancelled while queued
            e->state = exec_entry::stage::written;
            s.write_buffer += e->payload;
            e->payload = std::string();
            // Registered before the write is issued: replies may be read before it completes.
            if (e->expected_replies > 0)
                s.in_flight.push_back(std::move(e));
            else
                s.writing.push_back(std::move(e));
        }
    }

    asio::awaitable<std::tuple<error_code, response>> internal_exec(resp3::request const& req,
                                                                    bool handshake) {
        co_return co_await asio::async_initiate<use_nothrow_t const, void(error_code, response)>(
            [this, &req, handshake](auto handler) {
                start_exec(std::string(req.payload()), req.expected_replies(), std::move(handler),
                           handshake);
            },
            use_nothrow);
    }

    asio::awaitable<error_code> handshake_and_health(std::shared_ptr<session> s) {
        asio::steady_timer timer(strand_);
        timer.expires_after(cfg_.connect_timeout);
        auto shaken = co_await (handshake(s) || timer.async_wait(use_nothrow));
        if (shaken.index() == 1) {
            set_error_text(fmt::format("handshake with {} timed out", cfg_.to_redacted_url()));
            co_return error::connect_timeout;
        }
        if (error_code ec = std::get<0>(shaken))
            co_return ec;

        s->ready = true;
        bool const reconnected = ever_connected_;
        ever_connected_ = true;
        bool const other_server = reconnected && other_instance(s->run_id);
        {
            std::lock_guard lock(error_mutex_);
            server_run_id_ = s->run_id;
        }
        if (other_server)
            ++server_changes_;
        connected_ = true;
        finish_connect_waiters({});
        wake_writer();
        if (reconnected) {
            ++reconnects_;
            auto listeners = listeners_;
            if (other_server)
                for (auto const& l : listeners)
                    l->on_server_change();
            for (auto const& l : listeners)
                l->on_reconnect();
        }

        if (cfg_.health_check_interval.count() <= 0) {
            timer.expires_at(asio::steady_timer::time_point::max());
            co_await timer.async_wait(use_nothrow);
            co_return asio::error::operation_aborted;
        }
        resp3::request ping;
        ping.push("PING");
        for (;;) {
            timer.expires_after(cfg_.health_check_interval);
            auto [tec] = co_await timer.async_wait(use_nothrow);
            if (tec)
                co_return tec;
            timer.expires_after(cfg_.health_check_interval);
            auto pong = co_await (internal_exec(ping, false) || timer.async_wait(use_nothrow));
            if (pong.index() == 1) {
                set_error_text(fmt::format("{} did not answer PING within {} ms",
                                           cfg_.to_redacted_url(),
                                           cfg_.health_check_interval.count()));
                co_return error::health_check_timeout;
            }
            if (auto [ec, r] = std::get<0>(pong); ec && ec != error::server_error)
                co_return ec;
        }
    }

    // Whether a reconnection reached another server instance than the previous connection.
    // An unknown run_id (INFO refused) on either side counts as the same instance: the lock
    // layer then finds out by asking for its keys, as it does after every reconnection.
    bool other_instance(std::string const& new_run_id) const {
        std::lock_guard lock(error_mutex_);
        return !server_run_id_.empty() && !new_run_id.empty() && server_run_id_ != new_run_id;
    }

    asio::awaitable<error_code> handshake(std::shared_ptr<session> s) {
        resp3::request req;
        std::vector<std::string> hello(1, "3");
        if (!cfg_.password.empty()) {
            hello.push_back("AUTH");
            hello.push_back(cfg_.username.empty() ? std::string("default") : cfg_.username);
            hello.push_back(cfg_.password);
        }
        if (!cfg_.client_name.empty()) {
            hello.push_back("SETNAME");
            hello.push_back(cfg_.client_name);
        }
        req.push_range("HELLO", hello);
        if (cfg_.database != 0)
            req.push("SELECT", cfg_.database);
        // The server's run_id tells a restarted server (which lost its keys) from the same one
        // reached again. Last among the replies, so a refusal (ACL, renamed command) is told
        // apart from a failed handshake.
        req.push("INFO", "server");
        if (!channels_.empty()) {
            std::vector<std::string_view> names;
            for (auto const& [channel, count] : channels_)
                names.push_back(channel);
            req.push_range("SUBSCRIBE", names);
        }
        auto [ec, replies] = co_await internal_exec(req, true);
        std::size_t const info_index = cfg_.database != 0 ? 2 : 1;
        s->run_id.clear();
        if (replies.size() == info_index + 1) {
            if (!replies[info_index].is_error())
                s->run_id = parse_run_id(replies[info_index]);
            else if (ec == error::server_error &&
                     std::none_of(replies.begin(), replies.begin() + info_index,
                                  [](resp3::value const& v) { return v.is_error(); }))
                ec = {}; // only INFO was refused: the connection works, its instance is unknown
        }
        if (ec == error::server_error) {
            set_error_text(fmt::format("{} refused the handshake: {}", cfg_.to_redacted_url(),
                                       first_error_text(replies)));
            co_return error::handshake_failed;
        }
        if (ec)
            co_return ec;
        if (replies.empty() || replies[0].type != resp3::type::map) {
            set_error_text(fmt::format("{} did not answer HELLO 3 with a map (RESP3 needs Redis 6 "
                                       "or later)",
                                       cfg_.to_redacted_url()));
            co_return error::handshake_failed;
        }
        co_return error_code{};
    }
};

shared_engine const& engine_of(connection const& conn) noexcept {
    return conn.impl_;
}

void engine_exec(shared_engine const& engine, resp3::request req, exec_handler handler) {
    if (req.empty()) {
        engine->deliver(std::move(handler), {}, error_code{}, response{});
        return;
    }
    std::size_t const expected = req.expected_replies();
    engine->start_exec(req.take_payload(), expected, std::move(handler), false);
}

void engine_subscribe(shared_engine const& engine, bool subscribe,
                      std::vector<std::string> channels, connect_handler handler) {
    if (channels.empty()) {
        engine->deliver(std::move(handler), {}, error_code{});
        return;
    }
    // Not cancellable: the count and the server's state must agree.
    auto e = engine->make_entry({}, 0);
    e->handler = std::move(handler);
    asio::dispatch(
        engine->strand_, [self = engine, e, subscribe, channels = std::move(channels)]() mutable {
            std::vector<std::string> changed; // channels whose first or last subscriber this is
            for (auto& c : channels) {
                if (subscribe) {
                    if (self->channels_[c]++ == 0)
                        changed.push_back(std::move(c));
                } else if (auto it = self->channels_.find(c); it != self->channels_.end()) {
                    if (--it->second == 0) {
                        self->channels_.erase(it);
                        changed.push_back(std::move(c));
                    }
                }
            }
            // Between connections: the next handshake subscribes to every counted channel, before
            // any request queued now, so there is nothing to send. (A connection being set up has
            // already built its handshake: the command queues behind it.)
            if (changed.empty() || (!self->session_ && self->running_)) {
                self->complete(e, {});
                return;
            }
            resp3::request req;
            req.push_range(subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE", changed);
            e->payload = req.take_payload();
            self->enqueue(std::move(e), false);
        });
}

void engine_add_listener(shared_engine const& engine, std::shared_ptr<push_listener> l) {
    asio::dispatch(engine->strand_, [self = engine, l = std::move(l)]() mutable {
        self->listeners_.push_back(std::move(l));
    });
}

void engine_remove_listener(shared_engine const& engine, push_listener const* listener) {
    asio::dispatch(engine->strand_, [self = engine, listener] {
        std::erase_if(self->listeners_, [listener](auto const& l) { return l.get() == listener; });
    });
}

asio::any_io_executor engine_executor(shared_engine const& engine) {
    return engine->executor_;
}

} // namespace detail

// -------------------------------------------------------------------- connection

connection::connection(executor_type ex, config cfg)
    : impl_(std::make_shared<detail::connection_impl>(std::move(ex), std::move(cfg))) {
    auto& c = impl_->cfg_;
    if (c.use_tls) {
        auto& ctx = impl_->tls_context_.emplace(boost::asio::ssl::context::tls_client);
        if (c.tls_verify_peer) {
            ctx.set_verify_mode(boost::asio::ssl::verify_peer);
            if (c.tls_ca_file.empty())
                ctx.set_default_verify_paths();
            else
                ctx.load_verify_file(c.tls_ca_file);
        } else {
            ctx.set_verify_mode(boost::asio::ssl::verify_none);
        }
    }
}

connection::~connection() {
    boost::asio::dispatch(impl_->strand_, [self = impl_] {
        self->close(error::closed);
        self->listeners_.clear();
    });
}

connection::executor_type connection::get_executor() const noexcept {
    return impl_->executor_;
}

config const& connection::get_config() const noexcept {
    return impl_->cfg_;
}

void connection::start_connect(connect_handler handler) {
    impl_->start_connect(std::move(handler));
}

void connection::start_exec(resp3::request req, exec_handler handler) {
    detail::engine_exec(impl_, std::move(req), std::move(handler));
}

void connection::start_subscription(bool subscribe, std::vector<std::string> channels,
                                    connect_handler handler) {
    detail::engine_subscribe(impl_, subscribe, std::move(channels), std::move(handler));
}

boost::asio::awaitable<response> connection::co_exec(resp3::request req) {
    auto [ec, resp] =
        co_await async_exec(std::move(req), boost::asio::as_tuple(boost::asio::use_awaitable));
    if (ec == error::server_error)
        throw server_error(first_error_text(resp));
    if (ec)
        throw boost::system::system_error(ec);
    co_return std::move(resp);
}

void connection::add_push_listener(std::shared_ptr<push_listener> listener) {
    detail::engine_add_listener(impl_, std::move(listener));
}

void connection::remove_push_listener(push_listener const* listener) {
    detail::engine_remove_listener(impl_, listener);
}

void connection::close() {
    boost::asio::dispatch(impl_->strand_, [self = impl_] { self->close(error::closed); });
}

bool connection::is_connected() const noexcept {
    return impl_->connected_;
}

std::uint64_t connection::reconnect_count() const noexcept {
    return impl_->reconnects_;
}

std::string connection::server_run_id() const {
    return impl_->run_id();
}

std::uint64_t connection::server_change_count() const noexcept {
    return impl_->server_changes_;
}

namespace detail {
std::uint64_t engine_server_changes(shared_engine const& engine) noexcept {
    return engine->server_changes_;
}
} // namespace detail

std::string connection::last_error_text() const {
    std::lock_guard lock(impl_->error_mutex_);
    return impl_->last_error_text_;
}

} // namespace colock::redis

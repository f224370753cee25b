// The connection engine: one run loop per connection object owns the socket; a reader, a writer and
// a handshake/health coroutine share it while it is up. Everything runs on one strand. Private to
// the library: session.hpp holds one socket's state and its requests, connection_impl.cpp keeps
// the queues, completions and subscriptions, connection_close.cpp connects and closes,
// connection_run.cpp runs the sessions and does their reads and writes, connection_transport.cpp
// resolves, connects and sets up TLS, and connection_handshake.cpp does the handshake and health
// checks.
#pragma once

#include <colock/redis/connection.hpp>
#include <colock/resp3/parser.hpp>

#include "../detail/awaitable_tokens.hpp"
#include "../detail/completion.hpp"
#include "../detail/context_shutdown.hpp"
#include "engine.hpp"
#include "reply_matcher.hpp"
#include "sentinel.hpp"
#include "session.hpp"
#include "subscription_book.hpp"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <variant>
#include <vector>

namespace colock::redis::detail {

using colock::detail::nothrow_awaitable;
using colock::detail::nothrow_awaitable_t;

// A pending async_connect, of either engine. Move-constructed only (Boost 1.81's
// any_completion_handler move assignment recurses); `done` makes exactly one outcome complete it.
struct connect_waiter {
    connect_waiter(connect_handler h, asio::any_io_executor const& io_executor)
        : handler(std::move(h))
        , slot(asio::get_associated_cancellation_slot(handler))
        , work(colock::detail::work_if_foreign(handler, io_executor)) {}
    connect_handler handler;
    asio::cancellation_slot slot;
    // Held while it waits; its completion holds its own (post_invocation).
    asio::any_completion_executor work;
    bool done = false;
};

// Installs on `w`'s cancellation slot, if it has one, what a terminal cancellation does: calls
// `on_cancel(engine, w)` while both still live. Installed on the caller's thread, where the caller
// emits; `on_cancel` moves to the engine's strand itself.
template <class Engine, class OnCancel>
void on_terminal_cancellation(std::shared_ptr<connect_waiter> const& w,
                              std::weak_ptr<Engine> engine, OnCancel on_cancel) {
    if (!w->slot.is_connected())
        return;
    w->slot.assign([engine = std::move(engine), weak_w = std::weak_ptr<connect_waiter>(w),
                    on_cancel = std::move(on_cancel)](asio::cancellation_type t) {
        if ((t & asio::cancellation_type::terminal) == asio::cancellation_type::none)
            return;
        auto e = engine.lock();
        auto cw = weak_w.lock();
        if (e && cw)
            on_cancel(std::move(e), std::move(cw));
    });
}

// Calls `call` on each of `listeners`, a copy since a listener may add or remove listeners. One
// that throws is reported to `report_error` (for last_error_text()); the others are called all the
// same.
template <class Call, class ReportError>
void notify_each(std::vector<std::shared_ptr<push_listener>> const listeners, Call const& call,
                 ReportError const& report_error) {
    for (auto const& l : listeners) {
        try {
            call(*l);
        } catch (std::exception const& e) {
            report_error(std::string("a push listener threw: ") + e.what());
        } catch (...) {
            report_error("a push listener threw something that is not a std::exception");
        }
    }
}

// Whether a request (or async_connect) failed because the connection it needed could not be
// established, rather than for a reason of its own.
inline bool is_connect_failure(error_code ec) {
    return ec && ec != error::server_error && ec != error::unsupported_command &&
           ec != error::cross_slot && ec != error::connection_lost && ec != error::closed &&
           ec != asio::error::operation_aborted;
}

inline bool is_cancelled(asio::cancellation_state const& cs) {
    return cs.cancelled() != asio::cancellation_type::none;
}

// At most `limit` bytes of `bytes`, quoted, with what is not printable ASCII escaped (\r, \n,
// \t, \xNN) and "..." after the quote when there were more: for messages about what a server
// sent.
std::string printable_bytes(std::string_view bytes, std::size_t limit = 32);

// The run_id field of an INFO reply; empty when missing or malformed.
std::string parse_run_id(resp3::value const& info);

class connection_impl final : public engine_base,
                              public std::enable_shared_from_this<connection_impl>,
                              public colock::detail::holds_handlers {
public:
    // --- the engine's interface (connection.cpp) ---
    void start_subscription(channel_kind kind, bool subscribe, std::vector<std::string> channels,
                            any_subscription_handler handler) override;
    void start_close() override;
    void handle_destroyed() override;

    // Requests waiting for replies, completions not yet delivered, connect and subscription
    // waiters: each may own the coroutine that owns this engine.
    void drop_handlers() noexcept override;

    using strand_type = asio::strand<asio::any_io_executor>;
    std::shared_ptr<engine_base> shared_base() override { return shared_from_this(); }

    // `tls`: the TLS context to use (shared by a Cluster's nodes); made from `cfg` when null and
    // config::use_tls is set.
    connection_impl(asio::any_io_executor ex, config cfg,
                    std::shared_ptr<asio::ssl::context> tls = nullptr);

    std::shared_ptr<asio::ssl::context> tls_context_;

    // --- state below is touched on the strand only ---
    std::deque<entry_ptr> user_queue_; // not yet written; survives reconnections
    std::vector<std::shared_ptr<connect_waiter>> connect_waiters_;
    std::shared_ptr<session> session_;
    // The counted subscriptions, by channel_kind: classic, sharded.
    std::array<subscription_book, 2> books_;
    subscription_book& book(channel_kind k) { return books_[static_cast<std::size_t>(k)]; }
    struct subscription_op {
        any_subscription_handler handler;
        asio::any_completion_executor work; // held while it waits (work_if_foreign)
    };
    std::map<std::pair<channel_kind, subscription_book::op_id>, subscription_op> subscription_ops_;
    asio::steady_timer backoff_timer_;
    asio::steady_timer close_timer_; // bounds a flush by config::close_timeout
    bool closing_ = false;           // close() is flushing session_
    bool final_ = false;             // the connection object is gone: nothing starts again
    // Shared with the run loop's completion handler: the signal must outlive the coroutine,
    // whose pending operations hold slots connected to it.
    std::shared_ptr<asio::cancellation_signal> run_cancel_;
    bool running_ = false;
    bool ever_connected_ = false;
    // A connection that has never worked and whose attempt just failed: until `until`, a request
    // or subscription that would start another attempt fails with `ec` instead, as a lost
    // connection waits reconnect_initial_delay before its next attempt. A caller that asks twice
    // in a row (the lock layer subscribes, then tries) costs the server one connection, and the
    // logs one line. async_connect always tries: it is asked for once the cause is fixed.
    struct recent_failure {
        error_code ec;
        std::chrono::steady_clock::time_point until;
    };
    recent_failure first_failure_;
    // first_failure_.ec while it stands and nothing runs, else empty.
    error_code standing_failure() const;
    std::uint64_t generation_ = 0;

    struct ready_exec {
        exec_handler handler;
        asio::cancellation_slot slot;
        error_code ec;
        response replies;
        asio::any_completion_executor work; // exec_entry::work
    };
    std::vector<ready_exec> ready_;
    bool flush_posted_ = false;
    // Completed requests on their way to their handlers, outside the strand (flush_ready), in
    // order. Shared with the runners, which may run on other threads.
    struct delivery_queue {
        std::mutex mutex;
        std::deque<ready_exec> items;
        bool pending = false; // a runner is posted and has not taken its chunk yet
    };
    static constexpr std::size_t delivery_chunk = 8; // at least, per turn of the runner
    struct delivery_runner {
        std::shared_ptr<delivery_queue> queue;
        asio::any_io_executor io_executor;
        void operator()() const;
    };
    std::shared_ptr<delivery_queue> deliveries_ = std::make_shared<delivery_queue>();
    // The reader is handing out the replies of one read: it delivers them when it is done
    // (one post for all), rather than through another turn of the strand.
    bool delivering_batch_ = false;

    // --- readable from any thread ---
    // (connected_, reconnects_, server_changes_ and the failure's texts: engine_base's)
    std::atomic<bool> destroyed_{false}; // set by ~connection: new requests fail at once
    // Under error_mutex_:
    // From INFO server: the last one known. A handshake whose INFO is refused leaves it as it
    // was; empty while no server has said.
    std::string server_run_id_;
    // Where the connection goes, for messages: config::endpoint_text(), or with Sentinel the
    // primary's name and its address once known.
    std::string endpoint_text_;
    // Sentinel: the index of the sentinel that answered last, asked first (strand only).
    std::size_t preferred_sentinel_ = 0;

    std::string run_id() const override;
    std::string endpoint_text() const;
    // Records why session `s` could not connect (at s.step) and returns `ec` without a source
    // location; `cause` defaults to ec.message().
    error_code connect_failed(session& s, error_code ec, std::string cause = {});
    // "connecting to host:port (step): cause" when `ec` is a failure to establish the connection,
    // else empty.
    std::string connect_failure_text(error_code ec) const override;

    // --- completion (connection_impl.cpp) ---
    void complete(entry_ptr const& e, error_code ec);
    template <class Handler, class... Args>
    void deliver(Handler handler, asio::cancellation_slot slot, Args... args);
    void flush_ready();
    template <class Queue>
    void fail_queued(Queue& queue, error_code ec);
    void fail_session(session& s, error_code in_flight_ec, error_code queued_ec);

    // --- requests ---
    entry_ptr make_entry(std::string payload, std::size_t commands,
                         std::vector<resp3::reply_shape> shapes);
    template <class Handler>
    void bind_cancellation(entry_ptr const& e, Handler const& handler);
    void start_exec(resp3::request req, exec_handler handler, handler_work work) override;
    void enqueue_user(entry_ptr e);
    void wake_writer();
    void cancel_entry(entry_ptr const& e, asio::cancellation_type type);
    struct cancel_handler;

    // --- subscriptions ---
    void change_subscription(channel_kind kind, bool subscribe, std::vector<std::string> channels,
                             any_subscription_handler handler);
    void send_subscription_command(channel_kind kind, subscription_book::command const& c);
    void on_subscription_answer(exec_entry& e, error_code ec);
    void deliver_subscriptions();
    void deliver_subscription(channel_kind kind, subscription_book::finished& f);

    // --- listeners: a listener that throws must not take the connection down ---
    template <class Call>
    void notify_listeners(Call call);

    // --- connect / close ---
    void start_connect(connect_handler handler) override;
    void cancel_connect_waiter(std::shared_ptr<connect_waiter> const& w);
    void finish_connect_waiter(std::shared_ptr<connect_waiter> const& w, error_code ec);
    void finish_connect_waiters(error_code ec);
    void close(error_code ec);
    void start_run_loop();
    // close() and ~connection: flush what was asked before, within config::close_timeout.
    void graceful_close(bool final);
    void maybe_finish_flush();
    void finish_close();
    // The io_context is being destroyed with a close still to run: lets go of every handler the
    // engine holds, uncalled, so that no cycle (engine -> queued handler -> coroutine frame ->
    // engine) outlives the context.
    void abandon() noexcept;

    // --- the I/O (connection_run.cpp) ---
    static asio::awaitable<void> run_loop(std::shared_ptr<connection_impl> self,
                                          std::uint64_t generation);
    void end_session(std::shared_ptr<session> const& s, error_code ec, bool& keep_running);
    asio::awaitable<error_code> run_session(std::shared_ptr<session> s);
    asio::awaitable<std::tuple<error_code, tcp::resolver::results_type>>
    resolve(std::string host, std::uint16_t port, std::chrono::steady_clock::time_point deadline);
    asio::awaitable<error_code> open_transport(std::shared_ptr<session> s,
                                               std::vector<stream_endpoint> endpoints);
    // With TLS: asks `ep` a plain-text PING once the handshake has waited a while; completes
    // only when the answer is RESP (the server does not speak TLS).
    asio::awaitable<std::string> probe_plain_redis(stream_endpoint ep);
    asio::awaitable<error_code> read_loop(std::shared_ptr<session> s);
    error_code on_value(session& s, resp3::value v);
    asio::awaitable<error_code> write_loop(std::shared_ptr<session> s);
    void take_for_write(session& s, std::deque<entry_ptr>& queue, bool from_user);
    void put_back_unwritten(session& s, std::uint64_t write, std::size_t written, error_code ec);
    asio::awaitable<std::tuple<error_code, response>>
    internal_exec(session* s, resp3::request const& req, bool handshake);

    // --- handshake and health checks (connection_handshake.cpp) ---
    asio::awaitable<error_code> handshake_and_health(std::shared_ptr<session> s);
    asio::awaitable<error_code> handshake(std::shared_ptr<session> s);
    // HELLO 3 (with AUTH and SETNAME), SELECT, INFO server and, with Sentinel, ROLE.
    resp3::request handshake_request() const;
    // The handshake's refusal, recorded as session `s`'s failure; else empty, with s.run_id set.
    error_code check_handshake_replies(session& s, response const& replies);
    // A counted subscription that a new session subscribes to again.
    using session_subscription = std::pair<channel_kind, subscription_book::command>;
    asio::awaitable<error_code> resubscribe(std::shared_ptr<session> s,
                                            std::vector<session_subscription> subscriptions);
    asio::awaitable<error_code> health_loop(std::shared_ptr<session> s);
    bool other_instance(std::string const& new_run_id) const;

    // --- Redis Sentinel (connection_sentinel.cpp) ---
    // Asks the sentinels, in turn, for the primary's address and sets s->target; within
    // config::connect_timeout for all of them. Records the failure (each sentinel's answer).
    asio::awaitable<error_code> locate_primary(std::shared_ptr<session> s);
    // While the session is up: follows +switch-master on one sentinel at a time, and asks it
    // for the primary every health-check interval. Completes with error::primary_changed when
    // the primary is no longer s->target, or when the session ends.
    asio::awaitable<error_code> watch_primary(std::shared_ptr<session> s);
    // A sentinel's endpoints, or why there are none.
    asio::awaitable<std::tuple<std::string, std::vector<stream_endpoint>>>
    resolve_sentinel(server_address where, std::chrono::steady_clock::time_point deadline);
    // One sentinel, asked within `deadline`.
    asio::awaitable<primary_answer> ask_sentinel(server_address where,
                                                 std::chrono::steady_clock::time_point deadline);
    // Follows one sentinel until it fails or says the primary moved.
    struct follow_result {
        bool answered = false; // the sentinel named an address at least once
        primary_follower::verdict verdict = primary_follower::verdict::keep_reading;
        std::optional<server_address> moved_to; // for verdicts moved and disagrees
        std::string problem;
    };
    asio::awaitable<follow_result> follow_sentinel(std::shared_ptr<session> s,
                                                   server_address where);
};

// The answer to a request holding an unmatchable_command(): an error value naming it.
response unmatchable_response(resp3::request const& req);

// The TLS client context config::use_tls asks for (CA file or the system's, verification).
std::shared_ptr<asio::ssl::context> make_tls_context(config const& cfg);

// Whether a TLS handshake failed because the server's answer is no TLS at all.
bool answers_without_tls(error_code ec);

// Sets SNI and, when asked, host name verification on a TLS stream before its handshake.
bool prepare_tls(asio::ssl::stream<stream_socket&>& tls, std::string const& host, bool verify_peer);

// Holds the engine for a close posted to the strand (or the flush's timer). Run, it hands the
// engine over (take()); destroyed unrun, which happens only when the io_context is destroyed
// first, it abandons the engine's handlers.
class close_guard {
public:
    explicit close_guard(std::shared_ptr<connection_impl> self) : self_(std::move(self)) {}
    close_guard(close_guard&& o) noexcept : self_(std::move(o.self_)) {}
    close_guard& operator=(close_guard&&) = delete;
    ~close_guard() {
        if (self_)
            self_->abandon();
    }
    std::shared_ptr<connection_impl> take() noexcept { return std::move(self_); }

private:
    std::shared_ptr<connection_impl> self_;
};

// ------------------------------------------------------------------ templates

template <class Handler, class... Args>
void connection_impl::deliver(Handler handler, asio::cancellation_slot slot, Args... args) {
    colock::detail::complete_now(strand_, std::move(handler), slot, std::move(args)...);
}

struct connection_impl::cancel_handler {
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

// `handler` must be the type-erased handler that will be completed: converting a handler to
// any_completion_handler replaces what its slot holds.
template <class Handler>
void connection_impl::bind_cancellation(entry_ptr const& e, Handler const& handler) {
    auto slot = asio::get_associated_cancellation_slot(handler);
    if (slot.is_connected()) {
        e->slot = slot;
        slot.template emplace<cancel_handler>(weak_from_this(), e);
    }
}

template <class Queue>
void connection_impl::fail_queued(Queue& queue, error_code ec) {
    auto entries = std::move(queue);
    queue.clear();
    for (auto& e : entries)
        complete(e, ec);
}

template <class Call>
void connection_impl::notify_listeners(Call call) {
    notify_each(listeners_, call, [this](std::string text) { set_error_text(std::move(text)); });
}

} // namespace colock::redis::detail

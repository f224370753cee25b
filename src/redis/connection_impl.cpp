// The engine's bookkeeping: queues, completions and subscriptions.
#include "connection_impl.hpp"

#include "../resp3/escape.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace colock::redis::detail {

connection_impl::connection_impl(asio::any_io_executor ex, config cfg,
                                 std::shared_ptr<asio::ssl::context> tls)
    : engine_base(std::move(ex), std::move(cfg))
    , tls_context_(std::move(tls))
    , backoff_timer_(strand_)
    , close_timer_(strand_)
    , endpoint_text_(cfg_.endpoint_text()) {
    if (cfg_.use_tls && !tls_context_)
        tls_context_ = make_tls_context(cfg_);
}

response unmatchable_response(resp3::request const& req) {
    response r(req.commands());
    for (std::size_t i = 0; i < req.commands(); ++i) {
        if (req.shape(i).kind != resp3::reply_kind::unmatchable)
            continue;
        r[i].type = resp3::type::simple_error;
        r[i].text = fmt::format("ERR colock: {} cannot be sent on a shared connection: it "
                                "changes how the server answers the commands after it",
                                req.unmatchable_command());
        break;
    }
    return r;
}

std::shared_ptr<asio::ssl::context> make_tls_context(config const& cfg) {
    auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
    if (cfg.tls_verify_peer) {
        ctx->set_verify_mode(asio::ssl::verify_peer);
        if (cfg.tls_ca_file.empty())
            ctx->set_default_verify_paths();
        else
            ctx->load_verify_file(cfg.tls_ca_file);
    } else {
        ctx->set_verify_mode(asio::ssl::verify_none);
    }
    return ctx;
}

std::string printable_bytes(std::string_view bytes, std::size_t limit) {
    std::string out;
    resp3::detail::append_escaped(out, bytes.substr(0, limit));
    if (bytes.size() > limit)
        out += "...";
    return out;
}

std::string connection_impl::run_id() const {
    std::lock_guard lock(error_mutex_);
    return server_run_id_;
}

std::string connection_impl::endpoint_text() const {
    std::lock_guard lock(error_mutex_);
    return endpoint_text_;
}

error_code connection_impl::connect_failed(session& s, error_code ec, std::string cause) {
    // Asio records where it noticed an error (a file of its own); the caller needs what and where
    // to, so the code goes on without the location and the message names the endpoint.
    ec = error_code(ec.value(), ec.category());
    if (cause.empty())
        cause = ec.message();
    std::string text = fmt::format("connecting to {}{}: {}", endpoint_text(),
                                   s.step.empty() ? std::string() : " (" + s.step + ")", cause);
    s.failure_recorded = true;
    log(log_level::warning, text);
    std::lock_guard lock(error_mutex_);
    last_connect_ec_ = ec;
    last_connect_error_ = text;
    last_error_text_ = std::move(text);
    return ec;
}

std::string connection_impl::connect_failure_text(error_code ec) const {
    if (!is_connect_failure(ec))
        return {};
    std::lock_guard lock(error_mutex_);
    if (ec == last_connect_ec_ && !last_connect_error_.empty())
        return last_connect_error_;
    return fmt::format("connecting to {}: {}", endpoint_text_,
                       error_code(ec.value(), ec.category()).message());
}

// ---------------------------------------------------------------- completion

void connection_impl::complete(entry_ptr const& e, error_code ec) {
    if (e->state == exec_entry::stage::done)
        return;
    e->state = exec_entry::stage::done;
    auto slot = e->slot;
    if (auto* h = std::get_if<exec_handler>(&e->handler)) {
        if (!ec && std::any_of(e->replies.begin(), e->replies.end(),
                               [](resp3::value const& v) { return v.is_error(); }))
            ec = error::server_error;
        // Batched: one strand turn delivers every reply parsed from one read.
        ready_.push_back(
            ready_exec{std::move(*h), slot, ec, std::move(e->replies), std::move(e->work)});
        if (!delivering_batch_ && !flush_posted_) {
            flush_posted_ = true;
            asio::post(strand_, [self = shared_from_this()] { self->flush_ready(); });
        }
    } else if (std::holds_alternative<subscription_command>(e->handler)) {
        on_subscription_answer(*e, ec);
    }
    e->handler = std::monostate{};
}

// Delivers completed requests outside the strand: user code never runs inside a strand turn,
// where it would hold up reads and health checks. A runner posted to the connection's executor
// takes a chunk of them in order (delivery_chunk, or half the backlog) and dispatches each
// handler to its own executor (inline when that executor runs on this thread, as a coroutine
// on the same io_context does), which saves a post per reply; then it posts itself again for
// the rest. The requests those handlers make meanwhile are written after each chunk (their
// writer's wake-up was posted before the runner's next turn), so the server works on them
// while the rest of a read's replies are delivered, rather than the two taking turns at a
// whole batch each: with 64 callers on one connection this doubles the requests per second.
// On one thread, handlers run in the order of their requests; on several, a handler that
// computes holds up the rest of its chunk only, as the next reply posts a runner of its own.
void connection_impl::flush_ready() {
    flush_posted_ = false;
    if (ready_.empty())
        return; // delivered with a read's batch meanwhile
    bool post = false;
    {
        std::lock_guard lock(deliveries_->mutex);
        for (auto& r : ready_)
            deliveries_->items.emplace_back(std::move(r));
        post = !std::exchange(deliveries_->pending, true);
    }
    ready_.clear();
    if (post)
        asio::post(strand_.get_inner_executor(),
                   delivery_runner{deliveries_, strand_.get_inner_executor()});
}

void connection_impl::delivery_runner::operator()() const {
    std::vector<ready_exec> chunk;
    {
        std::lock_guard lock(queue->mutex);
        queue->pending = false;
        // Half of a long backlog per turn: a turn of the io_context (and its poll of the
        // sockets) for every 8 of 256 replies would cost more than the overlap brings.
        auto const n =
            std::min(queue->items.size(), std::max(delivery_chunk, queue->items.size() / 2));
        chunk.reserve(n);
        for (std::size_t i = 0; i < n; ++i) {
            chunk.emplace_back(std::move(queue->items.front()));
            queue->items.pop_front();
        }
    }
    for (auto& r : chunk) {
        // Let go after `ex`: once the handler has run, its thread pool may be joined and
        // destroyed (see post_invocation).
        auto const work = std::move(r.work);
        auto ex = asio::get_associated_executor(r.handler, io_executor);
        asio::dispatch(ex, [r = std::move(r)]() mutable {
            r.slot.clear();
            std::move(r.handler)(r.ec, std::move(r.replies));
        });
    }
    bool again = false;
    {
        std::lock_guard lock(queue->mutex);
        again = !queue->items.empty() && !std::exchange(queue->pending, true);
    }
    if (again)
        asio::post(io_executor, *this);
}

// Completes everything a session holds. Its requests are never carried over to another
// socket: written ones may have run, the rest (handshake, PING, subscription commands) only
// meant something on this one.
void connection_impl::fail_session(session& s, error_code in_flight_ec, error_code queued_ec) {
    s.matcher.clear();
    fail_queued(s.in_flight, in_flight_ec);
    fail_queued(s.flush_queue, queued_ec);
    fail_queued(s.handshake_queue, queued_ec);
    fail_queued(s.session_queue, queued_ec);
}

// ---------------------------------------------------------------- requests

entry_ptr connection_impl::make_entry(std::string payload, std::size_t commands,
                                      std::vector<resp3::reply_shape> shapes) {
    auto e = std::make_shared<exec_entry>();
    e->payload = std::move(payload);
    e->commands = commands;
    e->shapes = std::move(shapes);
    return e;
}

void connection_impl::start_exec(resp3::request req, exec_handler handler, handler_work work) {
    if (destroyed_) {
        deliver(std::move(handler), {}, error_code(error::closed), response{});
        return;
    }
    if (req.empty()) {
        deliver(std::move(handler), {}, error_code{}, response{});
        return;
    }
    if (!req.unmatchable_command().empty()) {
        // Refused before anything is written: the caller learns which command, and why.
        deliver(std::move(handler), {}, error_code(error::unsupported_command),
                unmatchable_response(req));
        return;
    }
    std::size_t const commands = req.commands();
    auto shapes = req.shapes();
    auto e = make_entry(req.take_payload(), commands, std::move(shapes));
    bind_cancellation(e, handler);
    if (work == handler_work::tracked)
        e->work = colock::detail::work_if_foreign(handler, strand_.get_inner_executor());
    e->handler = std::move(handler);
    asio::dispatch(strand_,
                   [self = shared_from_this(), e]() mutable { self->enqueue_user(std::move(e)); });
}

void connection_impl::enqueue_user(entry_ptr e) {
    if (e->state == exec_entry::stage::done)
        return; // cancelled before it reached the strand
    if (final_) {
        // The connection object is gone. A request that raced with its destructor still goes out
        // while the flush runs; nothing starts the connection again.
        if (closing_ && session_) {
            session_->flush_queue.push_back(std::move(e));
            wake_writer();
        } else {
            complete(e, error::closed);
        }
        return;
    }
    if (!closing_) {
        if (error_code ec = standing_failure()) {
            complete(e, ec);
            return;
        }
    }
    user_queue_.push_back(std::move(e));
    if (closing_)
        return; // made after close(): waits for the flush to end, then starts afresh
    if (!running_)
        start_run_loop();
    else
        wake_writer();
}

error_code connection_impl::standing_failure() const {
    if (running_ || ever_connected_ || !first_failure_.ec ||
        std::chrono::steady_clock::now() >= first_failure_.until)
        return {};
    return first_failure_.ec;
}

void connection_impl::wake_writer() {
    if (session_)
        session_->wakeup.cancel();
}

void connection_impl::cancel_entry(entry_ptr const& e, asio::cancellation_type type) {
    if (e->state == exec_entry::stage::done)
        return;
    if (e->state == exec_entry::stage::queued) {
        // Left in its queue; the writer skips entries that are done.
        complete(e, asio::error::operation_aborted);
        maybe_finish_flush();
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

// ----------------------------------------------------------------
// subscriptions

void connection_impl::change_subscription(channel_kind kind, bool subscribe,
                                          std::vector<std::string> channels,
                                          any_subscription_handler handler) {
    // Until a connection has once completed its handshake, a subscription waits for the
    // outcome of the attempt (started here if nothing runs): when that attempt fails, the
    // subscription fails with its error and counts nothing.
    bool const wait = subscribe && !ever_connected_;
    auto [op, commands] = book(kind).change(subscribe, std::move(channels), wait);
    auto work = std::visit(
        [this](auto const& h) {
            return colock::detail::work_if_foreign(h, strand_.get_inner_executor());
        },
        handler);
    subscription_ops_.emplace(std::pair(kind, op),
                              subscription_op{std::move(handler), std::move(work)});
    for (auto const& c : commands)
        send_subscription_command(kind, c);
    if (wait && !running_) {
        if (error_code ec = standing_failure())
            book(kind).abandon_waiting(ec);
        else
            start_run_loop();
    }
    deliver_subscriptions();
}

void connection_impl::send_subscription_command(channel_kind kind,
                                                subscription_book::command const& c) {
    if (!session_) {
        // The book only opens a session for session_; if they ever disagree, nothing waits.
        book(kind).close_session();
        return;
    }
    bool const sharded = kind == channel_kind::sharded;
    std::string text = c.subscribe ? (sharded ? "SSUBSCRIBE" : "SUBSCRIBE")
                                   : (sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE");
    resp3::request req;
    req.push_range(text, c.channels);
    std::size_t const commands = req.commands();
    auto shapes = req.shapes();
    auto e = make_entry(req.take_payload(), commands, std::move(shapes));
    for (auto const& channel : c.channels)
        (text += ' ') += channel;
    e->handler = subscription_command{kind, c.id, std::move(text)};
    session_->session_queue.push_back(std::move(e));
    wake_writer();
}

void connection_impl::on_subscription_answer(exec_entry& e, error_code ec) {
    auto const& cmd = std::get<subscription_command>(e.handler);
    if (ec == error::server_error)
        ec = {}; // the answer is the refusal itself
    if (ec || e.replies.size() != 1)
        return; // the socket is gone; closing its session tells the book
    auto const& answer = e.replies[0];
    if (answer.is_error())
        set_error_text(
            fmt::format("{} refused {}: {}", cfg_.to_redacted_url(), cmd.text, answer.text));
    book(cmd.kind).on_answer(cmd.id, answer.is_error(), answer.text);
    deliver_subscriptions();
}

void connection_impl::deliver_subscriptions() {
    for (auto const kind : {channel_kind::classic, channel_kind::sharded})
        for (auto const& c : book(kind).take_commands())
            send_subscription_command(kind, c);
    for (auto const kind : {channel_kind::classic, channel_kind::sharded})
        for (auto& f : book(kind).take_finished())
            deliver_subscription(kind, f);
}

void connection_impl::deliver_subscription(channel_kind kind, subscription_book::finished& f) {
    auto node = subscription_ops_.extract(std::pair(kind, f.op));
    if (node.empty())
        return;
    auto& handler = node.mapped().handler;
    if (auto* h = std::get_if<connect_handler>(&handler))
        deliver(std::move(*h), {}, f.ec);
    else
        deliver(std::move(std::get<subscription_handler>(handler)), {}, f.ec,
                std::move(f.server_text));
}

void connection_impl::drop_handlers() noexcept {
    ++generation_;
    running_ = false;
    connected_ = false;
    run_cancel_.reset();
    abandon();
}

} // namespace colock::redis::detail

// The engine's I/O: the run loop, one session per socket (its transport is opened in
// connection_transport.cpp, its handshake and health checks are in connection_handshake.cpp) and
// the reader and writer that share the socket.
#include "connection_impl.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/write.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string_view>

namespace colock::redis::detail {

using namespace asio::experimental::awaitable_operators;
using steady_clock = std::chrono::steady_clock;

// ---------------------------------------------------------------- the run loop

asio::awaitable<void> connection_impl::run_loop(std::shared_ptr<connection_impl> self,
                                                std::uint64_t generation) {
    // Every coroutine of the engine that can start a thread of its own (the run loop, and
    // each side of an ||) reads cancellation from its results and its state, never from
    // an exception: by default Asio throws from the next co_await once a coroutine is
    // cancelled, e.g. when close() lands between an operation's completion and the
    // coroutine's resumption.
    co_await asio::this_coro::throw_if_cancelled(false);
    auto backoff = self->cfg_.reconnect_initial_delay;
    for (;;) {
        auto s = std::make_shared<session>(self->strand_);
        // One budget for resolve, connect, TLS and handshake together.
        s->deadline = steady_clock::now() + self->cfg_.connect_timeout;
        self->session_ = s;
        error_code ec = co_await self->run_session(s);
        bool const was_ready = s->ready;
        bool keep_running = true;
        self->end_session(s, ec, keep_running);
        auto cs = co_await asio::this_coro::cancellation_state;
        if (!keep_running || generation != self->generation_ || is_cancelled(cs))
            co_return;
        if (was_ready) {
            backoff = self->cfg_.reconnect_initial_delay;
            if (self->logs(log_level::warning))
                self->log(log_level::warning,
                          fmt::format("connection to {} lost ({}); reconnecting in {} ms",
                                      self->endpoint_text(), ec.message(), backoff.count()));
        }
        self->backoff_timer_.expires_after(backoff);
        co_await self->backoff_timer_.async_wait(nothrow_awaitable);
        if (generation != self->generation_ || is_cancelled(cs))
            co_return;
        backoff = std::min(backoff * 2, self->cfg_.reconnect_max_delay);
    }
}

void connection_impl::end_session(std::shared_ptr<session> const& s, error_code ec,
                                  bool& keep_running) {
    s->detached = true;
    // The sentinel that named a server that could not be reached, or is no primary, may be
    // behind the others: the next attempt asks the next one first.
    if (!s->ready && s->named_by)
        preferred_sentinel_ = (*s->named_by + 1) % cfg_.sentinel.sentinels.size();
    error_code ignored;
    s->socket.close(ignored);
    if (session_ != s) {
        // close() failed what the session held; whatever reached it since is failed too,
        // never stranded.
        fail_session(*s, error::closed, error::closed);
        keep_running = false;
        return;
    }
    if (s->flushing) {
        // close() was flushing when the connection went: what was written may have run, the rest
        // fails with error::closed, and nothing reconnects for it.
        s->matcher.clear();
        fail_queued(s->in_flight, error::connection_lost);
        finish_close();
        keep_running = false;
        return;
    }
    connected_ = false;
    session_.reset();
    // The next handshake subscribes to every counted channel. Until a connection has worked,
    // operations waiting for this session's commands learn that it failed, and count nothing.
    for (auto& b : books_)
        b.close_session(ever_connected_ ? error_code() : ec);
    deliver_subscriptions();
    // Requests with a command written whole may have run: they fail, and are never re-sent.
    // The others are back in the user queue (put_back_unwritten) for the next connection.
    fail_session(*s, s->ready || ever_connected_ ? error_code(error::connection_lost) : ec, ec);
    if (!ever_connected_) {
        // Nobody has seen this connection work: report instead of retrying.
        if (is_connect_failure(ec))
            first_failure_ = {ec, steady_clock::now() + cfg_.reconnect_initial_delay};
        running_ = false;
        run_cancel_.reset();
        fail_queued(user_queue_, ec);
        finish_connect_waiters(ec);
        for (auto& b : books_)
            b.abandon_waiting(ec);
        deliver_subscriptions();
        keep_running = false;
    }
}

asio::awaitable<error_code> connection_impl::run_session(std::shared_ptr<session> s) {
    auto const timed_out = [this] {
        return fmt::format("timed out after {} ms", cfg_.connect_timeout.count());
    };
    std::vector<stream_endpoint> endpoints;
    if (cfg_.uses_sentinel()) {
        s->step = "asking the sentinels for the primary";
        if (error_code ec = co_await locate_primary(s))
            co_return ec;
        // The primary gets a whole connect_timeout of its own.
        s->deadline = steady_clock::now() + cfg_.connect_timeout;
    } else {
        s->target = {cfg_.host, cfg_.port};
    }
    if (cfg_.unix_socket.empty()) {
        s->step = "resolving the host name";
        auto resolved = co_await resolve(s->target.host, s->target.port, s->deadline);
        error_code const rec = std::get<0>(resolved);
        if (rec == error::connect_timeout)
            co_return connect_failed(*s, rec, timed_out());
        if (rec)
            co_return connect_failed(*s, rec);
        for (auto const& entry : std::get<1>(resolved))
            endpoints.emplace_back(entry.endpoint());
    } else {
        try {
            endpoints.emplace_back(asio::local::stream_protocol::endpoint(cfg_.unix_socket));
        } catch (std::exception const&) { // longer than a sockaddr_un holds
            co_return connect_failed(*s, asio::error::name_too_long,
                                     "the socket path is too long for a unix socket address");
        }
    }
    s->step.clear();
    asio::steady_timer deadline(strand_);
    deadline.expires_at(s->deadline);
    auto opened = co_await (open_transport(s, std::move(endpoints)) ||
                            deadline.async_wait(nothrow_awaitable));
    if (opened.index() == 1)
        co_return connect_failed(*s, error::connect_timeout, timed_out());
    if (error_code ec = std::get<0>(opened))
        co_return s->failure_recorded ? ec : connect_failed(*s, ec);
    if (s->detached)
        co_return asio::error::operation_aborted;
    s->step = "Redis handshake";
    auto result = co_await (read_loop(s) || write_loop(s) || handshake_and_health(s));
    error_code ec = std::visit([](error_code e) { return e; }, result);
    // The socket failed before the handshake was done (the handshake records its own refusals).
    if (ec && !s->ready && !s->failure_recorded && !s->detached)
        ec = connect_failed(*s, ec);
    co_return ec;
}

// ---------------------------------------------------------------- reading

asio::awaitable<error_code> connection_impl::read_loop(std::shared_ptr<session> s) {
    co_await asio::this_coro::throw_if_cancelled(false);
    auto cs = co_await asio::this_coro::cancellation_state;
    for (;;) {
        // A cancellation that came between two reads reached no operation: only the state
        // has it.
        if (is_cancelled(cs))
            co_return asio::error::operation_aborted;
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
            got = co_await s->tls->async_read_some(into, nothrow_awaitable);
        else
            got = co_await s->socket.async_read_some(into, nothrow_awaitable);
        auto [ec, n] = got;
        if (ec)
            co_return ec;
        s->read_end += n;
        // Every reply parsed from this read is delivered with one post, once they are all in.
        struct deliver_batch {
            connection_impl& c;
            explicit deliver_batch(connection_impl& conn) : c(conn) { c.delivering_batch_ = true; }
            deliver_batch(deliver_batch const&) = delete;
            ~deliver_batch() {
                c.delivering_batch_ = false;
                c.flush_ready();
            }
        } batch(*this);
        while (s->read_begin < s->read_end) {
            error_code pec;
            std::string_view const input(buf.data() + s->read_begin, s->read_end - s->read_begin);
            std::size_t const used = s->parser.consume(input, pec);
            if (pec) {
                // Not one value yet, and the very first bytes are no RESP3: whatever answers on
                // this port (a web server, another database) is not Redis, and will not be on
                // the next attempt either.
                if (!s->ready && !s->answered)
                    co_return connect_failed(
                        *s, error::handshake_failed,
                        fmt::format("not a Redis server (first bytes: {})",
                                    printable_bytes(std::string_view(buf.data(), s->read_end))));
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

error_code connection_impl::on_value(session& s, resp3::value v) {
    s.answered = true;
    auto const route = s.matcher.feed(v);
    if (route == reply_matcher::route::unexpected) {
        set_error_text(fmt::format("unexpected reply from {}: {}", cfg_.to_redacted_url(),
                                   resp3::to_debug_string(v)));
        return error::unexpected_reply;
    }
    if (route != reply_matcher::route::answer) {
        if (!s.ready && ever_connected_)
            s.held_pushes.push_back(v); // until on_reconnect (see handshake_and_health)
        else
            notify_listeners([&v](push_listener& l) { l.on_push(v); });
        if (s.detached)
            return asio::error::operation_aborted; // a listener closed the connection
    }
    while (s.matcher.front_done()) {
        auto answers = s.matcher.take_front();
        entry_ptr e = std::move(s.in_flight.front());
        s.in_flight.pop_front();
        if (!e->discard && e->state != exec_entry::stage::done)
            e->replies = std::move(answers);
        complete(e, {});
    }
    maybe_finish_flush(); // may close the connection, and detach this session
    if (s.detached)
        return asio::error::operation_aborted;
    return {};
}

// ---------------------------------------------------------------- writing

asio::awaitable<error_code> connection_impl::write_loop(std::shared_ptr<session> s) {
    co_await asio::this_coro::throw_if_cancelled(false);
    auto cs = co_await asio::this_coro::cancellation_state;
    for (;;) {
        // A session that is no longer the connection's own (close(), or the run loop has moved
        // on) must not take requests meant for the next one: a write of its own may complete
        // after close() and bring the writer back here.
        if (s->detached || is_cancelled(cs))
            co_return asio::error::operation_aborted;
        s->write_buffer.clear();
        std::uint64_t const write = ++s->writes;
        take_for_write(*s, s->handshake_queue, false);
        if (s->ready) {
            take_for_write(*s, s->session_queue, false);
            take_for_write(*s, s->flushing ? s->flush_queue : user_queue_, true);
        }
        if (s->write_buffer.empty()) {
            s->wakeup.expires_at(asio::steady_timer::time_point::max());
            co_await s->wakeup.async_wait(nothrow_awaitable);
            continue;
        }
        std::tuple<error_code, std::size_t> wrote;
        if (s->tls)
            wrote = co_await asio::async_write(*s->tls, asio::buffer(s->write_buffer),
                                               nothrow_awaitable);
        else
            wrote = co_await asio::async_write(s->socket, asio::buffer(s->write_buffer),
                                               nothrow_awaitable);
        auto [ec, n] = wrote;
        if (ec) {
            put_back_unwritten(*s, write, n, ec);
            co_return ec;
        }
    }
}

void connection_impl::take_for_write(session& s, std::deque<entry_ptr>& queue, bool from_user) {
    while (!queue.empty()) {
        entry_ptr e = std::move(queue.front());
        queue.pop_front();
        if (e->state == exec_entry::stage::done)
            continue; // cancelled while queued
        e->state = exec_entry::stage::written;
        e->from_user = from_user;
        e->write = s.writes;
        e->write_begin = s.write_buffer.size();
        // One command, the usual case, needs no parsing to know where it ends.
        std::size_t const first = e->commands == 1 ? e->payload.size() : first_command(e->payload);
        e->first_command_end = e->write_begin + (first == 0 ? e->payload.size() : first);
        // Registered before the write is issued: replies may be read before it completes.
        s.matcher.add(e->commands, e->shapes, e->payload);
        s.write_buffer += e->payload;
        e->payload = std::string();
        e->write_end = s.write_buffer.size();
        s.in_flight.push_back(std::move(e));
    }
}

// After write number `write` failed with `written` bytes gone. The server runs whole commands
// only, and this socket is done: a request whose first command did not leave whole cannot have
// run, so a user's goes back to the front of the queue for the next connection, with its own
// bytes. A request with a command written whole may have run it: it stays in flight and fails
// with connection_lost, never re-sent. The write's requests are found by the marks it left on
// them, not by position: meanwhile the reader takes answered requests from the front of
// in_flight, and close() empties it.
void connection_impl::put_back_unwritten(session& s, std::uint64_t write, std::size_t written,
                                         error_code ec) {
    while (!s.in_flight.empty() && s.in_flight.back()->write == write &&
           s.in_flight.back()->first_command_end > written) {
        entry_ptr e = std::move(s.in_flight.back());
        s.in_flight.pop_back();
        s.matcher.drop_back();
        if (e->state == exec_entry::stage::done)
            continue; // cancelled meanwhile
        if (e->from_user) {
            e->payload = s.write_buffer.substr(e->write_begin, e->write_end - e->write_begin);
            e->state = exec_entry::stage::queued;
            // Newest first: the order is kept.
            (s.flushing ? s.flush_queue : user_queue_).push_front(std::move(e));
        } else {
            complete(e, ec); // this socket's own: it goes with it
        }
    }
}

asio::awaitable<std::tuple<error_code, response>>
connection_impl::internal_exec(session* s, resp3::request const& req, bool handshake) {
    co_await asio::this_coro::throw_if_cancelled(false);
    // A raw session pointer, kept alive by the caller: GCC 12 destroys the captures of a
    // temporary lambda in a co_await expression twice, so only trivial ones here.
    co_return co_await asio::async_initiate<nothrow_awaitable_t const, void(error_code, response)>(
        [this, s, &req, handshake](auto handler) {
            auto e = make_entry(std::string(req.payload()), req.commands(), req.shapes());
            // Type-erased first: any_completion_handler puts its own cancellation state in the
            // handler's slot, so ours must go into the slot it offers in turn.
            exec_handler h(std::move(handler));
            bind_cancellation(e, h);
            e->handler = std::move(h);
            if (s->detached) {
                complete(e, asio::error::operation_aborted);
                return;
            }
            (handshake ? s->handshake_queue : s->session_queue).push_back(std::move(e));
            s->wakeup.cancel();
        },
        nothrow_awaitable);
}

} // namespace colock::redis::detail

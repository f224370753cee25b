// The engine's I/O: the run loop, one session per socket (resolve, connect, TLS, handshake,
// health checks) and the reader and writer that share the socket.
#include "connection_impl.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/write.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string_view>

namespace colock::redis::detail {

using namespace asio::experimental::awaitable_operators;
using steady_clock = std::chrono::steady_clock;

std::string parse_run_id(resp3::value const& info) {
    // "run_id:<40 hex digits>" on a line of its own.
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
        if (was_ready)
            backoff = self->cfg_.reconnect_initial_delay;
        self->backoff_timer_.expires_after(backoff);
        co_await self->backoff_timer_.async_wait(use_nothrow);
        if (generation != self->generation_ || is_cancelled(cs))
            co_return;
        backoff = std::min(backoff * 2, self->cfg_.reconnect_max_delay);
    }
}

void connection_impl::end_session(std::shared_ptr<session> const& s, error_code ec,
                                  bool& keep_running) {
    s->detached = true;
    error_code ignored;
    s->socket.close(ignored);
    if (session_ != s) {
        // close() failed what the session held; whatever reached it since is failed too,
        // never stranded.
        fail_session(*s, error::closed, error::closed);
        keep_running = false;
        return;
    }
    connected_ = false;
    session_.reset();
    // The next handshake subscribes to every counted channel. Until a connection has worked,
    // operations waiting for this session's commands learn that it failed, and count nothing.
    book_.close_session(ever_connected_ ? error_code() : ec);
    deliver_subscriptions();
    // Requests with a command written whole may have run: they fail, and are never re-sent.
    // The others are back in the user queue (put_back_unwritten) for the next connection.
    fail_session(*s, s->ready || ever_connected_ ? error_code(error::connection_lost) : ec, ec);
    if (!ever_connected_) {
        // Nobody has seen this connection work: report instead of retrying.
        running_ = false;
        run_cancel_.reset();
        fail_queued(user_queue_, ec);
        finish_connect_waiters(ec);
        book_.abandon_waiting(ec);
        deliver_subscriptions();
        keep_running = false;
    }
}

asio::awaitable<error_code> connection_impl::run_session(std::shared_ptr<session> s) {
    auto resolved = co_await resolve(s->deadline);
    error_code const rec = std::get<0>(resolved);
    if (rec) {
        set_error_text(
            rec == error::connect_timeout
                ? fmt::format("resolving {} took longer than connect_timeout",
                              cfg_.to_redacted_url())
                : fmt::format("cannot resolve {}: {}", cfg_.to_redacted_url(), rec.message()));
        co_return rec;
    }
    asio::steady_timer deadline(strand_);
    deadline.expires_at(s->deadline);
    auto opened = co_await (open_transport(s, std::move(std::get<1>(resolved))) ||
                            deadline.async_wait(use_nothrow));
    if (opened.index() == 1) {
        set_error_text(fmt::format("connecting to {} took longer than connect_timeout",
                                   cfg_.to_redacted_url()));
        co_return error::connect_timeout;
    }
    if (error_code ec = std::get<0>(opened)) {
        set_error_text(
            fmt::format("cannot connect to {}: {}", cfg_.to_redacted_url(), ec.message()));
        co_return ec;
    }
    if (s->detached)
        co_return asio::error::operation_aborted;
    auto result = co_await (read_loop(s) || write_loop(s) || handshake_and_health(s));
    co_return std::visit([](error_code ec) { return ec; }, result);
}

asio::awaitable<std::tuple<error_code, tcp::resolver::results_type>>
connection_impl::resolve(steady_clock::time_point deadline) {
    // getaddrinfo runs on Asio's resolver thread and cannot be interrupted, and a resolve
    // raced with || would still be waited for. So the attempt waits for a timer that the
    // resolve's completion cancels, and abandons a resolve that is still running at the
    // deadline (its result is dropped when it comes).
    struct state {
        explicit state(strand_type const& strand) : resolver(strand), done_signal(strand) {}
        tcp::resolver resolver;
        asio::steady_timer done_signal;
        error_code ec;
        tcp::resolver::results_type results;
        bool done = false;
    };
    auto st = std::make_shared<state>(strand_);
    st->done_signal.expires_at(deadline);
    st->resolver.async_resolve(cfg_.host, std::to_string(cfg_.port),
                               [st](error_code ec, tcp::resolver::results_type results) {
                                   st->ec = ec;
                                   st->results = std::move(results);
                                   st->done = true;
                                   st->done_signal.cancel();
                               });
    if (!st->done)
        co_await st->done_signal.async_wait(use_nothrow);
    if (st->done)
        co_return std::make_tuple(st->ec, std::move(st->results));
    st->resolver.cancel();
    auto cs = co_await asio::this_coro::cancellation_state;
    error_code const ec = is_cancelled(cs) ? error_code(asio::error::operation_aborted)
                                           : error_code(error::connect_timeout);
    co_return std::make_tuple(ec, tcp::resolver::results_type{});
}

asio::awaitable<error_code> connection_impl::open_transport(std::shared_ptr<session> s,
                                                            tcp::resolver::results_type endpoints) {
    co_await asio::this_coro::throw_if_cancelled(false);
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
        auto [hec] = co_await s->tls->async_handshake(asio::ssl::stream_base::client, use_nothrow);
        if (hec)
            co_return hec;
    }
    co_return error_code{};
}

// ---------------------------------------------------------------- reading

asio::awaitable<error_code> connection_impl::read_loop(std::shared_ptr<session> s) {
    co_await asio::this_coro::throw_if_cancelled(false);
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
            std::string_view const input(buf.data() + s->read_begin, s->read_end - s->read_begin);
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

error_code connection_impl::on_value(session& s, resp3::value v) {
    auto const route = s.matcher.feed(v);
    if (route == reply_matcher::route::unexpected) {
        set_error_text(fmt::format("unexpected reply from {}: {}", cfg_.to_redacted_url(),
                                   resp3::to_debug_string(v)));
        return error::unexpected_reply;
    }
    if (route != reply_matcher::route::answer) {
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
            take_for_write(*s, user_queue_, true);
        }
        if (s->write_buffer.empty()) {
            s->wakeup.expires_at(asio::steady_timer::time_point::max());
            co_await s->wakeup.async_wait(use_nothrow);
            continue;
        }
        std::tuple<error_code, std::size_t> wrote;
        if (s->tls)
            wrote = co_await asio::async_write(*s->tls, asio::buffer(s->write_buffer), use_nothrow);
        else
            wrote =
                co_await asio::async_write(s->socket, asio::buffer(s->write_buffer), use_nothrow);
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
        std::size_t const first = first_command(e->payload);
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
            user_queue_.push_front(std::move(e)); // newest first: the order is kept
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
    co_return co_await asio::async_initiate<use_nothrow_t const, void(error_code, response)>(
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
        use_nothrow);
}

// ---------------------------------------------------------------- handshake and health

asio::awaitable<error_code> connection_impl::handshake_and_health(std::shared_ptr<session> s) {
    co_await asio::this_coro::throw_if_cancelled(false);
    asio::steady_timer timer(strand_);
    timer.expires_at(s->deadline); // what resolve, connect and TLS left of connect_timeout
    auto shaken = co_await (handshake(s) || timer.async_wait(use_nothrow));
    if (shaken.index() == 1) {
        set_error_text(fmt::format("handshake with {} did not finish within connect_timeout",
                                   cfg_.to_redacted_url()));
        co_return error::connect_timeout;
    }
    if (error_code ec = std::get<0>(shaken))
        co_return ec;
    if (s->detached)
        co_return asio::error::operation_aborted;

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
    s->wakeup.cancel();
    if (reconnected) {
        ++reconnects_;
        if (other_server)
            notify_listeners([](push_listener& l) { l.on_server_change(); });
        notify_listeners([](push_listener& l) { l.on_reconnect(); });
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
        auto pong = co_await (internal_exec(s.get(), ping, false) || timer.async_wait(use_nothrow));
        if (pong.index() == 1) {
            set_error_text(fmt::format("{} did not answer PING within {} ms",
                                       cfg_.to_redacted_url(), cfg_.health_check_interval.count()));
            co_return error::health_check_timeout;
        }
        if (auto [ec, r] = std::get<0>(pong); ec && ec != error::server_error)
            co_return ec;
    }
}

// Whether a reconnection reached another server instance than the previous connection.
// An unknown run_id (INFO refused) on either side counts as the same instance: the lock
// layer then finds out by asking for its keys, as it does after every reconnection.
bool connection_impl::other_instance(std::string const& new_run_id) const {
    std::lock_guard lock(error_mutex_);
    return !server_run_id_.empty() && !new_run_id.empty() && server_run_id_ != new_run_id;
}

asio::awaitable<error_code> connection_impl::handshake(std::shared_ptr<session> s) {
    co_await asio::this_coro::throw_if_cancelled(false);
    if (s->detached || session_ != s)
        co_return asio::error::operation_aborted;
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
    // reached again. A refusal (ACL, renamed command) leaves the instance unknown.
    req.push("INFO", "server");
    std::size_t const info_index = cfg_.database != 0 ? 2 : 1;
    // The session is open from here: subscription changes wait for its handshake.
    auto const subscriptions = book_.open_session();

    auto [ec, replies] = co_await internal_exec(s.get(), req, true);
    if (ec && ec != error::server_error)
        co_return ec;
    if (replies.size() != req.commands()) {
        set_error_text(fmt::format("{} answered the handshake with {} replies for {} commands",
                                   cfg_.to_redacted_url(), replies.size(), req.commands()));
        co_return error::unexpected_reply;
    }
    auto const setup_end = replies.begin() + static_cast<std::ptrdiff_t>(info_index);
    auto const refused = std::find_if(replies.begin(), setup_end,
                                      [](resp3::value const& v) { return v.is_error(); });
    if (refused != setup_end) {
        set_error_text(fmt::format("{} refused the handshake: {}", cfg_.to_redacted_url(),
                                   refused->text.empty() ? "(empty error reply)" : refused->text));
        co_return error::handshake_failed;
    }
    if (replies[0].type != resp3::type::map) {
        set_error_text(fmt::format("{} did not answer HELLO 3 with a map (RESP3 needs Redis 6 "
                                   "or later)",
                                   cfg_.to_redacted_url()));
        co_return error::handshake_failed;
    }
    s->run_id.clear();
    if (!replies[info_index].is_error())
        s->run_id = parse_run_id(replies[info_index]);

    if (subscriptions.empty())
        co_return error_code{};
    // One SUBSCRIBE per counted channel, so that a refusal costs that channel only. Sent once
    // the setup has succeeded, not behind it: a connection whose HELLO was refused still
    // speaks RESP2 (as the default user, when that one needs no password), and would confirm
    // with arrays that are no pushes, which no matcher can take for confirmations.
    resp3::request subscribe;
    for (auto const& c : subscriptions)
        subscribe.push_range("SUBSCRIBE", c.channels);
    auto [sec, answers] = co_await internal_exec(s.get(), subscribe, true);
    if (sec && sec != error::server_error)
        co_return sec;
    if (answers.size() != subscribe.commands()) {
        set_error_text(fmt::format("{} answered the handshake's SUBSCRIBE with {} replies for {} "
                                   "commands",
                                   cfg_.to_redacted_url(), answers.size(), subscribe.commands()));
        co_return error::unexpected_reply;
    }
    // A refused SUBSCRIBE does not fail the connection: the channel is not subscribed (its
    // subscribers were told of success long ago and cannot be told now; they keep their
    // counts), and last_error_text says which.
    std::string dropped;
    for (std::size_t i = 0; i < subscriptions.size(); ++i) {
        auto const& answer = answers[i];
        book_.on_answer(subscriptions[i].id, answer.is_error(), answer.text);
        if (answer.is_error())
            dropped += fmt::format("{}{} ({})", dropped.empty() ? "" : ", ",
                                   subscriptions[i].channels.at(0), answer.text);
    }
    deliver_subscriptions();
    if (!dropped.empty())
        set_error_text(fmt::format("{} refused SUBSCRIBE in the handshake; no longer subscribed "
                                   "to: {}",
                                   cfg_.to_redacted_url(), dropped));
    co_return error_code{};
}

} // namespace colock::redis::detail

// The handshake (HELLO 3, AUTH, SELECT, SETNAME, INFO and the counted subscriptions) and the health
// checks of a session.
#include "connection_impl.hpp"
#include "sentinel.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>

#include <fmt/format.h>

#include <utility>

#include <algorithm>
#include <cctype>
#include <string_view>

namespace colock::redis::detail {

using namespace asio::experimental::awaitable_operators;

namespace {

std::string error_text(resp3::value const& v) {
    return v.text.empty() ? std::string("(empty error reply)") : v.text;
}

} // namespace

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

asio::awaitable<error_code> connection_impl::handshake_and_health(std::shared_ptr<session> s) {
    co_await asio::this_coro::throw_if_cancelled(false);
    asio::steady_timer timer(strand_);
    timer.expires_at(s->deadline); // what resolve, connect and TLS left of connect_timeout
    auto cs = co_await asio::this_coro::cancellation_state;
    auto shaken = co_await (handshake(s) || timer.async_wait(nothrow_awaitable));
    if (shaken.index() == 1) {
        // The timer ends early too when the session ends first (the reader found the answer
        // unreadable, the socket failed, close()): that is no timeout, and the reason is theirs.
        auto const [tec] = std::get<1>(shaken);
        if (tec || s->detached || is_cancelled(cs))
            co_return asio::error::operation_aborted;
        co_return connect_failed(
            *s, error::connect_timeout,
            fmt::format("timed out after {} ms", cfg_.connect_timeout.count()));
    }
    if (error_code ec = std::get<0>(shaken))
        co_return ec;
    if (s->detached || is_cancelled(cs))
        co_return asio::error::operation_aborted;

    s->ready = true;
    bool const reconnected = ever_connected_;
    ever_connected_ = true;
    ever_handshaken_ = true;
    bool const other_server = reconnected && other_instance(s->run_id);
    std::string before;
    {
        // A refused INFO tells nothing about the instance: the last id known stays, so that the
        // next reconnection that can read one still compares against it.
        std::lock_guard lock(error_mutex_);
        before = server_run_id_;
        if (!s->run_id.empty())
            server_run_id_ = s->run_id;
    }
    if (other_server)
        log(log_level::warning,
            fmt::format("{} is another server instance than before (run_id {} -> {}): what was "
                        "written to the old one may be gone, and locks held there are lost",
                        endpoint_text(), before, s->run_id));
    if (logs(log_level::info))
        log(log_level::info, reconnected
                                 ? fmt::format("reconnected to {} (reconnection {})",
                                               endpoint_text(), reconnects_.load() + 1)
                                 : fmt::format("connected to {} (run_id {})", endpoint_text(),
                                               s->run_id.empty() ? "unknown" : s->run_id));
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
        // Then what came on the channels since they were subscribed to again.
        for (auto const& push : std::exchange(s->held_pushes, {})) {
            if (s->detached)
                break; // a listener closed the connection
            notify_listeners([&push](push_listener& l) { l.on_push(push); });
        }
    }

    if (cfg_.uses_sentinel()) {
        auto ended = co_await (health_loop(s) || watch_primary(s));
        co_return std::visit([](error_code e) { return e; }, ended);
    }
    co_return co_await health_loop(s);
}

asio::awaitable<error_code> connection_impl::health_loop(std::shared_ptr<session> s) {
    co_await asio::this_coro::throw_if_cancelled(false);
    auto cs = co_await asio::this_coro::cancellation_state;
    asio::steady_timer timer(strand_);
    if (cfg_.health_check_interval.count() <= 0) {
        timer.expires_at(asio::steady_timer::time_point::max());
        co_await timer.async_wait(nothrow_awaitable);
        co_return asio::error::operation_aborted;
    }
    resp3::request ping;
    ping.push("PING");
    for (;;) {
        timer.expires_after(cfg_.health_check_interval);
        auto [tec] = co_await timer.async_wait(nothrow_awaitable);
        if (tec || is_cancelled(cs))
            co_return asio::error::operation_aborted;
        timer.expires_after(cfg_.health_check_interval);
        auto pong =
            co_await (internal_exec(s.get(), ping, false) || timer.async_wait(nothrow_awaitable));
        // Ended meanwhile (the other side of the session's ||, e.g. a sentinel's word that the
        // primary moved): a cancellation that came while the PING's answer was being handed
        // over reached neither operation, and this loop would ping the old server on.
        if (is_cancelled(cs))
            co_return asio::error::operation_aborted;
        if (pong.index() == 1) {
            set_error_text(fmt::format("{} did not answer PING within {} ms",
                                       cfg_.to_redacted_url(), cfg_.health_check_interval.count()));
            co_return error::health_check_timeout;
        }
        if (auto [ec, r] = std::get<0>(pong); ec && ec != error::server_error)
            co_return ec;
    }
}

// Whether a reconnection reached another server instance than the last one whose run_id is
// known. An unknown run_id (INFO refused now, or on every connection so far) counts as the same
// instance: the lock layer then finds out by asking for its keys, as it does after every
// reconnection.
bool connection_impl::other_instance(std::string const& new_run_id) const {
    std::lock_guard lock(error_mutex_);
    return !server_run_id_.empty() && !new_run_id.empty() && server_run_id_ != new_run_id;
}

asio::awaitable<error_code> connection_impl::handshake(std::shared_ptr<session> s) {
    co_await asio::this_coro::throw_if_cancelled(false);
    if (s->detached || session_ != s)
        co_return asio::error::operation_aborted;
    auto const req = handshake_request();
    // The session is open from here: subscription changes wait for its handshake.
    std::vector<session_subscription> subscriptions;
    for (auto const kind : {channel_kind::classic, channel_kind::sharded})
        for (auto& c : book(kind).open_session())
            subscriptions.emplace_back(kind, std::move(c));

    auto [ec, replies] = co_await internal_exec(s.get(), req, true);
    if (ec && ec != error::server_error)
        co_return ec;
    if (replies.size() != req.commands())
        co_return connect_failed(
            *s, error::unexpected_reply,
            fmt::format("{} replies for {} commands", replies.size(), req.commands()));
    if (auto const refused = check_handshake_replies(*s, replies))
        co_return refused;
    if (subscriptions.empty())
        co_return error_code{};
    co_return co_await resubscribe(s, std::move(subscriptions));
}

resp3::request connection_impl::handshake_request() const {
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
    // Sentinel's answer may be stale (a failover under way): the server itself says whether it
    // is the primary.
    if (cfg_.uses_sentinel())
        req.push("ROLE");
    return req;
}

error_code connection_impl::check_handshake_replies(session& s, response const& replies) {
    std::size_t const info_index = cfg_.database != 0 ? 2 : 1;
    // The step that failed, named in the message: "HELLO" (never with its arguments: they hold the
    // password) or "SELECT n".
    if (replies[0].is_error()) {
        s.step = "HELLO";
        std::string text = error_text(replies[0]);
        // The server wants a password and the config has none: say where it goes.
        if (cfg_.password.empty() && text.starts_with("NOAUTH"))
            text += " (no password was given: put it in the URL, "
                    "redis://[user]:password@host:port, or in config::password)";
        return connect_failed(s, error::handshake_failed, text);
    }
    if (cfg_.database != 0 && replies[1].is_error()) {
        s.step = fmt::format("SELECT {}", cfg_.database);
        return connect_failed(s, error::handshake_failed, error_text(replies[1]));
    }
    if (replies[0].type != resp3::type::map) {
        s.step = "HELLO";
        return connect_failed(s, error::handshake_failed,
                              "the answer is not a map (RESP3 needs Redis 6 or later)");
    }
    s.run_id.clear();
    if (!replies[info_index].is_error())
        s.run_id = parse_run_id(replies[info_index]);
    if (!cfg_.uses_sentinel())
        return {};
    // A user without the right to ROLE (@admin) cannot tell: then Sentinel's word goes.
    auto const& role_reply = replies[info_index + 1];
    std::string const role = read_role(role_reply);
    if (role_reply.is_error() || role == "master")
        return {};
    s.step = "ROLE";
    return connect_failed(
        s, error::not_primary,
        fmt::format(
            "sentinel {} named it the primary of '{}', but it is {}",
            s.named_by ? address_text(cfg_.sentinel.sentinels[*s.named_by]) : std::string("?"),
            cfg_.sentinel.master_name,
            role.empty() ? "not (its ROLE reply is unreadable)" : fmt::format("a {}", role)));
}

asio::awaitable<error_code>
connection_impl::resubscribe(std::shared_ptr<session> s,
                             std::vector<session_subscription> subscriptions) {
    // One SUBSCRIBE (SSUBSCRIBE) per counted channel, so that a refusal costs that channel only.
    // Sent once the setup has succeeded, not behind it: a connection whose HELLO was refused still
    // speaks RESP2 (as the default user, when that one needs no password), and would confirm
    // with arrays that are no pushes, which no matcher can take for confirmations.
    resp3::request subscribe;
    for (auto const& [kind, c] : subscriptions)
        subscribe.push_range(kind == channel_kind::sharded ? "SSUBSCRIBE" : "SUBSCRIBE",
                             c.channels);
    auto [sec, answers] = co_await internal_exec(s.get(), subscribe, true);
    if (sec && sec != error::server_error)
        co_return sec;
    if (answers.size() != subscribe.commands()) {
        s->step = "SUBSCRIBE";
        co_return connect_failed(
            *s, error::unexpected_reply,
            fmt::format("{} replies for {} commands", answers.size(), subscribe.commands()));
    }
    // A refused SUBSCRIBE does not fail the connection: the channel is not subscribed (its
    // subscribers were told of success long ago and cannot be told now; they keep their
    // counts), and last_error_text says which.
    std::string dropped;
    for (std::size_t i = 0; i < subscriptions.size(); ++i) {
        auto const& answer = answers[i];
        auto const& [kind, c] = subscriptions[i];
        book(kind).on_answer(c.id, answer.is_error(), answer.text);
        if (answer.is_error())
            dropped += fmt::format("{}{} ({})", dropped.empty() ? "" : ", ", c.channels.at(0),
                                   answer.text);
    }
    deliver_subscriptions();
    if (!dropped.empty())
        set_error_text(fmt::format("{} refused SUBSCRIBE in the handshake; no longer subscribed "
                                   "to: {}",
                                   cfg_.to_redacted_url(), dropped));
    co_return error_code{};
}

} // namespace colock::redis::detail

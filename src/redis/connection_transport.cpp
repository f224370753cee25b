// A session's transport: the host resolved within the connect deadline, the socket connected (TCP
// or a unix socket) and, with config::use_tls, the TLS handshake, which tells a server that does
// not speak TLS from one that does not answer.
#include "connection_impl.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/write.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string_view>

namespace colock::redis::detail {

using namespace asio::experimental::awaitable_operators;
using steady_clock = std::chrono::steady_clock;

asio::awaitable<std::tuple<error_code, tcp::resolver::results_type>>
connection_impl::resolve(std::string host, std::uint16_t port, steady_clock::time_point deadline) {
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
    st->resolver.async_resolve(host, std::to_string(port),
                               [st](error_code ec, tcp::resolver::results_type results) {
                                   st->ec = ec;
                                   st->results = std::move(results);
                                   st->done = true;
                                   st->done_signal.cancel();
                               });
    if (!st->done)
        co_await st->done_signal.async_wait(nothrow_awaitable);
    if (st->done)
        co_return std::make_tuple(st->ec, std::move(st->results));
    st->resolver.cancel();
    auto cs = co_await asio::this_coro::cancellation_state;
    error_code const ec = is_cancelled(cs) ? error_code(asio::error::operation_aborted)
                                           : error_code(error::connect_timeout);
    co_return std::make_tuple(ec, tcp::resolver::results_type{});
}

bool prepare_tls(asio::ssl::stream<stream_socket&>& tls, std::string const& host,
                 bool verify_peer) {
    // SNI names hosts, never IP addresses (RFC 6066); the macro SSL_set_tlsext_host_name hides
    // an old-style cast. An address is still verified against the certificate's IP SANs.
    error_code not_an_address;
    (void)asio::ip::make_address(host, not_an_address);
    if (not_an_address && !::SSL_ctrl(tls.native_handle(), SSL_CTRL_SET_TLSEXT_HOSTNAME,
                                      TLSEXT_NAMETYPE_host_name, const_cast<char*>(host.c_str())))
        return false;
    if (verify_peer)
        tls.set_verify_callback(asio::ssl::host_name_verification(host));
    return true;
}

asio::awaitable<error_code>
connection_impl::open_transport(std::shared_ptr<session> s,
                                std::vector<stream_endpoint> endpoints) {
    co_await asio::this_coro::throw_if_cancelled(false);
    auto [cec, ep] = co_await asio::async_connect(s->socket, endpoints, nothrow_awaitable);
    if (cec)
        co_return cec;
    if (cfg_.unix_socket.empty())
        s->socket.set_option(tcp::no_delay(true), cec);
    if (cfg_.use_tls) {
        s->step = "TLS handshake";
        s->tls.emplace(s->socket, *tls_context_);
        if (!prepare_tls(*s->tls, s->target.host, cfg_.tls_verify_peer))
            co_return error_code(asio::error::invalid_argument);
        auto shaken =
            co_await (s->tls->async_handshake(asio::ssl::stream_base::client, nothrow_awaitable) ||
                      probe_plain_redis(ep));
        if (shaken.index() == 1) {
            std::string const& answer = std::get<1>(shaken);
            if (answer.empty())
                co_return asio::error::operation_aborted; // cancelled before it learned anything
            co_return connect_failed(
                *s, error::handshake_failed,
                fmt::format("the server does not speak TLS: it answers plain-text Redis on this "
                            "port (PING on a plain connection: {})",
                            printable_bytes(answer)));
        }
        auto [hec] = std::get<0>(shaken);
        if (answers_without_tls(hec))
            co_return connect_failed(
                *s, error::handshake_failed,
                fmt::format("the server does not speak TLS: its answer to the TLS client hello "
                            "is no TLS record (OpenSSL: {})",
                            hec.message()));
        if (hec)
            co_return hec;
    }
    co_return error_code{};
}

bool answers_without_tls(error_code ec) {
    if (ec.category() != asio::error::get_ssl_category())
        return false;
    // What OpenSSL says when the first bytes back are no TLS record header: a plain-text server
    // (an error line, an HTTP response, a banner).
    switch (ERR_GET_REASON(static_cast<unsigned long>(ec.value()))) {
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_PACKET_LENGTH_TOO_LONG:
    case SSL_R_HTTP_REQUEST:
    case SSL_R_HTTPS_PROXY_REQUEST:
    case SSL_R_UNKNOWN_PROTOCOL:
        return true;
    default:
        return false;
    }
}

// A plain Redis server is silent when a TLS client hello reaches it: its inline-command reader
// stops at the hello's first NUL byte and waits for the rest of a line that never comes, so the
// handshake would only end at connect_timeout (and a waiting co_lock would try again). So when the
// handshake has gone unanswered for a while, a socket of its own asks the same endpoint a
// plain-text PING. Completes with the answer when it is RESP; else it learns nothing and waits to
// be cancelled, leaving the verdict to the handshake or the deadline. A TLS server takes the PING
// for a failed handshake and closes that socket.
asio::awaitable<std::string> connection_impl::probe_plain_redis(stream_endpoint ep) {
    co_await asio::this_coro::throw_if_cancelled(false);
    auto cs = co_await asio::this_coro::cancellation_state;
    asio::steady_timer timer(strand_);
    timer.expires_after(std::min(cfg_.connect_timeout / 4, std::chrono::milliseconds{500}));
    co_await timer.async_wait(nothrow_awaitable);
    if (!is_cancelled(cs)) {
        stream_socket probe(strand_);
        auto [cec] = co_await probe.async_connect(ep, nothrow_awaitable);
        std::array<char, 64> answer{};
        std::size_t got = 0;
        if (!cec && !is_cancelled(cs)) {
            auto [wec, wrote] =
                co_await asio::async_write(probe, asio::buffer("PING\r\n", 6), nothrow_awaitable);
            if (!wec && !is_cancelled(cs)) {
                auto [rec, n] =
                    co_await probe.async_read_some(asio::buffer(answer), nothrow_awaitable);
                got = n;
            }
        }
        constexpr std::string_view resp3_types = "+-:$*%_,#!=(|~>";
        if (got > 0 && !is_cancelled(cs) && resp3_types.find(answer[0]) != std::string_view::npos)
            co_return std::string(answer.data(), got);
    }
    // Checked here, with no suspension before the wait: a cancellation that came while the probe
    // was busy reached no pending operation, and would not reach this wait either.
    if (!is_cancelled(cs)) {
        timer.expires_at(asio::steady_timer::time_point::max());
        co_await timer.async_wait(nothrow_awaitable);
    }
    co_return std::string();
}

} // namespace colock::redis::detail

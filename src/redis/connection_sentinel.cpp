// Redis Sentinel, the I/O: asking the sentinels where the primary is before each connection,
// and following +switch-master while connected. What is sent and how the answers are read is in
// sentinel.cpp.
#include "connection_impl.hpp"
#include "sentinel.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/write.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace colock::redis::detail {

using namespace asio::experimental::awaitable_operators;
using steady_clock = std::chrono::steady_clock;

namespace {

// One connection to a sentinel, for the few commands sent to it: what is written at once, read
// back in order; no reconnection. Used on the connection's strand only.
class sentinel_link {
public:
    sentinel_link(connection_impl::strand_type const& strand, asio::ssl::context* tls)
        : socket_(strand), tls_context_(tls) {}

    asio::awaitable<error_code> open(std::vector<stream_endpoint> endpoints, std::string host,
                                     bool verify_peer) {
        co_await asio::this_coro::throw_if_cancelled(false);
        auto [ec, ep] = co_await asio::async_connect(socket_, endpoints, nothrow_awaitable);
        if (ec)
            co_return ec;
        socket_.set_option(tcp::no_delay(true), ec);
        if (tls_context_ == nullptr)
            co_return error_code{};
        tls_.emplace(socket_, *tls_context_);
        if (!prepare_tls(*tls_, host, verify_peer))
            co_return error_code(asio::error::invalid_argument);
        auto [hec] =
            co_await tls_->async_handshake(asio::ssl::stream_base::client, nothrow_awaitable);
        co_return hec;
    }

    asio::awaitable<error_code> write(std::string payload) {
        co_await asio::this_coro::throw_if_cancelled(false);
        std::tuple<error_code, std::size_t> wrote;
        if (tls_)
            wrote = co_await asio::async_write(*tls_, asio::buffer(payload), nothrow_awaitable);
        else
            wrote = co_await asio::async_write(socket_, asio::buffer(payload), nothrow_awaitable);
        co_return std::get<0>(wrote);
    }

    // The next complete value, push or reply.
    asio::awaitable<std::tuple<error_code, resp3::value>> read() {
        co_await asio::this_coro::throw_if_cancelled(false);
        auto cs = co_await asio::this_coro::cancellation_state;
        for (;;) {
            if (is_cancelled(cs))
                co_return std::make_tuple(error_code(asio::error::operation_aborted),
                                          resp3::value{});
            if (begin_ < buffer_.size()) {
                error_code pec;
                std::size_t const used =
                    parser_.consume(std::string_view(buffer_).substr(begin_), pec);
                if (pec)
                    co_return std::make_tuple(pec, resp3::value{});
                begin_ += used;
                if (parser_.done())
                    co_return std::make_tuple(error_code{}, parser_.release());
            }
            buffer_.erase(0, begin_);
            begin_ = 0;
            std::size_t const old_size = buffer_.size();
            buffer_.resize(old_size + 4096);
            auto into = asio::buffer(buffer_.data() + old_size, 4096);
            std::tuple<error_code, std::size_t> got;
            if (tls_)
                got = co_await tls_->async_read_some(into, nothrow_awaitable);
            else
                got = co_await socket_.async_read_some(into, nothrow_awaitable);
            buffer_.resize(old_size + std::get<1>(got));
            if (std::get<0>(got))
                co_return std::make_tuple(std::get<0>(got), resp3::value{});
        }
    }

    // The next reply, skipping pushes (a link that only asks receives none).
    asio::awaitable<std::tuple<error_code, resp3::value>> read_reply() {
        co_await asio::this_coro::throw_if_cancelled(false);
        for (;;) {
            auto got = co_await read();
            if (std::get<0>(got) || std::get<1>(got).type != resp3::type::push)
                co_return got;
        }
    }

    void close() {
        error_code ignored;
        socket_.close(ignored);
    }

private:
    stream_socket socket_;
    asio::ssl::context* tls_context_;
    std::optional<asio::ssl::stream<stream_socket&>> tls_;
    std::string buffer_;
    std::size_t begin_ = 0;
    resp3::parser parser_;
};

std::string cause_text(error_code ec) {
    return error_code(ec.value(), ec.category()).message();
}

// Open, HELLO, ask: the primary's address or what went wrong.
asio::awaitable<primary_answer> ask_over(std::shared_ptr<sentinel_link> link,
                                         std::vector<stream_endpoint> endpoints, std::string host,
                                         bool verify_peer, std::string payload,
                                         std::string master_name) {
    co_await asio::this_coro::throw_if_cancelled(false);
    if (error_code ec = co_await link->open(std::move(endpoints), std::move(host), verify_peer))
        co_return primary_answer{std::nullopt, cause_text(ec)};
    if (error_code ec = co_await link->write(std::move(payload)))
        co_return primary_answer{std::nullopt, cause_text(ec)};
    auto [hec, hello] = co_await link->read_reply();
    if (hec)
        co_return primary_answer{std::nullopt, cause_text(hec)};
    if (auto problem = read_sentinel_hello(hello); !problem.empty())
        co_return primary_answer{std::nullopt, std::move(problem)};
    auto [aec, address] = co_await link->read_reply();
    if (aec)
        co_return primary_answer{std::nullopt, cause_text(aec)};
    co_return read_primary_address(address, master_name);
}

// The first reason a link ended wins: the other branch of the ||, cancelled, has nothing to add.
void note_problem(std::string& problem, error_code ec) {
    if (problem.empty() && ec != asio::error::operation_aborted)
        problem = cause_text(ec);
}

// Reads what the sentinel sends until the follower has a verdict or the link fails.
asio::awaitable<void> follow_reads(std::shared_ptr<sentinel_link> link,
                                   std::shared_ptr<primary_follower> follower,
                                   std::shared_ptr<std::string> problem) {
    co_await asio::this_coro::throw_if_cancelled(false);
    auto cs = co_await asio::this_coro::cancellation_state;
    for (;;) {
        if (is_cancelled(cs))
            co_return; // missed by the read below: it came between two reads
        auto [ec, v] = co_await link->read();
        if (ec) {
            note_problem(*problem, ec);
            co_return;
        }
        auto const verdict = follower->on_value(v);
        if (verdict == primary_follower::verdict::failed && problem->empty())
            *problem = follower->problem();
        if (verdict != primary_follower::verdict::keep_reading)
            co_return;
    }
}

// Asks again every `interval`, and ends the link when an answer is missing: the first after
// `first_within`, later ones after an interval.
asio::awaitable<void> follow_asks(std::shared_ptr<sentinel_link> link,
                                  std::shared_ptr<primary_follower> follower,
                                  std::shared_ptr<std::string> problem, std::string ask,
                                  std::chrono::milliseconds first_within,
                                  std::chrono::milliseconds interval) {
    co_await asio::this_coro::throw_if_cancelled(false);
    auto cs = co_await asio::this_coro::cancellation_state;
    asio::steady_timer timer(co_await asio::this_coro::executor);
    std::uint64_t asked = 1; // with the hello
    auto wait = first_within;
    for (;;) {
        if (is_cancelled(cs))
            co_return; // missed by the wait below: it came between two operations
        timer.expires_after(wait);
        if (auto [tec] = co_await timer.async_wait(nothrow_awaitable); tec || is_cancelled(cs))
            co_return;
        if (follower->answers() < asked) {
            if (problem->empty())
                *problem = fmt::format("no answer to SENTINEL GET-MASTER-ADDR-BY-NAME within {} ms",
                                       wait.count());
            co_return;
        }
        if (error_code ec = co_await link->write(ask)) {
            note_problem(*problem, ec);
            co_return;
        }
        ++asked;
        wait = interval;
    }
}

} // namespace

asio::awaitable<std::tuple<std::string, std::vector<stream_endpoint>>>
connection_impl::resolve_sentinel(server_address where, steady_clock::time_point deadline) {
    co_await asio::this_coro::throw_if_cancelled(false);
    std::vector<stream_endpoint> endpoints;
    auto [ec, resolved] = co_await resolve(where.host, where.port, deadline);
    if (ec == error::connect_timeout)
        co_return std::make_tuple(std::string("timed out resolving the host name"), endpoints);
    if (ec)
        co_return std::make_tuple(cause_text(ec), endpoints);
    for (auto const& entry : resolved)
        endpoints.emplace_back(entry.endpoint());
    co_return std::make_tuple(std::string(), std::move(endpoints));
}

asio::awaitable<primary_answer> connection_impl::ask_sentinel(server_address where,
                                                              steady_clock::time_point deadline) {
    co_await asio::this_coro::throw_if_cancelled(false);
    auto [unresolved, endpoints] = co_await resolve_sentinel(where, deadline);
    if (!unresolved.empty())
        co_return primary_answer{std::nullopt, std::move(unresolved)};
    auto link = std::make_shared<sentinel_link>(strand_, tls_context_.get());
    asio::steady_timer timer(strand_);
    timer.expires_at(deadline);
    auto const started = steady_clock::now();
    auto asked = co_await (ask_over(link, std::move(endpoints), where.host, cfg_.tls_verify_peer,
                                    std::string(sentinel_hello(cfg_, false).payload()),
                                    cfg_.sentinel.master_name) ||
                           timer.async_wait(nothrow_awaitable));
    link->close();
    if (asked.index() == 1)
        co_return primary_answer{
            std::nullopt,
            fmt::format(
                "no answer within {} ms",
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - started).count())};
    co_return std::get<0>(std::move(asked));
}

asio::awaitable<error_code> connection_impl::locate_primary(std::shared_ptr<session> s) {
    co_await asio::this_coro::throw_if_cancelled(false);
    auto cs = co_await asio::this_coro::cancellation_state;
    auto const& sentinels = cfg_.sentinel.sentinels;
    std::size_t const n = sentinels.size();
    std::string answers;
    for (std::size_t i = 0; i < n; ++i) {
        std::size_t const index = (preferred_sentinel_ + i) % n;
        // What is left of connect_timeout, shared among the sentinels not asked yet: a sentinel
        // that does not answer leaves time for the others.
        auto const now = steady_clock::now();
        auto const share = (std::max(s->deadline, now) - now) / static_cast<int>(n - i);
        auto answer = co_await ask_sentinel(sentinels[index], now + share);
        if (s->detached || session_ != s || is_cancelled(cs))
            co_return asio::error::operation_aborted;
        if (answer.address) {
            preferred_sentinel_ = index;
            s->named_by = index;
            s->target = *answer.address;
            {
                // Its own block: a lock held at a co_return lives as long as GCC 12 keeps the
                // frame's locals, which need not end there.
                std::lock_guard lock(error_mutex_);
                endpoint_text_ = fmt::format("primary '{}' at {}", cfg_.sentinel.master_name,
                                             address_text(s->target));
            }
            co_return error_code{};
        }
        answers += fmt::format("{}sentinel {}: {}", answers.empty() ? "" : "; ",
                               address_text(sentinels[index]), answer.problem);
    }
    {
        std::lock_guard lock(error_mutex_);
        endpoint_text_ = cfg_.endpoint_text();
    }
    co_return connect_failed(*s, error::no_primary_address, answers);
}

asio::awaitable<connection_impl::follow_result>
connection_impl::follow_sentinel(std::shared_ptr<session> s, server_address where) {
    co_await asio::this_coro::throw_if_cancelled(false);
    follow_result result;
    auto const deadline = steady_clock::now() + cfg_.connect_timeout;
    auto [unresolved, endpoints] = co_await resolve_sentinel(where, deadline);
    if (!unresolved.empty()) {
        result.problem = std::move(unresolved);
        co_return result;
    }
    auto link = std::make_shared<sentinel_link>(strand_, tls_context_.get());
    asio::steady_timer timer(strand_);
    timer.expires_at(deadline);
    auto opened = co_await (link->open(std::move(endpoints), where.host, cfg_.tls_verify_peer) ||
                            timer.async_wait(nothrow_awaitable));
    if (opened.index() == 1 || std::get<0>(opened)) {
        link->close();
        result.problem = opened.index() == 1 ? fmt::format("no connection within {} ms",
                                                           cfg_.connect_timeout.count())
                                             : cause_text(std::get<0>(opened));
        co_return result;
    }
    auto follower = std::make_shared<primary_follower>(cfg_.sentinel.master_name, s->target);
    auto problem = std::make_shared<std::string>();
    if (error_code ec = co_await link->write(std::string(sentinel_hello(cfg_, true).payload()))) {
        link->close();
        result.problem = cause_text(ec);
        co_return result;
    }
    // Asked again every health-check interval, which finds a silent sentinel; with health
    // checks off, every connect_timeout all the same: a sentinel link that died unnoticed would
    // miss every failover.
    auto const ask_every =
        cfg_.health_check_interval.count() > 0 ? cfg_.health_check_interval : cfg_.connect_timeout;
    co_await (follow_reads(link, follower, problem) ||
              follow_asks(link, follower, problem,
                          std::string(sentinel_ask_primary(cfg_).payload()), cfg_.connect_timeout,
                          ask_every));
    link->close();
    result.answered = follower->answers() > 0;
    result.verdict = follower->outcome();
    if (result.verdict == primary_follower::verdict::moved ||
        result.verdict == primary_follower::verdict::disagrees)
        result.moved_to = follower->moved_to();
    result.problem = problem->empty() ? std::string("the session ended") : *problem;
    co_return result;
}

asio::awaitable<error_code> connection_impl::watch_primary(std::shared_ptr<session> s) {
    co_await asio::this_coro::throw_if_cancelled(false);
    auto cs = co_await asio::this_coro::cancellation_state;
    auto const& sentinels = cfg_.sentinel.sentinels;
    std::size_t const n = sentinels.size();
    auto backoff = cfg_.reconnect_initial_delay;
    asio::steady_timer pause(strand_);
    std::string last_problems;
    for (;;) {
        std::string problems;
        for (std::size_t i = 0; i < n; ++i) {
            std::size_t const index = (preferred_sentinel_ + i) % n;
            auto followed = co_await follow_sentinel(s, sentinels[index]);
            if (s->detached || session_ != s || is_cancelled(cs))
                co_return asio::error::operation_aborted;
            std::string const sentinel_text = address_text(sentinels[index]);
            // An answer naming another primary moves the connection as +switch-master does:
            // the old primary says ROLE master for seconds after a failover, so the server
            // cannot tell a missed switch from a sentinel that is behind. (Which sentinel is
            // right is in their config epochs: not read yet.)
            if (followed.moved_to) {
                preferred_sentinel_ = index;
                log(log_level::warning,
                    fmt::format("sentinel {} says the primary '{}' moved from {} to {}: "
                                "reconnecting there",
                                sentinel_text, cfg_.sentinel.master_name, address_text(s->target),
                                address_text(*followed.moved_to)));
                co_return error::primary_changed;
            }
            if (followed.answered)
                backoff = cfg_.reconnect_initial_delay; // it worked for a while
            problems += fmt::format("{}sentinel {}: {}", problems.empty() ? "" : "; ",
                                    sentinel_text, followed.problem);
        }
        // The primary stays usable; only a failover would go unnoticed until the connection
        // to the old primary fails. Said once per change of what went wrong.
        std::string text = fmt::format("no sentinel to follow failovers of '{}' through ({})",
                                       cfg_.sentinel.master_name, problems);
        if (problems != last_problems)
            set_error_text(text);
        else if (logs(log_level::debug))
            log(log_level::debug, text);
        last_problems = std::move(problems);
        pause.expires_after(backoff);
        co_await pause.async_wait(nothrow_awaitable);
        if (s->detached || session_ != s || is_cancelled(cs))
            co_return asio::error::operation_aborted;
        backoff = std::min(backoff * 2, cfg_.reconnect_max_delay);
    }
}

} // namespace colock::redis::detail

#include "worker_support.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/this_coro.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <istream>
#include <stdexcept>

namespace colock::reliability {

namespace {

std::int64_t parse(std::string const& key, std::string const& v) {
    std::int64_t n = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc{} || end != v.data() + v.size())
        throw std::invalid_argument(fmt::format("worker: --{} needs a number, not '{}'", key, v));
    return n;
}

// "url,url,..." as its URLs, as COLOCK_REDLOCK_URLS lists them: a piece without "://" belongs
// to the URL before it (a redis-sentinel:// URL lists its sentinels with commas).
std::vector<std::string> split_urls(std::string_view list) {
    std::vector<std::string> urls;
    while (!list.empty()) {
        auto const comma = list.find(',');
        auto const piece = list.substr(0, comma);
        list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
        if (piece.empty())
            continue;
        if (urls.empty() || piece.find("://") != std::string_view::npos)
            urls.emplace_back(piece);
        else
            urls.back().append(",").append(piece);
    }
    return urls;
}

} // namespace

arguments::arguments(int argc, char** argv, int first) {
    for (int i = first; i < argc; i += 2) {
        std::string_view key = argv[i];
        if (!key.starts_with("--") || i + 1 >= argc)
            throw std::invalid_argument(fmt::format("worker: bad argument '{}'", key));
        values_[std::string(key.substr(2))] = argv[i + 1];
    }
}

std::string arguments::text(std::string const& key) const {
    auto it = values_.find(key);
    if (it == values_.end())
        throw std::invalid_argument(fmt::format("worker: --{} is required", key));
    return it->second;
}

std::string arguments::text_or(std::string const& key, std::string fallback) const {
    auto it = values_.find(key);
    return it == values_.end() ? fallback : it->second;
}

std::int64_t arguments::number(std::string const& key) const {
    return parse(key, text(key));
}

std::int64_t arguments::number_or(std::string const& key, std::int64_t fallback) const {
    auto it = values_.find(key);
    return it == values_.end() ? fallback : parse(key, it->second);
}

void say(std::string const& line) {
    std::fputs((line + "\n").c_str(), stdout);
    std::fflush(stdout);
}

void report_exception(std::exception_ptr const& e) {
    try {
        std::rethrow_exception(e);
    } catch (std::exception const& ex) {
        say(fmt::format("error {}", ex.what()));
    }
}

redis::config worker_config(arguments const& args, std::string const& url) {
    auto cfg = redis::config::from_url(url);
    cfg.client_name = fmt::format("colock-worker-{}", args.text("proc"));
    cfg.connect_timeout = milliseconds(args.number_or("connect-timeout-ms", 1000));
    cfg.health_check_interval = milliseconds(args.number_or("health-ms", 500));
    cfg.reconnect_initial_delay = 10ms;
    cfg.reconnect_max_delay = 200ms;
    return cfg;
}

lock_client::lock_client(asio::any_io_executor ex, arguments const& args) {
    auto const list = args.text_or("urls", "");
    auto const urls = list.empty() ? std::vector{args.text("url")} : split_urls(list);
    for (auto const& url : urls) {
        conns_.push_back(std::make_unique<redis::connection>(ex, worker_config(args, url)));
        primaries_.push_back(conns_.back().get());
    }
    locks_ = list.empty() ? std::make_unique<locker>(*conns_.front())
                          : std::make_unique<locker>(primaries_);
}

void lock_client::close() {
    for (auto& c : conns_)
        c->close();
}

std::uint64_t lock_client::reconnect_count() const noexcept {
    std::uint64_t n = 0;
    for (auto const& c : conns_)
        n += c->reconnect_count();
    return n;
}

lock_options worker_lock_options(arguments const& args) {
    lock_options opt;
    opt.ttl = milliseconds(args.number("ttl-ms"));
    opt.renew_interval = milliseconds(args.number("renew-ms"));
    opt.retry.initial = 10ms;
    opt.retry.max = milliseconds(args.number_or("retry-max-ms", 200));
    opt.cohort_limit = static_cast<std::size_t>(args.number_or("cohort-limit", 16));
    return opt;
}

asio::awaitable<void> sleep_for(std::chrono::microseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    co_await t.async_wait(use_tuple);
}

void close_after(asio::io_context& ctx, lock_client& client, steady_clock_deadline until) {
    asio::co_spawn(
        ctx,
        [&ctx, &client, until]() -> asio::awaitable<void> {
            asio::steady_timer timer(ctx, until);
            co_await timer.async_wait(use_tuple);
            timer.expires_after(std::chrono::milliseconds(1500));
            co_await timer.async_wait(use_tuple);
            client.close();
        },
        asio::detached);
}

asio::awaitable<void> read_commands(asio::posix::stream_descriptor& in,
                                    std::function<bool(std::string const&)> on_line) {
    asio::streambuf buf;
    for (;;) {
        auto [ec, n] = co_await asio::async_read_until(in, buf, '\n', use_tuple);
        if (ec)
            co_return;
        std::istream is(&buf);
        std::string line;
        std::getline(is, line);
        if (!on_line(line))
            co_return;
    }
}

int run_commanded(asio::io_context& ctx, lock_client& client, asio::posix::stream_descriptor& in,
                  std::function<asio::awaitable<void>()> body) {
    int rc = 0;
    asio::co_spawn(ctx, std::move(body), report_failure(rc, [&] {
                       client.close();
                       in.close();
                   }));
    ctx.run();
    return rc;
}

std::function<bool(std::string const&)>
holder_commands(colock::test::fenced_store& store, std::function<std::int64_t()> fence,
                std::function<std::string()> state, std::string end, bool& ended,
                std::function<void(std::string)> redis_write) {
    return [&store, fence = std::move(fence), state = std::move(state), end = std::move(end),
            &ended, redis_write = std::move(redis_write)](std::string const& line) {
        if (line.starts_with("write ")) {
            bool const ok = store.write(fence(), line.substr(6));
            say(ok ? "write accepted" : "write refused");
            return true;
        }
        if (line.starts_with("rwrite ") && redis_write) {
            redis_write(line.substr(7));
            return true;
        }
        if (line == "state") {
            say(state());
            return true;
        }
        ended = line == end;
        return false;
    };
}

asio::awaitable<void> end_as_asked(bool asked, std::function<asio::awaitable<bool>()> end,
                                   std::string_view verb, std::string_view done) {
    bool ended = false;
    if (asked) {
        try {
            ended = co_await end();
        } catch (boost::system::system_error const& e) {
            say(fmt::format("{} failed {}", verb, e.what()));
        }
    }
    say(fmt::format("{} {}", done, ended ? 1 : 0));
}

std::int64_t lease_end_ns(lock_guard const& g) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(g.lease_expiry().time_since_epoch())
        .count();
}

colock::test::holding tenure(lock_guard const& g, std::string holder, std::int64_t acquired_ns,
                             std::int64_t lost_ns) {
    colock::test::holding h;
    h.holder = std::move(holder);
    h.fence = g.fence();
    h.token = g.token();
    h.acquired_ns = acquired_ns;
    h.released_ns = colock::test::steady_now_ns();
    if (lost_ns != 0)
        h.released_ns = std::min(h.released_ns, lost_ns);
    h.lease_end_ns = lease_end_ns(g);
    return h;
}

} // namespace colock::reliability

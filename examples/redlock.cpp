// Redlock: one lock over three independent Redis servers. Take it (a majority of the servers
// must grant it within its validity), look at what each server holds for it, then let six
// coroutines in two lockers contend for it: one holder at a time, fences rising in the order
// the lock was taken, and hand-offs inside a locker with no round trip to the servers.
//
// Usage: colock_example_redlock [--urls redis://host:port,redis://host:port,redis://host:port]
// Without --urls it uses COLOCK_REDLOCK_URLS. scripts/with-redis.sh --redlock starts three
// throwaway servers and sets COLOCK_REDLOCK_URLS to their URLs.
#include <colock/colock.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;
using namespace std::chrono_literals;

namespace {

std::string const lock_name = "example:redlock";

// "url,url,..." as its URLs. A URL starts with its scheme; a piece without "://" belongs to the
// URL before it (a redis-sentinel:// URL lists its sentinels with commas).
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

// How the lockers' acquisitions came about. Called on a locker's strand: it only adds.
struct acquisitions final : colock::lock_observer {
    std::atomic<int> from_primaries{0}, handed_locally{0};

    void on_acquired(colock::acquired_event const& e) override {
        if (e.how == colock::acquired_by::local_handoff)
            ++handed_locally;
        else
            ++from_primaries;
    }
};

// Prints what each primary holds for the lock, "H <fence> <locker> <token> <since> <queued>"
// while held (docs/operations.md: Keys and channels), and returns how many hold it for `guard`.
// Each primary numbers its own fences; the lease's fence is the largest its majority gave.
asio::awaitable<std::size_t>
show_primaries(std::vector<std::unique_ptr<colock::redis::connection>> const& conns,
               colock::lock_guard const& guard) {
    std::size_t ours = 0;
    for (std::size_t i = 0; i < conns.size(); ++i) {
        colock::resp3::request req;
        req.push("GET", "colock:{" + lock_name + "}");
        auto const resp = co_await conns[i]->co_exec(req);
        std::istringstream value{std::string(resp.at(0).as_string().value_or(""))};
        std::string state, fence, owner, token;
        value >> state >> fence >> owner >> token;
        bool const held_by_guard = state == "H" && token == guard.token();
        ours += held_by_guard ? 1 : 0;
        fmt::print("  primary {} ({}): {}\n", i + 1, conns[i]->get_config().endpoint_text(),
                   held_by_guard   ? fmt::format("held by this guard, its fence {}", fence)
                   : state.empty() ? std::string("no lock key")
                                   : fmt::format("{} {} (not this guard's)", state, fence));
    }
    co_return ours;
}

// What the contenders share. One thread runs them all, so plain members do.
struct tally {
    int holders = 0; // holding the lock right now: never more than one
    int acquisitions = 0;
    std::int64_t first_fence = 0;
    std::int64_t last_fence = 0;
    std::string failure; // the first thing that went wrong

    void fail(std::string what) {
        if (failure.empty())
            failure = std::move(what);
    }
};

// Takes the lock `rounds` times, each time for a short piece of work that stops if the lease
// is lost, and checks that it is alone and that its fence is above every earlier one.
asio::awaitable<void> contend(colock::locker& locker, colock::lock_options opt, tally& t,
                              int rounds) {
    auto const ex = co_await asio::this_coro::executor;
    for (int i = 0; i < rounds; ++i) {
        auto guard = co_await locker.co_lock(lock_name, opt);
        if (t.holders != 0)
            t.fail(fmt::format("fence {} was granted while another guard held the lock",
                               guard.fence()));
        if (guard.fence() <= t.last_fence)
            t.fail(fmt::format("fence {} came after fence {}", guard.fence(), t.last_fence));
        ++t.holders;
        ++t.acquisitions;
        t.last_fence = guard.fence();

        asio::steady_timer work{ex, 5ms};
        auto const ended = co_await (work.async_wait(asio::use_awaitable) || guard.wait_lost());
        if (ended.index() == 1)
            t.fail(fmt::format("the lease of fence {} was lost", guard.fence()));
        --t.holders;
        if (!co_await guard.release())
            t.fail(fmt::format("the lease of fence {} was gone at its unlock", guard.fence()));
    }
}

asio::awaitable<int> run(std::vector<colock::redis::config> cfgs) {
    auto const ex = co_await asio::this_coro::executor;
    // One connection per primary, each an ordinary connection that could serve other lockers
    // too. The lockers take them by pointer: they must outlive the lockers, so they come first.
    std::vector<std::unique_ptr<colock::redis::connection>> conns;
    std::vector<colock::redis::connection*> primaries;
    for (auto const& cfg : cfgs) {
        conns.push_back(std::make_unique<colock::redis::connection>(ex, cfg));
        primaries.push_back(conns.back().get());
    }
    // Connected here so that a primary that is down is reported at once; the locker itself
    // needs only a majority of them to answer.
    for (auto const& conn : conns)
        co_await conn->co_connect();

    colock::locker locker{primaries}; // refuses fewer than 3, an even number, one server twice
    colock::lock_options opt;
    opt.ttl = 10s;
    opt.wait_timeout = 30s;

    auto guard = co_await locker.co_lock(lock_name, opt);
    // The lease is safe until lease_expiry(): the ttl, less the time the attempt took and the
    // allowance for clock drift between the primaries (ttl x 1 % + 2 ms).
    auto const left = std::chrono::duration_cast<std::chrono::milliseconds>(
        guard.lease_expiry() - std::chrono::steady_clock::now());
    auto const drift = opt.ttl / 100 + 2ms;
    fmt::print("locked '{}' on a majority of {} primaries: fence {}, valid for {} ms more "
               "(ttl {} ms, less the attempt's time and {} ms of clock drift)\n",
               guard.name(), primaries.size(), guard.fence(), left.count(), opt.ttl.count(),
               drift.count());
    std::size_t const ours = co_await show_primaries(conns, guard);
    int status = 0;
    if (left <= 0ms || left > opt.ttl - drift) {
        fmt::print(stderr, "redlock: the validity left, {} ms, is not within (0, ttl - drift]\n",
                   left.count());
        status = 1;
    }
    if (ours < primaries.size() / 2 + 1) {
        fmt::print(stderr, "redlock: only {} of {} primaries hold the lock for its guard\n", ours,
                   primaries.size());
        status = 1;
    }

    // A second locker over the same connections: to the lock, another process.
    colock::locker other{primaries};
    auto busy = co_await other.co_try_lock(lock_name, opt);
    fmt::print("another locker's co_try_lock while held: {}\n",
               busy ? "acquired?!" : "busy, as expected");
    bool const released = co_await guard.release();
    fmt::print("unlocked: {}\n", released ? "released" : "was not ours any more");
    if (busy || !released)
        status = 1;

    // Six coroutines, three in each locker, take the lock three times each. Between the
    // lockers the primaries hand the lock over; inside a locker the lease passes to the next
    // waiter without a round trip (cohort hand-off), which is where a quorum's cost is paid back.
    auto const counts = std::make_shared<acquisitions>();
    locker.set_observer(counts);
    other.set_observer(counts);
    tally t;
    t.first_fence = t.last_fence = guard.fence();
    co_await (contend(locker, opt, t, 3) && contend(locker, opt, t, 3) &&
              contend(locker, opt, t, 3) && contend(other, opt, t, 3) &&
              contend(other, opt, t, 3) && contend(other, opt, t, 3));
    fmt::print("6 coroutines in 2 lockers took the lock {} times, one at a time, fences rising "
               "from {} to {}; {} passed on inside a locker, {} from the primaries\n",
               t.acquisitions, t.first_fence, t.last_fence, counts->handed_locally.load(),
               counts->from_primaries.load());
    if (!t.failure.empty()) {
        fmt::print(stderr, "redlock: {}\n", t.failure);
        status = 1;
    }

    for (auto const& conn : conns)
        conn->close(); // stops the connections' background work, so io.run() returns
    co_return status;
}

} // namespace

int main(int argc, char** argv) {
    std::string urls;
    if (char const* from_env = std::getenv("COLOCK_REDLOCK_URLS"); from_env && *from_env)
        urls = from_env;
    if (argc == 3 && std::string_view(argv[1]) == "--urls") {
        urls = argv[2];
    } else if (argc != 1) {
        fmt::print(stderr, "usage: {} [--urls redis://host:port,redis://host:port,...]\n", argv[0]);
        return 2;
    }
    if (urls.empty()) {
        fmt::print(stderr, "redlock: no URLs: pass --urls or set COLOCK_REDLOCK_URLS\n");
        return 2;
    }

    std::vector<colock::redis::config> cfgs;
    std::string servers; // for messages: the URLs without their passwords
    for (auto const& url : split_urls(urls)) {
        boost::system::error_code ec;
        std::string reason;
        cfgs.push_back(colock::redis::config::from_url(url, ec, &reason));
        if (ec) {
            fmt::print(stderr, "redlock: bad URL: {}\n", reason);
            return 2;
        }
        servers += (servers.empty() ? "" : ",") + cfgs.back().to_redacted_url();
    }

    try {
        asio::io_context io;
        int status = 1;
        asio::co_spawn(io, run(std::move(cfgs)), [&](std::exception_ptr failure, int result) {
            if (failure)
                std::rethrow_exception(failure); // out of io.run(), into the catch below
            status = result;
        });
        io.run();
        return status;
    } catch (std::exception const& e) {
        fmt::print(stderr, "redlock: {} (primaries {})\n", e.what(), servers);
        return 1;
    }
}

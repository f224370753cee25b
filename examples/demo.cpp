// colock demo: a distributed lock serialises refunds on one account.
//
// Three "workers" stand for three processes: each has its own Redis connection and its own
// colock::locker, and runs 20 coroutines. Every coroutine takes the lock "demo:refund:acct-42"
// and does a read-modify-write of the account's balance (GET, think for a moment, SET) that
// would lose updates without the lock. Then the demo shows the other tools:
//   - co_try_lock: one attempt that comes back empty while someone else holds the lock;
//   - wait_lost: `co_await (work() || guard.wait_lost())` stops the work when the lease is
//     taken away (here: someone DELetes the lock key from outside);
//   - cancellation: co_lock raced against a timer with `||`, and lock_options::wait_timeout.
// The final balance must equal the number of increments (exit status 1 otherwise).
//
// Usage: colock_demo [--url redis://host:port] [--workers N] [--coroutines N] [--rounds N]
// Without --url it uses COLOCK_REDIS_URL.
#include <colock/colock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace asio = boost::asio;
namespace redis = colock::redis;
namespace resp3 = colock::resp3;
using namespace asio::experimental::awaitable_operators;
using namespace std::chrono_literals;

namespace {

using steady = std::chrono::steady_clock;

constexpr char lock_name[] = "demo:refund:acct-42";
// Acquisitions told in full; the rest are summed up.
constexpr std::int64_t story_lines = 8;

constexpr std::string_view usage_text =
    R"(usage: colock_demo [--url redis://host:port] [--workers N] [--coroutines N] [--rounds N]

  --url URL         Redis server (default: $COLOCK_REDIS_URL)
  --workers N       simulated processes, each with its own connection and locker (default 3)
  --coroutines N    coroutines per worker (default 20)
  --rounds N        refunds per coroutine, each one read-modify-write under the lock (default 2)
)";

struct usage_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct options {
    std::string url;
    std::int64_t workers = 3;
    std::int64_t coroutines = 20;
    std::int64_t rounds = 2;
    bool help = false;
};

std::int64_t parse_count(std::string_view flag, std::string_view text, std::int64_t max) {
    std::int64_t n = 0;
    auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc{} || end != text.data() + text.size() || n < 1 || n > max)
        throw usage_error(
            fmt::format("{}: \"{}\" is not a whole number between 1 and {}", flag, text, max));
    return n;
}

options parse_options(int argc, char** argv) {
    options opts;
    if (char const* from_env = std::getenv("COLOCK_REDIS_URL"))
        opts.url = from_env;
    for (int i = 1; i < argc; ++i) {
        std::string_view const arg = argv[i];
        if (arg == "--help" || arg == "-h") {
            opts.help = true;
            continue;
        }
        if (arg != "--url" && arg != "--workers" && arg != "--coroutines" && arg != "--rounds")
            throw usage_error(fmt::format("unknown argument \"{}\"", arg));
        if (i + 1 >= argc)
            throw usage_error(fmt::format("{} needs a value", arg));
        std::string_view const value = argv[++i];
        if (arg == "--url")
            opts.url = value;
        else if (arg == "--workers")
            opts.workers = parse_count(arg, value, 26);
        else if (arg == "--coroutines")
            opts.coroutines = parse_count(arg, value, 1000);
        else
            opts.rounds = parse_count(arg, value, 1000);
    }
    if (opts.url.empty() && !opts.help)
        throw usage_error("no server: pass --url redis://host:port or set COLOCK_REDIS_URL");
    return opts;
}

/// One simulated process: its own connection and locker.
struct worker {
    std::string name; // "worker-A"
    std::unique_ptr<redis::connection> conn;
    std::unique_ptr<colock::locker> locker;
    std::int64_t acquisitions = 0;
    double total_wait_ms = 0;
    double max_wait_ms = 0;
};

/// What every coroutine of part 1 shares (one thread: no races, only interleavings).
struct refund_state {
    explicit refund_state(asio::any_io_executor const& ex) : all_done(ex) {}
    std::string balance_key;
    std::int64_t running = 0;
    std::int64_t acquisitions = 0;
    std::int64_t holders = 0; // inside the lock right now: must never exceed 1
    std::int64_t last_fence = 0;
    std::string first_failure;
    asio::steady_timer all_done;

    void fail(std::string what) {
        if (first_failure.empty())
            first_failure = std::move(what);
    }
};

double ms_since(steady::time_point t) {
    return std::chrono::duration<double, std::milli>(steady::now() - t).count();
}

asio::awaitable<void> pause(std::chrono::microseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    co_await t.async_wait(asio::use_awaitable);
}

asio::awaitable<redis::response> exec1(redis::connection& conn, std::string_view command,
                                       std::string_view key) {
    resp3::request req;
    req.push(command, key);
    co_return co_await conn.co_exec(std::move(req));
}

asio::awaitable<void> refund_coroutine(worker* w, std::shared_ptr<refund_state> state,
                                       std::int64_t id, std::int64_t rounds, std::uint32_t seed) {
    std::minstd_rand rng(seed);
    std::uniform_int_distribution<int> think_us(200, 1500);
    try {
        for (std::int64_t round = 0; round < rounds; ++round) {
            auto const asked = steady::now();
            auto guard = co_await w->locker->co_lock(lock_name);
            double const waited = ms_since(asked);
            ++state->holders;
            if (state->holders > 1)
                state->fail(fmt::format("{} holders at once!", state->holders));
            if (guard.fence() <= state->last_fence)
                state->fail(
                    fmt::format("fence went from {} to {}", state->last_fence, guard.fence()));
            state->last_fence = guard.fence();
            w->acquisitions += 1;
            w->total_wait_ms += waited;
            w->max_wait_ms = std::max(w->max_wait_ms, waited);

            // The read-modify-write the lock protects: without it, two coroutines would read
            // the same balance and one refund would be lost.
            auto const read = co_await exec1(*w->conn, "GET", state->balance_key);
            std::int64_t balance = 0;
            if (auto text = read.at(0).as_string())
                std::from_chars(text->data(), text->data() + text->size(), balance);
            co_await pause(std::chrono::microseconds{think_us(rng)});
            resp3::request write;
            write.push("SET", state->balance_key, balance + 1);
            co_await w->conn->co_exec(std::move(write));

            if (++state->acquisitions <= story_lines)
                fmt::print("  {}/{:<2} got the lock after {:6.2f} ms  fence {:>3}  balance {} -> "
                           "{}\n",
                           w->name, id, waited, guard.fence(), balance, balance + 1);
            --state->holders;
            if (!co_await guard.release())
                state->fail(
                    fmt::format("{}/{}: the lock was no longer ours at unlock", w->name, id));
        }
    } catch (std::exception const& e) {
        state->fail(fmt::format("{}/{}: {}", w->name, id, e.what()));
    }
    if (--state->running == 0)
        state->all_done.cancel();
}

/// A long job in steps; cancelled between steps when the lease goes.
asio::awaitable<void> refund_batch(std::shared_ptr<int> steps_done) {
    for (int step = 1; step <= 50; ++step) {
        co_await pause(100ms);
        *steps_done = step;
    }
}

/// Somebody else deletes the lock key: an operator, a FLUSHDB, or an expiry during a GC pause.
asio::awaitable<void> outsider_deletes(redis::connection* conn, std::string key,
                                       std::chrono::milliseconds after) {
    co_await pause(after);
    co_await exec1(*conn, "DEL", key);
    fmt::print("  outsider: DEL {}  (the lease is gone behind the holder's back)\n", key);
}

std::string unique_prefix() {
    std::random_device random;
    return fmt::format("colock:demo:{}-{:08x}:", ::getpid(), random());
}

asio::awaitable<int> run_demo(redis::config cfg, options opts) {
    auto const ex = co_await asio::this_coro::executor;
    auto const prefix = unique_prefix();
    auto const lock_key = fmt::format("{}{{{}}}", prefix, lock_name);

    fmt::print("Connecting {} workers to {} ...\n", opts.workers, cfg.to_redacted_url());
    std::vector<worker> workers(static_cast<std::size_t>(opts.workers));
    for (std::size_t i = 0; i < workers.size(); ++i) {
        auto& w = workers[i];
        w.name = fmt::format("worker-{}", static_cast<char>('A' + i));
        w.conn = std::make_unique<redis::connection>(ex, cfg);
        if (auto [ec] = co_await w.conn->async_connect(asio::as_tuple(asio::use_awaitable)); ec) {
            auto const reason = w.conn->last_error_text();
            fmt::print(stderr, "colock_demo: {}\n",
                       reason.empty() ? fmt::format("cannot connect to {}: {}",
                                                    cfg.to_redacted_url(), ec.message())
                                      : reason);
            co_return 1;
        }
        w.locker = std::make_unique<colock::locker>(*w.conn, prefix);
    }
    redis::connection outsider(ex, cfg);
    co_await outsider.async_connect(asio::use_awaitable);
    int status = 0;

    // ------------------------------------------------------------------ 1. refunds
    auto state = std::make_shared<refund_state>(ex);
    state->balance_key = prefix + "balance:acct-42";
    std::int64_t const expected = opts.workers * opts.coroutines * opts.rounds;
    fmt::print("\n1. {} workers x {} coroutines x {} refunds compete for lock '{}'\n"
               "   (Redis key {}); each refund is GET balance, think, SET balance + 1.\n",
               opts.workers, opts.coroutines, opts.rounds, lock_name, lock_key);
    auto const started = steady::now();
    state->running = opts.workers * opts.coroutines;
    state->all_done.expires_after(60s);
    std::uint32_t seed = 1;
    for (auto& w : workers)
        for (std::int64_t id = 0; id < opts.coroutines; ++id)
            asio::co_spawn(ex, refund_coroutine(&w, state, id, opts.rounds, seed++),
                           asio::detached);
    co_await state->all_done.async_wait(asio::as_tuple(asio::use_awaitable));
    double const elapsed = ms_since(started);
    if (state->running > 0) {
        state->fail(fmt::format("{} coroutines still running after 60 s", state->running));
    }
    if (expected > story_lines)
        fmt::print("  ... and {} more acquisitions\n", expected - story_lines);
    fmt::print("   {:<10} {:>8} {:>14} {:>12}\n", "", "refunds", "mean wait ms", "max wait ms");
    for (auto const& w : workers)
        fmt::print("   {:<10} {:>8} {:>14.2f} {:>12.2f}\n", w.name, w.acquisitions,
                   w.acquisitions ? w.total_wait_ms / static_cast<double>(w.acquisitions) : 0.0,
                   w.max_wait_ms);

    auto const final_read = co_await exec1(outsider, "GET", state->balance_key);
    std::int64_t balance = -1;
    if (auto text = final_read.at(0).as_string())
        std::from_chars(text->data(), text->data() + text->size(), balance);
    fmt::print("   {} refunds in {:.0f} ms; fences strictly increasing up to {}; never two holders "
               "at once: {}\n",
               state->acquisitions, elapsed, state->last_fence,
               state->first_failure.empty() ? "yes" : "NO");
    if (balance == expected && state->first_failure.empty()) {
        fmt::print("   final balance {} = {} refunds: no update lost.\n", balance, expected);
    } else {
        fmt::print(stderr, "colock_demo: balance {} (expected {}); {}\n", balance, expected,
                   state->first_failure.empty() ? "no other failure" : state->first_failure);
        status = 1;
    }

    auto& a = workers.front();
    auto& b = workers.size() > 1 ? workers[1] : workers.front();

    // ------------------------------------------------------------------ 2. co_try_lock
    fmt::print("\n2. co_try_lock: one attempt, never waits\n");
    {
        auto held = co_await a.locker->co_lock(lock_name);
        fmt::print("  {} holds the lock (fence {})\n", a.name, held.fence());
        auto attempt = co_await b.locker->co_try_lock(lock_name);
        fmt::print("  {}: co_try_lock -> {}\n", b.name,
                   attempt ? "acquired?! (wrong)" : "empty optional: somebody holds it");
        if (attempt)
            status = 1;
        co_await held.release();
        fmt::print("  {} unlocks\n", a.name);
        auto second = co_await b.locker->co_try_lock(lock_name);
        if (second) {
            fmt::print("  {}: co_try_lock -> acquired, fence {}\n", b.name, second->fence());
            co_await second->release();
        } else {
            fmt::print(stderr, "colock_demo: co_try_lock of a free lock came back empty\n");
            status = 1;
        }
    }

    // ------------------------------------------------------------------ 3. wait_lost
    fmt::print("\n3. wait_lost: the holder's work stops when the lease is lost\n");
    {
        colock::lock_options opt;
        opt.ttl = 3s;
        opt.renew_interval = 200ms; // the renewal is what notices the loss
        auto guard = co_await a.locker->co_lock(lock_name, opt);
        fmt::print("  {} holds the lock (fence {}), starts a 5 s refund batch under "
                   "`co_await (refund_batch() || guard.wait_lost())`\n",
                   a.name, guard.fence());
        asio::co_spawn(ex, outsider_deletes(&outsider, lock_key, 450ms), asio::detached);
        auto const batch_started = steady::now();
        auto steps = std::make_shared<int>(0);
        auto const winner = co_await (refund_batch(steps) || guard.wait_lost());
        if (winner.index() == 1 && guard.lost()) {
            fmt::print("  {}: lease lost after {:.0f} ms -> batch cancelled after {} of 50 steps; "
                       "guard.lost() = true\n",
                       a.name, ms_since(batch_started), *steps);
        } else {
            fmt::print(stderr, "colock_demo: the batch was not stopped by the lost lease\n");
            status = 1;
        }
        bool const was_ours = co_await guard.release();
        fmt::print("  {}: release() -> {} (nothing to give back)\n", a.name, was_ours);
        if (was_ours)
            status = 1;
    }

    // ------------------------------------------------------------------ 4. cancellation
    fmt::print("\n4. Giving up: co_lock honours cancellation and wait_timeout\n");
    {
        auto held = co_await a.locker->co_lock(lock_name);
        fmt::print("  {} holds the lock (fence {})\n", a.name, held.fence());

        asio::steady_timer timer(ex, 200ms);
        auto const raced_at = steady::now();
        auto const raced =
            co_await (b.locker->co_lock(lock_name) || timer.async_wait(asio::use_awaitable));
        if (raced.index() == 1) {
            fmt::print("  {}: `co_lock(...) || timer(200 ms)` -> the timer won after {:.0f} ms; "
                       "the co_lock was cancelled\n",
                       b.name, ms_since(raced_at));
        } else {
            fmt::print(stderr, "colock_demo: co_lock won against a held lock\n");
            status = 1;
        }

        colock::lock_options patient;
        patient.wait_timeout = 150ms;
        try {
            auto never = co_await b.locker->co_lock(lock_name, patient);
            fmt::print(stderr, "colock_demo: co_lock with wait_timeout acquired a held lock\n");
            status = 1;
        } catch (boost::system::system_error const& e) {
            fmt::print("  {}: wait_timeout 150 ms -> {}\n", b.name, e.what());
            if (e.code() != colock::error::timeout)
                status = 1;
        }

        auto const holder = co_await exec1(outsider, "GET", lock_key);
        // The lock key reads "H <fence> <locker> <token> <since> <queued>" while held.
        auto const value = std::string(holder.at(0).as_string().value_or(""));
        bool const still_a =
            value.starts_with("H ") && value.find(" " + held.token() + " ") != std::string::npos;
        fmt::print("  the lock still belongs to {}: {}\n", a.name, still_a ? "yes" : "NO");
        if (!still_a)
            status = 1;
        co_await held.release();
    }

    // ------------------------------------------------------------------ cleanup
    // A released lock key may stay as "F <fence>" for the rest of its lease, so that the next
    // fence is one more; it must not be held, and it must expire.
    auto const left = co_await exec1(outsider, "GET", lock_key);
    auto const left_value = std::string(left.at(0).as_string().value_or(""));
    auto const left_ttl = co_await exec1(outsider, "PTTL", lock_key);
    bool const key_free = left_value.empty() || (left_value.starts_with("F ") &&
                                                 left_ttl.at(0).as_integer().value_or(-1) > 0);
    if (!key_free) {
        fmt::print(stderr, "colock_demo: the lock key was left behind\n");
        status = 1;
    }
    resp3::request cleanup;
    cleanup.push("DEL", state->balance_key, lock_key, lock_key + ":q", lock_key + ":qd");
    co_await outsider.co_exec(std::move(cleanup));
    fmt::print("\ncleaned up; no lock left behind\n");

    for (auto& w : workers) {
        w.locker.reset();
        w.conn->close();
    }
    outsider.close();
    fmt::print("{}\n", status == 0 ? "OK" : "FAILED");
    co_return status;
}

} // namespace

int main(int argc, char** argv) {
    options opts;
    redis::config cfg;
    try {
        opts = parse_options(argc, argv);
        if (opts.help) {
            fmt::print("{}", usage_text);
            return 0;
        }
        cfg = redis::config::from_url(opts.url);
    } catch (std::exception const& e) { // usage_error, or from_url's system_error
        fmt::print(stderr, "colock_demo: {}\n(try --help)\n", e.what());
        return 2;
    }

    try {
        asio::io_context io{1}; // one thread: the coroutines interleave, they never race
        int status = 1;
        asio::co_spawn(io, run_demo(cfg, opts), [&](std::exception_ptr failure, int result) {
            if (failure)
                std::rethrow_exception(failure);
            status = result;
        });
        io.run();
        return status;
    } catch (std::exception const& e) {
        fmt::print(stderr, "colock_demo: {} (server {})\n", e.what(), cfg.to_redacted_url());
        return 1;
    }
}

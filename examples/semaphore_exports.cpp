// A semaphore: exports that a shared service can take only K at a time, started by many
// workers in several processes.
//
// The program stands for two processes (A and B, each its own connection and locker) whose
// workers all want to run an export. Each export takes a permit of one semaphore of capacity
// --limit, runs (here: --work milliseconds) raced against the permit's wait_lost(), and gives
// the permit back. While it runs it is counted in Redis, as a shared service would see it: the
// count goes up when an export starts and down when it ends, and the highest count is kept. The
// program checks itself: it exits 1 when it saw more than --limit exports running at once, when
// a permit was lost, or when not every export ran. Several instances may run at once against one
// server (they share the semaphore and the count); semaphore_exports_test.sh runs two.
//
// Usage: colock_example_semaphore_exports [--url URL] [--name NAME] [--process P]
//            [--exports N] [--limit K] [--work MS]
// Without --url it uses COLOCK_REDIS_URL, then redis://127.0.0.1:6379. Every line is flushed as
// it is printed:
//   free at start: F of K
//   export I (P-A): started, fence F, R running
//   export I (P-A): done
//   exports of P: N of N done, at most R running at once (limit K), F free at the end
#include <colock/colock.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;
using std::chrono::milliseconds;

namespace {

struct options {
    colock::redis::config cfg;
    std::string name = "example:exports";
    std::string process = "P"; // the label of this instance in the lines it prints
    int exports = 12;
    std::size_t limit = 3;
    milliseconds work{150};
};

// One line on stdout, flushed at once: a test reads it while this program runs.
template <class... Args>
void say(fmt::format_string<Args...> text, Args&&... args) {
    fmt::print("{}\n", fmt::format(text, std::forward<Args>(args)...));
    std::fflush(stdout);
}

// How many exports run now, counted at the server as the service they call would count them,
// over every process; the highest count is kept beside it. Keys `{NAME}:running` and
// `{NAME}:running:peak`, which lapse a minute after the last change.
class running_count {
public:
    running_count(colock::redis::connection& conn, std::string const& name)
        : conn_(conn)
        , now_key_(fmt::format("{{{}}}:running", name))
        , peak_key_(fmt::format("{{{}}}:running:peak", name)) {}

    // Counts an export in; returns how many run now, this one included.
    asio::awaitable<std::int64_t> enter() {
        static constexpr std::string_view script = R"lua(
local n = redis.call('INCR', KEYS[1])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end
redis.call('PEXPIRE', KEYS[1], 60000)
redis.call('PEXPIRE', KEYS[2], 60000)
return n
)lua";
        colock::resp3::request req;
        req.push("EVAL", script, "2", now_key_, peak_key_);
        auto const reply = co_await conn_.co_exec(std::move(req));
        co_return reply.at(0).as_integer().value_or(0);
    }

    // Counts an export out.
    asio::awaitable<void> leave() {
        colock::resp3::request req;
        req.push("DECR", now_key_);
        co_await conn_.co_exec(std::move(req));
    }

private:
    colock::redis::connection& conn_;
    std::string now_key_;
    std::string peak_key_;
};

// What this instance saw.
struct tally {
    int done = 0;
    int lost = 0;
    std::int64_t peak = 0;
    std::set<std::int64_t> fences;
};

// The export itself: a call to the service that takes a while.
asio::awaitable<void> do_export(milliseconds work) {
    asio::steady_timer t(co_await asio::this_coro::executor, work);
    co_await t.async_wait(asio::use_awaitable);
}

// One worker: waits for a permit, runs its export while the permit lasts, gives it back.
asio::awaitable<void> export_one(int id, std::string who, colock::semaphore& sem,
                                 running_count& running, tally& seen, options const& o) {
    colock::lock_options opt;
    opt.ttl = std::chrono::seconds{5};               // a worker that dies frees its permit in 5 s
    opt.wait_timeout = std::chrono::seconds{30};     // rather than wait for ever
    colock::permit p = co_await sem.co_acquire(opt); // first come, first served
    auto const now = co_await running.enter();
    seen.peak = std::max(seen.peak, now);
    seen.fences.insert(p.fence());
    say("export {} ({}): started, fence {}, {} running", id, who, p.fence(), now);

    // The export stops if the permit's lease is lost (its renewal failed): the service may then
    // already serve K others.
    auto const ended = co_await (do_export(o.work) || p.wait_lost());
    co_await running.leave(); // before the permit goes, so the count never runs ahead of it
    if (ended.index() == 1) {
        ++seen.lost;
        say("export {} ({}): permit lost, export stopped", id, who);
        co_return;
    }
    // The next waiting worker, of any process, starts now. False: the lease had run out.
    if (!co_await p.release()) {
        ++seen.lost;
        say("export {} ({}): permit expired before its release", id, who);
        co_return;
    }
    ++seen.done;
    say("export {} ({}): done", id, who);
}

asio::awaitable<int> run(options o) {
    auto const ex = co_await asio::this_coro::executor;
    // Two connections and lockers: the "processes" A and B of this instance.
    colock::redis::connection conn_a{ex, o.cfg};
    colock::redis::connection conn_b{ex, o.cfg};
    co_await conn_a.co_connect(); // its error names the endpoint
    co_await conn_b.co_connect();
    colock::locker locker_a{conn_a};
    colock::locker locker_b{conn_b};
    // Every user gives the same capacity; one that gives another is refused with an error.
    colock::semaphore sem_a{locker_a, o.name, o.limit};
    colock::semaphore sem_b{locker_b, o.name, o.limit};
    running_count running{conn_a, o.name};
    say("free at start: {} of {}", co_await sem_a.co_available(), o.limit);

    tally seen;
    std::vector<decltype(asio::co_spawn(ex, asio::awaitable<void>{}, asio::deferred))> workers;
    for (int i = 1; i <= o.exports; ++i) {
        bool const on_a = i % 2 == 1;
        workers.push_back(
            asio::co_spawn(ex,
                           export_one(i, fmt::format("{}-{}", o.process, on_a ? 'A' : 'B'),
                                      on_a ? sem_a : sem_b, running, seen, o),
                           asio::deferred));
    }
    auto [order, failures] =
        co_await asio::experimental::make_parallel_group(std::move(workers))
            .async_wait(asio::experimental::wait_for_all(), asio::use_awaitable);
    int failed = 0;
    for (auto const& f : failures) {
        if (!f)
            continue;
        ++failed;
        try {
            std::rethrow_exception(f);
        } catch (std::exception const& e) {
            fmt::print(stderr, "semaphore_exports: an export failed: {}\n", e.what());
        }
    }

    auto const free_at_end = co_await sem_a.co_available();
    say("exports of {}: {} of {} done, at most {} running at once (limit {}), {} free at the end",
        o.process, seen.done, o.exports, seen.peak, o.limit, free_at_end);
    conn_a.close(); // stops the connections' background work, so io.run() returns
    conn_b.close();

    int status = 0;
    if (seen.peak > static_cast<std::int64_t>(o.limit)) {
        fmt::print(stderr, "semaphore_exports: {} exports ran at once, above the limit {}\n",
                   seen.peak, o.limit);
        status = 1;
    }
    if (seen.done != o.exports || failed != 0 || seen.lost != 0) {
        fmt::print(stderr, "semaphore_exports: {} of {} exports done ({} failed, {} lost)\n",
                   seen.done, o.exports, failed, seen.lost);
        status = 1;
    }
    if (seen.fences.size() != static_cast<std::size_t>(seen.done + seen.lost)) {
        fmt::print(stderr, "semaphore_exports: two permits had the same fence\n");
        status = 1;
    }
    co_return status;
}

long long parse_number(std::string_view option, std::string const& text, long long max) {
    std::size_t used = 0;
    long long n = 0;
    try {
        n = std::stoll(text, &used);
    } catch (std::exception const&) {
        used = 0;
    }
    if (used == 0 || used != text.size() || n < 1 || n > max)
        throw std::invalid_argument(
            fmt::format("{} takes a number from 1 to {}, not '{}'", option, max, text));
    return n;
}

options parse(int argc, char** argv) {
    options o;
    std::string url = "redis://127.0.0.1:6379";
    if (char const* from_env = std::getenv("COLOCK_REDIS_URL"); from_env && *from_env)
        url = from_env;
    for (int i = 1; i < argc; ++i) {
        std::string_view const arg = argv[i];
        if (i + 1 >= argc)
            throw std::invalid_argument(fmt::format("unknown option '{}', or no value", arg));
        std::string const value = argv[++i];
        if (arg == "--url")
            url = value;
        else if (arg == "--name")
            o.name = value;
        else if (arg == "--process")
            o.process = value;
        else if (arg == "--exports")
            o.exports = static_cast<int>(parse_number(arg, value, 1000));
        else if (arg == "--limit")
            o.limit = static_cast<std::size_t>(parse_number(arg, value, 1000));
        else if (arg == "--work")
            o.work = milliseconds{parse_number(arg, value, 60'000)};
        else
            throw std::invalid_argument(fmt::format("unknown option '{}'", arg));
    }
    boost::system::error_code url_error;
    std::string reason;
    o.cfg = colock::redis::config::from_url(url, url_error, &reason);
    if (url_error)
        throw std::invalid_argument(reason);
    return o;
}

} // namespace

int main(int argc, char** argv) {
    options o;
    try {
        o = parse(argc, argv);
    } catch (std::invalid_argument const& e) {
        fmt::print(stderr,
                   "semaphore_exports: {}\nusage: {} [--url URL] [--name NAME] [--process P] "
                   "[--exports N] [--limit K] [--work MS]\n",
                   e.what(), argv[0]);
        return 2;
    }

    try {
        asio::io_context io;
        std::exception_ptr failure;
        int status = 1;
        asio::co_spawn(io, run(std::move(o)), [&](std::exception_ptr e, int s) {
            failure = e;
            status = s;
        });
        io.run();
        if (failure)
            std::rethrow_exception(failure);
        return status;
    } catch (std::exception const& e) {
        fmt::print(stderr, "semaphore_exports: {}\n", e.what());
        return 1;
    }
}

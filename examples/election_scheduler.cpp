// Leader election: a scheduler of which several instances run, and only the leader works.
//
// Each instance campaigns with its value ("<host>:<pid>" unless --value). While it leads it runs
// a job every --tick milliseconds, and each run writes to a pretend resource (a Redis hash)
// with the term as a fence: the resource refuses a write from an earlier term than the last one
// it took, so a leader that lost its lease without knowing yet cannot overwrite its
// successor's work. The job is raced against the leadership's wait_lost(): when the lease is
// lost the job stops and the instance campaigns again. SIGTERM or SIGINT resigns (the next
// candidate leads at once, without waiting for the lease to lapse) and exits 0. It prints who
// leads when it starts; with --watch it also prints every change its leader_watch reports, and
// with --observe it only watches.
//
// Usage: colock_example_election_scheduler [--url URL] [--name NAME] [--value VALUE]
//            [--tick MS] [--ttl MS] [--watch | --observe]
// Without --url it uses COLOCK_REDIS_URL, then redis://127.0.0.1:6379. --ttl is the
// leadership's lease: how long a leader that died (without resigning) holds the election up.
// Every line is flushed as it is printed; election_scheduler_test.sh reads them:
//   leader at start: none | leader at start: VALUE (term T, pid P on HOST)
//   campaigning as VALUE
//   leading: term T as VALUE
//   tick N: term T, written | tick N: term T, refused (a later term has written)
//   lost: term T is over, the job stopped
//   resigned: term T | resigned: term T (it was over already)
//   watch: VALUE leads, term T | watch: nobody leads (term T ended)
#include <colock/colock.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;
using std::chrono::milliseconds;

namespace {

struct options {
    colock::redis::config cfg;
    std::string name = "example:scheduler";
    std::string value; // "<host>:<pid>" unless --value
    milliseconds tick{200};
    milliseconds ttl{5000};
    bool watch = false;   // print the leader_watch's changes beside the scheduler
    bool observe = false; // only watch
};

// One line on stdout, flushed at once: another program reads it while this one runs.
template <class... Args>
void say(fmt::format_string<Args...> text, Args&&... args) {
    fmt::print("{}\n", fmt::format(text, std::forward<Args>(args)...));
    std::fflush(stdout);
}

// The resource the leader's job writes to, here a Redis hash. A write carries the writer's term
// and is refused when a later term has written already: the check and the write are one step
// (one script), as they must be in a real resource (a database row updated `WHERE term <= ?`,
// a storage API that takes a fencing token).
class fenced_resource {
public:
    fenced_resource(colock::redis::connection& conn, std::string key)
        : conn_(conn), key_(std::move(key)) {}

    // True when the write was taken; false when a later term had written.
    asio::awaitable<bool> write(std::int64_t term, std::string const& by, std::uint64_t tick) {
        // Terms are below 2^53 (the server's clock in microseconds, plus one per term), so a
        // Lua number holds them exactly. The key lapses a minute after the last write.
        static constexpr std::string_view script = R"lua(
local last = tonumber(redis.call('HGET', KEYS[1], 'term') or '0')
if tonumber(ARGV[1]) < last then return 0 end
redis.call('HSET', KEYS[1], 'term', ARGV[1], 'by', ARGV[2], 'tick', ARGV[3])
redis.call('PEXPIRE', KEYS[1], 60000)
return 1
)lua";
        colock::resp3::request req;
        req.push("EVAL", script, "1", key_, std::to_string(term), by, std::to_string(tick));
        auto const reply = co_await conn_.co_exec(std::move(req));
        co_return reply.at(0).as_integer().value_or(0) == 1;
    }

private:
    colock::redis::connection& conn_;
    std::string key_;
};

// The leader's work: one write a tick. Returns only when the resource refuses the term (a later
// leader has written, so this one's term is over, whether or not it knows yet).
asio::awaitable<void> run_job(std::int64_t term, fenced_resource& resource, options const& o) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (std::uint64_t tick = 1;; ++tick) {
        if (!co_await resource.write(term, o.value, tick)) {
            say("tick {}: term {}, refused (a later term has written)", tick, term);
            co_return;
        }
        say("tick {}: term {}, written", tick, term);
        timer.expires_after(o.tick);
        co_await timer.async_wait(asio::use_awaitable);
    }
}

// Campaigns, leads while it can, campaigns again after a loss; returns after a signal, having
// resigned if it led.
asio::awaitable<void> schedule(colock::election& election, fenced_resource& resource,
                               asio::signal_set& signals, options const& o) {
    colock::lock_options opt;
    opt.ttl = o.ttl;
    for (;;) {
        say("campaigning as {}", o.value);
        // A signal while waiting cancels the campaign: it leaves no queue entry or term behind.
        auto won = co_await (election.co_campaign(o.value, opt) ||
                             signals.async_wait(asio::use_awaitable));
        if (won.index() == 1) {
            say("stopped while waiting to lead");
            co_return;
        }
        colock::leadership lead = std::get<0>(std::move(won));
        auto const term = lead.term();
        say("leading: term {} as {}", term, lead.value());

        // The job runs while the leadership lasts; whichever ends first cancels the others.
        auto const ended = co_await (run_job(term, resource, o) || lead.wait_lost() ||
                                     signals.async_wait(asio::use_awaitable));
        if (ended.index() == 2) {
            bool const gave_up = co_await lead.release(); // false: it was lost meanwhile
            say("resigned: term {}{}", term, gave_up ? "" : " (it was over already)");
            co_return;
        }
        say("lost: term {} is over, the job stopped", term);
        // `lead` goes here; a leadership that is over has nothing left to give back.
    }
}

// Prints every change of the election until the watch ends (or this is cancelled).
asio::awaitable<void> watch(colock::election& election) {
    colock::leader_watch w = election.observe();
    while (auto change = co_await w.co_next()) {
        auto const gap = change->resynced ? " (read again: changes before it may be missing)" : "";
        if (change->leading)
            say("watch: {} leads, term {}{}", change->value, change->term, gap);
        else if (change->term != 0)
            say("watch: nobody leads (term {} ended){}", change->term, gap);
        else
            say("watch: nobody leads{}", gap);
    }
    say("watch: over");
}

asio::awaitable<void> run(options o, asio::signal_set& signals) {
    colock::redis::connection conn{co_await asio::this_coro::executor, o.cfg};
    co_await conn.co_connect(); // its error names the endpoint
    colock::locker locker{conn};
    colock::election election{locker, o.name};

    if (auto const who = co_await election.co_leader()) {
        if (who->holder)
            say("leader at start: {} (term {}, pid {} on {})", who->value, who->term,
                who->holder->pid, who->holder->host);
        else
            say("leader at start: {} (term {})", who->value, who->term);
    } else {
        say("leader at start: none");
    }

    fenced_resource resource{conn, o.name + ":resource"};
    if (o.observe)
        co_await (watch(election) || signals.async_wait(asio::use_awaitable));
    else if (o.watch)
        co_await (schedule(election, resource, signals, o) || watch(election));
    else
        co_await schedule(election, resource, signals, o);
    conn.close(); // stops the connection's background work, so io.run() returns
}

milliseconds parse_ms(std::string_view option, std::string const& text) {
    std::size_t used = 0;
    long long n = 0;
    try {
        n = std::stoll(text, &used);
    } catch (std::exception const&) {
        used = 0;
    }
    if (used == 0 || used != text.size() || n < 1 || n > 86'400'000)
        throw std::invalid_argument(
            fmt::format("{} takes milliseconds from 1 to 86400000, not '{}'", option, text));
    return milliseconds{n};
}

options parse(int argc, char** argv) {
    options o;
    std::string url = "redis://127.0.0.1:6379";
    if (char const* from_env = std::getenv("COLOCK_REDIS_URL"); from_env && *from_env)
        url = from_env;
    for (int i = 1; i < argc; ++i) {
        std::string_view const arg = argv[i];
        if (arg == "--watch") {
            o.watch = true;
            continue;
        }
        if (arg == "--observe") {
            o.observe = true;
            continue;
        }
        if (i + 1 >= argc)
            throw std::invalid_argument(fmt::format("unknown option '{}', or no value", arg));
        std::string const value = argv[++i];
        if (arg == "--url")
            url = value;
        else if (arg == "--name")
            o.name = value;
        else if (arg == "--value")
            o.value = value;
        else if (arg == "--tick")
            o.tick = parse_ms(arg, value);
        else if (arg == "--ttl")
            o.ttl = parse_ms(arg, value);
        else
            throw std::invalid_argument(fmt::format("unknown option '{}'", arg));
    }
    if (o.watch && o.observe)
        throw std::invalid_argument("--watch and --observe: choose one");
    if (o.value.empty()) {
        char host[256] = {};
        if (::gethostname(host, sizeof host - 1) != 0)
            host[0] = '\0';
        o.value = fmt::format("{}:{}", host[0] != '\0' ? host : "localhost", ::getpid());
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
                   "election_scheduler: {}\nusage: {} [--url URL] [--name NAME] [--value VALUE] "
                   "[--tick MS] [--ttl MS] [--watch | --observe]\n",
                   e.what(), argv[0]);
        return 2;
    }

    try {
        asio::io_context io;
        // Before anything runs, so that an early SIGTERM is ours to handle, not the default's.
        asio::signal_set signals(io, SIGINT, SIGTERM);
        std::exception_ptr failure;
        asio::co_spawn(io, run(std::move(o), signals), [&](std::exception_ptr e) { failure = e; });
        io.run();
        if (failure)
            std::rethrow_exception(failure);
        return 0;
    } catch (std::exception const& e) {
        fmt::print(stderr, "election_scheduler: {}\n", e.what());
        return 1;
    }
}

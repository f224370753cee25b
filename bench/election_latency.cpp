// Leader election latency and cost, against one redis-server.
//
// Three candidates' lockers, each on its own connection (as three processes would have), and a
// leader_watch on a third locker's connection; one io_context, one thread. Three phases, each
// `--warmup` rounds not measured, then `--rounds` measured:
//
//   handover  A leads; B campaigns and queues behind A (the bench waits until B's locker is in
//             the election's queue, polling LLEN on a connection of its own, then --settle
//             milliseconds more, in which B subscribes to its wake channel and asks once more
//             before it sleeps: B is then a candidate that has been waiting); A resigns.
//             Measured: hand-over = A's release() called -> B's co_campaign() returns;
//             observe = the same start -> the watch's co_next() returns B's term. The two swap
//             roles every round.
//   proclaim  the leader proclaims a new value. Measured: co_proclaim() itself, and its start ->
//             the watch's co_next() returns the value.
//   alone     with nobody else campaigning: co_campaign() (one uncontended campaign), then
//             release() with nobody queued. Measured: the campaign, and resign start -> the
//             watch's co_next() reports that nobody leads.
//
// For each phase the server calls per round from INFO commandstats (calls made inside scripts
// count too), without the bench's own INFO and LLEN, and the server's CPU per round (INFO cpu).
// A PING round trip on an idle connection is the reference line. The leaderships are not
// renewed (a 60 s lease, far longer than the run), so that no renewal falls into the counts, and
// the connections send no health-check PINGs.
//
// Usage: election_latency [--rounds 2000] [--warmup 100] [--settle 2] [--url redis://...]
//                         [--json]
#include "bench_common.hpp"

#include <colock/colock.hpp>
#include <colock/election.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace redis = colock::redis;
namespace resp3 = colock::resp3;
namespace bench = colock::bench;
using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A step that does not happen within this fails the run rather than hang it.
constexpr auto step_limit = std::chrono::seconds{5};

constexpr std::string_view usage_text =
    R"(Usage: election_latency [--rounds N] [--warmup N] [--settle MS] [--url redis://...] [--json]

Leader election latency against one redis-server (a throwaway one unless --url):
hand-over (release -> the queued candidate's co_campaign returns), observe (the change ->
a watch on another connection reports it) for hand-overs, proclaims and resigns with nobody
queued, with p50/p99/max, server calls per round (INFO commandstats, calls inside scripts
included) and the server's CPU per round; a PING round trip as the reference.

  --rounds N    measured rounds of each phase (default 2000)
  --warmup N    rounds before each phase, not measured (default 100)
  --settle MS   hand-over: how long the candidate waits in the queue before the leader
                resigns, once it is queued (default 2; 0: at once, often before it sleeps)
  --url URL     a server of your own (its keys go under colock:bench:<pid>:)
  --json        one JSON object per phase
)";

struct options : bench::common_options {
    std::size_t rounds = 2000;
    std::size_t warmup = 100;
    std::chrono::milliseconds settle{2};
};

bool parse_option(options& o, bench::option_arg& arg) {
    if (arg.name() == "--rounds")
        o.rounds = bench::parse_whole<std::size_t>(arg.name(), arg.value(), 1, 10'000'000);
    else if (arg.name() == "--warmup")
        o.warmup = bench::parse_whole<std::size_t>(arg.name(), arg.value(), 0, 10'000'000);
    else if (arg.name() == "--settle")
        o.settle =
            std::chrono::milliseconds{bench::parse_whole<int>(arg.name(), arg.value(), 0, 1000)};
    else
        return false;
    return true;
}

double micros(steady::duration d) {
    return std::chrono::duration<double, std::micro>(d).count();
}

struct latency {
    std::size_t samples = 0;
    double mean = 0, p50 = 0, p99 = 0, max = 0; // microseconds
};

latency summarize(std::vector<double> us) {
    latency s;
    s.samples = us.size();
    if (us.empty())
        return s;
    std::sort(us.begin(), us.end());
    double sum = 0;
    for (auto const v : us)
        sum += v;
    auto const at = [&](double q) {
        return us[static_cast<std::size_t>(q * static_cast<double>(us.size() - 1))];
    };
    s.mean = sum / static_cast<double>(us.size());
    s.p50 = at(0.50);
    s.p99 = at(0.99);
    s.max = us.back();
    return s;
}

asio::awaitable<std::shared_ptr<redis::connection>> open(redis::config cfg, std::string name) {
    cfg.health_check_interval = milliseconds{0};
    cfg.client_name = std::move(name);
    auto conn = std::make_shared<redis::connection>(co_await asio::this_coro::executor, cfg);
    co_await conn->co_connect();
    co_return conn;
}

// A candidate: its connection, locker and election object, as one process would have them.
struct candidate {
    std::shared_ptr<redis::connection> conn;
    std::unique_ptr<colock::locker> locker;
    std::unique_ptr<colock::election> election;
    std::string value;
};

// Every change the watch reports, with when co_next() returned it. The watch is awaited all the
// time, so that a change is timed when it arrives, not when a round asks for it.
struct watch_log {
    explicit watch_log(asio::any_io_executor ex) : arrived(std::move(ex)) {}
    std::vector<std::pair<steady::time_point, colock::leader_change>> events;
    std::size_t cursor = 0;     // the first event no round has looked at
    std::size_t skipped = 0;    // events looked at that no round waited for (in measured rounds)
    std::size_t resynced = 0;   // events that say changes may have been missed
    bool over = false;          // no more events
    bool done = false;          // run_watch has returned: the log is not touched any more
    asio::steady_timer arrived; // cancelled at each event, and when the watch ends

    // When the first event from the cursor on that satisfies `wanted` arrived; the events before
    // it are counted as skipped when `counting`.
    template <class Wanted>
    asio::awaitable<steady::time_point> when(Wanted wanted, bool counting, std::string what) {
        auto const deadline = steady::now() + step_limit;
        for (;;) {
            while (cursor < events.size()) {
                auto const& [at, change] = events[cursor++];
                if (wanted(change))
                    co_return at;
                if (counting)
                    ++skipped;
            }
            if (over || steady::now() >= deadline)
                throw std::runtime_error(fmt::format("the watch did not report {} within {} s{}",
                                                     what, step_limit.count(),
                                                     over ? " (the watch ended)" : ""));
            arrived.expires_at(deadline);
            co_await arrived.async_wait(asio::as_tuple(asio::use_awaitable));
        }
    }
};

asio::awaitable<void> run_watch(colock::leader_watch& w, watch_log& log) {
    while (auto change = co_await w.co_next()) {
        if (change->resynced)
            ++log.resynced;
        log.events.emplace_back(steady::now(), std::move(*change));
        log.arrived.cancel();
    }
    log.over = true;
    log.arrived.cancel();
}

// A campaign run beside the round, with when it returned.
struct campaign_run {
    explicit campaign_run(asio::any_io_executor ex) : finished(std::move(ex)) {}
    std::optional<colock::leadership> lead;
    steady::time_point at;
    std::exception_ptr failure;
    bool done = false;
    asio::steady_timer finished;
};

void start_campaign(candidate& c, colock::lock_options const& opt,
                    std::shared_ptr<campaign_run> const& run) {
    asio::co_spawn(
        run->finished.get_executor(),
        [&c, opt, run]() -> asio::awaitable<void> {
            run->lead = co_await c.election->co_campaign(c.value, opt);
            run->at = steady::now();
        },
        [run](std::exception_ptr e) {
            run->failure = e;
            run->done = true;
            run->finished.cancel();
        });
}

asio::awaitable<void> wait_done(campaign_run& run) {
    if (!run.done) {
        run.finished.expires_after(step_limit);
        co_await run.finished.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    if (run.failure)
        std::rethrow_exception(run.failure);
    if (!run.done || !run.lead)
        throw std::runtime_error(
            fmt::format("a queued campaign did not return within {} s", step_limit.count()));
}

// Waits until `key` (the election's queue) lists a locker: the candidate is queued. Returns the
// LLENs sent.
asio::awaitable<std::uint64_t> wait_queued(redis::connection& probe, std::string const& key) {
    auto const deadline = steady::now() + step_limit;
    for (std::uint64_t polls = 1;; ++polls) {
        resp3::request req;
        req.push("LLEN", key);
        auto const reply = co_await probe.co_exec(std::move(req));
        if (reply.at(0).as_integer().value_or(0) > 0)
            co_return polls;
        if (steady::now() >= deadline)
            throw std::runtime_error(
                fmt::format("no candidate in {} within {} s", key, step_limit.count()));
    }
}

struct phase_result {
    std::string phase;
    std::size_t rounds = 0;
    latency first;  // handover: hand-over; proclaim: co_proclaim; alone: co_campaign
    latency second; // observe: change -> watch
    latency third;  // handover: release() itself; alone: release() itself
    bench::command_calls calls;
    double server_cpu_us = 0; // per round
    std::size_t skipped = 0, resynced = 0;
    std::optional<std::int64_t> settle_ms; // handover only
};

struct setup {
    candidate a, b;
    std::shared_ptr<redis::connection> watch_conn, probe;
    std::unique_ptr<colock::locker> watch_locker;
    std::unique_ptr<colock::election> watch_election;
    std::string queue_key;
    colock::lock_options opt;
    std::optional<colock::leadership> lead; // whoever leads between rounds
    bool a_leads = false;
};

// The commands of the rounds between `before` and `after`, without INFO and the bench's LLENs.
bench::command_calls round_calls(bench::command_calls const& before,
                                 bench::command_calls const& after, std::uint64_t own_llens) {
    bench::command_calls d;
    for (auto const& [command, calls] : after) {
        if (bench::is_not_from_client(command))
            continue;
        auto n = calls - bench::calls_of(before, command);
        if (command == "llen")
            n -= std::min(n, own_llens);
        if (n != 0)
            d.emplace(command, n);
    }
    return d;
}

asio::awaitable<phase_result> run_handover(setup& s, watch_log& log, bench::node_stats& stats,
                                           options const& o) {
    auto const ex = co_await asio::this_coro::executor;
    phase_result r;
    r.phase = "handover";
    r.rounds = o.rounds;
    r.settle_ms = o.settle.count();
    std::vector<double> handover, observe, resign;
    bench::command_calls before;
    double cpu_before = 0;
    std::uint64_t llens = 0;
    asio::steady_timer settle(ex);
    std::size_t const skipped_before = log.skipped;
    std::size_t resynced_before = log.resynced;
    for (std::size_t i = 0; i < o.warmup + o.rounds; ++i) {
        bool const measuring = i >= o.warmup;
        if (i == o.warmup) {
            before = co_await stats.commandstats();
            cpu_before = co_await stats.cpu_seconds();
            log.skipped = skipped_before;
            resynced_before = log.resynced;
        }
        auto& next = s.a_leads ? s.b : s.a;
        auto run = std::make_shared<campaign_run>(ex);
        start_campaign(next, s.opt, run);
        auto const polls = co_await wait_queued(*s.probe, s.queue_key);
        if (measuring)
            llens += polls;
        if (o.settle.count() > 0) {
            settle.expires_after(o.settle);
            co_await settle.async_wait(asio::use_awaitable);
        }

        auto const resign_at = steady::now();
        if (!co_await s.lead->release())
            throw std::runtime_error("a leader's release() found its term over");
        auto const resigned_at = steady::now();
        co_await wait_done(*run);
        auto const term = run->lead->term();
        if (term <= s.lead->term())
            throw std::runtime_error(fmt::format("term {} followed term {}", term, s.lead->term()));
        auto const seen_at = co_await log.when(
            [&](colock::leader_change const& c) { return c.leading && c.term == term; }, measuring,
            fmt::format("term {}", term));
        if (measuring) {
            handover.push_back(micros(run->at - resign_at));
            observe.push_back(micros(seen_at - resign_at));
            resign.push_back(micros(resigned_at - resign_at));
        }
        s.lead = std::move(run->lead);
        s.a_leads = !s.a_leads;
    }
    r.calls = round_calls(before, co_await stats.commandstats(), llens);
    r.server_cpu_us =
        (co_await stats.cpu_seconds() - cpu_before) * 1e6 / static_cast<double>(o.rounds);
    r.first = summarize(std::move(handover));
    r.second = summarize(std::move(observe));
    r.third = summarize(std::move(resign));
    r.skipped = log.skipped - skipped_before;
    r.resynced = log.resynced - resynced_before;
    co_return r;
}

asio::awaitable<phase_result> run_proclaim(setup& s, watch_log& log, bench::node_stats& stats,
                                           options const& o) {
    phase_result r;
    r.phase = "proclaim";
    r.rounds = o.rounds;
    std::vector<double> proclaim, observe;
    bench::command_calls before;
    double cpu_before = 0;
    std::size_t const skipped_before = log.skipped;
    std::size_t resynced_before = log.resynced;
    auto const term = s.lead->term();
    for (std::size_t i = 0; i < o.warmup + o.rounds; ++i) {
        bool const measuring = i >= o.warmup;
        if (i == o.warmup) {
            before = co_await stats.commandstats();
            cpu_before = co_await stats.cpu_seconds();
            log.skipped = skipped_before;
            resynced_before = log.resynced;
        }
        auto value = fmt::format("value-{}", i);
        auto const start = steady::now();
        co_await s.lead->co_proclaim(value);
        auto const done = steady::now();
        auto const seen_at = co_await log.when(
            [&](colock::leader_change const& c) {
                return c.leading && c.term == term && c.value == value;
            },
            measuring, fmt::format("the value {}", value));
        if (measuring) {
            proclaim.push_back(micros(done - start));
            observe.push_back(micros(seen_at - start));
        }
    }
    r.calls = round_calls(before, co_await stats.commandstats(), 0);
    r.server_cpu_us =
        (co_await stats.cpu_seconds() - cpu_before) * 1e6 / static_cast<double>(o.rounds);
    r.first = summarize(std::move(proclaim));
    r.second = summarize(std::move(observe));
    r.skipped = log.skipped - skipped_before;
    r.resynced = log.resynced - resynced_before;
    co_return r;
}

asio::awaitable<phase_result> run_alone(setup& s, watch_log& log, bench::node_stats& stats,
                                        options const& o) {
    phase_result r;
    r.phase = "alone";
    r.rounds = o.rounds;
    std::vector<double> campaign, observe, resign;
    bench::command_calls before;
    double cpu_before = 0;
    std::size_t const skipped_before = log.skipped;
    std::size_t resynced_before = log.resynced;
    // Whoever leads resigns first, with nobody queued.
    auto const last = s.lead->term();
    co_await s.lead->release();
    s.lead.reset();
    co_await log.when([&](colock::leader_change const& c) { return !c.leading; }, false,
                      fmt::format("the end of term {}", last));
    for (std::size_t i = 0; i < o.warmup + o.rounds; ++i) {
        bool const measuring = i >= o.warmup;
        if (i == o.warmup) {
            before = co_await stats.commandstats();
            cpu_before = co_await stats.cpu_seconds();
            log.skipped = skipped_before;
            resynced_before = log.resynced;
        }
        auto const start = steady::now();
        auto lead = co_await s.a.election->co_campaign(s.a.value, s.opt);
        auto const led_at = steady::now();
        auto const term = lead.term();
        co_await log.when(
            [&](colock::leader_change const& c) { return c.leading && c.term == term; }, measuring,
            fmt::format("term {}", term));
        auto const resign_at = steady::now();
        if (!co_await lead.release())
            throw std::runtime_error("a leader's release() found its term over");
        auto const resigned_at = steady::now();
        auto const seen_at = co_await log.when(
            [&](colock::leader_change const& c) { return !c.leading && c.term == term; }, measuring,
            fmt::format("the end of term {}", term));
        if (measuring) {
            campaign.push_back(micros(led_at - start));
            observe.push_back(micros(seen_at - resign_at));
            resign.push_back(micros(resigned_at - resign_at));
        }
    }
    r.calls = round_calls(before, co_await stats.commandstats(), 0);
    r.server_cpu_us =
        (co_await stats.cpu_seconds() - cpu_before) * 1e6 / static_cast<double>(o.rounds);
    r.first = summarize(std::move(campaign));
    r.second = summarize(std::move(observe));
    r.third = summarize(std::move(resign));
    r.skipped = log.skipped - skipped_before;
    r.resynced = log.resynced - resynced_before;
    co_return r;
}

std::uint64_t total_of(bench::command_calls const& calls) {
    std::uint64_t n = 0;
    for (auto const& [command, count] : calls)
        n += count;
    return n;
}

// Commands the client sends itself; the others are called inside the scripts.
bool sent_by_client(std::string_view command) {
    return command == "evalsha" || command == "eval" || command == "script" ||
           command == "subscribe" || command == "unsubscribe" || command == "ssubscribe" ||
           command == "sunsubscribe" || command == "ping" || command == "hello" ||
           command == "client";
}

std::string per_round_text(bench::command_calls const& calls, std::size_t rounds) {
    std::string out;
    for (auto const& [command, count] : calls)
        out += fmt::format("{}{} {:.3f}", out.empty() ? "" : ", ", command,
                           static_cast<double>(count) / static_cast<double>(rounds));
    return out.empty() ? "none" : out;
}

std::string per_round_json(bench::command_calls const& calls, std::size_t rounds) {
    std::string out;
    for (auto const& [command, count] : calls)
        out += fmt::format("{}\"{}\":{:.4f}", out.empty() ? "" : ",", command,
                           static_cast<double>(count) / static_cast<double>(rounds));
    return "{" + out + "}";
}

std::string latency_json(std::string_view name, latency const& l) {
    return fmt::format("\"{0}_mean_us\":{1:.1f},\"{0}_p50_us\":{2:.1f},\"{0}_p99_us\":{3:.1f},"
                       "\"{0}_max_us\":{4:.1f}",
                       name, l.mean, l.p50, l.p99, l.max);
}

std::string latency_text(latency const& l) {
    return fmt::format("p50 {:8.1f} us   p99 {:8.1f} us   max {:9.1f} us   mean {:8.1f} us", l.p50,
                       l.p99, l.max, l.mean);
}

void report(phase_result const& r, latency const& ping, bool json) {
    std::uint64_t client = 0;
    for (auto const& [command, count] : r.calls)
        if (sent_by_client(command))
            client += count;
    auto const rounds = static_cast<double>(r.rounds);
    auto const all = static_cast<double>(total_of(r.calls)) / rounds;
    auto const by_client = static_cast<double>(client) / rounds;
    // What each phase's three figures are.
    std::string_view first = "handover", second = "observe", third = "resign";
    if (r.phase == "proclaim") {
        first = "proclaim";
        third = "";
    } else if (r.phase == "alone") {
        first = "campaign";
    }
    if (json) {
        fmt::print(
            "{{\"scenario\":\"election_{}\",\"rounds\":{},{}{},{},{}\"calls_per_round\":{:.3f},"
            "\"client_commands_per_round\":{:.3f},\"calls\":{},\"server_cpu_us_per_round\":"
            "{:.1f},\"reference_ping_p50_us\":{:.1f},\"other_watch_events\":{},\"resynced\":{}}}\n",
            r.phase, r.rounds,
            r.settle_ms ? fmt::format("\"settle_ms\":{},", *r.settle_ms) : std::string(),
            latency_json(first, r.first), latency_json(second, r.second),
            third.empty() ? "" : latency_json(third, r.third) + ",", all, by_client,
            per_round_json(r.calls, r.rounds), r.server_cpu_us, ping.p50, r.skipped, r.resynced);
        std::fflush(stdout);
        return;
    }
    if (r.phase == "handover") {
        fmt::print("\n== hand-over: the leader resigns, the queued candidate leads ({} rounds)\n",
                   r.rounds);
        fmt::print("  hand-over   {}   (release() called -> next co_campaign() returns)\n",
                   latency_text(r.first));
        fmt::print("  observe     {}   (release() called -> the watch reports the new term)\n",
                   latency_text(r.second));
        fmt::print("  release   {}   (the call itself)\n", latency_text(r.third));
    } else if (r.phase == "proclaim") {
        fmt::print("\n== proclaim: the leader publishes a new value ({} rounds)\n", r.rounds);
        fmt::print("  co_proclaim {}   (the call itself)\n", latency_text(r.first));
        fmt::print("  observe     {}   (co_proclaim() called -> the watch reports the value)\n",
                   latency_text(r.second));
    } else {
        fmt::print("\n== alone: campaign with nobody leading, resign with nobody queued ({} "
                   "rounds)\n",
                   r.rounds);
        fmt::print("  co_campaign {}   (uncontended)\n", latency_text(r.first));
        fmt::print("  observe     {}   (release() called -> the watch reports nobody leads)\n",
                   latency_text(r.second));
        fmt::print("  release   {}   (the call itself)\n", latency_text(r.third));
    }
    if (ping.p50 > 0)
        fmt::print("  / PING p50  {:.1f} x, observe {:.1f} x   (PING {}: {:.1f} us)\n",
                   r.first.p50 / ping.p50, r.second.p50 / ping.p50,
                   r.settle_ms && *r.settle_ms > 0 ? "after the same idle" : "back to back",
                   ping.p50);
    fmt::print("  server calls per round  {:.3f} ({:.3f} sent by the client, the rest inside "
               "scripts): {}\n",
               all, by_client, per_round_text(r.calls, r.rounds));
    fmt::print("  server CPU per round    {:.1f} us\n", r.server_cpu_us);
    if (r.skipped != 0 || r.resynced != 0)
        fmt::print("  watch: {} other events in the measured rounds, {} resynced\n", r.skipped,
                   r.resynced);
    std::fflush(stdout);
}

// PING round trips, one at a time; each after `idle` without I/O when that is not zero (a process
// that slept wakes up slower than one that is busy, and so does the server).
asio::awaitable<latency> ping_rtt(redis::connection& conn, std::size_t count,
                                  milliseconds idle = milliseconds{0}) {
    std::vector<double> us;
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (std::size_t i = 0; i < count; ++i) {
        if (idle.count() > 0) {
            timer.expires_after(idle);
            co_await timer.async_wait(asio::use_awaitable);
        }
        resp3::request req;
        req.push("PING");
        auto const start = steady::now();
        co_await conn.co_exec(std::move(req));
        us.push_back(micros(steady::now() - start));
    }
    co_return summarize(std::move(us));
}

asio::awaitable<int> run(redis::config cfg, options o) {
    auto const ex = co_await asio::this_coro::executor;
    auto const prefix = fmt::format("colock:bench:{}:", ::getpid());
    std::string const name = "election";
    setup s;
    s.opt.ttl = std::chrono::seconds{60};
    s.opt.auto_renew = false;
    s.queue_key = fmt::format("{}election:{{{}}}:q", prefix, name);
    s.a.value = "candidate-a";
    s.b.value = "candidate-b";
    s.a.conn = co_await open(cfg, std::string("colock-bench-a"));
    s.b.conn = co_await open(cfg, std::string("colock-bench-b"));
    s.a.locker = std::make_unique<colock::locker>(*s.a.conn, prefix);
    s.b.locker = std::make_unique<colock::locker>(*s.b.conn, prefix);
    s.a.election = std::make_unique<colock::election>(*s.a.locker, name);
    s.b.election = std::make_unique<colock::election>(*s.b.locker, name);
    s.watch_conn = co_await open(cfg, std::string("colock-bench-watch"));
    s.watch_locker = std::make_unique<colock::locker>(*s.watch_conn, prefix);
    s.watch_election = std::make_unique<colock::election>(*s.watch_locker, name);
    s.probe = co_await open(cfg, std::string("colock-bench-probe"));
    std::vector<redis::config> nodes{cfg};
    auto stats = co_await bench::node_stats::open(std::move(nodes));

    co_await ping_rtt(*s.probe, 200); // warm
    auto const ping = co_await ping_rtt(*s.probe, 2000);
    auto const idle_ping = o.settle.count() > 0 ? co_await ping_rtt(*s.probe, 500, o.settle) : ping;
    if (o.json) {
        fmt::print("{{\"scenario\":\"ping\",\"ping_p50_us\":{:.1f},\"ping_p99_us\":{:.1f},"
                   "\"ping_max_us\":{:.1f}}}\n",
                   ping.p50, ping.p99, ping.max);
        if (o.settle.count() > 0)
            fmt::print("{{\"scenario\":\"ping_after_idle\",\"idle_ms\":{},\"ping_p50_us\":{:.1f},"
                       "\"ping_p99_us\":{:.1f},\"ping_max_us\":{:.1f}}}\n",
                       o.settle.count(), idle_ping.p50, idle_ping.p99, idle_ping.max);
    } else {
        fmt::print("PING round trip, back to back:     {}\n", latency_text(ping));
        if (o.settle.count() > 0)
            fmt::print("PING round trip, each after {} ms idle: {}\n", o.settle.count(),
                       latency_text(idle_ping));
    }

    watch_log log(ex);
    auto watch = s.watch_election->observe();
    // `log` and `watch` outlive the coroutine: run() waits for `log.done` before it returns.
    // Stopped by cancelling its co_next(), not by watch.close(): a close() while a co_next() is
    // under way dereferences a null pointer in this version of the library.
    asio::cancellation_signal stop_watch;
    asio::co_spawn(
        ex, run_watch(watch, log),
        asio::bind_cancellation_slot(stop_watch.slot(), [&log](std::exception_ptr e) {
            log.over = true;
            log.done = true;
            log.arrived.cancel();
            try {
                if (e)
                    std::rethrow_exception(e);
            } catch (boost::system::system_error const& what) {
                if (what.code() != asio::error::operation_aborted) // stopped at the end
                    fmt::print(stderr, "election_latency: the watch failed: {}\n", what.what());
            } catch (std::exception const& what) {
                fmt::print(stderr, "election_latency: the watch failed: {}\n", what.what());
            }
        }));
    int status = 0;
    try {
        co_await log.when([](colock::leader_change const& c) { return !c.leading; }, false,
                          std::string("that nobody leads, at its start"));
        s.lead = co_await s.a.election->co_campaign(s.a.value, s.opt);
        s.a_leads = true;
        // A hand-over starts after the --settle idle: its reference is the PING after as long.
        report(co_await run_handover(s, log, stats, o), idle_ping, o.json);
        report(co_await run_proclaim(s, log, stats, o), ping, o.json);
        report(co_await run_alone(s, log, stats, o), ping, o.json);
    } catch (std::exception const& e) {
        fmt::print(stderr, "election_latency: {}\n", e.what());
        status = 1;
    }
    if (s.lead)
        co_await s.lead->release();
    stop_watch.emit(asio::cancellation_type::terminal);
    auto const deadline = steady::now() + step_limit;
    while (!log.done && steady::now() < deadline) {
        log.arrived.expires_at(deadline);
        co_await log.arrived.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    stats.close();
    s.a.conn->close();
    s.b.conn->close();
    s.watch_conn->close();
    s.probe->close();
    co_return status;
}

} // namespace

int main(int argc, char** argv) {
    options opts;
    if (auto const status = bench::parse_command_line("election_latency", usage_text, argc, argv,
                                                      opts, parse_option))
        return *status;
    if (opts.cluster) {
        fmt::print(stderr, "election_latency: --cluster is not supported (one server only)\n");
        return 2;
    }
    try {
        std::optional<colock::test::redis_server> own_server;
        auto const cfg = bench::pick_server(opts, own_server);
        if (!opts.json)
            fmt::print("server {}, {} rounds per phase after {} not measured, settle {} ms; leases "
                       "of 60 s, not renewed; one thread\n",
                       cfg.to_redacted_url(), opts.rounds, opts.warmup, opts.settle.count());
        asio::io_context io{1};
        return bench::run_on(io, run(cfg, opts));
    } catch (std::exception const& e) {
        fmt::print(stderr, "election_latency: {}\n", e.what());
        return 1;
    }
}

// What the server pays to renew many held leases: one process holds --leases locks (10,000 by
// default) and renews every one. Per renewed lease, the server's time in commandstats (the
// script calls' usec, which includes the commands they run) and its process CPU (INFO cpu):
//
//   each      the library's extend script by FCALL, one call per lease: what the library sent
//             for each renewal before it batched them
//   batch     extend_known, --batch leases per call (renewal_batch::max_keys by default): a
//             batch as the library sends it, at its largest
//   alone     the library itself, with renew_in_batches off: --leases guards of one locker with
//             a --ttl lease, renewed by their own renewal for --seconds; per renewal
//   library   the same, in batches (the default)
//
// The raw variants renew the same --leases keys, in rounds that alternate them (pipelined, so the
// client is not what is measured); each variant's figure is the 20th percentile over its rounds
// (noise on a shared machine only adds). The library's runs follow, alone and in batches by
// turns. Reported as µs per renewal and as a ratio to `each`; the line after the table gives
// the library's in batches to its alone.
#include "bench_common.hpp"

#include "lock/store/lock_arguments.hpp"
#include "lock/store/renewal_batch.hpp"
#include "lock/store/scripts.hpp"

#include <colock/lock_observer.hpp>
#include <colock/locker.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

namespace asio = boost::asio;
namespace redis = colock::redis;
namespace resp3 = colock::resp3;
namespace bench = colock::bench;
using namespace std::chrono_literals;

constexpr std::string_view usage_text = R"(usage: renewal_costs [options]

The server's cost per renewed lease with many held: the library's extend script once per
lease, extend_known over a batch, and the library's own renewals of as many guards. Per
renewal, commandstats usec and the server's CPU, with ratios to the extend per lease.

  --leases N      leases held (default 10000)
  --batch N       leases per extend_known call (default the library's largest batch)
  --rounds N      rounds of the raw variants (default 15)
  --ttl MS        the library's leases' ttl (default 3000: renewed every second)
  --seconds S     how long the library's leases are held and renewed (default 6)
  --library-rounds N  runs of the library in batches, and as many alone, by turns (default 2)
  --url URL       a server to use (default: a throwaway redis-server)
  --json          one JSON object per variant
)";

struct options : bench::common_options {
    std::size_t leases = 10'000;
    std::size_t batch = colock::detail::renewal_batch::max_keys;
    std::size_t rounds = 15;
    std::chrono::milliseconds ttl{3000};
    double seconds = 6;
    std::size_t library_rounds = 2;
};

bool parse_option(options& o, bench::option_arg& arg) {
    if (arg.name() == "--leases")
        o.leases = bench::parse_whole<std::size_t>("--leases", arg.value(), 2, 1'000'000);
    else if (arg.name() == "--batch")
        o.batch = bench::parse_whole<std::size_t>("--batch", arg.value(), 1, 10'000);
    else if (arg.name() == "--rounds")
        o.rounds = bench::parse_whole<std::size_t>("--rounds", arg.value(), 1, 10'000);
    else if (arg.name() == "--ttl")
        o.ttl = std::chrono::milliseconds(
            bench::parse_whole<std::int64_t>("--ttl", arg.value(), 300, 3'600'000));
    else if (arg.name() == "--library-rounds")
        o.library_rounds = bench::parse_whole<std::size_t>("--library-rounds", arg.value(), 1, 100);
    else if (arg.name() == "--seconds")
        o.seconds = bench::parse_seconds(arg.value());
    else
        return false;
    return true;
}

// The server's readings: CPU seconds and the script calls' usec and calls.
struct reading {
    double cpu_seconds = 0;
    std::uint64_t script_usec = 0, script_calls = 0;
};

asio::awaitable<reading> read_server(redis::connection& stats) {
    resp3::request req;
    req.push("INFO", "cpu", "commandstats");
    auto const resp = co_await stats.co_exec(std::move(req));
    auto const text = resp.empty() ? std::nullopt : resp.front().as_string();
    if (!text)
        throw std::runtime_error("INFO cpu commandstats did not answer with a string");
    reading r;
    r.cpu_seconds = bench::parse_cpu_seconds(*text);
    auto const usec = bench::parse_commandstats(*text, "usec");
    auto const calls = bench::parse_commandstats(*text, "calls");
    for (auto const* entry : {"fcall", "evalsha", "eval"}) {
        r.script_usec += bench::calls_of(usec, entry);
        r.script_calls += bench::calls_of(calls, entry);
    }
    co_return r;
}

// The library's renewals that extended their lease.
struct renewal_counter final : colock::lock_observer {
    std::atomic<std::size_t> extended{0};
    void on_renewal(colock::renewal_event const& e) override {
        if (e.extended)
            ++extended;
    }
};

// Per renewal, one round or run.
struct cost {
    double usec = 0, cpu_us = 0, calls = 0;
};

cost per_renewal(reading const& a, reading const& b, std::size_t renewals) {
    auto const n = static_cast<double>(std::max<std::size_t>(1, renewals));
    return {static_cast<double>(b.script_usec - a.script_usec) / n,
            (b.cpu_seconds - a.cpu_seconds) * 1e6 / n,
            static_cast<double>(b.script_calls - a.script_calls) / n};
}

double low(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[static_cast<std::size_t>(0.2 * static_cast<double>(v.size() - 1))];
}

// Sends `req` and checks every reply is not an error.
asio::awaitable<void> exec_checked(redis::connection& conn, resp3::request req,
                                   std::string_view what) {
    auto const resp = co_await conn.co_exec(std::move(req));
    for (auto const& v : resp)
        if (v.type == resp3::type::simple_error || v.type == resp3::type::blob_error)
            throw std::runtime_error(fmt::format("{}: {}", what, resp3::to_debug_string(v)));
}

struct raw_keys {
    std::vector<std::string> keys, tokens, values;
};

// One round of `each`: the extend function per key, pipelined 500 to a request.
asio::awaitable<void> renew_each(redis::connection& conn, colock::detail::script const& extend,
                                 raw_keys const& k, std::string const& ttl) {
    for (std::size_t first = 0; first < k.keys.size(); first += 500) {
        resp3::request req;
        for (std::size_t i = first; i < std::min(k.keys.size(), first + 500); ++i)
            req.push("FCALL", extend.function, 1, k.keys[i], k.tokens[i], ttl, "0");
        co_await exec_checked(conn, std::move(req), "extend");
    }
}

// One round of `batch`: extend_known over `batch` keys per call, every answer 1.
asio::awaitable<void> renew_batched(redis::connection& conn,
                                    colock::detail::script const& extend_known, raw_keys const& k,
                                    std::string const& ttl, std::size_t batch) {
    resp3::request req;
    std::size_t calls = 0;
    for (std::size_t first = 0; first < k.keys.size(); first += batch) {
        auto const last = std::min(k.keys.size(), first + batch);
        auto const n = std::to_string(last - first);
        std::vector<std::string_view> words{extend_known.function, n};
        for (std::size_t i = first; i < last; ++i)
            words.push_back(k.keys[i]);
        words.push_back(ttl);
        for (std::size_t i = first; i < last; ++i)
            words.push_back(k.values[i]);
        req.push_range("FCALL", words);
        ++calls;
    }
    auto const resp = co_await conn.co_exec(std::move(req));
    for (auto const& v : resp) {
        if (v.type != resp3::type::array)
            throw std::runtime_error("extend_known: " + resp3::to_debug_string(v));
        for (auto const& e : v.elements)
            if (e.as_integer() != 1)
                throw std::runtime_error("extend_known did not renew a lease it holds");
    }
}

// The library's renewals of --leases guards held through one locker for --seconds, once each was
// renewed; per renewal (counted by an observer: PEXPIRE would count the holder record's too).
asio::awaitable<cost> library_phase(redis::connection& conn, redis::connection& stats,
                                    std::string const& prefix, options const& opts, bool batched,
                                    std::size_t& renewals) {
    auto const ex = co_await asio::this_coro::executor;
    colock::locker locks(conn, prefix);
    auto const counter = std::make_shared<renewal_counter>();
    locks.set_observer(counter);
    colock::lock_options opt;
    opt.ttl = opts.ttl;
    opt.renew_in_batches = batched;
    std::vector<colock::lock_guard> held;
    held.reserve(opts.leases);
    for (std::size_t i = 0; i < opts.leases; ++i)
        held.push_back(co_await locks.co_lock(fmt::format("n{}", i), opt));
    asio::steady_timer timer(ex);
    timer.expires_after(opts.ttl); // every lease renewed before the measurement
    co_await timer.async_wait(asio::use_awaitable);
    auto const counted_before = counter->extended.load();
    auto const a = co_await read_server(stats);
    timer.expires_after(std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(opts.seconds)));
    co_await timer.async_wait(asio::use_awaitable);
    auto const b = co_await read_server(stats);
    renewals = counter->extended.load() - counted_before;
    std::size_t lost = 0;
    for (auto const& g : held)
        lost += g.owns() ? 0 : 1;
    for (auto& g : held)
        co_await g.release();
    if (lost > 0)
        throw std::runtime_error(fmt::format("{} of the library's leases were lost", lost));
    co_return per_renewal(a, b, renewals);
}

asio::awaitable<void> run_all(redis::config cfg, options opts) {
    if (opts.cluster)
        throw std::runtime_error("--cluster is not supported: the raw variants use one server");
    auto const ex = co_await asio::this_coro::executor;
    redis::connection conn(ex, cfg);
    auto stats_cfg = cfg;
    stats_cfg.client_name = "colock-bench-stats";
    redis::connection stats(ex, stats_cfg);
    co_await conn.co_connect();
    co_await stats.co_connect();

    auto const& set = colock::detail::scripts_for(colock::detail::script_variant::plain);
    {
        resp3::request load;
        load.push("FUNCTION", "LOAD", "REPLACE", set.library);
        co_await exec_checked(conn, std::move(load), "FUNCTION LOAD");
    }
    auto const prefix = fmt::format("colock:bench:renew:{}:", ::getpid());
    raw_keys k;
    // Values as long as the library's: a 16-digit owner, a 32-digit token, a fence of the
    // clock's microseconds and a since of its milliseconds.
    std::string const owner = "0123456789abcdef";
    for (std::size_t i = 0; i < opts.leases; ++i) {
        k.keys.push_back(fmt::format("{}{{n{}}}", prefix, i));
        k.tokens.push_back(fmt::format("{:032x}", 0x5eed0000 + i));
        k.values.push_back(colock::detail::held_value_text(
            owner, k.tokens.back(),
            {static_cast<std::int64_t>(1764738211234568 + i), 1764738211234}));
    }
    for (std::size_t first = 0; first < k.keys.size(); first += 1000) {
        resp3::request req;
        for (std::size_t i = first; i < std::min(k.keys.size(), first + 1000); ++i)
            req.push("SET", k.keys[i], k.values[i], "PX", 600'000);
        co_await exec_checked(conn, std::move(req), "SET");
    }
    auto const ttl = std::to_string(std::chrono::milliseconds(60'000).count());

    std::vector<double> each_usec, each_cpu, batch_usec, batch_cpu;
    for (std::size_t round = 0; round <= opts.rounds; ++round) {
        bool const measured = round > 0; // the first warms up
        for (int v = 0; v < 2; ++v) {
            bool const batched = (v + round) % 2 == 1;
            auto const a = co_await read_server(stats);
            if (batched)
                co_await renew_batched(conn, set.extend_known, k, ttl, opts.batch);
            else
                co_await renew_each(conn, set.extend, k, ttl);
            auto const b = co_await read_server(stats);
            if (!measured)
                continue;
            auto const c = per_renewal(a, b, opts.leases);
            (batched ? batch_usec : each_usec).push_back(c.usec);
            (batched ? batch_cpu : each_cpu).push_back(c.cpu_us);
        }
    }
    {
        resp3::request del;
        std::vector<std::string_view> words(k.keys.begin(), k.keys.end());
        del.push_range("DEL", words);
        co_await exec_checked(conn, std::move(del), "DEL");
    }

    // The library: as many guards, renewed by themselves, in batches and alone by turns.
    std::vector<double> lib_usec[2], lib_cpu[2], lib_calls[2];
    std::size_t renewals = 0;
    for (std::size_t round = 0; round < 2 * opts.library_rounds; ++round) {
        bool const batched = round % 2 == 0;
        auto const c = co_await library_phase(conn, stats, fmt::format("{}lib{}:", prefix, round),
                                              opts, batched, renewals);
        lib_usec[batched].push_back(c.usec);
        lib_cpu[batched].push_back(c.cpu_us);
        lib_calls[batched].push_back(c.calls);
    }

    struct row {
        std::string_view name, what;
        double usec, cpu, calls;
    };
    auto const each_u = low(each_usec), each_c = low(each_cpu);
    std::vector<row> const rows{
        {"each", "extend per lease (FCALL)", each_u, each_c, 1.0},
        {"batch", "extend_known per batch", low(batch_usec), low(batch_cpu),
         1.0 / static_cast<double>(opts.batch)},
        {"alone", "the library, renew_in_batches off", low(lib_usec[0]), low(lib_cpu[0]),
         low(lib_calls[0])},
        {"library", "the library, in batches", low(lib_usec[1]), low(lib_cpu[1]),
         low(lib_calls[1])},
    };
    if (!opts.json)
        fmt::print("renewal_costs: {} leases held; per renewal (x extend per lease)\n"
                   "{:<8} {:<28} {:>16} {:>16} {:>12}\n",
                   opts.leases, "variant", "what", "usec", "cpu us", "calls");
    for (auto const& r : rows) {
        if (opts.json)
            fmt::print("{{\"variant\":\"{}\",\"leases\":{},\"usec_per_renewal\":{:.3f},"
                       "\"cpu_us_per_renewal\":{:.3f},\"calls_per_renewal\":{:.4f},"
                       "\"usec_ratio\":{:.3f},\"cpu_ratio\":{:.3f}}}\n",
                       r.name, opts.leases, r.usec, r.cpu, r.calls, r.usec / each_u,
                       r.cpu / each_c);
        else
            fmt::print("{:<8} {:<28} {:>8.3f} ({:4.2f}x) {:>8.3f} ({:4.2f}x) {:>12.4f}\n", r.name,
                       r.what, r.usec, r.usec / each_u, r.cpu, r.cpu / each_c, r.calls);
    }
    if (!opts.json)
        fmt::print("library: {} renewals per run of {:.1f} s; library/alone {:.2f}x usec, "
                   "{:.2f}x cpu\n",
                   renewals, opts.seconds, low(lib_usec[1]) / low(lib_usec[0]),
                   low(lib_cpu[1]) / low(lib_cpu[0]));
    stats.close();
    conn.close();
}

} // namespace

int main(int argc, char** argv) {
    return bench::run_main<options>("renewal_costs", usage_text, argc, argv, parse_option, run_all);
}

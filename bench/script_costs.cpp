// What the Redis server pays per lock cycle, counted two ways, next to the simplest Redis lock in
// the same run: INFO commandstats (the microseconds Redis measures inside its commands) and the
// server process's CPU (INFO cpu: used_cpu_sys + used_cpu_user), which also shows what
// commandstats leaves out: reading and parsing requests, writing replies, the event loop, and
// hashing the source of a script sent with EVAL before it runs.
//
// Every variant runs the same way: --in-flight coroutines at once, each on its own lock name
// (or key), each sending one command per request through one colock::redis::connection, which
// pipelines what they have queued. The library's cycles go through its public API
// (colock::locker, lock_guard), so whatever the library sends is what is measured. The variants:
//   simplest        SET NX PX, then an EVALSHA compare-and-delete (GET, DEL): the yardstick
//   simplest_fcall  the same with the compare-and-delete as a Redis Function (FCALL)
//   unlock          co_lock + awaited release()
//   let_go          co_lock, then the guard destroyed (the release runs in the background)
//   extend          lock_guard::extend(ttl) on held guards: per extend
//   extend_sha      the library's extend script by EVALSHA on the same guards' keys
//   bare            two EVALSHAs of `return 1` with one key and one argument: a script call
//   bare_fcall      the same as two FCALLs
//   args            `return 1` with the keys and arguments of the library's uncontended cycle on
//                   a name it left free (1 key; 3, then 2 arguments)
//   calls           the library's server calls, with those arguments: a GET and a SET PX, then
//                   one SET KEEPTTL GET
//   scripts         the library's one-key acquire and release of that cycle (acquire_known,
//                   release_known in src/lock/store/lock_scripts.hpp) by EVALSHA
//   general         its general acquire and release by EVALSHA, on a free name whose value the
//                   process does not know (another process released it last)
// bare, args, calls and scripts, each adding one part of what the library's scripts do, say where
// the microseconds go.
//
// Method: --batches rounds; each round runs one batch of every variant (in an order that rotates
// from round to round) and one empty batch (a PING alone), each between two readings of
// `INFO cpu commandstats` on a connection of its own. Every batch ends with a PING on the
// connection under test, answered after everything the batch sent, the background releases of
// let_go included. Commandstats counts top-level commands only: the script and function calls
// (EVAL, EVALSHA, FCALL and their _RO forms) and the plain commands a variant sends itself (the
// simplest lock's SET); the commands a script calls are counted again under their own names and
// are left out (and so are the plain commands a locker sends about once a minute to keep its
// holder record; the process CPU has them). The process CPU of a batch is the reading's delta less
// the empty batch's median (the two INFOs and the PING). Per variant the report gives the 20th
// percentile over the batches (a noisy shared machine only ever adds time) and the median, per
// cycle, and their ratios to the simplest lock's.
//
// Usage: script_costs [--cycles N] [--batches N] [--in-flight N] [--url redis://...] [--json]
#include "bench_common.hpp"

#include "lock/store/lock_arguments.hpp"
#include "lock/store/lock_scripts.hpp"

#include <colock/locker.hpp>
#include <colock/redis/connection.hpp>
#include <colock/resp3/request.hpp>
#include <colock/resp3/value.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace redis = colock::redis;
namespace resp3 = colock::resp3;
namespace bench = colock::bench;
using std::chrono::milliseconds;

constexpr std::string_view usage_text =
    R"(Usage: script_costs [--cycles N] [--batches N] [--in-flight N] [--url redis://...] [--json]

What the Redis server pays per lock cycle, INFO commandstats usec and the server process's CPU
(INFO cpu), next to the simplest lock (SET NX PX + EVALSHA compare-and-delete) in the same run:
the library's co_lock + unlock, co_lock + a guard let go, extend, and variants that add one part
of the library's scripts' cost at a time. Interleaved batches; per variant the 20th percentile
over the batches and the median.

  --cycles N      cycles per variant over all batches (default 100000)
  --batches N     batches per variant (default 50)
  --in-flight N   coroutines at once, each on its own name (default 100)
  --url URL       a server of your own (its keys go under colock:bench:<pid>:)
  --json          one JSON object per variant
)";

// The low percentile reported: the noise of a shared machine only adds CPU time, and the 20th
// percentile is steadier from run to run than the minimum.
constexpr double low_percentile = 0.20;

struct options : bench::common_options {
    std::uint64_t cycles = 100'000;
    std::size_t batches = 50;
    std::size_t in_flight = 100;
};

bool parse_option(options& o, bench::option_arg& arg) {
    if (arg.name() == "--cycles")
        o.cycles = bench::parse_whole<std::uint64_t>("--cycles", arg.value(), 1, 100'000'000);
    else if (arg.name() == "--batches")
        o.batches = bench::parse_whole<std::size_t>("--batches", arg.value(), 3, 100'000);
    else if (arg.name() == "--in-flight")
        o.in_flight = bench::parse_whole<std::size_t>("--in-flight", arg.value(), 1, 10'000);
    else
        return false;
    return true;
}

// -------------------------------------------------------------------- workers

// Runs make_worker(i) for every i below `workers`, all at once, and returns when each has ended,
// rethrowing the first failure. It waits for every one even after a failure: they use what the
// caller owns.
template <class MakeWorker>
asio::awaitable<void> run_workers(std::size_t workers, MakeWorker make_worker) {
    auto const ex = co_await asio::this_coro::executor;
    struct join_state {
        explicit join_state(asio::any_io_executor const& e)
            : all_done(e, bench::steady::time_point::max()) {}
        std::size_t running = 0;
        std::exception_ptr failure;
        asio::steady_timer all_done;
    };
    auto join = std::make_shared<join_state>(ex);
    join->running = workers;
    for (std::size_t i = 0; i < workers; ++i)
        asio::co_spawn(ex, make_worker(i), [join](std::exception_ptr e) {
            if (e && !join->failure)
                join->failure = e;
            if (--join->running == 0)
                join->all_done.cancel();
        });
    // One thread: nothing can end between the check and the wait.
    while (join->running > 0)
        co_await join->all_done.async_wait(asio::as_tuple(asio::use_awaitable));
    if (join->failure)
        std::rethrow_exception(join->failure);
}

// -------------------------------------------------------------------- the server's readings

// What one `INFO cpu commandstats` says.
struct reading {
    double cpu_seconds = 0;
    bench::command_calls usec, calls;
};

asio::awaitable<reading> read_server(redis::connection& stats) {
    // Both sections in one INFO, so that a batch pays for one command at each end.
    resp3::request req;
    req.push("INFO", "cpu", "commandstats");
    auto const resp = co_await stats.co_exec(std::move(req));
    auto const text = resp.empty() ? std::nullopt : resp.front().as_string();
    if (!text)
        throw std::runtime_error("INFO cpu commandstats did not answer with a string");
    reading r;
    r.cpu_seconds = bench::parse_cpu_seconds(*text);
    r.usec = bench::parse_commandstats(*text, "usec");
    r.calls = bench::parse_commandstats(*text, "calls");
    co_return r;
}

std::uint64_t delta_of(bench::command_calls const& before, bench::command_calls const& after,
                       std::string_view command) {
    return bench::calls_of(after, command) - bench::calls_of(before, command);
}

// The commands that run a script or function: each is a top-level command (scripts cannot call
// them), and its usec includes the commands it calls.
constexpr std::array<std::string_view, 6> script_entry_commands = {
    "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"};

// What a batch cost the server.
struct sample {
    std::uint64_t cycles = 0;
    std::uint64_t top_level_usec = 0; // commandstats: script entries and the variant's plain ones
    std::uint64_t script_entries = 0; // calls of those entries
    double cpu_us = 0;                // the process's CPU, the empty batch not yet taken off
};

// -------------------------------------------------------------------- variants

// One variant: how its batch runs, which plain commands it sends at top level, and what proves
// that it took the path it is about.
struct variant {
    std::string name;
    std::string what;
    // Runs `per_worker` cycles on each of the in-flight workers.
    std::function<asio::awaitable<void>(std::size_t per_worker)> batch;
    // Plain commands the variant sends itself, counted with the script entries; the same names
    // inside a script are not (the variants that send them run no script that calls them).
    std::vector<std::string> plain_top_level;
    // Script calls per cycle at least: fewer means the library sent something else at top level,
    // which commandstats would not count here (add it to plain_top_level).
    double min_entries_per_cycle = 0;
    // Runs after a batch's second reading, outside it: checks what the batch left.
    std::function<asio::awaitable<void>()> check;
    std::vector<sample> samples;
    bench::command_calls all_calls; // every command's calls over the measured batches
};

// The way a raw variant sends one step of a cycle.
enum class call_form { set_nx_px, evalsha, fcall };

// The arguments of a step from the cycle's token and the fence its acquire answered.
using make_arguments =
    std::function<std::vector<std::string>(std::string const& token, std::int64_t fence)>;

// A step of a raw cycle: "$T" in an argument is the cycle's token; keys are suffixes of the
// worker's lock key. `make_args`, when set, gives the arguments instead (the library's, built by
// lock_arguments.hpp as the store builds them).
struct raw_step {
    call_form form = call_form::evalsha;
    std::string_view source; // evalsha: the script, loaded before the first batch
    std::string function;    // fcall: its name
    std::vector<std::string> key_suffixes;
    std::vector<std::string> args;
    std::string sha; // evalsha, once loaded
    make_arguments make_args = {};
};

struct raw_cycle {
    raw_step acquire, release;
    bool library_scripts = false; // the acquire answers a fence, and the lock starts "F <fence>"
    // The library's one-key acquire (acquire_known): its arguments take the fence of the free
    // value the worker's last release left, and it answers 1 for the next.
    bool known_acquire = false;
};

// Per worker of a library variant: the fence of the free value its last release left (the
// primed one at first).
using free_fences = std::vector<std::int64_t>;

std::string worker_key(std::string const& prefix, std::string_view family, std::size_t worker) {
    return fmt::format("{}{{{}:{}}}", prefix, family, worker);
}

resp3::request step_request(raw_step const& s, std::string const& key, std::string const& token,
                            std::int64_t fence = 0) {
    resp3::request req;
    if (s.form == call_form::set_nx_px) {
        req.push("SET", key, token, "NX", "PX", "600000");
        return req;
    }
    std::vector<std::string> words;
    words.push_back(s.form == call_form::evalsha ? s.sha : s.function);
    words.push_back(std::to_string(s.key_suffixes.size()));
    for (auto const& suffix : s.key_suffixes)
        words.push_back(key + suffix);
    if (s.make_args)
        for (auto& a : s.make_args(token, fence))
            words.push_back(std::move(a));
    else
        for (auto const& a : s.args)
            words.push_back(a == "$T" ? token : a);
    req.push_range(s.form == call_form::evalsha ? "EVALSHA" : "FCALL", words);
    return req;
}

// One worker's cycles of a raw variant: acquire, then release, one command per request.
asio::awaitable<void> raw_worker(redis::connection& conn, std::shared_ptr<raw_cycle const> cycle,
                                 std::string key, std::string name, std::size_t cycles,
                                 std::uint64_t& tokens, std::int64_t& free_fence) {
    auto const& c = *cycle;
    for (std::size_t i = 0; i < cycles; ++i) {
        // As long as the library's tokens: 128 bits in hex.
        auto const token = fmt::format("{:032x}", ++tokens);
        auto const acquired =
            co_await conn.co_exec(step_request(c.acquire, key, token, free_fence));
        auto const& a = acquired.at(0);
        // An acquire or release off its path would measure another path than this one's.
        // The library's acquire answers its fence as a number or (on the uncontended path) as
        // its decimal text; the one-key acquire answers 1 for the one after the free value's.
        std::int64_t fence = a.as_integer().value_or(0);
        if (auto const text = a.as_string(); text && !a.as_integer())
            fence = std::atoll(std::string(*text).c_str());
        if (c.known_acquire)
            fence = fence == 1 ? free_fence + 1 : 0;
        bool const acquire_ok = c.acquire.form == call_form::set_nx_px ? a.as_string() == "OK"
                                : c.library_scripts                    ? fence >= 1
                                                                       : true;
        if (!acquire_ok)
            throw std::runtime_error(fmt::format("{}: the acquire of {} did not take its "
                                                 "uncontended path: {}",
                                                 name, key, resp3::to_debug_string(a)));
        auto const released = co_await conn.co_exec(step_request(c.release, key, token, fence));
        if (released.at(0).as_integer().value_or(0) < 1)
            throw std::runtime_error(fmt::format("{}: the release of {} freed nothing: {}", name,
                                                 key, resp3::to_debug_string(released.at(0))));
        free_fence = fence;
    }
}

asio::awaitable<std::string> load_script(redis::connection& conn, std::string_view source) {
    resp3::request req;
    req.push("SCRIPT", "LOAD", source);
    auto const reply = co_await conn.co_exec(std::move(req));
    auto const sha = reply.at(0).as_string();
    if (!sha)
        throw std::runtime_error("SCRIPT LOAD answered " + resp3::to_debug_string(reply.at(0)));
    co_return std::string(*sha);
}

// The Redis Functions of the FCALL variants: a compare-and-delete and `return 1`.
constexpr std::string_view function_library = R"lua(#!lua name=colock_bench
redis.register_function('colock_bench_cad', function(keys, args)
  if redis.call('GET', keys[1]) == args[1] then return redis.call('DEL', keys[1]) end
  return 0
end)
redis.register_function('colock_bench_bare', function(keys, args) return 1 end)
)lua";

// Loads function_library; false where the server refuses FUNCTION (before Redis 7, an ACL).
asio::awaitable<bool> load_functions(redis::connection& conn) {
    resp3::request req;
    req.push("FUNCTION", "LOAD", "REPLACE", function_library);
    auto [ec, resp] = co_await conn.async_exec(std::move(req), asio::as_tuple(asio::use_awaitable));
    co_return !ec;
}

// -------------------------------------------------------------------- the run

struct run_context {
    redis::connection& conn;
    std::string prefix; // colock:bench:<pid>:
    std::size_t in_flight = 0;
    std::uint64_t tokens = 0;
    std::vector<std::string> keys_to_delete;
};

constexpr std::string_view compare_and_delete =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) "
    "else return 0 end";

// The raw variants, their scripts loaded and their keys made ready.
asio::awaitable<void> add_raw_variants(run_context& ctx, std::vector<variant>& out,
                                       bool functions) {
    // As long as a locker's id.
    std::string const owner = "0123456789abcdef";
    // As src/lock/store/single_connection_store.cpp sends them for co_lock and release(), built by
    // the same functions: acquire (the holder, ttl, queueing "1" with the queue entry's ttl and
    // the claim), release (what the grant wrote, the free value with the holder's fence, the
    // claim and the token).
    auto const now_ms = std::chrono::duration_cast<milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    make_arguments const acquire_args = [owner, now_ms](std::string const& token, std::int64_t) {
        auto const a = colock::detail::acquire_arguments(owner, token, now_ms, milliseconds(30000),
                                                         colock::detail::queueing::when_held,
                                                         milliseconds(3000), milliseconds(1000));
        return std::vector<std::string>(a.begin(), a.end());
    };
    make_arguments const release_args = [](std::string const& token, std::int64_t fence) {
        auto const a = colock::detail::release_arguments(colock::detail::release_kind::hand_on,
                                                         token, milliseconds(1000), fence);
        return std::vector<std::string>(a.begin(), a.end());
    };
    // The one-key calls of a name whose value the process knows: the free value its release
    // left, and what its grant wrote.
    make_arguments const known_acquire_args = [owner, now_ms](std::string const& token,
                                                              std::int64_t free_fence) {
        auto const a = colock::detail::known_acquire_arguments(
            free_fence, owner, token, colock::detail::held_value{free_fence + 1, now_ms},
            milliseconds(30000));
        return a ? std::vector<std::string>(a->begin(), a->end()) : std::vector<std::string>();
    };
    make_arguments const known_release_args = [owner, now_ms](std::string const& token,
                                                              std::int64_t fence) {
        auto const k = colock::detail::known_release_arguments(
            owner, token, colock::detail::held_value{fence, now_ms}, fence);
        return std::vector<std::string>(k.args.begin(), k.args.end());
    };
    std::vector<std::string> const lock_keys{"", ":q", ":qd"};
    std::vector<std::string> const one_key{""};
    std::vector<std::string> const one_arg{"$T"};
    constexpr std::string_view bare = "return 1";
    constexpr std::string_view get_set_acquire =
        "redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1";
    constexpr std::string_view get_set_release =
        "redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL', 'GET') return 1";
    auto const script = [](std::string_view source, std::vector<std::string> keys,
                           std::vector<std::string> args) {
        return raw_step{call_form::evalsha, source, {}, std::move(keys), std::move(args), {}};
    };
    auto const library_args = [](std::string_view source, std::vector<std::string> keys,
                                 make_arguments args) {
        return raw_step{call_form::evalsha, source, {}, std::move(keys), {}, {}, std::move(args)};
    };
    auto const function = [](std::string name, std::vector<std::string> keys,
                             std::vector<std::string> args) {
        return raw_step{call_form::fcall, {}, std::move(name), std::move(keys),
                        std::move(args),  {}};
    };
    raw_step const set_nx_px{call_form::set_nx_px, {}, {}, one_key, one_arg, {}};

    struct raw_def {
        std::string name, what;
        raw_cycle cycle;
        std::vector<std::string> plain;
        bool needs_functions = false;
    };
    std::vector<raw_def> defs;
    defs.push_back({"simplest",
                    "SET NX PX, then EVALSHA compare-and-delete",
                    {set_nx_px, script(compare_and_delete, one_key, one_arg), false},
                    {"set"}});
    defs.push_back({"simplest_fcall",
                    "SET NX PX, then FCALL compare-and-delete",
                    {set_nx_px, function("colock_bench_cad", one_key, one_arg), false},
                    {"set"},
                    true});
    defs.push_back({"bare",
                    "2 EVALSHA of `return 1`, 1 key, 1 argument",
                    {script(bare, one_key, one_arg), script(bare, one_key, one_arg), false},
                    {}});
    defs.push_back({"bare_fcall",
                    "2 FCALL of `return 1`, 1 key, 1 argument",
                    {function("colock_bench_bare", one_key, one_arg),
                     function("colock_bench_bare", one_key, one_arg), false},
                    {},
                    true});
    std::vector<std::string> const lock_key_only{""};
    defs.push_back({"args",
                    "bare with the library's keys and arguments",
                    {library_args(bare, lock_key_only, known_acquire_args),
                     library_args(bare, lock_key_only, known_release_args), false},
                    {}});
    defs.push_back({"calls",
                    "+ the library's calls: GET and SET PX, then SET KEEPTTL GET",
                    {library_args(get_set_acquire, lock_key_only, known_acquire_args),
                     library_args(get_set_release, lock_key_only, known_release_args), false},
                    {}});
    defs.push_back(
        {"scripts",
         "the library's one-key acquire and release by EVALSHA (a name it left free)",
         {library_args(colock::detail::acquire_known_source, lock_key_only, known_acquire_args),
          library_args(colock::detail::release_known_source, lock_key_only, known_release_args),
          true, true},
         {}});
    defs.push_back({"general",
                    "the library's general acquire and release by EVALSHA (a free name it does "
                    "not know)",
                    {library_args(colock::detail::acquire_source, lock_keys, acquire_args),
                     library_args(colock::detail::release_source, lock_keys, release_args), true},
                    {}});

    for (auto& d : defs) {
        if (d.needs_functions && !functions)
            continue;
        for (auto* step : {&d.cycle.acquire, &d.cycle.release})
            if (step->form == call_form::evalsha)
                step->sha = co_await load_script(ctx.conn, step->source);
        auto cycle = std::make_shared<raw_cycle>(d.cycle);
        auto fences = std::make_shared<free_fences>(ctx.in_flight, now_ms * 1000);
        std::vector<std::string> keys;
        for (std::size_t w = 0; w < ctx.in_flight; ++w) {
            keys.push_back(worker_key(ctx.prefix, d.name, w));
            for (auto const& suffix : {":q", ":qd"})
                ctx.keys_to_delete.push_back(keys.back() + suffix);
            ctx.keys_to_delete.push_back(keys.back());
            if (cycle->library_scripts) {
                // The uncontended path starts from a free lock that has been used: "F <fence>",
                // a fence of the size the library's first one has (the server's clock in us).
                resp3::request prime;
                prime.push("SET", keys.back(), fmt::format("F {}000", now_ms), "PX", "600000");
                co_await ctx.conn.co_exec(std::move(prime));
            }
        }
        variant v;
        v.name = d.name;
        v.what = d.what;
        v.plain_top_level = d.plain;
        v.batch = [&ctx, cycle, keys, fences, name = d.name](std::size_t per_worker) {
            return run_workers(ctx.in_flight,
                               [&ctx, cycle, keys, fences, name, per_worker](std::size_t w) {
                                   return raw_worker(ctx.conn, cycle, keys[w], name, per_worker,
                                                     ctx.tokens, (*fences)[w]);
                               });
        };
        out.push_back(std::move(v));
    }
}

// The library's cycles through its public API. Each variant has a locker of its own, so that
// the held guards of one do not shape another's (a locker keeps a holder record while it holds).
struct library_parts {
    std::shared_ptr<colock::locker> unlock_locker, let_go_locker, extend_locker;
    std::vector<std::string> names;                        // per worker: "w<i>"
    std::shared_ptr<std::vector<colock::lock_guard>> held; // extend's guards, one per worker
    std::string extend_sha;
};

std::string lock_key(colock::locker const& l, std::string const& name) {
    return fmt::format("{}{{{}}}", l.key_prefix(), name);
}

// The library's lock and queue keys of `name`, and a locker's holder record, to delete at the
// end.
void add_library_keys(run_context& ctx, colock::locker const& l,
                      std::vector<std::string> const& names) {
    for (auto const& n : names) {
        auto const key = lock_key(l, n);
        ctx.keys_to_delete.push_back(key);
        ctx.keys_to_delete.push_back(key + ":q");
        ctx.keys_to_delete.push_back(key + ":qd");
    }
    ctx.keys_to_delete.push_back(l.key_prefix() + "locker:" + l.id());
}

// The extend's lease: long, renewed by the variant alone.
colock::lock_options held_options() {
    colock::lock_options o;
    o.ttl = std::chrono::minutes{10};
    o.auto_renew = false;
    return o;
}

asio::awaitable<void> add_library_variants(run_context& ctx, library_parts& lib,
                                           std::vector<variant>& out) {
    for (std::size_t w = 0; w < ctx.in_flight; ++w)
        lib.names.push_back(fmt::format("w{}", w));
    lib.unlock_locker = std::make_shared<colock::locker>(ctx.conn, ctx.prefix + "unlock:");
    lib.let_go_locker = std::make_shared<colock::locker>(ctx.conn, ctx.prefix + "letgo:");
    lib.extend_locker = std::make_shared<colock::locker>(ctx.conn, ctx.prefix + "extend:");
    for (auto const* l : {&lib.unlock_locker, &lib.let_go_locker, &lib.extend_locker})
        add_library_keys(ctx, **l, lib.names);

    variant unlock;
    unlock.name = "unlock";
    unlock.what = "the library: co_lock + awaited release()";
    unlock.min_entries_per_cycle = 2;
    unlock.batch = [&ctx, &lib](std::size_t per_worker) {
        return run_workers(ctx.in_flight, [&lib, per_worker](std::size_t w) {
            return [](colock::locker& l, std::string name,
                      std::size_t cycles) -> asio::awaitable<void> {
                for (std::size_t i = 0; i < cycles; ++i) {
                    auto guard = co_await l.co_lock(name);
                    if (!co_await guard.release())
                        throw std::runtime_error(
                            fmt::format("unlock: {} was no longer ours at release()", name));
                }
            }(*lib.unlock_locker, lib.names[w], per_worker);
        });
    };
    out.push_back(std::move(unlock));

    variant let_go;
    let_go.name = "let_go";
    let_go.what = "the library: co_lock, then the guard destroyed (background release)";
    let_go.min_entries_per_cycle = 2;
    let_go.batch = [&ctx, &lib](std::size_t per_worker) {
        return run_workers(ctx.in_flight, [&lib, per_worker](std::size_t w) {
            return [](colock::locker& l, std::string name,
                      std::size_t cycles) -> asio::awaitable<void> {
                for (std::size_t i = 0; i < cycles; ++i) {
                    // Destroyed at the end of the iteration: its release is handed to the
                    // connection then, ahead of the next co_lock and of the batch's last PING.
                    auto guard = co_await l.co_lock(name);
                }
            }(*lib.let_go_locker, lib.names[w], per_worker);
        });
    };
    // The PING that ended the batch was answered after every release: each lock must be free.
    let_go.check = [&lib]() -> asio::awaitable<void> {
        for (auto const& name : lib.names) {
            auto const status = co_await lib.let_go_locker->co_status(name);
            if (status.state != colock::lock_state::free)
                throw std::runtime_error(fmt::format(
                    "let_go: {} is {} after the batch's PING: its release was not answered "
                    "before it",
                    name, colock::to_string(status.state)));
        }
    };
    out.push_back(std::move(let_go));

    // The extend variants renew guards held for the whole run.
    lib.held = std::make_shared<std::vector<colock::lock_guard>>();
    for (auto const& name : lib.names) {
        auto guard = co_await lib.extend_locker->co_lock(name, held_options());
        lib.held->push_back(std::move(guard));
    }
    variant extend;
    extend.name = "extend";
    extend.what = "the library: lock_guard::extend(ttl) on a held guard, per extend";
    extend.min_entries_per_cycle = 1;
    extend.batch = [&ctx, &lib](std::size_t per_worker) {
        return run_workers(ctx.in_flight, [&lib, per_worker](std::size_t w) {
            return [](colock::lock_guard& guard, std::size_t cycles) -> asio::awaitable<void> {
                for (std::size_t i = 0; i < cycles; ++i)
                    if (!co_await guard.extend(held_options().ttl))
                        throw std::runtime_error(
                            fmt::format("extend: {} was no longer ours", guard.name()));
            }((*lib.held)[w], per_worker);
        });
    };
    out.push_back(std::move(extend));

    lib.extend_sha = co_await load_script(ctx.conn, colock::detail::extend_source);
    variant extend_sha;
    extend_sha.name = "extend_sha";
    extend_sha.what = "the library's extend script by EVALSHA on the same guards, per extend";
    extend_sha.batch = [&ctx, &lib](std::size_t per_worker) {
        return run_workers(ctx.in_flight, [&ctx, &lib, per_worker](std::size_t w) {
            return [](redis::connection& conn, std::string sha, std::string key,
                      colock::lock_guard const& guard,
                      std::size_t cycles) -> asio::awaitable<void> {
                auto const ttl = std::to_string(held_options().ttl.count());
                auto const fence = std::to_string(guard.fence());
                for (std::size_t i = 0; i < cycles; ++i) {
                    resp3::request req;
                    req.push("EVALSHA", sha, 1, key, guard.token(), ttl, fence);
                    auto const reply = co_await conn.co_exec(std::move(req));
                    if (reply.at(0).as_integer().value_or(0) != 1)
                        throw std::runtime_error(fmt::format("extend_sha: {} answered {}", key,
                                                             resp3::to_debug_string(reply.at(0))));
                }
            }(ctx.conn, lib.extend_sha, lock_key(*lib.extend_locker, lib.names[w]), (*lib.held)[w],
                                          per_worker);
        });
    };
    out.push_back(std::move(extend_sha));
}

asio::awaitable<void> ping(redis::connection& conn) {
    resp3::request req;
    req.push("PING");
    co_await conn.co_exec(std::move(req));
}

// One batch of `v` between two readings; `measured` false for the warm-up round.
asio::awaitable<void> run_batch(run_context& ctx, redis::connection& stats, variant& v,
                                std::size_t per_worker, bool measured) {
    auto const before = co_await read_server(stats);
    if (v.batch)
        co_await v.batch(per_worker);
    co_await ping(ctx.conn);
    auto const after = co_await read_server(stats);
    if (v.check)
        co_await v.check();
    if (!measured)
        co_return;
    sample s;
    s.cycles = v.batch ? per_worker * ctx.in_flight : 0;
    s.cpu_us = (after.cpu_seconds - before.cpu_seconds) * 1e6;
    for (auto const entry : script_entry_commands) {
        s.top_level_usec += delta_of(before.usec, after.usec, entry);
        s.script_entries += delta_of(before.calls, after.calls, entry);
    }
    for (auto const& plain : v.plain_top_level)
        s.top_level_usec += delta_of(before.usec, after.usec, plain);
    for (auto const& [command, calls] : after.calls)
        if (!bench::is_not_from_client(command))
            v.all_calls[command] += calls - bench::calls_of(before.calls, command);
    if (s.cycles > 0 && static_cast<double>(s.script_entries) <
                            v.min_entries_per_cycle * static_cast<double>(s.cycles))
        throw std::runtime_error(fmt::format(
            "{}: {} script calls for {} cycles: the library sent something else at top level, "
            "which this count leaves out (name it in the variant's plain_top_level)",
            v.name, s.script_entries, s.cycles));
    v.samples.push_back(s);
}

double percentile(std::vector<double> values, double p) {
    if (values.empty())
        return 0;
    std::sort(values.begin(), values.end());
    auto const at = p * static_cast<double>(values.size() - 1);
    auto const low = static_cast<std::size_t>(at);
    auto const high = std::min(low + 1, values.size() - 1);
    return values[low] + (values[high] - values[low]) * (at - static_cast<double>(low));
}

// Per variant: both counts per cycle, at the low percentile and the median.
struct summary {
    double usec_low = 0, usec_median = 0;
    double cpu_low = 0, cpu_median = 0;
    double cpu_p80 = 0;
    double entries_per_cycle = 0;
    std::vector<double> cpu_per_cycle, usec_per_cycle; // per round, for paired ratios
};

summary summarize(variant const& v, double empty_cpu_us) {
    summary s;
    std::uint64_t entries = 0, cycles = 0;
    for (auto const& b : v.samples) {
        auto const n = static_cast<double>(b.cycles);
        s.usec_per_cycle.push_back(static_cast<double>(b.top_level_usec) / n);
        s.cpu_per_cycle.push_back((b.cpu_us - empty_cpu_us) / n);
        entries += b.script_entries;
        cycles += b.cycles;
    }
    s.usec_low = percentile(s.usec_per_cycle, low_percentile);
    s.usec_median = percentile(s.usec_per_cycle, 0.5);
    s.cpu_low = percentile(s.cpu_per_cycle, low_percentile);
    s.cpu_median = percentile(s.cpu_per_cycle, 0.5);
    s.cpu_p80 = percentile(s.cpu_per_cycle, 0.8);
    s.entries_per_cycle = static_cast<double>(entries) / static_cast<double>(cycles);
    return s;
}

// The median over the rounds of the variant's figure over the simplest lock's in the same round:
// what slows a whole round down cancels out.
double paired_ratio(std::vector<double> const& mine, std::vector<double> const& simplest) {
    std::vector<double> ratios;
    for (std::size_t i = 0; i < mine.size() && i < simplest.size(); ++i)
        if (simplest[i] > 0)
            ratios.push_back(mine[i] / simplest[i]);
    return percentile(std::move(ratios), 0.5);
}

std::string calls_json(bench::command_calls const& calls, double cycles) {
    std::string out = "{";
    for (auto const& [command, n] : calls) {
        if (n == 0)
            continue;
        if (out.size() > 1)
            out += ',';
        out += fmt::format("\"{}\":{:.3f}", command, static_cast<double>(n) / cycles);
    }
    return out + "}";
}

void report(options const& opts, std::vector<variant> const& variants, variant const& empty,
            std::size_t per_batch, std::string const& server_version) {
    std::vector<double> empty_cpu;
    for (auto const& b : empty.samples)
        empty_cpu.push_back(b.cpu_us);
    double const empty_median = percentile(empty_cpu, 0.5);
    std::vector<summary> sums;
    for (auto const& v : variants)
        sums.push_back(summarize(v, empty_median));
    auto const& simplest = sums.front(); // variants start with the yardstick
    auto const batches = opts.batches;
    if (opts.json) {
        fmt::print("{{\"variant\":\"empty\",\"what\":\"a PING and the two INFO readings\","
                   "\"server_cpu_us_per_batch\":{:.1f},\"server_cpu_us_per_batch_p20\":{:.1f},"
                   "\"batches\":{},\"redis_version\":\"{}\"}}\n",
                   empty_median, percentile(empty_cpu, low_percentile), batches, server_version);
        std::optional<double> previous_usec, previous_cpu;
        for (std::size_t i = 0; i < variants.size(); ++i) {
            auto const& v = variants[i];
            auto const& s = sums[i];
            // The breakdown's steps, each over the one before it.
            bool const in_chain = v.name == "args" || v.name == "calls" || v.name == "scripts";
            double const cycles = static_cast<double>(per_batch) * static_cast<double>(batches);
            fmt::print(
                "{{\"variant\":\"{}\",\"what\":\"{}\",\"batches\":{},\"cycles_per_batch\":{},"
                "\"in_flight\":{},\"percentile\":{:.0f},"
                "\"server_us_per_cycle\":{:.3f},\"server_us_per_cycle_median\":{:.3f},"
                "\"server_cpu_us_per_cycle\":{:.3f},\"server_cpu_us_per_cycle_median\":{:.3f},"
                "\"server_cpu_us_per_cycle_p80\":{:.3f},"
                "\"over_simplest_us\":{:.3f},\"over_simplest_cpu\":{:.3f},"
                "\"over_simplest_us_paired\":{:.3f},\"over_simplest_cpu_paired\":{:.3f},"
                "\"added_us\":{},\"added_cpu_us\":{},\"script_calls_per_cycle\":{:.3f},"
                "\"calls_per_cycle\":{}}}\n",
                v.name, v.what, batches, per_batch, opts.in_flight, low_percentile * 100,
                s.usec_low, s.usec_median, s.cpu_low, s.cpu_median, s.cpu_p80,
                s.usec_low / simplest.usec_low, s.cpu_low / simplest.cpu_low,
                paired_ratio(s.usec_per_cycle, simplest.usec_per_cycle),
                paired_ratio(s.cpu_per_cycle, simplest.cpu_per_cycle),
                in_chain && previous_usec ? fmt::format("{:.3f}", s.usec_low - *previous_usec)
                                          : std::string("null"),
                in_chain && previous_cpu ? fmt::format("{:.3f}", s.cpu_low - *previous_cpu)
                                         : std::string("null"),
                s.entries_per_cycle, calls_json(v.all_calls, cycles));
            if (v.name == "bare" || in_chain) {
                previous_usec = s.usec_low;
                previous_cpu = s.cpu_low;
            }
        }
        return;
    }
    fmt::print("script_costs: Redis {}, {} interleaved batches of {} cycles per variant, {} in "
               "flight; per cycle, p20 over the batches (median)\n",
               server_version, batches, per_batch, opts.in_flight);
    fmt::print("{:<15} {:>15} {:>13}  {:>15} {:>13} {:>6}  {}\n", "variant", "commandstats us",
               "x (paired)", "server CPU us", "x (paired)", "spread", "what");
    for (std::size_t i = 0; i < variants.size(); ++i) {
        auto const& v = variants[i];
        auto const& s = sums[i];
        fmt::print("{:<15} {:>6.2f} ({:>6.2f}) {:>5.2f} ({:>5.2f})  {:>6.2f} ({:>6.2f}) {:>5.2f} "
                   "({:>5.2f}) {:>6.2f}  {}\n",
                   v.name, s.usec_low, s.usec_median, s.usec_low / simplest.usec_low,
                   paired_ratio(s.usec_per_cycle, simplest.usec_per_cycle), s.cpu_low, s.cpu_median,
                   s.cpu_low / simplest.cpu_low,
                   paired_ratio(s.cpu_per_cycle, simplest.cpu_per_cycle),
                   s.cpu_median > 0 ? (s.cpu_p80 - s.cpu_low) / s.cpu_median : 0.0, v.what);
    }
    fmt::print("commandstats: top-level commands only (script and function calls, and the "
               "simplest lock's SET); server CPU: INFO cpu, less the empty batch's median "
               "({:.0f} us: a PING and two INFOs); x: p20 over the simplest lock's p20 (paired: "
               "the median over the rounds of the ratio within a round); spread: (p80 - p20) / "
               "median of the CPU per cycle\n",
               empty_median);
}

asio::awaitable<void> delete_keys(redis::connection& conn, std::vector<std::string> const& keys) {
    for (std::size_t at = 0; at < keys.size(); at += 500) {
        resp3::request req;
        std::vector<std::string> some(
            keys.begin() + static_cast<std::ptrdiff_t>(at),
            keys.begin() + static_cast<std::ptrdiff_t>(std::min(at + 500, keys.size())));
        req.push_range("DEL", some);
        co_await conn.co_exec(std::move(req));
    }
}

asio::awaitable<std::string> server_version(redis::connection& conn) {
    auto const info = co_await bench::info_section(conn, "server");
    constexpr std::string_view field = "redis_version:";
    auto const at = info.find(field);
    if (at == std::string::npos)
        co_return std::string("?");
    auto const end = info.find_first_of("\r\n", at);
    co_return info.substr(at + field.size(), end - at - field.size());
}

asio::awaitable<void> run_all(redis::config cfg, options opts) {
    auto const ex = co_await asio::this_coro::executor;
    // No health-check PINGs on either connection: they would land in some batches and not others.
    cfg.health_check_interval = milliseconds{0};
    auto conn = std::make_shared<redis::connection>(ex, cfg);
    co_await conn->co_connect();
    auto stats_cfg = cfg;
    stats_cfg.client_name = "colock-bench-stats";
    auto stats = std::make_shared<redis::connection>(ex, stats_cfg);
    co_await stats->co_connect();

    run_context ctx{*conn, fmt::format("colock:bench:{}:", ::getpid()), opts.in_flight, 0, {}};
    auto const per_worker = std::max<std::size_t>(1, opts.cycles / opts.batches / opts.in_flight);
    auto const per_batch = per_worker * opts.in_flight;

    bool const functions = co_await load_functions(*conn);
    std::vector<variant> variants;
    co_await add_raw_variants(ctx, variants, functions);
    library_parts lib;
    co_await add_library_variants(ctx, lib, variants);
    // The yardstick first, then the library's cycles, then the breakdown, for the report.
    std::vector<std::string> const order{"simplest", "simplest_fcall", "unlock",  "let_go",
                                         "extend",   "extend_sha",     "bare",    "bare_fcall",
                                         "args",     "calls",          "scripts", "general"};
    std::stable_sort(variants.begin(), variants.end(), [&](variant const& a, variant const& b) {
        return std::find(order.begin(), order.end(), a.name) <
               std::find(order.begin(), order.end(), b.name);
    });
    variant empty;
    empty.name = "empty";
    auto const version = co_await server_version(*stats);
    auto const reconnects = conn->reconnect_count();

    // A warm-up round first (scripts loaded, holder records written, buffers grown), then the
    // measured rounds, each starting one variant further on.
    std::size_t const n = variants.size() + 1;
    for (std::size_t round = 0; round <= opts.batches; ++round) {
        bool const measured = round > 0;
        for (std::size_t k = 0; k < n; ++k) {
            auto const at = (round + k) % n;
            auto& v = at == variants.size() ? empty : variants[at];
            co_await run_batch(ctx, *stats, v, per_worker, measured);
        }
        if (!opts.json && measured && round % 10 == 0)
            fmt::print(stderr, "script_costs: {} of {} rounds\n", round, opts.batches);
    }
    if (conn->reconnect_count() != reconnects)
        throw std::runtime_error("the connection under test reconnected during the run");
    report(opts, variants, empty, per_batch, version);

    for (auto& guard : *lib.held)
        co_await guard.release();
    lib = {};
    co_await ping(*conn);
    co_await delete_keys(*conn, ctx.keys_to_delete);
    if (functions) {
        resp3::request req;
        req.push("FUNCTION", "DELETE", "colock_bench");
        co_await conn->co_exec(std::move(req));
    }
    stats->close();
    conn->close();
}

} // namespace

int main(int argc, char** argv) {
    return bench::run_main<options>("script_costs", usage_text, argc, argv, parse_option, run_all);
}

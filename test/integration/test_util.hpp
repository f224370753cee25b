// Helpers shared by the integration tests: run a coroutine to completion on a fresh
// io_context, build requests in one line, name the lock's keys, and probe the server.
#pragma once

#include <colock/lock_options.hpp>
#include <colock/locker.hpp>
#include <colock/log.hpp>
#include <colock/redis/connection.hpp>
#include <colock_test/failures.hpp>
#include <colock_test/redis_server.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <future>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace colock::test {

namespace asio = boost::asio;
using steady = std::chrono::steady_clock;
// What every test file would otherwise say again, for those that use this namespace.
using namespace std::chrono_literals;
using boost::system::error_code;
using boost::system::system_error;

/// For `auto [ec, ...] = co_await op(..., as_tuple)`.
inline constexpr auto as_tuple = asio::as_tuple(asio::use_awaitable);

/// Runs `make(ctx)`'s coroutine on a fresh io_context until the context runs out of work,
/// rethrowing what the coroutine threw. Fails if it has not finished within `limit`.
template <class Make>
void run_test(Make make, std::chrono::seconds limit = std::chrono::seconds{60}) {
    coroutine_end end;
    asio::io_context ctx;
    spawn_watched(ctx, make(ctx), end);
    auto const deadline = std::chrono::steady_clock::now() + limit;
    while (!end.finished && std::chrono::steady_clock::now() < deadline)
        ctx.run_for(std::chrono::milliseconds{100});
    if (!end.finished)
        throw std::runtime_error("test coroutine did not finish in time");
    if (end.thrown)
        std::rethrow_exception(end.thrown);
}

/// Runs `ctx` on threads of its own, for tests that block on futures, until join() or the
/// destructor lets its work run out and joins them.
class context_threads {
public:
    explicit context_threads(asio::io_context& ctx, int count = 1)
        : work_(asio::make_work_guard(ctx)) {
        for (int i = 0; i < count; ++i)
            threads_.emplace_back([&ctx] { ctx.run(); });
    }
    context_threads(context_threads const&) = delete;
    context_threads& operator=(context_threads const&) = delete;
    ~context_threads() { join(); }

    void join() {
        work_.reset();
        for (auto& t : threads_)
            if (t.joinable())
                t.join();
    }

private:
    asio::executor_work_guard<asio::io_context::executor_type> work_;
    std::vector<std::thread> threads_;
};

/// Runs `scenario(conn)` as run_test does, on a connection with `cfg`: connected before the
/// scenario, closed once it returns (when it throws, left to the io_context's end).
template <class Scenario>
void run_connected(redis::config const& cfg, Scenario scenario) {
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), cfg};
        co_await conn.async_connect(asio::use_awaitable);
        co_await scenario(conn);
        conn.close();
    });
}

/// One command as a request. Variadic rather than an initializer_list: GCC 12 miscompiles
/// braced lists of strings inside coroutines.
template <class... Args>
resp3::request command(std::string_view name, Args const&... args) {
    resp3::request req;
    req.push(name, args...);
    return req;
}

/// The code `op` throws as a system_error, or an empty code when it completes.
template <class T>
asio::awaitable<error_code> error_of(asio::awaitable<T> op) {
    auto const failed = co_await failure_of(std::move(op));
    co_return failed.code;
}

/// The completion for co_spawn of a coroutine that counts itself in `finished` when it returns:
/// when it throws instead, counts it in `failed` and in `finished`.
template <class Failed, class Finished>
auto count_failure(Failed& failed, Finished& finished) {
    return [&failed, &finished](std::exception_ptr e) {
        if (e) {
            ++failed;
            ++finished;
        }
    };
}

/// A vector of strings, for the same reason as `command`.
template <class... Args>
std::vector<std::string> strings(Args const&... args) {
    std::vector<std::string> out;
    (out.emplace_back(args), ...);
    return out;
}

inline asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor);
    t.expires_after(d);
    co_await t.async_wait(asio::use_awaitable);
}

/// The one bounded wait of the tests: asks `probe()` every `step` until it answers true or `limit`
/// has passed, and returns its last answer. `probe()` returns a bool (a flag the test's coroutines
/// set) or an awaitable of one (a state read from the server). For what a test can observe; a fixed
/// sleep stays only where time itself must pass.
template <class Probe>
asio::awaitable<bool> eventually(Probe probe,
                                 std::chrono::milliseconds limit = std::chrono::milliseconds{2000},
                                 std::chrono::milliseconds step = std::chrono::milliseconds{5}) {
    auto const end = steady::now() + limit;
    for (;;) {
        bool ok = false;
        if constexpr (std::is_convertible_v<std::invoke_result_t<Probe&>, bool>)
            ok = probe();
        else
            ok = co_await probe();
        if (ok || steady::now() >= end)
            co_return ok;
        co_await sleep_for(step);
    }
}

/// Whether `probe()` holds throughout `d`, asked as eventually() asks: false as soon as it does
/// not. For what must not happen within a window (a waiter let in, a lease lapsing): the test
/// fails at the moment it does, not at the window's end.
template <class Probe>
asio::awaitable<bool> stays(Probe probe, std::chrono::milliseconds d) {
    if constexpr (std::is_convertible_v<std::invoke_result_t<Probe&>, bool>)
        co_return !co_await eventually([&] { return !probe(); }, d);
    else
        co_return !co_await eventually(
            [&]() -> asio::awaitable<bool> { co_return !co_await probe(); }, d);
}

/// A unique key per test, so tests sharing one server never see each other's data.
inline std::string unique_key(std::string_view what) {
    static int counter = 0;
    return "test:" + std::string(what) + ":" + std::to_string(++counter);
}

/// The lock's key for `name`, and the pattern of its wake channels (one per waiting locker).
inline std::string lock_key(std::string const& name, std::string const& prefix = "colock:") {
    return prefix + "{" + name + "}";
}

/// Subscribers of `channel`, asked through redis-cli (which prints the channel, then the count).
inline std::int64_t cli_numsub(redis_server& server, std::string const& channel) {
    auto const out = server.cli(strings("PUBSUB", "NUMSUB", channel));
    return std::stoll(out.substr(out.rfind('\n') + 1));
}

inline std::string wake_channel(std::string const& name) {
    return lock_key(name) + ":w:*";
}

inline long long ms_between(steady::time_point from, steady::time_point to) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count();
}

inline long long ms_since(steady::time_point t) {
    return ms_between(t, steady::now());
}

/// Lock options with a ttl of `ttl` and the rest at their defaults.
inline lock_options lease(std::chrono::milliseconds ttl) {
    lock_options opt;
    opt.ttl = ttl;
    return opt;
}

/// `opt` with a wait_timeout of `limit`.
inline lock_options waiting_up_to(lock_options opt, std::chrono::milliseconds limit) {
    opt.wait_timeout = limit;
    return opt;
}

/// Server options with an ACL user "app" (password "app-secret") beside the default user.
inline redis_server_options with_app_user(redis_server_options opts = {}) {
    opts.acl_user = "app";
    opts.acl_password = "app-secret";
    return opts;
}

/// Sets up ACL user `user` (password "pw") on `server` with the permissions a lock needs, as
/// docs/operations.md ("ACL permissions") and the README list them, and `extra` besides.
inline void set_lock_user(redis_server const& server, std::string const& user,
                          std::vector<std::string> const& extra = {}) {
    auto args = strings("ACL", "SETUSER", user, "reset", "on", ">pw", "~colock:*", "&colock:*",
                        "+hello", "+ping", "+info", "+fcall", "+function|load", "+evalsha",
                        "+script|load", "+subscribe", "+unsubscribe", "+get", "+set", "+pexpire",
                        "+pttl", "+del", "+time", "+publish", "+exists", "+hset", "+hget", "+hdel",
                        "+rpush", "+lpop", "+lindex", "+lrem", "+llen", "+hgetall");
    args.insert(args.end(), extra.begin(), extra.end());
    server.cli(args);
}

/// The config of `server` for ACL user `user` with password "pw".
inline redis::config as_user(redis_server const& server, std::string user) {
    auto cfg = server.config();
    cfg.username = std::move(user);
    cfg.password = "pw";
    return cfg;
}

/// `cfg` with short timeouts, so that losing and regaining a server is quick.
inline redis::config with_fast_timeouts(redis::config cfg) {
    using namespace std::chrono_literals;
    cfg.connect_timeout = 1000ms;
    cfg.health_check_interval = 200ms;
    cfg.reconnect_initial_delay = 20ms;
    cfg.reconnect_max_delay = 200ms;
    return cfg;
}

/// The server's config with short timeouts.
inline redis::config fast_config(redis_server const& server) {
    return with_fast_timeouts(server.config());
}

/// fast_config of each server, in order (a Redlock locker's primaries).
inline std::vector<redis::config> fast_configs(std::vector<redis_server*> const& servers) {
    std::vector<redis::config> out;
    for (auto const* s : servers)
        out.push_back(fast_config(*s));
    return out;
}

/// Lock options for a waiter that sleeps long between its own retries (a wake-up message or a
/// cancellation ends the sleep), so that a cancellation almost surely meets it asleep rather
/// than mid-attempt.
inline lock_options patient_waiter() {
    lock_options opt;
    opt.ttl = std::chrono::milliseconds{10'000};
    opt.retry.initial = std::chrono::milliseconds{5000};
    opt.retry.max = std::chrono::milliseconds{5000};
    opt.retry.multiplier = 1.0;
    return opt;
}

/// co_lock raced against a timer (`||`): which won (0 the lock, 1 the timer), the guard when
/// the lock won, and how long the race took.
struct lock_race {
    std::size_t winner = 0;
    std::optional<lock_guard> guard;
    long long took_ms = 0;

    /// What the race reports as a lock call: operation_aborted when the timer won.
    error_code as_call() const {
        return winner == 1 ? error_code(asio::error::operation_aborted) : error_code{};
    }
};

inline asio::awaitable<lock_race> lock_or_timer(locker& locks, std::string const& name,
                                                lock_options const& opt,
                                                std::chrono::milliseconds limit) {
    using namespace asio::experimental::awaitable_operators;
    asio::steady_timer timer(co_await asio::this_coro::executor);
    timer.expires_after(limit);
    auto const started = steady::now();
    auto result = co_await (locks.co_lock(name, opt) || timer.async_wait(asio::use_awaitable));
    lock_race race;
    race.took_ms = ms_since(started);
    race.winner = result.index();
    if (result.index() == 0)
        race.guard = std::move(std::get<0>(result));
    co_return race;
}

/// A completion handler for async_lock or async_try_lock: keeps the code in `ec` and whether a
/// guard came (one that owns the lock; for async_try_lock, any) in `got_guard`, then sets `done`.
inline auto record_lock_call(error_code& ec, bool& got_guard, bool& done) {
    struct handler {
        error_code& ec;
        bool& got_guard;
        bool& done;

        void operator()(error_code e, lock_guard g) const {
            ec = e;
            got_guard = g.owns();
            done = true;
        }
        void operator()(error_code e, std::optional<lock_guard> g) const {
            ec = e;
            got_guard = g.has_value();
            done = true;
        }
    };
    return handler{ec, got_guard, done};
}

/// A pending wait_lost, started with a callback by watch(). The callback may come after the
/// watch's scope has ended (a guard let go completes its waiters with not_held, in the
/// background): it writes only while the watch lives, on the test's thread.
struct lost_watch {
    bool done = false;
    boost::system::error_code ec;
    steady::time_point at;
    std::shared_ptr<lost_watch*> const alive = std::make_shared<lost_watch*>(this);

    lost_watch() = default;
    lost_watch(lost_watch const&) = delete;
    lost_watch& operator=(lost_watch const&) = delete;
    ~lost_watch() { *alive = nullptr; }
};

inline void watch(lock_guard& g, lost_watch& w) {
    g.async_wait_lost([alive = w.alive](boost::system::error_code ec) {
        if (lost_watch* seen = *alive) {
            seen->ec = ec;
            seen->at = steady::now();
            seen->done = true;
        }
    });
}

/// Runs a blocking fixture call (a failover, a kill, a migration) on a thread of its own, so
/// that the test's io_context keeps serving the connections meanwhile.
template <class F>
asio::awaitable<std::invoke_result_t<F>> off_thread(F f) {
    using namespace std::chrono_literals;
    auto done = std::async(std::launch::async, std::move(f));
    co_await eventually([&] { return done.wait_for(0s) == std::future_status::ready; },
                        std::chrono::hours{1}, 20ms);
    co_return done.get();
}

/// A local TCP port nothing listens on (for the moment).
inline std::uint16_t unused_port() {
    asio::io_context ctx;
    asio::ip::tcp::acceptor acceptor(ctx, {asio::ip::make_address("127.0.0.1"), 0});
    return acceptor.local_endpoint().port(); // closed again when acceptor goes
}

/// GET: the value, or nullopt for none.
inline asio::awaitable<std::optional<std::string>> get(redis::connection& c,
                                                       std::string const& key) {
    auto r = co_await c.co_exec(command("GET", key));
    if (r.at(0).is_null())
        co_return std::nullopt;
    co_return std::string(r.at(0).as_string().value_or("?"));
}

/// What the lock key of `name` says (the layout is in src/lock/store/lock_scripts.hpp).
struct lock_record {
    char kind = 0;             // 'H' held, 'R' handed to a locker, 'F' free; 0: no key
    std::int64_t fence = 0;    // the last fence given
    std::string owner;         // 'H', 'R': the locker
    std::string token;         // 'H': the holder's token
    std::int64_t since_ms = 0; // 'H': when the lease began, on the holder's clock
    bool queued = false;       // 'H': a process is queued behind it
};

inline lock_record parse_lock_record(std::optional<std::string> const& value) {
    lock_record r;
    if (!value)
        return r;
    std::istringstream in(*value);
    std::string kind;
    in >> kind >> r.fence;
    r.kind = kind.size() == 1 ? kind[0] : '?';
    if (r.kind == 'H' || r.kind == 'R')
        in >> r.owner;
    if (r.kind == 'H') {
        in >> r.token >> r.since_ms;
        int queued = 0;
        in >> queued;
        r.queued = queued != 0;
    }
    return r;
}

inline asio::awaitable<lock_record> read_lock(redis::connection& c, std::string const& name,
                                              std::string const& prefix = "colock:") {
    auto value = co_await get(c, lock_key(name, prefix));
    co_return parse_lock_record(value);
}

/// The token holding lock `name`, or nullopt when nobody holds it.
inline asio::awaitable<std::optional<std::string>>
held_by(redis::connection& c, std::string const& name, std::string const& prefix = "colock:") {
    auto const r = co_await read_lock(c, name, prefix);
    if (r.kind != 'H')
        co_return std::nullopt;
    co_return r.token;
}

/// Whether nobody holds lock `name`, nor was handed it: the key is free or gone.
inline asio::awaitable<bool> lock_free(redis::connection& c, std::string const& name,
                                       std::string const& prefix = "colock:") {
    auto const r = co_await read_lock(c, name, prefix);
    co_return r.kind == 0 || r.kind == 'F';
}

/// Polls lock_free until it holds or `limit` has passed; returns the last answer.
inline asio::awaitable<bool>
free_becomes(redis::connection& c, std::string const& name,
             std::chrono::milliseconds limit = std::chrono::milliseconds{2000}) {
    // A coroutine, not `return lock_free(...)`: the default prefix must outlive the read.
    co_return co_await eventually(
        [&]() -> asio::awaitable<bool> { co_return co_await lock_free(c, name); }, limit);
}

/// Polls, through redis-cli, until the server shows client `id` running `cmd` (lower case, as
/// CLIENT LIST names it): a blocking command that was written and now waits at the server.
inline asio::awaitable<bool>
server_runs(redis_server const& server, std::int64_t id, std::string const& cmd,
            std::chrono::milliseconds limit = std::chrono::milliseconds{2000}) {
    auto const shown = " cmd=" + cmd + " ";
    co_return co_await eventually(
        [&] {
            return server.cli(strings("CLIENT", "LIST", "ID", std::to_string(id))).find(shown) !=
                   std::string::npos;
        },
        limit);
}

/// server_runs, asked on `probe` (another connection to the same server).
inline asio::awaitable<bool>
server_runs(redis::connection& probe, std::int64_t id, std::string const& cmd,
            std::chrono::milliseconds limit = std::chrono::milliseconds{2000}) {
    auto const shown = " cmd=" + cmd + " ";
    co_return co_await eventually(
        [&]() -> asio::awaitable<bool> {
            auto const clients = co_await probe.co_exec(command("CLIENT", "LIST", "ID", id));
            auto const text = clients.at(0).as_string();
            co_return text && text->find(shown) != std::string_view::npos;
        },
        limit);
}

/// As lock_free, through redis-cli: `key` is the lock's key.
inline bool lock_key_free(redis_server const& server, std::string const& key) {
    auto const value = server.cli({"GET", key});
    return value.empty() || value.starts_with("F ");
}

/// The integer reply of `req`; the smallest int64 when it is not an integer.
inline asio::awaitable<std::int64_t> integer(redis::connection& c, resp3::request req) {
    auto r = co_await c.co_exec(std::move(req));
    co_return r.at(0).as_integer().value_or(std::numeric_limits<std::int64_t>::min());
}

/// Subscribers of `channel`, or of all channels matching it when it is a pattern (with '*').
inline asio::awaitable<std::int64_t> numsub(redis::connection& c, std::string const& channel) {
    if (channel.find('*') == std::string::npos) {
        auto r = co_await c.co_exec(command("PUBSUB", "NUMSUB", channel));
        co_return r.at(0).elements.at(1).as_integer().value_or(-1);
    }
    auto listed = co_await c.co_exec(command("PUBSUB", "CHANNELS", channel));
    std::int64_t total = 0;
    for (auto const& name : listed.at(0).elements) {
        auto r = co_await c.co_exec(command("PUBSUB", "NUMSUB", name.as_string().value_or("")));
        total += r.at(0).elements.at(1).as_integer().value_or(0);
    }
    co_return total;
}

/// Polls `read()` (an awaitable of an integer read from the server) until it is `expected` or
/// `limit` has passed; returns the last reading.
template <class Read>
asio::awaitable<std::int64_t>
becomes(Read read, std::int64_t expected, std::chrono::milliseconds limit,
        std::chrono::milliseconds step = std::chrono::milliseconds{5}) {
    std::int64_t n = 0;
    co_await eventually(
        [&]() -> asio::awaitable<bool> {
            n = co_await read();
            co_return n == expected;
        },
        limit, step);
    co_return n;
}

/// Polls numsub until it is `expected` or `limit` has passed; returns the last count.
inline asio::awaitable<std::int64_t>
numsub_becomes(redis::connection& c, std::string const& channel, std::int64_t expected,
               std::chrono::milliseconds limit = std::chrono::milliseconds{2000}) {
    co_return co_await becomes([&] { return numsub(c, channel); }, expected, limit,
                               std::chrono::milliseconds{10});
}

/// Polls LLEN of the lock's process queue until it is `expected` or `limit` has passed.
inline asio::awaitable<std::int64_t>
queue_length_becomes(redis::connection& c, std::string const& name, std::int64_t expected,
                     std::chrono::milliseconds limit = std::chrono::milliseconds{3000}) {
    co_return co_await becomes([&] { return integer(c, command("LLEN", lock_key(name) + ":q")); },
                               expected, limit);
}

/// Polls EXISTS until it is `expected` or `limit` has passed; returns the last answer.
inline asio::awaitable<std::int64_t>
exists_becomes(redis::connection& c, std::string const& key, std::int64_t expected,
               std::chrono::milliseconds limit = std::chrono::milliseconds{2000}) {
    co_return co_await becomes([&] { return integer(c, command("EXISTS", key)); }, expected, limit);
}

/// Polls `done()` every `step`, `polls` times at the most, until it holds; returns `done()`.
template <class Done>
asio::awaitable<bool> poll_until(Done done, int polls, std::chrono::milliseconds step) {
    co_return co_await eventually(std::move(done), polls * step, step);
}

/// Waits until `done` is set or `limit` has passed; returns `done`.
inline asio::awaitable<bool> finishes(bool const& done, std::chrono::milliseconds limit) {
    co_return co_await eventually([&] { return done; }, limit);
}

/// Runs `ctx` until `done()` holds or `limit` has passed; returns `done()`. For tests that drive
/// a context by hand: a connection's reader or a guard's renewal keeps it busy, so run_for()
/// would always take its whole time.
template <class Done>
bool run_until(asio::io_context& ctx, std::chrono::milliseconds limit, Done done) {
    auto const end = steady::now() + limit;
    while (!done() && steady::now() < end) {
        if (ctx.stopped())
            ctx.restart();
        ctx.run_one_until(end);
    }
    return done();
}

/// The outcome of a request sent with a callback, for requests that stay in flight while the
/// test does something else.
struct exec_outcome {
    bool done = false;
    boost::system::error_code ec;
    redis::response replies;
};

/// Sends `req` on `conn`; `into` receives the outcome.
inline void exec_into(redis::connection& conn, resp3::request req,
                      std::shared_ptr<exec_outcome> const& into) {
    conn.async_exec(std::move(req), [into](boost::system::error_code ec, redis::response r) {
        into->ec = ec;
        into->replies = std::move(r);
        into->done = true;
    });
}

/// A completion handler for async_exec that keeps the code in `result`, then sets `done`.
inline auto record_code(error_code& result, bool& done) {
    return [&result, &done](error_code ec, redis::response) {
        result = ec;
        done = true;
    };
}

/// The text of a string reply, or "<not a string>".
inline std::string text_of(resp3::value const& v) {
    auto s = v.as_string();
    return s ? std::string(*s) : std::string("<not a string>");
}

/// Waits until `probe()` is true or `limit` has passed; returns the last answer.
template <class Probe>
asio::awaitable<bool> finishes_when(Probe probe, std::chrono::milliseconds limit) {
    co_return co_await eventually(std::move(probe), limit);
}

/// `calls` of one command in INFO commandstats; 0 when the server has not seen it.
inline std::int64_t command_calls(std::string_view info, std::string_view name) {
    std::string const field = "cmdstat_" + std::string(name) + ":calls=";
    auto const at = info.find(field);
    if (at == std::string_view::npos)
        return 0;
    return std::stoll(std::string(info.substr(at + field.size(), 20)));
}

/// The lines a connection logged (redis::config::log), kept for a test to count.
struct log_lines {
    std::vector<std::pair<log_level, std::string>> lines;

    /// A hook that appends here; the lines outlive the connection (the test is single-threaded).
    log_handler hook() {
        return [this](log_level level, std::string_view line) {
            lines.emplace_back(level, std::string(line));
        };
    }
    /// The lines of `level` that contain every one of `parts`.
    std::size_t count(log_level level, std::vector<std::string> const& parts) const {
        std::size_t n = 0;
        for (auto const& [lvl, line] : lines) {
            bool all = lvl == level;
            for (auto const& part : parts)
                all = all && line.find(part) != std::string::npos;
            n += all ? 1 : 0;
        }
        return n;
    }
    std::string dump() const {
        std::string out;
        for (auto const& [lvl, line] : lines)
            out += std::string(to_string(lvl)) + ": " + line + "\n";
        return out;
    }
};

/// The scripts the client called (FCALL or EVALSHA) in INFO commandstats.
inline std::int64_t script_calls(std::string_view info) {
    return command_calls(info, "fcall") + command_calls(info, "evalsha");
}

/// `calls` of every command in INFO commandstats, summed.
inline std::int64_t all_calls(std::string_view info) {
    std::int64_t total = 0;
    for (auto at = info.find(":calls="); at != std::string_view::npos;
         at = info.find(":calls=", at + 1))
        total += std::stoll(std::string(info.substr(at + 7, 20)));
    return total;
}

/// Commands the server ran between two INFO commandstats, the first INFO and the connections'
/// health-check PINGs (one every health_check_interval each) aside.
inline std::int64_t commands_between(std::string_view before, std::string_view after) {
    return all_calls(after) - all_calls(before) - 1 -
           (command_calls(after, "ping") - command_calls(before, "ping"));
}

/// INFO commandstats.
inline asio::awaitable<std::string> commandstats(redis::connection& c) {
    auto r = co_await c.co_exec(command("INFO", "commandstats"));
    co_return std::string(r.at(0).as_string().value_or(""));
}

/// A call run beside the test (a co_lock, a semaphore's co_acquire, ...): what it returned,
/// when, or the code it threw.
template <class Result>
struct call_run {
    std::optional<Result> got;
    steady::time_point at;
    bool done = false;
    error_code ec;
};

/// Spawns `call()` (which returns an awaitable of Result) on `ex`, recording it in `run`, which
/// outlives it.
template <class Result, class Call>
void start_call(asio::any_io_executor ex, Call call, call_run<Result>& run) {
    asio::co_spawn(
        ex,
        [call = std::move(call), &run]() -> asio::awaitable<void> {
            try {
                run.got.emplace(co_await call());
            } catch (system_error const& e) {
                run.ec = e.code();
            }
            run.at = steady::now();
            run.done = true;
        },
        asio::detached);
}

} // namespace colock::test

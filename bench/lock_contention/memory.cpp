// Scenario c, waiters_memory: W coroutines wait in co_lock on one held name; resident memory per
// waiter next to a bare coroutine waiting on a timer, then all are cancelled and must return,
// leaving no lock and no subscription behind.
#include "lock_contention.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <malloc.h>

#include <cstdio>
#include <exception>
#include <stdexcept>
#include <utility>

namespace colock::bench::contention {
namespace {

// The waiters' first attempts, and then their cancellation, must finish within this.
constexpr auto memory_phase_limit = std::chrono::seconds{120};

struct memory_state {
    explicit memory_state(asio::any_io_executor const& ex) : all_done(ex) {}
    std::size_t running = 0;
    std::size_t aborted = 0;  // operation_aborted, as expected
    std::size_t acquired = 0; // got the lock before the cancellation reached them
    std::size_t failed = 0;   // anything else
    std::string first_failure;
    asio::steady_timer all_done;
    // The waiters' cancellation signals, which must outlive them: held by their shared state.
    std::vector<asio::cancellation_signal> signals;
};

asio::awaitable<void> memory_waiter(std::shared_ptr<colock::locker> locker,
                                    std::shared_ptr<memory_state> state, std::string name) {
    auto const opt = no_renewal();
    boost::system::error_code ec;
    colock::lock_guard guard;
    try {
        guard = co_await locker->co_lock(std::move(name), opt);
    } catch (boost::system::system_error const& e) {
        ec = e.code();
    }
    if (ec == asio::error::operation_aborted) {
        ++state->aborted;
    } else if (!ec) {
        ++state->acquired;
        co_await guard.release();
    } else {
        ++state->failed;
        if (state->first_failure.empty())
            state->first_failure = ec.message();
    }
    if (--state->running == 0)
        state->all_done.cancel();
}

struct memory_result {
    std::size_t waiters = 0;
    std::int64_t rss_before = 0, rss_after = 0;
    // malloc's bytes in use: what the waiters hold, without the pages that the first
    // attempts' requests and replies (all in flight at once) leave fragmented.
    std::int64_t heap_before = 0, heap_after = 0;
    double queue_seconds = 0;  // until every waiter had made its first attempt
    double cancel_seconds = 0; // from the cancellation until every waiter returned
    std::size_t aborted = 0, acquired = 0, failed = 0;
    std::int64_t keys_left = 0, subscribers_left = 0;
    command_calls calls; // while queueing
    std::string holder_unlock_error;
    double baseline_bytes = 0; // a bare co_spawned coroutine waiting on a steady_timer

    double bytes_per_waiter() const {
        return static_cast<double>(rss_after - rss_before) / static_cast<double>(waiters);
    }
    double heap_bytes_per_waiter() const {
        return static_cast<double>(heap_after - heap_before) / static_cast<double>(waiters);
    }
};

/// Keys of the lock `key` that would stay: the lock still held or handed off ("H ..." or
/// "R ..."), or a key without an expiry. The free lock ("F <fence>") and the queue lapse.
asio::awaitable<std::int64_t> lock_keys_left(redis::connection& conn, std::string const& key) {
    std::vector<std::string> keys;
    add_lock_keys(keys, key);
    resp3::request req;
    req.push("GET", key);
    for (auto const& k : keys)
        req.push("PTTL", k);
    auto const resp = co_await conn.co_exec(std::move(req));
    auto const value = resp.at(0).as_string().value_or("");
    std::int64_t left = value.starts_with("H ") || value.starts_with("R ") ? 1 : 0;
    for (std::size_t i = 1; i < resp.size(); ++i)
        left += resp[i].as_integer() == -1 ? 1 : 0;
    co_return left;
}

/// Subscribers of the wake channels of the lock `key`, one channel per waiting locker.
asio::awaitable<std::int64_t> wake_subscribers(redis::connection& conn, std::string const& key) {
    resp3::request list;
    list.push("PUBSUB", "CHANNELS", key + ":w:*");
    auto const channels = co_await conn.co_exec(std::move(list));
    std::int64_t total = 0;
    for (auto const& channel : channels.at(0).elements) {
        resp3::request numsub;
        numsub.push("PUBSUB", "NUMSUB", channel.as_string().value_or(""));
        auto const reply = co_await conn.co_exec(std::move(numsub));
        total += reply.at(0).elements.size() == 2
                     ? reply.at(0).elements[1].as_integer().value_or(-1)
                     : -1;
    }
    co_return total;
}

asio::awaitable<void> bare_waiter(std::shared_ptr<memory_state> state) {
    asio::steady_timer t(co_await asio::this_coro::executor, steady::time_point::max());
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    if (--state->running == 0)
        state->all_done.cancel();
}

/// What the same number of co_spawned coroutines cost that only wait on a timer: the floor any
/// Asio coroutine that waits pays, to read the lock's figure against.
asio::awaitable<double> baseline_bytes_per_coroutine(std::size_t count) {
    auto const ex = co_await asio::this_coro::executor;
    std::vector<asio::cancellation_signal> signals(count);
    auto state = std::make_shared<memory_state>(ex);
    state->running = count;
    ::malloc_trim(0);
    auto const before = resident_bytes();
    for (auto& s : signals)
        asio::co_spawn(ex, bare_waiter(state),
                       asio::bind_cancellation_slot(s.slot(), asio::detached));
    co_await sleep_for(std::chrono::milliseconds{100});
    ::malloc_trim(0);
    auto const after = resident_bytes();
    for (auto& s : signals)
        s.emit(asio::cancellation_type::terminal);
    state->all_done.expires_after(memory_phase_limit);
    co_await state->all_done.async_wait(asio::as_tuple(asio::use_awaitable));
    if (state->running > 0)
        throw std::runtime_error("bare timer coroutines did not return after cancellation");
    co_return static_cast<double>(after - before) / static_cast<double>(count);
}

asio::awaitable<memory_result> measure_memory(redis::config cfg, std::size_t waiters) {
    auto const ex = co_await asio::this_coro::executor;
    auto conn = co_await open(cfg);
    auto locker = std::make_shared<colock::locker>(*conn, run_prefix());
    std::string const name = "memory";
    auto const key = fmt::format("{}{{{}}}", locker->key_prefix(), name);

    colock::lock_options hold_opt;
    hold_opt.ttl = std::chrono::minutes{5}; // outlasts the scenario; renewal not needed
    hold_opt.auto_renew = false;
    auto holder = co_await locker->co_lock(name, hold_opt);

    memory_result r;
    r.waiters = waiters;
    r.baseline_bytes = co_await baseline_bytes_per_coroutine(waiters);
    // The bench's own per-waiter bookkeeping (one signal each) is allocated before the baseline.
    auto state = std::make_shared<memory_state>(ex);
    state->signals = std::vector<asio::cancellation_signal>(waiters);
    auto& signals = state->signals;
    state->running = waiters;
    auto const before = co_await read_commandstats(*conn);
    ::malloc_trim(0);
    r.rss_before = resident_bytes();
    r.heap_before = static_cast<std::int64_t>(::mallinfo2().uordblks);

    auto const started = steady::now();
    for (std::size_t i = 0; i < waiters; ++i)
        asio::co_spawn(ex, memory_waiter(locker, state, name),
                       asio::bind_cancellation_slot(signals[i].slot(), asio::detached));
    // Each waiter queues behind the held lock at once, with no call to the server: they
    // queue behind the first, whose attempt finds the lock held by this very locker.
    while (locker->waiting() < waiters) {
        if (steady::now() - started > memory_phase_limit || state->running < waiters)
            throw std::runtime_error(fmt::format(
                "waiters did not queue: {} of {} queued in {:.0f} s, {} returned early ({})",
                locker->waiting(), waiters,
                std::chrono::duration<double>(steady::now() - started).count(),
                waiters - state->running, state->first_failure));
        co_await sleep_for(std::chrono::milliseconds{20});
    }
    // The head's subscription and its attempts settle.
    co_await sleep_for(std::chrono::milliseconds{200});
    r.queue_seconds = std::chrono::duration<double>(steady::now() - started).count();
    r.calls = delta(before, co_await read_commandstats(*conn));
    ::malloc_trim(0);
    r.rss_after = resident_bytes();
    r.heap_after = static_cast<std::int64_t>(::mallinfo2().uordblks);

    // Cancel every waiter, then let the holder go: nobody may take the lock after that.
    auto const cancel_started = steady::now();
    for (auto& s : signals)
        s.emit(asio::cancellation_type::terminal);
    try {
        if (!co_await holder.release())
            r.holder_unlock_error = "the lock was no longer ours";
    } catch (std::exception const& e) {
        r.holder_unlock_error = e.what();
    }
    if (state->running > 0) {
        state->all_done.expires_after(memory_phase_limit);
        co_await state->all_done.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    r.cancel_seconds = std::chrono::duration<double>(steady::now() - cancel_started).count();
    if (state->running > 0)
        throw std::runtime_error(fmt::format("{} of {} waiters did not return within {} s of "
                                             "their cancellation",
                                             state->running, waiters, memory_phase_limit.count()));
    r.aborted = state->aborted;
    r.acquired = state->acquired;
    r.failed = state->failed;

    co_await sleep_for(std::chrono::milliseconds{200}); // the unsubscribe is fire-and-forget
    r.keys_left = co_await lock_keys_left(*conn, key);
    r.subscribers_left = co_await wake_subscribers(*conn, key);

    std::vector<std::string> keys;
    add_lock_keys(keys, key);
    co_await delete_keys(*conn, keys);
    conn->close();
    co_return r;
}

bool memory_ok(memory_result const& r) {
    return r.failed == 0 && r.aborted + r.acquired == r.waiters && r.keys_left == 0 &&
           r.subscribers_left == 0 && r.holder_unlock_error.empty();
}

void report_memory(memory_result const& r, bool json) {
    auto const per = [&](std::string_view c) {
        return static_cast<double>(calls_of(r.calls, c)) / static_cast<double>(r.waiters);
    };
    if (json) {
        fmt::print("{{\"scenario\":\"waiters_memory\",\"waiters\":{},\"rss_before\":{},"
                   "\"rss_after\":{},\"bytes_per_waiter\":{:.1f},\"heap_bytes_per_waiter\":{:.1f},"
                   "\"queue_seconds\":{:.3f},"
                   "\"cancel_seconds\":{:.3f},\"aborted\":{},\"acquired\":{},\"failed\":{},"
                   "\"keys_left\":{},\"subscribers_left\":{},\"calls\":{},"
                   "\"baseline_bytes_per_timer_coroutine\":{:.1f},\"holder_unlock_error\":\"{}\","
                   "\"ok\":{}}}\n",
                   r.waiters, r.rss_before, r.rss_after, r.bytes_per_waiter(),
                   r.heap_bytes_per_waiter(), r.queue_seconds, r.cancel_seconds, r.aborted,
                   r.acquired, r.failed, r.keys_left, r.subscribers_left, calls_json(r.calls),
                   r.baseline_bytes, r.holder_unlock_error, memory_ok(r));
    } else {
        fmt::print("\n== c. waiters_memory: {} co_lock waiters on one held name\n", r.waiters);
        fmt::print("  bytes per waiter    {:>12.0f}   (RSS {:.1f} MiB -> {:.1f} MiB)\n",
                   r.bytes_per_waiter(), static_cast<double>(r.rss_before) / (1 << 20),
                   static_cast<double>(r.rss_after) / (1 << 20));
        fmt::print("  heap bytes per waiter {:>10.0f}   (malloc's bytes in use; the rest of RSS is "
                   "pages the first attempts left fragmented)\n",
                   r.heap_bytes_per_waiter());
        fmt::print("  for comparison      {:>12.0f}   bytes per bare co_spawned coroutine waiting "
                   "on a steady_timer\n",
                   r.baseline_bytes);
        fmt::print("  queued in           {:>12.3f} s (per waiter: EVALSHA {:.3f}, SUBSCRIBE "
                   "{:.5f})\n",
                   r.queue_seconds, per("evalsha"), per("subscribe"));
        fmt::print("  cancel all + unlock {:>12.3f} s: {} aborted, {} acquired first, {} failed; "
                   "lock keys left {}, subscribers left {}  => {}\n",
                   r.cancel_seconds, r.aborted, r.acquired, r.failed, r.keys_left,
                   r.subscribers_left, memory_ok(r) ? "OK" : "FAILED");
        if (!r.holder_unlock_error.empty())
            fmt::print("  the holder's release() failed: {}\n", r.holder_unlock_error);
    }
    std::fflush(stdout);
}

} // namespace

bool run_memory(asio::io_context& io, redis::config const& cfg, options const& opts) {
    auto const r = run_on(io, measure_memory(cfg, opts.memory_waiters));
    report_memory(r, opts.json);
    return memory_ok(r);
}

} // namespace colock::bench::contention

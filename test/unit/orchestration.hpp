// What the orchestration tests share: a world of one io_context and one fake server, the
// processes' lockers on it, and small helpers. The lock's orchestration runs there without Redis
// (the scripts' rules in memory, faults injected at each step); timings are tens of
// milliseconds. Included by the test_orchestration_*.cpp sources only, which use its names
// unqualified.
#pragma once

#include "fake_store.hpp"
#include "lock/mutex/locker_access.hpp"

#include <colock/error.hpp>
#include <colock/lock_observer.hpp>
#include <colock/locker.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
using boost::system::error_code;
using colock::lock_guard;
using colock::lock_options;
using colock::locker;
using colock::detail::locker_access;
using colock::test::fake_server;
using colock::test::fake_store;
using colock::test::fault;
// The lock layer's clock (lock_clock), which the fake server's expiries run on too.
using colock::detail::clock_type;

namespace colock::test::orchestration {

inline constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);

inline asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    co_await t.async_wait(nothrow);
}

// Polls `done` every millisecond; the test's own limit (world::run) bounds the wait.
template <class Done>
asio::awaitable<void> until(Done done) {
    while (!done())
        co_await sleep_for(1ms);
}

// One io_context, one fake server, and a store per process.
struct world {
    fake_server server; // outlives the io_context, whose handlers hold stores
    asio::io_context ctx;

    std::shared_ptr<fake_store> process() {
        return std::make_shared<fake_store>(server, ctx.get_executor());
    }

    // Runs `body` to its end (at most `limit`), then what it left behind; fails on an exception.
    template <class Body>
    void run(Body body, std::chrono::milliseconds limit = 5000ms) {
        bool done = false;
        std::exception_ptr failure;
        asio::co_spawn(ctx, body(), [&](std::exception_ptr e) {
            done = true;
            failure = e;
        });
        auto const end = clock_type::now() + limit;
        while (!done && clock_type::now() < end)
            ctx.run_for(10ms);
        REQUIRE_MESSAGE(done, "the test did not finish in time");
        ctx.run_for(50ms); // background releases and queue leaves
        if (failure)
            std::rethrow_exception(failure);
    }
};

// The cast of most tests: a world with one process's locker `a`, or with a second process's `b`.
struct one_process {
    world w;
    locker a = locker_access::make(w.process());
};

struct two_processes : one_process {
    locker b = locker_access::make(w.process());
};

// Two processes, the second's store at hand: what it listens on, what reaches it.
struct two_processes_seen : one_process {
    std::shared_ptr<fake_store> b_store = w.process();
    locker b = locker_access::make(b_store);
};

inline std::string const lock_key = "colock:{n}";

inline lock_options short_lease(std::chrono::milliseconds ttl = 2000ms) {
    lock_options opt;
    opt.ttl = ttl;
    return opt;
}

// Options with a lease of `ttl` renewed every `every`.
inline lock_options renewed_lease(std::chrono::milliseconds ttl, std::chrono::milliseconds every) {
    lock_options opt = short_lease(ttl);
    opt.renew_interval = every;
    return opt;
}

// What an awaited call threw as a system_error: its code and what(); neither when it returned.
struct thrown_error {
    error_code code;
    std::string what;
};

// Awaits `op()`; what it threw.
template <class Op>
asio::awaitable<thrown_error> thrown_by(Op op) {
    try {
        co_await op();
    } catch (boost::system::system_error const& e) {
        co_return thrown_error{e.code(), e.what()};
    }
    co_return thrown_error{};
}

// The error a co_lock threw, or none.
inline asio::awaitable<error_code> lock_error(locker& l, std::string name, lock_options opt) {
    try {
        auto g = co_await l.co_lock(std::move(name), opt);
        co_return error_code{};
    } catch (boost::system::system_error const& e) {
        co_return e.code();
    }
}

// The outcome of one async_lock or async_try_lock started with a callback.
struct call_result {
    bool done = false;
    error_code ec;
    bool got = false; // a guard that owns the lock (async_try_lock: any guard)
    clock_type::time_point at;
    // What the server's lock key said when the call completed.
    std::optional<fake_server::lock_entry> key_at_completion;
};

struct record_call {
    call_result& r;
    fake_server* server = nullptr;

    void finish(error_code ec, bool got) const {
        r.ec = ec;
        r.got = got;
        r.at = clock_type::now();
        if (server)
            r.key_at_completion = server->lock(lock_key);
        r.done = true;
    }
    void operator()(error_code ec, lock_guard g) const { finish(ec, g.owns()); }
    void operator()(error_code ec, std::optional<lock_guard> g) const { finish(ec, g.has_value()); }
};

// Options for a waiter that sleeps long between its own attempts (a message or a cancellation
// ends the sleep; the queue refresh still asks once a second).
inline lock_options patient_waiter() {
    lock_options opt = short_lease(10s);
    opt.retry.initial = 5s;
    opt.retry.max = 5s;
    opt.retry.multiplier = 1.0;
    return opt;
}

// Whether `s` listens on the wake channel of `l` for the lock (a locker that holds a lease also
// listens on a channel of its own, for a forced unlock).
inline bool listens(fake_store const& s, locker const& l) {
    return s.subscriptions().contains(lock_key + ":w:" + l.id());
}

inline bool free_or_gone(std::optional<fake_server::lock_entry> const& e) {
    return !e || e->kind == fake_server::lock_entry::state::free;
}

struct recording_observer final : colock::lock_observer {
    std::vector<colock::acquired_by> acquired;
    std::vector<colock::loss_reason> lost;
    void on_acquired(colock::acquired_event const& e) override { acquired.push_back(e.how); }
    void on_lost(colock::lost_event const& e) override { lost.push_back(e.reason); }
};

} // namespace colock::test::orchestration

using namespace colock::test::orchestration;

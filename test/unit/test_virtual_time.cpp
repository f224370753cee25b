// Renewal timing and long waits on virtual time: the lock layer's clock (lock_clock) is moved on
// by the test, so a 30-second lease is renewed, lost or waited for in milliseconds, and the
// counts are exact to within half a second of a minute. The server is fake_store, whose expiries
// run on the same clock.
#include "fake_store.hpp"
#include "lock/mutex/locker_access.hpp"
#include "virtual_clock.hpp"

#include <colock/error.hpp>
#include <colock/locker.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/system_error.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <string>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using colock::detail::lock_clock;
using colock::detail::locker_access;
using namespace colock::test;

namespace {

// One io_context on virtual time. Each step moves the clock on and runs what became due.
struct virtual_world {
    fake_server server; // outlives the io_context, whose handlers hold stores
    asio::io_context ctx;

    std::shared_ptr<fake_store> process() {
        return std::make_shared<fake_store>(server, ctx.get_executor());
    }

    // Runs what is ready now, without moving the clock.
    void settle() {
        for (int i = 0; i < 50; ++i) {
            ctx.restart();
            if (ctx.poll() == 0)
                break;
        }
    }

    // Moves the clock on by `d` in steps of `step`, running what each step makes due. Real time
    // goes on meanwhile (a few milliseconds per second moved): checks leave that much room.
    void advance(std::chrono::milliseconds d, std::chrono::milliseconds step = 50ms) {
        for (auto done = 0ms; done < d; done += step) {
            lock_clock::advance(step);
            nudge_timers(ctx);
            settle();
        }
    }

    ~virtual_world() { settle(); }
};

// What `op` returns, run to its end without moving the clock.
template <class T>
T result_of(virtual_world& w, asio::awaitable<T> op) {
    std::optional<T> out;
    asio::co_spawn(w.ctx, std::move(op), [&](std::exception_ptr e, T value) {
        REQUIRE_FALSE(e);
        out = std::move(value);
    });
    w.settle();
    REQUIRE(out);
    return std::move(*out);
}

// A guard taken on `l`, settled.
colock::lock_guard take(virtual_world& w, colock::locker& l, colock::lock_options const& opt,
                        std::string name = "n") {
    return result_of(w, l.co_lock(std::move(name), opt));
}

// The code `op` throws as a system_error (none when it returns), run as result_of runs it.
template <class T>
boost::system::error_code error_of(virtual_world& w, asio::awaitable<T> op) {
    std::optional<boost::system::error_code> out;
    asio::co_spawn(w.ctx, std::move(op), [&](std::exception_ptr e, auto&&...) {
        out.emplace();
        try {
            if (e)
                std::rethrow_exception(e);
        } catch (boost::system::system_error const& failure) {
            *out = failure.code();
        }
    });
    w.settle();
    REQUIRE(out);
    return *out;
}

// What async_wait_lost on `g` completes with, if it completes without moving the clock.
std::optional<boost::system::error_code> wait_lost_now(virtual_world& w, colock::lock_guard& g) {
    std::optional<boost::system::error_code> told;
    g.async_wait_lost([&](boost::system::error_code ec) { told = ec; });
    w.settle();
    return told;
}

colock::lock_options lease_of(std::chrono::milliseconds ttl, std::chrono::milliseconds renew) {
    colock::lock_options opt;
    opt.ttl = ttl;
    opt.renew_interval = renew;
    return opt;
}

std::string const clock_test_key = "colock:{n}";

} // namespace

TEST_CASE("virtual time: a 30 s lease is renewed every 10 s, and its key outlives the ttl") {
    virtual_world w;
    auto a = locker_access::make(w.process());
    auto guard = take(w, a, lease_of(30s, 10s));
    // The first renewal is due at a multiple of a sixteenth of the interval: 9.375 to 10 s in.
    w.advance(9300ms);
    CHECK(w.server.calls().extends == 0);
    w.advance(1200ms);
    CHECK(w.server.calls().extends == 1);
    w.advance(50s); // 60.5 s in
    CHECK(w.server.calls().extends == 6);
    CHECK(guard.owns());
    auto const held = w.server.lock(clock_test_key);
    REQUIRE(held);
    CHECK(held->expires > lock_clock::now() + 19s);
}

TEST_CASE("virtual time: renewals never answered: lost at the local deadline, 30 s after the "
          "grant, while the server still holds the key") {
    virtual_world w;
    for (int i = 0; i < 10; ++i)
        w.server.extend_faults.push_back({fault::kind::never_answers});
    auto a = locker_access::make(w.process());
    auto const granted = lock_clock::now();
    auto guard = take(w, a, lease_of(30s, 10s));
    w.advance(29500ms);
    CHECK_FALSE(guard.lost());
    CHECK(w.server.calls().extends == 1); // sent at 10 s, still waiting for its answer
    w.advance(1s);
    CHECK(guard.lost());
    CHECK(guard.loss() == colock::loss_reason::expired);
    // The local deadline: the attempt's start + ttl (the server started counting later).
    CHECK(guard.lease_expiry() >= granted + 30s);
    CHECK(guard.lease_expiry() < granted + 30500ms);
    // The extend ran at the server when it was sent: its expiry is later than the deadline
    // the guard counted on, never earlier.
    auto const at_server = w.server.lock(clock_test_key);
    REQUIRE(at_server);
    CHECK(at_server->expires >= guard.lease_expiry() + 9s);
}

TEST_CASE("virtual time: max_hold stops renewal, and the lease runs out a ttl later") {
    virtual_world w;
    auto a = locker_access::make(w.process());
    auto opt = lease_of(30s, 10s);
    opt.max_hold = 45s;
    auto guard = take(w, a, opt);
    w.advance(65s);
    CHECK(w.server.calls().extends == 4); // at 10, 20, 30 and 40 s; the next would pass 45 s
    CHECK(guard.owns());
    w.advance(6s); // 71 s: the last renewal's 30 s are over
    CHECK(guard.lost());
    CHECK(guard.loss() == colock::loss_reason::expired);
    CHECK(w.server.calls().extends == 4);
}

TEST_CASE("virtual time: a waiter keeps its entry in the server's queue alive for a minute, "
          "and wait_timeout takes it out") {
    virtual_world w;
    auto a = locker_access::make(w.process());
    auto b = locker_access::make(w.process());
    auto held = take(w, a, lease_of(10min, 1min));
    auto opt = lease_of(30s, 10s);
    opt.wait_timeout = 60s;
    std::optional<boost::system::error_code> ended;
    asio::co_spawn(w.ctx, b.co_lock("n", opt), [&](std::exception_ptr e, colock::lock_guard) {
        try {
            if (e)
                std::rethrow_exception(e);
            ended = boost::system::error_code{};
        } catch (boost::system::system_error const& failure) {
            ended = failure.code();
        }
    });
    w.settle();
    // Entries lapse 3 s after their last refresh: the head asks at least once a second.
    for (int second = 1; second < 60; ++second) {
        w.advance(1s);
        auto const queue = w.server.queue(clock_test_key);
        CHECK_MESSAGE(std::find(queue.begin(), queue.end(), b.id()) != queue.end(), second);
        CHECK_FALSE(ended);
    }
    w.advance(1500ms);
    REQUIRE(ended);
    CHECK(*ended == colock::error::timeout);
    CHECK(w.server.queue(clock_test_key).empty());
    CHECK(held.owns());
}

TEST_CASE("virtual time: a lease handed on while the head is asking, whose deadline passes "
          "before the answer comes, is not taken: the head acquires anew from the server") {
    virtual_world w;
    auto a = locker_access::make(w.process());
    auto opt = lease_of(30s, 10s);
    opt.auto_renew = false; // the holder's lease runs out 30 s after its grant
    auto first = take(w, a, opt);
    auto const first_fence = first.fence();
    std::optional<colock::lock_guard> second;
    asio::co_spawn(w.ctx, a.co_lock("n", opt), [&](std::exception_ptr e, colock::lock_guard g) {
        REQUIRE_FALSE(e);
        second = std::move(g);
    });
    w.settle();
    REQUIRE(a.waiting() == 1);
    w.advance(5s);
    // The head asks at least once a second; its next question is answered 25 s later.
    w.server.latency = 25s;
    w.advance(2s);
    auto const asked = w.server.calls().grants;
    // The holder lets go: its lease (deadline 30 s) is handed to the head, which is asking.
    first = colock::lock_guard{};
    w.settle();
    CHECK_FALSE(second);
    w.advance(22s); // 29 s: the lease is still the holder's at the server
    CHECK_FALSE(second);
    w.server.latency = 0ms;
    w.advance(3500ms); // 32.5 s: the answer came after the handed lease's deadline
    REQUIRE(second);
    CHECK(w.server.calls().grants > asked); // asked the server again rather than take it
    CHECK(second->owns());
    CHECK(second->lease_expiry() > lock_clock::now() + 25s); // a fresh 30 s lease
    CHECK(second->fence() > first_fence);
}

TEST_CASE("virtual time: each guard is renewed when its own renewal is due, whatever the order "
          "they were taken in: short leases after a long one stay ours") {
    virtual_world w;
    auto a = locker_access::make(w.process());
    // First due in 10 s; then one due in 100 ms (sooner than the schedule's timer), then one due
    // in 300 ms (later than the timer, found when it fires).
    auto long_guard = take(w, a, lease_of(30s, 10s), "long");
    auto short_guard = take(w, a, lease_of(300ms, 100ms), "short");
    auto mid_guard = take(w, a, lease_of(900ms, 300ms), "mid");
    w.advance(2000ms, 20ms); // several times both short ttls
    CHECK(short_guard.owns());
    CHECK(mid_guard.owns());
    CHECK(long_guard.owns());
    CHECK_FALSE(short_guard.lost());
    CHECK_FALSE(mid_guard.lost());
    auto const short_key = w.server.lock("colock:{short}");
    auto const mid_key = w.server.lock("colock:{mid}");
    REQUIRE(short_key);
    REQUIRE(mid_key);
    CHECK(short_key->token == short_guard.token());
    CHECK(mid_key->token == mid_guard.token());
    // Every 100 ms and every 300 ms for 2 s; the long one not yet.
    CHECK(w.server.calls().extends >= 19 + 6);
    CHECK(w.server.calls().extends <= 20 + 7);
    CHECK(result_of(w, short_guard.release()));
    CHECK(result_of(w, mid_guard.release()));
    CHECK(result_of(w, long_guard.release()));
}

TEST_CASE("virtual time: a lease gone at the server: lost at the next renewal; then wait_lost "
          "completes at once, renewal stops and the key is not written again") {
    virtual_world w;
    auto a = locker_access::make(w.process());
    auto guard = take(w, a, lease_of(30s, 10s));
    auto const pending = std::make_shared<std::optional<boost::system::error_code>>();
    guard.async_wait_lost([pending](boost::system::error_code ec) { *pending = ec; });
    w.advance(5s);
    w.server.drop(clock_test_key);
    CHECK_FALSE(guard.lost());
    w.advance(5500ms); // the renewal at 10 s
    CHECK(w.server.calls().extends == 1);
    CHECK(guard.lost());
    CHECK(guard.loss() == colock::loss_reason::not_ours);
    CHECK_FALSE(guard.owns());
    REQUIRE(pending->has_value());
    CHECK_FALSE(**pending);
    // Again on a lost guard: at once, as a loss.
    auto const again = wait_lost_now(w, guard);
    REQUIRE(again);
    CHECK_FALSE(*again);
    CHECK_FALSE(error_of(w, guard.wait_lost()));
    w.advance(60s);
    CHECK(w.server.calls().extends == 1);
    CHECK_FALSE(w.server.lock(clock_test_key).has_value());
    CHECK_FALSE(result_of(w, guard.release()));
}

TEST_CASE("virtual time: a moved-from guard holds nothing; the renewal goes with the moved-to one; "
          "move-assignment releases what the target held") {
    virtual_world w;
    auto l = locker_access::make(w.process());
    auto a = take(w, l, lease_of(600ms, 200ms), "a");
    std::string const token_a = a.token();
    colock::lock_guard moved = std::move(a);
    CHECK_FALSE(a.owns());
    CHECK_FALSE(a.lost());
    CHECK(a.name().empty());
    CHECK(a.token().empty());
    CHECK(a.fence() == 0);
    CHECK_FALSE(result_of(w, a.release()));
    CHECK(error_of(w, a.extend(1000ms)) == colock::error::not_held);
    // Completed off the world's context (a guard that holds nothing has no I/O executor): waited
    // for, not settled.
    std::promise<boost::system::error_code> refused;
    a.async_wait_lost([&refused](boost::system::error_code ec) { refused.set_value(ec); });
    auto told = refused.get_future();
    REQUIRE(told.wait_for(10s) == std::future_status::ready);
    CHECK(told.get() == colock::error::not_held);

    CHECK(moved.owns());
    CHECK(moved.name() == "a");
    CHECK(moved.token() == token_a);
    w.advance(2000ms); // past the 600 ms ttl several times: only renewal keeps it
    CHECK(moved.owns());
    auto const held = w.server.lock("colock:{a}");
    REQUIRE(held);
    CHECK(held->token == token_a);

    auto b = take(w, l, lease_of(10s, 2s), "b");
    b = std::move(moved);
    w.settle();
    CHECK(b.name() == "a");
    CHECK(b.owns());
    auto const b_key = w.server.lock("colock:{b}");
    REQUIRE(b_key);
    CHECK(b_key->kind == fake_server::lock_entry::state::free);
    auto const a_key = w.server.lock("colock:{a}");
    REQUIRE(a_key);
    CHECK(a_key->token == token_a);
    CHECK(result_of(w, b.release()));

    colock::lock_guard none;
    CHECK_FALSE(none.owns());
    CHECK(none.name().empty());
    CHECK_FALSE(result_of(w, none.release()));
}

TEST_CASE("virtual time: a guard outlives its locker: renewal and unlock still work") {
    virtual_world w;
    colock::lock_guard guard;
    {
        auto a = locker_access::make(w.process());
        guard = take(w, a, lease_of(300ms, 100ms));
    }
    w.advance(1000ms);
    CHECK(guard.owns());
    CHECK(w.server.calls().extends >= 9);
    auto const held = w.server.lock(clock_test_key);
    REQUIRE(held);
    CHECK(held->token == guard.token());
    CHECK(result_of(w, guard.release()));
    auto const after = w.server.lock(clock_test_key);
    REQUIRE(after);
    CHECK(after->kind == fake_server::lock_entry::state::free);
}

TEST_CASE("virtual time: a guard destroyed stops its renewal and releases in the background") {
    virtual_world w;
    auto a = locker_access::make(w.process());
    auto pending = std::make_shared<std::optional<boost::system::error_code>>();
    {
        // A long ttl: if the key is free, it was released, not expired.
        auto guard = take(w, a, lease_of(10s, 100ms));
        guard.async_wait_lost([pending](boost::system::error_code ec) { *pending = ec; });
        w.advance(250ms);
        CHECK(w.server.calls().extends >= 2);
    }
    auto const extends = w.server.calls().extends;
    w.settle();
    auto const after = w.server.lock(clock_test_key);
    REQUIRE(after);
    CHECK(after->kind == fake_server::lock_entry::state::free);
    CHECK(w.server.calls().releases == 1);
    REQUIRE(pending->has_value());
    CHECK(**pending == colock::error::not_held);
    w.advance(10s);
    CHECK(w.server.calls().extends == extends);
}

TEST_CASE("virtual time: a reconnection to the same server renews every lease at once, not at its "
          "next interval") {
    virtual_world w;
    auto a = locker_access::make(w.process());
    auto guard = take(w, a, lease_of(6s, 3s));
    w.advance(1000ms);
    CHECK(w.server.calls().extends == 0);
    w.server.reconnect();
    w.advance(50ms);
    CHECK(w.server.calls().extends == 1);
    auto const held = w.server.lock(clock_test_key);
    REQUIRE(held);
    CHECK(held->expires > lock_clock::now() + 5900ms);
    CHECK(guard.owns());
    CHECK_FALSE(guard.lost());
}

TEST_CASE("virtual time: extend raises the lease, and later renewals keep the new ttl") {
    virtual_world w;
    auto a = locker_access::make(w.process());
    auto guard = take(w, a, lease_of(600ms, 200ms));
    CHECK(result_of(w, guard.extend(60s)));
    auto held = w.server.lock(clock_test_key);
    REQUIRE(held);
    CHECK(held->expires > lock_clock::now() + 59s);
    auto const extends = w.server.calls().extends;
    w.advance(3s);
    CHECK(w.server.calls().extends > extends); // renewals went on
    held = w.server.lock(clock_test_key);
    REQUIRE(held);
    CHECK(held->expires > lock_clock::now() + 50s); // with 60 s, not 600 ms
    CHECK(guard.owns());
    CHECK(error_of(w, guard.extend(0ms)) == colock::error::invalid_argument);
}

// Renewal timing and long waits on virtual time: the lock layer's clock (lock_clock) is moved on
// by the test, so a 30-second lease is renewed, lost or waited for in milliseconds, and the
// counts are exact to within half a second of a minute. The server is fake_store, whose expiries
// run on the same clock.
#include "fake_store.hpp"
#include "lock/locker_access.hpp"

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
#include <memory>
#include <optional>
#include <string>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using colock::detail::lock_clock;
using colock::detail::lock_timer;
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
            // Asio sleeps until its earliest timer by the clock as it was; a timer due before
            // every other makes it look at all of them again by the moved clock.
            lock_timer nudge(ctx, lock_clock::time_point::min());
            nudge.async_wait([](boost::system::error_code) {});
            settle();
        }
    }

    ~virtual_world() { settle(); }
};

// A guard taken on `l`, settled.
colock::lock_guard take(virtual_world& w, colock::locker& l, colock::lock_options const& opt) {
    std::optional<colock::lock_guard> guard;
    asio::co_spawn(w.ctx, l.co_lock("n", opt), [&](std::exception_ptr e, colock::lock_guard g) {
        REQUIRE_FALSE(e);
        guard = std::move(g);
    });
    w.settle();
    REQUIRE(guard);
    return std::move(*guard);
}

colock::lock_options lease_of(std::chrono::milliseconds ttl, std::chrono::milliseconds renew) {
    colock::lock_options opt;
    opt.ttl = ttl;
    opt.renew_interval = renew;
    return opt;
}

std::string const lock_key = "colock:{n}";

} // namespace

TEST_CASE("virtual time: a 30 s lease is renewed every 10 s, and its key outlives the ttl") {
    virtual_world w;
    auto a = locker_access::make(w.process());
    auto guard = take(w, a, lease_of(30s, 10s));
    w.advance(9500ms);
    CHECK(w.server.calls().extends == 0);
    w.advance(1s);
    CHECK(w.server.calls().extends == 1);
    w.advance(50s); // 60.5 s in
    CHECK(w.server.calls().extends == 6);
    CHECK(guard.owns_lock());
    auto const held = w.server.lock(lock_key);
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
    auto const at_server = w.server.lock(lock_key);
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
    CHECK(guard.owns_lock());
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
        auto const queue = w.server.queue(lock_key);
        CHECK_MESSAGE(std::find(queue.begin(), queue.end(), b.id()) != queue.end(), second);
        CHECK_FALSE(ended);
    }
    w.advance(1500ms);
    REQUIRE(ended);
    CHECK(*ended == colock::error::timeout);
    CHECK(w.server.queue(lock_key).empty());
    CHECK(held.owns_lock());
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
    CHECK(second->owns_lock());
    CHECK(second->lease_expiry() > lock_clock::now() + 25s); // a fresh 30 s lease
    CHECK(second->fence() > first_fence);
}

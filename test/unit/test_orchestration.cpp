// The lock's orchestration without Redis: the locker, its local queue, cohort hand-off, the
// guard and its renewal, run on fake_store (the scripts' rules in memory) with faults injected
// at each step. Timings are tens of milliseconds; nothing waits for a real server.
#include "fake_store.hpp"
#include "lock/locker_access.hpp"

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
// The lock layer's clock, which the fake server's expiries run on too.
using clock_type = colock::detail::lock_clock;

namespace {

constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
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

std::string const lock_key = "colock:{n}";

lock_options short_lease(std::chrono::milliseconds ttl = 2000ms) {
    lock_options opt;
    opt.ttl = ttl;
    return opt;
}

// The error a co_lock threw, or none.
asio::awaitable<error_code> lock_error(locker& l, std::string name, lock_options opt) {
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
    void operator()(error_code ec, lock_guard g) const { finish(ec, g.owns_lock()); }
    void operator()(error_code ec, std::optional<lock_guard> g) const { finish(ec, g.has_value()); }
};

// Options for a waiter that sleeps long between its own attempts (a message or a cancellation
// ends the sleep; the queue refresh still asks once a second).
lock_options patient_waiter() {
    lock_options opt = short_lease(10s);
    opt.retry.initial = 5s;
    opt.retry.max = 5s;
    opt.retry.multiplier = 1.0;
    return opt;
}

// Whether `s` listens on the wake channel of `l` for the lock (a locker that holds a lease also
// listens on a channel of its own, for a forced unlock).
bool listens(fake_store const& s, locker const& l) {
    return s.subscriptions().contains(lock_key + ":w:" + l.id());
}

bool free_or_gone(std::optional<fake_server::lock_entry> const& e) {
    return !e || e->kind == fake_server::lock_entry::state::free;
}

struct recording_observer final : colock::lock_observer {
    std::vector<colock::acquired_by> acquired;
    std::vector<colock::loss_reason> lost;
    void on_acquired(colock::acquired_event const& e) override { acquired.push_back(e.how); }
    void on_lost(colock::lost_event const& e) override { lost.push_back(e.reason); }
};

} // namespace

TEST_CASE("orchestration: calls on one name in one process are served in call order, the "
          "lease passed down the local queue with growing fences and one grant") {
    world w;
    auto store = w.process();
    auto l = locker_access::make(store);
    auto observer = std::make_shared<recording_observer>();
    l.set_observer(observer);
    std::vector<int> order;
    std::vector<std::int64_t> fences;
    std::vector<std::string> tokens;
    std::vector<std::string> key_tokens; // what the lock key said during each turn
    int finished = 0;
    int released = 0;
    std::int64_t next_fence = 0;
    w.run([&]() -> asio::awaitable<void> {
        for (int i = 0; i < 4; ++i)
            asio::co_spawn(
                w.ctx,
                [&, i]() -> asio::awaitable<void> {
                    auto g = co_await l.co_lock("n", short_lease());
                    order.push_back(i);
                    fences.push_back(g.fence());
                    tokens.push_back(g.token());
                    auto const key = w.server.lock(lock_key);
                    key_tokens.push_back(key ? key->token : "");
                    co_await sleep_for(5ms);
                    if (co_await g.unlock())
                        ++released;
                    ++finished;
                },
                asio::detached);
        while (finished < 4)
            co_await sleep_for(1ms);
        // One release for the lease, with the last fence given.
        CHECK(w.server.calls().releases == 1);
        auto const freed = w.server.lock(lock_key);
        REQUIRE(freed);
        CHECK(freed->kind == fake_server::lock_entry::state::free);
        CHECK(freed->fence == fences.back());
        auto next = co_await l.co_lock("n", short_lease());
        next_fence = next.fence();
        co_await next.unlock();
    });
    CHECK(order == std::vector<int>{0, 1, 2, 3});
    CHECK(released == 4);
    REQUIRE(fences.size() == 4);
    for (std::size_t i = 1; i < fences.size(); ++i)
        CHECK(fences[i] == fences[i - 1] + 1);
    // Each holder has a guard and a token of its own; the lock key keeps the first holder's, the
    // lease's, all along.
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        CHECK(key_tokens[i] == tokens[0]);
        for (std::size_t j = 0; j < i; ++j)
            CHECK(tokens[i] != tokens[j]);
    }
    // The release stored the last fence given: the next lease's is one more.
    CHECK(next_fence == fences.back() + 1);
    // One lease from the server for the four turns, the first call's: the others took batons
    // (the queue's head may ask meanwhile, and find its own process holding); then the next
    // call's.
    CHECK(w.server.calls().leases == 2);
    CHECK(w.server.calls().releases == 2);
    REQUIRE(observer->acquired.size() == 5);
    CHECK(std::vector<colock::acquired_by>(observer->acquired.begin(),
                                           observer->acquired.begin() + 4) ==
          std::vector<colock::acquired_by>{
              colock::acquired_by::first_attempt, colock::acquired_by::local_handoff,
              colock::acquired_by::local_handoff, colock::acquired_by::local_handoff});
    auto const after = w.server.lock(lock_key);
    REQUIRE(after);
    CHECK(after->kind == fake_server::lock_entry::state::free);
    CHECK(after->fence == next_fence);
}

TEST_CASE_FIXTURE(two_processes,
                  "orchestration: a release goes to the process queued for it at once, not after a "
                  "poll") {
    w.run([&]() -> asio::awaitable<void> {
        auto held = co_await a.co_lock("n", short_lease(10s));
        std::optional<clock_type::time_point> b_got;
        std::int64_t b_fence = 0;
        // Its own asks as rare as they go (at most one a second, queue_refresh_interval, or
        // sooner by the jitter): the message is what brings it the lock.
        auto slow = short_lease(10s);
        slow.retry.initial = 10s;
        slow.retry.max = 10s;
        asio::co_spawn(
            w.ctx,
            [&]() -> asio::awaitable<void> {
                auto g = co_await b.co_lock("n", slow);
                b_got = clock_type::now();
                b_fence = g.fence();
            },
            asio::detached);
        co_await until([&] { return w.server.queue(lock_key).size() == 1; }); // b, at the server
        auto const released_at = clock_type::now();
        CHECK(co_await held.unlock());
        while (!b_got)
            co_await sleep_for(1ms);
        // Told by its message: far sooner than its next ask (a second, queue_refresh_interval).
        CHECK(*b_got - released_at < 500ms);
        CHECK(b_fence > held.fence());
    });
}

TEST_CASE_FIXTURE(
    two_processes,
    "orchestration: with another process queued, local hand-offs stop at cohort_limit") {
    std::vector<std::string> order;
    int finished = 0;
    auto opt = short_lease(10s);
    opt.cohort_limit = 1;
    auto hold_briefly = [&](locker& l, std::string who) -> asio::awaitable<void> {
        auto g = co_await l.co_lock("n", opt);
        order.push_back(who);
        co_await sleep_for(5ms);
        co_await g.unlock();
        ++finished;
    };
    w.run([&]() -> asio::awaitable<void> {
        auto first = co_await a.co_lock("n", opt);
        asio::co_spawn(w.ctx, hold_briefly(a, "a2"), asio::detached);
        asio::co_spawn(w.ctx, hold_briefly(a, "a3"), asio::detached);
        co_await until([&] { return a.waiting() == 2; });
        asio::co_spawn(w.ctx, hold_briefly(b, "b1"), asio::detached);
        co_await until([&] {
            auto const q = w.server.queue(lock_key);
            return std::find(q.begin(), q.end(), b.id()) != q.end();
        });
        order.push_back("a1");
        co_await first.unlock();
        co_await until([&] { return finished == 3; });
    });
    // a1 passes to a2 (one hand-off allowed while b's process waits), whose release goes to
    // b's process; a3 after it.
    CHECK(order == std::vector<std::string>{"a1", "a2", "b1", "a3"});
}

TEST_CASE_FIXTURE(two_processes,
                  "orchestration: co_try_lock of a held lock answers nothing and queues nothing") {
    w.run([&]() -> asio::awaitable<void> {
        auto held = co_await a.co_lock("n", short_lease());
        auto got = co_await b.co_try_lock("n", short_lease());
        CHECK_FALSE(got.has_value());
        CHECK(w.server.queue(lock_key).empty());
        CHECK(b.waiting() == 0);
        CHECK(co_await held.unlock());
    });
}

TEST_CASE_FIXTURE(
    one_process, "orchestration: a co_lock cancelled while queued leaves both queues, and the next "
                 "release frees the lock rather than hand it to the gone caller") {
    auto b_store = w.process();
    auto b = locker_access::make(b_store);
    w.run([&]() -> asio::awaitable<void> {
        auto held = co_await a.co_lock("n", short_lease(10s));
        asio::steady_timer give_up(w.ctx, 50ms);
        auto outcome = co_await (b.co_lock("n", short_lease()) || give_up.async_wait(nothrow));
        CHECK(outcome.index() == 1);
        co_await sleep_for(20ms); // the leave, in the background
        CHECK(b.waiting() == 0);
        CHECK(w.server.queue(lock_key).empty());
        CHECK(b_store->subscriptions().empty());
        CHECK(co_await held.unlock());
        auto const after = w.server.lock(lock_key);
        REQUIRE(after);
        CHECK(after->kind == fake_server::lock_entry::state::free);
    });
}

TEST_CASE_FIXTURE(one_process,
                  "orchestration: a co_lock cancelled before its attempt was sent leaves nothing") {
    w.run([&]() -> asio::awaitable<void> {
        w.server.away();
        asio::steady_timer give_up(w.ctx, 30ms);
        auto outcome = co_await (a.co_lock("n", short_lease()) || give_up.async_wait(nothrow));
        CHECK(outcome.index() == 1);
        w.server.back();
        co_await sleep_for(20ms);
        CHECK(w.server.calls().grants == 0);
        CHECK_FALSE(w.server.lock(lock_key).has_value());
    });
}

TEST_CASE_FIXTURE(
    one_process,
    "orchestration: a co_lock cancelled after its attempt ran, before the reply, gives "
    "the lock back") {
    w.server.latency = 40ms;
    w.run([&]() -> asio::awaitable<void> {
        asio::cancellation_signal cancel;
        std::optional<std::exception_ptr> ended;
        asio::co_spawn(w.ctx, a.co_lock("n", short_lease(10s)),
                       asio::bind_cancellation_slot(
                           cancel.slot(), [&](std::exception_ptr e, lock_guard) { ended = e; }));
        co_await until([&] { return w.server.calls().grants == 1; }); // ran; the reply is due
        cancel.emit(asio::cancellation_type::terminal);
        co_await until([&] { return ended.has_value(); });
        REQUIRE(*ended);
        try {
            std::rethrow_exception(*ended);
        } catch (boost::system::system_error const& e) {
            CHECK(e.code() == asio::error::operation_aborted);
        }
        co_await until([&] { return w.server.calls().releases == 1; });
        auto const after = w.server.lock(lock_key);
        REQUIRE(after);
        CHECK(after->kind == fake_server::lock_entry::state::free);
        CHECK(w.server.calls().releases == 1);
    });
}

TEST_CASE_FIXTURE(one_process,
                  "orchestration: an attempt whose reply was lost after it ran is asked again and "
                  "keeps the grant; co_try_lock gives it back") {
    w.run([&]() -> asio::awaitable<void> {
        w.server.grant_faults.push_back({fault::kind::lost_after});
        auto g = co_await a.co_lock("n", short_lease());
        CHECK(g.owns_lock());
        CHECK(w.server.calls().grants == 2); // the same token again: the same lease
        auto const held = w.server.lock(lock_key);
        REQUIRE(held);
        CHECK(held->token == g.token());
        CHECK(co_await g.unlock());

        w.server.grant_faults.push_back({fault::kind::lost_after});
        error_code ec;
        try {
            auto once = co_await a.co_try_lock("m", short_lease());
            CHECK_FALSE(once.has_value());
        } catch (boost::system::system_error const& e) {
            ec = e.code();
        }
        CHECK(ec == colock::redis::error::connection_lost);
        co_await sleep_for(20ms);
        auto const left = w.server.lock("colock:{m}");
        REQUIRE(left); // released, with its token, not left held
        CHECK(left->kind == fake_server::lock_entry::state::free);
    });
}

TEST_CASE_FIXTURE(one_process,
                  "orchestration: a refused attempt fails co_lock with the server's words") {
    w.run([&]() -> asio::awaitable<void> {
        w.server.grant_faults.push_back({fault::kind::refused, "NOPERM no scripts for you"});
        std::string what;
        try {
            co_await a.co_lock("n", short_lease());
        } catch (boost::system::system_error const& e) {
            CHECK(e.code() == colock::redis::error::server_error);
            what = e.what();
        }
        CHECK(what.find("NOPERM no scripts for you") != std::string::npos);
        CHECK(what.find("'n'") != std::string::npos);
        CHECK_FALSE(w.server.lock(lock_key).has_value());
    });
}

TEST_CASE_FIXTURE(
    two_processes,
    "orchestration: wait_timeout ends a queued co_lock with error::timeout, out of the "
    "server's queue") {
    w.run([&]() -> asio::awaitable<void> {
        auto held = co_await a.co_lock("n", short_lease(10s));
        auto opt = short_lease();
        opt.wait_timeout = 80ms;
        auto const started = clock_type::now();
        auto const ec = co_await lock_error(b, "n", opt);
        CHECK(ec == colock::error::timeout);
        CHECK(clock_type::now() - started >= 80ms);
        CHECK(clock_type::now() - started < 2000ms);
        co_await sleep_for(20ms);
        CHECK(w.server.queue(lock_key).empty());
        CHECK(co_await held.unlock());
    });
}

TEST_CASE_FIXTURE(one_process, "orchestration: a locker destroyed with a call waiting ends it with "
                               "operation_aborted, and nothing of it stays queued") {
    w.run([&]() -> asio::awaitable<void> {
        auto held = co_await a.co_lock("n", short_lease(10s));
        std::optional<error_code> ended;
        {
            auto b = locker_access::make(w.process());
            asio::co_spawn(
                w.ctx, [&]() -> asio::awaitable<void> { ended = co_await lock_error(b, "n", {}); },
                asio::detached);
            co_await until([&] { return w.server.queue(lock_key).size() == 1; });
            // b goes here, with its call under way.
        }
        while (!ended)
            co_await sleep_for(1ms);
        CHECK(*ended == asio::error::operation_aborted);
        co_await sleep_for(20ms);
        CHECK(w.server.queue(lock_key).empty());
        CHECK(co_await held.unlock());
    });
}

TEST_CASE_FIXTURE(one_process, "orchestration: renewal extends the lease every renew_interval") {
    w.run([&]() -> asio::awaitable<void> {
        auto opt = short_lease(300ms);
        opt.renew_interval = 50ms;
        auto const started = clock_type::now();
        auto g = co_await a.co_lock("n", opt);
        co_await sleep_for(450ms); // half as long again as the lease
        auto const held_for = clock_type::now() - started;
        auto const extends = w.server.calls().extends;
        // Kept alive past its ttl, and never renewed more often than the interval.
        CHECK(g.owns_lock());
        auto const held = w.server.lock(lock_key);
        REQUIRE(held);
        CHECK(held->expires > clock_type::now());
        CHECK(extends >= 2);
        CHECK(extends <= held_for / 50ms + 1);
        CHECK(co_await g.unlock());
    });
}

TEST_CASE_FIXTURE(one_process,
                  "orchestration: renewals that are never answered: the guard is lost at its local "
                  "deadline, which is not later than the server's expiry") {
    auto observer = std::make_shared<recording_observer>();
    a.set_observer(observer);
    w.run([&]() -> asio::awaitable<void> {
        for (int i = 0; i < 100; ++i)
            w.server.extend_faults.push_back({fault::kind::never_answers});
        auto opt = short_lease(200ms);
        opt.renew_interval = 50ms;
        auto const started = clock_type::now();
        auto g = co_await a.co_lock("n", opt);
        co_await g.wait_lost();
        auto const lost_at = clock_type::now();
        CHECK(g.loss() == colock::loss_reason::expired);
        CHECK(lost_at - started >= 190ms);
        CHECK(lost_at - started < 1000ms);
        // The extends did run at the server: its lease outlives the local deadline.
        auto const at_server = w.server.lock(lock_key);
        REQUIRE(at_server);
        CHECK(at_server->expires >= lost_at);
        CHECK(g.lease_expiry() <= at_server->expires);
        CHECK(observer->lost == std::vector<colock::loss_reason>{colock::loss_reason::expired});
        CHECK_FALSE(co_await g.unlock());
    });
}

TEST_CASE_FIXTURE(one_process,
                  "orchestration: a renewal refused for a passing reason is tried again, and the "
                  "lease is kept") {
    w.run([&]() -> asio::awaitable<void> {
        w.server.extend_faults.push_back({fault::kind::refused, "BUSY script running"});
        w.server.extend_faults.push_back({fault::kind::lost_before});
        auto opt = short_lease(300ms);
        opt.renew_interval = 50ms;
        auto g = co_await a.co_lock("n", opt);
        co_await sleep_for(450ms); // past the first lease: a renewal went through
        CHECK(g.owns_lock());
        CHECK_FALSE(g.lost());
        CHECK(w.server.calls().extends >= 3);
        CHECK(co_await g.unlock());
    });
}

TEST_CASE_FIXTURE(
    one_process,
    "orchestration: a lease gone at the server is reported lost (not_ours) at the next "
    "renewal") {
    w.run([&]() -> asio::awaitable<void> {
        auto opt = short_lease(2000ms);
        opt.renew_interval = 50ms;
        auto g = co_await a.co_lock("n", opt);
        w.server.drop(lock_key);
        auto const dropped = clock_type::now();
        co_await g.wait_lost();
        CHECK(g.loss() == colock::loss_reason::not_ours);
        CHECK(clock_type::now() - dropped < 1000ms);
        CHECK_FALSE(co_await g.unlock());
    });
}

TEST_CASE_FIXTURE(one_process,
                  "orchestration: a replaced server marks the guards held there lost at once") {
    w.run([&]() -> asio::awaitable<void> {
        auto g = co_await a.co_lock("n", short_lease(10s));
        w.server.replace();
        asio::steady_timer limit(w.ctx, 1000ms);
        auto outcome = co_await (g.wait_lost() || limit.async_wait(nothrow));
        CHECK(outcome.index() == 0);
        CHECK(g.loss() == colock::loss_reason::server_replaced);
        CHECK_FALSE(g.owns_lock());
    });
}

TEST_CASE("orchestration: calls queued behind another process's lease wait in the local queue, "
          "only its head asking the server, and get the lock one at a time in call order") {
    world w;
    auto a = locker_access::make(w.process());
    auto b_store = w.process();
    auto b = locker_access::make(b_store);
    constexpr std::size_t calls = 40;
    std::vector<std::size_t> order;
    std::vector<std::int64_t> fences;
    std::size_t done = 0;
    int inside = 0;
    bool overlapped = false;
    w.run([&]() -> asio::awaitable<void> {
        auto holder = co_await a.co_lock("n", short_lease(10s));
        auto const grants_before = w.server.calls().grants;
        for (std::size_t i = 0; i < calls; ++i)
            asio::co_spawn(
                w.ctx,
                [&, i]() -> asio::awaitable<void> {
                    auto g = co_await b.co_lock("n", short_lease(10s));
                    overlapped = overlapped || ++inside != 1;
                    order.push_back(i);
                    fences.push_back(g.fence());
                    co_await sleep_for(1ms);
                    --inside;
                    co_await g.unlock();
                    ++done;
                },
                asio::detached);
        co_await until([&] { return b.waiting() == calls; });
        // The first call's attempt, the head's after subscribing, and its backoff polls: a few,
        // however many calls wait; one attempt per call would be 40.
        auto const asked = w.server.calls().grants - grants_before;
        CHECK(asked < static_cast<int>(calls / 4));
        CHECK(order.empty());

        CHECK(co_await holder.unlock());
        co_await until([&] { return done == calls; });
        co_await until([&] { return !listens(*b_store, b); });
    });
    CHECK_FALSE(overlapped);
    std::vector<std::size_t> made(calls);
    for (std::size_t i = 0; i < calls; ++i)
        made[i] = i;
    CHECK(order == made);
    for (std::size_t i = 1; i < fences.size(); ++i)
        CHECK(fences[i] > fences[i - 1]);
    CHECK(b.waiting() == 0);
    CHECK(free_or_gone(w.server.lock(lock_key)));
}

TEST_CASE("orchestration: of calls queued behind another process, one cancelled and one out of "
          "time leave at once, and the others still get the lock in turn") {
    world w;
    auto a = locker_access::make(w.process());
    auto b_store = w.process();
    auto b = locker_access::make(b_store);
    constexpr std::size_t calls = 5;
    constexpr std::size_t cancelled_call = 2;
    constexpr std::size_t timed_call = 3;
    w.run([&]() -> asio::awaitable<void> {
        auto holder = co_await a.co_lock("n", short_lease(10s));
        asio::cancellation_signal cancel;
        std::vector<error_code> results(calls);
        std::vector<clock_type::time_point> ended(calls);
        std::vector<std::size_t> order;
        std::size_t done = 0;
        auto const started = clock_type::now();
        for (std::size_t i = 0; i < calls; ++i) {
            auto opt = short_lease(10s);
            if (i == timed_call)
                opt.wait_timeout = 100ms;
            auto call = [&, i, opt]() -> asio::awaitable<void> {
                // The outcome as a value, also for the cancelled call.
                co_await asio::this_coro::throw_if_cancelled(false);
                auto outcome = co_await b.async_lock("n", opt, nothrow);
                results[i] = std::get<0>(outcome);
                ended[i] = clock_type::now();
                if (!std::get<0>(outcome)) {
                    order.push_back(i);
                    co_await std::get<1>(outcome).unlock();
                }
            };
            if (i == cancelled_call)
                asio::co_spawn(w.ctx, call,
                               asio::bind_cancellation_slot(cancel.slot(),
                                                            [&](std::exception_ptr) { ++done; }));
            else
                asio::co_spawn(w.ctx, call, [&](std::exception_ptr) { ++done; });
        }
        co_await until([&] { return b.waiting() == calls; });

        auto const cancelled_at = clock_type::now();
        cancel.emit(asio::cancellation_type::terminal);
        co_await until([&] { return done >= 1; });
        CHECK(done == 1);
        CHECK(results[cancelled_call] == asio::error::operation_aborted);
        CHECK(ended[cancelled_call] - cancelled_at < 100ms);
        CHECK(b.waiting() == calls - 1);

        co_await until([&] { return done >= 2; });
        CHECK(done == 2);
        CHECK(results[timed_call] == colock::error::timeout);
        CHECK(ended[timed_call] - started >= 100ms);
        CHECK(ended[timed_call] - started < 2000ms); // not held up until the holder lets go
        CHECK(b.waiting() == calls - 2);

        CHECK(co_await holder.unlock());
        co_await until([&] { return done == calls; });
        CHECK(order == std::vector<std::size_t>{0, 1, 4});
        CHECK(b.waiting() == 0);
        co_await until([&] { return !listens(*b_store, b); });
        CHECK(w.server.queue(lock_key).empty());
        CHECK(free_or_gone(w.server.lock(lock_key)));
    });
}

TEST_CASE("orchestration: sleeping waiters cancelled (terminal, partial): the one behind the head "
          "first, then the head; each returns at once, the holder is not disturbed, and a new "
          "waiter is woken by the release") {
    for (auto type : {asio::cancellation_type::terminal, asio::cancellation_type::partial}) {
        CAPTURE(static_cast<int>(type));
        world w;
        auto a = locker_access::make(w.process());
        auto b_store = w.process();
        auto b = locker_access::make(b_store);
        w.run([&]() -> asio::awaitable<void> {
            auto holder = co_await a.co_lock("n", short_lease(10s));

            // Two waiters: the head (subscribed, queued at the server) and one behind it.
            asio::cancellation_signal head_signal, second_signal;
            call_result head, second;
            b.async_lock("n", patient_waiter(),
                         asio::bind_cancellation_slot(head_signal.slot(), record_call{head}));
            co_await until(
                [&] { return listens(*b_store, b) && w.server.queue(lock_key).size() == 1; });
            b.async_lock("n", patient_waiter(),
                         asio::bind_cancellation_slot(second_signal.slot(), record_call{second}));
            co_await until([&] { return b.waiting() == 2; });

            // The one behind first: the head keeps waiting, subscribed and queued.
            auto emitted = clock_type::now();
            second_signal.emit(type);
            co_await until([&] { return second.done; });
            CHECK(second.ec == asio::error::operation_aborted);
            CHECK_FALSE(second.got);
            CHECK(second.at - emitted < 100ms);
            co_await sleep_for(5ms);
            CHECK_FALSE(head.done);
            CHECK(b.waiting() == 1);
            CHECK(listens(*b_store, b));
            CHECK(w.server.queue(lock_key).size() == 1);

            // Then the head: nothing of the locker's stays, subscription or queue entry.
            emitted = clock_type::now();
            head_signal.emit(type);
            co_await until([&] { return head.done; });
            CHECK(head.ec == asio::error::operation_aborted);
            CHECK_FALSE(head.got);
            CHECK(head.at - emitted < 100ms);
            co_await until(
                [&] { return !listens(*b_store, b) && w.server.queue(lock_key).empty(); });
            auto const held = w.server.lock(lock_key);
            REQUIRE(held);
            CHECK(held->token == holder.token());

            // A new waiter on the same locker queues, subscribes and is woken by the release,
            // not by its next attempt.
            call_result next;
            b.async_lock("n", patient_waiter(), record_call{next});
            co_await until(
                [&] { return listens(*b_store, b) && w.server.queue(lock_key).size() == 1; });
            auto const released_at = clock_type::now();
            CHECK(co_await holder.unlock());
            co_await until([&] { return next.done; });
            CHECK_FALSE(next.ec);
            CHECK(next.got);
            CHECK(next.at - released_at < 500ms);
        });
    }
}

TEST_CASE("orchestration: cancelled with its attempt in flight on a free lock (terminal, partial, "
          "co_try_lock, a timer raced with ||): the lease granted is given back before the call "
          "completes with operation_aborted") {
    enum class how { terminal_slot, partial_slot, try_lock_terminal, timer_or };
    for (auto way :
         {how::terminal_slot, how::partial_slot, how::try_lock_terminal, how::timer_or}) {
        CAPTURE(static_cast<int>(way));
        one_process p;
        auto& w = p.w;
        w.server.latency = 40ms; // the attempt ran; its reply is due meanwhile
        w.run([&]() -> asio::awaitable<void> {
            asio::cancellation_signal signal;
            call_result r;
            record_call rec{r, &w.server};
            if (way == how::timer_or) {
                asio::co_spawn(
                    w.ctx,
                    [&]() -> asio::awaitable<void> {
                        asio::steady_timer timer(w.ctx, 20ms);
                        auto race = co_await (p.a.co_lock("n", short_lease(10s)) ||
                                              timer.async_wait(nothrow));
                        if (race.index() == 0)
                            rec(error_code{}, std::move(std::get<0>(race)));
                        else
                            rec(asio::error::operation_aborted, lock_guard{});
                    },
                    asio::detached);
            } else if (way == how::try_lock_terminal) {
                p.a.async_try_lock("n", short_lease(10s),
                                   asio::bind_cancellation_slot(signal.slot(), rec));
            } else {
                p.a.async_lock("n", short_lease(10s),
                               asio::bind_cancellation_slot(signal.slot(), rec));
            }
            co_await until([&] { return w.server.calls().grants == 1; });
            CHECK_FALSE(r.done);
            if (way != how::timer_or)
                signal.emit(way == how::partial_slot ? asio::cancellation_type::partial
                                                     : asio::cancellation_type::terminal);
            co_await until([&] { return r.done; });
            CHECK(r.ec == asio::error::operation_aborted);
            CHECK_FALSE(r.got);
            // Granted at the server, and given back before the call completed.
            CHECK(w.server.calls().leases == 1);
            CHECK(w.server.calls().releases == 1);
            CHECK(free_or_gone(r.key_at_completion));
            CHECK(w.server.queue(lock_key).empty());
        });
    }
}

TEST_CASE("orchestration: cancelled in the same turn as async_lock or async_try_lock on a free "
          "lock: operation_aborted, and nothing held") {
    for (bool try_lock : {false, true}) {
        CAPTURE(try_lock);
        one_process p;
        p.w.run([&]() -> asio::awaitable<void> {
            asio::cancellation_signal signal;
            call_result r;
            if (try_lock)
                p.a.async_try_lock("n", short_lease(10s),
                                   asio::bind_cancellation_slot(signal.slot(), record_call{r}));
            else
                p.a.async_lock("n", short_lease(10s),
                               asio::bind_cancellation_slot(signal.slot(), record_call{r}));
            signal.emit(asio::cancellation_type::terminal);
            co_await until([&] { return r.done; });
            CHECK(r.ec == asio::error::operation_aborted);
            CHECK_FALSE(r.got);
            co_await sleep_for(10ms); // a release, had anything been granted
            CHECK(free_or_gone(p.w.server.lock(lock_key)));
        });
    }
}

TEST_CASE_FIXTURE(two_processes, "orchestration: co_try_lock cancelled with its attempt in flight "
                                 "on a held lock reports operation_aborted, and queues nothing") {
    w.run([&]() -> asio::awaitable<void> {
        auto holder = co_await a.co_lock("n", short_lease(10s));
        w.server.latency = 40ms;
        asio::cancellation_signal signal;
        call_result r;
        b.async_try_lock("n", short_lease(10s),
                         asio::bind_cancellation_slot(signal.slot(), record_call{r}));
        co_await until([&] { return w.server.calls().grants == 2; }); // ran; the reply is due
        signal.emit(asio::cancellation_type::terminal);
        co_await until([&] { return r.done; });
        CHECK_FALSE(r.got);
        // A cancellation requested before the operation completed is reported, as for every
        // Asio operation; "held elsewhere" would hide that it was cancelled.
        CHECK(r.ec == asio::error::operation_aborted);
        CHECK(w.server.queue(lock_key).empty());
        CHECK(b.waiting() == 0);
        auto const held = w.server.lock(lock_key);
        REQUIRE(held);
        CHECK(held->token == holder.token());
        w.server.latency = 0ms;
        CHECK(co_await holder.unlock());
    });
}

TEST_CASE("orchestration: the head waiter cancelled while its attempt is in flight returns when "
          "the reply comes, not after its backoff") {
    // Several rounds: the waiter's sleep after an attempt is random (jitter), so one round could
    // hide a waiter that sleeps before it looks at its cancellation.
    for (int round = 0; round < 4; ++round) {
        CAPTURE(round);
        world w;
        auto a = locker_access::make(w.process());
        auto b_store = w.process();
        auto b = locker_access::make(b_store);
        w.run([&]() -> asio::awaitable<void> {
            auto holder = co_await a.co_lock("n", short_lease(10s));
            asio::cancellation_signal signal;
            call_result r;
            b.async_lock("n", patient_waiter(),
                         asio::bind_cancellation_slot(signal.slot(), record_call{r}));
            co_await until(
                [&] { return listens(*b_store, b) && w.server.queue(lock_key).size() == 1; });
            co_await sleep_for(10ms); // asleep in its backoff

            // A wake-up makes the head ask again, and its reply takes 150 ms.
            w.server.latency = 150ms;
            auto const grants = w.server.calls().grants;
            b_store->deliver(lock_key + ":w:" + b.id(), "1");
            co_await until([&] { return w.server.calls().grants == grants + 1; });
            auto const in_flight = clock_type::now();
            signal.emit(asio::cancellation_type::terminal);
            co_await until([&] { return r.done; });
            CHECK(r.ec == asio::error::operation_aborted);
            CHECK_FALSE(r.got);
            // The reply comes 150 ms after the attempt ran; then it must stop, not sleep its
            // backoff (up to a second, the queue's refresh) before it looks at the cancellation.
            CHECK(r.at - in_flight < 600ms);
            w.server.latency = 0ms;
            co_await until(
                [&] { return !listens(*b_store, b) && w.server.queue(lock_key).empty(); });
            auto const held = w.server.lock(lock_key);
            REQUIRE(held);
            CHECK(held->token == holder.token());
            CHECK(co_await holder.unlock());
        });
    }
}

TEST_CASE_FIXTURE(one_process, "orchestration: co_await (work() || g.wait_lost()) cancels the work "
                               "when the lease goes; work that ends first ends wait_lost quietly") {
    w.run([&]() -> asio::awaitable<void> {
        auto opt = short_lease(1000ms);
        opt.renew_interval = 50ms;
        auto g = co_await a.co_lock("n", opt);
        bool work_cancelled = false, work_finished = false;
        auto work = [&]() -> asio::awaitable<void> {
            try {
                asio::steady_timer t(w.ctx, 10s);
                co_await t.async_wait(asio::use_awaitable);
                work_finished = true;
            } catch (boost::system::system_error const& e) {
                work_cancelled = e.code() == asio::error::operation_aborted;
                throw;
            }
        };
        auto const started = clock_type::now();
        std::optional<clock_type::time_point> dropped_at;
        asio::co_spawn(
            w.ctx,
            [&]() -> asio::awaitable<void> {
                co_await sleep_for(30ms);
                w.server.drop(lock_key);
                dropped_at = clock_type::now();
            },
            asio::detached);
        auto result = co_await (work() || g.wait_lost());
        auto const ended = clock_type::now();
        CHECK(result.index() == 1);
        CHECK(work_cancelled);
        CHECK_FALSE(work_finished);
        CHECK(g.lost());
        REQUIRE(dropped_at);
        CHECK(ended - started < 1000ms);
        CHECK(ended - *dropped_at < 500ms); // at the next renewal

        // While the lease holds, the work finishes first.
        auto g2 = co_await a.co_lock("m", opt);
        auto quick = [&]() -> asio::awaitable<int> {
            co_await sleep_for(120ms); // past a couple of renewals
            co_return 42;
        };
        auto kept = co_await (quick() || g2.wait_lost());
        REQUIRE(kept.index() == 0);
        CHECK(std::get<0>(kept) == 42);
        CHECK(g2.owns_lock());
        CHECK_FALSE(g2.lost());
        CHECK(co_await g2.unlock());
    });
}

TEST_CASE_FIXTURE(one_process,
                  "orchestration: a pending wait_lost ends with not_held when the guard "
                  "is unlocked, which is no loss") {
    w.run([&]() -> asio::awaitable<void> {
        auto g = co_await a.co_lock("n", short_lease());
        std::optional<error_code> told;
        g.async_wait_lost([&](error_code ec) { told = ec; });
        co_await sleep_for(5ms);
        CHECK_FALSE(told);
        CHECK(co_await g.unlock());
        co_await until([&] { return told.has_value(); });
        CHECK(*told == colock::error::not_held);
        CHECK_FALSE(g.lost());
        CHECK_FALSE(g.owns_lock());
    });
}

TEST_CASE("orchestration: not reentrant: a second co_lock of a held name, from the same locker or "
          "another of the same process, waits for itself until wait_timeout; co_try_lock comes "
          "back empty") {
    world w;
    auto store = w.process();
    auto locks = locker_access::make(store);
    auto same_process = locker_access::make(store); // another part of the program, one connection
    w.run([&]() -> asio::awaitable<void> {
        auto held = co_await locks.co_lock("n", short_lease(10s));
        auto again = short_lease(10s);
        again.wait_timeout = 100ms;
        std::array<locker*, 2> const askers{&locks, &same_process};
        for (locker* l : askers) {
            auto const started = clock_type::now();
            error_code code;
            std::string what;
            try {
                auto second = co_await l->co_lock("n", again);
                what = "acquired a second time, fence " + std::to_string(second.fence());
            } catch (boost::system::system_error const& e) {
                code = e.code();
                what = e.what();
            }
            INFO(what);
            CHECK(code == colock::error::timeout);
            CHECK(what.find("'n'") != std::string::npos);
            CHECK(clock_type::now() - started >= 100ms);
            CHECK(clock_type::now() - started < 2000ms);
        }
        auto once = co_await locks.co_try_lock("n", short_lease());
        CHECK_FALSE(once.has_value());
        // The first guard is untouched.
        CHECK(held.owns_lock());
        auto const key = w.server.lock(lock_key);
        REQUIRE(key);
        CHECK(key->token == held.token());
        CHECK(co_await held.unlock());
    });
}

TEST_CASE("orchestration: cohort_limit = 0: every waiter of the process takes a lease of its own "
          "from the server") {
    world w;
    auto l = locker_access::make(w.process());
    auto observer = std::make_shared<recording_observer>();
    l.set_observer(observer);
    auto opt = short_lease(10s);
    opt.cohort_limit = 0;
    std::vector<std::string> tokens, key_tokens;
    int done = 0;
    w.run([&]() -> asio::awaitable<void> {
        auto holder = co_await l.co_lock("n", opt);
        for (int i = 0; i < 3; ++i)
            asio::co_spawn(
                w.ctx,
                [&]() -> asio::awaitable<void> {
                    auto g = co_await l.co_lock("n", opt);
                    tokens.push_back(g.token());
                    auto const key = w.server.lock(lock_key);
                    key_tokens.push_back(key ? key->token : "");
                    CHECK(co_await g.unlock());
                    ++done;
                },
                asio::detached);
        co_await until([&] { return l.waiting() == 3; });
        CHECK(co_await holder.unlock());
        co_await until([&] { return done == 3; });
    });
    REQUIRE(tokens.size() == 3);
    CHECK(key_tokens == tokens);
    CHECK(w.server.calls().leases == 4);
    for (auto how : observer->acquired)
        CHECK(how != colock::acquired_by::local_handoff);
}

TEST_CASE("orchestration: a cohort's lease lost: its holder is told, and the next waiter of the "
          "process takes a lease of its own from the server") {
    world w;
    auto l = locker_access::make(w.process());
    auto opt = short_lease(3000ms);
    opt.renew_interval = 50ms;
    w.run([&]() -> asio::awaitable<void> {
        auto first = co_await l.co_lock("n", opt);
        std::optional<lock_guard> second, third;
        asio::co_spawn(
            w.ctx, [&]() -> asio::awaitable<void> { second = co_await l.co_lock("n", opt); },
            asio::detached);
        asio::co_spawn(
            w.ctx, [&]() -> asio::awaitable<void> { third = co_await l.co_lock("n", opt); },
            asio::detached);
        co_await until([&] { return l.waiting() == 2; });
        CHECK(co_await first.unlock()); // to the second, locally
        co_await until([&] { return second.has_value(); });
        auto const lease = w.server.lock(lock_key);
        REQUIRE(lease);
        CHECK(lease->token == first.token()); // the lease goes on

        // Gone at the server: the holder (the second) finds out at its next renewal.
        w.server.drop(lock_key);
        co_await second->wait_lost();
        CHECK(second->lost());
        CHECK(second->loss() == colock::loss_reason::not_ours);
        CHECK_FALSE(co_await second->unlock());
        // The third does not get the lost lease: it asks the server for one of its own.
        co_await until([&] { return third.has_value(); });
        auto const own = w.server.lock(lock_key);
        REQUIRE(own);
        CHECK(own->token == third->token());
        CHECK(third->fence() > second->fence());
        CHECK(co_await third->unlock());
    });
}

TEST_CASE_FIXTURE(two_processes, "orchestration: a cohort whose locker missed the \"q\" message "
                                 "still yields: the queued process's next attempt tells it again") {
    auto opt = short_lease(10s);
    opt.cohort_limit = 2;
    w.run([&]() -> asio::awaitable<void> {
        // Process a: eight calls pass the lease among themselves for as long as they run, each
        // holding it for one turn, so that no waiter of a stays at the head of its queue long
        // enough to ask the server again (which would tell it too).
        bool stop = false;
        int a_running = 0;
        for (int i = 0; i < 8; ++i) {
            ++a_running;
            asio::co_spawn(
                w.ctx,
                [&]() -> asio::awaitable<void> {
                    while (!stop) {
                        auto g = co_await a.co_lock("n", opt);
                        co_await asio::post(w.ctx, asio::use_awaitable);
                        co_await g.unlock();
                    }
                },
                [&](std::exception_ptr) { --a_running; });
        }
        co_await until([&] { return a.waiting() > 0; }); // a's cohort is under way
        // The first "q" that b's attempts send is lost.
        w.server.lose_q_messages = 1;
        auto b_opt = opt;
        b_opt.wait_timeout = 3000ms;
        auto got = co_await b.co_lock("n", b_opt);
        CHECK(got.owns_lock());
        CHECK(w.server.lose_q_messages == 0); // one was lost
        co_await got.unlock();
        stop = true;
        co_await until([&] { return a_running == 0; });
    });
}

TEST_CASE_FIXTURE(one_process, "orchestration: unlock() from a cancelled caller still releases: "
                               "cancelled with the release in flight, or called after a "
                               "cancellation") {
    w.run([&]() -> asio::awaitable<void> {
        // Cancelled while the release is in flight.
        {
            auto g = co_await a.co_lock("n", short_lease(5s));
            w.server.latency = 60ms;
            std::optional<bool> unlocked;
            auto do_unlock = [&]() -> asio::awaitable<void> { unlocked = co_await g.unlock(); };
            asio::steady_timer timer(w.ctx, 10ms);
            auto const started = clock_type::now();
            auto r = co_await (do_unlock() || timer.async_wait(nothrow));
            CHECK(r.index() == 1); // the timer came first and cancelled the caller
            CHECK(clock_type::now() - started >= 50ms);
            REQUIRE(unlocked.has_value());
            CHECK(*unlocked);
            CHECK(free_or_gone(w.server.lock(lock_key)));
            CHECK_FALSE(g.owns_lock());
            w.server.latency = 0ms;
        }
        // Called from a coroutine that was cancelled before (and chose not to throw).
        {
            auto g = co_await a.co_lock("n", short_lease(5s));
            asio::cancellation_signal signal;
            std::optional<bool> unlocked;
            bool done = false;
            asio::co_spawn(
                w.ctx,
                [&]() -> asio::awaitable<void> {
                    co_await asio::this_coro::throw_if_cancelled(false);
                    asio::steady_timer t(co_await asio::this_coro::executor, 5s);
                    co_await t.async_wait(nothrow); // ends with operation_aborted
                    unlocked = co_await g.unlock();
                },
                asio::bind_cancellation_slot(signal.slot(),
                                             [&](std::exception_ptr) { done = true; }));
            co_await sleep_for(5ms);
            signal.emit(asio::cancellation_type::terminal);
            co_await until([&] { return done; });
            REQUIRE(unlocked.has_value());
            CHECK(*unlocked);
            CHECK(free_or_gone(w.server.lock(lock_key)));
        }
    });
}

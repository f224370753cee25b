// The lease without Redis: renewal timing, loss (never answered, refused for a passing reason,
// gone at the server, a replaced server), wait_lost, and co_with_lock.
#include "orchestration.hpp"

#include <thread>

TEST_CASE_FIXTURE(one_process, "orchestration: renewal extends the lease every renew_interval") {
    w.run([&]() -> asio::awaitable<void> {
        auto opt = renewed_lease(300ms, 50ms);
        auto const started = clock_type::now();
        auto g = co_await a.co_lock("n", opt);
        co_await sleep_for(450ms); // half as long again as the lease
        auto const held_for = clock_type::now() - started;
        auto const extends = w.server.calls().extends;
        // Kept alive past its ttl, and never renewed more often than the interval.
        CHECK(g.owns());
        auto const held = w.server.lock(lock_key);
        REQUIRE(held);
        CHECK(held->expires > clock_type::now());
        CHECK(extends >= 2);
        CHECK(extends <= held_for / 50ms + 1);
        CHECK(co_await g.release());
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
        auto opt = renewed_lease(200ms, 50ms);
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
        CHECK_FALSE(co_await g.release());
    });
}

TEST_CASE_FIXTURE(one_process,
                  "orchestration: a renewal refused for a passing reason is tried again, and the "
                  "lease is kept") {
    w.run([&]() -> asio::awaitable<void> {
        w.server.extend_faults.push_back({fault::kind::refused, "BUSY script running"});
        w.server.extend_faults.push_back({fault::kind::lost_before});
        auto opt = renewed_lease(300ms, 50ms);
        auto g = co_await a.co_lock("n", opt);
        co_await sleep_for(450ms); // past the first lease: a renewal went through
        CHECK(g.owns());
        CHECK_FALSE(g.lost());
        CHECK(w.server.calls().extends >= 3);
        CHECK(co_await g.release());
    });
}

TEST_CASE_FIXTURE(
    one_process,
    "orchestration: a lease gone at the server is reported lost (not_ours) at the next "
    "renewal") {
    w.run([&]() -> asio::awaitable<void> {
        auto opt = renewed_lease(2000ms, 50ms);
        auto g = co_await a.co_lock("n", opt);
        w.server.drop(lock_key);
        auto const dropped = clock_type::now();
        co_await g.wait_lost();
        CHECK(g.loss() == colock::loss_reason::not_ours);
        CHECK(clock_type::now() - dropped < 1000ms);
        CHECK_FALSE(co_await g.release());
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
        CHECK_FALSE(g.owns());
    });
}

// ------------------------------------------------------------------ co_with_lock

TEST_CASE_FIXTURE(one_process, "co_with_lock: runs the work under the lock, returns its result "
                               "and gives the lock back") {
    w.run([&]() -> asio::awaitable<void> {
        std::int64_t seen_fence = 0;
        bool held_inside = false;
        auto const result = co_await a.co_with_lock(
            "n",
            [&](lock_guard& g) -> asio::awaitable<int> {
                seen_fence = g.fence();
                held_inside = g.owns() &&
                              w.server.lock(lock_key)->kind == fake_server::lock_entry::state::held;
                co_return 42;
            },
            short_lease());
        CHECK(result == 42);
        CHECK(held_inside);
        CHECK(seen_fence > 0);
        CHECK(w.server.calls().releases == 1);
        auto const after = w.server.lock(lock_key);
        REQUIRE(after);
        CHECK(after->kind == fake_server::lock_entry::state::free);
        // Work that returns nothing.
        int runs = 0;
        co_await a.co_with_lock("n", [&](lock_guard&) -> asio::awaitable<void> {
            ++runs;
            co_return;
        });
        CHECK(runs == 1);
        CHECK(w.server.calls().releases == 2);
    });
}

namespace {

// How a co_with_lock ended: what it threw, and whether it returned.
struct with_lock_end {
    thrown_error thrown;
    bool returned = false;
};

// Runs `work` under a.co_with_lock("n", ..., opt) to its end.
template <class Work>
asio::awaitable<with_lock_end> with_lock_ended(locker& a, lock_options opt, Work work) {
    with_lock_end end;
    end.thrown = co_await thrown_by([&]() -> asio::awaitable<void> {
        co_await a.co_with_lock("n", std::move(work), opt);
        end.returned = true;
    });
    co_return end;
}

// Checks that `end` is a lock_lost naming the lock and saying `why`.
void check_lost_naming(with_lock_end const& end, std::string const& why) {
    CHECK_FALSE(end.returned);
    CHECK(end.thrown.code == colock::error::lock_lost);
    CHECK(end.thrown.what.find("lock 'n'") != std::string::npos);
    CHECK_MESSAGE(end.thrown.what.find(why) != std::string::npos, end.thrown.what);
}

} // namespace

TEST_CASE_FIXTURE(one_process, "co_with_lock: a lease lost while the work runs cancels the work "
                               "and throws lock_lost, naming the lock and why") {
    w.run([&]() -> asio::awaitable<void> {
        bool work_cancelled = false;
        auto const end = co_await with_lock_ended(
            a, renewed_lease(2000ms, 50ms), [&](lock_guard&) -> asio::awaitable<int> {
                w.server.drop(lock_key); // the lease goes from outside
                asio::steady_timer forever(w.ctx, 60s);
                auto [ec] = co_await forever.async_wait(nothrow);
                work_cancelled = ec == asio::error::operation_aborted;
                co_return 1;
            });
        CHECK(work_cancelled);
        check_lost_naming(end, "not_ours");
    });
}

TEST_CASE_FIXTURE(one_process, "co_with_lock: work that returns after its lease ran out (a stall "
                               "of the thread) ends with lock_lost, not with its result") {
    w.run([&]() -> asio::awaitable<void> {
        auto const end = co_await with_lock_ended(a, renewed_lease(100ms, 30ms),
                                                  [&](lock_guard&) -> asio::awaitable<int> {
                                                      // Blocks the only thread: neither the renewal
                                                      // nor wait_lost can run, so the work's branch
                                                      // wins the race.
                                                      std::this_thread::sleep_for(300ms);
                                                      co_return 42;
                                                  });
        check_lost_naming(end, "not returned");
    });
}

TEST_CASE_FIXTURE(one_process, "co_with_lock: work that throws: the lock goes back and the "
                               "exception comes through unchanged") {
    w.run([&]() -> asio::awaitable<void> {
        bool caught = false;
        try {
            co_await a.co_with_lock("n", [&](lock_guard&) -> asio::awaitable<void> {
                throw std::runtime_error("the work failed");
                co_return;
            });
        } catch (std::runtime_error const& e) {
            caught = std::string(e.what()) == "the work failed";
        }
        CHECK(caught);
        CHECK(w.server.calls().releases == 1);
        CHECK(w.server.lock(lock_key)->kind == fake_server::lock_entry::state::free);
    });
}

TEST_CASE_FIXTURE(one_process, "co_with_lock: the caller's cancellation cancels the work, and the "
                               "lock still goes back") {
    w.run([&]() -> asio::awaitable<void> {
        bool work_cancelled = false;
        asio::steady_timer give_up(w.ctx, 50ms);
        auto outcome = co_await (a.co_with_lock("n", [&](lock_guard&) -> asio::awaitable<void> {
            asio::steady_timer t(w.ctx, 60s);
            auto [ec] = co_await t.async_wait(nothrow);
            work_cancelled = ec == asio::error::operation_aborted;
        }) || give_up.async_wait(nothrow));
        CHECK(outcome.index() == 1);
        CHECK(work_cancelled);
        co_await until([&] { return w.server.calls().releases == 1; });
        CHECK(w.server.lock(lock_key)->kind == fake_server::lock_entry::state::free);
    });
}

TEST_CASE_FIXTURE(one_process, "orchestration: co_await (work() || g.wait_lost()) cancels the work "
                               "when the lease goes; work that ends first ends wait_lost quietly") {
    w.run([&]() -> asio::awaitable<void> {
        auto opt = renewed_lease(1000ms, 50ms);
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
        CHECK(g2.owns());
        CHECK_FALSE(g2.lost());
        CHECK(co_await g2.release());
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
        CHECK(co_await g.release());
        co_await until([&] { return told.has_value(); });
        CHECK(*told == colock::error::not_held);
        CHECK_FALSE(g.lost());
        CHECK_FALSE(g.owns());
    });
}

TEST_CASE_FIXTURE(one_process, "orchestration: the renewal timer, left armed after the last lease "
                               "(the next one costs no re-arm), stops at the locker's close: "
                               "io_context::run() returns at once") {
    w.run([&]() -> asio::awaitable<void> {
        // A locker of its own, gone at the end of this scope as a program's is before run()
        // returns (a connection, which a real locker has, keeps run() going while open).
        locker c = locker_access::make(w.process());
        auto first = co_await c.co_lock("n", short_lease(30s)); // renewals every 10 s
        std::optional<lock_guard> second;
        asio::co_spawn(
            w.ctx,
            [&]() -> asio::awaitable<void> { second = co_await c.co_lock("n", short_lease(30s)); },
            asio::detached);
        co_await until([&] { return c.waiting() == 1; });
        CHECK(co_await first.release()); // handed to the waiter
        co_await until([&] { return second.has_value(); });
        CHECK(co_await second->release());
        second.reset();
    });
    w.ctx.restart();
    auto const started = clock_type::now();
    w.ctx.run(); // nothing left to wait for: no renewal timer 10 s away
    CHECK(clock_type::now() - started < 1s);
}

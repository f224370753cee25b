// The read-write lock against a real server: readers share and a writer excludes, a waiting
// writer stops the readers that come after it and is not starved by readers that keep coming,
// the readers queued behind a writer enter together when it leaves, fences (a writer's strictly
// increasing, a reader's its writer's), a downgrade with no gap, and an upgrade refused. The
// queue, leases and cancellation are the semaphore's (test_semaphore.cpp).
#include <colock/rw_lock.hpp>

#include "lock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

using namespace colock;
using namespace colock::test;

namespace {

// Whether `co_upgrade()` may be called on a G.
template <class G>
concept upgradable = requires(G& g) {
    g.co_upgrade();
};

std::string rw_key(std::string const& name) {
    return "colock:rw:{" + name + "}";
}

} // namespace

TEST_CASE("rw_lock: readers share and a writer excludes; a reader carries the last writer's "
          "fence, writers' fences increase; every key expires") {
    run_lock_test<one_locker>(
        "rw-basic",
        [](redis::connection&, redis::connection& probe, locker& locks,
           std::string const& name) -> asio::awaitable<void> {
            rw_lock rw{locks, name};
            CHECK(rw.name() == name);
            auto r1 = co_await rw.co_lock_shared(lease(10'000ms));
            auto r2 = co_await rw.co_lock_shared(lease(10'000ms));
            CHECK(r1.owns());
            CHECK(r2.owns());
            CHECK(r1.fence() == 0); // no writer yet
            CHECK_FALSE((co_await rw.co_try_lock()).has_value());
            CHECK((co_await rw.co_try_lock_shared()).has_value());
            CHECK(co_await r1.release());
            CHECK(co_await r2.release());

            auto w1 = co_await rw.co_lock(lease(10'000ms));
            CHECK(w1.owns());
            CHECK(w1.fence() > 0);
            CHECK_FALSE((co_await rw.co_try_lock_shared()).has_value());
            CHECK_FALSE((co_await rw.co_try_lock()).has_value());
            for (auto const* suffix : {"", ":h", ":hw"}) {
                auto const pttl = co_await integer(probe, command("PTTL", rw_key(name) + suffix));
                CHECK_MESSAGE(pttl > 9000, suffix);
            }
            CHECK(co_await w1.release());
            CHECK_FALSE(w1.owns());

            auto r3 = co_await rw.co_lock_shared(lease(10'000ms));
            CHECK(r3.fence() == w1.fence());
            CHECK(co_await r3.release());
            auto w2 = co_await rw.co_lock(lease(10'000ms));
            CHECK(w2.fence() > w1.fence());
            CHECK(co_await w2.release());
            CHECK(co_await integer(probe, command("EXISTS", rw_key(name) + ":h")) == 0);
            CHECK(co_await integer(probe, command("EXISTS", rw_key(name) + ":hw")) == 0);
            CHECK(co_await integer(probe, command("PTTL", rw_key(name))) > 0);
        });
}

TEST_CASE("rw_lock: a waiting writer stops the readers after it; they enter together when it "
          "leaves; readers that keep coming do not starve a writer") {
    run_lock_test<two_lockers>(
        "rw-preference",
        [](redis::connection&, redis::connection&, redis::connection& probe, locker& a, locker& b,
           std::string const& name) -> asio::awaitable<void> {
            auto ex = co_await asio::this_coro::executor;
            rw_lock ra{a, name};
            rw_lock rb{b, name};
            auto reader = co_await ra.co_lock_shared(lease(10'000ms));
            call_run<write_guard> writer;
            start_call(
                ex, [&] { return rb.co_lock(lease(10'000ms)); }, writer);
            CHECK(co_await exists_becomes(probe, rw_key(name) + ":q", 1) == 1);
            // A reader after the waiting writer waits too.
            CHECK_FALSE((co_await ra.co_try_lock_shared()).has_value());
            call_run<read_guard> later1, later2;
            start_call(
                ex, [&] { return ra.co_lock_shared(lease(10'000ms)); }, later1);
            start_call(
                ex, [&] { return rb.co_lock_shared(lease(10'000ms)); }, later2);
            CHECK(co_await stays([&] { return !writer.done && !later1.done && !later2.done; },
                                 300ms));
            CHECK_FALSE(writer.done);
            CHECK_FALSE(later1.done);
            CHECK_FALSE(later2.done);

            auto const released_at = steady::now();
            CHECK(co_await reader.release());
            CHECK(co_await finishes(writer.done, 2000ms));
            CHECK(ms_between(released_at, writer.at) < 300);
            CHECK(co_await stays([&] { return !later1.done && !later2.done; }, 100ms));
            CHECK_FALSE(later1.done);
            CHECK_FALSE(later2.done);
            auto const written_at = steady::now();
            CHECK(co_await writer.got->release());
            CHECK(co_await finishes(later1.done, 2000ms));
            CHECK(co_await finishes(later2.done, 2000ms));
            CHECK(ms_between(written_at, std::max(later1.at, later2.at)) < 300);
            CHECK(later1.got->fence() == writer.got->fence());
            CHECK(later2.got->owns());
            CHECK(co_await later1.got->release());
            CHECK(co_await later2.got->release());

            // Readers overlapping without a pause: without the queue a writer would wait for
            // ever; here it gets in once the readers ahead of it leave.
            bool stop = false;
            int readers_done = 0;
            int reads = 0;
            for (int i = 0; i < 4; ++i)
                asio::co_spawn(
                    ex,
                    [&, i]() -> asio::awaitable<void> {
                        auto& lock = i % 2 == 0 ? ra : rb;
                        while (!stop) {
                            auto r = co_await lock.co_lock_shared(lease(10'000ms));
                            ++reads;
                            co_await sleep_for(40ms);
                            co_await r.release();
                        }
                        ++readers_done;
                    },
                    asio::detached);
            // The readers come and go, overlapping.
            REQUIRE(co_await eventually([&] { return reads >= 8; }, 3000ms));
            auto const asked_at = steady::now();
            auto w = co_await rb.co_lock(lease(10'000ms));
            CHECK(ms_since(asked_at) < 1000);
            CHECK(w.owns());
            stop = true;
            CHECK(co_await w.release());
            co_await eventually([&] { return readers_done >= 4; }, 3000ms, 10ms);
            CHECK(readers_done == 4);
        });
}

TEST_CASE("rw_lock: co_downgrade turns the writer into a reader with no gap: the readers queued "
          "behind get in, a queued writer still waits, the lease is renewed on; an upgrade is "
          "refused") {
    run_lock_test<two_lockers>(
        "rw-downgrade",
        [](redis::connection&, redis::connection&, redis::connection& probe, locker& a, locker& b,
           std::string const& name) -> asio::awaitable<void> {
            auto ex = co_await asio::this_coro::executor;
            rw_lock ra{a, name};
            rw_lock rb{b, name};
            auto w = co_await ra.co_lock(lease(600ms));
            auto const fence = w.fence();
            call_run<read_guard> reader;
            start_call(
                ex, [&] { return rb.co_lock_shared(lease(10'000ms)); }, reader);
            CHECK(co_await exists_becomes(probe, rw_key(name) + ":q", 1) == 1);
            call_run<write_guard> writer;
            start_call(
                ex, [&] { return rb.co_lock(lease(10'000ms)); }, writer);
            co_await sleep_for(100ms);

            auto const token = w.token();
            auto r = co_await w.co_downgrade();
            CHECK_FALSE(w.owns());
            CHECK(w.fence() == 0);
            CHECK(r.owns());
            CHECK(r.fence() == fence);
            CHECK(r.token() == token); // the same lease
            CHECK(co_await finishes(reader.done, 1000ms));
            CHECK(reader.got->fence() == fence);
            CHECK_FALSE(writer.done);
            CHECK((co_await failure_of(w.co_downgrade())).code == error::not_held);

            // Past the 600 ms lease: renewed on as a reader's.
            CHECK(co_await stays([&] { return r.owns() && !writer.done; }, 900ms));
            CHECK(r.owns());
            CHECK_FALSE(writer.done);
            static_assert(!upgradable<read_guard>); // no upgrade: a call does not compile

            CHECK(co_await r.release());
            CHECK(co_await reader.got->release());
            CHECK(co_await finishes(writer.done, 2000ms));
            CHECK(writer.got->fence() > fence);
            CHECK(co_await writer.got->release());
        });
}

TEST_CASE("rw_lock: a downgrade whose reply is not seen leaves the write guard claiming no write "
          "lock, while the server may have let readers in; a renewal finds which it holds") {
    run_lock_test<two_lockers>(
        "rw-downgrade-unknown",
        [](redis::connection&, redis::connection&, redis::connection& probe, locker& a, locker& b,
           std::string const& name) -> asio::awaitable<void> {
            rw_lock ra{a, name};
            rw_lock rb{b, name};
            auto opt = lease(30'000ms);
            opt.renew_interval = 300ms;
            {
                // The downgrade script loaded: the paused request below then runs as sent.
                auto warm = co_await ra.co_lock(opt);
                CHECK(co_await (co_await warm.co_downgrade()).release());
            }
            auto w = co_await ra.co_lock(opt);
            REQUIRE(w.owns());
            // Writes wait at the server past the downgrade's 5 s deadline, then run.
            co_await probe.co_exec(command("CLIENT", "PAUSE", "6500", "WRITE"));
            auto const failed = co_await failure_of(w.co_downgrade());
            CHECK(failed.code == colock::error::timeout);
            CHECK(failed.what.find("not known") != std::string::npos);
            // The guard says what it can be sure of: not the writer, but a lease it holds.
            CHECK_FALSE(w.owns());
            CHECK(w.holds_lease());
            // The pause ends and the downgrade applies: another process reads beside it.
            REQUIRE(co_await eventually(
                [&]() -> asio::awaitable<bool> {
                    co_return co_await integer(probe, command("HLEN", rw_key(name) + ":hw")) == 0;
                },
                4000ms, 10ms));
            auto reader = co_await rb.co_try_lock_shared(lease(5000ms));
            REQUIRE(reader.has_value());
            CHECK_FALSE(w.owns());
            // A renewal has asked the weight meanwhile; a second downgrade makes it a reader's
            // guard, on the same lease.
            co_await sleep_for(700ms);
            auto const fence = w.fence();
            auto r = co_await w.co_downgrade();
            CHECK(r.owns());
            CHECK(r.fence() == fence);
            CHECK(co_await reader->release());
            CHECK(co_await r.release());
            CHECK(co_await integer(probe, command("EXISTS", rw_key(name) + ":h")) == 0);

            // The other outcome: the paused request is answered "Function not found" (or
            // NOSCRIPT) once the pause ends (the library flushed meanwhile), so the downgrade
            // never happened. The guard claims no write lock until a renewal finds the holding
            // still a writer's.
            auto w2 = co_await ra.co_lock(opt);
            co_await probe.co_exec(command("FUNCTION", "FLUSH"));
            co_await probe.co_exec(command("SCRIPT", "FLUSH"));
            co_await probe.co_exec(command("CLIENT", "PAUSE", "6500", "WRITE"));
            CHECK((co_await failure_of(w2.co_downgrade())).code == colock::error::timeout);
            CHECK_FALSE(w2.owns());
            CHECK(w2.holds_lease()); // the lease itself is held: whose, the renewal will say
            CHECK(co_await eventually([&] { return w2.owns(); }, 4000ms, 10ms));
            CHECK(co_await integer(probe, command("HLEN", rw_key(name) + ":hw")) == 1);
            CHECK_FALSE((co_await rb.co_try_lock_shared()).has_value());
            CHECK(co_await w2.release());
        });
}

TEST_CASE("rw_lock: 3 lockers x 6 coroutines, readers and writers mixed, never a writer beside "
          "anyone else, and every coroutine gets its turns") {
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        auto const name = unique_key("rw-load");
        lockers_with<rw_lock> locks(ctx, shared_server().config(), 3,
                                    [&](locker& l) { return std::make_unique<rw_lock>(l, name); });
        int readers = 0, writers = 0, violations = 0, most_readers = 0, failed = 0;
        std::int64_t last_write_fence = 0;
        std::vector<int> turns(18, 0);
        auto const end = steady::now() + 1500ms;
        failed += co_await run_side_by_side(ctx, 18, [&](int w) -> asio::awaitable<void> {
            auto& lock = locks[w];
            bool const writes = w % 3 == 0;
            while (steady::now() < end) {
                if (writes) {
                    auto g = co_await lock.co_lock(lease(5000ms));
                    if (++writers > 1 || readers > 0)
                        ++violations;
                    if (g.fence() <= last_write_fence)
                        ++violations;
                    last_write_fence = g.fence();
                    ++turns[w];
                    co_await sleep_for(2ms);
                    --writers;
                    if (!co_await g.release())
                        ++failed;
                } else {
                    auto g = co_await lock.co_lock_shared(lease(5000ms));
                    if (writers > 0)
                        ++violations;
                    most_readers = std::max(most_readers, ++readers);
                    ++turns[w];
                    co_await sleep_for(2ms);
                    --readers;
                    if (!co_await g.release())
                        ++failed;
                }
            }
        });
        CHECK(failed == 0);
        CHECK(violations == 0);
        CHECK(most_readers > 1);
        auto const [least, largest] = std::minmax_element(turns.begin(), turns.end());
        CHECK(*least > 0);
        MESSAGE("turns per coroutine: " << *least << " to " << *largest
                                        << "; readers at once: " << most_readers);
        locks.close();
    });
}

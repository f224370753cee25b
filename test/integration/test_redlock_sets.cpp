// Lock sets (co_lock_all) over Redlock, against 3 and 5 real independent redis-servers: every
// name on a majority with the largest fence its primaries gave, an overlapping set served
// after, a try that leaves nothing, sets in any order under contention, and the fence a release
// stores on every primary.
#include <colock/locker.hpp>

#include "redlock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/primary_set.hpp>
#include <colock_test/redis_server.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

using namespace colock;
using namespace colock::test;
using values = std::vector<std::optional<std::string>>;

TEST_CASE("redlock: a lock set holds every name on a majority, each name's fence the largest its "
          "primaries gave; an overlapping set waits and is granted after; a try leaves nothing; "
          "sets named in any order under contention never overlap, on 3 and on 5") {
    on_3_and_5_primaries([&](std::size_t n, std::vector<redis_server*> const& servers) {
        run_redlock_test(
            configs_of(servers), "redlock-set",
            [&](primary_connections& conns_a, primary_connections& conns_b,
                primary_connections& probe, locker& a, locker& b,
                std::string const& name) -> asio::awaitable<void> {
                co_await conns_a.connect_all();
                co_await conns_b.connect_all();
                auto const n1 = name + "-1", n2 = name + "-2", n3 = name + "-3";
                auto const majority = n / 2 + 1;
                auto set = co_await a.co_lock_all(strings(n2, n1), lease(10'000ms));
                CHECK(set.owns());
                for (auto const& one : strings(n1, n2)) {
                    INFO("name ", one);
                    auto const v = co_await values_on(probe, lock_key(one));
                    CHECK(count_held(v, set.token()) >= majority);
                    // One a primary gave: the largest of the majority that decided (a grant
                    // after the decision may be larger).
                    bool from_a_primary = false;
                    for (auto const& value : v)
                        if (auto const r = parse_lock_record(value); r.kind == 'H')
                            from_a_primary = from_a_primary || r.fence == set.fence(one);
                    CHECK(from_a_primary);
                }
                // A try that finds one name held takes nothing, on any primary.
                CHECK_FALSE((co_await b.co_try_lock_all(strings(n3, n1))).has_value());
                auto const n3_left = co_await values_become(
                    probe, lock_key(n3), [](values const& v) { return count_held(v) == 0; });
                CHECK(count_held(n3_left) == 0);
                std::optional<multi_lock_guard> next;
                asio::co_spawn(
                    co_await asio::this_coro::executor,
                    [&]() -> asio::awaitable<void> {
                        next.emplace(co_await b.co_lock_all(strings(n3, n2), lease(10'000ms)));
                    },
                    asio::detached);
                CHECK(co_await stays([&] { return !next.has_value(); }, 200ms));
                CHECK(co_await set.release());
                REQUIRE(co_await eventually([&] { return next.has_value(); }));
                CHECK(next->fence(n2) > set.fence(n2));
                CHECK(co_await next->release());

                // Two lockers x 4 coroutines, sets of 2 of 4 names in any order.
                std::vector<std::string> pool;
                for (int i = 0; i < 4; ++i)
                    pool.push_back(name + "-mix-" + std::to_string(i));
                std::map<std::string, int> holders;
                int overlaps = 0, failed = 0, finished = 0;
                auto ex = co_await asio::this_coro::executor;
                for (int w = 0; w < 8; ++w)
                    asio::co_spawn(
                        ex,
                        [&, w]() -> asio::awaitable<void> {
                            auto& locks = w % 2 == 0 ? a : b;
                            for (int round = 0; round < 5; ++round) {
                                auto const first = static_cast<std::size_t>(w + round) % 4;
                                auto const second =
                                    (first + 1 + static_cast<std::size_t>(w % 3)) % 4;
                                auto g = co_await locks.co_lock_all(
                                    strings(pool[second], pool[first]),
                                    waiting_up_to(lease(10'000ms), 30'000ms));
                                for (auto const& one : g.names())
                                    if (holders[one]++ != 0)
                                        ++overlaps;
                                co_await sleep_for(2ms);
                                for (auto const& one : g.names())
                                    --holders[one];
                                CHECK(co_await g.release());
                            }
                            ++finished;
                        },
                        count_failure(failed, finished));
                REQUIRE(co_await eventually([&] { return finished == 8; }, 60'000ms));
                CHECK(failed == 0);
                CHECK(overlaps == 0);
                CHECK(keys_without_ttl(servers, "colock:{" + name + "*").empty());
            },
            120s);
    });
}

TEST_CASE("redlock: a lock set's release stores the lease's fence on every primary, not what "
          "each gave: the next holder's fence is larger even when the primary that gave the "
          "largest is not in its majority") {
    auto const servers = shared_primaries(3);
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        primary_connections conns_a{ctx.get_executor(), configs_of(servers)};
        primary_connections conns_b{ctx.get_executor(), configs_of(servers)};
        primary_connections probe{ctx.get_executor(), configs_of(servers)};
        locker a{conns_a.primaries()};
        locker b{conns_b.primaries()};
        co_await probe.connect_all();
        // Connected and the scripts loaded everywhere, so a pause below holds one EVALSHA.
        auto warm = co_await a.co_lock_all(strings(unique_key("redlock-warm-a")), lease(5000ms));
        co_await warm.release();
        auto warm_b = co_await b.co_lock_all(strings(unique_key("redlock-warm-b")), lease(5000ms));
        co_await warm_b.release();
        std::string const name = unique_key("redlock-set-fence");
        std::string const other = name + "-other";
        std::string const key = lock_key(name);
        // Each primary has given the name a different fence before: 1000, 2000, 3000.
        for (std::size_t i = 0; i < 3; ++i)
            servers[i]->cli(
                strings("SET", key, "F " + std::to_string(1000 * (i + 1)), "PX", "60000"));

        // The first primary's writes held: the lease is decided by the other two, the largest
        // fence the third's.
        servers[0]->cli(strings("CLIENT", "PAUSE", "500", "WRITE"));
        auto set = co_await a.co_lock_all(strings(name, other), lease(10'000ms));
        CHECK(set.fence(name) == 3001);
        auto const joined = co_await values_become(
            probe, key, [&](values const& v) { return count_held(v, set.token()) == 3; });
        REQUIRE(count_held(joined, set.token()) == 3); // the first's late grant joined the lease
        CHECK(parse_lock_record(joined[0]).fence == 1001);

        // Now the third's writes held: the release reaches the other two, and the next lease is
        // decided by them. Each stored the lease's fence, not the one it gave.
        servers[2]->cli(strings("CLIENT", "PAUSE", "1000", "WRITE"));
        CHECK(co_await set.release());
        auto next = co_await b.co_lock_all(strings(other, name), lease(10'000ms));
        CHECK(next.fence(name) > set.fence(name));
        CHECK(next.fence(other) > set.fence(other));
        CHECK(co_await next.release());
        auto const after =
            co_await values_become(probe, key, [](values const& v) { return count_held(v) == 0; });
        CHECK(count_held(after) == 0);
        CHECK(keys_without_ttl(servers, "colock:{" + name + "*").empty());
        conns_a.close();
        conns_b.close();
        probe.close();
    });
}

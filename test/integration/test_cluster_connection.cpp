// The connection and the locker on a real Redis Cluster (3 primaries, 3 replicas) that the
// fixture starts: routing by slot, MOVED after a migration, ASK during one, cross-slot refusals,
// locks on names over every primary, fenced resources on each, and a primary's failover.
#include <colock/election.hpp>
#include <colock/fenced_resource.hpp>
#include <colock/functions_library.hpp>
#include <colock/locker.hpp>
#include <colock/redis/connection.hpp>
#include <colock/rw_lock.hpp>
#include <colock/semaphore.hpp>

#include "election_fixture.hpp"
#include "lock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/cluster_set.hpp>

#include "redis/cluster_slots.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include <doctest/doctest.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>

using namespace colock;
using namespace colock::test;
using colock::redis::detail::hash_slot;

namespace {

redis::config cluster_config(cluster_set const& cluster) {
    return with_fast_timeouts(redis::config::from_url(cluster.url()));
}

// A key of another slot than `key`'s.
std::string other_slot_key(std::string const& key) {
    for (int i = 0;; ++i) {
        auto k = fmt::format("other-{}", i);
        if (hash_slot(k) != hash_slot(key))
            return k;
    }
}

// A lock name whose slot another primary than `owner` serves.
std::string name_elsewhere(cluster_set& cluster, std::uint16_t owner, std::string_view stem) {
    for (int i = 0;; ++i) {
        auto candidate = fmt::format("{}-{}", stem, i);
        if (cluster.owner_of(hash_slot(lock_key(candidate))) != owner)
            return candidate;
    }
}

// After a failover: waits (within `limit`) for `held` to be reported lost, lets it go (its
// release reaches the new primary, where the lease may have been replicated), then takes the
// name again on `new_primary` with a higher fence. Returns how long the loss took, in ms.
asio::awaitable<long long> lost_then_locked_again(locker& locks, lock_guard& held,
                                                  std::string const& name, cluster_set& cluster,
                                                  std::uint16_t new_primary,
                                                  std::chrono::milliseconds limit) {
    auto const fence = held.fence();
    auto const start = steady::now();
    co_await eventually([&] { return held.lost(); }, limit, 20ms);
    auto const took = ms_since(start);
    CHECK(held.lost());
    { auto const gone = std::move(held); }
    auto opt = lease(10s);
    opt.wait_timeout = 10s;
    auto again = co_await locks.co_lock(name, opt);
    CHECK(again.fence() > fence);
    CHECK_FALSE(lock_key_free(cluster.node_on(new_primary), lock_key(name)));
    co_await again.release();
    co_return took;
}

} // namespace

TEST_CASE("cluster connection: every request goes to its slot's primary; MOVED after a "
          "migration and ASK during one are followed; keys across slots are refused") {
    cluster_set cluster;
    // No node fails here: health checks at the default interval, so that a pause of a loaded
    // machine (200 ms of it sufficed under the sanitizers) does not drop a request in flight.
    auto cfg = cluster_config(cluster);
    cfg.health_check_interval = redis::config{}.health_check_interval;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), cfg};
        co_await conn.co_connect();
        CHECK(conn.is_connected());

        // Keys over every primary: each lands on the node that owns its slot.
        std::set<std::uint16_t> owners;
        for (int i = 0; i < 60; ++i) {
            auto const key = fmt::format("k{}", i);
            co_await conn.co_exec(command("SET", key, i));
            auto const owner = cluster.owner_of(hash_slot(key));
            owners.insert(owner);
            CHECK(cluster.node_on(owner).cli({"GET", key}) == std::to_string(i));
        }
        CHECK(owners.size() == 3);

        // A pipeline on one slot, with a keyless command in it.
        resp3::request pipeline;
        pipeline.push("SET", "{t}a", "1");
        pipeline.push("INCR", "{t}a");
        pipeline.push("PING");
        auto replies = co_await conn.co_exec(std::move(pipeline));
        REQUIRE(replies.size() == 3);
        CHECK(replies[1].as_integer() == 2);
        CHECK(replies[2].text == "PONG");

        // Keys across slots: refused before anything is written, naming both.
        auto const other = other_slot_key("k1");
        auto [ec, resp] =
            co_await conn.async_exec(command("MSET", "k1", "x", other, "y"), as_tuple);
        CHECK(ec == redis::error::cross_slot);
        REQUIRE(resp.size() == 1);
        CHECK(resp[0].text.find("k1") != std::string::npos);
        CHECK(resp[0].text.find(other) != std::string::npos);
        CHECK(cluster.node_on(cluster.owner_of(hash_slot("k1"))).cli({"GET", "k1"}) == "1");

        // A request and a subscribe whose handlers are bound to a thread pool's strand count as
        // work there: the pool, with nothing else to do, is joined only after they ran.
        {
            asio::thread_pool pool{2};
            auto strand = asio::make_strand(pool);
            std::atomic<int> ran{0};
            conn.async_exec(command("BLPOP", "pool-key", "0.3"),
                            asio::bind_executor(strand, [&](error_code e, redis::response r) {
                                CHECK_FALSE(e);
                                CHECK(r.at(0).is_null());
                                ++ran;
                            }));
            conn.async_subscribe(colock::test::strings("pool-channel"),
                                 asio::bind_executor(strand, [&](error_code e) {
                                     CHECK_FALSE(e);
                                     ++ran;
                                 }));
            std::atomic<bool> joined{false};
            std::thread joiner([&] {
                pool.join();
                joined = true;
            });
            CHECK(co_await eventually([&] { return joined.load(); }, 5s));
            joiner.join();
            CHECK(ran == 2);
        }

        // The slot of k7 moves: the connection's map is stale, MOVED sends it on.
        auto const slot = hash_slot("k7");
        auto const from = cluster.owner_of(slot);
        auto primaries = cluster.primary_ports();
        auto const to = primaries[0] == from ? primaries[1] : primaries[0];
        co_await off_thread([&] { cluster.migrate_slot(slot, to); });
        auto got = co_await conn.co_exec(command("INCR", "k7"));
        CHECK(got.at(0).as_integer() == 8);
        CHECK(cluster.node_on(to).cli({"GET", "k7"}) == "8");

        // Mid-migration (MIGRATING on the owner, IMPORTING on the target): a key not yet on
        // the owner is answered by ASK, and the connection asks the target.
        auto const key = std::string("asked-key");
        auto const s2 = hash_slot(key);
        auto const owner = cluster.owner_of(s2);
        auto const target = primaries[0] == owner ? primaries[1] : primaries[0];
        auto const owner_id = cluster.node_on(owner).cli({"CLUSTER", "MYID"});
        auto const target_id = cluster.node_on(target).cli({"CLUSTER", "MYID"});
        auto const slot_text = std::to_string(s2);
        cluster.node_on(target).cli({"CLUSTER", "SETSLOT", slot_text, "IMPORTING", owner_id});
        cluster.node_on(owner).cli({"CLUSTER", "SETSLOT", slot_text, "MIGRATING", target_id});
        co_await conn.co_exec(command("SET", key, "there"));
        auto read = co_await conn.co_exec(command("GET", key));
        CHECK(read.at(0).as_string() == "there");
        // It was written on the target, under ASKING.
        CHECK(cluster.node_on(target).cli({"DBSIZE"}) != "0");
        for (auto const port : primaries)
            cluster.node_on(port).cli({"CLUSTER", "SETSLOT", slot_text, "NODE", target_id});
        cluster.wait_ok(10s);
        read = co_await conn.co_exec(command("GET", key));
        CHECK(read.at(0).as_string() == "there");

        // Closed, then used again: it reads the map again and is connected again.
        conn.close();
        CHECK(co_await eventually([&] { return !conn.is_connected(); }, 2s));
        read = co_await conn.co_exec(command("GET", key));
        CHECK(read.at(0).as_string() == "there");
        CHECK(co_await eventually([&] { return conn.is_connected(); }, 3s, 20ms));
        conn.close();
    });
}

TEST_CASE("cluster locker: locks on names over every primary, contention woken by messages, "
          "a slot migrated mid-run without a failed lock call") {
    cluster_set cluster;
    run_test(
        [&](asio::io_context& ctx) -> asio::awaitable<void> {
            redis::connection conn_a{ctx.get_executor(), cluster_config(cluster)};
            redis::connection conn_b{ctx.get_executor(), cluster_config(cluster)};
            locker a{conn_a};
            locker b{conn_b};

            // Connected, a try that does not wait (wait_timeout 0) makes its one attempt on
            // every primary: co_connect waits for the primaries' connections too, so that no
            // request has to wait for one (the wait deadline would stop it unsent). Before it
            // did, about half of these first tries failed with error::timeout.
            std::set<std::uint16_t> tried_on;
            for (int round = 0; round < 8; ++round) {
                redis::connection conn_c{ctx.get_executor(), cluster_config(cluster)};
                co_await conn_c.co_connect();
                locker c{conn_c};
                auto at_once = lease(10s);
                at_once.wait_timeout = 0ms;
                for (int i = 0; i < 3; ++i) {
                    auto const name = fmt::format("at-once-{}-{}", round, i);
                    tried_on.insert(cluster.owner_of(hash_slot(lock_key(name))));
                    auto const failed = co_await failure_of(c.co_try_lock(name, at_once));
                    CHECK_MESSAGE(!failed.code, name << ": " << failed.what);
                }
                conn_c.close();
            }
            CHECK(tried_on.size() == 3);

            // Names over every primary.
            std::set<std::uint16_t> owners;
            for (int i = 0; i < 24; ++i) {
                auto const name = fmt::format("spread-{}", i);
                auto guard = co_await a.co_lock(name, lease(10s));
                CHECK(guard.fence() > 0);
                auto const owner = cluster.owner_of(hash_slot(lock_key(name)));
                owners.insert(owner);
                CHECK_FALSE(lock_key_free(cluster.node_on(owner), lock_key(name)));
                CHECK_FALSE(co_await b.co_try_lock(name, lease(10s)));
                CHECK(co_await guard.release());
            }
            CHECK(owners.size() == 3);

            // Fenced resources on every primary: each batch is one script on its slot's node,
            // and a late write under an earlier fence is refused there.
            std::set<std::uint16_t> fenced_on;
            for (int i = 0; i < 12 && fenced_on.size() < 3; ++i) {
                auto const name = fmt::format("fenced-{}", i);
                auto const tag = "{" + name + "}";
                auto const slot = hash_slot(tag);
                fenced_resource res{conn_a, "res:" + tag + ":fence", {60s}};
                auto first = co_await a.co_lock(name, lease(10s));
                auto const early = first.fence();
                co_await res.co_write(first, fenced_writes{}.set("res:" + tag, "a", 60s));
                CHECK(co_await first.release());
                auto second = co_await b.co_lock(name, lease(10s));
                auto const w = co_await res.co_write(
                    second,
                    fenced_writes{}.set("res:" + tag, "b", 60s).incr_by("res:" + tag + ":n", 1));
                CHECK(w.previous_fence == early);
                auto const late = co_await failure_of(
                    res.co_write(name, early, fenced_writes{}.set("res:" + tag, "late", 60s)));
                CHECK(late.code == colock::error::stale_fence);
                auto const owner = cluster.owner_of(slot);
                CHECK(cluster.node_on(owner).cli({"GET", "res:" + tag}) == "b");
                fenced_on.insert(owner);
                CHECK(co_await second.release());
                cluster.node_on(owner).cli({"DEL", "res:" + tag + ":n"});
            }
            CHECK(fenced_on.size() == 3);

            // Lock sets on one slot each (names under one hash tag), on every primary: one
            // script there, a waiting set woken by the shard's message. A set over several
            // slots is refused, naming them.
            std::set<std::uint16_t> sets_on;
            for (int i = 0; i < 12 && sets_on.size() < 3; ++i) {
                auto const tag = fmt::format("{{set-{}}}", i);
                auto const x = tag + "x", y = tag + "y", z = tag + "z";
                auto held = co_await a.co_lock_all(strings(x, y), lease(10s));
                CHECK_FALSE(co_await b.co_try_lock(x, lease(10s)));
                std::optional<multi_lock_guard> next;
                asio::co_spawn(
                    ctx,
                    [&]() -> asio::awaitable<void> {
                        next.emplace(co_await b.co_lock_all(strings(z, y), lease(10s)));
                    },
                    asio::detached);
                auto const owner = cluster.owner_of(hash_slot(lock_key(x)));
                CHECK(co_await eventually([&] {
                    return cluster.node_on(owner).cli({"GET", lock_key(z)}).starts_with("R ");
                }));
                CHECK(co_await held.release());
                REQUIRE(co_await eventually([&] { return next.has_value(); }));
                CHECK(next->fence(y) > held.fence(y));
                CHECK(co_await next->release());
                sets_on.insert(owner);
            }
            CHECK(sets_on.size() == 3);
            // A set over three slots, one on each primary: a set per slot, taken in slot
            // order. Every name is held on its own node; another locker's set that overlaps it
            // in any order waits and is then granted; a try over the slots leaves nothing held.
            {
                std::vector<std::string> spread;
                std::set<std::uint16_t> spread_on;
                for (int i = 0; spread.size() < 3; ++i) {
                    auto const candidate = fmt::format("set-slot-{}", i);
                    if (spread_on.insert(cluster.owner_of(hash_slot(lock_key(candidate)))).second)
                        spread.push_back(candidate);
                }
                auto const extra = std::string("set-slot-extra");
                auto held = co_await a.co_lock_all(spread, lease(10s));
                REQUIRE(held.names().size() == 3);
                for (auto const& n : spread) {
                    auto const value = cluster.node_on(cluster.owner_of(hash_slot(lock_key(n))))
                                           .cli({"GET", lock_key(n)});
                    INFO("name ", n, ": ", value);
                    CHECK(value.starts_with("H " + std::to_string(held.fence(n)) + " "));
                }
                CHECK_FALSE(co_await b.co_try_lock_all(strings(extra, spread[2])));
                CHECK(co_await eventually([&] {
                    return lock_key_free(
                        cluster.node_on(cluster.owner_of(hash_slot(lock_key(extra)))),
                        lock_key(extra));
                }));
                std::optional<multi_lock_guard> next;
                asio::co_spawn(
                    ctx,
                    [&]() -> asio::awaitable<void> {
                        next.emplace(co_await b.co_lock_all(strings(spread[2], extra, spread[0]),
                                                            lease(10s)));
                    },
                    asio::detached);
                CHECK(co_await stays([&] { return !next.has_value(); }, 200ms));
                CHECK(co_await held.release());
                REQUIRE(co_await eventually([&] { return next.has_value(); }));
                CHECK(next->fence(spread[0]) > held.fence(spread[0]));
                // One slot's lease lost is the whole set's.
                auto const& node = cluster.node_on(cluster.owner_of(hash_slot(lock_key(extra))));
                node.cli({"DEL", lock_key(extra)});
                using namespace asio::experimental::awaitable_operators;
                auto const raced = co_await (next->wait_lost() || sleep_for(8s));
                CHECK(raced.index() == 0);
                CHECK(next->lost());
                CHECK_FALSE(co_await next->release());
            }
            // Overlapping sets over the three slots, named in any order by two lockers, four
            // coroutines each: never two holders of a name, and every call is granted.
            {
                std::vector<std::string> pool;
                for (int i = 0; i < 6; ++i)
                    pool.push_back(fmt::format("set-mix-{}", i));
                std::map<std::string, int> holders;
                int overlaps = 0, failed = 0, finished = 0;
                for (int w = 0; w < 8; ++w)
                    asio::co_spawn(
                        ctx,
                        [&, w]() -> asio::awaitable<void> {
                            auto& locks = w % 2 == 0 ? a : b;
                            for (int round = 0; round < 6; ++round) {
                                std::vector<std::string> want;
                                for (std::size_t k = 0; k < 3; ++k)
                                    want.push_back(pool[(static_cast<std::size_t>(w + round) +
                                                         k * static_cast<std::size_t>(1 + w % 3)) %
                                                        pool.size()]);
                                auto g = co_await locks.co_lock_all(
                                    want, waiting_up_to(lease(10s), 20'000ms));
                                for (auto const& n : g.names())
                                    if (holders[n]++ != 0)
                                        ++overlaps;
                                co_await sleep_for(2ms);
                                for (auto const& n : g.names())
                                    --holders[n];
                                CHECK(co_await g.release());
                            }
                            ++finished;
                        },
                        count_failure(failed, finished));
                REQUIRE(co_await eventually([&] { return finished == 8; }, 30s));
                CHECK(failed == 0);
                CHECK(overlaps == 0);
            }

            // Leases kept (lock_options::retain) on names over the primaries: taken again at
            // once, and given to the other locker as soon as it asks.
            auto shard_subscribed = [&](std::string const& name) {
                auto const& node = cluster.node_on(cluster.owner_of(hash_slot(lock_key(name))));
                return !node.cli({"PUBSUB", "SHARDCHANNELS", lock_key(name) + ":w:*"}).empty();
            };
            for (int i = 0; i < 6; ++i) {
                auto const name = fmt::format("kept-{}", i);
                auto keep = lease(10s);
                keep.retain = 20s;
                std::int64_t fence = 0;
                {
                    auto g = co_await a.co_lock(name, keep);
                    CHECK(co_await g.release());
                    auto again = co_await a.co_lock(name, keep); // the kept lease
                    fence = again.fence();
                }
                // a's SSUBSCRIBE for the name has reached its node.
                REQUIRE(co_await eventually([&] { return shard_subscribed(name); }, 5s));
                auto waits = lease(10s);
                waits.wait_timeout = 5s;
                auto const asked = std::chrono::steady_clock::now();
                auto g = co_await b.co_lock(name, waits);
                CHECK(std::chrono::steady_clock::now() - asked < 2s);
                CHECK(g.fence() > fence);
                CHECK(co_await g.release());
            }

            // Contention: 2 lockers x 6 coroutines on one name; the slot moves mid-run.
            std::string const name = "hot";
            int inside = 0;
            int overlaps = 0;
            int acquired = 0;
            int failures = 0;
            std::int64_t last_fence = 0;
            int fence_inversions = 0;
            int running = 0;
            auto worker = [&](locker& l) -> asio::awaitable<void> {
                ++running;
                for (int round = 0; round < 15; ++round) {
                    try {
                        auto opt = lease(5s);
                        opt.wait_timeout = 20s;
                        auto g = co_await l.co_lock(name, opt);
                        if (++inside > 1)
                            ++overlaps;
                        if (g.fence() <= last_fence)
                            ++fence_inversions;
                        last_fence = g.fence();
                        ++acquired;
                        co_await sleep_for(2ms);
                        --inside;
                        co_await g.release();
                    } catch (std::exception const& e) {
                        ++failures;
                        MESSAGE("lock call failed: " << e.what());
                    }
                }
                --running;
            };
            for (int i = 0; i < 6; ++i) {
                asio::co_spawn(ctx, worker(a), asio::detached);
                asio::co_spawn(ctx, worker(b), asio::detached);
            }
            co_await eventually([&] { return acquired > 0; }, 5s); // the run is under way
            auto const slot = hash_slot(lock_key(name));
            auto const from = cluster.owner_of(slot);
            auto primaries = cluster.primary_ports();
            auto const to = primaries[0] == from ? primaries[1] : primaries[0];
            co_await off_thread([&] { cluster.migrate_slot(slot, to); });
            co_await eventually([&] { return running == 0; }, 60s, 10ms);
            CHECK(overlaps == 0);
            CHECK(fence_inversions == 0);
            CHECK(failures == 0);
            CHECK(acquired == 12 * 15);
            CHECK(lock_key_free(cluster.node_on(to), lock_key(name)));

            // Wake-ups went by sharded pub/sub: SPUBLISH inside the scripts, SSUBSCRIBE, and
            // not one PUBLISH, which every node of a cluster would repeat.
            std::int64_t spublish = 0;
            std::int64_t ssubscribe = 0;
            std::int64_t publish = 0;
            for (auto const port : cluster.primary_ports()) {
                auto const info = cluster.node_on(port).cli({"INFO", "commandstats"});
                spublish += command_calls(info, "spublish");
                ssubscribe += command_calls(info, "ssubscribe");
                publish += command_calls(info, "publish");
            }
            CHECK(spublish > 0);
            CHECK(ssubscribe > 0);
            CHECK(publish == 0);

            // The scripts ran as Redis Functions on every primary, each of which was given the
            // library (the Cluster's variant) by the first call it took, and passed it on to its
            // replica; nothing went by EVAL or EVALSHA.
            auto const library = functions_library_for(cluster_config(cluster)).name;
            for (auto const port : cluster.primary_ports()) {
                auto& primary = cluster.node_on(port);
                auto const info = primary.cli({"INFO", "commandstats"});
                CHECK(command_calls(info, "fcall") > 0);
                CHECK(command_calls(info, "function|load") > 0);
                CHECK(command_calls(info, "evalsha") == 0);
                CHECK(command_calls(info, "eval") == 0);
                CHECK_FALSE(primary.cli({"FUNCTION", "LIST", "LIBRARYNAME", library}).empty());
                auto& replica = cluster.node_on(cluster.replica_of(port));
                CHECK(co_await eventually(
                    [&] {
                        return !replica.cli({"FUNCTION", "LIST", "LIBRARYNAME", library}).empty();
                    },
                    5s, 20ms));
            }

            // A waiter's shard channel follows its slot: the server drops it (sunsubscribe) and
            // the connection subscribes again on the new owner; the waiter is woken there.
            std::string const moving = "moving";
            auto held = co_await a.co_lock(moving, lease(20s));
            std::optional<lock_guard> woken;
            auto wait_opt = lease(20s);
            wait_opt.wait_timeout = 15s;
            asio::co_spawn(
                ctx,
                [&]() -> asio::awaitable<void> {
                    woken.emplace(co_await b.co_lock(moving, wait_opt));
                },
                asio::detached);
            auto const mslot = hash_slot(lock_key(moving));
            auto const pattern = lock_key(moving) + ":w:*";
            auto const mfrom = cluster.owner_of(mslot);
            auto const mto = primaries[0] == mfrom ? primaries[1] : primaries[0];
            auto subscribed_on = [&](std::uint16_t port) {
                return !cluster.node_on(port).cli({"PUBSUB", "SHARDCHANNELS", pattern}).empty();
            };
            REQUIRE(co_await eventually([&] { return subscribed_on(mfrom); }, 5s, 20ms));
            co_await off_thread([&] { cluster.migrate_slot(mslot, mto); });
            CHECK(co_await eventually([&] { return subscribed_on(mto); }, 5s, 20ms));
            CHECK_FALSE(woken);
            co_await held.release();
            REQUIRE(co_await eventually([&] { return woken.has_value(); }, 10s, 10ms));
            CHECK(woken->fence() > held.fence());
            co_await woken->release();

            // An election: its keys on the slot of its name, its changes by sharded pub/sub.
            election ea{a, "sched"};
            election eb{b, "sched"};
            auto watch = co_await watch_from_nobody(eb);
            auto lead_a = co_await ea.co_campaign("a", lease(10s));
            auto c = co_await next_change(watch);
            CHECK(c.value == "a");
            CHECK(c.term == lead_a.term());
            auto& node = cluster.node_on(cluster.owner_of(hash_slot(election_key("sched"))));
            CHECK(holds_key(node, election_key("sched") + ":e"));
            campaign_run b_run;
            start_campaign(ctx.get_executor(), eb, "b", lease(10s), b_run);
            auto& lead_b = b_run.lead;
            CHECK(co_await stays([&] { return !lead_b; }, 100ms)); // b waits behind a
            CHECK(co_await lead_a.release());
            c = co_await next_change(watch);
            CHECK(c.value == "b");
            // The watch may hear of it before the campaign returns.
            REQUIRE(co_await eventually([&] { return lead_b.has_value(); }));
            CHECK(c.term == lead_b->term());
            CHECK(c.term > lead_a.term());
            auto const who = co_await ea.co_leader();
            REQUIRE(who);
            CHECK(who->value == "b");
            CHECK(co_await lead_b->release());
            CHECK_FALSE((co_await next_change(watch)).leading);
            CHECK_FALSE(holds_key(node, election_key("sched") + ":e"));

            // A semaphore: its keys on the slot of its name, a waiter woken by sharded pub/sub.
            semaphore sa{a, "exports", 2};
            semaphore sb{b, "exports", 2};
            auto p1 = co_await sa.co_acquire(2, lease(10s));
            std::string const sem_key = "colock:semaphore:{exports}";
            auto& sem_node = cluster.node_on(cluster.owner_of(hash_slot(sem_key)));
            CHECK(holds_key(sem_node, sem_key + ":h"));
            CHECK_FALSE(co_await sb.co_try_acquire());
            std::optional<permit> p2;
            asio::co_spawn(
                ctx,
                [&]() -> asio::awaitable<void> { p2.emplace(co_await sb.co_acquire(lease(10s))); },
                asio::detached);
            co_await eventually([&] { return holds_key(sem_node, sem_key + ":q"); });
            // Past the waiter's polls before its subscription.
            CHECK(co_await stays([&] { return !p2; }, 1200ms));
            auto const released_at = steady::now();
            CHECK(co_await p1.release());
            REQUIRE(co_await eventually([&] { return p2.has_value(); }, 3s, 2ms));
            CHECK(ms_since(released_at) < 500); // woken by the message, not by its poll
            CHECK(p2->fence() > p1.fence());
            CHECK(co_await p2->release());
            CHECK_FALSE(holds_key(sem_node, sem_key + ":h"));

            // A read-write lock: readers share, a writer excludes, a downgrade lets a reader of
            // the other locker in, by sharded pub/sub.
            rw_lock rwa{a, "catalog"};
            rw_lock rwb{b, "catalog"};
            auto w = co_await rwa.co_lock(lease(10s));
            CHECK_FALSE(co_await rwb.co_try_lock_shared());
            std::optional<read_guard> reader;
            asio::co_spawn(
                ctx,
                [&]() -> asio::awaitable<void> {
                    reader.emplace(co_await rwb.co_lock_shared(lease(10s)));
                },
                asio::detached);
            // Past the reader's polls before its subscription.
            CHECK(co_await stays([&] { return !reader; }, 1200ms));
            auto const downgraded_at = steady::now();
            auto r = co_await w.co_downgrade();
            REQUIRE(co_await eventually([&] { return reader.has_value(); }, 3s, 2ms));
            CHECK(ms_since(downgraded_at) < 500);
            CHECK(reader->fence() == r.fence());
            CHECK(co_await r.release());
            CHECK(co_await reader->release());
            auto w2 = co_await rwb.co_lock(lease(10s));
            CHECK(w2.fence() > r.fence());
            CHECK(co_await w2.release());
            conn_a.close();
            conn_b.close();
        },
        120s);
}

TEST_CASE("cluster locker: a primary's failover loses the guards held there, and the lock is "
          "taken again on the promoted replica with a higher fence") {
    cluster_set cluster;
    run_test(
        [&](asio::io_context& ctx) -> asio::awaitable<void> {
            redis::connection conn{ctx.get_executor(), cluster_config(cluster)};
            locker locks{conn};
            std::string const name = "failing-over";
            // Every primary has one replica: WAIT 1 is acknowledged, WAIT 2 is not, and the
            // lock is released again.
            auto replicated = lease(30s);
            replicated.wait_replicas = 2;
            replicated.replicas_timeout = 200ms;
            try {
                co_await locks.co_try_lock(name, replicated);
                FAIL("two replicas acknowledged where there is one");
            } catch (boost::system::system_error const& e) {
                CHECK(e.code() == error::replicas_not_acknowledged);
                CHECK(std::string(e.what()).find("1 of 2 replicas") != std::string::npos);
            }
            auto const owner_port = cluster.owner_of(hash_slot(lock_key(name)));
            CHECK(lock_key_free(cluster.node_on(owner_port), lock_key(name)));
            replicated.wait_replicas = 1;
            auto held = co_await locks.co_lock(name, replicated);
            auto const owner = cluster.owner_of(hash_slot(lock_key(name)));
            auto const replica = cluster.replica_of(owner);
            // A guard on another primary, which the failover does not concern.
            auto bystander =
                co_await locks.co_lock(name_elsewhere(cluster, owner, "bystander"), lease(30s));
            auto const changes = conn.server_change_count();
            co_await off_thread([&] { cluster.failover(replica, 20s); });
            // The guard is lost within a few health-check rounds. The lease did reach the
            // replica (WAIT 1): it keeps the name until its guard goes.
            co_await lost_then_locked_again(locks, held, name, cluster, replica, 10s);
            CHECK(conn.server_change_count() > changes);
            CHECK_FALSE(bystander.lost());
            CHECK(co_await bystander.release());
            conn.close();
        },
        90s);
}

TEST_CASE("cluster locker: a killed primary: its guard is lost once the replica takes over, and "
          "the lock is taken again there with a higher fence; the other primaries' locks work "
          "throughout") {
    cluster_set cluster;
    run_with_locker(
        cluster_config(cluster),
        [&](locker& locks) -> asio::awaitable<void> {
            std::string const name = "killed-primary";
            auto held = co_await locks.co_lock(name, lease(30s));
            auto const owner = cluster.owner_of(hash_slot(lock_key(name)));
            auto const replica = cluster.replica_of(owner);
            // A name on another primary, to lock while the owner is down, and a guard held there
            // throughout.
            auto const other = name_elsewhere(cluster, owner, "elsewhere");
            auto bystander =
                co_await locks.co_lock(name_elsewhere(cluster, owner, "bystander"), lease(30s));
            cluster.node_on(owner).kill();
            {
                auto g = co_await locks.co_lock(other, lease(5s));
                CHECK(g.owns());
                co_await g.release();
            }
            // The replica is promoted after the node timeout (1 s) and an election; the
            // connection finds the slot there and reports the guard lost.
            auto const took =
                co_await lost_then_locked_again(locks, held, name, cluster, replica, 20s);
            MESSAGE("guard lost " << took << " ms after the kill");
            CHECK(cluster.node_on(replica).cli({"ROLE"}).starts_with("master"));
            CHECK_FALSE(bystander.lost());
            CHECK(co_await bystander.release());
        },
        90s);
}

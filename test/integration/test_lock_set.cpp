// The lock on several names (locker::co_lock_all) against a real server: all of the names or
// none, a fence per name on the name's own sequence, shared with co_lock of each name; a waiting
// set keeps the names it may take and is granted once the holders before it are gone, ahead of
// a single-name waiter that came after; overlapping sets named in any order by several lockers
// never overlap and never deadlock; cancellation and co_try_lock_all leave nothing held or
// queued; a lost name ends the whole set; bad input is refused at the call.
#include "lock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/failures.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <unistd.h>

#include <array>
#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace colock;
using namespace colock::test;
using namespace boost::asio::experimental::awaitable_operators;

namespace {

// What is left of the names' keys: each key of theirs (the lock, its queue, its deadlines) has
// an expiry, and the queues hold nobody.
asio::awaitable<void> check_keys_left(redis::connection& probe,
                                      std::vector<std::string> const& names) {
    for (auto const& n : names) {
        auto const key = lock_key(n);
        for (auto const& k : strings(key, key + ":q", key + ":qd")) {
            auto const pttl = co_await integer(probe, command("PTTL", k));
            INFO("key ", k);
            CHECK(pttl != -1); // -2: gone, else an expiry
        }
        CHECK(co_await integer(probe, command("LLEN", key + ":q")) == 0);
        CHECK(co_await integer(probe, command("HLEN", key + ":qd")) == 0);
    }
}

} // namespace

TEST_CASE("lock set: all or none, a fence per name on the name's own sequence, and co_lock of "
          "a held name sees it held") {
    run_lock_test<two_lockers>(
        "set-basic",
        [](redis::connection&, redis::connection&, redis::connection& probe, locker& a, locker& b,
           std::string const& name) -> asio::awaitable<void> {
            auto const n1 = name + "-1", n2 = name + "-2", n3 = name + "-3", free = name + "-x";
            // A name the set is asked for twice counts once; the guard lists them sorted.
            auto set = co_await a.co_lock_all(strings(n3, n1, n2, n1), lease(10'000ms));
            REQUIRE(set.owns());
            CHECK(set.names() == strings(n1, n2, n3));
            REQUIRE(set.fences().size() == 3);
            for (auto const& n : set.names()) {
                auto const r = co_await read_lock(probe, n);
                INFO("name ", n);
                CHECK(r.kind == 'H');
                CHECK(r.token == set.token());
                CHECK(r.fence == set.fence(n));
                CHECK(r.fence > 0);
            }
            CHECK((co_await failure_of(asio::co_spawn(
                       co_await asio::this_coro::executor,
                       [&]() -> asio::awaitable<void> {
                           (void)set.fence(free);
                           co_return;
                       },
                       asio::use_awaitable)))
                      .code == error::invalid_argument);
            // Each name is the lock's: co_try_lock of one finds it held.
            CHECK_FALSE((co_await b.co_try_lock(n2)).has_value());
            // All or none: a set with one held name takes nothing, and leaves nothing.
            CHECK_FALSE((co_await b.co_try_lock_all(strings(free, n2))).has_value());
            CHECK(co_await lock_free(probe, free));
            auto const fence1 = set.fence(n1);
            CHECK(co_await set.release());
            CHECK_FALSE(set.owns());
            // The next holder of a name, through co_lock, gets a higher fence.
            auto one = co_await b.co_lock(n1, lease(10'000ms));
            CHECK(one.fence() > fence1);
            co_await one.release();
            // And the next set's is higher still.
            auto again = co_await b.co_lock_all(strings(n1, n2), lease(10'000ms));
            CHECK(again.fence(n1) > one.fence());
            co_await again.release();
            co_await check_keys_left(probe, strings(n1, n2, n3, free));
        });
}

TEST_CASE("lock set: a waiting set keeps the names it may take, is granted when the holder in "
          "its way lets go, and goes before a single-name waiter that came after it") {
    run_lock_test<three_lockers>(
        "set-wait",
        [](redis::connection&, redis::connection&, redis::connection&, redis::connection& probe,
           locker& a, locker& b, locker& c, std::string const& name) -> asio::awaitable<void> {
            auto const n1 = name + "-1", n2 = name + "-2";
            auto ex = co_await asio::this_coro::executor;
            auto holder = co_await a.co_lock(n2, lease(10'000ms));
            std::vector<std::string> order;
            std::optional<multi_lock_guard> set;
            asio::co_spawn(
                ex,
                [&]() -> asio::awaitable<void> {
                    set.emplace(co_await b.co_lock_all(strings(n1, n2), lease(10'000ms)));
                    order.push_back("set");
                },
                asio::detached);
            // n1 is free: the set reserves it ("R <fence> <its entry>") while it waits for n2.
            CHECK(co_await eventually([&]() -> asio::awaitable<bool> {
                auto const r = co_await read_lock(probe, n1);
                co_return r.kind == 'R' && r.owner.starts_with(b.id() + "/");
            }));
            // Nobody else takes a reserved name.
            CHECK_FALSE((co_await c.co_try_lock(n1)).has_value());
            std::optional<lock_guard> single;
            asio::co_spawn(
                ex,
                [&]() -> asio::awaitable<void> {
                    single.emplace(co_await c.co_lock(n1, lease(10'000ms)));
                    order.push_back("single");
                },
                asio::detached);
            CHECK(co_await eventually([&]() -> asio::awaitable<bool> {
                co_return co_await integer(probe, command("LLEN", lock_key(n1) + ":q")) == 1;
            }));
            auto const let_go = steady::now();
            co_await holder.release();
            // Told by the hand-off's message, not by a poll.
            REQUIRE(co_await eventually([&] { return set.has_value(); }));
            CHECK(ms_since(let_go) < 500);
            CHECK(set->fence(n2) > holder.fence());
            CHECK(co_await stays([&] { return !single.has_value(); }, 100ms));
            co_await set->release();
            REQUIRE(co_await eventually([&] { return single.has_value(); }));
            CHECK(order == strings("set", "single"));
            CHECK(single->fence() > set->fence(n1));
            co_await single->release();
            co_await check_keys_left(probe, strings(n1, n2));
        });
}

TEST_CASE("lock set: cancelled while it waits, or cut by its wait timeout, it leaves no name "
          "reserved and no queue entry") {
    run_lock_test<two_lockers>(
        "set-cancel",
        [](redis::connection&, redis::connection&, redis::connection& probe, locker& a, locker& b,
           std::string const& name) -> asio::awaitable<void> {
            auto const n1 = name + "-1", n2 = name + "-2";
            auto holder = co_await a.co_lock(n2, lease(10'000ms));
            auto const raced =
                co_await (b.co_lock_all(strings(n1, n2), lease(10'000ms)) || sleep_for(300ms));
            CHECK(raced.index() == 1);
            CHECK(co_await eventually([&]() -> asio::awaitable<bool> {
                co_return co_await lock_free(probe, n1) &&
                    co_await integer(probe, command("LLEN", lock_key(n2) + ":q")) == 0;
            }));
            auto const timed_out = co_await failure_of(
                b.co_lock_all(strings(n1, n2), waiting_up_to(lease(10'000ms), 200ms)));
            CHECK(timed_out.code == error::timeout);
            CHECK(timed_out.what.find("lock on several names") != std::string::npos);
            CHECK(co_await eventually(
                [&]() -> asio::awaitable<bool> { co_return co_await lock_free(probe, n1); }));
            co_await holder.release();
            auto set = co_await a.co_try_lock_all(strings(n1, n2));
            CHECK(set.has_value());
            co_await set->release();
            co_await check_keys_left(probe, strings(n1, n2));
        });
}

TEST_CASE("lock set: a name's lease lost ends the set: wait_lost completes, and the release "
          "says not every name was held") {
    run_lock_test<one_locker>("set-lost",
                              [](redis::connection&, redis::connection& probe, locker& locks,
                                 std::string const& name) -> asio::awaitable<void> {
                                  auto const n1 = name + "-1", n2 = name + "-2";
                                  auto set =
                                      co_await locks.co_lock_all(strings(n1, n2), lease(900ms));
                                  co_await probe.co_exec(command("DEL", lock_key(n2)));
                                  auto const raced =
                                      co_await (set.wait_lost() || sleep_for(3000ms));
                                  CHECK(raced.index() == 0);
                                  CHECK(set.lost());
                                  CHECK(set.loss() == loss_reason::not_ours);
                                  CHECK_FALSE(co_await set.release());
                                  CHECK(co_await lock_free(probe, n1));
                              });
}

TEST_CASE("lock set: overlapping sets named in any order by three lockers, with single-name "
          "locks among them, never overlap and never deadlock") {
    run_lock_test<three_lockers>(
        "set-mix",
        [](redis::connection&, redis::connection&, redis::connection&, redis::connection& probe,
           locker& a, locker& b, locker& c, std::string const& name) -> asio::awaitable<void> {
            std::vector<std::string> names;
            for (int i = 0; i < 5; ++i)
                names.push_back(name + "-" + std::to_string(i));
            std::map<std::string, int> holders; // one io_context thread: no lock needed
            int overlaps = 0, failed = 0, finished = 0, rounds = 0;
            std::array<locker*, 3> const lockers{&a, &b, &c};
            auto ex = co_await asio::this_coro::executor;
            constexpr int workers = 12;
            for (int w = 0; w < workers; ++w)
                asio::co_spawn(
                    ex,
                    [&, w]() -> asio::awaitable<void> {
                        std::minstd_rand rng(static_cast<unsigned>(w + 1));
                        auto& locks = *lockers[static_cast<std::size_t>(w) % lockers.size()];
                        for (int round = 0; round < 12; ++round) {
                            // 1 to 3 names, in a random order (a set sorts them itself).
                            std::vector<std::string> want;
                            auto const count = 1 + rng() % 3;
                            while (want.size() < count) {
                                auto const& n = names[rng() % names.size()];
                                if (std::find(want.begin(), want.end(), n) == want.end())
                                    want.push_back(n);
                            }
                            auto opt = waiting_up_to(lease(5'000ms), 15'000ms);
                            std::optional<multi_lock_guard> set;
                            std::optional<lock_guard> single;
                            if (count == 1 && w % 2 == 0)
                                single.emplace(co_await locks.co_lock(want.front(), opt));
                            else
                                set.emplace(co_await locks.co_lock_all(want, opt));
                            for (auto const& n : want)
                                if (holders[n]++ != 0)
                                    ++overlaps;
                            co_await sleep_for(std::chrono::milliseconds(1 + rng() % 3));
                            for (auto const& n : want)
                                --holders[n];
                            if (set)
                                CHECK(co_await set->release());
                            else
                                CHECK(co_await single->release());
                            ++rounds;
                        }
                        ++finished;
                    },
                    count_failure(failed, finished));
            REQUIRE(co_await eventually([&] { return finished == workers; }, 40'000ms));
            CHECK(failed == 0);
            CHECK(overlaps == 0);
            CHECK(rounds == workers * 12);
            co_await check_keys_left(probe, names);
        });
}

TEST_CASE("lock set: a call of the same process for the same names is handed the set by its "
          "holder without a server call, with the next fence of every name, and the release to "
          "Redis stores the last fence given") {
    run_lock_test<one_locker>(
        "set-cohort",
        [](redis::connection&, redis::connection& probe, locker& locks,
           std::string const& name) -> asio::awaitable<void> {
            auto const n1 = name + "-1", n2 = name + "-2";
            auto ex = co_await asio::this_coro::executor;
            auto const opt = lease(10'000ms);
            auto first = co_await locks.co_lock_all(strings(n1, n2), opt);
            std::vector<std::vector<std::int64_t>> fences;
            std::vector<std::string> tokens;
            std::optional<std::int64_t> scripts_when_last_took;
            int failed = 0, finished = 0;
            for (int w = 0; w < 2; ++w)
                asio::co_spawn(
                    ex,
                    [&]() -> asio::awaitable<void> {
                        auto g = co_await locks.co_lock_all(strings(n2, n1), opt);
                        fences.push_back(g.fences());
                        tokens.push_back(g.token());
                        if (fences.size() == 2)
                            scripts_when_last_took = script_calls(co_await commandstats(probe));
                        co_await sleep_for(5ms);
                        CHECK(co_await g.release());
                        ++finished;
                    },
                    count_failure(failed, finished));
            // Queued behind a holder of their own process, they do not ask the server.
            auto const before = script_calls(co_await commandstats(probe));
            co_await sleep_for(100ms);
            CHECK(script_calls(co_await commandstats(probe)) == before);
            CHECK(co_await integer(probe, command("LLEN", lock_key(n1) + ":q")) == 0);
            CHECK(co_await first.release());
            REQUIRE(co_await eventually([&] { return finished == 2; }));
            CHECK(failed == 0);
            // Two hand-offs, no script run before the last one took the set.
            REQUIRE(scripts_when_last_took.has_value());
            CHECK(*scripts_when_last_took == before);
            REQUIRE(fences.size() == 2);
            for (std::size_t i = 0; i < 2; ++i) {
                INFO("name ", i);
                CHECK(fences[0][i] == first.fences()[i] + 1);
                CHECK(fences[1][i] == first.fences()[i] + 2);
            }
            // The guards show the lease's token, which the keys hold.
            CHECK(tokens[0] == tokens[1]);
            // The last release stored the last fence: the next holder's is above it.
            auto const next = co_await locks.co_lock(n1, opt);
            CHECK(next.fence() > fences[1][0]);
            co_await check_keys_left(probe, strings(n2));
        });
}

TEST_CASE("lock set: hand-offs inside the process stop at cohort_limit in a row, and the set "
          "goes through Redis to a process queued for one of its names") {
    run_lock_test<two_lockers>(
        "set-cohort-limit",
        [](redis::connection&, redis::connection&, redis::connection& probe, locker& a, locker& b,
           std::string const& name) -> asio::awaitable<void> {
            auto const n1 = name + "-1", n2 = name + "-2";
            auto ex = co_await asio::this_coro::executor;
            auto opt = lease(10'000ms);
            opt.cohort_limit = 2;
            auto first = co_await a.co_lock_all(strings(n1, n2), opt);
            std::vector<std::string> order;
            std::vector<std::int64_t> fences_of_n1;
            int failed = 0, finished = 0;
            for (int w = 0; w < 4; ++w)
                asio::co_spawn(
                    ex,
                    [&]() -> asio::awaitable<void> {
                        auto g = co_await a.co_lock_all(strings(n1, n2), opt);
                        order.push_back("set");
                        fences_of_n1.push_back(g.fence(n1));
                        co_await sleep_for(5ms);
                        CHECK(co_await g.release());
                        ++finished;
                    },
                    count_failure(failed, finished));
            co_await sleep_for(50ms);
            asio::co_spawn(
                ex,
                [&]() -> asio::awaitable<void> {
                    auto g = co_await b.co_lock(n1, opt);
                    order.push_back("other");
                    fences_of_n1.push_back(g.fence());
                    co_await sleep_for(5ms);
                    CHECK(co_await g.release());
                    ++finished;
                },
                count_failure(failed, finished));
            REQUIRE(co_await eventually([&]() -> asio::awaitable<bool> {
                co_return co_await integer(probe, command("LLEN", lock_key(n1) + ":q")) == 1;
            }));
            CHECK(co_await first.release());
            REQUIRE(co_await eventually([&] { return finished == 5; }, 10'000ms));
            CHECK(failed == 0);
            // Two hand-offs here, then the other process, queued all along, then this one again.
            CHECK(order == strings("set", "set", "other", "set", "set"));
            REQUIRE(fences_of_n1.size() == 5);
            CHECK(fences_of_n1[0] == first.fence(n1) + 1);
            for (std::size_t i = 1; i < fences_of_n1.size(); ++i) {
                INFO("holder ", i);
                CHECK(fences_of_n1[i] > fences_of_n1[i - 1]);
            }
            co_await check_keys_left(probe, strings(n1, n2));
        });
}

TEST_CASE("lock set: bad input is refused at the call") {
    run_lock_test<one_locker>(
        "set-args",
        [](redis::connection&, redis::connection&, locker& locks,
           std::string const& name) -> asio::awaitable<void> {
            auto const empty = co_await failure_of(locks.co_lock_all({}));
            CHECK(empty.code == error::invalid_argument);
            CHECK(empty.what.find("empty") != std::string::npos);
            CHECK(co_await error_of(locks.co_try_lock_all(strings(name, ""))) ==
                  error::invalid_argument);
            lock_options no_ttl;
            no_ttl.ttl = 0ms;
            CHECK(co_await error_of(locks.co_lock_all(strings(name), no_ttl)) ==
                  error::invalid_argument);
        });
}

TEST_CASE("lock set: what a dead set kept lapses with it, and its name goes to the next in line; "
          "a set whose place in one queue lapsed gives back what it kept and queues again") {
    run_lock_test<two_lockers>(
        "set-dead",
        [](redis::connection&, redis::connection&, redis::connection& probe, locker& a, locker& b,
           std::string const& name) -> asio::awaitable<void> {
            auto const n1 = name + "-1", n2 = name + "-2";
            // A set of a process that is gone: its reservation of n1, 400 ms left, and its
            // entry in n2's queue, lapsed.
            co_await probe.co_exec(command("SET", lock_key(n1), "R 1000 gone/1", "PX", "400"));
            auto const started = steady::now();
            auto set = co_await a.co_lock_all(strings(n1, n2), lease(10'000ms));
            CHECK(ms_since(started) >= 300);
            CHECK(ms_since(started) < 1500);
            CHECK(set.fence(n1) > 1000);

            // b waits behind a's set for n1; its entry in n2's queue is taken out by hand (as a
            // lapse would): at its next attempt it gives back n2, reserved meanwhile, and queues
            // again, and it is still granted once a lets go.
            std::optional<multi_lock_guard> next;
            asio::co_spawn(
                co_await asio::this_coro::executor,
                [&]() -> asio::awaitable<void> {
                    next.emplace(co_await b.co_lock_all(strings(n2, n1), lease(10'000ms)));
                },
                asio::detached);
            CHECK(co_await eventually([&]() -> asio::awaitable<bool> {
                co_return co_await integer(probe, command("LLEN", lock_key(n1) + ":q")) == 1 &&
                    co_await integer(probe, command("LLEN", lock_key(n2) + ":q")) == 1;
            }));
            auto const head = co_await probe.co_exec(command("LINDEX", lock_key(n1) + ":q", "0"));
            std::string const entry(head.at(0).as_string().value_or(""));
            INFO("entry ", entry, ", locker ", b.id());
            CHECK(entry.starts_with(b.id() + "/"));
            co_await probe.co_exec(command("LREM", lock_key(n1) + ":q", "1", entry));
            co_await probe.co_exec(command("HDEL", lock_key(n1) + ":qd", entry));
            // Its next attempt (at least every second) puts it back in n1's queue.
            CHECK(co_await eventually(
                [&]() -> asio::awaitable<bool> {
                    co_return co_await integer(probe, command("LLEN", lock_key(n1) + ":q")) == 1;
                },
                2500ms));
            CHECK(co_await set.release());
            REQUIRE(co_await eventually([&] { return next.has_value(); }));
            CHECK(next->fence(n1) > set.fence(n1));
            co_await next->release();
            co_await check_keys_left(probe, strings(n1, n2));
        });
}

TEST_CASE("lock set: status names the set's locker and process, and a forced unlock of one name "
          "tells the set at once") {
    run_lock_test<two_lockers>(
        "set-status",
        [](redis::connection&, redis::connection&, redis::connection&, locker& a, locker& b,
           std::string const& name) -> asio::awaitable<void> {
            auto const n1 = name + "-1", n2 = name + "-2";
            auto set = co_await a.co_lock_all(strings(n1, n2), lease(30'000ms));
            auto const status = co_await b.co_status(n2);
            CHECK(status.held());
            CHECK(status.fence == set.fence(n2));
            CHECK(status.token == set.token());
            CHECK(status.holder_id.starts_with(a.id() + "/"));
            REQUIRE(status.holder.has_value());
            CHECK(status.holder->pid == ::getpid());
            // Told by the forced unlock's message, long before a renewal (every 10 s) would see.
            auto const forced_at = steady::now();
            CHECK(co_await b.co_force_unlock(n1));
            auto const raced = co_await (set.wait_lost() || sleep_for(3000ms));
            CHECK(raced.index() == 0);
            CHECK(ms_since(forced_at) < 1000);
            CHECK(set.loss() == loss_reason::forced);
            CHECK_FALSE(co_await set.release());
        });
}

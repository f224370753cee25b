// Redlock against real independent redis-servers, 3 and 5 of them: what a lock leaves on each
// primary while held and after, the validity it reports, try_lock against another holder,
// unlock by majority, mutual exclusion and fences under contention, and
// a primary killed while lockers contend. Faults and bad configurations: test_redlock_faults.cpp;
// lock sets: test_redlock_sets.cpp; cancellation and renewal: test_redlock_cancel.cpp.
#include <colock/election.hpp>
#include <colock/functions_library.hpp>
#include <colock/locker.hpp>
#include <colock/rw_lock.hpp>
#include <colock/semaphore.hpp>

#include "election_fixture.hpp"
#include "redlock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/primary_set.hpp>
#include <colock_test/redis_server.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace colock;
using namespace colock::test;
using namespace asio::experimental::awaitable_operators;
using values = std::vector<std::optional<std::string>>;

namespace {

// Redlock's allowance for clock drift: ttl × 1 % + 2 ms (exact for a ttl in whole 100 ms).
std::chrono::milliseconds drift(std::chrono::milliseconds ttl) {
    return ttl / 100 + 2ms;
}

// Sets `key` for a minute on primaries 0, 1 and 2 to `first`, `second` and `third`.
asio::awaitable<void> set_on_each(primary_connections& probe, std::string const& key,
                                  std::string first, std::string second, std::string third) {
    co_await probe[0].co_exec(command("SET", key, first, "PX", "60000"));
    co_await probe[1].co_exec(command("SET", key, second, "PX", "60000"));
    co_await probe[2].co_exec(command("SET", key, third, "PX", "60000"));
}

} // namespace

// ------------------------------------------------------------------------------ basics

TEST_CASE("redlock: co_lock holds the key on a majority, within ttl less drift; co_try_lock is "
          "refused elsewhere; unlock frees every primary, and every key expires") {
    on_3_and_5_primaries([&](std::size_t n, std::vector<redis_server*> const& servers) {
        auto scenario = [&](primary_connections& conns_a, primary_connections& conns_b,
                            primary_connections& probe, locker& a, locker& b,
                            std::string const& name) -> asio::awaitable<void> {
            CHECK(a.key_prefix() == "colock:");
            // Connected first, so that the attempt below takes milliseconds: well below the
            // drift, which the lease's validity must then show.
            co_await conns_a.connect_all();
            co_await conns_b.connect_all();
            std::string const key = lock_key(name);

            auto const ttl = 10'000ms; // drift: 102 ms
            auto const before = steady::now();
            auto g = co_await a.co_lock(name, lease(ttl));
            auto const after = steady::now();
            MESSAGE(n << " primaries: acquired in " << ms_between(before, after) << " ms");
            CHECK(g.owns());
            CHECK_FALSE(g.lost());
            CHECK(g.name() == name);
            CHECK(g.token().size() == 32);
            CHECK(g.fence() >= 1);
            // The validity counts from the attempt's start, less the drift.
            CHECK(g.lease_expiry() <= after + ttl - drift(ttl));
            CHECK(g.lease_expiry() >= before + ttl - drift(ttl) - 5ms);

            // Held with our token on a majority (every primary answers here), with a lease of
            // at most ttl; the guard's fence is one a primary gave (the largest of the majority
            // that decided; a grant that came after the decision may be larger).
            auto held = co_await values_become(
                probe, key, [&](values const& v) { return count_held(v, g.token()) == n; });
            CHECK(count_held(held, g.token()) >= majority(n));
            bool fence_from_a_primary = false;
            for (std::size_t i = 0; i < n; ++i) {
                auto const r = parse_lock_record(held[i]);
                if (r.kind != 'H' || r.token != g.token())
                    continue;
                fence_from_a_primary = fence_from_a_primary || r.fence == g.fence();
                auto const pttl = co_await integer(probe[i], command("PTTL", key));
                CHECK(pttl > 0);
                CHECK(pttl <= 10'000);
            }
            CHECK(fence_from_a_primary);

            // One attempt from another locker, and another call of the same locker: refused,
            // and the holder's keys are untouched.
            auto from_b = co_await b.co_try_lock(name, lease(ttl));
            CHECK_FALSE(from_b.has_value());
            auto from_a = co_await a.co_try_lock(name, lease(ttl));
            CHECK_FALSE(from_a.has_value());
            auto const still = co_await values_on(probe, key);
            CHECK(count_held(still, g.token()) >= majority(n));
            CHECK(g.owns());

            CHECK(co_await g.release());
            CHECK_FALSE(g.owns());
            CHECK_FALSE(g.lost());
            // Free on every primary, keeping its fence for the rest of the lease.
            auto const freed = co_await values_become(
                probe, key, [&](values const& v) { return count_free_with_fence(v) == n; });
            CHECK(count_held(freed) == 0);
            CHECK(count_free_with_fence(freed) >= majority(n));
            for (std::size_t i = 0; i < n; ++i) {
                if (!freed[i])
                    continue;
                auto const pttl = co_await integer(probe[i], command("PTTL", key));
                CHECK(pttl > 0);
                CHECK(pttl <= 10'000);
            }
            CHECK_FALSE(co_await g.release());

            // The next holder, from the other locker, has a larger fence.
            auto g2 = co_await b.co_lock(name, lease(ttl));
            CHECK(g2.fence() > g.fence());
            CHECK(g2.token() != g.token());
            auto const held2 = co_await values_on(probe, key);
            CHECK(count_held(held2, g2.token()) >= majority(n));
            CHECK(co_await g2.release());

            // A short lease: once it has passed, nothing of the lock is left on any primary,
            // and no key the lockers wrote lives without an expiry.
            std::string const brief = unique_key("redlock-expire");
            auto g3 = co_await a.co_lock(brief, lease(1000ms));
            auto const held3 = co_await values_on(probe, lock_key(brief));
            CHECK(count_held(held3, g3.token()) >= majority(n));
            CHECK(co_await g3.release());
            auto const pattern = "*{" + brief + "}*";
            co_await eventually([&] { return keys_on(servers, pattern).empty(); }, 1000ms + 4000ms,
                                100ms);
            CHECK(keys_on(servers, pattern).empty());
            CHECK(keys_without_ttl(servers, "colock:*").empty());
        };
        run_redlock_test(configs_of(servers), "redlock-basic", scenario);
    });
}

TEST_CASE("redlock: an election: the leader on a majority, read by majority (a primary that "
          "lost the term's record is outvoted), a watch of every change, hand-over on resign") {
    on_3_and_5_primaries([&](std::size_t n, std::vector<redis_server*> const& servers) {
        auto scenario = [&](asio::io_context& ctx, primary_connections&, primary_connections&,
                            primary_connections& probe, locker& a, locker& b,
                            std::string const& name) -> asio::awaitable<void> {
            election ea{a, name};
            election eb{b, name};
            auto watch = co_await watch_from_nobody(eb);
            auto lead_a = co_await ea.co_campaign("a1", lease(10s));
            auto c = co_await next_change(watch);
            CHECK(c.value == "a1");
            CHECK(c.term == lead_a.term());
            std::string const record = election_key(name) + ":e";
            std::size_t holding = 0;
            for (std::size_t i = 0; i < n; ++i)
                holding += co_await integer(probe[i], command("EXISTS", record)) == 1 ? 1 : 0;
            CHECK(holding >= n / 2 + 1);

            co_await lead_a.co_proclaim("a2");
            c = co_await next_change(watch);
            CHECK(c.value == "a2");
            CHECK(c.term == lead_a.term());
            // One primary loses the record: the majority still names the leader.
            co_await probe[0].co_exec(command("DEL", record));
            auto const who = co_await eb.co_leader();
            REQUIRE(who.has_value());
            CHECK(who->value == "a2");
            CHECK(who->term == lead_a.term());

            campaign_run b_run;
            start_campaign(ctx.get_executor(), eb, "b1", lease(10s), b_run);
            auto& lead_b = b_run.lead;
            CHECK(co_await stays([&] { return !lead_b; }, 100ms));
            CHECK(co_await lead_a.release());
            c = co_await next_change(watch);
            CHECK(c.leading);
            CHECK(c.value == "b1");
            CHECK_FALSE(c.resynced);
            co_await eventually([&] { return lead_b.has_value(); }, 2000ms, 5ms);
            REQUIRE(lead_b);
            CHECK(c.term == lead_b->term());
            CHECK(lead_b->term() > lead_a.term());
            CHECK(co_await lead_b->release());
            c = co_await next_change(watch);
            CHECK_FALSE(c.leading);
            CHECK_FALSE((co_await ea.co_leader()).has_value());
        };
        run_redlock_test(configs_of(servers), "redlock-election", scenario);
    });
}

TEST_CASE("redlock: unlock is true when a majority released the lease, false when a majority no "
          "longer held it; the release goes to every primary") {
    auto scenario = [](primary_connections&, primary_connections&, primary_connections& probe,
                       locker& locks, locker&, std::string const& name) -> asio::awaitable<void> {
        std::string const key = lock_key(name);
        // No renewal: the keys deleted below are not noticed before the unlock.
        lock_options opt = lease(10'000ms);
        opt.auto_renew = false;

        auto g = co_await locks.co_lock(name, opt);
        auto held = co_await values_become(
            probe, key, [&](values const& v) { return count_held(v, g.token()) == 3; });
        REQUIRE(count_held(held, g.token()) == 3);
        // Gone from one primary: two of three still release it.
        co_await probe[0].co_exec(command("DEL", key));
        bool const released = co_await g.release();
        CHECK(released);
        auto const after =
            co_await values_become(probe, key, [&](values const& v) { return count_held(v) == 0; });
        CHECK(count_held(after) == 0);

        auto g2 = co_await locks.co_lock(name, opt);
        CHECK(g2.fence() > g.fence());
        held = co_await values_become(
            probe, key, [&](values const& v) { return count_held(v, g2.token()) == 3; });
        REQUIRE(count_held(held, g2.token()) == 3);
        // Gone from two: only one primary had it to release, not a majority.
        co_await probe[0].co_exec(command("DEL", key));
        co_await probe[1].co_exec(command("DEL", key));
        CHECK_FALSE(co_await g2.release());
        // The third primary was released all the same.
        auto const after2 =
            co_await values_become(probe, key, [&](values const& v) { return count_held(v) == 0; });
        CHECK(count_held(after2) == 0);
    };
    run_redlock_test(configs_of(shared_primaries(3)), "redlock-unlock-majority", scenario);
}

// Each coroutine locks and unlocks its own name `cycles` times on one locker, and right after
// each release() that returned true reads the key on every primary at once: a released lock
// leaves nothing behind, on any primary (issue 44).
TEST_CASE("redlock: right after release() returned true no primary holds the released token "
          "(8 coroutines x 50 cycles on distinct names, on 3 and on 5)") {
    on_3_and_5_primaries([&](std::size_t n, std::vector<redis_server*> const& servers) {
        run_test(
            [&](asio::io_context& ctx) -> asio::awaitable<void> {
                primary_connections conns{ctx.get_executor(), configs_of(servers)};
                primary_connections probe{ctx.get_executor(), configs_of(servers)};
                locker locks{conns.primaries()};
                co_await conns.connect_all();
                co_await probe.connect_all();
                constexpr int coroutines = 8;
                constexpr int cycles = 50;
                std::string const base = unique_key("redlock-release-complete");
                int finished = 0;
                int left_behind = 0; // cycles with the token still on a primary
                int not_released = 0;
                std::vector<std::string> errors;
                auto const started = steady::now();
                for (int k = 0; k < coroutines; ++k)
                    asio::co_spawn(
                        ctx,
                        [&, k]() -> asio::awaitable<void> {
                            auto const name = base + ":" + std::to_string(k);
                            auto const key = lock_key(name);
                            for (int i = 0; i < cycles; ++i) {
                                auto g = co_await locks.co_lock(name, lease(10'000ms));
                                std::string const token = g.token();
                                if (!co_await g.release()) {
                                    ++not_released;
                                    continue;
                                }
                                // Every primary asked at once, on connections of the probe's.
                                std::vector<std::optional<std::string>> v(n);
                                std::size_t answered = 0;
                                for (std::size_t p = 0; p < n; ++p)
                                    asio::co_spawn(
                                        ctx,
                                        [&, p]() -> asio::awaitable<void> {
                                            v[p] = co_await get(probe[p], key);
                                        },
                                        [&](std::exception_ptr) { ++answered; });
                                REQUIRE(
                                    co_await eventually([&] { return answered == n; }, 10s, 1ms));
                                if (count_held(v, token) > 0)
                                    ++left_behind;
                            }
                        },
                        [&](std::exception_ptr e) {
                            if (e) {
                                try {
                                    std::rethrow_exception(e);
                                } catch (std::exception const& x) {
                                    errors.push_back(x.what());
                                }
                            }
                            ++finished;
                        });
                REQUIRE(co_await eventually([&] { return finished == coroutines; }, 110s, 10ms));
                MESSAGE(n << " primaries: " << coroutines * cycles << " cycles in "
                          << ms_since(started) << " ms, " << left_behind
                          << " with the token left on a primary after release()");
                CHECK(errors.empty());
                for (auto const& e : errors)
                    MESSAGE("cycle failed: " << e);
                CHECK(not_released == 0);
                CHECK(left_behind == 0);
                conns.close();
                probe.close();
            },
            180s);
    });
}

TEST_CASE("redlock: a kept lease (lock_options::retain) is taken again with no call to any "
          "primary, and goes to another locker at once when it asks") {
    auto scenario = [](primary_connections&, primary_connections&, primary_connections& probe,
                       locker& locks, locker& other,
                       std::string const& name) -> asio::awaitable<void> {
        lock_options keep = lease(10'000ms);
        keep.retain = 20'000ms;
        std::int64_t last_fence = 0;
        {
            auto g = co_await locks.co_lock(name, keep);
            last_fence = g.fence();
        }
        // Kept, and listened for on every primary's wake channel.
        for (std::size_t i = 0; i < 3; ++i)
            CHECK(co_await numsub_becomes(probe[i], lock_key(name) + ":w:*", 1) == 1);
        std::vector<std::string> before;
        for (std::size_t i = 0; i < 3; ++i)
            before.push_back(co_await commandstats(probe[i]));
        for (int i = 0; i < 10; ++i) {
            auto g = co_await locks.co_lock(name, keep);
            CHECK(g.fence() > last_fence);
            last_fence = g.fence();
            CHECK(co_await g.release());
        }
        for (std::size_t i = 0; i < 3; ++i) {
            auto const after = co_await commandstats(probe[i]);
            CHECK(commands_between(before[i], after) == 0);
        }
        lock_options waits = lease(10'000ms);
        waits.wait_timeout = 5000ms;
        auto const asked = steady::now();
        auto g = co_await other.co_lock(name, waits);
        CHECK(steady::now() - asked < 2000ms);
        CHECK(g.fence() > last_fence);
        CHECK(co_await g.release());
    };
    run_redlock_test(configs_of(shared_primaries(3)), "redlock-retain", scenario);
}

// -------------------------------------------------------------------------- contention

namespace {

// Several lockers, each with its own connections to the primaries (as separate processes would
// have them), and several coroutines per locker that take the lock `rounds` times each and
// increment a counter on the first primary with GET, a pause, then SET, under it. One thread:
// `holders` counts exactly.
struct contention {
    std::string name;
    std::string counter_key;
    int lockers = 4;
    int coroutines = 16;
    int rounds = 3;
    lock_options opt;

    int holders = 0;
    int max_holders = 0;
    int increments = 0;
    int fence_inversions = 0;
    int not_released = 0; // release() returned false
    int lost_in_hand = 0; // a guard no longer owned when its holder was done
    std::int64_t last_fence = 0;
    std::vector<std::string> errors;

    int total() const { return lockers * coroutines * rounds; }
};

std::shared_ptr<contention> make_contention(std::string const& what, int lockers, int coroutines,
                                            int rounds, std::chrono::milliseconds ttl) {
    auto c = std::make_shared<contention>();
    c->name = unique_key(what);
    c->counter_key = unique_key(what + "-counter");
    c->lockers = lockers;
    c->coroutines = coroutines;
    c->rounds = rounds;
    c->opt.ttl = ttl;
    c->opt.retry.initial = 5ms;
    c->opt.retry.max = 100ms;
    return c;
}

asio::awaitable<void> contend(std::vector<redis::config> configs, std::shared_ptr<contention> c) {
    auto ex = co_await asio::this_coro::executor;
    std::vector<std::unique_ptr<primary_connections>> conns;
    std::vector<std::unique_ptr<locker>> locks;
    for (int l = 0; l < c->lockers; ++l) {
        conns.push_back(std::make_unique<primary_connections>(ex, configs));
        locks.push_back(std::make_unique<locker>(conns.back()->primaries()));
    }
    int finished = 0;
    for (int l = 0; l < c->lockers; ++l)
        for (int k = 0; k < c->coroutines; ++k)
            asio::co_spawn(
                ex,
                [&, l, k]() -> asio::awaitable<void> {
                    redis::connection& store = (*conns[l])[0];
                    for (int r = 0; r < c->rounds; ++r) {
                        auto g = co_await locks[l]->co_lock(c->name, c->opt);
                        c->max_holders = std::max(c->max_holders, ++c->holders);
                        if (g.fence() <= c->last_fence)
                            ++c->fence_inversions;
                        c->last_fence = std::max(c->last_fence, g.fence());
                        auto const value = co_await get(store, c->counter_key);
                        long long const count = value ? std::stoll(*value) : 0;
                        // Widen the window between read and write.
                        if ((r + k) % 3 == 0)
                            co_await sleep_for(1ms);
                        else
                            co_await asio::post(ex, asio::use_awaitable);
                        co_await store.co_exec(
                            command("SET", c->counter_key, std::to_string(count + 1)));
                        ++c->increments;
                        if (!g.owns())
                            ++c->lost_in_hand;
                        --c->holders;
                        bool const released = co_await g.release();
                        if (!released)
                            ++c->not_released;
                    }
                },
                [&](std::exception_ptr e) {
                    if (e) {
                        try {
                            std::rethrow_exception(e);
                        } catch (std::exception const& x) {
                            c->errors.push_back(x.what());
                        }
                    }
                    ++finished;
                });
    REQUIRE(
        co_await eventually([&] { return finished == c->lockers * c->coroutines; }, 110s, 10ms));
    for (auto& cs : conns)
        cs->close();
}

void check_contention(contention const& c) {
    CHECK(c.errors.empty());
    for (auto const& e : c.errors)
        MESSAGE("contender failed: " << e);
    CHECK(c.max_holders == 1);
    CHECK(c.fence_inversions == 0);
    CHECK(c.not_released == 0);
    CHECK(c.lost_in_hand == 0);
    CHECK(c.increments == c.total());
}

} // namespace

TEST_CASE("redlock: mutual exclusion under contention: 4 lockers x 16 coroutines, a "
          "read-modify-write counter exact, fences strictly increasing, on 3 and on 5") {
    on_3_and_5_primaries([&](std::size_t n, std::vector<redis_server*> const& servers) {
        auto const c = make_contention("redlock-contention", 4, 16, n == 3 ? 3 : 2, 10'000ms);
        run_test(
            [&](asio::io_context& ctx) -> asio::awaitable<void> {
                auto const started = steady::now();
                co_await contend(configs_of(servers), c);
                MESSAGE(n << " primaries: " << c->increments << " increments in "
                          << ms_since(started) << " ms");
                primary_connections probe{ctx.get_executor(), configs_of(servers)};
                auto const left = co_await values_become(
                    probe, lock_key(c->name), [](values const& v) { return count_held(v) == 0; });
                CHECK(count_held(left) == 0);
                probe.close();
            },
            180s);
        check_contention(*c);
        CHECK(servers[0]->cli(strings("GET", c->counter_key)) == std::to_string(c->total()));
        // Each primary ran the scripts as Redis Functions, its library loaded by the first call.
        auto const library = functions_library_for(servers[0]->config()).name;
        for (auto const* server : servers) {
            CHECK(command_calls(server->cli(strings("INFO", "commandstats")), "fcall") > 0);
            CHECK_FALSE(server->cli(strings("FUNCTION", "LIST", "LIBRARYNAME", library)).empty());
        }
    });
}

// ------------------------------------------------------------------- a primary killed

TEST_CASE("redlock: primaries killed while lockers contend (1 of 3, 2 of 5): the loop goes on "
          "without overlap; restarted, they count again") {
    on_fresh_primaries({{3, 1}, {5, 2}}, [&](primaries_killed sh, primary_set& set) {
        auto const servers = set.servers();
        // The last `killed` primaries go; the counter lives on the first, which stays.
        auto const kill_last = [&] {
            for (std::size_t k = 0; k < sh.killed; ++k)
                set[sh.n - 1 - k].kill();
        };
        auto const c = make_contention("redlock-kill", 3, 8, 6, 3000ms);
        int at_kill = 0;
        run_test(
            [&](asio::io_context& ctx) -> asio::awaitable<void> {
                bool finished = false;
                asio::co_spawn(ctx, contend(fast_configs(servers), c), [&](std::exception_ptr e) {
                    if (e)
                        c->errors.push_back("the contention loop threw");
                    finished = true;
                });
                bool const going = co_await finishes_when(
                    [&] { return c->increments >= c->total() / 4; }, 60'000ms);
                REQUIRE(going);
                co_await off_thread(kill_last);
                at_kill = c->increments;
                auto const killed_at = steady::now();
                bool const all_done = co_await finishes(finished, 150'000ms);
                REQUIRE(all_done);
                MESSAGE(sh.n << " primaries, " << sh.killed << " killed after " << at_kill
                             << " increments; the other " << c->total() - at_kill << " took "
                             << ms_since(killed_at) << " ms");
            },
            240s);
        check_contention(*c);
        CHECK(at_kill < c->total());
        CHECK(set[0].cli(strings("GET", c->counter_key)) == std::to_string(c->total()));

        // Restarted, then as many others killed: a majority now needs the restarted ones.
        run_test(
            [&](asio::io_context& ctx) -> asio::awaitable<void> {
                co_await off_thread([&] {
                    for (std::size_t k = 0; k < sh.killed; ++k)
                        set[sh.n - 1 - k].restart();
                });
                primary_connections conns{ctx.get_executor(), fast_configs(servers)};
                primary_connections probe{ctx.get_executor(), fast_configs(servers)};
                co_await conns.connect_all();
                co_await probe.connect_all();
                locker locks{conns.primaries()};
                co_await off_thread([&] {
                    for (std::size_t k = 0; k < sh.killed; ++k)
                        set[k].kill();
                });
                lock_options opt = waiting_up_to(lease(3000ms), 20'000ms);
                auto g = co_await locks.co_lock(c->name, opt);
                CHECK(g.owns());
                CHECK(g.fence() > c->last_fence);
                auto const held = co_await values_on(probe, lock_key(c->name));
                CHECK(count_held(held, g.token()) >= majority(sh.n));
                CHECK(co_await g.release());
                conns.close();
                probe.close();
            },
            120s);
    });
}

TEST_CASE("redlock: co_status reads the state a majority shares and its largest fence: held, "
          "free after a release, handed to nobody after a forced unlock, free with the largest "
          "fence when no majority agrees") {
    auto const servers = shared_primaries(3);
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        primary_connections conns{ctx.get_executor(), configs_of(servers)};
        primary_connections probe{ctx.get_executor(), configs_of(servers)};
        locker locks{conns.primaries()};
        co_await conns.connect_all();
        co_await probe.connect_all();
        std::string const name = unique_key("redlock-status");
        std::string const key = lock_key(name);

        auto g = co_await locks.co_lock(name, lease(10'000ms));
        auto st = co_await locks.co_status(name);
        CHECK(st.state == lock_state::held);
        CHECK(st.token == g.token());
        CHECK(st.fence >= g.fence());
        CHECK(co_await g.release());
        co_await values_become(probe, key,
                               [](values const& v) { return count_free_with_fence(v) == 3; });
        st = co_await locks.co_status(name);
        CHECK(st.state == lock_state::free);
        CHECK(st.fence >= g.fence());

        auto forced = co_await locks.co_lock(name, lease(10'000ms));
        CHECK(co_await locks.co_force_unlock(name));
        st = co_await locks.co_status(name);
        CHECK(st.state == lock_state::handed);
        CHECK(st.holder_id.empty());
        CHECK(st.fence >= forced.fence());
        CHECK_FALSE(co_await forced.release());

        // Each primary in another state: no majority, so free, with the largest fence of all.
        co_await set_on_each(probe, key, "H 500 x token-a 0 0", "H 400 y token-b 0 0", "F 450");
        st = co_await locks.co_status(name);
        CHECK(st.state == lock_state::free);
        CHECK(st.fence == 500);
        // Free on every primary with a fence each: the largest.
        co_await set_on_each(probe, key, "F 100", "F 300", "F 200");
        st = co_await locks.co_status(name);
        CHECK(st.state == lock_state::free);
        CHECK(st.fence == 300);
        for (std::size_t i = 0; i < 3; ++i)
            co_await probe[i].co_exec(command("DEL", key));
        conns.close();
        probe.close();
    });
}

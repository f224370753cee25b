// Redlock when primaries fail: a majority killed under a held guard (lost within its validity,
// no_quorum, timeout), one primary slow or stalled behind a fault_proxy (the other two carry
// the lock, at their own pace), primaries restarted empty under a guard (lost only when fewer
// than a majority still hold it), and configurations refused: at construction, or by run_id
// once connected.
#include <colock/locker.hpp>

#include "redlock_fixture.hpp"
#include "test_util.hpp"

#include "lock/store/lock_scripts.hpp"
#include <colock_test/fault_proxy.hpp>
#include <colock_test/primary_set.hpp>
#include <colock_test/redis_server.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

using namespace colock;
using namespace colock::test;
using values = std::vector<std::optional<std::string>>;

namespace {

bool contains(std::string_view text, std::string_view part) {
    return text.find(part) != std::string_view::npos;
}

std::string lowercase(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    return s;
}

std::string endpoint(redis_server const& s) {
    return "127.0.0.1:" + std::to_string(s.port());
}

// The code and message a failing co_try_lock / co_lock threw; a success is a test failure.
struct failure {
    error_code code;
    std::string what;
    long long took_ms = 0;
};

asio::awaitable<failure> try_lock_failure(locker& locks, std::string name, lock_options opt) {
    failure f;
    auto const started = steady::now();
    try {
        auto g = co_await locks.co_try_lock(name, opt);
        FAIL_CHECK("co_try_lock did not fail; got " << (g ? "the lock" : "nothing"));
    } catch (system_error const& e) {
        f.code = e.code();
        f.what = e.what();
    }
    f.took_ms = ms_since(started);
    co_return f;
}

asio::awaitable<failure> lock_failure(locker& locks, std::string name, lock_options opt) {
    failure f;
    auto const started = steady::now();
    try {
        auto g = co_await locks.co_lock(name, opt);
        FAIL_CHECK("co_lock did not fail");
    } catch (system_error const& e) {
        f.code = e.code();
        f.what = e.what();
    }
    f.took_ms = ms_since(started);
    co_return f;
}

} // namespace

// ---------------------------------------------------------------- a majority killed

TEST_CASE("redlock: a majority killed (2 of 3, 3 of 5) under a held guard: lost within its "
          "validity; co_try_lock fails with no_quorum, co_lock with timeout; restarted, it works "
          "again") {
    on_fresh_primaries({{3, 2}, {5, 3}}, [&](primaries_killed sh, primary_set& set) {
        auto const servers = set.servers();
        run_test(
            [&](asio::io_context& ctx) -> asio::awaitable<void> {
                primary_connections conns{ctx.get_executor(), fast_configs(servers)};
                locker locks{conns.primaries()};
                co_await conns.connect_all();
                std::string const name = unique_key("redlock-majority-killed");
                auto const opt = lease(2000ms); // renewed every 667 ms

                auto g = co_await locks.co_lock(name, opt);
                lost_watch w;
                watch(g, w);
                co_await off_thread([&] {
                    for (std::size_t k = 0; k < sh.killed; ++k)
                        set[sh.n - 1 - k].kill();
                });
                auto const killed_at = steady::now();
                // No renewal can reach a majority from here on; one answered just before the
                // kill has been counted after a moment (its replies were in already).
                co_await sleep_for(50ms);
                bool const lost_at_once = g.lost();
                auto const deadline = g.lease_expiry();
                bool const noticed = co_await finishes(w.done, 5000ms);
                REQUIRE(noticed);
                MESSAGE(sh.n << " primaries, " << sh.killed << " killed: lost "
                             << ms_between(killed_at, w.at) << " ms after the kill, "
                             << ms_between(deadline, w.at) << " ms after lease_expiry()");
                CHECK_FALSE(w.ec);
                CHECK(g.lost());
                CHECK_FALSE(g.owns());
                CHECK(g.loss() == loss_reason::expired); // no majority confirmed it in time
                if (!lost_at_once)
                    CHECK(w.at <= deadline + 500ms);
                CHECK(ms_between(killed_at, w.at) < 2000 + 500);
                CHECK_FALSE(co_await g.release());

                // One attempt: too few primaries answer, and the message names those that did
                // not.
                std::string const other = unique_key("redlock-no-quorum");
                auto const tried = co_await try_lock_failure(locks, other, opt);
                INFO(tried.what);
                CHECK(tried.code == colock::error::no_quorum);
                CHECK(contains(tried.what, other));
                for (std::size_t k = 0; k < sh.killed; ++k)
                    CHECK(contains(tried.what, endpoint(set[sh.n - 1 - k])));
                CHECK(tried.took_ms < 5000);

                // A waiting co_lock takes no_quorum as passing, until its wait_timeout.
                lock_options waiting = waiting_up_to(opt, 1500ms);
                auto const waited = co_await lock_failure(locks, other, waiting);
                INFO(waited.what);
                CHECK(waited.code == colock::error::timeout);
                CHECK(waited.took_ms >= 1400);
                CHECK(waited.took_ms < 8000);

                // Back again: the lock works, above every fence given before.
                co_await off_thread([&] {
                    for (std::size_t k = 0; k < sh.killed; ++k)
                        set[sh.n - 1 - k].restart();
                });
                lock_options patient = waiting_up_to(opt, 20'000ms);
                auto g2 = co_await locks.co_lock(name, patient);
                CHECK(g2.owns());
                CHECK(g2.fence() > g.fence());
                CHECK(co_await g2.release());
                conns.close();
            },
            120s);
    });
}

// ------------------------------------------------------- one primary slow or stalled

TEST_CASE("redlock: one primary behind 200 ms of latency, then stalled: the other two carry the "
          "lock, acquisitions are not held up by the slow one, a lease is renewed through a "
          "stall") {
    auto const servers = shared_primaries(3);
    fault_proxy proxy{servers[2]->port()};
    run_test(
        [&](asio::io_context& ctx) -> asio::awaitable<void> {
            std::vector<redis::config> configs;
            configs.push_back(fast_config(*servers[0]));
            configs.push_back(fast_config(*servers[1]));
            configs.push_back(with_fast_timeouts(proxy.config()));
            primary_connections conns_a{ctx.get_executor(), configs};
            primary_connections conns_b{ctx.get_executor(), configs};
            primary_connections probe{ctx.get_executor(), configs_of(servers)}; // direct
            locker a{conns_a.primaries()};
            locker b{conns_b.primaries()};
            co_await conns_a.connect_all();
            co_await conns_b.connect_all();
            co_await probe.connect_all();
            std::string const name = unique_key("redlock-slow-primary");
            std::string const key = lock_key(name);
            auto const opt = lease(5000ms);
            std::int64_t last_fence = 0;

            // One round: a locker takes the lock (timed), the two direct primaries hold it, the
            // other locker is refused promptly, and the lock is given back.
            auto round = [&](locker& who, locker& other) -> asio::awaitable<long long> {
                auto const started = steady::now();
                auto g = co_await who.co_lock(name, opt);
                auto const took = ms_since(started);
                CHECK(g.owns());
                CHECK(g.fence() > last_fence);
                last_fence = g.fence();
                auto held = co_await values_on(probe, key);
                held.resize(2); // the two primaries the slow one is not
                CHECK(count_held(held, g.token()) == 2);
                auto const asked = steady::now();
                auto refused = co_await other.co_try_lock(name, opt);
                CHECK_FALSE(refused.has_value());
                CHECK(ms_since(asked) < 2000);
                auto const unlocking = steady::now();
                bool const released = co_await g.release();
                CHECK(released);
                MESSAGE("acquired in " << took << " ms, released in " << ms_since(unlocking)
                                       << " ms");
                co_return took;
            };

            proxy.set_latency(200ms); // 400 ms a round trip
            long long slowest = 0;
            for (int i = 0; i < 6; ++i)
                slowest = std::max(slowest, co_await round(i % 2 ? a : b, i % 2 ? b : a));
            MESSAGE("200 ms latency: slowest acquisition " << slowest << " ms");
            CHECK(slowest < 1500);

            // Stalled for 6 s at each round: the acquisitions are bounded by the attempt's
            // timeout, not by the stall.
            proxy.set_latency(0ms);
            slowest = 0;
            for (int i = 0; i < 3; ++i) {
                proxy.stall_for(6000ms);
                slowest = std::max(slowest, co_await round(i % 2 ? a : b, i % 2 ? b : a));
            }
            MESSAGE("stalled: slowest acquisition " << slowest << " ms");
            CHECK(slowest < 2000);

            // A short lease held through a stall longer than itself: the two direct primaries
            // confirm each renewal.
            auto g = co_await a.co_lock(name, lease(1500ms));
            CHECK(g.fence() > last_fence);
            lost_watch w;
            watch(g, w);
            proxy.stall_for(4000ms);
            // Two leases' worth.
            CHECK(co_await stays([&] { return g.owns() && !g.lost() && !w.done; }, 3000ms));
            CHECK(g.owns());
            CHECK_FALSE(g.lost());
            CHECK_FALSE(w.done);
            auto held = co_await values_on(probe, key);
            CHECK(count_held(held, g.token()) >= 2);
            for (std::size_t i = 0; i < 2; ++i) {
                auto const pttl = co_await integer(probe[i], command("PTTL", key));
                CHECK(pttl > 0);
                CHECK(pttl <= 1500);
            }
            CHECK(co_await g.release());

            // Once the link is back, no holder's key is left on any primary.
            auto const left = co_await values_become(
                probe, key, [](values const& v) { return count_held(v) == 0; }, 10'000ms);
            CHECK(count_held(left) == 0);
            conns_a.close();
            conns_b.close();
            probe.close();
        },
        180s);
}

// release() waits for every primary asked, but for one that does not answer only briefly past the
// majority's release (250 ms, release_straggler_wait), never for the release's own deadline
// (5 s): a primary black-holed while its connection still looks up, and primaries killed.
TEST_CASE("redlock: release() with a primary black-holed or killed returns true within a short "
          "bound, not the release's deadline; the release reaches it once it is back") {
    auto const servers = shared_primaries(3);
    fault_proxy proxy{servers[2]->port()};
    run_test(
        [&](asio::io_context& ctx) -> asio::awaitable<void> {
            std::vector<redis::config> configs;
            configs.push_back(fast_config(*servers[0]));
            configs.push_back(fast_config(*servers[1]));
            // No health check within the test: the black-holed connection still looks up.
            auto behind = with_fast_timeouts(proxy.config());
            behind.health_check_interval = 60'000ms;
            configs.push_back(behind);
            primary_connections conns{ctx.get_executor(), configs};
            primary_connections probe{ctx.get_executor(), configs_of(servers)}; // direct
            locker locks{conns.primaries()};
            co_await conns.connect_all();
            co_await probe.connect_all();
            std::string const name = unique_key("redlock-unlock-black-hole");
            std::string const key = lock_key(name);
            for (int i = 0; i < 3; ++i) {
                auto g = co_await locks.co_lock(name, lease(10'000ms));
                // Granted once a majority answered: the third grant may still be on its way.
                auto const held = co_await values_become(
                    probe, key, [&](values const& v) { return count_held(v, g.token()) == 3; },
                    2000ms);
                REQUIRE(count_held(held, g.token()) == 3);
                proxy.set_black_hole(true);
                auto const unlocking = steady::now();
                CHECK(co_await g.release());
                auto const took = ms_since(unlocking);
                MESSAGE("one primary black-holed: release() returned in " << took << " ms");
                CHECK(conns[2].is_connected()); // asked, not skipped as down
                CHECK(took < 1000);
                auto const left = co_await values_on(probe, key);
                CHECK(count_held(left, g.token()) == 1); // the black-holed one, until it is back
                proxy.set_black_hole(false);
                // Its connection closed: the release goes again on the next one.
                auto const gone = co_await values_become(
                    probe, key, [&](values const& v) { return count_held(v) == 0; }, 5000ms);
                CHECK(count_held(gone) == 0);
            }
            conns.close();
            probe.close();
        },
        60s);

    on_fresh_primaries({{3, 1}, {5, 2}}, [&](primaries_killed sh, primary_set& set) {
        auto const fresh = set.servers();
        run_test(
            [&](asio::io_context& ctx) -> asio::awaitable<void> {
                primary_connections conns{ctx.get_executor(), fast_configs(fresh)};
                locker locks{conns.primaries()};
                co_await conns.connect_all();
                std::string const name = unique_key("redlock-unlock-killed");
                auto g = co_await locks.co_lock(name, lease(10'000ms));
                co_await off_thread([&] {
                    for (std::size_t k = 0; k < sh.killed; ++k)
                        set[sh.n - 1 - k].kill();
                });
                auto const unlocking = steady::now();
                CHECK(co_await g.release());
                auto const took = ms_since(unlocking);
                MESSAGE(sh.n << " primaries, " << sh.killed << " killed: release() returned in "
                             << took << " ms");
                CHECK(took < 1000);
                conns.close();
            },
            60s);
    });
}

// A round that can no longer be granted still waits for the answers that can tell "held" from
// "too few answered": with one primary down (reconnecting, not asked) and one holder's answer in,
// deciding there would call the third primary silent while its answer is on its way, and a lock
// held on all three would be reported as an error.
TEST_CASE("redlock: a try with one primary down and another slow is refused as held, not failed: "
          "the slow answer is waited for") {
    auto const servers = shared_primaries(3);
    fault_proxy vanishing{servers[0]->port()};
    fault_proxy slow{servers[2]->port()};
    run_test(
        [&](asio::io_context& ctx) -> asio::awaitable<void> {
            primary_connections conns_a{ctx.get_executor(), fast_configs(servers)};
            std::vector<redis::config> configs_b;
            configs_b.push_back(with_fast_timeouts(vanishing.config()));
            configs_b.push_back(fast_config(*servers[1]));
            configs_b.push_back(with_fast_timeouts(slow.config()));
            primary_connections conns_b{ctx.get_executor(), configs_b};
            locker a{conns_a.primaries()};
            locker b{conns_b.primaries()};
            co_await conns_a.connect_all();
            co_await conns_b.connect_all();
            std::string const name = unique_key("redlock-down-and-slow");
            auto g = co_await a.co_lock(name, lease(10'000ms));

            // b's first primary vanishes: its health check gives up and it reconnects in vain.
            vanishing.set_black_hole(true);
            bool const down =
                co_await finishes_when([&] { return !conns_b[0].is_connected(); }, 5000ms);
            REQUIRE(down);
            // 120 ms a round trip: under the health check's 200 ms, and the attempt's 1 s.
            slow.set_latency(60ms);
            auto const asked = steady::now();
            auto refused = co_await b.co_try_lock(name, lease(10'000ms));
            auto const took = ms_since(asked);
            CHECK_FALSE(refused.has_value());
            CHECK(took >= 100);
            CHECK(took < 1000);
            slow.set_latency(0ms);
            vanishing.set_black_hole(false);
            CHECK(co_await g.release());
            conns_a.close();
            conns_b.close();
        },
        60s);
}

// ------------------------------------------- a give-back behind the next round

// A round without a majority gives its grants back in the background; the lock layer's next
// round asks again with the same token. A give-back that ran after that round would take back
// what it granted while the lease still counts the primary. Here the give-back meets NOSCRIPT
// (the primary has the acquire script loaded but not the release script, as after a restart)
// on a primary 300 ms away: sent again after NOSCRIPT, it would arrive after the next round. By
// EVALSHA: a Functions library is loaded whole, so the acquire's call would have loaded the
// release too.
TEST_CASE("redlock: the give-back of a round without a majority never runs after the next round "
          "of the same acquisition (a distant primary that must load the release script)") {
    primary_set set{3};
    fault_proxy proxy{set[0].port()};
    std::string const name = unique_key("redlock-give-back-order");
    std::string const key = lock_key(name);
    set[0].cli(strings("SCRIPT", "FLUSH"));
    set[0].cli(strings("SCRIPT", "LOAD", std::string(colock::detail::acquire_source)));
    run_test(
        [&](asio::io_context& ctx) -> asio::awaitable<void> {
            std::vector<redis::config> configs;
            configs.push_back(with_fast_timeouts(proxy.config()));
            configs.back().health_check_interval = 5000ms; // not cut by its 600 ms round trips
            configs.back().use_functions = false;
            configs.push_back(fast_config(set[1]));
            configs.push_back(fast_config(set[2]));
            primary_connections conns{ctx.get_executor(), configs};
            primary_connections probe{ctx.get_executor(), configs_of(set.servers())}; // direct
            co_await conns.connect_all();
            co_await probe.connect_all();
            locker a{conns.primaries()};
            proxy.set_latency(300ms);
            // Another process holds the lock on primaries 1 and 2 for 300 ms more: the first
            // round fails at once, and gives back primary 0 while its grant is on the way.
            for (std::size_t i : {1, 2})
                co_await probe[i].co_exec(
                    command("SET", key, "H 1 otherowner000000 othertoken 0 0", "PX", "300"));
            auto const started = steady::now();
            auto g = co_await a.co_lock(name, lease(10'000ms));
            auto const took = ms_since(started);
            MESSAGE("acquired after " << took << " ms");
            CHECK(took >= 250); // the first round did fail
            // Primary 0's answers are in (600 ms a round trip, then the give-back's repeat
            // if it were sent again): the last round's grant stands there. (Primary 2 may not
            // be the lease's: the other holder's key there can outlive primary 1's.)
            co_await sleep_for(2000ms);
            auto held = co_await values_on(probe, key);
            CHECK(count_held(held, g.token()) >= 2);
            held.resize(1);
            CHECK(count_held(held, g.token()) == 1);
            CHECK(g.owns());
            proxy.set_latency(0ms);
            CHECK(co_await g.release());
            conns.close();
            probe.close();
        },
        60s);
}

// ------------------------------------------------------------- primaries restarted

TEST_CASE("redlock: a primary restarted empty under a guard held on all three: not lost (two "
          "still hold it); a second one restarted: lost at once, server_replaced") {
    primary_set set{3};
    auto const servers = set.servers();
    auto scenario = [&](primary_connections& conns, primary_connections& conns_other,
                        primary_connections& probe, locker& locks, locker& other,
                        std::string const& name) -> asio::awaitable<void> {
        co_await conns.connect_all();
        co_await conns_other.connect_all();
        std::string const key = lock_key(name);
        // A long lease and no renewal: only the run_ids can tell the holder in time.
        lock_options opt = lease(10'000ms);
        opt.auto_renew = false;

        auto g = co_await locks.co_lock(name, opt);
        auto const on_all = co_await values_become(
            probe, key, [&](values const& v) { return count_held(v, g.token()) == 3; });
        REQUIRE(count_held(on_all, g.token()) == 3);
        lost_watch w;
        watch(g, w);

        co_await off_thread([&] {
            set[0].kill();
            set[0].restart();
        });
        bool const seen =
            co_await finishes_when([&] { return conns[0].server_change_count() == 1; }, 5000ms);
        REQUIRE(seen);
        // Two of three still hold it: the guard stays, and nobody else gets the lock.
        auto refused = co_await other.co_try_lock(name, opt);
        CHECK_FALSE(refused.has_value());
        CHECK(co_await stays([&] { return g.owns() && !g.lost() && !w.done; }, 300ms));
        CHECK(g.owns());
        CHECK_FALSE(g.lost());
        CHECK_FALSE(w.done);
        auto const two = co_await values_on(probe, key);
        CHECK(count_held(two, g.token()) == 2);

        co_await off_thread([&] {
            set[1].kill();
            set[1].restart();
        });
        auto const restarted_at = steady::now();
        auto const told = co_await told_lost_after(w, g, restarted_at, 5000ms);
        MESSAGE("second restart: the holder was told after " << told << " ms");
        CHECK(g.loss() == loss_reason::server_replaced);
        CHECK(told < 3000); // the lease had 10 s

        // The two empty primaries make a majority for the next holder, above the old fence.
        lock_options wait = waiting_up_to(opt, 10'000ms);
        auto g2 = co_await other.co_lock(name, wait);
        CHECK(g2.owns());
        CHECK(g2.fence() > g.fence());
        CHECK_FALSE(co_await g.release());
        CHECK(co_await g2.release());
    };
    run_redlock_test(fast_configs(servers), "redlock-restart", scenario, 90s);
}

// --------------------------------------------------------------- bad configuration

namespace {

// The message of the system_error(invalid_argument) that constructing a Redlock locker over
// `primaries` throws; "" when it throws nothing, "<other>" for anything else.
std::string refusal(std::vector<redis::connection*> const& primaries) {
    try {
        locker refused{primaries};
    } catch (system_error const& e) {
        if (e.code() != colock::error::invalid_argument)
            return "<other code: " + e.code().message() + ">";
        return e.what();
    } catch (...) {
        return "<other exception>";
    }
    return "";
}

} // namespace

TEST_CASE("redlock: a bad set of primaries is refused at construction, naming the problem") {
    asio::io_context ctx;
    auto const servers = shared_primaries(5);
    std::vector<std::unique_ptr<redis::connection>> owned;
    for (auto const* s : servers)
        owned.push_back(std::make_unique<redis::connection>(ctx.get_executor(), s->config()));
    // Another connection object to the first server's endpoint.
    owned.push_back(std::make_unique<redis::connection>(ctx.get_executor(), servers[0]->config()));
    auto* c0 = owned[0].get();
    auto* c1 = owned[1].get();
    auto* c2 = owned[2].get();
    auto* c3 = owned[3].get();
    auto* c4 = owned[4].get();
    auto* c0_again = owned[5].get();

    std::vector<redis::connection*> none;
    std::vector<redis::connection*> one{c0};
    std::vector<redis::connection*> two{c0, c1};
    std::vector<redis::connection*> four{c0, c1, c2, c3};
    std::vector<redis::connection*> with_null{c0, nullptr, c2};
    std::vector<redis::connection*> same_object{c0, c1, c0};
    std::vector<redis::connection*> same_endpoint{c0, c1, c0_again};
    std::vector<redis::connection*> same_endpoint_of_5{c0, c1, c2, c3, c0_again};

    for (auto const* set : {&none, &one, &two}) {
        auto const m = refusal(*set);
        INFO(m);
        CHECK(contains(m, "at least 3"));
    }
    auto const even = refusal(four);
    INFO(even);
    CHECK(contains(lowercase(even), "odd"));

    auto const null = refusal(with_null);
    INFO(null);
    CHECK(contains(lowercase(null), "null"));

    // The same connection twice: named as such (the words may vary).
    auto const twice = lowercase(refusal(same_object));
    INFO(twice);
    CHECK_FALSE(twice.empty());
    CHECK_FALSE(contains(twice, "<other"));
    CHECK(
        (contains(twice, "twice") || contains(twice, "same") || contains(twice, "more than once")));

    // Two connection objects to one endpoint: the message names it.
    for (auto const* set : {&same_endpoint, &same_endpoint_of_5}) {
        auto const m = refusal(*set);
        INFO(m);
        CHECK(contains(m, endpoint(*servers[0])));
    }

    // Good sets are taken.
    CHECK(refusal(std::vector<redis::connection*>{c0, c1, c2}).empty());
    CHECK(refusal(std::vector<redis::connection*>{c0, c1, c2, c3, c4}).empty());
}

TEST_CASE("redlock: the same server behind two endpoints (directly and through a proxy) is found "
          "by its run_id: co_try_lock and co_lock fail with invalid_argument, leaving no lock") {
    auto const servers = shared_primaries(3);
    fault_proxy proxy{servers[0]->port()};
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        std::vector<redis::config> configs;
        configs.push_back(servers[0]->config());
        configs.push_back(servers[1]->config());
        configs.push_back(proxy.config()); // servers[0] again
        primary_connections conns{ctx.get_executor(), configs};
        primary_connections probe{ctx.get_executor(), configs_of(servers)};
        // Distinct endpoints: taken at construction. Once connected, the run_ids tell.
        locker locks{conns.primaries()};
        co_await conns.connect_all();
        std::string const name = unique_key("redlock-same-server");

        auto const tried = co_await try_lock_failure(locks, name, lease(5000ms));
        INFO(tried.what);
        CHECK(tried.code == colock::error::invalid_argument);
        CHECK((contains(tried.what, "same server") || contains(tried.what, "run_id")));

        // Not a passing error: a waiting co_lock fails the same way, long before its timeout.
        lock_options opt = waiting_up_to(lease(5000ms), 5000ms);
        auto const waited = co_await lock_failure(locks, name, opt);
        INFO(waited.what);
        CHECK(waited.code == colock::error::invalid_argument);
        CHECK(waited.took_ms < 4000);

        auto const left = co_await values_become(
            probe, lock_key(name), [](values const& v) { return count_held(v) == 0; });
        CHECK(count_held(left) == 0);
        conns.close();
        probe.close();
    });
}

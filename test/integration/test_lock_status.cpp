// locker::co_status and co_force_unlock against a real redis-server: what status reports for a
// free, held and queued lock and who holds it; the holder record written once per locker, not
// per acquisition; a forced unlock that its holder hears of at once.
#include <colock/lock_observer.hpp>
#include <colock/locker.hpp>

#include "lock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>

#include <unistd.h>

using namespace colock;
using namespace colock::test;

namespace {

std::string this_host() {
    char name[HOST_NAME_MAX + 1] = {};
    ::gethostname(name, sizeof name - 1);
    return name;
}

struct loss_recorder final : lock_observer {
    int losses = 0;
    loss_reason last = loss_reason::not_ours;
    void on_lost(lost_event const& e) override {
        ++losses;
        last = e.reason;
    }
};

asio::awaitable<std::int64_t> pttl(redis::connection& c, std::string const& key) {
    co_return co_await integer(c, command("PTTL", key));
}

} // namespace

TEST_CASE("status: a lock never used is free, with no fence, holder or queue") {
    run_with_locker(shared_server().config(), [&](locker& locks) -> asio::awaitable<void> {
        auto const st = co_await locks.co_status(unique_key("status-never"));
        CHECK(st.state == lock_state::free);
        CHECK_FALSE(st.held());
        CHECK(st.fence == 0);
        CHECK(st.ttl == 0ms);
        CHECK(st.holder_id.empty());
        CHECK(st.token.empty());
        CHECK_FALSE(st.since);
        CHECK_FALSE(st.holder);
        CHECK(st.queued == 0);
        CHECK(to_string(st.state) == "free");
    });
}

TEST_CASE("status: a held lock names its holder's locker, token, fence, lease and process, "
          "counts the processes queued, and reads free with its fence after the release") {
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = shared_server().config();
        cfg.client_name = "status-holder";
        redis::connection conn{ctx.get_executor(), cfg};
        redis::connection other_conn{ctx.get_executor(), shared_server().config()};
        redis::connection probe{ctx.get_executor(), shared_server().config()};
        locker locks{conn};
        locker other{other_conn};
        locker looker{probe};
        std::string const name = unique_key("status-held");

        auto const before = std::chrono::system_clock::now();
        auto g = co_await locks.co_lock(name, lease(10'000ms));
        auto const after = std::chrono::system_clock::now();
        auto st = co_await looker.co_status(name);
        CHECK(st.name == name);
        CHECK(st.state == lock_state::held);
        CHECK(st.held());
        CHECK(st.holder_id == locks.id());
        CHECK(st.holder_id != looker.id());
        CHECK(st.token == g.token());
        CHECK(st.fence == g.fence());
        CHECK(st.ttl > 8'000ms);
        CHECK(st.ttl <= 10'000ms);
        REQUIRE(st.since);
        CHECK(*st.since >= before - 1ms);
        CHECK(*st.since <= after + 1ms);
        REQUIRE(st.holder);
        CHECK(st.holder->pid == ::getpid());
        CHECK(st.holder->host == this_host());
        CHECK(st.holder->client_name == "status-holder");
        CHECK_FALSE(st.holder->program.empty());
        CHECK(st.holder->started <= after);
        CHECK(st.holder->started > before - 60s);
        CHECK(st.queued == 0);

        // Another process (locker) waits: it is counted once, however many of its calls wait.
        int waiters_done = 0;
        for (int i = 0; i < 2; ++i)
            asio::co_spawn(ctx, take_and_give_back(other, name),
                           check_nothrow_then_mark(waiters_done));
        std::size_t queued = 0;
        co_await eventually(
            [&]() -> asio::awaitable<bool> {
                queued = (co_await looker.co_status(name)).queued;
                co_return queued == 1;
            },
            3000ms);
        CHECK(queued == 1);
        CHECK(other.waiting() == 2);

        CHECK(co_await g.release());
        bool const both = co_await finishes_when([&] { return waiters_done == 2; }, 5000ms);
        REQUIRE(both);
        st = co_await looker.co_status(name);
        CHECK(st.state == lock_state::free);
        CHECK(st.fence > g.fence()); // the waiters' fences are kept
        CHECK(st.ttl > 0ms);
        CHECK(st.holder_id.empty());
        CHECK_FALSE(st.holder);
        CHECK(st.queued == 0);
        conn.close();
        other_conn.close();
        probe.close();
    });
}

TEST_CASE("status: the holder record is written once for many acquisitions, outlives the "
          "lease, and costs no server call per acquisition") {
    auto scenario = [&](redis::connection&, redis::connection& probe, locker& locks,
                        std::string const& name) -> asio::awaitable<void> {
        std::string const record = "colock:locker:" + locks.id();

        // Warm: the first lease writes the record and subscribes for forced unlocks.
        auto first = co_await locks.co_lock(name, lease(5'000ms));
        CHECK(co_await first.release());
        bool const written = co_await exists_becomes(probe, record, 1, 2000ms);
        REQUIRE(written);
        auto const record_ttl = co_await pttl(probe, record);
        CHECK(record_ttl > 5'000 + 60'000);

        auto const stats_before = co_await commandstats(probe);
        for (int i = 0; i < 20; ++i) {
            auto g = co_await locks.co_lock(name, lease(5'000ms));
            CHECK(co_await g.release());
        }
        auto const stats_after = co_await commandstats(probe);
        // 20 acquires and 20 releases, one call each from the client; the record is not
        // written again.
        CHECK(script_calls(stats_after) - script_calls(stats_before) == 40);
        CHECK(command_calls(stats_after, "hset") == command_calls(stats_before, "hset"));
        CHECK(command_calls(stats_after, "pexpire") - command_calls(stats_before, "pexpire") == 0);

        // extend() to a lease longer than the record was written for: the record outlives it.
        auto no_renewal = lease(5'000ms);
        no_renewal.auto_renew = false; // so that only extend() can have written it
        auto long_held = co_await locks.co_lock(name, no_renewal);
        CHECK(co_await long_held.extend(3'600'000ms));
        std::int64_t extended_ttl = 0;
        for (auto const end = steady::now() + 2000ms;
             extended_ttl <= 3'600'000 && steady::now() < end;) {
            co_await sleep_for(5ms);
            extended_ttl = co_await pttl(probe, record);
        }
        CHECK(extended_ttl > 3'600'000);
        CHECK(co_await long_held.release());
    };
    run_lock_test<one_locker>("status-record", scenario);
}

TEST_CASE("force unlock: the holder hears of it at once, nobody takes the lock for the "
          "quarantine, then another gets it with a higher fence") {
    auto scenario = [&](redis::connection&, redis::connection&, redis::connection& probe,
                        locker& locks, locker& other,
                        std::string const& name) -> asio::awaitable<void> {
        auto const seen = std::make_shared<loss_recorder>();
        locks.set_observer(seen);

        // A 30 s lease renews every 10 s: only the message can tell the holder within a second.
        auto g = co_await locks.co_lock(name, lease(30'000ms));
        // Its subscription for forced unlocks is confirmed.
        REQUIRE(co_await numsub_becomes(probe, "colock:locker:" + locks.id(), 1) == 1);
        CHECK_FALSE(g.loss());
        auto const forced_at = steady::now();
        CHECK(co_await other.co_force_unlock(name));
        co_await g.wait_lost();
        CHECK(ms_since(forced_at) < 1000);
        CHECK(g.lost());
        CHECK_FALSE(g.owns());
        CHECK(seen->losses == 1);
        CHECK(seen->last == loss_reason::forced);
        CHECK(g.loss() == loss_reason::forced);

        // Handed to nobody for a while: a try fails, a wait succeeds after it.
        auto st = co_await other.co_status(name);
        CHECK(st.state == lock_state::handed);
        CHECK(st.holder_id.empty());
        CHECK(st.ttl <= 1000ms);
        auto t = co_await other.co_try_lock(name, lease(10'000ms));
        CHECK_FALSE(t.has_value());
        lock_options wait_opt = waiting_up_to(lease(10'000ms), 5000ms);
        auto taken = co_await other.co_lock(name, wait_opt);
        CHECK(ms_since(forced_at) >= 900);
        CHECK(taken.fence() > g.fence());

        // The old holder's unlock reports the loss and leaves the new holder alone.
        CHECK_FALSE(co_await g.release());
        co_await sleep_for(50ms);
        st = co_await other.co_status(name);
        CHECK(st.state == lock_state::held);
        CHECK(st.token == taken.token());
        CHECK(co_await taken.release());

        // Nothing to end: false.
        CHECK_FALSE(co_await other.co_force_unlock(name));
        CHECK_FALSE(co_await other.co_force_unlock(unique_key("force-never")));
    };
    run_lock_test<two_lockers>("force", scenario);
}

TEST_CASE("force unlock: a waiter of the holder's process is not handed the ended lease; it "
          "gets the lock from the server after the quarantine") {
    auto scenario = [&](asio::io_context& ctx, redis::connection&, redis::connection&,
                        redis::connection&, locker& locks, locker& other,
                        std::string const& name) -> asio::awaitable<void> {
        auto g = co_await locks.co_lock(name, lease(30'000ms));
        std::int64_t waiter_fence = 0;
        steady::time_point waiter_got{};
        bool waiter_done = false;
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> {
                lock_options opt = waiting_up_to(lease(10'000ms), 10'000ms);
                auto w = co_await locks.co_lock(name, opt);
                waiter_fence = w.fence();
                waiter_got = steady::now();
                co_await w.release();
            },
            check_nothrow_then_mark(waiter_done));
        co_await until_one_waiting(locks);

        auto const forced_at = steady::now();
        CHECK(co_await other.co_force_unlock(name));
        co_await g.wait_lost();
        // The holder lets go at once: its lease must not go on to the waiter.
        CHECK_FALSE(co_await g.release());
        bool const done = co_await finishes(waiter_done, 8000ms);
        REQUIRE(done);
        CHECK(ms_between(forced_at, waiter_got) >= 900);
        CHECK(waiter_fence > g.fence());
    };
    run_lock_test<two_lockers>("force-cohort", scenario);
}

TEST_CASE("status and force unlock refuse a bad name when awaited, and name a key that is not "
          "a lock's") {
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), shared_server().config()};
        locker locks{conn};
        auto status_of_nothing = locks.co_status("");
        try {
            co_await std::move(status_of_nothing);
            FAIL("an empty name was accepted");
        } catch (boost::system::system_error const& e) {
            CHECK(e.code() == error::invalid_argument);
        }
        try {
            co_await locks.co_force_unlock(std::string(max_lock_name_length + 1, 'x'));
            FAIL("an oversized name was accepted");
        } catch (boost::system::system_error const& e) {
            CHECK(e.code() == error::invalid_argument);
        }

        std::string const name = unique_key("status-garbage");
        co_await integer(conn, command("RPUSH", lock_key(name), "x")); // not even a string
        try {
            co_await locks.co_status(name);
            FAIL("a list read as a lock");
        } catch (boost::system::system_error const& e) {
            CHECK(std::string(e.what()).find(name) != std::string::npos);
        }
        co_await integer(conn, command("DEL", lock_key(name)));
        co_await conn.co_exec(command("SET", lock_key(name), "hello world"));
        auto [ec, st] = co_await locks.async_status(name, as_tuple);
        CHECK(ec == error::unexpected_reply);
        try {
            co_await locks.co_status(name);
            FAIL("a value by hand read as a lock");
        } catch (boost::system::system_error const& e) {
            CHECK(e.code() == error::unexpected_reply);
            CHECK(std::string(e.what()).find(lock_key(name)) != std::string::npos);
        }
        CHECK_FALSE(co_await locks.co_force_unlock(name)); // not a lease: nothing to end
        co_await integer(conn, command("DEL", lock_key(name)));
        conn.close();
    });
}

TEST_CASE("status and force unlock with completion tokens: the async forms") {
    run_with_locker(shared_server().config(), [&](locker& locks) -> asio::awaitable<void> {
        std::string const name = unique_key("status-async");
        auto g = co_await locks.co_lock(name, lease(10'000ms));
        auto [ec, st] = co_await locks.async_status(name, as_tuple);
        CHECK_FALSE(ec);
        CHECK(st.token == g.token());
        auto [fec, ended] = co_await locks.async_force_unlock(name, as_tuple);
        CHECK_FALSE(fec);
        CHECK(ended);
        co_await g.wait_lost();
        CHECK(g.lost());
    });
}

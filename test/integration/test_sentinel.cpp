// The connection and the locker through Redis Sentinel, against a real deployment the fixture
// starts: a primary, a replica and three redis-sentinel processes. Failovers are real:
// SENTINEL FAILOVER, and a killed primary.
#include <colock/election.hpp>
#include <colock/functions_library.hpp>
#include <colock/locker.hpp>
#include <colock/redis/connection.hpp>
#include <colock/rw_lock.hpp>
#include <colock/semaphore.hpp>

#include "election_fixture.hpp"
#include "lock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/redis_server.hpp>
#include <colock_test/sentinel_set.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <fmt/format.h>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>

using namespace colock;
using namespace colock::test;

namespace {

// The set's config with the short timeouts of fast_config.
redis::config sentinel_config(sentinel_set const& set) {
    return with_fast_timeouts(redis::config::from_url(set.url()));
}

// The port of the server a connection reached, from its own INFO.
asio::awaitable<int> reached_port(redis::connection& c) {
    auto [ec, r] = co_await c.async_exec(command("INFO", "server"), as_tuple);
    REQUIRE_FALSE(ec);
    auto const text = std::string(r.at(0).as_string().value_or(""));
    auto const at = text.find("tcp_port:");
    REQUIRE(at != std::string::npos);
    co_return std::stoi(text.substr(at + 9));
}

std::string connect_failure(redis::config cfg) {
    std::string message;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), cfg};
        try {
            co_await conn.co_connect();
            message = "connected";
        } catch (redis::connect_error const& e) {
            message = e.what();
            CHECK(e.code().category() == redis::error_category());
        }
        conn.close();
    });
    return message;
}

// A sentinel set, its primary found: the port it had before a test moves it.
struct sentinel_primary {
    sentinel_set set;
    std::uint16_t const old_port = set.wait_for_primary(5s);
};

} // namespace

TEST_CASE("sentinel: the connection goes to the primary the sentinels name, and locks work "
          "there") {
    sentinel_set set;
    auto const primary_port = set.wait_for_primary(5s);
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), sentinel_config(set)};
        co_await conn.co_connect();
        CHECK(co_await reached_port(conn) == primary_port);
        CHECK(conn.last_error_text().empty());

        locker locks{conn};
        std::string const name = unique_key("sentinel-basic");
        auto guard = co_await locks.co_lock(name, lease(10s));
        CHECK(guard.owns());
        CHECK(guard.fence() > 0);
        // The lease is on the primary (and replicated to the replica).
        CHECK_FALSE(lock_key_free(set.node_on(primary_port), lock_key(name)));
        CHECK(co_await guard.release());
        CHECK(lock_key_free(set.node_on(primary_port), lock_key(name)));

        // An election on the primary: a leader, its value seen by a watch, its resign.
        election e{locks, name};
        auto watch = co_await watch_from_nobody(e);
        auto lead = co_await e.co_campaign("here", lease(10s));
        auto const c = co_await next_change(watch);
        CHECK(c.value == "here");
        CHECK(c.term == lead.term());
        CHECK(holds_key(set.node_on(primary_port), election_key(name) + ":e"));
        CHECK(co_await lead.release());
        CHECK_FALSE((co_await next_change(watch)).leading);
        conn.close();
    });
}

TEST_CASE_FIXTURE(
    sentinel_primary,
    "sentinel: SENTINEL FAILOVER: a held guard is lost at once, the waiter gets the lock "
    "on the new primary with a higher fence") {
    run_test(
        [&](asio::io_context& ctx) -> asio::awaitable<void> {
            // Two connections: two processes, each with its own view of the failover.
            redis::connection conn_a{ctx.get_executor(), sentinel_config(set)};
            redis::connection conn_b{ctx.get_executor(), sentinel_config(set)};
            locker a{conn_a};
            locker b{conn_b};
            std::string const name = unique_key("sentinel-failover");
            auto held = co_await a.co_lock(name, lease(30s));
            auto const held_fence = held.fence();
            // A permit and a read lock held there too: leases like the guard's.
            semaphore sem_a{a, name, 1};
            auto permit_held = co_await sem_a.co_acquire(lease(30s));
            rw_lock rw_a{a, name};
            auto reading = co_await rw_a.co_lock_shared(lease(30s));
            // And a lock set.
            std::vector<std::string> const pair{name + "-x", name + "-y"};
            auto both = co_await a.co_lock_all(pair, lease(30s));

            struct waiter_result {
                bool done = false;
                std::uint64_t fence = 0;
                std::string error;
                std::optional<lock_guard> guard;
            };
            auto waiting = std::make_shared<waiter_result>();
            auto opt = lease(30s);
            opt.wait_timeout = 25s;
            asio::co_spawn(
                ctx,
                [&b, name, opt, waiting]() -> asio::awaitable<void> {
                    try {
                        auto g = co_await b.co_lock(name, opt);
                        waiting->fence = g.fence();
                        waiting->guard.emplace(std::move(g));
                    } catch (std::exception const& e) {
                        waiting->error = e.what();
                    }
                    waiting->done = true;
                },
                asio::detached);
            co_await until_one_waiting(b);
            CHECK_FALSE(waiting->done);

            auto const new_port = co_await off_thread([&] { return set.failover(15s); });
            auto const switched = steady::now();
            CHECK(new_port != old_port);
            // The old primary stays a primary for seconds after the switch; the connection
            // follows +switch-master rather than waiting for it to be demoted.
            CHECK(co_await finishes_when([&] { return held.lost(); }, 3000ms));
            MESSAGE("guard lost " << ms_since(switched) << " ms after the sentinels agreed");
            CHECK(held.loss() == loss_reason::server_replaced);
            CHECK(co_await reached_port(conn_a) == new_port);
            CHECK(co_await finishes_when([&] { return permit_held.lost() && reading.lost(); },
                                         3000ms));
            CHECK(permit_held.loss() == loss_reason::server_replaced);
            CHECK(reading.loss() == loss_reason::server_replaced);
            CHECK(co_await finishes_when([&] { return both.lost(); }, 3000ms));
            CHECK(both.loss() == loss_reason::server_replaced);
            CHECK_FALSE(co_await both.release());
            auto both_new = co_await b.co_lock_all(pair, waiting_up_to(lease(30s), 10s));
            CHECK(both_new.fence(pair[0]) > both.fence(pair[0]));
            CHECK(both_new.fence(pair[1]) > both.fence(pair[1]));
            CHECK(co_await both_new.release());
            // Released, the replica's copies go: the new primary grants them anew.
            CHECK_FALSE(co_await permit_held.release());
            CHECK_FALSE(co_await reading.release());
            semaphore sem_b{b, name, 1};
            auto permit_new = co_await sem_b.co_acquire(waiting_up_to(lease(30s), 10s));
            CHECK(permit_new.fence() > permit_held.fence());
            CHECK(co_await permit_new.release());
            rw_lock rw_b{b, name};
            auto writing = co_await rw_b.co_lock(waiting_up_to(lease(30s), 10s));
            CHECK(writing.owns());
            CHECK(co_await writing.release());

            // The replica had the lease: the waiter gets it once the lost guard lets go.
            CHECK_FALSE(co_await held.release());
            CHECK(co_await finishes_when([&] { return waiting->done; }, 10000ms));
            CHECK(waiting->error.empty());
            CHECK(waiting->fence > held_fence);
            CHECK(co_await reached_port(conn_b) == new_port);
            REQUIRE(waiting->guard);
            CHECK_FALSE(lock_key_free(set.node_on(new_port), lock_key(name)));
            CHECK(co_await waiting->guard->release());

            // The scripts ran as Redis Functions, and the library came with the data: the new
            // primary, a replica until the failover, had it from its primary (a FUNCTION LOAD
            // it ran as a replica), and was never asked to load it again (which it would have
            // refused: "already exists").
            auto const info = set.node_on(new_port).cli({"INFO", "commandstats"});
            CHECK(command_calls(info, "fcall") > 0);
            if (auto const loads = info.find("cmdstat_function|load:");
                loads != std::string::npos) {
                auto const line = info.substr(loads, info.find('\n', loads) - loads);
                INFO(line);
                auto const failed = line.find("failed_calls=");
                REQUIRE(failed != std::string::npos);
                CHECK(std::stoll(line.substr(failed + 13)) == 0);
            }
            CHECK_FALSE(set.node_on(new_port)
                            .cli({"FUNCTION", "LIST", "LIBRARYNAME",
                                  functions_library_for(sentinel_config(set)).name})
                            .empty());
            CHECK(command_calls(info, "evalsha") == 0);
            CHECK(command_calls(info, "eval") == 0);
            conn_a.close();
            conn_b.close();
        },
        90s);
}

TEST_CASE_FIXTURE(
    sentinel_primary,
    "sentinel: a killed primary: the guard is lost after the failover, and new locks work "
    "on the promoted replica") {
    run_test(
        [&](asio::io_context& ctx) -> asio::awaitable<void> {
            redis::connection conn{ctx.get_executor(), sentinel_config(set)};
            locker locks{conn};
            std::string const name = unique_key("sentinel-kill");
            auto held = co_await locks.co_lock(name, lease(30s));
            auto const held_fence = held.fence();
            // Let the replica have the lease before the primary goes.
            CHECK(co_await integer(conn, command("WAIT", 1, 2000)) >= 1);

            co_await off_thread([&] { set.node_on(old_port).kill(); });
            auto const new_port =
                co_await off_thread([&] { return set.wait_for_new_primary(old_port, 30s); });
            CHECK(co_await finishes_when([&] { return held.lost(); }, 5000ms));
            CHECK(held.loss() == loss_reason::server_replaced);
            CHECK_FALSE(co_await held.release());

            auto opt = lease(10s);
            opt.wait_timeout = 10s;
            auto next = co_await locks.co_lock(name, opt);
            CHECK(next.fence() > held_fence);
            CHECK(co_await reached_port(conn) == new_port);
            CHECK(co_await next.release());
            conn.close();
        },
        90s);
}

TEST_CASE("sentinel: failures to find the primary name every sentinel and what it said") {
    sentinel_set set;
    SUBCASE("a master name the sentinels do not monitor") {
        auto cfg = sentinel_config(set);
        cfg.sentinel.master_name = "nosuch";
        auto const message = connect_failure(cfg);
        INFO(message);
        CHECK(message.find("asking the sentinels") != std::string::npos);
        for (std::size_t i = 0; i < set.sentinel_count(); ++i)
            CHECK(message.find("sentinel 127.0.0.1:" + std::to_string(set.sentinel(i).port()) +
                               ": does not monitor a master named 'nosuch'") != std::string::npos);
    }
    SUBCASE("no sentinel reachable") {
        auto cfg = sentinel_config(set);
        cfg.sentinel.sentinels = {{"127.0.0.1", unused_port()}, {"127.0.0.1", unused_port()}};
        auto const message = connect_failure(cfg);
        INFO(message);
        CHECK(message.find("sentinel 127.0.0.1:" + std::to_string(cfg.sentinel.sentinels[0].port) +
                           ": ") != std::string::npos);
        CHECK(message.find("sentinel 127.0.0.1:" + std::to_string(cfg.sentinel.sentinels[1].port) +
                           ": ") != std::string::npos);
    }
    SUBCASE("a dead sentinel first: the next one answers") {
        auto cfg = sentinel_config(set);
        cfg.sentinel.sentinels.insert(cfg.sentinel.sentinels.begin(), {"127.0.0.1", unused_port()});
        CHECK(connect_failure(cfg) == "connected");
    }
    SUBCASE("a sentinel that names a replica: ROLE refuses it") {
        // A sentinel monitoring the replica under another name answers with the replica's
        // address; the connection asks the server itself.
        redis_server_options o;
        o.sentinel_master_name = "wrong";
        o.sentinel_primary_port = set.node(1).port();
        o.sentinel_quorum = 1;
        redis_server misled{o};
        auto cfg = sentinel_config(set);
        cfg.sentinel.sentinels = {{"127.0.0.1", misled.port()}};
        cfg.sentinel.master_name = "wrong";
        auto const message = connect_failure(cfg);
        INFO(message);
        CHECK(message.find("(ROLE)") != std::string::npos);
        CHECK(message.find("but it is a slave") != std::string::npos);
    }
}

TEST_CASE("sentinel: the data nodes' password and the sentinels' own, each checked where it "
          "belongs") {
    sentinel_set_options o;
    o.data_password = "data-pw";
    o.sentinel_password = "sentinel-pw";
    sentinel_set set{o};
    auto const primary_port = set.wait_for_primary(5s);

    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), sentinel_config(set)};
        co_await conn.co_connect();
        CHECK(co_await reached_port(conn) == primary_port);
        locker locks{conn};
        auto guard = co_await locks.co_lock(unique_key("sentinel-auth"), lease(5s));
        CHECK(co_await guard.release());
        conn.close();
    });

    auto wrong_sentinel_password = sentinel_config(set);
    wrong_sentinel_password.sentinel.password = "nope";
    auto message = connect_failure(wrong_sentinel_password);
    INFO(message);
    for (std::size_t i = 0; i < set.sentinel_count(); ++i)
        CHECK(message.find("sentinel 127.0.0.1:" + std::to_string(set.sentinel(i).port()) +
                           ": HELLO refused: WRONGPASS") != std::string::npos);
    CHECK(message.find("nope") == std::string::npos);

    auto no_sentinel_password = sentinel_config(set);
    no_sentinel_password.sentinel.password.clear();
    message = connect_failure(no_sentinel_password);
    CHECK(message.find("HELLO refused: NOAUTH") != std::string::npos);

    // The sentinels answer; the primary refuses.
    auto wrong_data_password = sentinel_config(set);
    wrong_data_password.password = "nope";
    message = connect_failure(wrong_data_password);
    CHECK(message.find(fmt::format("primary 'mymaster' at 127.0.0.1:{} (HELLO): WRONGPASS",
                                   primary_port)) != std::string::npos);
}

TEST_CASE("sentinel: over TLS, to the sentinels and to the primary, verified with one CA") {
    sentinel_set_options o;
    o.tls = true;
    sentinel_set set{o};
    auto const primary_port = set.wait_for_primary(5s);
    auto cfg = set.config();
    REQUIRE(cfg.use_tls);
    REQUIRE(cfg.tls_verify_peer);
    CHECK(cfg.to_redacted_url().starts_with("rediss-sentinel://"));
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), cfg};
        co_await conn.co_connect();
        // The sentinels name the primary's TLS port, so that is where the connection went.
        CHECK(co_await reached_port(conn) == set.node_on(primary_port).port());
        CHECK(primary_port == set.node_on(primary_port).tls_port());
        locker locks{conn};
        auto guard = co_await locks.co_lock(unique_key("sentinel-tls"), lease(5s));
        CHECK(co_await guard.release());
        conn.close();
    });
    // The system's CAs, which did not sign the sentinels' certificates: every sentinel fails
    // verification.
    auto untrusted = cfg;
    untrusted.tls_ca_file.clear();
    auto const message = connect_failure(untrusted);
    INFO(message);
    for (std::size_t i = 0; i < set.sentinel_count(); ++i)
        CHECK(message.find("sentinel 127.0.0.1:" + std::to_string(set.sentinel(i).tls_port()) +
                           ": certificate verify failed") != std::string::npos);
}

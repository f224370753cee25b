// Holding a lock against a real redis-server: renewal keeps a short key alive past its ttl,
// a key changed from outside is noticed and left alone, max_hold lets the key expire on the
// server's clock, a server restart, stop, partition or reconnection never leaves two owners, and
// unlock and extend act on the real key. The renewal's timing, the guard's move, destruction
// and wait_lost, and unlock from a cancelled caller are unit-tested without a server
// (test_orchestration.cpp, test_virtual_time.cpp).
#include <colock/election.hpp>
#include <colock/locker.hpp>

#include "election_fixture.hpp"
#include "lock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/write.hpp>

#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace colock;
using namespace colock::test;

namespace {

lock_options renewing_lease(std::chrono::milliseconds ttl, std::chrono::milliseconds renew) {
    lock_options opt;
    opt.ttl = ttl;
    opt.renew_interval = renew;
    return opt;
}

// A TCP relay in front of the server that can be frozen: while frozen it forwards nothing in
// either direction, as a network partition of the clients that go through it. The server and
// every other client carry on.
class relay {
public:
    relay(asio::any_io_executor ex, std::uint16_t server_port)
        : state_(std::make_shared<state>(ex)) {
        state_->server_port = server_port;
        asio::co_spawn(ex, accept_loop(state_), asio::detached);
    }
    ~relay() { close(); }
    relay(relay const&) = delete;
    relay& operator=(relay const&) = delete;

    std::uint16_t port() const { return state_->acceptor.local_endpoint().port(); }
    void freeze() { state_->frozen = true; }
    void close() {
        state_->stopped = true;
        error_code ignored;
        state_->acceptor.close(ignored);
        for (auto& s : state_->sockets)
            s->close(ignored);
    }

private:
    using socket = asio::ip::tcp::socket;
    struct state {
        explicit state(asio::any_io_executor ex)
            : acceptor(ex, {asio::ip::make_address("127.0.0.1"), 0}) {}
        asio::ip::tcp::acceptor acceptor;
        std::uint16_t server_port = 0;
        bool frozen = false;
        bool stopped = false;
        std::vector<std::shared_ptr<socket>> sockets;
    };

    static asio::awaitable<void> accept_loop(std::shared_ptr<state> st) {
        auto ex = co_await asio::this_coro::executor;
        for (;;) {
            auto client = std::make_shared<socket>(ex);
            auto [ec] = co_await st->acceptor.async_accept(*client, as_tuple);
            if (ec || st->stopped)
                co_return;
            auto server = std::make_shared<socket>(ex);
            auto [cec] = co_await server->async_connect(
                {asio::ip::make_address("127.0.0.1"), st->server_port}, as_tuple);
            if (cec)
                continue;
            st->sockets.push_back(client);
            st->sockets.push_back(server);
            asio::co_spawn(ex, pump(st, client, server), asio::detached);
            asio::co_spawn(ex, pump(st, server, client), asio::detached);
        }
    }

    static asio::awaitable<void> pump(std::shared_ptr<state> st, std::shared_ptr<socket> from,
                                      std::shared_ptr<socket> to) {
        std::array<char, 16384> buf;
        for (;;) {
            auto [ec, n] = co_await from->async_read_some(asio::buffer(buf), as_tuple);
            // Hold what was read: nothing gets through.
            co_await eventually([&] { return !st->frozen || st->stopped; }, std::chrono::hours{1},
                                10ms);
            if (ec || st->stopped) {
                error_code ignored;
                to->shutdown(socket::shutdown_send, ignored);
                co_return;
            }
            auto [wec, written] = co_await asio::async_write(*to, asio::buffer(buf, n), as_tuple);
            (void)written;
            if (wec)
                co_return;
        }
    }

    std::shared_ptr<state> state_;
};

} // namespace

TEST_CASE("renewal: a 300 ms lease held for three ttls stays ours") {
    auto scenario = [](redis::connection&, redis::connection&, redis::connection& probe,
                       locker& locks, locker& other,
                       std::string const& name) -> asio::awaitable<void> {
        lock_options opt;
        opt.ttl = 300ms; // renewed every 100 ms by default
        auto g = co_await locks.co_lock(name, opt);
        lost_watch w;
        watch(g, w);

        for (int i = 0; i < 3; ++i) {
            CHECK(co_await stays([&] { return g.owns() && !w.done; }, 300ms));
            auto taken = co_await other.co_try_lock(name, opt);
            CHECK_FALSE(taken.has_value());
        }
        CHECK(g.owns());
        CHECK_FALSE(g.lost());
        CHECK_FALSE(w.done);
        auto const held = co_await held_by(probe, name);
        CHECK(held == g.token());
        auto const pttl = co_await integer(probe, command("PTTL", lock_key(name)));
        CHECK(pttl > 0);
        CHECK(pttl <= 300);

        CHECK(co_await g.release());
        // A pending wait_lost ends when the guard lets go, and says it was not a loss.
        bool const ended = co_await finishes(w.done, 1000ms);
        CHECK(ended);
        CHECK(w.ec == error::not_held);
        CHECK_FALSE(g.lost());
    };
    run_lock_test<two_lockers>("renew", scenario);
}

TEST_CASE("the key overwritten from outside: lost, and the new value is left alone") {
    auto scenario = [](redis::connection&, redis::connection& probe, locker& locks,
                       std::string const& name) -> asio::awaitable<void> {
        {
            auto g = co_await locks.co_lock(name, renewing_lease(1000ms, 150ms));
            lost_watch w;
            watch(g, w);
            co_await probe.co_exec(command("SET", lock_key(name), "someone-else", "PX", "10000"));
            auto const set_at = steady::now();
            bool const noticed = co_await finishes(w.done, 3000ms);
            REQUIRE(noticed);
            CHECK(ms_between(set_at, w.at) < 150 + 450);
            CHECK(g.lost());
            CHECK_FALSE(g.owns());
            bool const extended = co_await g.extend(5000ms);
            CHECK_FALSE(extended);
            CHECK_FALSE(co_await g.release());
            auto const value = co_await get(probe, lock_key(name));
            CHECK(value == "someone-else");
        }
        // The guard is gone too (it had nothing to release); the other value stays.
        CHECK(co_await stays(
            [&]() -> asio::awaitable<bool> {
                co_return co_await get(probe, lock_key(name)) == "someone-else";
            },
            300ms));
        auto const value = co_await get(probe, lock_key(name));
        CHECK(value == "someone-else");
        auto const pttl = co_await integer(probe, command("PTTL", lock_key(name)));
        CHECK(pttl > 8000); // not re-armed with our ttl either
    };
    run_lock_test<one_locker>("overwritten", scenario);
}

TEST_CASE("max_hold stops renewal: the key expires about ttl after it and the guard reports "
          "lost") {
    auto scenario = [](redis::connection&, redis::connection& probe, locker& locks,
                       std::string const& name) -> asio::awaitable<void> {
        lock_options opt = renewing_lease(300ms, 100ms);
        opt.max_hold = 600ms;
        auto const started = steady::now();
        auto g = co_await locks.co_lock(name, opt);
        lost_watch w;
        watch(g, w);

        // Past the first ttl: alive only because it was renewed.
        CHECK(co_await stays([&] { return g.owns() && !w.done; }, 450ms));
        auto const alive = co_await integer(probe, command("EXISTS", lock_key(name)));
        CHECK(alive == 1);
        CHECK(g.owns());
        CHECK_FALSE(w.done);

        // Renewals stop at 600 ms; the last lease runs out by ~900 ms.
        auto const lost_after = co_await told_after(w, started, 3000ms);
        MESSAGE("max_hold 600 ms, ttl 300 ms: lost after " << lost_after << " ms");
        CHECK_FALSE(w.ec);
        CHECK(g.lost());
        CHECK(lost_after >= 550);
        CHECK(lost_after < 600 + 300 + 600);
        // The server's copy runs out at about the same time (the local deadline is the
        // earlier of the two).
        auto const gone = co_await exists_becomes(probe, lock_key(name), 0, 500ms);
        CHECK(gone == 0);
        CHECK_FALSE(co_await g.release());
    };
    run_lock_test<one_locker>("max-hold", scenario);
}

TEST_CASE("server restart while held: the holder ends lost, never beside a second owner") {
    redis_server server;
    auto scenario = [&](redis::connection&, redis::connection&, redis::connection& probe,
                        locker& locks, locker& other,
                        std::string const& name) -> asio::awaitable<void> {
        lock_options opt = renewing_lease(500ms, 150ms);
        lost_watch w;
        auto g = co_await watched_hold(locks, name, opt, w, 200ms);

        // The restarted server is empty (no persistence): the lock is free for anyone.
        server.kill();
        server.restart();
        auto const restarted_at = steady::now();
        lock_options wait = waiting_up_to(opt, 5000ms);
        auto g2 = co_await other.co_lock(name, wait);
        auto const acquired_at = steady::now();
        CHECK(g2.owns());

        // The first holder must find out: its renewal sees a key that is not its own (or no
        // renewal succeeds before its local lease deadline).
        bool const noticed = co_await finishes(w.done, 3000ms);
        REQUIRE(noticed);
        MESSAGE("restart: second owner after " << ms_between(restarted_at, acquired_at)
                                               << " ms, first reported lost after "
                                               << ms_between(restarted_at, w.at) << " ms");
        CHECK_FALSE(w.ec);
        CHECK(g.lost());
        CHECK_FALSE(g.owns());
        CHECK(ms_between(acquired_at, w.at) < 500 + 150 + 1000);

        // From here on exactly one owner, in the guards and in Redis.
        CHECK(co_await stays([&] { return g2.owns() && !g.owns(); }, 750ms));
        CHECK(g2.owns());
        CHECK_FALSE(g.owns());
        auto const held = co_await held_by(probe, name);
        CHECK(held == g2.token());
        CHECK_FALSE(co_await g.release());
        co_await check_held_then_release(probe, g2, name);
    };
    run_lock_test<two_lockers>(fast_config(server), "restart", scenario);
}

TEST_CASE("server restart while held and nobody else wants it: the holder learns it is lost") {
    redis_server server;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), fast_config(server)};
        locker locks{conn};
        std::string const name = unique_key("restart-alone");
        auto g = co_await locks.co_lock(name, renewing_lease(500ms, 150ms));
        lost_watch w;
        watch(g, w);
        server.kill();
        REQUIRE(co_await eventually([&] { return !conn.is_connected(); }));
        server.restart();
        bool const noticed = co_await finishes(w.done, 3000ms);
        REQUIRE(noticed);
        CHECK(g.lost());
        // Never revived on the new server.
        redis::connection probe{ctx.get_executor(), fast_config(server)};
        CHECK(co_await stays(
            [&]() -> asio::awaitable<bool> {
                co_return co_await integer(probe, command("EXISTS", lock_key(name))) == 0;
            },
            300ms));
        conn.close();
        probe.close();
    });
}

TEST_CASE("a server restarted at once (new run_id): guards held there are lost on reconnection, "
          "without waiting for a renewal") {
    redis_server server;
    auto scenario = [&](redis::connection& conn, redis::connection&, redis::connection&,
                        locker& locks, locker& other,
                        std::string const& name) -> asio::awaitable<void> {
        // No renewal and a long lease: only the run_id check can tell the holder in time.
        lock_options opt = renewing_lease(10000ms, 3000ms);
        opt.auto_renew = false;
        auto g = co_await locks.co_lock(name, opt);
        std::string const first_run_id = conn.server_run_id();
        CHECK(first_run_id.size() == 40);
        lost_watch w;
        watch(g, w);

        server.kill();
        server.restart();
        auto const restarted_at = steady::now();
        auto const told = co_await told_lost_after(w, g, restarted_at, 3000ms);
        MESSAGE("instant restart: the holder was told after " << told << " ms");
        CHECK(conn.server_change_count() == 1);
        CHECK(conn.server_run_id().size() == 40);
        CHECK(conn.server_run_id() != first_run_id);

        // The restarted server lost the fence key too; the new holder's fence is still larger.
        lock_options wait = waiting_up_to(renewing_lease(10000ms, 3000ms), 5000ms);
        auto g2 = co_await other.co_lock(name, wait);
        CHECK(g2.fence() > g.fence());
        CHECK(g2.owns());
        CHECK_FALSE(co_await g.release());
        CHECK(co_await g2.release());
    };
    run_lock_test<two_lockers>(fast_config(server), "instant-restart", scenario);
}

TEST_CASE("a reconnection to the same server keeps the guard and renews it at once") {
    redis_server server;
    auto scenario = [&](redis::connection& conn, redis::connection& probe, locker& locks,
                        std::string const& name) -> asio::awaitable<void> {
        auto g = co_await locks.co_lock(name, renewing_lease(6000ms, 3000ms));
        auto const id = co_await integer(conn, command("CLIENT", "ID"));
        // The key has at most 5500 ms left (on the server's clock), and falls until 3 s.
        REQUIRE(co_await eventually(
            [&]() -> asio::awaitable<bool> {
                co_return co_await integer(probe, command("PTTL", lock_key(name))) <= 5500;
            },
            2000ms, 10ms));
        CHECK(server.cli(colock::test::strings("CLIENT", "KILL", "ID", std::to_string(id))) == "1");
        co_await poll_until([&] { return conn.reconnect_count() != 0; }, 200, 10ms);
        REQUIRE(conn.reconnect_count() == 1);
        // The next interval is 2 s away or more, yet the lease is re-armed right after
        // reconnecting: about 6000 ms left.
        std::int64_t pttl = 0;
        co_await eventually(
            [&]() -> asio::awaitable<bool> {
                pttl = co_await integer(probe, command("PTTL", lock_key(name)));
                co_return pttl > 5600;
            },
            1000ms, 10ms);
        MESSAGE("PTTL after reconnecting: " << pttl << " ms");
        CHECK(pttl > 5600);
        CHECK(conn.server_change_count() == 0);
        CHECK(g.owns());
        CHECK_FALSE(g.lost());
        CHECK(co_await g.release());
    };
    run_lock_test<one_locker>(fast_config(server), "same-server", scenario);
}

TEST_CASE("a release whose connection is lost before the reply is sent again") {
    redis_server server;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = fast_config(server);
        cfg.health_check_interval = 0ms; // the pause below must not count as a dead server
        redis::connection conn{ctx.get_executor(), cfg};
        redis::connection probe{ctx.get_executor(), fast_config(server)};
        locker locks{conn};
        std::string const name = unique_key("release-retry");
        auto g = co_await locks.co_lock(name, renewing_lease(30000ms, 10000ms));
        auto const id = co_await integer(conn, command("CLIENT", "ID"));
        // Scripts wait while writes are paused: the release is written, then its connection
        // dies before the server ran it.
        server.cli(colock::test::strings("CLIENT", "PAUSE", "600", "WRITE"));
        bool done = false;
        bool released = false;
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> {
                released = co_await g.release();
                done = true;
            },
            asio::detached);
        CHECK(co_await stays([&] { return !done; }, 150ms));
        CHECK(server.cli(colock::test::strings("CLIENT", "KILL", "ID", std::to_string(id))) == "1");
        bool const finished = co_await finishes(done, 4000ms);
        REQUIRE(finished);
        CHECK(released); // the killed client's command never ran, so the repeat freed it
        auto const free = co_await lock_free(probe, name);
        CHECK(free);
        CHECK(conn.reconnect_count() == 1);
        conn.close();
        probe.close();
    });
}

TEST_CASE("a user the server refuses INFO to still connects; its server instance is unknown") {
    redis_server server;
    server.cli(colock::test::strings("ACL", "SETUSER", "noinfo", "on", ">secret", "~*", "&*",
                                     "+@all", "-info"));
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = fast_config(server);
        cfg.username = "noinfo";
        cfg.password = "secret";
        redis::connection conn{ctx.get_executor(), cfg};
        co_await conn.async_connect(asio::use_awaitable);
        CHECK(conn.is_connected());
        CHECK(conn.server_run_id().empty());
        locker locks{conn};
        auto g = co_await locks.co_lock(unique_key("noinfo"), renewing_lease(2000ms, 500ms));
        CHECK(g.owns());
        CHECK(co_await g.release());
        conn.close();
    });
}

// That later renewals keep the new ttl is unit-tested on virtual time (test_virtual_time.cpp).
TEST_CASE("extend: raises the key's lease, false after loss, and does not bring the key back") {
    auto scenario = [](redis::connection&, redis::connection& probe, locker& locks,
                       std::string const& name) -> asio::awaitable<void> {
        auto g = co_await locks.co_lock(name, renewing_lease(600ms, 200ms));
        auto pttl = co_await integer(probe, command("PTTL", lock_key(name)));
        CHECK(pttl <= 600);

        bool const extended = co_await g.extend(60s);
        CHECK(extended);
        pttl = co_await integer(probe, command("PTTL", lock_key(name)));
        CHECK(pttl > 50'000);
        CHECK(g.owns());

        // Refused before any I/O.
        error_code refused = co_await error_of(g.extend(0ms));
        CHECK(refused == error::invalid_argument);

        // Lost: extend says so, and does not bring the key back.
        co_await probe.co_exec(command("DEL", lock_key(name)));
        bool const after_loss = co_await g.extend(60s);
        CHECK_FALSE(after_loss);
        CHECK(g.lost());
        CHECK_FALSE(g.owns());
        auto const exists = co_await integer(probe, command("EXISTS", lock_key(name)));
        CHECK(exists == 0);
        bool const again = co_await g.extend(60s);
        CHECK_FALSE(again);
    };
    run_lock_test<one_locker>("extend", scenario);
}

TEST_CASE("unlock twice: true then false; a released guard refuses extend") {
    auto scenario = [](redis::connection&, redis::connection& probe, locker& locks,
                       std::string const& name) -> asio::awaitable<void> {
        auto g = co_await locks.co_lock(name, renewing_lease(2000ms, 500ms));
        bool const first = co_await g.release();
        bool const second = co_await g.release();
        CHECK(first);
        CHECK_FALSE(second);
        CHECK_FALSE(g.owns());
        CHECK_FALSE(g.lost());
        CHECK(g.name() == name); // still says what it held
        error_code code = co_await error_of(g.extend(1000ms));
        CHECK(code == error::not_held);
        // wait_lost on a released guard: at once, not_held.
        auto [ec] = co_await g.async_wait_lost(as_tuple);
        CHECK(ec == error::not_held);
        auto const free = co_await lock_free(probe, name);
        CHECK(free);

        // Unlocking an old guard never touches a later holder's key.
        auto g2 = co_await locks.co_lock(name, renewing_lease(2000ms, 500ms));
        CHECK_FALSE(co_await g.release());
        co_await check_held_then_release(probe, g2, name);
    };
    run_lock_test<one_locker>("unlock-twice", scenario);
}

TEST_CASE("the server stops answering (SIGSTOP): the holder reports lost by its lease deadline, "
          "not when the connection gives up") {
    redis_server server;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        // The default health check: a dead server is declared dead only after 2-4 s, long
        // after a 500 ms lease has run out on the server's clock.
        auto cfg = fast_config(server);
        cfg.health_check_interval = 2000ms;
        redis::connection conn{ctx.get_executor(), cfg};
        locker locks{conn};
        std::string const name = unique_key("stopped");
        auto const acquired_at = steady::now();
        lost_watch w;
        auto g = co_await watched_hold(locks, name, renewing_lease(500ms, 150ms), w, 100ms);

        server.pause();
        // The last successful renewal (or the acquisition) started at most 500 ms ago; no
        // renewal gets through, so the lease is over by then on any clock.
        bool const noticed = co_await finishes(w.done, 1200ms);
        auto const owned_when_checked = g.owns();
        server.resume();
        MESSAGE("server stopped: loss reported " << (w.done ? ms_between(acquired_at, w.at) : -1)
                                                 << " ms after the acquisition (lease 500 ms)");
        CHECK(noticed);
        CHECK_FALSE(owned_when_checked);

        // The key has expired on the server: another process takes the lock at once. The
        // first holder must not still believe it owns it.
        redis::connection conn_b{ctx.get_executor(), fast_config(server)};
        locker other{conn_b};
        lock_options wait = waiting_up_to(renewing_lease(500ms, 150ms), 3000ms);
        auto g2 = co_await other.co_lock(name, wait);
        CHECK(g2.owns());
        bool const two_owners = g.owns() && g2.owns();
        CHECK_FALSE(two_owners);
        bool const finally = co_await finishes(w.done, 5000ms);
        CHECK(finally);
        co_await g2.release();
        conn.close();
        conn_b.close();
    });
}

TEST_CASE("the holder cut off from the server (partition): it reports lost by its lease "
          "deadline, before another process can take the lock") {
    redis_server server;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        relay cut(ctx.get_executor(), server.port());
        // The holder goes through the relay, with the default 2 s health check.
        auto cfg = server.config();
        cfg.port = cut.port();
        cfg.connect_timeout = 1000ms;
        redis::connection conn{ctx.get_executor(), cfg};
        redis::connection conn_b{ctx.get_executor(), fast_config(server)};
        locker locks{conn};
        locker other{conn_b};
        std::string const name = unique_key("partition");
        auto const acquired_at = steady::now();
        lost_watch w;
        auto g = co_await watched_hold(locks, name, renewing_lease(500ms, 150ms), w, 100ms);

        cut.freeze();
        // The server lets the key expire 500 ms after the last renewal that reached it; then
        // the other process gets the lock.
        lock_options wait = waiting_up_to(renewing_lease(500ms, 150ms), 3000ms);
        auto g2 = co_await other.co_lock(name, wait);
        auto const second_at = steady::now();
        bool const first_still_owns = g.owns();
        MESSAGE("partition: second owner " << ms_between(acquired_at, second_at)
                                           << " ms after the first acquired; first reported "
                                           << std::string(w.done ? "lost" : "nothing yet"));
        CHECK(g2.owns());
        CHECK_FALSE(first_still_owns); // two owners at once otherwise
        bool const noticed = co_await finishes(w.done, 6000ms);
        CHECK(noticed);
        if (noticed)
            CHECK(ms_between(w.at, second_at) >= 0); // the loss came first
        co_await g2.release();
        cut.close();
        conn.close();
        conn_b.close();
    });
}

TEST_CASE("unlock against a server that stopped answering gives up at its own deadline") {
    redis_server server;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = server.config();
        cfg.health_check_interval = 0ms; // only the release's own deadline bounds the wait
        redis::connection conn{ctx.get_executor(), cfg};
        locker locks{conn};
        lock_options opt;
        opt.auto_renew = false;
        auto g = co_await locks.co_lock("stalled-unlock", opt);
        server.pause();
        auto const started = steady::now();
        bool threw = false;
        try {
            co_await g.release();
        } catch (boost::system::system_error const& e) {
            threw = true;
            CHECK(e.code() == colock::error::timeout); // one vocabulary with co_lock's timeout
            CHECK(std::string(e.what()).find("stalled-unlock") != std::string::npos);
        }
        CHECK(threw);
        auto const took = steady::now() - started;
        CHECK(took >= 4s);
        CHECK(took < 8s);
        server.resume();
        conn.close();
    });
}

TEST_CASE("a server restarted with AOF keeps the lock key, yet the guard is reported lost (new "
          "run_id); the key blocks others until the old guard's release") {
    redis_server_options aof;
    aof.extra_args = strings("--appendonly", "yes", "--appendfsync", "always");
    redis_server server(aof);
    auto scenario = [&](redis::connection& conn, redis::connection&, redis::connection& probe,
                        locker& locks, locker& other,
                        std::string const& name) -> asio::awaitable<void> {
        auto g = co_await locks.co_lock(name, renewing_lease(10000ms, 3000ms));
        lost_watch w;
        watch(g, w);

        server.kill();
        server.restart();
        bool const noticed = co_await finishes(w.done, 3000ms);
        REQUIRE(noticed);
        CHECK_FALSE(w.ec);
        CHECK(g.lost());
        CHECK(conn.server_change_count() == 1);

        // The key came back from the append-only file with the old holder's token, so nobody
        // else gets the lock while the old holder may still be finishing its work.
        auto const kept = co_await held_by(probe, name);
        CHECK(kept == g.token());
        std::optional<lock_guard> meanwhile =
            co_await other.co_try_lock(name, renewing_lease(5000ms, 1000ms));
        CHECK_FALSE(meanwhile.has_value());

        // release() of a lost guard says false at once, and its background release frees the key.
        CHECK_FALSE(co_await g.release());
        bool const gone = co_await free_becomes(probe, name, 3000ms);
        CHECK(gone);
        co_await check_taken_again(other, name, renewing_lease(5000ms, 1000ms), g.fence());
    };
    run_lock_test<two_lockers>(fast_config(server), "aof-restart", scenario);
}

TEST_CASE("a leader that shortens its lease and stops renewing: the watch sees nobody lead when "
          "the shorter lease lapses, not at the old one's end") {
    run_lock_test<two_lockers>("election-shortened",
                               [](redis::connection&, redis::connection&, redis::connection&,
                                  locker& a, locker& b,
                                  std::string const& name) -> asio::awaitable<void> {
                                   election ea{a, name};
                                   election eb{b, name};
                                   auto w = co_await watch_from_nobody(eb);
                                   auto opt = lease(30'000ms);
                                   opt.auto_renew = false;
                                   auto lead = co_await ea.co_campaign("a", opt);
                                   CHECK((co_await next_change(w)).leading);
                                   REQUIRE(co_await lead.guard().extend(300ms));
                                   auto const shortened = steady::now();
                                   // Within the shorter lease and a margin; the watch looked at the
                                   // 30 s end before.
                                   auto const gone = co_await next_change(w, 2000ms);
                                   CHECK_FALSE(gone.leading);
                                   CHECK(gone.term == lead.term());
                                   auto const took = ms_since(shortened);
                                   CHECK(took >= 250);
                                   CHECK(took < 1500);
                                   CHECK_FALSE((co_await eb.co_leader()).has_value());
                               });
}

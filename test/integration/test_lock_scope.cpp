// Explicit re-entry: lock_guard::share() and lock_scope, against the server: one lease for
// every sharing guard, given back when the last goes; re-entry through a scope without a Redis
// command; two coroutines of one scope; the scope's end; a plain locker still not reentrant.
#include <colock/lock_scope.hpp>

#include "lock_fixture.hpp"
#include "test_util.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>

using namespace colock;
using namespace colock::test;

namespace {

// Counts the acquisitions and releases the locker reports.
struct counting_observer : lock_observer {
    std::atomic<int> acquired{0};
    std::atomic<int> released{0};
    void on_acquired(acquired_event const&) override { ++acquired; }
    void on_released(released_event const&) override { ++released; }
};

// A counting observer set on `locks`.
std::shared_ptr<counting_observer> counted(locker& locks) {
    auto seen = std::make_shared<counting_observer>();
    locks.set_observer(seen);
    return seen;
}

lock_options renewing(std::chrono::milliseconds ttl, std::chrono::milliseconds every) {
    lock_options opt;
    opt.ttl = ttl;
    opt.renew_interval = every;
    return opt;
}

} // namespace

TEST_CASE("share: the same lease, token and fence; hold_count; the lease is kept until the last "
          "sharing guard goes, and no share is an acquisition") {
    auto scenario = [](redis::connection&, redis::connection& probe, locker& locks,
                       std::string const& name) -> asio::awaitable<void> {
        auto const seen = counted(locks);
        std::optional<lock_guard> g(co_await locks.co_lock(name));
        CHECK(g->hold_count() == 1);
        auto s = g->share();
        CHECK(s.name() == name);
        CHECK(s.token() == g->token());
        CHECK(s.fence() == g->fence());
        CHECK(s.lease_expiry() == g->lease_expiry());
        CHECK(s.owns());
        CHECK(g->hold_count() == 2);
        CHECK(s.hold_count() == 2);

        // One of two lets go: true, the lease stays with the other, no release sent.
        CHECK(co_await s.release());
        CHECK_FALSE(s.owns());
        CHECK(s.hold_count() == 0);
        CHECK(g->hold_count() == 1);
        CHECK(g->owns());
        CHECK(co_await held_by(probe, name) == g->token());
        CHECK_FALSE(co_await s.release()); // once
        CHECK_FALSE(s.share().owns());     // a guard that let go shares nothing
        auto [refused] = co_await s.async_wait_lost(as_tuple);
        CHECK(refused == error::not_held);

        // The first guard goes first: the share keeps the lease.
        auto kept = g->share();
        auto const token = g->token();
        g.reset();
        CHECK(kept.hold_count() == 1);
        CHECK(kept.owns());
        co_await sleep_for(50ms); // a release sent in the background would be through by now
        CHECK(co_await held_by(probe, name) == token);
        auto const pttl = co_await integer(probe, command("PTTL", lock_key(name)));
        CHECK(pttl > 20'000);
        CHECK(seen->released == 0);

        // The last one gives it back.
        CHECK(co_await kept.release());
        CHECK(co_await lock_free(probe, name));
        CHECK(seen->acquired == 1);
        CHECK(seen->released == 1);

        lock_guard empty;
        CHECK(empty.hold_count() == 0);
        CHECK_FALSE(empty.share().owns());
        CHECK(empty.share().name().empty());
        locks.set_observer(nullptr);
    };
    run_lock_test<one_locker>("share", scenario);
}

TEST_CASE("share: extend through one is the other's lease too; wait_lost completes on every "
          "sharing guard; async_release of one leaves the lease held") {
    auto scenario = [](redis::connection&, redis::connection& probe, locker& locks,
                       std::string const& name) -> asio::awaitable<void> {
        auto g = co_await locks.co_lock(name, renewing(2000ms, 100ms));
        auto s = g.share();
        auto t = g.share();
        CHECK(co_await s.extend(20'000ms));
        CHECK(g.lease_expiry() == s.lease_expiry());
        CHECK(g.lease_expiry() > steady::now() + 15s);
        auto const pttl = co_await integer(probe, command("PTTL", lock_key(name)));
        CHECK(pttl > 15'000);

        auto [ec, released] = co_await t.async_release(as_tuple);
        CHECK_FALSE(ec);
        CHECK(released);
        CHECK(g.hold_count() == 2);
        CHECK(co_await held_by(probe, name) == g.token());

        lost_watch wg, ws;
        watch(g, wg);
        watch(s, ws);
        co_await probe.co_exec(command("DEL", lock_key(name))); // the next renewal finds out
        CHECK(co_await finishes(wg.done, 2000ms));
        CHECK(co_await finishes(ws.done, 100ms));
        CHECK_FALSE(wg.ec);
        CHECK_FALSE(ws.ec);
        CHECK(g.lost());
        CHECK(s.lost());
        CHECK_FALSE(s.owns());
        CHECK_FALSE(co_await s.release()); // lost: false, as for one guard
        CHECK_FALSE(co_await g.release());
    };
    run_lock_test<one_locker>("share-extend", scenario);
}

TEST_CASE("scope: re-entry returns at once the same lease and fence, with no Redis command; "
          "the lease goes back with the scope's last guard") {
    auto scenario = [](redis::connection&, redis::connection& probe, locker& locks,
                       std::string const& name) -> asio::awaitable<void> {
        auto const seen = counted(locks);
        lock_scope scope{locks};
        CHECK(&scope.get_locker() == &locks);
        CHECK(scope.hold_count(name) == 0);
        auto a = co_await scope.co_lock(name);
        CHECK(a.hold_count() == 1);

        auto const before = co_await commandstats(probe);
        auto const started = steady::now();
        auto b = co_await scope.co_lock(name);
        auto c = co_await scope.co_try_lock(name);
        auto const took = ms_since(started);
        auto const after = co_await commandstats(probe);
        CHECK(commands_between(before, after) == 0);
        CHECK(took < 50);
        REQUIRE(c.has_value());
        CHECK(b.fence() == a.fence());
        CHECK(b.token() == a.token());
        CHECK(c->fence() == a.fence());
        CHECK(a.hold_count() == 3);
        CHECK(b.hold_count() == 3);
        CHECK(scope.hold_count(name) == 3);
        CHECK(seen->acquired == 1);

        CHECK(co_await a.release());
        b = lock_guard{}; // a move-assignment lets go too
        CHECK(scope.hold_count(name) == 1);
        CHECK(co_await held_by(probe, name) == c->token());
        CHECK(co_await c->release());
        CHECK(co_await lock_free(probe, name));
        CHECK(scope.hold_count(name) == 0);

        // Nothing is held any more: the next co_lock takes the lock anew.
        auto d = co_await scope.co_lock(name);
        CHECK(d.fence() > a.fence());
        CHECK(d.token() != a.token());
        CHECK(d.hold_count() == 1);
        CHECK(seen->acquired == 2);
        CHECK(co_await d.release());
        locks.set_observer(nullptr);
    };
    run_lock_test<one_locker>("scope-reenter", scenario);
}

TEST_CASE("scope: a lost lease is not shared; co_lock takes the lock anew") {
    auto scenario = [](redis::connection&, redis::connection& probe, locker& locks,
                       std::string const& name) -> asio::awaitable<void> {
        lock_scope scope{locks};
        auto a = co_await scope.co_lock(name, renewing(2000ms, 100ms));
        lost_watch w;
        watch(a, w);
        co_await probe.co_exec(command("DEL", lock_key(name)));
        CHECK(co_await finishes(w.done, 2000ms));
        CHECK(a.lost());
        CHECK(scope.hold_count(name) == 0);

        auto b = co_await scope.co_lock(name);
        CHECK(b.owns());
        CHECK(b.token() != a.token());
        CHECK(b.fence() != a.fence());
        CHECK(b.hold_count() == 1);
        CHECK(a.hold_count() == 1);
        CHECK(co_await held_by(probe, name) == b.token());
        CHECK(co_await b.release());
    };
    run_lock_test<one_locker>("scope-lost", scenario);
}

TEST_CASE("scope: two coroutines take one name at once: one asks the locker, both get guards on "
          "one lease; after a failed first call the other takes its own turn") {
    auto scenario = [](asio::io_context& ctx, redis::connection&, redis::connection&,
                       redis::connection&, locker& a, locker& b,
                       std::string const& name) -> asio::awaitable<void> {
        auto holder = co_await b.co_lock(name);
        lock_scope scope{a};
        std::optional<lock_guard> first, second;
        int done = 0, failed = 0;
        auto take_into = [&](std::optional<lock_guard>& into) -> asio::awaitable<void> {
            into.emplace(co_await scope.co_lock(name));
            ++done;
        };
        asio::co_spawn(ctx, take_into(first), count_failure(failed, done));
        asio::co_spawn(ctx, take_into(second), count_failure(failed, done));
        co_await until_one_waiting(a); // the second waits in the scope, not in the locker
        CHECK(done == 0);
        co_await holder.release();
        CHECK(co_await poll_until([&] { return done == 2; }, 200, 5ms));
        CHECK(failed == 0);
        REQUIRE(first.has_value());
        REQUIRE(second.has_value());
        CHECK(first->fence() == second->fence());
        CHECK(first->token() == second->token());
        CHECK(first->hold_count() == 2);
        CHECK(second->hold_count() == 2);
        first.reset();
        CHECK(co_await second->release());

        // The first call gives up (its wait_timeout): the one behind it asks for itself.
        holder = co_await b.co_lock(name);
        error_code first_ec, second_ec;
        bool first_done = false, second_done = false;
        auto take = [&](lock_options opt, error_code& ec, bool& flag,
                        std::optional<lock_guard>& into) -> asio::awaitable<void> {
            try {
                into.emplace(co_await scope.co_lock(name, opt));
            } catch (system_error const& e) {
                ec = e.code();
            }
            flag = true;
        };
        asio::co_spawn(ctx, take(waiting_up_to({}, 150ms), first_ec, first_done, first),
                       asio::detached);
        asio::co_spawn(ctx, take(waiting_up_to({}, 5000ms), second_ec, second_done, second),
                       asio::detached);
        CHECK(co_await finishes(first_done, 2000ms));
        CHECK(first_ec == error::timeout);
        co_await until_one_waiting(a); // the second, now in the locker's queue
        CHECK_FALSE(second_done);
        co_await holder.release();
        CHECK(co_await finishes(second_done, 2000ms));
        CHECK_FALSE(second_ec);
        REQUIRE(second.has_value());
        CHECK(second->hold_count() == 1);
        CHECK(co_await second->release());
    };
    run_lock_test<two_lockers>("scope-twice", scenario);
}

TEST_CASE("scope: destroyed with pending calls, they end with operation_aborted and leave "
          "nothing behind; the guards it returned keep their lease") {
    auto scenario = [](asio::io_context& ctx, redis::connection&, redis::connection&,
                       redis::connection& probe, locker& a, locker& b,
                       std::string const& name) -> asio::awaitable<void> {
        std::string const other = name + ":other";
        auto holder = co_await b.co_lock(name);
        auto scope = std::make_unique<lock_scope>(a);
        auto kept = co_await scope->co_lock(other);
        error_code asking_ec, behind_ec;
        int done = 0;
        auto take = [&](error_code& ec) -> asio::awaitable<void> {
            try {
                co_await scope->co_lock(name);
            } catch (system_error const& e) {
                ec = e.code();
            }
            ++done;
        };
        asio::co_spawn(ctx, take(asking_ec), asio::detached);
        asio::co_spawn(ctx, take(behind_ec), asio::detached);
        co_await until_one_waiting(a);
        scope.reset();
        CHECK(co_await poll_until([&] { return done == 2; }, 100, 5ms));
        CHECK(asking_ec == asio::error::operation_aborted);
        CHECK(behind_ec == asio::error::operation_aborted);
        CHECK(a.waiting() == 0);
        CHECK(kept.owns());
        CHECK(kept.hold_count() == 1);
        CHECK(co_await held_by(probe, other) == kept.token());
        // The cancelled call left the queue: the release frees the lock rather than handing it.
        co_await holder.release();
        CHECK(co_await free_becomes(probe, name, 500ms));
        CHECK(co_await kept.release());
    };
    run_lock_test<two_lockers>("scope-end", scenario);
}

TEST_CASE("scope: cancelling a co_lock that asks the locker, and one waiting behind it") {
    auto scenario = [](asio::io_context& ctx, redis::connection&, redis::connection&,
                       redis::connection& probe, locker& a, locker& b,
                       std::string const& name) -> asio::awaitable<void> {
        using namespace asio::experimental::awaitable_operators;
        auto holder = co_await b.co_lock(name);
        lock_scope scope{a};
        bool asking_done = false;
        error_code asking_ec;
        // The first asks the locker, until a timer ends it; a second waits behind it and is
        // cancelled on its own, sooner.
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> {
                asio::steady_timer t(co_await asio::this_coro::executor, 400ms);
                auto r = co_await (scope.co_lock(name) || t.async_wait(asio::use_awaitable));
                CHECK(r.index() == 1);
                asking_done = true;
            },
            [&](std::exception_ptr e) {
                if (e)
                    try {
                        std::rethrow_exception(e);
                    } catch (system_error const& se) {
                        asking_ec = se.code();
                    }
                asking_done = true;
            });
        co_await until_one_waiting(a);
        asio::steady_timer t(co_await asio::this_coro::executor, 50ms);
        auto const started = steady::now();
        auto r = co_await (scope.co_lock(name) || t.async_wait(asio::use_awaitable));
        CHECK(r.index() == 1);
        CHECK(ms_since(started) < 200);
        CHECK_FALSE(asking_done); // the first is untouched by the second's cancellation
        CHECK(a.waiting() == 1);
        CHECK(co_await finishes(asking_done, 1000ms));
        CHECK_FALSE(asking_ec);
        CHECK(a.waiting() == 0);
        co_await holder.release();
        CHECK(co_await free_becomes(probe, name, 500ms));
    };
    run_lock_test<two_lockers>("scope-cancel", scenario);
}

TEST_CASE("a plain locker stays non-reentrant, a scope's holding included; a scope refuses a bad "
          "name") {
    auto scenario = [](redis::connection&, redis::connection&, locker& locks,
                       std::string const& name) -> asio::awaitable<void> {
        lock_scope scope{locks};
        auto g = co_await scope.co_lock(name);
        auto again = co_await locks.co_try_lock(name);
        CHECK_FALSE(again.has_value());
        CHECK(g.hold_count() == 1);
        CHECK(co_await g.release());

        auto plain = co_await locks.co_lock(name);
        auto twice = co_await locks.co_try_lock(name);
        CHECK_FALSE(twice.has_value());
        // Nor does a scope share a guard it did not take.
        auto scoped = co_await scope.co_try_lock(name);
        CHECK_FALSE(scoped.has_value());
        CHECK(plain.hold_count() == 1);
        CHECK(co_await plain.release());

        auto refused = co_await error_of(scope.co_lock(""));
        CHECK(refused == error::invalid_argument);
    };
    run_lock_test<one_locker>("scope-plain", scenario);
}

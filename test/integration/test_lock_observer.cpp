// locker::set_observer against a real redis-server: what the observer is told, with what
// figures, and in which order, for each way a lock is taken, given up and lost.
#include <colock/election.hpp>
#include <colock/lock_observer.hpp>
#include <colock/locker.hpp>
#include <colock/rw_lock.hpp>
#include <colock/semaphore.hpp>

#include "lock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

using namespace colock;
using namespace colock::test;

namespace {

// One event as the observer saw it; the fields an event does not have stay at their defaults.
struct seen {
    std::string kind{}; // acquired, released, lost, renewal, queue, reconnect
    std::string name{};
    std::int64_t fence = 0;
    std::chrono::steady_clock::duration took{}; // waited, held or latency
    int attempts = 0;
    acquired_by how = acquired_by::first_attempt;
    bool flag = false; // released: handed_locally; renewal: extended
    loss_reason reason = loss_reason::not_ours;
    boost::system::error_code error{};
    std::size_t count = 0;     // queue: depth; reconnect: reconnects
    std::string holder_kind{}; // acquired, released, lost, renewal, queue: the event's kind
};

struct recorder final : lock_observer {
    std::vector<seen> events;

    // Records an event with the fields every event has; the caller fills in the rest.
    seen& record(std::string kind, std::string_view name = {}, std::int64_t fence = 0,
                 std::chrono::steady_clock::duration took = {}) {
        events.push_back(
            {.kind = std::move(kind), .name = std::string(name), .fence = fence, .took = took});
        return events.back();
    }

    void on_acquired(acquired_event const& e) override {
        auto& s = record("acquired", e.name, e.fence, e.waited);
        s.attempts = e.attempts;
        s.how = e.how;
        s.holder_kind = e.kind;
    }
    void on_released(released_event const& e) override {
        auto& s = record("released", e.name, e.fence, e.held);
        s.flag = e.handed_locally;
        s.holder_kind = e.kind;
    }
    void on_lost(lost_event const& e) override {
        auto& s = record("lost", e.name, e.fence, e.held);
        s.reason = e.reason;
        s.holder_kind = e.kind;
    }
    void on_renewal(renewal_event const& e) override {
        auto& s = record("renewal", e.name, e.fence, e.latency);
        s.flag = e.extended;
        s.error = e.error;
        s.holder_kind = e.kind;
    }
    void on_queue(queue_event const& e) override {
        auto& s = record("queue", e.name);
        s.count = e.depth;
        s.holder_kind = e.kind;
    }
    void on_reconnect(reconnect_event const& e) override {
        record("reconnect").count = e.reconnects;
    }

    std::vector<std::string> kinds(std::string const& except = "") const {
        std::vector<std::string> out;
        for (auto const& e : events)
            if (e.kind != except)
                out.push_back(e.kind);
        return out;
    }
    std::vector<seen> of(std::string const& kind) const {
        std::vector<seen> out;
        for (auto const& e : events)
            if (e.kind == kind)
                out.push_back(e);
        return out;
    }
};

asio::awaitable<void> unlock_after(lock_guard g, std::chrono::milliseconds delay) {
    co_await sleep_for(delay);
    co_await g.release();
}

long long ms(std::chrono::steady_clock::duration d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

// The cast of the observer tests: a locker watched by a recorder, another locker on a connection
// of its own (whose calls the recorder must not see), and a lock name from unique_key(what). A
// scenario takes (conn, locks, other, seen_by, name), after the io_context when it wants it.
struct observed_locker {
    observed_locker(asio::io_context& ctx, redis::config const& cfg, std::string_view what)
        : conn{ctx.get_executor(), cfg}
        , other_conn{ctx.get_executor(), cfg}
        , locks{conn}
        , other{other_conn}
        , name(unique_key(what)) {
        locks.set_observer(seen_by);
    }

    template <class Scenario>
    asio::awaitable<void> play(Scenario& scenario, asio::io_context& ctx) {
        co_await play_scenario(scenario, ctx, conn, locks, other, seen_by, name);
        conn.close();
        other_conn.close();
    }

    redis::connection conn;
    redis::connection other_conn;
    locker locks;
    locker other;
    std::shared_ptr<recorder> const seen_by = std::make_shared<recorder>();
    std::string const name;
};

} // namespace

TEST_CASE("observer: an uncontended lock is acquired on the first attempt and released, in that "
          "order, with its fence and how long it was held") {
    auto scenario = [&](redis::connection&, locker& locks, locker& other,
                        std::shared_ptr<recorder> const& seen_by,
                        std::string const& name) -> asio::awaitable<void> {
        auto g = co_await locks.co_lock(name, lease(10'000ms));
        co_await sleep_for(60ms);
        CHECK(co_await g.release());
        // The other locker's calls are not this observer's business.
        auto t = co_await other.co_try_lock(name, lease(10'000ms));
        REQUIRE(t.has_value());
        CHECK(co_await t->release());

        REQUIRE(seen_by->kinds() == strings("acquired", "released"));
        auto const acquired = seen_by->events[0];
        CHECK(acquired.name == name);
        CHECK(acquired.fence == g.fence());
        CHECK(acquired.how == acquired_by::first_attempt);
        CHECK(acquired.attempts == 1);
        CHECK(ms(acquired.took) < 1000);
        auto const released = seen_by->events[1];
        CHECK(released.name == name);
        CHECK(released.fence == g.fence());
        CHECK_FALSE(released.flag);
        CHECK(ms(released.took) >= 60);
        CHECK(ms(released.took) < 2000);

        // Removed: nothing more is told.
        locks.set_observer(nullptr);
        auto again = co_await locks.co_lock(name, lease(10'000ms));
        CHECK(co_await again.release());
        CHECK(seen_by->events.size() == 2);
    };
    run_lock_test<observed_locker>("observer-plain", scenario);
}

TEST_CASE("observer: a waiter of the same locker is handed the lease locally; the queue depth "
          "goes up and down around it") {
    auto scenario = [&](asio::io_context& ctx, redis::connection&, locker& locks, locker&,
                        std::shared_ptr<recorder> const& seen_by,
                        std::string const& name) -> asio::awaitable<void> {
        auto first = co_await locks.co_lock(name, lease(10'000ms));
        std::int64_t second_fence = 0;
        bool second_done = false;
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> {
                auto second = co_await locks.co_lock(name, lease(10'000ms));
                second_fence = second.fence();
                co_await sleep_for(20ms);
                CHECK(co_await second.release());
            },
            check_nothrow_then_mark(second_done));
        co_await until_one_waiting(locks);
        CHECK(co_await first.release());
        co_await poll_until([&] { return second_done; }, 300, 5ms);
        REQUIRE(second_done);

        REQUIRE(seen_by->kinds() ==
                strings("acquired", "queue", "released", "acquired", "queue", "released"));
        auto const& ev = seen_by->events;
        CHECK(ev[0].how == acquired_by::first_attempt);
        CHECK(ev[1].count == 1);
        CHECK(ev[1].name == name);
        CHECK(ev[1].holder_kind == "lock");
        CHECK(ev[2].fence == first.fence());
        CHECK(ev[2].flag); // handed to the waiter
        CHECK(ev[3].how == acquired_by::local_handoff);
        CHECK(ev[3].fence == second_fence);
        CHECK(second_fence > first.fence());
        CHECK(ms(ev[3].took) >= 100); // it waited for the first holder
        CHECK(ev[4].count == 0);
        CHECK(ev[5].fence == second_fence);
        CHECK_FALSE(ev[5].flag); // nobody left here: back to the server
    };
    run_lock_test<observed_locker>("observer-local", scenario);
}

TEST_CASE("observer: a lock released by another locker reaches this one through the server, after "
          "it waited") {
    auto scenario = [&](asio::io_context& ctx, redis::connection&, locker& locks, locker& other,
                        std::shared_ptr<recorder> const& seen_by,
                        std::string const& name) -> asio::awaitable<void> {
        auto held = co_await other.co_lock(name, lease(10'000ms));
        asio::co_spawn(ctx, unlock_after(std::move(held), 150ms), asio::detached);
        auto g = co_await locks.co_lock(name, lease(10'000ms));
        CHECK(co_await g.release());

        REQUIRE(seen_by->kinds() == strings("queue", "acquired", "queue", "released"));
        auto const& ev = seen_by->events;
        CHECK(ev[0].count == 1);
        CHECK(ev[1].how == acquired_by::server_after_wait);
        CHECK(ev[1].attempts >= 2); // the first found it held
        CHECK(ms(ev[1].took) >= 150);
        CHECK(ev[1].fence == g.fence());
        CHECK(ev[2].count == 0);
    };
    run_lock_test<observed_locker>("observer-remote", scenario);
}

TEST_CASE("observer: renewals with their latency, then a lease deleted from outside is lost as "
          "no longer ours, and its unlock is no release") {
    auto scenario = [&](redis::connection&, redis::connection& probe, locker& locks,
                        std::string const& name) -> asio::awaitable<void> {
        auto const seen_by = std::make_shared<recorder>();
        locks.set_observer(seen_by);

        auto opt = lease(3000ms);
        opt.renew_interval = 200ms;
        auto g = co_await locks.co_lock(name, opt);
        // Two renewals answered (every 200 ms), however slow the machine, before the key goes.
        co_await poll_until([&] { return seen_by->of("renewal").size() >= 2; }, 300, 10ms);
        REQUIRE(seen_by->of("renewal").size() >= 2);
        co_await probe.co_exec(command("DEL", lock_key(name)));
        co_await g.wait_lost();
        CHECK(g.lost());
        CHECK_FALSE(co_await g.release());

        auto const kinds = seen_by->kinds("renewal");
        CHECK(kinds == strings("acquired", "lost"));
        auto const renewals = seen_by->of("renewal");
        REQUIRE(renewals.size() >= 3); // two or more extended, then the one that found it gone
        for (std::size_t i = 0; i + 1 < renewals.size(); ++i) {
            CAPTURE(i);
            CHECK(renewals[i].flag);
            CHECK_FALSE(renewals[i].error);
            CHECK(renewals[i].fence == g.fence());
            CHECK(ms(renewals[i].took) < 1000);
        }
        CHECK_FALSE(renewals.back().flag); // the one that found the key gone
        CHECK_FALSE(renewals.back().error);
        auto const lost = seen_by->of("lost");
        REQUIRE(lost.size() == 1);
        CHECK(lost[0].reason == loss_reason::not_ours);
        CHECK(g.loss() == loss_reason::not_ours); // the guard says so too
        CHECK(lost[0].fence == g.fence());
        CHECK(ms(lost[0].took) >= 400);
        // The loss comes right after the renewal that found it.
        CHECK(seen_by->events.back().kind == "lost");
        CHECK(seen_by->events[seen_by->events.size() - 2].kind == "renewal");
    };
    run_lock_test<one_locker>("observer-lost", scenario);
}

TEST_CASE("observer: a lease that is not renewed is lost as expired at its deadline") {
    auto scenario = [&](redis::connection&, locker& locks, locker&,
                        std::shared_ptr<recorder> const& seen_by,
                        std::string const& name) -> asio::awaitable<void> {
        auto opt = lease(300ms);
        opt.auto_renew = false;
        auto g = co_await locks.co_lock(name, opt);
        CHECK_FALSE(g.loss());
        co_await g.wait_lost();
        CHECK(g.loss() == loss_reason::expired);
        CHECK_FALSE(co_await g.release());

        REQUIRE(seen_by->kinds() == strings("acquired", "lost"));
        CHECK(seen_by->events[1].reason == loss_reason::expired);
        CHECK(ms(seen_by->events[1].took) >= 300);
    };
    run_lock_test<observed_locker>("observer-expired", scenario);
}

TEST_CASE("observer: a lock set is told as a lock per name: acquired and released for each "
          "name with its fence, a hand-off inside the locker as local, a loss for each name") {
    auto scenario = [&](redis::connection&, redis::connection& probe, locker& locks,
                        std::string const& name) -> asio::awaitable<void> {
        auto const seen_by = std::make_shared<recorder>();
        locks.set_observer(seen_by);
        auto const a = name + "-a", b = name + "-b";
        auto first = co_await locks.co_lock_all(strings(b, a), lease(10'000ms));
        std::optional<multi_lock_guard> second;
        asio::co_spawn(
            co_await asio::this_coro::executor,
            [&]() -> asio::awaitable<void> {
                second.emplace(co_await locks.co_lock_all(strings(a, b), lease(900ms)));
            },
            asio::detached);
        co_await sleep_for(50ms);
        CHECK(co_await first.release());
        REQUIRE(co_await eventually([&] { return second.has_value(); }));
        auto const acquired = seen_by->of("acquired");
        REQUIRE(acquired.size() == 4);
        CHECK(acquired[0].name == a);
        CHECK(acquired[0].fence == first.fence(a));
        CHECK(acquired[1].name == b);
        CHECK(acquired[1].fence == first.fence(b));
        CHECK(acquired[0].how == acquired_by::first_attempt);
        CHECK(acquired[2].how == acquired_by::local_handoff);
        CHECK(acquired[2].fence == second->fence(a));
        auto const released = seen_by->of("released");
        REQUIRE(released.size() == 2);
        CHECK(released[0].name == a);
        CHECK(released[0].flag); // handed locally
        // A name deleted from outside: the set is lost, each name told.
        co_await probe.co_exec(command("DEL", lock_key(b)));
        REQUIRE(co_await eventually([&] { return second->lost(); }, 3000ms));
        auto const lost = seen_by->of("lost");
        REQUIRE(lost.size() == 2);
        CHECK(lost[0].name == a);
        CHECK(lost[1].name == b);
        CHECK(lost[1].fence == second->fence(b));
        CHECK(lost[0].reason == loss_reason::not_ours);
        CHECK_FALSE(seen_by->of("renewal").empty());
        CHECK_FALSE(co_await second->release());
        CHECK(seen_by->of("released").size() == 2); // a lost set's let-go is not a release
    };
    run_lock_test<one_locker>("observer-set", scenario);
}

TEST_CASE("observer: a semaphore's permits and a read-write lock's guards are told as holdings "
          "of their name, with their kind: acquired, renewed, released") {
    auto scenario = [&](redis::connection&, redis::connection&, locker& locks,
                        std::string const& name) -> asio::awaitable<void> {
        auto const seen_by = std::make_shared<recorder>();
        locks.set_observer(seen_by);
        semaphore sem{locks, name + "-sem", 2};
        auto opt = lease(3000ms);
        opt.renew_interval = 100ms;
        auto p = co_await sem.co_acquire(opt);
        co_await poll_until([&] { return !seen_by->of("renewal").empty(); }, 300, 10ms);
        CHECK(co_await p.release());
        rw_lock rw{locks, name + "-rw"};
        auto r = co_await rw.co_lock_shared(lease(3000ms));
        CHECK(co_await r.release());

        auto const acquired = seen_by->of("acquired");
        REQUIRE(acquired.size() == 2);
        CHECK(acquired[0].name == name + "-sem");
        CHECK(acquired[0].holder_kind == "semaphore");
        CHECK(acquired[0].fence == p.fence());
        CHECK(acquired[0].how == acquired_by::first_attempt);
        CHECK(acquired[1].name == name + "-rw");
        CHECK(acquired[1].holder_kind == "read-write lock");
        auto const released = seen_by->of("released");
        REQUIRE(released.size() == 2);
        CHECK(released[0].holder_kind == "semaphore");
        CHECK(released[0].fence == p.fence());
        CHECK(released[1].holder_kind == "read-write lock");
        auto const renewals = seen_by->of("renewal");
        REQUIRE_FALSE(renewals.empty());
        CHECK(renewals[0].holder_kind == "semaphore");
        CHECK(renewals[0].flag);
        // A lock's events say "lock".
        auto g = co_await locks.co_lock(name, lease(3000ms));
        CHECK(co_await g.release());
        CHECK(seen_by->of("acquired").back().holder_kind == "lock");
    };
    run_lock_test<one_locker>("observer-permits", scenario);
}

TEST_CASE("observer: an election's leaderships are told as holdings of the election's name, "
          "kind \"election\": acquired, renewed, released; a waiting candidate is "
          "in the queue") {
    auto scenario = [&](redis::connection&, redis::connection&, locker& locks,
                        std::string const& name) -> asio::awaitable<void> {
        auto const seen_by = std::make_shared<recorder>();
        locks.set_observer(seen_by);
        election vote{locks, name};
        auto opt = lease(3000ms);
        opt.renew_interval = 100ms;
        auto lead = co_await vote.co_campaign("a", opt);
        co_await poll_until([&] { return !seen_by->of("renewal").empty(); }, 300, 10ms);
        std::optional<leadership> next;
        asio::co_spawn(
            co_await asio::this_coro::executor,
            [&]() -> asio::awaitable<void> { next.emplace(co_await vote.co_campaign("b", opt)); },
            asio::detached);
        co_await poll_until([&] { return !seen_by->of("queue").empty(); }, 300, 10ms);
        CHECK(co_await lead.release());
        co_await poll_until([&] { return next.has_value(); }, 300, 10ms);
        REQUIRE(next.has_value());
        CHECK(co_await next->release());

        auto const acquired = seen_by->of("acquired");
        REQUIRE(acquired.size() == 2);
        for (auto const& e : acquired) {
            CHECK(e.name == name);
            CHECK(e.holder_kind == "election");
        }
        CHECK(acquired[0].fence == lead.term());
        CHECK(acquired[1].fence == next->term());
        auto const released = seen_by->of("released");
        REQUIRE(released.size() == 2);
        CHECK(released[0].holder_kind == "election");
        CHECK(released[0].fence == lead.term());
        auto const renewals = seen_by->of("renewal");
        REQUIRE_FALSE(renewals.empty());
        CHECK(renewals[0].holder_kind == "election");
        auto const queued = seen_by->of("queue");
        REQUIRE_FALSE(queued.empty());
        for (auto const& e : queued) {
            CHECK(e.name == name);
            CHECK(e.holder_kind == "election");
        }
    };
    run_lock_test<one_locker>("observer-election", scenario);
}

TEST_CASE("observer: a reconnection is reported with the connection's count") {
    auto& server = shared_server();
    auto scenario = [&](redis::connection& conn, locker&, locker&,
                        std::shared_ptr<recorder> const& seen_by,
                        std::string const&) -> asio::awaitable<void> {
        auto const id = co_await integer(conn, command("CLIENT", "ID"));
        CHECK(server.cli(strings("CLIENT", "KILL", "ID", std::to_string(id))) == "1");
        co_await poll_until([&] { return !seen_by->events.empty(); }, 300, 10ms);
        REQUIRE(seen_by->kinds() == strings("reconnect"));
        CHECK(seen_by->events[0].count == 1);
        CHECK(conn.reconnect_count() == 1);
    };
    run_lock_test<observed_locker>(fast_config(server), "observer-reconnect", scenario);
}

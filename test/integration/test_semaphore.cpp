// The semaphore against a real server: never more than `capacity` permits held, waiting calls
// served first come first served across lockers and woken by the release (not by polling), a
// call for several permits not overtaken by later calls for one, the permits of a holder that
// stops renewing back within their ttl, a lost holding reported, cancellation and destruction
// that leave nothing queued, a capacity that differs refused, and every key with an expiry.
#include <colock/rw_lock.hpp>
#include <colock/semaphore.hpp>

#include "lock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

using namespace colock;
using namespace colock::test;
using namespace asio::experimental::awaitable_operators;

namespace {

std::string semaphore_key(std::string const& name) {
    return "colock:semaphore:{" + name + "}";
}

// Every key of the semaphore has an expiry (none is left forever); returns how many exist.
asio::awaitable<int> keys_all_expire(redis::connection& probe, std::string const& name) {
    int found = 0;
    auto const base = semaphore_key(name);
    for (auto const* suffix : {"", ":h", ":hw", ":q", ":qd"}) {
        auto const key = base + suffix;
        auto const pttl = co_await integer(probe, command("PTTL", key));
        if (pttl == -2)
            continue;
        ++found;
        CHECK_MESSAGE(pttl > 0, key << " has no expiry");
    }
    co_return found;
}

using acquire_run = call_run<permit>;

void start_acquire(asio::any_io_executor ex, semaphore& sem, std::size_t permits, lock_options opt,
                   acquire_run& run) {
    start_call(
        ex, [&sem, permits, opt] { return sem.co_acquire(permits, opt); }, run);
}

} // namespace

TEST_CASE("semaphore: at most capacity permits; try_acquire is empty when full; a release frees "
          "a permit; fences increase; every key expires") {
    run_lock_test<one_locker>(
        "sem-basic",
        [](redis::connection&, redis::connection& probe, locker& locks,
           std::string const& name) -> asio::awaitable<void> {
            semaphore sem{locks, name, 3};
            CHECK(sem.capacity() == 3);
            CHECK(sem.name() == name);
            CHECK(co_await sem.co_available() == 3);
            std::vector<permit> held;
            std::int64_t last_fence = 0;
            for (int i = 0; i < 3; ++i) {
                held.push_back(co_await sem.co_acquire(lease(10'000ms)));
                CHECK(held.back().owns());
                CHECK(held.back().count() == 1);
                CHECK(held.back().name() == name);
                CHECK(held.back().fence() > last_fence);
                last_fence = held.back().fence();
            }
            CHECK(co_await sem.co_available() == 0);
            CHECK_FALSE((co_await sem.co_try_acquire()).has_value());
            CHECK(co_await keys_all_expire(probe, name) == 2);
            auto const pttl = co_await integer(probe, command("PTTL", semaphore_key(name)));
            CHECK(pttl > 9000);

            CHECK(co_await held[1].release());
            CHECK_FALSE(held[1].owns());
            CHECK_FALSE(co_await held[1].release()); // released already
            CHECK(co_await sem.co_available() == 1);
            auto again = co_await sem.co_try_acquire();
            REQUIRE(again.has_value());
            CHECK(again->fence() > last_fence);
            for (auto& p : held)
                co_await p.release();
            co_await again->release();
            CHECK(co_await sem.co_available() == 3);
            // The permits are gone; the semaphore's hash keeps the last fence, with an expiry.
            CHECK(co_await integer(probe, command("EXISTS", semaphore_key(name) + ":h")) == 0);
            CHECK(co_await keys_all_expire(probe, name) == 1);
        });
}

TEST_CASE("semaphore and read-write lock: co_status lists the holdings with their permits, time "
          "left and holder's process; another capacity is reported, not refused") {
    run_lock_test<one_locker>(
        "sem-status",
        [](redis::connection&, redis::connection& probe, locker& locks,
           std::string const& name) -> asio::awaitable<void> {
            semaphore sem{locks, name, 5};
            auto const before = co_await sem.co_status();
            CHECK(before.name == name);
            CHECK(before.capacity == 0); // nothing kept yet
            CHECK(before.holdings.empty());
            auto one = co_await sem.co_acquire(lease(10'000ms));
            auto two = co_await sem.co_acquire(2, lease(20'000ms));
            auto const st = co_await sem.async_status(asio::use_awaitable);
            CHECK(st.capacity == 5);
            CHECK(st.used == 3);
            CHECK(st.available() == 2);
            CHECK(st.fence == two.fence());
            CHECK(st.queued == 0);
            REQUIRE(st.holdings.size() == 2);
            // The first to expire first: the 10 s permit.
            CHECK(st.holdings[0].token == one.token());
            CHECK(st.holdings[0].permits == 1);
            CHECK(st.holdings[0].ttl > 9000ms);
            CHECK(st.holdings[0].ttl <= 10'000ms);
            CHECK(st.holdings[1].token == two.token());
            CHECK(st.holdings[1].permits == 2);
            CHECK(st.holdings[1].ttl > 19'000ms);
            CHECK(st.holdings[0].holder_id == locks.id());
            REQUIRE(st.holdings[1].holder.has_value());
            CHECK(st.holdings[1].holder->pid == ::getpid());
            // Another user's capacity: reported as the server keeps it.
            semaphore other{locks, name, 8};
            CHECK((co_await other.co_status()).capacity == 5);
            co_await one.release();
            co_await two.release();
            CHECK((co_await sem.co_status()).used == 0);

            rw_lock rw{locks, name};
            CHECK((co_await rw.co_status()).state == rw_state::free);
            auto w = co_await rw.co_lock(lease(10'000ms));
            auto const ws = co_await rw.co_status();
            CHECK(ws.state == rw_state::exclusive);
            CHECK(ws.readers == 0);
            CHECK(ws.fence == w.fence());
            REQUIRE(ws.holdings.size() == 1);
            CHECK(ws.holdings[0].token == w.token());
            auto r = co_await w.co_downgrade();
            auto r2 = co_await rw.co_lock_shared(lease(10'000ms));
            auto const rs = co_await rw.async_status(asio::use_awaitable);
            CHECK(rs.state == rw_state::shared);
            CHECK(rs.readers == 2);
            CHECK(rs.holdings.size() == 2);
            CHECK(to_string(rs.state) == "shared");
            co_await r.release();
            co_await r2.release();

            // A capacity not colock's: an error naming the key.
            co_await probe.co_exec(command("HSET", semaphore_key(name), "capacity", "3.0"));
            auto const refused = co_await failure_of(sem.co_status());
            CHECK(refused.code == error::unexpected_reply);
            CHECK(refused.what.find("status of semaphore '" + name + "'") != std::string::npos);
            CHECK(refused.what.find(semaphore_key(name)) != std::string::npos);
            co_await probe.co_exec(command("DEL", semaphore_key(name)));
        });
}

TEST_CASE("semaphore: a capacity other than the one at the server is refused, naming both, and "
          "nothing changes; bad arguments are refused before any I/O") {
    run_lock_test<two_lockers>(
        "sem-capacity",
        [](redis::connection&, redis::connection&, redis::connection& probe, locker& a, locker& b,
           std::string const& name) -> asio::awaitable<void> {
            semaphore five{a, name, 5};
            semaphore four{b, name, 4};
            auto p = co_await five.co_acquire();
            auto const refused = co_await failure_of(four.co_acquire());
            CHECK(refused.code == error::invalid_argument);
            CHECK(refused.what.find("capacity 5") != std::string::npos);
            CHECK(refused.what.find("not 4") != std::string::npos);
            CHECK(refused.what.find(name) != std::string::npos);
            CHECK((co_await failure_of(four.co_available())).code == error::invalid_argument);
            CHECK(co_await integer(probe, command("ZCARD", semaphore_key(name) + ":h")) == 1);
            CHECK(co_await integer(probe, command("EXISTS", semaphore_key(name) + ":q")) == 0);
            CHECK(co_await p.release());

            CHECK(call_failure([&] { semaphore bad{a, "", 3}; }).code == error::invalid_argument);
            CHECK(call_failure([&] { semaphore bad{a, name, 0}; }).code == error::invalid_argument);
            auto const too_many = call_failure([&] { (void)five.async_acquire(6); });
            CHECK(too_many.code == error::invalid_argument);
            CHECK(too_many.what.find("permits must be 1 to 5") != std::string::npos);
            CHECK((co_await failure_of(five.co_acquire(0))).code == error::invalid_argument);
            lock_options no_ttl;
            no_ttl.ttl = 0ms;
            CHECK((co_await failure_of(five.co_acquire(no_ttl))).code == error::invalid_argument);
        });
}

TEST_CASE("semaphore: values the library did not write are refused naming the key, not counted "
          "on: a fence of 2^53 or more, a capacity \"3.0\", a weight \"abc\" where the scripts "
          "read one") {
    run_lock_test<two_lockers>(
        "sem-hostile",
        [](redis::connection&, redis::connection&, redis::connection& probe, locker& a, locker&,
           std::string const& name) -> asio::awaitable<void> {
            auto const key = semaphore_key(name);
            // Lua's doubles would give both calls 9007199254740992.
            co_await integer(probe,
                             command("HSET", key, "capacity", "3", "fence", "9007199254740993"));
            co_await integer(probe, command("PEXPIRE", key, "60000"));
            semaphore three{a, name, 3};
            for (int i = 0; i < 2; ++i) {
                auto const refused = co_await failure_of(three.co_acquire());
                CHECK(refused.code);
                CHECK(refused.what.find(key) != std::string::npos);
                CHECK(refused.what.find("9007199254740993") != std::string::npos);
            }
            CHECK(co_await integer(probe, command("EXISTS", key + ":h")) == 0);

            // A capacity written as "3.0": not the 3 asked for, and said as it is stored.
            co_await integer(probe, command("HSET", key, "capacity", "3.0", "fence", "5"));
            auto const mismatch = co_await failure_of(three.co_acquire());
            CHECK(mismatch.code == error::invalid_argument);
            CHECK(mismatch.what.find("\"3.0\"") != std::string::npos);
            CHECK(mismatch.what.find(key) != std::string::npos);
            CHECK((co_await failure_of(three.co_available())).what.find("\"3.0\"") !=
                  std::string::npos);

            // A weight that is not a number, met where the scripts read weights: counting the
            // holdings again (no count of the permits held, or one that is not a number), and
            // taking off an expired holding's permits.
            co_await integer(probe, command("HSET", key, "capacity", "3", "used", "zz"));
            co_await integer(probe, command("ZADD", key + ":h", "99999999999999", "intruder"));
            co_await integer(probe, command("HSET", key + ":hw", "intruder", "abc"));
            co_await integer(probe, command("PEXPIRE", key + ":h", "60000"));
            co_await integer(probe, command("PEXPIRE", key + ":hw", "60000"));
            for (auto const* used : {"zz", "1"}) {
                CAPTURE(used);
                if (std::string_view(used) == "1") {
                    co_await integer(probe, command("HSET", key, "used", used));
                    co_await integer(probe, command("ZADD", key + ":h", "1", "intruder"));
                }
                auto const weight = co_await failure_of(three.co_acquire());
                CHECK(weight.code);
                CHECK(weight.what.find(key + ":hw") != std::string::npos);
                CHECK(weight.what.find("abc") != std::string::npos);
                // The intruder only: nothing granted, nothing removed.
                CHECK(co_await integer(probe, command("ZCARD", key + ":h")) == 1);
            }
            co_await integer(probe, command("DEL", key, key + ":h", key + ":hw"));
        });
}

TEST_CASE("semaphore: a waiting call on another locker is woken by the release, not by its "
          "poll, and waiting calls are served in arrival order") {
    run_lock_test<two_lockers>(
        "sem-wake",
        [](redis::connection&, redis::connection&, redis::connection& probe, locker& a, locker& b,
           std::string const& name) -> asio::awaitable<void> {
            auto ex = co_await asio::this_coro::executor;
            semaphore sa{a, name, 1};
            semaphore sb{b, name, 1};
            auto held = co_await sa.co_acquire(lease(10'000ms));
            acquire_run first, second;
            start_acquire(ex, sb, 1, lease(10'000ms), first);
            CHECK(co_await exists_becomes(probe, semaphore_key(name) + ":q", 1) == 1); // first
            start_acquire(ex, sa, 1, lease(10'000ms), second);
            CHECK(co_await numsub_becomes(probe, semaphore_key(name) + ":w:*", 2) == 2);
            // Past any poll made before the subscriptions: nobody got in.
            CHECK(co_await stays([&] { return !first.done && !second.done; }, 1500ms));
            CHECK(co_await integer(probe, command("LLEN", semaphore_key(name) + ":q")) == 2);
            CHECK_FALSE(first.done);

            auto const released_at = steady::now();
            CHECK(co_await held.release());
            CHECK(co_await finishes(first.done, 2000ms));
            REQUIRE(first.got.has_value());
            // A poll would come up to a second later: the message woke it.
            CHECK(ms_between(released_at, first.at) < 300);
            CHECK_FALSE(second.done);
            CHECK(first.got->fence() > held.fence());

            CHECK(co_await first.got->release());
            CHECK(co_await finishes(second.done, 2000ms));
            REQUIRE(second.got.has_value());
            CHECK(co_await second.got->release());
            CHECK(co_await exists_becomes(probe, semaphore_key(name) + ":q", 0) == 0);
            CHECK(co_await numsub_becomes(probe, semaphore_key(name) + ":w:*", 0) == 0);
        });
}

TEST_CASE("semaphore: permits granted in a reply read after their lease's end are given back: "
          "a try returns nothing and a waiting call asks again") {
    run_lock_test<two_lockers>(
        "sem-late",
        [](redis::connection&, redis::connection&, redis::connection& probe, locker& a, locker& b,
           std::string const& name) -> asio::awaitable<void> {
            semaphore sa{a, name, 1};
            semaphore sb{b, name, 1};
            // Writes held 400 ms: the grant is applied when the pause ends, and its reply read
            // 400 ms after the request, past the 200 ms the caller can count on from its start.
            auto opt = lease(200ms);
            opt.auto_renew = false;
            co_await probe.co_exec(command("CLIENT", "PAUSE", "400", "WRITE"));
            CHECK_FALSE((co_await sa.co_try_acquire(opt)).has_value());
            // Given back, not left to lapse: the other locker takes the one permit at once.
            auto taken = co_await sb.co_try_acquire(lease(10'000ms));
            REQUIRE(taken.has_value());
            auto const taken_fence = taken->fence();
            CHECK(co_await taken->release());

            co_await probe.co_exec(command("CLIENT", "PAUSE", "400", "WRITE"));
            auto const start = steady::now();
            auto held = co_await sa.co_acquire(opt);
            CHECK(steady::now() - start >= 350ms);
            CHECK(held.owns());
            CHECK(held.fence() > taken_fence);
            CHECK(co_await held.release());
        });
}

TEST_CASE("semaphore: a call for several permits is not overtaken by later calls for one, and "
          "gets them all at once") {
    run_lock_test<two_lockers>(
        "sem-large",
        [](redis::connection&, redis::connection&, redis::connection& probe, locker& a, locker& b,
           std::string const& name) -> asio::awaitable<void> {
            auto ex = co_await asio::this_coro::executor;
            semaphore sa{a, name, 4};
            semaphore sb{b, name, 4};
            std::vector<permit> small;
            for (int i = 0; i < 3; ++i)
                small.push_back(co_await sa.co_acquire(lease(10'000ms)));
            acquire_run large;
            start_acquire(ex, sb, 4, lease(10'000ms), large);
            CHECK(co_await exists_becomes(probe, semaphore_key(name) + ":q", 1) == 1);
            // One permit is free, but the call for four came first.
            CHECK(co_await sa.co_available() == 1);
            CHECK_FALSE((co_await sa.co_try_acquire()).has_value());
            acquire_run later;
            start_acquire(ex, sa, 1, lease(10'000ms), later);
            CHECK(co_await stays([&] { return !later.done; }, 300ms));
            CHECK(co_await small[0].release());
            CHECK(co_await small[1].release());
            // Two free, and still behind the call for four.
            CHECK(co_await stays([&] { return !large.done && !later.done; }, 200ms));
            CHECK_FALSE(large.done);
            CHECK_FALSE(later.done);
            CHECK(co_await small[2].release());
            CHECK(co_await finishes(large.done, 2000ms));
            REQUIRE(large.got.has_value());
            CHECK(large.got->count() == 4);
            // One holding, of weight four.
            CHECK(co_await integer(probe, command("ZCARD", semaphore_key(name) + ":h")) == 1);
            auto const weight = co_await probe.co_exec(
                command("HGET", semaphore_key(name) + ":hw", large.got->token()));
            CHECK(weight.at(0).as_string().value_or("") == "4");
            CHECK(co_await sa.co_available() == 0);
            CHECK_FALSE(later.done);
            CHECK(co_await large.got->release());
            CHECK(co_await integer(probe, command("EXISTS", semaphore_key(name) + ":hw")) == 0);
            CHECK(co_await finishes(later.done, 2000ms));
            REQUIRE(later.got.has_value());
            CHECK(later.got->fence() > large.got->fence());
            CHECK(co_await later.got->release());
        });
}

TEST_CASE("semaphore: permits not renewed come back at their ttl to a waiting call; their "
          "release answers false; a holding removed from outside is reported lost") {
    run_lock_test<two_lockers>(
        "sem-expiry",
        [](redis::connection&, redis::connection&, redis::connection& probe, locker& a, locker& b,
           std::string const& name) -> asio::awaitable<void> {
            auto ex = co_await asio::this_coro::executor;
            semaphore sa{a, name, 1};
            semaphore sb{b, name, 1};
            lock_options dying = lease(600ms);
            dying.auto_renew = false; // as a holder that stopped
            auto const taken_at = steady::now();
            auto stale = co_await sa.co_acquire(dying);
            acquire_run waiting;
            start_acquire(ex, sb, 1, lease(600ms), waiting);
            CHECK(co_await finishes(waiting.done, 3000ms));
            REQUIRE(waiting.got.has_value());
            CHECK(ms_between(taken_at, waiting.at) >= 590);
            CHECK(ms_between(taken_at, waiting.at) < 2000);
            CHECK(stale.lost());
            CHECK(stale.loss() == loss_reason::expired);
            CHECK_FALSE(co_await stale.release()); // an expired permit is never "released"
            CHECK(waiting.got->owns());

            // Renewed (every 200 ms), it stays held past its ttl...
            CHECK(co_await stays([&] { return waiting.got->owns(); }, 900ms));
            // ... until its holding is removed from outside: the renewal reports it lost.
            co_await probe.co_exec(command("DEL", semaphore_key(name) + ":h"));
            auto const deleted_at = steady::now();
            auto const lost = co_await (waiting.got->wait_lost() || sleep_for(2000ms));
            CHECK(lost.index() == 0);
            CHECK(ms_between(deleted_at, steady::now()) < 600);
            CHECK(waiting.got->loss() == loss_reason::not_ours);
            CHECK_FALSE(co_await waiting.got->release());
        });
}

TEST_CASE("semaphore: a waiting call cancelled, or ended by the semaphore's destruction, leaves "
          "nothing queued, and a permit let go by its destructor is released") {
    run_lock_test<two_lockers>(
        "sem-cancel",
        [](redis::connection&, redis::connection&, redis::connection& probe, locker& a, locker& b,
           std::string const& name) -> asio::awaitable<void> {
            auto ex = co_await asio::this_coro::executor;
            semaphore sa{a, name, 1};
            auto held = co_await sa.co_acquire(lease(10'000ms));
            {
                semaphore sb{b, name, 1};
                auto const raced = co_await (sb.co_acquire() || sleep_for(300ms));
                CHECK(raced.index() == 1);
                CHECK(co_await exists_becomes(probe, semaphore_key(name) + ":q", 0) == 0);
                CHECK(co_await numsub_becomes(probe, semaphore_key(name) + ":w:*", 0) == 0);

                acquire_run ended;
                start_acquire(ex, sb, 1, lease(10'000ms), ended);
                CHECK(co_await exists_becomes(probe, semaphore_key(name) + ":q", 1) == 1);
                CHECK(co_await stays([&] { return !ended.done; }, 50ms));
                sb = semaphore{b, name, 1}; // the first one goes
                CHECK(co_await finishes(ended.done, 1000ms));
                CHECK(ended.ec == asio::error::operation_aborted);
                CHECK(co_await exists_becomes(probe, semaphore_key(name) + ":q", 0) == 0);
            }
            {
                permit dropped = std::move(held); // let go by its destructor below
            }
            CHECK(co_await exists_becomes(probe, semaphore_key(name) + ":h", 0) == 0);
            CHECK(co_await sa.co_available() == 1);
        });
}

TEST_CASE("semaphore: 3 lockers x 6 coroutines on capacity 3 never hold more than 3, and every "
          "coroutine gets its turns") {
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        auto const name = unique_key("sem-load");
        lockers_with<semaphore> sems(ctx, shared_server().config(), 3, [&](locker& l) {
            return std::make_unique<semaphore>(l, name, 3);
        });
        int inside = 0, most = 0, failed = 0;
        std::vector<int> turns(18, 0);
        auto const end = steady::now() + 1500ms;
        failed += co_await run_side_by_side(ctx, 18, [&](int w) -> asio::awaitable<void> {
            while (steady::now() < end) {
                auto p = co_await sems[w].co_acquire(lease(5000ms));
                most = std::max(most, ++inside);
                ++turns[w];
                co_await sleep_for(2ms);
                --inside;
                if (!co_await p.release())
                    ++failed;
            }
        });
        CHECK(failed == 0);
        CHECK(most <= 3);
        CHECK(most == 3);
        auto const [least, largest] = std::minmax_element(turns.begin(), turns.end());
        CHECK(*least > 0);
        MESSAGE("turns per coroutine: " << *least << " to " << *largest);
        sems.close();
    });
}

TEST_CASE("semaphore: an ACL user with the lock's permissions and these: acquire, wake-up, "
          "renew, release; without them, the server's refusal and where the list is; without "
          "channels, waiting calls poll") {
    set_lock_user(shared_server(), "semuser",
                  strings("+zadd", "+zrem", "+zscore", "+zcard", "+zrange", "+zrangebyscore",
                          "+hmget", "+hvals", "+lrange"));
    set_lock_user(shared_server(), "lockonly");
    shared_server().cli(
        strings("ACL", "SETUSER", "semnochannels", "on", ">pw", "~*", "+@all", "resetchannels"));
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        auto const as = [](std::string user) { return as_user(shared_server(), std::move(user)); };
        redis::connection conn_a{ctx.get_executor(), as("semuser")};
        redis::connection conn_b{ctx.get_executor(), as("semuser")};
        redis::connection conn_c{ctx.get_executor(), as("lockonly")};
        redis::connection conn_d{ctx.get_executor(), as("semnochannels")};
        locker a{conn_a}, b{conn_b}, c{conn_c}, d{conn_d};
        auto const name = unique_key("sem-acl");
        // So that FUNCTION LOAD (or SCRIPT LOAD) is needed too.
        shared_server().cli(strings("FUNCTION", "FLUSH"));
        shared_server().cli(strings("SCRIPT", "FLUSH"));
        semaphore sa{a, name, 1}, sb{b, name, 1};
        lock_options opt = lease(600ms);
        opt.renew_interval = 200ms;
        auto held = co_await sa.co_acquire(opt);
        std::optional<permit> next;
        asio::co_spawn(
            ctx, [&]() -> asio::awaitable<void> { next.emplace(co_await sb.co_acquire(opt)); },
            asio::detached);
        // Renewed past its ttl; the waiter subscribed and sleeps.
        CHECK(co_await stays([&] { return held.owns(); }, 1200ms));
        auto const released_at = steady::now();
        CHECK(co_await held.release());
        co_await eventually([&] { return next.has_value(); }, 2000ms, 2ms);
        REQUIRE(next);
        CHECK(ms_between(released_at, steady::now()) < 300); // woken: the channel is allowed
        CHECK(co_await next->release());

        // Without the sorted-set commands: the server's refusal (Redis does not name the
        // command a script was refused), and where the list of commands is.
        semaphore sc{c, name, 1};
        auto const refused = co_await failure_of(sc.co_acquire(opt));
        CHECK(refused.code == redis::error::server_error);
        CHECK(refused.what.find("can't run this command") != std::string::npos);
        CHECK(refused.what.find("ACL permissions") != std::string::npos);
        CHECK(refused.what.find(name) != std::string::npos);

        // Without channels: a waiting call finds the free permit by polling.
        semaphore sd{d, name, 1};
        lock_options polling = opt;
        polling.retry.max = 100ms;
        auto blocker = co_await sa.co_acquire(opt);
        bool done = false;
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> {
                auto p = co_await sd.co_acquire(polling);
                co_await p.release();
                done = true;
            },
            asio::detached);
        CHECK(co_await stays([&] { return !done; }, 300ms));
        CHECK(co_await blocker.release());
        CHECK(co_await finishes(done, 3000ms));
        conn_a.close();
        conn_b.close();
        conn_c.close();
        conn_d.close();
    });
    for (auto const* user : {"semuser", "lockonly", "semnochannels"})
        shared_server().cli(strings("ACL", "DELUSER", user));
}

TEST_CASE("semaphore: closing the connection, or destroying the locker, ends a waiting call "
          "with operation_aborted at once") {
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        auto const cfg = shared_server().config();
        auto const name = unique_key("sem-close");
        redis::connection holder_conn{ctx.get_executor(), cfg};
        locker holder{holder_conn};
        semaphore held_sem{holder, name, 1};
        auto held = co_await held_sem.co_acquire(lease(10'000ms));

        // The connection closed by its user, before and after the waiter subscribed.
        for (auto settle : {0ms, 300ms}) {
            redis::connection conn{ctx.get_executor(), cfg};
            locker locks{conn};
            semaphore sem{locks, name, 1};
            acquire_run waiting;
            start_acquire(ctx.get_executor(), sem, 1, lease(10'000ms), waiting);
            CHECK(co_await stays([&] { return !waiting.done; }, 20ms + settle));
            auto const closed_at = steady::now();
            conn.close();
            CHECK(co_await finishes(waiting.done, 1000ms));
            CHECK(waiting.ec == asio::error::operation_aborted);
            CHECK(ms_between(closed_at, waiting.at) < 200);
        }

        // The locker destroyed while the semaphore made on it waits.
        redis::connection conn{ctx.get_executor(), cfg};
        auto locks = std::make_unique<locker>(conn);
        semaphore sem{*locks, name, 1};
        acquire_run waiting;
        start_acquire(ctx.get_executor(), sem, 1, lease(10'000ms), waiting);
        co_await sleep_for(300ms);
        locks.reset();
        CHECK(co_await finishes(waiting.done, 1000ms));
        CHECK(waiting.ec == asio::error::operation_aborted);
        CHECK(co_await held.release());
        conn.close();
        holder_conn.close();
    });
}

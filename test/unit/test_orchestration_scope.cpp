// Explicit re-entry without Redis: guards sharing a lease (lock_guard::share) send one release,
// when the last goes, which a local waiter then gets as from any holder; a lock_scope asks the
// store once for two calls on one name, and its end aborts what it has pending.
#include "orchestration.hpp"

#include <colock/lock_scope.hpp>

using colock::lock_scope;

TEST_CASE_FIXTURE(one_process, "share: one lease, one release, sent when the last sharing guard "
                               "goes; the next local waiter gets it then, not before") {
    w.run([&]() -> asio::awaitable<void> {
        std::optional<lock_guard> g(co_await a.co_lock("n", short_lease()));
        auto s = g->share();
        auto t = s.share();
        CHECK(g->hold_count() == 3);
        CHECK(w.server.calls().leases == 1);

        bool waiter_done = false;
        std::optional<lock_guard> next;
        asio::co_spawn(
            w.ctx,
            [&]() -> asio::awaitable<void> {
                next.emplace(co_await a.co_lock("n", short_lease()));
                waiter_done = true;
            },
            asio::detached);
        co_await until([&] { return a.waiting() == 1; });

        g.reset();
        CHECK(co_await s.release()); // one of two left: true, nothing sent
        co_await sleep_for(20ms);
        CHECK_FALSE(waiter_done);
        CHECK(w.server.calls().releases == 0);
        CHECK(t.hold_count() == 1);
        CHECK(t.owns());

        t = lock_guard{}; // the last: the lease goes to the waiter of this process
        co_await until([&] { return waiter_done; });
        REQUIRE(next.has_value());
        CHECK(next->owns());
        CHECK(next->hold_count() == 1);
        CHECK(next->fence() == s.fence() + 1); // a hand-off: the next fence, no new lease
        CHECK(w.server.calls().leases == 1);
        CHECK(co_await next->release());
        CHECK(w.server.calls().releases == 1);
    });
}

TEST_CASE_FIXTURE(one_process, "share: a lease lost reaches every sharing guard; sharing it "
                               "again gives a lost guard, and a scope takes the lock anew") {
    w.run([&]() -> asio::awaitable<void> {
        lock_scope scope{a};
        auto opt = renewed_lease(2000ms, 50ms);
        auto g = co_await scope.co_lock("n", opt);
        auto s = g.share();
        w.server.drop(lock_key);
        co_await g.wait_lost();
        co_await s.wait_lost();
        CHECK(s.loss() == colock::loss_reason::not_ours);
        auto u = s.share();
        CHECK(u.lost());
        CHECK(u.hold_count() == 3);
        CHECK(scope.hold_count("n") == 0);
        auto again = co_await scope.co_lock("n", opt);
        CHECK(again.owns());
        CHECK(again.token() != g.token());
        CHECK(w.server.calls().leases == 2);
        CHECK(co_await again.release());
    });
}

TEST_CASE_FIXTURE(two_processes, "lock_scope: two calls on one name ask the store once; both "
                                 "guards share the lease") {
    w.run([&]() -> asio::awaitable<void> {
        auto holder = co_await b.co_lock("n", short_lease());
        lock_scope scope{a};
        auto const grants_before = w.server.calls().grants;
        std::optional<lock_guard> first, second;
        asio::co_spawn(
            w.ctx, [&]() -> asio::awaitable<void> { first.emplace(co_await scope.co_lock("n")); },
            asio::detached);
        asio::co_spawn(
            w.ctx, [&]() -> asio::awaitable<void> { second.emplace(co_await scope.co_lock("n")); },
            asio::detached);
        co_await until([&] { return a.waiting() == 1; });
        co_await sleep_for(20ms);
        CHECK(a.waiting() == 1);
        // Behind the first, a try does not wait.
        auto tried = co_await scope.co_try_lock("n");
        CHECK_FALSE(tried.has_value());
        CHECK(co_await holder.release());
        co_await until([&] { return first && second; });
        CHECK(first->token() == second->token());
        CHECK(first->hold_count() == 2);
        CHECK(scope.hold_count("n") == 2);
        // One grant for the scope, however many turns it took.
        auto const scope_leases = w.server.calls().leases;
        CHECK(w.server.calls().grants > grants_before);
        auto third = co_await scope.co_lock("n");
        CHECK(w.server.calls().leases == scope_leases);
        CHECK(third.hold_count() == 3);
    });
}

TEST_CASE_FIXTURE(two_processes, "lock_scope: its end aborts the call asking the store and the "
                                 "one behind it; the guard it returned lives on") {
    w.run([&]() -> asio::awaitable<void> {
        auto holder = co_await b.co_lock("n", short_lease());
        auto scope = std::make_unique<lock_scope>(a);
        auto kept = co_await scope->co_lock("m", short_lease());
        error_code first_ec, second_ec;
        int done = 0;
        auto take = [&](error_code& into) -> asio::awaitable<void> {
            try {
                co_await scope->co_lock("n", short_lease());
            } catch (boost::system::system_error const& e) {
                into = e.code();
            }
            ++done;
        };
        asio::co_spawn(w.ctx, take(first_ec), asio::detached);
        asio::co_spawn(w.ctx, take(second_ec), asio::detached);
        co_await until([&] { return a.waiting() == 1; });
        scope.reset();
        co_await until([&] { return done == 2; });
        CHECK(first_ec == asio::error::operation_aborted);
        CHECK(second_ec == asio::error::operation_aborted);
        CHECK(a.waiting() == 0);
        CHECK(kept.owns());
        CHECK(co_await holder.release());
        co_await sleep_for(20ms);
        CHECK(free_or_gone(w.server.lock(lock_key))); // not handed to the aborted call
        CHECK(co_await kept.release());
    });
}

TEST_CASE_FIXTURE(one_process, "lock_scope: async_lock and async_try_lock with callbacks share "
                               "as co_lock does, and complete never inside the call") {
    w.run([&]() -> asio::awaitable<void> {
        lock_scope scope{a};
        call_result first, second, tried;
        std::optional<lock_guard> g1, g2;
        std::optional<lock_guard> g3;
        scope.async_lock("n", short_lease(), [&](error_code ec, lock_guard g) {
            g1.emplace(std::move(g));
            record_call{first}(ec, g1->share());
        });
        CHECK_FALSE(first.done);
        co_await until([&] { return first.done; });
        CHECK_FALSE(first.ec);
        scope.async_lock("n", short_lease(), [&](error_code ec, lock_guard g) {
            g2.emplace(std::move(g));
            record_call{second}(ec, g2->share());
        });
        CHECK_FALSE(second.done);
        co_await until([&] { return second.done; });
        CHECK(g2->fence() == g1->fence());
        CHECK(w.server.calls().leases == 1);
        scope.async_try_lock("n", short_lease(), [&](error_code ec, std::optional<lock_guard> g) {
            g3 = std::move(g);
            tried.ec = ec;
            tried.done = true;
        });
        co_await until([&] { return tried.done; });
        REQUIRE(g3.has_value());
        CHECK(g3->token() == g1->token());
        CHECK(g1->hold_count() == 3);

        // Refused at the call; an empty optional from a try behind nothing held elsewhere.
        try {
            scope.async_lock("", {}, [](error_code, lock_guard) {});
            FAIL("async_lock took an empty name");
        } catch (boost::system::system_error const& e) {
            CHECK(e.code() == colock::error::invalid_argument);
        }
        auto [ec, g4] = co_await scope.async_lock("n", short_lease(), nothrow);
        CHECK_FALSE(ec);
        CHECK(g4.hold_count() == 4);
    });
}

TEST_CASE_FIXTURE(two_processes, "lock_scope: a call waiting behind another call of the scope "
                                 "gives up at its own wait_timeout; the other waits on") {
    w.run([&]() -> asio::awaitable<void> {
        auto holder = co_await b.co_lock("n", short_lease());
        lock_scope scope{a};
        std::optional<lock_guard> first;
        asio::co_spawn(
            w.ctx, [&]() -> asio::awaitable<void> { first.emplace(co_await scope.co_lock("n")); },
            asio::detached);
        co_await until([&] { return a.waiting() == 1; });
        auto opt = short_lease();
        opt.wait_timeout = 50ms;
        auto const started = clock_type::now();
        error_code behind;
        try {
            co_await scope.co_lock("n", opt);
        } catch (boost::system::system_error const& e) {
            behind = e.code();
            CHECK(std::string(e.what()).find("'n'") != std::string::npos);
        }
        CHECK(behind == colock::error::timeout);
        CHECK(clock_type::now() - started >= 50ms);
        CHECK(clock_type::now() - started < 500ms);
        CHECK_FALSE(first.has_value());
        CHECK(a.waiting() == 1);
        CHECK(co_await holder.release());
        co_await until([&] { return first.has_value(); });
        CHECK(first->hold_count() == 1);
    });
}

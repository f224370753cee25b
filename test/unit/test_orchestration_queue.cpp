// The local queue and cohort hand-off without Redis: call order, one asker per name, the
// release that goes to the queued process at once, cohort_limit, co_try_lock, no re-entry.
#include "orchestration.hpp"

TEST_CASE("orchestration: calls on one name in one process are served in call order, the "
          "lease passed down the local queue with growing fences and one grant") {
    world w;
    auto store = w.process();
    auto l = locker_access::make(store);
    auto observer = std::make_shared<recording_observer>();
    l.set_observer(observer);
    std::vector<int> order;
    std::vector<std::int64_t> fences;
    std::vector<std::string> tokens;
    std::vector<std::string> key_tokens; // what the lock key said during each turn
    int finished = 0;
    int released = 0;
    std::int64_t next_fence = 0;
    w.run([&]() -> asio::awaitable<void> {
        for (int i = 0; i < 4; ++i)
            asio::co_spawn(
                w.ctx,
                [&, i]() -> asio::awaitable<void> {
                    auto g = co_await l.co_lock("n", short_lease());
                    order.push_back(i);
                    fences.push_back(g.fence());
                    tokens.push_back(g.token());
                    auto const key = w.server.lock(lock_key);
                    key_tokens.push_back(key ? key->token : "");
                    co_await sleep_for(5ms);
                    if (co_await g.release())
                        ++released;
                    ++finished;
                },
                asio::detached);
        while (finished < 4)
            co_await sleep_for(1ms);
        // One release for the lease, with the last fence given.
        CHECK(w.server.calls().releases == 1);
        auto const freed = w.server.lock(lock_key);
        REQUIRE(freed);
        CHECK(freed->kind == fake_server::lock_entry::state::free);
        CHECK(freed->fence == fences.back());
        auto next = co_await l.co_lock("n", short_lease());
        next_fence = next.fence();
        co_await next.release();
    });
    CHECK(order == std::vector<int>{0, 1, 2, 3});
    CHECK(released == 4);
    REQUIRE(fences.size() == 4);
    for (std::size_t i = 1; i < fences.size(); ++i)
        CHECK(fences[i] == fences[i - 1] + 1);
    // Each holder has a guard and a token of its own; the lock key keeps the first holder's, the
    // lease's, all along.
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        CHECK(key_tokens[i] == tokens[0]);
        for (std::size_t j = 0; j < i; ++j)
            CHECK(tokens[i] != tokens[j]);
    }
    // The release stored the last fence given: the next lease's is one more.
    CHECK(next_fence == fences.back() + 1);
    // One lease from the server for the four turns, the first call's: the others took batons
    // (the queue's head may ask meanwhile, and find its own process holding); then the next
    // call's.
    CHECK(w.server.calls().leases == 2);
    CHECK(w.server.calls().releases == 2);
    REQUIRE(observer->acquired.size() == 5);
    CHECK(std::vector<colock::acquired_by>(observer->acquired.begin(),
                                           observer->acquired.begin() + 4) ==
          std::vector<colock::acquired_by>{
              colock::acquired_by::first_attempt, colock::acquired_by::local_handoff,
              colock::acquired_by::local_handoff, colock::acquired_by::local_handoff});
    auto const after = w.server.lock(lock_key);
    REQUIRE(after);
    CHECK(after->kind == fake_server::lock_entry::state::free);
    CHECK(after->fence == next_fence);
}

TEST_CASE_FIXTURE(two_processes,
                  "orchestration: a release goes to the process queued for it at once, not after a "
                  "poll") {
    w.run([&]() -> asio::awaitable<void> {
        auto held = co_await a.co_lock("n", short_lease(10s));
        std::optional<clock_type::time_point> b_got;
        std::int64_t b_fence = 0;
        // Its own asks as rare as they go (at most one a second, queue_refresh_interval, or
        // sooner by the jitter): the message is what brings it the lock.
        auto slow = short_lease(10s);
        slow.retry.initial = 10s;
        slow.retry.max = 10s;
        asio::co_spawn(
            w.ctx,
            [&]() -> asio::awaitable<void> {
                auto g = co_await b.co_lock("n", slow);
                b_got = clock_type::now();
                b_fence = g.fence();
            },
            asio::detached);
        co_await until([&] { return w.server.queue(lock_key).size() == 1; }); // b, at the server
        auto const released_at = clock_type::now();
        CHECK(co_await held.release());
        while (!b_got)
            co_await sleep_for(1ms);
        // Told by its message: far sooner than its next ask (a second, queue_refresh_interval).
        CHECK(*b_got - released_at < 500ms);
        CHECK(b_fence > held.fence());
    });
}

TEST_CASE_FIXTURE(
    two_processes,
    "orchestration: with another process queued, local hand-offs stop at cohort_limit") {
    std::vector<std::string> order;
    int finished = 0;
    auto opt = short_lease(10s);
    opt.cohort_limit = 1;
    auto hold_briefly = [&](locker& l, std::string who) -> asio::awaitable<void> {
        auto g = co_await l.co_lock("n", opt);
        order.push_back(who);
        co_await sleep_for(5ms);
        co_await g.release();
        ++finished;
    };
    w.run([&]() -> asio::awaitable<void> {
        auto first = co_await a.co_lock("n", opt);
        asio::co_spawn(w.ctx, hold_briefly(a, "a2"), asio::detached);
        asio::co_spawn(w.ctx, hold_briefly(a, "a3"), asio::detached);
        co_await until([&] { return a.waiting() == 2; });
        asio::co_spawn(w.ctx, hold_briefly(b, "b1"), asio::detached);
        co_await until([&] {
            auto const q = w.server.queue(lock_key);
            return std::find(q.begin(), q.end(), b.id()) != q.end();
        });
        order.push_back("a1");
        co_await first.release();
        co_await until([&] { return finished == 3; });
    });
    // a1 passes to a2 (one hand-off allowed while b's process waits), whose release goes to
    // b's process; a3 after it.
    CHECK(order == std::vector<std::string>{"a1", "a2", "b1", "a3"});
}

TEST_CASE_FIXTURE(two_processes,
                  "orchestration: co_try_lock of a held lock answers nothing and queues nothing") {
    w.run([&]() -> asio::awaitable<void> {
        auto held = co_await a.co_lock("n", short_lease());
        auto got = co_await b.co_try_lock("n", short_lease());
        CHECK_FALSE(got.has_value());
        CHECK(w.server.queue(lock_key).empty());
        CHECK(b.waiting() == 0);
        CHECK(co_await held.release());
    });
}

TEST_CASE_FIXTURE(
    two_processes_seen,
    "orchestration: calls queued behind another process's lease wait in the local queue, "
    "only its head asking the server, and get the lock one at a time in call order") {
    constexpr std::size_t calls = 40;
    std::vector<std::size_t> order;
    std::vector<std::int64_t> fences;
    std::size_t done = 0;
    int inside = 0;
    bool overlapped = false;
    w.run([&]() -> asio::awaitable<void> {
        auto holder = co_await a.co_lock("n", short_lease(10s));
        auto const grants_before = w.server.calls().grants;
        for (std::size_t i = 0; i < calls; ++i)
            asio::co_spawn(
                w.ctx,
                [&, i]() -> asio::awaitable<void> {
                    auto g = co_await b.co_lock("n", short_lease(10s));
                    overlapped = overlapped || ++inside != 1;
                    order.push_back(i);
                    fences.push_back(g.fence());
                    co_await sleep_for(1ms);
                    --inside;
                    co_await g.release();
                    ++done;
                },
                asio::detached);
        co_await until([&] { return b.waiting() == calls; });
        // The first call's attempt, the head's after subscribing, and its backoff polls: a few,
        // however many calls wait; one attempt per call would be 40.
        auto const asked = w.server.calls().grants - grants_before;
        CHECK(asked < static_cast<int>(calls / 4));
        CHECK(order.empty());

        CHECK(co_await holder.release());
        co_await until([&] { return done == calls; });
        co_await until([&] { return !listens(*b_store, b); });
    });
    CHECK_FALSE(overlapped);
    std::vector<std::size_t> made(calls);
    for (std::size_t i = 0; i < calls; ++i)
        made[i] = i;
    CHECK(order == made);
    for (std::size_t i = 1; i < fences.size(); ++i)
        CHECK(fences[i] > fences[i - 1]);
    CHECK(b.waiting() == 0);
    CHECK(free_or_gone(w.server.lock(lock_key)));
}

TEST_CASE_FIXTURE(
    two_processes_seen,
    "orchestration: of calls queued behind another process, one cancelled and one out of "
    "time leave at once, and the others still get the lock in turn") {
    constexpr std::size_t calls = 5;
    constexpr std::size_t cancelled_call = 2;
    constexpr std::size_t timed_call = 3;
    w.run([&]() -> asio::awaitable<void> {
        auto holder = co_await a.co_lock("n", short_lease(10s));
        asio::cancellation_signal cancel;
        std::vector<error_code> results(calls);
        std::vector<clock_type::time_point> ended(calls);
        std::vector<std::size_t> order;
        std::size_t done = 0;
        auto const started = clock_type::now();
        for (std::size_t i = 0; i < calls; ++i) {
            auto opt = short_lease(10s);
            if (i == timed_call)
                opt.wait_timeout = 100ms;
            auto call = [&, i, opt]() -> asio::awaitable<void> {
                // The outcome as a value, also for the cancelled call.
                co_await asio::this_coro::throw_if_cancelled(false);
                auto outcome = co_await b.async_lock("n", opt, nothrow);
                results[i] = std::get<0>(outcome);
                ended[i] = clock_type::now();
                if (!std::get<0>(outcome)) {
                    order.push_back(i);
                    co_await std::get<1>(outcome).release();
                }
            };
            if (i == cancelled_call)
                asio::co_spawn(w.ctx, call,
                               asio::bind_cancellation_slot(cancel.slot(),
                                                            [&](std::exception_ptr) { ++done; }));
            else
                asio::co_spawn(w.ctx, call, [&](std::exception_ptr) { ++done; });
        }
        co_await until([&] { return b.waiting() == calls; });

        auto const cancelled_at = clock_type::now();
        cancel.emit(asio::cancellation_type::terminal);
        co_await until([&] { return done >= 1; });
        CHECK(done == 1);
        CHECK(results[cancelled_call] == asio::error::operation_aborted);
        CHECK(ended[cancelled_call] - cancelled_at < 100ms);
        CHECK(b.waiting() == calls - 1);

        co_await until([&] { return done >= 2; });
        CHECK(done == 2);
        CHECK(results[timed_call] == colock::error::timeout);
        CHECK(ended[timed_call] - started >= 100ms);
        CHECK(ended[timed_call] - started < 2000ms); // not held up until the holder lets go
        CHECK(b.waiting() == calls - 2);

        CHECK(co_await holder.release());
        co_await until([&] { return done == calls; });
        CHECK(order == std::vector<std::size_t>{0, 1, 4});
        CHECK(b.waiting() == 0);
        co_await until([&] { return !listens(*b_store, b); });
        CHECK(w.server.queue(lock_key).empty());
        CHECK(free_or_gone(w.server.lock(lock_key)));
    });
}

TEST_CASE("orchestration: not reentrant: a second co_lock of a held name, from the same locker or "
          "another of the same process, waits for itself until wait_timeout; co_try_lock comes "
          "back empty") {
    world w;
    auto store = w.process();
    auto locks = locker_access::make(store);
    auto same_process = locker_access::make(store); // another part of the program, one connection
    w.run([&]() -> asio::awaitable<void> {
        auto held = co_await locks.co_lock("n", short_lease(10s));
        auto again = short_lease(10s);
        again.wait_timeout = 100ms;
        std::array<locker*, 2> const askers{&locks, &same_process};
        for (locker* l : askers) {
            auto const started = clock_type::now();
            std::string acquired;
            auto const thrown = co_await thrown_by([&]() -> asio::awaitable<void> {
                auto second = co_await l->co_lock("n", again);
                acquired = "acquired a second time, fence " + std::to_string(second.fence());
            });
            INFO(thrown.what << acquired);
            CHECK(thrown.code == colock::error::timeout);
            CHECK(thrown.what.find("'n'") != std::string::npos);
            CHECK(clock_type::now() - started >= 100ms);
            CHECK(clock_type::now() - started < 2000ms);
        }
        auto once = co_await locks.co_try_lock("n", short_lease());
        CHECK_FALSE(once.has_value());
        // The first guard is untouched.
        CHECK(held.owns());
        auto const key = w.server.lock(lock_key);
        REQUIRE(key);
        CHECK(key->token == held.token());
        CHECK(co_await held.release());
    });
}

TEST_CASE("orchestration: cohort_limit = 0: every waiter of the process takes a lease of its own "
          "from the server") {
    world w;
    auto l = locker_access::make(w.process());
    auto observer = std::make_shared<recording_observer>();
    l.set_observer(observer);
    auto opt = short_lease(10s);
    opt.cohort_limit = 0;
    std::vector<std::string> tokens, key_tokens;
    int done = 0;
    w.run([&]() -> asio::awaitable<void> {
        auto holder = co_await l.co_lock("n", opt);
        for (int i = 0; i < 3; ++i)
            asio::co_spawn(
                w.ctx,
                [&]() -> asio::awaitable<void> {
                    auto g = co_await l.co_lock("n", opt);
                    tokens.push_back(g.token());
                    auto const key = w.server.lock(lock_key);
                    key_tokens.push_back(key ? key->token : "");
                    CHECK(co_await g.release());
                    ++done;
                },
                asio::detached);
        co_await until([&] { return l.waiting() == 3; });
        CHECK(co_await holder.release());
        co_await until([&] { return done == 3; });
    });
    REQUIRE(tokens.size() == 3);
    CHECK(key_tokens == tokens);
    CHECK(w.server.calls().leases == 4);
    for (auto how : observer->acquired)
        CHECK(how != colock::acquired_by::local_handoff);
}

TEST_CASE("orchestration: a cohort's lease lost: its holder is told, and the next waiter of the "
          "process takes a lease of its own from the server") {
    world w;
    auto l = locker_access::make(w.process());
    auto opt = renewed_lease(3000ms, 50ms);
    w.run([&]() -> asio::awaitable<void> {
        auto first = co_await l.co_lock("n", opt);
        std::optional<lock_guard> second, third;
        asio::co_spawn(
            w.ctx, [&]() -> asio::awaitable<void> { second = co_await l.co_lock("n", opt); },
            asio::detached);
        asio::co_spawn(
            w.ctx, [&]() -> asio::awaitable<void> { third = co_await l.co_lock("n", opt); },
            asio::detached);
        co_await until([&] { return l.waiting() == 2; });
        CHECK(co_await first.release()); // to the second, locally
        co_await until([&] { return second.has_value(); });
        auto const lease = w.server.lock(lock_key);
        REQUIRE(lease);
        CHECK(lease->token == first.token()); // the lease goes on

        // Gone at the server: the holder (the second) finds out at its next renewal.
        w.server.drop(lock_key);
        co_await second->wait_lost();
        CHECK(second->lost());
        CHECK(second->loss() == colock::loss_reason::not_ours);
        CHECK_FALSE(co_await second->release());
        // The third does not get the lost lease: it asks the server for one of its own.
        co_await until([&] { return third.has_value(); });
        auto const own = w.server.lock(lock_key);
        REQUIRE(own);
        CHECK(own->token == third->token());
        CHECK(third->fence() > second->fence());
        CHECK(co_await third->release());
    });
}

TEST_CASE_FIXTURE(two_processes, "orchestration: a cohort whose locker missed the \"q\" message "
                                 "still yields: the queued process's next attempt tells it again") {
    auto opt = short_lease(10s);
    opt.cohort_limit = 2;
    w.run([&]() -> asio::awaitable<void> {
        // Process a: eight calls pass the lease among themselves for as long as they run, each
        // holding it for one turn, so that no waiter of a stays at the head of its queue long
        // enough to ask the server again (which would tell it too).
        bool stop = false;
        int a_running = 0;
        for (int i = 0; i < 8; ++i) {
            ++a_running;
            asio::co_spawn(
                w.ctx,
                [&]() -> asio::awaitable<void> {
                    while (!stop) {
                        auto g = co_await a.co_lock("n", opt);
                        co_await asio::post(w.ctx, asio::use_awaitable);
                        co_await g.release();
                    }
                },
                [&](std::exception_ptr) { --a_running; });
        }
        co_await until([&] { return a.waiting() > 0; }); // a's cohort is under way
        // The first "q" that b's attempts send is lost.
        w.server.lose_q_messages = 1;
        auto b_opt = opt;
        b_opt.wait_timeout = 3000ms;
        auto got = co_await b.co_lock("n", b_opt);
        CHECK(got.owns());
        CHECK(w.server.lose_q_messages == 0); // one was lost
        co_await got.release();
        stop = true;
        co_await until([&] { return a_running == 0; });
    });
}

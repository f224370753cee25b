// Cancellation and failure at every step without Redis: before the attempt is sent, with it in
// flight, while queued or sleeping, by wait_timeout, by the locker's destruction; replies lost or
// refused; release() from a cancelled caller. Nothing is left behind at the fake server.
#include "orchestration.hpp"

TEST_CASE_FIXTURE(two_processes_seen,
                  "orchestration: a co_lock cancelled while queued leaves both queues, and "
                  "the next release frees the lock rather than hand it to the gone caller") {
    w.run([&]() -> asio::awaitable<void> {
        auto held = co_await a.co_lock("n", short_lease(10s));
        asio::steady_timer give_up(w.ctx, 50ms);
        auto outcome = co_await (b.co_lock("n", short_lease()) || give_up.async_wait(nothrow));
        CHECK(outcome.index() == 1);
        co_await sleep_for(20ms); // the leave, in the background
        CHECK(b.waiting() == 0);
        CHECK(w.server.queue(lock_key).empty());
        CHECK(b_store->subscriptions().empty());
        CHECK(co_await held.release());
        auto const after = w.server.lock(lock_key);
        REQUIRE(after);
        CHECK(after->kind == fake_server::lock_entry::state::free);
    });
}

TEST_CASE_FIXTURE(one_process,
                  "orchestration: a co_lock cancelled before its attempt was sent leaves nothing") {
    w.run([&]() -> asio::awaitable<void> {
        w.server.away();
        asio::steady_timer give_up(w.ctx, 30ms);
        auto outcome = co_await (a.co_lock("n", short_lease()) || give_up.async_wait(nothrow));
        CHECK(outcome.index() == 1);
        w.server.back();
        co_await sleep_for(20ms);
        CHECK(w.server.calls().grants == 0);
        CHECK_FALSE(w.server.lock(lock_key).has_value());
    });
}

TEST_CASE_FIXTURE(
    one_process,
    "orchestration: a co_lock cancelled after its attempt ran, before the reply, gives "
    "the lock back") {
    w.server.latency = 40ms;
    w.run([&]() -> asio::awaitable<void> {
        asio::cancellation_signal cancel;
        std::optional<std::exception_ptr> ended;
        asio::co_spawn(w.ctx, a.co_lock("n", short_lease(10s)),
                       asio::bind_cancellation_slot(
                           cancel.slot(), [&](std::exception_ptr e, lock_guard) { ended = e; }));
        co_await until([&] { return w.server.calls().grants == 1; }); // ran; the reply is due
        cancel.emit(asio::cancellation_type::terminal);
        co_await until([&] { return ended.has_value(); });
        REQUIRE(*ended);
        try {
            std::rethrow_exception(*ended);
        } catch (boost::system::system_error const& e) {
            CHECK(e.code() == asio::error::operation_aborted);
        }
        co_await until([&] { return w.server.calls().releases == 1; });
        auto const after = w.server.lock(lock_key);
        REQUIRE(after);
        CHECK(after->kind == fake_server::lock_entry::state::free);
        CHECK(w.server.calls().releases == 1);
    });
}

TEST_CASE_FIXTURE(one_process,
                  "orchestration: an attempt whose reply was lost after it ran is asked again and "
                  "keeps the grant; co_try_lock gives it back") {
    w.run([&]() -> asio::awaitable<void> {
        w.server.grant_faults.push_back({fault::kind::lost_after});
        auto g = co_await a.co_lock("n", short_lease());
        CHECK(g.owns());
        CHECK(w.server.calls().grants == 2); // the same token again: the same lease
        auto const held = w.server.lock(lock_key);
        REQUIRE(held);
        CHECK(held->token == g.token());
        CHECK(co_await g.release());

        w.server.grant_faults.push_back({fault::kind::lost_after});
        error_code ec;
        try {
            auto once = co_await a.co_try_lock("m", short_lease());
            CHECK_FALSE(once.has_value());
        } catch (boost::system::system_error const& e) {
            ec = e.code();
        }
        CHECK(ec == colock::redis::error::connection_lost);
        co_await sleep_for(20ms);
        auto const left = w.server.lock("colock:{m}");
        REQUIRE(left); // released, with its token, not left held
        CHECK(left->kind == fake_server::lock_entry::state::free);
    });
}

TEST_CASE_FIXTURE(one_process,
                  "orchestration: a refused attempt fails co_lock with the server's words") {
    w.run([&]() -> asio::awaitable<void> {
        w.server.grant_faults.push_back({fault::kind::refused, "NOPERM no scripts for you"});
        std::string what;
        try {
            co_await a.co_lock("n", short_lease());
        } catch (boost::system::system_error const& e) {
            CHECK(e.code() == colock::redis::error::server_error);
            what = e.what();
        }
        CHECK(what.find("NOPERM no scripts for you") != std::string::npos);
        CHECK(what.find("'n'") != std::string::npos);
        CHECK_FALSE(w.server.lock(lock_key).has_value());
    });
}

TEST_CASE_FIXTURE(
    two_processes,
    "orchestration: wait_timeout ends a queued co_lock with error::timeout, out of the "
    "server's queue") {
    w.run([&]() -> asio::awaitable<void> {
        auto held = co_await a.co_lock("n", short_lease(10s));
        auto opt = short_lease();
        opt.wait_timeout = 80ms;
        auto const started = clock_type::now();
        auto const ec = co_await lock_error(b, "n", opt);
        CHECK(ec == colock::error::timeout);
        CHECK(clock_type::now() - started >= 80ms);
        CHECK(clock_type::now() - started < 2000ms);
        co_await sleep_for(20ms);
        CHECK(w.server.queue(lock_key).empty());
        CHECK(co_await held.release());
    });
}

TEST_CASE_FIXTURE(one_process, "orchestration: a locker destroyed with a call waiting ends it with "
                               "operation_aborted, and nothing of it stays queued") {
    w.run([&]() -> asio::awaitable<void> {
        auto held = co_await a.co_lock("n", short_lease(10s));
        std::optional<error_code> ended;
        {
            auto b = locker_access::make(w.process());
            asio::co_spawn(
                w.ctx, [&]() -> asio::awaitable<void> { ended = co_await lock_error(b, "n", {}); },
                asio::detached);
            co_await until([&] { return w.server.queue(lock_key).size() == 1; });
            // b goes here, with its call under way.
        }
        while (!ended)
            co_await sleep_for(1ms);
        CHECK(*ended == asio::error::operation_aborted);
        co_await sleep_for(20ms);
        CHECK(w.server.queue(lock_key).empty());
        CHECK(co_await held.release());
    });
}

namespace {

// One round of the test below, in a world of its own: the waiters cancelled with `type`.
struct sleeping_waiters_cancelled : two_processes_seen {
    void round(asio::cancellation_type type) {
        w.run([&]() -> asio::awaitable<void> {
            auto holder = co_await a.co_lock("n", short_lease(10s));

            // Two waiters: the head (subscribed, queued at the server) and one behind it.
            asio::cancellation_signal head_signal, second_signal;
            call_result head, second;
            b.async_lock("n", patient_waiter(),
                         asio::bind_cancellation_slot(head_signal.slot(), record_call{head}));
            co_await until(
                [&] { return listens(*b_store, b) && w.server.queue(lock_key).size() == 1; });
            b.async_lock("n", patient_waiter(),
                         asio::bind_cancellation_slot(second_signal.slot(), record_call{second}));
            co_await until([&] { return b.waiting() == 2; });

            // The one behind first: the head keeps waiting, subscribed and queued.
            auto emitted = clock_type::now();
            second_signal.emit(type);
            co_await until([&] { return second.done; });
            CHECK(second.ec == asio::error::operation_aborted);
            CHECK_FALSE(second.got);
            CHECK(second.at - emitted < 100ms);
            co_await sleep_for(5ms);
            CHECK_FALSE(head.done);
            CHECK(b.waiting() == 1);
            CHECK(listens(*b_store, b));
            CHECK(w.server.queue(lock_key).size() == 1);

            // Then the head: nothing of the locker's stays, subscription or queue entry.
            emitted = clock_type::now();
            head_signal.emit(type);
            co_await until([&] { return head.done; });
            CHECK(head.ec == asio::error::operation_aborted);
            CHECK_FALSE(head.got);
            CHECK(head.at - emitted < 100ms);
            co_await until(
                [&] { return !listens(*b_store, b) && w.server.queue(lock_key).empty(); });
            auto const held = w.server.lock(lock_key);
            REQUIRE(held);
            CHECK(held->token == holder.token());

            // A new waiter on the same locker queues, subscribes and is woken by the release,
            // not by its next attempt.
            call_result next;
            b.async_lock("n", patient_waiter(), record_call{next});
            co_await until(
                [&] { return listens(*b_store, b) && w.server.queue(lock_key).size() == 1; });
            auto const released_at = clock_type::now();
            CHECK(co_await holder.release());
            co_await until([&] { return next.done; });
            CHECK_FALSE(next.ec);
            CHECK(next.got);
            CHECK(next.at - released_at < 500ms);
        });
    }
};

} // namespace

TEST_CASE("orchestration: sleeping waiters cancelled (terminal, partial): the one behind the head "
          "first, then the head; each returns at once, the holder is not disturbed, and a new "
          "waiter is woken by the release") {
    for (auto type : {asio::cancellation_type::terminal, asio::cancellation_type::partial}) {
        CAPTURE(static_cast<int>(type));
        sleeping_waiters_cancelled{}.round(type);
    }
}

TEST_CASE("orchestration: cancelled with its attempt in flight on a free lock (terminal, partial, "
          "co_try_lock, a timer raced with ||): the lease granted is given back before the call "
          "completes with operation_aborted") {
    enum class how { terminal_slot, partial_slot, try_lock_terminal, timer_or };
    for (auto way :
         {how::terminal_slot, how::partial_slot, how::try_lock_terminal, how::timer_or}) {
        CAPTURE(static_cast<int>(way));
        one_process p;
        auto& w = p.w;
        w.server.latency = 40ms; // the attempt ran; its reply is due meanwhile
        w.run([&]() -> asio::awaitable<void> {
            asio::cancellation_signal signal;
            call_result r;
            record_call rec{r, &w.server};
            if (way == how::timer_or) {
                asio::co_spawn(
                    w.ctx,
                    [&]() -> asio::awaitable<void> {
                        asio::steady_timer timer(w.ctx, 20ms);
                        auto race = co_await (p.a.co_lock("n", short_lease(10s)) ||
                                              timer.async_wait(nothrow));
                        if (race.index() == 0)
                            rec(error_code{}, std::move(std::get<0>(race)));
                        else
                            rec(asio::error::operation_aborted, lock_guard{});
                    },
                    asio::detached);
            } else if (way == how::try_lock_terminal) {
                p.a.async_try_lock("n", short_lease(10s),
                                   asio::bind_cancellation_slot(signal.slot(), rec));
            } else {
                p.a.async_lock("n", short_lease(10s),
                               asio::bind_cancellation_slot(signal.slot(), rec));
            }
            co_await until([&] { return w.server.calls().grants == 1; });
            CHECK_FALSE(r.done);
            if (way != how::timer_or)
                signal.emit(way == how::partial_slot ? asio::cancellation_type::partial
                                                     : asio::cancellation_type::terminal);
            co_await until([&] { return r.done; });
            CHECK(r.ec == asio::error::operation_aborted);
            CHECK_FALSE(r.got);
            // Granted at the server, and given back before the call completed.
            CHECK(w.server.calls().leases == 1);
            CHECK(w.server.calls().releases == 1);
            CHECK(free_or_gone(r.key_at_completion));
            CHECK(w.server.queue(lock_key).empty());
        });
    }
}

TEST_CASE("orchestration: cancelled in the same turn as async_lock or async_try_lock on a free "
          "lock: operation_aborted, and nothing held") {
    for (bool try_lock : {false, true}) {
        CAPTURE(try_lock);
        one_process p;
        p.w.run([&]() -> asio::awaitable<void> {
            asio::cancellation_signal signal;
            call_result r;
            if (try_lock)
                p.a.async_try_lock("n", short_lease(10s),
                                   asio::bind_cancellation_slot(signal.slot(), record_call{r}));
            else
                p.a.async_lock("n", short_lease(10s),
                               asio::bind_cancellation_slot(signal.slot(), record_call{r}));
            signal.emit(asio::cancellation_type::terminal);
            co_await until([&] { return r.done; });
            CHECK(r.ec == asio::error::operation_aborted);
            CHECK_FALSE(r.got);
            co_await sleep_for(10ms); // a release, had anything been granted
            CHECK(free_or_gone(p.w.server.lock(lock_key)));
        });
    }
}

TEST_CASE_FIXTURE(two_processes, "orchestration: co_try_lock cancelled with its attempt in flight "
                                 "on a held lock reports operation_aborted, and queues nothing") {
    w.run([&]() -> asio::awaitable<void> {
        auto holder = co_await a.co_lock("n", short_lease(10s));
        w.server.latency = 40ms;
        asio::cancellation_signal signal;
        call_result r;
        b.async_try_lock("n", short_lease(10s),
                         asio::bind_cancellation_slot(signal.slot(), record_call{r}));
        co_await until([&] { return w.server.calls().grants == 2; }); // ran; the reply is due
        signal.emit(asio::cancellation_type::terminal);
        co_await until([&] { return r.done; });
        CHECK_FALSE(r.got);
        // A cancellation requested before the operation completed is reported, as for every
        // Asio operation; "held elsewhere" would hide that it was cancelled.
        CHECK(r.ec == asio::error::operation_aborted);
        CHECK(w.server.queue(lock_key).empty());
        CHECK(b.waiting() == 0);
        auto const held = w.server.lock(lock_key);
        REQUIRE(held);
        CHECK(held->token == holder.token());
        w.server.latency = 0ms;
        CHECK(co_await holder.release());
    });
}

TEST_CASE("orchestration: the head waiter cancelled while its attempt is in flight returns when "
          "the reply comes, not after its backoff") {
    // Several rounds: the waiter's sleep after an attempt is random (jitter), so one round could
    // hide a waiter that sleeps before it looks at its cancellation.
    for (int round = 0; round < 4; ++round) {
        CAPTURE(round);
        world w;
        auto a = locker_access::make(w.process());
        auto b_store = w.process();
        auto b = locker_access::make(b_store);
        w.run([&]() -> asio::awaitable<void> {
            auto holder = co_await a.co_lock("n", short_lease(10s));
            asio::cancellation_signal signal;
            call_result r;
            b.async_lock("n", patient_waiter(),
                         asio::bind_cancellation_slot(signal.slot(), record_call{r}));
            co_await until(
                [&] { return listens(*b_store, b) && w.server.queue(lock_key).size() == 1; });
            co_await sleep_for(10ms); // asleep in its backoff

            // A wake-up makes the head ask again, and its reply takes 150 ms.
            w.server.latency = 150ms;
            auto const grants = w.server.calls().grants;
            b_store->deliver(lock_key + ":w:" + b.id(), "1");
            co_await until([&] { return w.server.calls().grants == grants + 1; });
            auto const in_flight = clock_type::now();
            signal.emit(asio::cancellation_type::terminal);
            co_await until([&] { return r.done; });
            CHECK(r.ec == asio::error::operation_aborted);
            CHECK_FALSE(r.got);
            // The reply comes 150 ms after the attempt ran; then it must stop, not sleep its
            // backoff (up to a second, the queue's refresh) before it looks at the cancellation.
            CHECK(r.at - in_flight < 600ms);
            w.server.latency = 0ms;
            co_await until(
                [&] { return !listens(*b_store, b) && w.server.queue(lock_key).empty(); });
            auto const held = w.server.lock(lock_key);
            REQUIRE(held);
            CHECK(held->token == holder.token());
            CHECK(co_await holder.release());
        });
    }
}

TEST_CASE_FIXTURE(one_process, "orchestration: release() from a cancelled caller still releases: "
                               "cancelled with the release in flight, or called after a "
                               "cancellation") {
    w.run([&]() -> asio::awaitable<void> {
        // Cancelled while the release is in flight.
        {
            auto g = co_await a.co_lock("n", short_lease(5s));
            w.server.latency = 60ms;
            std::optional<bool> unlocked;
            auto do_unlock = [&]() -> asio::awaitable<void> { unlocked = co_await g.release(); };
            asio::steady_timer timer(w.ctx, 10ms);
            auto const started = clock_type::now();
            auto r = co_await (do_unlock() || timer.async_wait(nothrow));
            CHECK(r.index() == 1); // the timer came first and cancelled the caller
            CHECK(clock_type::now() - started >= 50ms);
            REQUIRE(unlocked.has_value());
            CHECK(*unlocked);
            CHECK(free_or_gone(w.server.lock(lock_key)));
            CHECK_FALSE(g.owns());
            w.server.latency = 0ms;
        }
        // Called from a coroutine that was cancelled before (and chose not to throw).
        {
            auto g = co_await a.co_lock("n", short_lease(5s));
            asio::cancellation_signal signal;
            std::optional<bool> unlocked;
            bool done = false;
            asio::co_spawn(
                w.ctx,
                [&]() -> asio::awaitable<void> {
                    co_await asio::this_coro::throw_if_cancelled(false);
                    asio::steady_timer t(co_await asio::this_coro::executor, 5s);
                    co_await t.async_wait(nothrow); // ends with operation_aborted
                    unlocked = co_await g.release();
                },
                asio::bind_cancellation_slot(signal.slot(),
                                             [&](std::exception_ptr) { done = true; }));
            co_await sleep_for(5ms);
            signal.emit(asio::cancellation_type::terminal);
            co_await until([&] { return done; });
            REQUIRE(unlocked.has_value());
            CHECK(*unlocked);
            CHECK(free_or_gone(w.server.lock(lock_key)));
        }
    });
}

// The acquisition machine without a server, on virtual time: every branch fed its events (the
// store's answers, give-backs, sleeps, wake-ups, cancellations, deadlines). The walks of whole
// calls, with faults injected at each step, are in test_acquisition_walk.cpp.
#include "lock/core/acquisition.hpp"

#include "acquisition_events.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/error.hpp>

#include <doctest/doctest.h>

#include <random>
#include <string>

using namespace acquisition_test;
namespace asio = boost::asio;
namespace redis = colock::redis;

TEST_CASE("the deadlines count from the call's start") {
    auto const m = lock_call();
    CHECK(m.deadlines().wait == t0 + 10s);
    CHECK(m.deadlines().first_connect == t0 + 2s);
    // No wait_timeout: no wait deadline; first_connect_timeout past it: the wait's.
    auto o = opt;
    o.wait_timeout.reset();
    acquisition const forever(acquisition_terms::lock(o, "lock", true), t0);
    CHECK(forever.deadlines().wait == clock_type::time_point::max());
    CHECK(forever.deadlines().first_connect == t0 + 2s);
    o.wait_timeout = 1s;
    acquisition const short_wait(acquisition_terms::lock(o, "lock", true), t0);
    CHECK(short_wait.deadlines().first_connect == t0 + 1s);
}

TEST_CASE("an attempt asks by the wait deadline, and a cancellation before it ends the call") {
    auto m = lock_call();
    auto const a = m.begin_attempt(false);
    CHECK(is(a, acquisition_step::ask));
    CHECK(a.until == t0 + 10s);
    auto const stopped = m.begin_attempt(true);
    CHECK(ends(stopped, acquisition_end::aborted));
    CHECK(stopped.ec == asio::error::operation_aborted);
    CHECK(m.attempts() == 0);
}

TEST_CASE("a grant ends every kind of call, and takes the call's queue entry out") {
    for (bool wait : {false, true}) {
        for (auto make : {&lock_call, &permit_call}) {
            auto m = make(wait);
            CHECK(is(m.on_answer(held(100ms), t0, false), acquisition_step::wait) == wait);
            CHECK(m.queued_at_server() == wait);
            auto const a = m.on_answer(granted(), t0 + 1ms, false);
            CHECK(ends(a, acquisition_end::acquired));
            CHECK(!a.ec);
            CHECK(!m.queued_at_server());
            CHECK(!m.queued_by_answer());
            CHECK(m.answer().fence == 7);
            CHECK(m.attempts() == 2);
        }
    }
}

TEST_CASE("held by another: a waiting call waits, a single attempt finds nothing") {
    auto w = lock_call(true);
    CHECK(is(w.on_answer(held(1234ms), t0, false), acquisition_step::wait));
    CHECK(w.queued_by_answer());
    CHECK(w.queued_at_server());
    auto t = lock_call(false);
    CHECK(ends(t.on_answer(held(1234ms), t0, false), acquisition_end::not_acquired));
    CHECK(!t.queued_at_server());
}

TEST_CASE("a lock granted by a replaced server is asked for again, three times at most") {
    auto m = lock_call();
    auto changed = granted();
    changed.server_changed = true;
    for (int round = 0; round < 3; ++round) {
        auto const again = m.on_answer(changed, t0, false);
        CHECK(is(again, acquisition_step::ask));
        CHECK(again.until == t0 + 10s);
    }
    CHECK(m.attempts() == 0); // one attempt, not answered yet
    // Then as a reply that was lost: waited out, the token released on the way out.
    auto const lost = m.on_answer(changed, t0, false);
    CHECK(is(lost, acquisition_step::wait));
    CHECK(m.attempts() == 1);
    CHECK(m.answer().ec == redis::error::connection_lost);
    CHECK(m.outcome_unknown());
    CHECK(m.queued_by_answer());
    // The next attempt has its own three rounds.
    CHECK(is(m.on_answer(changed, t0 + 1s, false), acquisition_step::ask));
    CHECK(ends(m.on_answer(granted(t0 + 1s), t0 + 1s, false), acquisition_end::acquired));
}

TEST_CASE("a grant by a replaced server, for a cancelled call or for permits, is not asked again") {
    auto changed = granted();
    changed.server_changed = true;
    auto m = lock_call();
    CHECK(ends(m.on_answer(changed, t0, true), acquisition_end::aborted));
    CHECK(m.outcome_unknown());
    // Permits: a token is granted once, so the grant goes back and the call goes on anew.
    auto p = permit_call();
    auto const back = p.on_answer(changed, t0, false);
    CHECK(is(back, acquisition_step::give_back));
    CHECK(back.new_token);
    CHECK(!p.outcome_unknown());
    CHECK(is(p.on_given_back(true, t0, false), acquisition_step::wait));
    CHECK(!p.queued_at_server());
}

TEST_CASE("a grant read after the caller cancelled is given back, then the call is aborted") {
    for (auto make : {&lock_call, &permit_call}) {
        auto m = make(true);
        auto const back = m.on_answer(granted(), t0, true);
        CHECK(is(back, acquisition_step::give_back));
        CHECK(!back.new_token);
        CHECK(!m.answer().granted);
        auto const done = m.on_given_back(true, t0, true);
        CHECK(ends(done, acquisition_end::aborted));
        CHECK(done.ec == asio::error::operation_aborted);
        CHECK(!m.queued_at_server());
        CHECK(!m.outcome_unknown());
    }
    // A give-back whose reply was lost: a lock's token is released once more at the end.
    auto m = lock_call();
    (void)m.on_answer(granted(), t0, true);
    CHECK(ends(m.on_given_back(false, t0, true), acquisition_end::aborted));
    CHECK(m.outcome_unknown());
}

TEST_CASE("a grant read when its lease is all but over is given back and asked for again") {
    auto late = granted();
    late.lease_end = t0 + 1ms; // read at t0 + 1 ms: nothing left to hold
    auto m = lock_call();
    auto const back = m.on_answer(late, t0 + 1ms, false);
    CHECK(is(back, acquisition_step::give_back));
    CHECK(!back.new_token); // a lock's token is asked for again
    auto const next = m.on_given_back(true, t0 + 2ms, false);
    CHECK(is(next, acquisition_step::wait));
    CHECK(m.answer().holder_ttl == 0ms); // at once, but for the backoff
    CHECK(m.queued_by_answer());
    CHECK(!m.outcome_unknown());
    // 1 ms left is too little; 2 ms is enough.
    auto edge = granted();
    edge.lease_end = t0 + 2ms;
    auto n = lock_call();
    CHECK(ends(n.on_answer(edge, t0 + 1ms - 1ns, false), acquisition_end::acquired));
    // Permits: given back under their token, with its queue entry; the call goes on anew.
    auto p = permit_call();
    CHECK(is(p.on_answer(held(5ms), t0, false), acquisition_step::wait));
    CHECK(p.queued_at_server());
    auto const pback = p.on_answer(late, t0 + 1ms, false);
    CHECK(pback.new_token);
    CHECK(is(p.on_given_back(true, t0 + 1ms, false), acquisition_step::wait));
    CHECK(!p.queued_at_server());
    // A single attempt finds nothing.
    auto t = lock_call(false);
    (void)t.on_answer(late, t0 + 1ms, false);
    CHECK(ends(t.on_given_back(true, t0 + 1ms, false), acquisition_end::not_acquired));
}

TEST_CASE("an answer of unknown outcome: a lock's token is released at the end, permits' at "
          "once") {
    auto const lost = failed(redis::error::connection_lost, {}, true);
    auto m = lock_call();
    CHECK(is(m.on_answer(lost, t0, false), acquisition_step::wait));
    CHECK(m.outcome_unknown());
    CHECK(m.queued_at_server()); // it may have queued the call
    auto p = permit_call();
    auto const back = p.on_answer(lost, t0, false);
    CHECK(is(back, acquisition_step::give_back));
    CHECK(back.new_token);
    CHECK(p.queued_at_server()); // until given back
    CHECK(is(p.on_given_back(true, t0, false), acquisition_step::wait));
    CHECK(!p.queued_at_server());
    CHECK(!p.outcome_unknown());
    // A failure known not to have run queues nothing.
    auto q = lock_call();
    CHECK(
        is(q.on_answer(failed(redis::error::connection_lost), t0, false), acquisition_step::wait));
    CHECK(!q.queued_by_answer());
    CHECK(!q.outcome_unknown());
}

TEST_CASE("an attempt stopped unsent: by the wait deadline a timeout, by the caller an abort") {
    auto const stopped = failed(asio::error::operation_aborted);
    for (auto make : {&lock_call, &permit_call}) {
        auto m = make(true);
        auto const by_deadline = m.on_answer(stopped, t0 + 10s, false);
        CHECK(ends(by_deadline, acquisition_end::timed_out));
        CHECK(by_deadline.ec == colock::error::timeout);
        // The caller's, on a first attempt: its error, operation_aborted; on a later one, the
        // cancellation.
        auto n = make(true);
        auto const first = n.on_answer(stopped, t0, true);
        CHECK(ends(first, acquisition_end::failed));
        CHECK(first.ec == asio::error::operation_aborted);
        CHECK(ends(n.on_answer(stopped, t0, true), acquisition_end::aborted));
    }
}

TEST_CASE("after a connect failure, the next attempt ends at first_connect_timeout and reports "
          "that failure") {
    auto m = lock_call();
    std::string const why = "connecting to 127.0.0.1:1: Connection refused";
    CHECK(is(m.on_answer(failed(refused_error(), why), t0 + 100ms, false), acquisition_step::wait));
    auto const next = m.begin_attempt(false);
    CHECK(next.until == t0 + 2s);
    // Stopped there unsent: the connect failure stands.
    auto const done = m.on_answer(failed(asio::error::operation_aborted), t0 + 2s, false);
    CHECK(ends(done, acquisition_end::failed));
    CHECK(done.ec == refused_error());
    CHECK(m.ending_text(done, link_facts{false, why}) ==
          "no connection to the Redis server within 2000 ms: " + why);
}

TEST_CASE("a cancellation during the attempt: after the first attempt the error comes first") {
    auto const refusal = failed(redis::error::server_error, "NOPERM no permissions");
    auto first = lock_call();
    CHECK(ends(first.on_answer(refusal, t0, true), acquisition_end::failed));
    // A head of the local queue (or a later attempt): the cancellation is reported.
    auto head = lock_call();
    head.joined_local_queue();
    CHECK(ends(head.on_answer(refusal, t0, true), acquisition_end::aborted));
    auto later = permit_call();
    (void)later.on_answer(held(1ms), t0, false);
    CHECK(ends(later.on_answer(refusal, t0, true), acquisition_end::aborted));
    // Held, or a passing error: aborted either way.
    auto held_one = lock_call();
    CHECK(ends(held_one.on_answer(held(5ms), t0, true), acquisition_end::aborted));
}

TEST_CASE("a passing error at the wait deadline is the deadline's timeout") {
    auto m = lock_call();
    auto const done = m.on_answer(failed(redis::error::connection_lost), t0 + 10s, false);
    CHECK(ends(done, acquisition_end::timed_out));
    // A lasting one is itself.
    auto n = lock_call();
    CHECK(ends(n.on_answer(failed(redis::error::handshake_failed), t0 + 10s, false),
               acquisition_end::failed));
}

TEST_CASE("the wait deadline ends a waiting call; a wake-up at the deadline still asks") {
    auto m = lock_call();
    (void)m.on_answer(held(50ms), t0, false);
    CHECK(is(m.keep_waiting(t0 + 10s - 1ns), acquisition_step::wait));
    CHECK(ends(m.keep_waiting(t0 + 10s), acquisition_end::timed_out));
    CHECK(ends(m.on_sleep_end(t0 + 10s, false, false), acquisition_end::timed_out));
    auto const woken = m.on_sleep_end(t0 + 10s, true, false);
    CHECK(is(woken, acquisition_step::ask));
    CHECK(woken.until == t0 + 10s);
    CHECK(is(m.on_sleep_end(t0 + 5s, false, false), acquisition_step::ask));
    // A cancellation that ended the sleep ends the call, deadline or not.
    CHECK(ends(m.on_sleep_end(t0 + 10s, false, true), acquisition_end::aborted));
    CHECK(ends(m.on_sleep_end(t0 + 1s, true, true), acquisition_end::aborted));
}

TEST_CASE("a queue head sleeps up to the holder's lease, the refresh interval or its backoff") {
    std::minstd_rand rng(1);
    auto m = lock_call();
    (void)m.on_answer(held(20s), t0, false);
    for (int i = 0; i < 50; ++i) {
        auto const until = m.wakes_at(t0, true, rng);
        CHECK(until > t0);
        CHECK(until <= t0 + 51ms); // the first backoff: at most retry.initial + 1 ms
    }
    // A holder whose lease is gone: 1 ms at least.
    (void)m.on_answer(held(0ms), t0, false);
    CHECK(m.wakes_at(t0, true, rng) == t0 + 1ms);
    // Never past the wait deadline.
    (void)m.on_answer(held(20s), t0 + 9999ms, false);
    CHECK(m.wakes_at(t0 + 9999ms, true, rng) <= t0 + 10s);
    // Waiting for a holder of this process: up to its lease, at most the refresh interval.
    m.wait_for_holder(30s);
    auto const mid = t0 + 1s;
    for (int i = 0; i < 50; ++i)
        CHECK(m.wakes_at(mid, true, rng) <= mid + queue_refresh_interval);
}

TEST_CASE("permits sleep until the first holding expires while told by messages") {
    std::minstd_rand rng(1);
    auto p = permit_call();
    for (int i = 0; i < 6; ++i)
        (void)p.on_answer(held(400ms), t0, false); // backoff ceiling now 1 s
    CHECK(p.wakes_at(t0, true, rng) == t0 + 400ms);
    // Not subscribed: the backoff, when sooner.
    for (int i = 0; i < 50; ++i)
        CHECK(p.wakes_at(t0, false, rng) <= t0 + 400ms);
    // Nothing held: the backoff; a holding of no expiry: the refresh interval at most.
    (void)p.on_answer(held(0ms), t0, false);
    CHECK(p.wakes_at(t0, true, rng) <= t0 + 1001ms);
    (void)p.on_answer(held(milliseconds::max()), t0, false);
    CHECK(p.wakes_at(t0, true, rng) == t0 + queue_refresh_interval);
    // After a passing error, a head's rule: retry.max or the backoff.
    (void)p.on_answer(failed(redis::error::connection_lost), t0, false);
    CHECK(p.wakes_at(t0, true, rng) <= t0 + 1001ms);
}

TEST_CASE("a finish is worded once for every synchronizer") {
    auto m = lock_call();
    auto const nope = failed(redis::error::server_error,
                             "NOPERM User u has no permissions to run the 'evalsha' command");
    auto const done = m.on_answer(nope, t0, false);
    REQUIRE(ends(done, acquisition_end::failed));
    auto const text = m.ending_text(done, link_facts{true, {}});
    CHECK(text.starts_with("NOPERM User u"));
    CHECK(text.find("lists what locks need") != std::string::npos);
    // The timeout names a connection that is not established.
    auto const timeout = m.keep_waiting(t0 + 10s);
    CHECK(m.ending_text(timeout, link_facts{true, {}}) == "not acquired within 10000 ms");
    CHECK(m.ending_text(timeout, link_facts{false, "refused"}) ==
          "not acquired within 10000 ms; the connection to the Redis server is not "
          "established: refused");
    CHECK(m.ending_text(acquisition::aborted(), link_facts{}).empty());
    // A failure with no words of its own: a lock's message names the lock only, a semaphore's
    // adds the error's message.
    auto const closed = failed(redis::error::closed);
    auto n = lock_call();
    auto p = permit_call();
    auto const ndone = n.on_answer(closed, t0, false);
    auto const pdone = p.on_answer(closed, t0, false);
    CHECK(n.ending_text(ndone, link_facts{true, {}}).empty());
    CHECK(p.ending_text(pdone, link_facts{true, {}}) == error_code(redis::error::closed).message());
    auto const report = p.failure(pdone, link_facts{true, {}}, "s");
    CHECK(report.ec == redis::error::closed);
    CHECK(report.message == "colock: semaphore 's': " + report.ec.message());
    CHECK(n.failure(n.keep_waiting(t0 + 10s), link_facts{true, {}}, "l").message ==
          "colock: lock 'l': not acquired within 10000 ms");
    CHECK(acquisition_message("lock", "a", "") == "colock: lock 'a'");
    CHECK(acquisition_message("semaphore", "b", "x") == "colock: semaphore 'b': x");
}

TEST_CASE("terminal and partial cancellation end a call; total does not") {
    CHECK(acquisition::ends_call(asio::cancellation_type::terminal));
    CHECK(acquisition::ends_call(asio::cancellation_type::partial));
    CHECK(
        acquisition::ends_call(asio::cancellation_type::terminal | asio::cancellation_type::total));
    CHECK(!acquisition::ends_call(asio::cancellation_type::total));
    CHECK(!acquisition::ends_call(asio::cancellation_type::none));
    // Which finishes report an error.
    auto m = lock_call(false);
    CHECK(!m.begin_attempt(false).fails());
    CHECK(acquisition::aborted().fails());
    CHECK(!m.on_answer(held(1ms), t0, false).fails());
    CHECK(m.keep_waiting(t0 + 10s).fails());
}

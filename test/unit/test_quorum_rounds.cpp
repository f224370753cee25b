// The Redlock rounds that keep a lease, end it and listen for wake-ups, without a server: when
// their answers decide them and what the answers amount to; and the wait of the coroutine that
// started a round.
#include "lock/base/common.hpp"
#include "lock/quorum/quorum_rounds.hpp"

#include "primary_endpoints.hpp"
#include "virtual_clock.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace asio = boost::asio;
using boost::system::error_code;
using colock::detail::lease_reply;
using colock::detail::lock_keys;
using colock::detail::redlock::extend_round;
using colock::detail::redlock::release_round;
using colock::detail::redlock::release_round_wait;
using colock::detail::redlock::release_straggler_wait;
using colock::detail::redlock::subscribe_round;
using colock::test::endpoints;
using std::chrono::milliseconds;

namespace {

lock_keys const round_keys("p:", "name", "owner");

asio::strand<asio::any_io_executor> strand_of(asio::io_context& ctx) {
    return asio::make_strand(asio::any_io_executor(ctx.get_executor()));
}

lease_reply reply(bool ours, bool handed = false) {
    return lease_reply{error_code{}, ours, handed};
}

lease_reply failure(error_code ec) {
    return lease_reply{ec, false, false};
}

// Runs what is ready, without moving the clock.
void settle(asio::io_context& ctx) {
    for (int i = 0; i < 50; ++i) {
        ctx.restart();
        if (ctx.poll() == 0)
            break;
    }
}

// Moves the lock layer's clock (virtual time) on by `d` and runs what became due.
void advance(asio::io_context& ctx, milliseconds d) {
    colock::detail::lock_clock::advance(d);
    colock::test::nudge_timers(ctx);
    settle(ctx);
}

// A round's answer in words, for the checks: its error's message, else "ours" or "not ours".
std::string in_words(lease_reply const& r) {
    if (r.ec)
        return r.ec.message();
    return r.ours ? "ours" : "not ours";
}

// What an extend round amounts to once closed, `elapsed` after it started.
auto closed_outcome(extend_round& round, milliseconds elapsed) {
    round.close();
    return round.outcome(elapsed, endpoints);
}

// A release round of `n` primaries with its wait_complete() running; `done` turns true when it
// returns.
struct completing_release {
    completing_release(asio::io_context& ctx, std::size_t n)
        : round(strand_of(ctx), n, round_keys, "tok", milliseconds(500), 9) {
        asio::co_spawn(
            strand_of(ctx),
            [this]() -> asio::awaitable<void> {
                co_await round.wait_complete();
                done = true;
            },
            asio::detached);
        settle(ctx); // to the wait
    }
    release_round round;
    bool done = false;
};

} // namespace

TEST_CASE("extend round: a majority of confirmations that count, within the lease, keeps it") {
    asio::io_context ctx;
    extend_round round(strand_of(ctx), 3, round_keys, "tok", milliseconds(1000), 42);
    CHECK(round.fence() == 42);
    round.answer(0, reply(true), true);
    CHECK_FALSE(round.decided());
    round.answer(1, reply(true), false); // ours, from a replaced primary: it does not count
    CHECK_FALSE(round.decided());
    round.answer(2, reply(true), true);
    CHECK(round.decided());
    CHECK(in_words(closed_outcome(round, milliseconds(30))) == "ours");

    // Confirmed, but too late to count on it.
    auto const late = round.outcome(milliseconds(995), endpoints);
    CHECK(late.ec == colock::error::no_quorum);
    CHECK_FALSE(late.ours);
}

TEST_CASE("extend round: lost when no majority can confirm; otherwise the round's error") {
    asio::io_context ctx;
    extend_round lost(strand_of(ctx), 3, round_keys, "tok", milliseconds(1000), 1);
    lost.answer(0, reply(false), false);
    lost.answer(1, reply(false), false);
    CHECK(lost.decided());
    lost.close();
    lost.answer(2, reply(true), true); // after the close: changes nothing
    CHECK(in_words(lost.outcome(milliseconds(5), endpoints)) == "not ours");

    extend_round unknown(strand_of(ctx), 3, round_keys, "tok", milliseconds(1000), 1);
    unknown.answer_down(0);
    CHECK(unknown.answered(0));
    unknown.answer(1, reply(true), true);
    auto const u = closed_outcome(unknown, milliseconds(100)); // primary 2 never answered
    CHECK(u.ec == colock::error::no_quorum);
    CHECK_FALSE(u.ours);

    // One primary down and one "not ours": the third's answer tells lost from unknown, so the
    // round waits for it.
    extend_round waits(strand_of(ctx), 3, round_keys, "tok", milliseconds(1000), 1);
    waits.answer_down(0);
    waits.answer(1, reply(false), false);
    CHECK_FALSE(waits.decided());
    waits.answer(2, reply(false), false);
    CHECK(waits.decided());
    CHECK(in_words(closed_outcome(waits, milliseconds(5))) == "not ours");

    extend_round refused(strand_of(ctx), 3, round_keys, "tok", milliseconds(1000), 1);
    refused.answer(0, failure(colock::error::unexpected_reply), false);
    refused.answer(1, failure(colock::error::unexpected_reply), false);
    CHECK(refused.decided());
    CHECK(closed_outcome(refused, milliseconds(5)).ec == colock::error::unexpected_reply);
}

TEST_CASE("release round: ours unless a majority said not; handed when a majority handed it") {
    asio::io_context ctx;
    release_round round(strand_of(ctx), 3, round_keys, "tok", milliseconds(500), 9);
    CHECK(round.claim() == milliseconds(500));
    CHECK(round.last_fence() == 9);
    round.answer(0, reply(true, true));
    CHECK_FALSE(round.decided());
    CHECK_FALSE(round.majority_answered());
    round.answer(1, reply(true, true));
    CHECK(round.decided()); // a majority gave it back
    CHECK(round.majority_answered());
    auto const r = round.outcome(endpoints);
    CHECK_FALSE(r.ec);
    CHECK(r.ours);
    CHECK(r.handed);

    release_round not_ours(strand_of(ctx), 3, round_keys, "tok", milliseconds(500), 9);
    not_ours.answer(0, reply(false));
    not_ours.answer(1, reply(true));
    CHECK_FALSE(not_ours.decided());
    CHECK(not_ours.majority_answered());
    not_ours.answer(2, reply(false));
    CHECK(not_ours.decided()); // all answered
    auto const n = not_ours.outcome(endpoints);
    CHECK_FALSE(n.ec);
    CHECK_FALSE(n.ours); // lost meanwhile
    CHECK_FALSE(n.handed);
}

TEST_CASE("release round: a primary down is not waited for; too few answers fail") {
    asio::io_context ctx;
    release_round round(strand_of(ctx), 3, round_keys, "tok", milliseconds(500), 9);
    round.answer_down(0);
    round.answer(1, reply(true));
    round.answer(2, failure(colock::redis::error::connection_lost));
    CHECK(round.decided());
    CHECK_FALSE(round.majority_answered());
    auto const r = round.outcome(endpoints);
    CHECK(r.ec == colock::error::no_quorum);
    CHECK_FALSE(r.ours);

    release_round all_down(strand_of(ctx), 3, round_keys, "tok", milliseconds(500), 9);
    for (std::size_t i = 0; i < 3; ++i)
        all_down.answer_down(i);
    CHECK(all_down.decided());
}

TEST_CASE("release round completion: every primary asked answered, or a majority gave the "
          "lease back and release_straggler_wait passed (virtual time)") {
    asio::io_context ctx;
    {
        // The last primary answers: complete at once, not at the majority's answer.
        completing_release r(ctx, 3);
        r.round.answer(0, reply(true));
        r.round.answer(1, reply(true));
        settle(ctx);
        CHECK(r.round.decided()); // the answer is known: ours
        CHECK_FALSE(r.done);      // but the third primary may hold the token yet
        r.round.answer(2, reply(true));
        settle(ctx);
        CHECK(r.done);
        CHECK(r.round.outcome(endpoints).ours);
    }
    {
        // The third is silent (stalled, vanished): complete release_straggler_wait after the
        // majority gave the lease back, not at the release's deadline.
        completing_release r(ctx, 3);
        advance(ctx, milliseconds(100));
        r.round.answer(0, reply(true));
        r.round.answer(1, reply(true));
        settle(ctx);
        advance(ctx, release_straggler_wait - milliseconds(50));
        CHECK_FALSE(r.done);
        advance(ctx, milliseconds(100));
        CHECK(r.done);
        CHECK(r.round.pending() == 1);
        CHECK(r.round.outcome(endpoints).ours);
        r.round.answer(2, reply(true)); // late: changes nothing
    }
    {
        // A primary down is not waited for: complete with the others' answers.
        completing_release r(ctx, 3);
        r.round.answer_down(2);
        r.round.answer(0, reply(true));
        settle(ctx);
        CHECK_FALSE(r.done);
        r.round.answer(1, reply(true));
        settle(ctx);
        CHECK(r.done);
    }
    {
        // 5 primaries: three gave it back, one said not ours, one is silent.
        completing_release r(ctx, 5);
        r.round.answer(0, reply(true));
        r.round.answer(1, reply(false));
        r.round.answer(2, reply(true));
        r.round.answer(3, reply(true));
        settle(ctx);
        CHECK(r.round.decided());
        CHECK_FALSE(r.done);
        advance(ctx, release_straggler_wait + milliseconds(50));
        CHECK(r.done);
        CHECK(r.round.outcome(endpoints).ours);
    }
    {
        // No majority gave it back (one each way, one silent): as before, the silent one is
        // waited for release_round_wait, and no longer.
        completing_release r(ctx, 3);
        r.round.answer(0, reply(true));
        r.round.answer(1, reply(false));
        settle(ctx);
        CHECK_FALSE(r.round.decided());
        advance(ctx, release_round_wait - milliseconds(100));
        CHECK_FALSE(r.done);
        advance(ctx, milliseconds(150));
        CHECK(r.done);
        CHECK(r.round.outcome(endpoints).ours);
    }
}

TEST_CASE("subscribe round: one primary listening is enough; else the first failure") {
    asio::io_context ctx;
    subscribe_round ok(strand_of(ctx), 3);
    ok.answer(0, colock::redis::error::server_error, "NOPERM channel");
    ok.answer(1, {}, "");
    CHECK_FALSE(ok.decided());
    ok.answer(2, {}, "");
    CHECK(ok.decided()); // a majority listens
    CHECK_FALSE(ok.outcome().first);

    subscribe_round refused(strand_of(ctx), 3);
    refused.answer(0, colock::redis::error::server_error, "NOPERM channel");
    refused.answer(1, colock::redis::error::connection_lost, "");
    refused.answer(2, colock::redis::error::server_error, "NOPERM other");
    CHECK(refused.decided());
    auto const f = refused.outcome();
    CHECK(f.first == colock::redis::error::server_error);
    CHECK(f.second == "NOPERM channel");
}

TEST_CASE("a round's wait: until decided, until its timeout, or until cancelled") {
    asio::io_context ctx;
    auto const strand = strand_of(ctx);
    subscribe_round decided(strand, 1);
    std::optional<bool> woke;
    asio::co_spawn(
        strand,
        [&]() -> asio::awaitable<void> { woke = co_await decided.wait(milliseconds(60000), true); },
        asio::detached);
    ctx.poll(); // to the wait
    CHECK_FALSE(woke);
    decided.answer(0, {}, "");
    ctx.restart();
    ctx.run_for(milliseconds(1000));
    REQUIRE(woke);
    CHECK(*woke);

    subscribe_round silent(strand, 1);
    std::optional<bool> timed_out;
    asio::co_spawn(
        strand,
        [&]() -> asio::awaitable<void> {
            timed_out = co_await silent.wait(milliseconds(1), false);
        },
        asio::detached);
    ctx.restart();
    ctx.run_for(milliseconds(1000));
    REQUIRE(timed_out);
    CHECK(*timed_out); // the rest is unknown
    CHECK_FALSE(silent.decided());

    subscribe_round cancelled(strand, 1);
    std::optional<bool> awaited;
    asio::cancellation_signal cancel;
    asio::co_spawn(
        strand,
        [&]() -> asio::awaitable<void> {
            awaited = co_await cancelled.wait(milliseconds(60000), true);
        },
        asio::bind_cancellation_slot(cancel.slot(), asio::detached));
    ctx.restart();
    ctx.poll(); // to the wait
    cancel.emit(asio::cancellation_type::terminal);
    ctx.restart();
    ctx.run_for(milliseconds(1000));
    REQUIRE(awaited);
    CHECK_FALSE(*awaited);
}

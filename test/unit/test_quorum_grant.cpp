// A Redlock acquisition's round without a server: answers as they come (when they decide the
// round, grants from replaced primaries, stragglers after it closed) and what the answers
// amount to: a lease with the primaries that count for it, a wait behind holders, a split vote's
// pause, and the errors of a round without a majority.
#include "lock/quorum/quorum_grant.hpp"

#include "primary_endpoints.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace asio = boost::asio;
using colock::detail::grant_result;
using colock::detail::lock_keys;
using colock::detail::queueing;
using colock::detail::replica_wait;
using colock::detail::redlock::grant_round;
using std::chrono::milliseconds;
using straggler = grant_round::straggler;
using colock::test::endpoints;

namespace {

// A round over three primaries, each at its count of server changes 5.
struct three_primaries {
    asio::io_context ctx;
    grant_round round{asio::make_strand(asio::any_io_executor(ctx.get_executor())),
                      3,
                      lock_keys("p:", "name", "owner"),
                      "tok",
                      milliseconds(1000),
                      queueing::when_held,
                      replica_wait{}};
    std::minstd_rand rng{7};
    three_primaries() {
        for (std::size_t i = 0; i < 3; ++i)
            round.set_changes_at_start(i, 5);
    }
};

grant_result granted(std::int64_t fence, bool others_queued = false) {
    grant_result r;
    r.granted = true;
    r.fence = fence;
    r.others_queued = others_queued;
    return r;
}

grant_result held(long long ttl_ms, bool others_queued = false) {
    grant_result r;
    r.holder_ttl = milliseconds(ttl_ms);
    r.others_queued = others_queued;
    return r;
}

grant_result failed(boost::system::error_code ec, std::string text = {},
                    bool outcome_unknown = false) {
    grant_result r;
    r.ec = ec;
    r.server_text = std::move(text);
    r.outcome_unknown = outcome_unknown;
    return r;
}

} // namespace

TEST_CASE("grant round: a majority of grants decides it; the lease counts the granting primaries") {
    three_primaries t;
    CHECK(t.round.keys().key == "p:{name}");
    CHECK(t.round.token() == "tok");
    CHECK(t.round.to_ask(0));
    CHECK(t.round.answer(0, granted(7), 5) == straggler::ignore);
    CHECK_FALSE(t.round.decided());
    CHECK(t.round.answer(2, granted(9, true), 5) == straggler::ignore);
    CHECK(t.round.decided());
    CHECK(t.round.pending() == 1);
    t.round.close();
    auto const out = t.round.outcome(milliseconds(20), endpoints, t.rng);
    CHECK(out.result.granted);
    CHECK_FALSE(out.result.ec);
    CHECK(out.result.fence == 9);
    CHECK(out.result.others_queued);
    CHECK(out.give_back.empty());
    REQUIRE(out.counted.size() == 3);
    CHECK(out.counted[0] == std::optional<std::uint64_t>(5));
    CHECK_FALSE(out.counted[1]);
    CHECK(out.counted[2] == std::optional<std::uint64_t>(5));

    // Stragglers after a lease was made: a grant joins it, anything else is left alone.
    CHECK_FALSE(t.round.to_ask(1)); // closed: not asked
    CHECK(t.round.answer(1, granted(10), 5) == straggler::join_lease);
    CHECK(t.round.answer(1, held(100), 5) == straggler::ignore);
    // A grant from an instance replaced since the round began is of unknown outcome: it goes.
    CHECK(t.round.answer(1, granted(10), 6) == straggler::give_back);
}

TEST_CASE("grant round: a grant from a replaced primary does not count, and goes back") {
    three_primaries t;
    t.round.answer(0, granted(7), 5);
    t.round.answer(1, granted(8), 6); // replaced since the round began
    CHECK_FALSE(t.round.decided());
    t.round.answer(2, held(300), 5);
    CHECK(t.round.decided()); // no majority possible any more
    t.round.close();
    auto const out = t.round.outcome(milliseconds(20), endpoints, t.rng);
    CHECK_FALSE(out.result.granted);
    CHECK(out.result.outcome_unknown);
    CHECK(out.give_back == std::vector<std::size_t>{0, 1});
    CHECK(out.counted.empty());
}

TEST_CASE("grant round: held by a majority: no error, the wait until it may lapse") {
    three_primaries t;
    t.round.answer(0, held(400), 5);
    t.round.answer(1, granted(3), 5);
    t.round.answer(2, held(900, true), 5);
    t.round.close();
    auto const out = t.round.outcome(milliseconds(10), endpoints, t.rng);
    CHECK_FALSE(out.result.granted);
    CHECK_FALSE(out.result.ec);
    CHECK(out.result.holder_ttl == milliseconds(400));
    CHECK(out.result.others_queued);
    CHECK(out.give_back == std::vector<std::size_t>{1});
    CHECK(out.result.outcome_unknown);

    // A grant that comes after a round without a lease goes back.
    CHECK(t.round.answer(1, granted(4), 5) == straggler::give_back);
    CHECK(t.round.answer(1, failed(colock::redis::error::connection_lost, "", true), 5) ==
          straggler::give_back);
    CHECK(t.round.answer(1, failed(colock::redis::error::connection_lost), 5) == straggler::ignore);
}

TEST_CASE("grant round: a split vote gives back and pauses for a random while") {
    for (unsigned seed = 1; seed < 40; ++seed) {
        three_primaries t;
        t.rng.seed(seed);
        t.round.answer(0, granted(3), 5);
        t.round.answer(1, held(500), 5);
        t.round.answer(2, failed(colock::redis::error::server_error, "LOADING"), 5);
        t.round.close();
        auto const out = t.round.outcome(milliseconds(30), endpoints, t.rng);
        CHECK_FALSE(out.result.ec);
        CHECK(out.give_back == std::vector<std::size_t>{0});
        // Between 1 ms and twice the attempt's time.
        CHECK(out.result.holder_ttl >= milliseconds(1));
        CHECK(out.result.holder_ttl <= milliseconds(60));
    }
}

TEST_CASE("grant round: a majority that took too long is no lease, and says why") {
    three_primaries t;
    for (std::size_t i = 0; i < 3; ++i)
        t.round.answer(i, granted(5), 5);
    t.round.close();
    auto const out = t.round.outcome(milliseconds(995), endpoints, t.rng);
    CHECK_FALSE(out.result.granted);
    CHECK(out.result.ec == colock::error::no_quorum);
    CHECK(out.result.server_text ==
          "a majority of the Redlock primaries granted the lock, but the attempt took 995 ms "
          "of its 1000 ms ttl, which leaves no validity after 12 ms of clock drift");
    CHECK(out.give_back == std::vector<std::size_t>{0, 1, 2});
}

TEST_CASE("grant round: too few answers: each primary's account, the silent ones timed") {
    three_primaries t;
    t.round.answer(0, failed(colock::redis::error::connection_lost, "not connected"), 5);
    t.round.answer(1, held(0), 5); // gone meanwhile
    t.round.close();               // primary 2 never answered
    auto const out = t.round.outcome(milliseconds(100), endpoints, t.rng);
    CHECK_FALSE(out.result.granted);
    CHECK(out.result.ec == colock::error::no_quorum);
    CHECK(out.result.server_text.starts_with("fewer than 2 of 3 Redlock primaries answered: "
                                             "primary a:1: "));
    CHECK(out.result.server_text.ends_with("; primary c:3: no answer within 100 ms"));
    CHECK(out.give_back == std::vector<std::size_t>{2}); // it may have been applied

    // A lasting error of one primary is reported as it is.
    three_primaries l;
    l.round.answer(0, failed(colock::redis::error::server_error, "NOPERM no"), 5);
    l.round.answer(1, failed(colock::redis::error::server_error, "NOPERM no"), 5);
    CHECK(l.round.decided());
    l.round.close();
    auto const lasting = l.round.outcome(milliseconds(5), endpoints, l.rng);
    CHECK(lasting.result.ec == colock::redis::error::server_error);
    CHECK(lasting.result.server_text.starts_with("primary a:1: "));
}

TEST_CASE("grant round: with one primary down, one held answer waits for the third") {
    // One reconnecting (refused at once) and one held: no grant majority can come, but the
    // third's answer decides between "held" and "too few answers".
    three_primaries t;
    t.round.answer(0, failed(colock::redis::error::connection_lost, "not connected"), 5);
    t.round.answer(1, held(700), 5);
    CHECK_FALSE(t.round.decided());
    t.round.answer(2, held(650), 5);
    CHECK(t.round.decided());
    t.round.close();
    auto const out = t.round.outcome(milliseconds(3), endpoints, t.rng);
    CHECK_FALSE(out.result.granted);
    CHECK_FALSE(out.result.ec);
    CHECK(out.result.holder_ttl == milliseconds(650));
    CHECK(out.give_back.empty());

    // Stopped meanwhile: the caller wants no more than whether it was granted.
    three_primaries s;
    s.round.answer(0, failed(colock::redis::error::connection_lost, "not connected"), 5);
    s.round.stop();
    s.round.answer(1, held(700), 5);
    CHECK(s.round.decided());
}

TEST_CASE("grant round: the caller's stop: nothing more is asked, and the round is aborted") {
    three_primaries t;
    asio::cancellation_slot slot = t.round.stop_slot(1);
    bool heard = false;
    slot.assign([&heard](asio::cancellation_type) { heard = true; });
    t.round.answer(0, failed(asio::error::operation_aborted), 5);
    t.round.stop();
    CHECK(heard);
    CHECK_FALSE(t.round.to_ask(2));
    CHECK(t.round.answered(2));
    CHECK(t.round.decided()); // no grant majority can come: the stopped caller is answered now
    t.round.close();
    auto const out = t.round.outcome(milliseconds(5), endpoints, t.rng);
    CHECK(out.result.ec == asio::error::operation_aborted);
    CHECK(out.give_back == std::vector<std::size_t>{1}); // asked, unanswered: it may be ours

    // Held by a majority, a stopped round still reports the wait.
    three_primaries h;
    h.round.answer(0, held(250), 5);
    h.round.answer(1, held(350), 5);
    h.round.stop();
    h.round.close();
    auto const wait = h.round.outcome(milliseconds(5), endpoints, h.rng);
    CHECK_FALSE(wait.result.ec);
    CHECK(wait.result.holder_ttl == milliseconds(250));
}

TEST_CASE("grant round: a newer round for the same key and token supersedes it") {
    three_primaries t;
    CHECK_FALSE(t.round.superseded());
    t.round.supersede();
    CHECK(t.round.superseded());
}

TEST_CASE("grant round of a lock set: each name's fence is the largest of the majority that "
          "decided, and a refusal leaves every grant to give back") {
    asio::io_context ctx;
    auto const strand = asio::make_strand(asio::any_io_executor(ctx.get_executor()));
    std::vector<lock_keys> const keys{lock_keys("p:", "a", "owner"), lock_keys("p:", "b", "owner")};
    colock::detail::names_request const request{"owner/1", "tok", milliseconds(1000), true};
    auto round_of = [&] {
        auto r = std::make_unique<grant_round>(
            strand, 3, keys.front(), "tok", milliseconds(1000), queueing::when_held, replica_wait{},
            colock::detail::redlock::names_attempt{keys, request});
        for (std::size_t i = 0; i < 3; ++i)
            r->set_changes_at_start(i, 5);
        return r;
    };
    std::minstd_rand rng{7};
    {
        auto round = round_of();
        REQUIRE(round->names().has_value());
        CHECK(round->names()->keys.size() == 2);
        CHECK(round->answer(0, granted(40), 5, {40, 70}) == straggler::ignore);
        CHECK(round->answer(2, granted(60), 5, {60, 50}) == straggler::ignore);
        CHECK(round->decided());
        round->close();
        auto const out = round->outcome(milliseconds(20), endpoints, rng);
        CHECK(out.result.granted);
        CHECK(out.fences == std::vector<std::int64_t>{60, 70});
        // A late grant joins the lease; its fences are not the guard's.
        CHECK(round->answer(1, granted(90), 5, {90, 90}) == straggler::join_lease);
    }
    {
        // One primary took the names, two found one held: no majority, its grant goes back.
        auto round = round_of();
        CHECK(round->answer(1, granted(40), 5, {40, 41}) == straggler::ignore);
        CHECK(round->answer(0, held(300), 5) == straggler::ignore);
        CHECK(round->answer(2, held(200), 5) == straggler::ignore);
        round->close();
        auto const out = round->outcome(milliseconds(20), endpoints, rng);
        CHECK_FALSE(out.result.granted);
        CHECK(out.fences.empty());
        CHECK(out.give_back == std::vector<std::size_t>{1});
    }
}

// What every round over a quorum's primaries shares (quorum/quorum_round): the answers counted,
// the decision taken once, and the three waits (for the decision within a timeout, for the
// decision however long, for every answer within a timeout), on virtual time: the lock clock
// is moved by the test and nothing sleeps.
#include "lock/quorum/quorum_round.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using colock::detail::lock_clock;
using colock::detail::lock_timer;
using colock::detail::redlock::primary_error;
using colock::detail::redlock::round_state;

namespace {

// A round with nothing of its own: the shared state, its protected parts opened for the test.
struct bare_round final : round_state {
    using round_state::mark_answered;
    using round_state::round_state;
    using round_state::with_silence;
};

struct round_fixture {
    asio::io_context ctx;
    asio::strand<asio::any_io_executor> strand{asio::make_strand(ctx.get_executor())};

    void settle() {
        ctx.restart();
        ctx.poll();
    }

    // Moves the lock clock on by `d` and runs what became due.
    void advance(std::chrono::milliseconds d) {
        lock_clock::advance(d);
        // Asio looks at its timers again by the moved clock once one of them is due.
        lock_timer nudge(ctx, lock_clock::time_point::min());
        nudge.async_wait([](boost::system::error_code) {});
        settle();
    }

    // Starts `op` on the strand; its result lands in `out`.
    template <class T>
    void start(asio::awaitable<T> op, std::optional<T>& out, asio::cancellation_slot slot = {}) {
        asio::co_spawn(strand, std::move(op),
                       asio::bind_cancellation_slot(slot, [&out](std::exception_ptr e, T v) {
                           REQUIRE_FALSE(e);
                           out = v;
                       }));
    }
    void start(asio::awaitable<void> op, bool& done) {
        asio::co_spawn(strand, std::move(op), [&done](std::exception_ptr e) {
            REQUIRE_FALSE(e);
            done = true;
        });
    }
};

} // namespace

TEST_CASE_FIXTURE(round_fixture, "quorum round: a new round has every primary pending and is "
                                 "undecided") {
    bare_round r(strand, 3);
    CHECK(r.size() == 3);
    CHECK(r.pending() == 3);
    CHECK_FALSE(r.answered(0));
    CHECK_FALSE(r.answered(2));
    CHECK_FALSE(r.decided());
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: each primary's answer counts once, whatever its "
                                 "order") {
    bare_round r(strand, 5);
    r.mark_answered(3);
    CHECK(r.answered(3));
    CHECK_FALSE(r.answered(2));
    CHECK(r.pending() == 4);
    r.mark_answered(3); // a second answer of the same primary
    CHECK(r.pending() == 4);
    r.mark_answered(0);
    r.mark_answered(4);
    CHECK(r.pending() == 2);
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: decided once, and stays decided") {
    bare_round r(strand, 3);
    r.decide();
    CHECK(r.decided());
    r.decide();
    CHECK(r.decided());
    CHECK(r.pending() == 3); // a decision answers for nobody
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: a wait on a round decided before it ends at once, "
                                 "without the clock") {
    bare_round r(strand, 3);
    r.decide();
    std::optional<bool> out;
    start(r.wait(1h, true), out);
    settle();
    REQUIRE(out);
    CHECK(*out);
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: a wait ends when the answers decide the round, "
                                 "long before its timeout") {
    bare_round r(strand, 3);
    std::optional<bool> out;
    start(r.wait(10s, true), out);
    settle();
    CHECK_FALSE(out);
    r.mark_answered(0);
    r.mark_answered(1);
    settle();
    CHECK_FALSE(out); // answers alone do not end it: the round's decision does
    r.decide();
    settle();
    REQUIRE(out);
    CHECK(*out);
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: an undecided wait ends at its timeout, not "
                                 "before, and reports the rest unknown (true, undecided)") {
    bare_round r(strand, 3);
    std::optional<bool> out;
    start(r.wait(5s, true), out);
    settle(); // the wait's timeout counts from here
    advance(4900ms);
    CHECK_FALSE(out);
    advance(200ms);
    REQUIRE(out);
    CHECK(*out);
    CHECK_FALSE(r.decided());
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: a cancellable wait cancelled by its caller "
                                 "reports false") {
    bare_round r(strand, 3);
    asio::cancellation_signal stop;
    std::optional<bool> out;
    start(r.wait(10s, true), out, stop.slot());
    settle();
    stop.emit(asio::cancellation_type::terminal);
    settle();
    REQUIRE(out);
    CHECK_FALSE(*out);
    CHECK_FALSE(r.decided());
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: a wait that is not cancellable goes on past its "
                                 "caller's cancellation, to the decision") {
    bare_round r(strand, 3);
    asio::cancellation_signal stop;
    std::optional<bool> out;
    start(r.wait(10s, false), out, stop.slot());
    settle();
    stop.emit(asio::cancellation_type::terminal);
    settle();
    CHECK_FALSE(out);
    r.decide();
    settle();
    REQUIRE(out);
    CHECK(*out);
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: wait_decided waits however long the clock goes, "
                                 "until the decision") {
    bare_round r(strand, 3);
    bool done = false;
    start(r.wait_decided(), done);
    advance(24h);
    CHECK_FALSE(done);
    r.decide();
    settle();
    CHECK(done);
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: wait_answered ends with the last answer, not "
                                 "with the ones before it") {
    bare_round r(strand, 3);
    bool done = false;
    start(r.wait_answered(10s), done);
    settle();
    r.mark_answered(2);
    r.mark_answered(0);
    settle();
    CHECK_FALSE(done);
    r.mark_answered(1);
    settle();
    CHECK(done);
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: wait_answered goes on past the decision, for the "
                                 "answers still to come") {
    bare_round r(strand, 3);
    bool done = false;
    start(r.wait_answered(10s), done);
    settle();
    r.mark_answered(0);
    r.decide();
    settle();
    CHECK_FALSE(done);
    r.mark_answered(1);
    r.mark_answered(2);
    settle();
    CHECK(done);
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: wait_answered gives up on silent primaries at "
                                 "its timeout") {
    bare_round r(strand, 3);
    bool done = false;
    start(r.wait_answered(2s), done);
    settle();
    r.mark_answered(0);
    advance(1900ms);
    CHECK_FALSE(done);
    advance(200ms);
    CHECK(done);
    CHECK(r.pending() == 2);
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: wait_answered on a round every primary answered "
                                 "ends at once") {
    bare_round r(strand, 2);
    r.mark_answered(0);
    r.mark_answered(1);
    bool done = false;
    start(r.wait_answered(1h), done);
    settle();
    CHECK(done);
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: wait_answered with an unbounded timeout waits for "
                                 "the answers, the clock's end not wrapping round") {
    bare_round r(strand, 1);
    bool done = false;
    start(r.wait_answered(std::chrono::milliseconds::max()), done);
    advance(1h);
    CHECK_FALSE(done);
    r.mark_answered(0);
    settle();
    CHECK(done);
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: the last answer outside wait_answered does not "
                                 "end a wait for the decision") {
    bare_round r(strand, 2);
    std::optional<bool> out;
    start(r.wait(10s, true), out);
    settle();
    r.mark_answered(0);
    r.mark_answered(1);
    settle();
    CHECK_FALSE(out);
    r.decide();
    settle();
    CHECK(out);
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: silent primaries without an error of their own "
                                 "read \"no answer in time\"; every other error is kept") {
    bare_round r(strand, 4);
    r.mark_answered(0); // answered, no error
    r.mark_answered(1); // answered with an error
    // 2: silent, no error; 3: silent, with an error of its own (could not be sent)
    std::vector<primary_error> const errors{{},
                                            {colock::redis::error::server_error, "NOPERM x"},
                                            {},
                                            {colock::redis::error::connection_lost, ""}};
    auto const out = r.with_silence(errors);
    REQUIRE(out.size() == 4);
    CHECK_FALSE(out[0].first);
    CHECK(out[1] == errors[1]);
    CHECK(out[2].first == colock::error::no_quorum);
    CHECK(out[2].second == "no answer in time");
    CHECK(out[3] == errors[3]);
}

// What every round over a quorum's primaries shares (quorum/quorum_round): the answers counted,
// the decision taken once, and the three waits (for the decision within a timeout, for the
// decision however long, for every answer within a timeout), on virtual time: the lock clock
// is moved by the test and nothing sleeps.
#include "lock/quorum/quorum_round.hpp"

#include "virtual_clock.hpp"

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
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using colock::detail::redlock::primary_error;
using colock::detail::redlock::round_state;

namespace {

// A round with nothing of its own: the shared state, its protected parts opened for the test.
struct bare_round final : round_state {
    using round_state::mark_answered;
    using round_state::round_state;
    using round_state::with_silence;
};

struct round_fixture : colock::test::virtual_clock_context {
    std::optional<bool> waited; // what the wait for the decision returned, once it has
    bool done = false;          // whether the wait that returns nothing has

    // Starts `op`, a wait for the decision, and runs it to where it waits.
    void start_wait(asio::awaitable<bool> op, asio::cancellation_slot slot = {}) {
        asio::co_spawn(strand, std::move(op),
                       asio::bind_cancellation_slot(slot, [this](std::exception_ptr e, bool v) {
                           REQUIRE_FALSE(e);
                           waited = v;
                       }));
        settle();
    }
    // Starts `op`, a wait that returns nothing, and runs it to where it waits.
    void start_wait(asio::awaitable<void> op) {
        asio::co_spawn(strand, std::move(op), [this](std::exception_ptr e) {
            REQUIRE_FALSE(e);
            done = true;
        });
        settle();
    }

    // Runs what is ready; then whether the wait that returns nothing has returned.
    bool finished() {
        settle();
        return done;
    }
    // Runs what is ready; then what the wait for the decision returned, if it has.
    std::optional<bool> outcome() {
        settle();
        return waited;
    }
    // Starts `op`, a wait for the decision, and its caller cancels it (terminal) once it waits.
    asio::cancellation_signal caller;
    void start_cancelled(asio::awaitable<bool> op) {
        start_wait(std::move(op), caller.slot());
        caller.emit(asio::cancellation_type::terminal);
        settle();
    }

    // Each of `primaries` answers, in this order.
    static void answer(bare_round& r, std::initializer_list<std::size_t> primaries) {
        for (auto const p : primaries)
            r.mark_answered(p);
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
    start_wait(r.wait(1h, true));
    REQUIRE(waited);
    CHECK(*waited);
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: a wait ends when the answers decide the round, "
                                 "long before its timeout") {
    bare_round r(strand, 3);
    start_wait(r.wait(10s, true));
    CHECK_FALSE(waited);
    answer(r, {0, 1});
    CHECK_FALSE(outcome()); // answers alone do not end it: the round's decision does
    r.decide();
    CHECK(outcome() == true);
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: an undecided wait ends at its timeout, not "
                                 "before, and reports the rest unknown (true, undecided)") {
    bare_round r(strand, 3);
    start_wait(r.wait(5s, true)); // the timeout counts from here
    advance(4900ms);
    CHECK_FALSE(waited);
    advance(200ms);
    REQUIRE(waited);
    CHECK(*waited);
    CHECK_FALSE(r.decided());
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: a cancellable wait cancelled by its caller "
                                 "reports false") {
    bare_round r(strand, 3);
    start_cancelled(r.wait(10s, true));
    CHECK(waited == false);
    CHECK_FALSE(r.decided());
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: a wait that is not cancellable goes on past its "
                                 "caller's cancellation, to the decision") {
    bare_round r(strand, 3);
    start_cancelled(r.wait(10s, false));
    CHECK_FALSE(waited);
    r.decide();
    CHECK(outcome() == true);
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: wait_decided waits however long the clock goes, "
                                 "until the decision") {
    bare_round r(strand, 3);
    start_wait(r.wait_decided());
    advance(24h);
    CHECK_FALSE(done);
    r.decide();
    CHECK(finished());
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: wait_answered ends with the last answer, not "
                                 "with the ones before it") {
    bare_round r(strand, 3);
    start_wait(r.wait_answered(10s));
    answer(r, {2, 0});
    CHECK_FALSE(finished());
    r.mark_answered(1);
    CHECK(finished());
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: wait_answered goes on past the decision, for the "
                                 "answers still to come") {
    bare_round r(strand, 3);
    start_wait(r.wait_answered(10s));
    r.mark_answered(0);
    r.decide();
    CHECK_FALSE(finished());
    answer(r, {1, 2});
    CHECK(finished());
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: wait_answered on a round every primary answered "
                                 "ends at once") {
    bare_round r(strand, 2);
    answer(r, {0, 1});
    start_wait(r.wait_answered(1h));
    CHECK(done);
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: wait_answered gives up on silent primaries at "
                                 "its timeout") {
    bare_round r(strand, 3);
    start_wait(r.wait_answered(2s));
    r.mark_answered(0);
    advance(1900ms);
    CHECK_FALSE(done);
    advance(200ms);
    CHECK(done);
    CHECK(r.pending() == 2);
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: wait_answered with an unbounded timeout waits for "
                                 "the answers, the clock's end not wrapping round") {
    bare_round r(strand, 1);
    start_wait(r.wait_answered(std::chrono::milliseconds::max()));
    advance(1h);
    CHECK_FALSE(done);
    r.mark_answered(0);
    CHECK(finished());
}

TEST_CASE_FIXTURE(round_fixture, "quorum round: the last answer outside wait_answered does not "
                                 "end a wait for the decision") {
    bare_round r(strand, 2);
    start_wait(r.wait(10s, true));
    answer(r, {0, 1});
    CHECK_FALSE(outcome());
    r.decide();
    CHECK(outcome());
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

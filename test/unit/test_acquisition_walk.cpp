// Whole calls walked through the acquisition machine on virtual time: a waiting call's attempts
// with a fault injected at each step in turn, a cancellation at each step, and the deadlines
// that end a wait.
#include "lock/core/acquisition.hpp"

#include "acquisition_events.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <doctest/doctest.h>

#include <vector>

using namespace acquisition_test;
namespace redis = colock::redis;

TEST_CASE("a waiting call walked on virtual time, with a fault injected at each step") {
    // Held three times, then granted: each step in turn replaced by a fault the call waits out.
    std::vector<store_answer> const faults = {
        failed(redis::error::connection_lost),
        failed(redis::error::connection_lost, {}, true),
        failed(redis::error::server_error, "LOADING Redis is loading the dataset in memory"),
        failed(redis::error::health_check_timeout),
        failed(refused_error(), "connecting: refused"),
    };
    for (auto make : {&lock_call, &permit_call}) {
        for (std::size_t step = 0; step < 4; ++step) {
            for (auto const& fault : faults) {
                CAPTURE(step);
                CAPTURE(fault.result.ec.message());
                walk w{make(true), {}};
                for (std::size_t i = 0; i < 4; ++i)
                    w.answers.push_back(i == step ? fault : i == 3 ? granted() : held(100ms));
                if (step == 3)
                    w.answers.push_back(granted());
                auto const done = w.run();
                CHECK(ends(done, acquisition_end::acquired));
                CHECK(w.answers.empty());
                CHECK(w.now < t0 + 10s);
                CHECK(w.give_backs == (fault.result.outcome_unknown && make == &permit_call));
            }
        }
    }
}

TEST_CASE("a waiting call held to the end times out at the wait deadline") {
    walk w{lock_call(), {}};
    for (int i = 0; i < 400; ++i)
        w.answers.push_back(held(30s));
    auto const done = w.run();
    CHECK(ends(done, acquisition_end::timed_out));
    CHECK(w.now == t0 + 10s);
    CHECK(w.sleeps > 9); // at least every refresh interval
    // A connection never established: the connect failure at first_connect_timeout.
    walk c{permit_call(), {}};
    for (int i = 0; i < 400; ++i)
        c.answers.push_back(failed(refused_error(), "connecting: refused"));
    auto const down = c.run();
    CHECK(ends(down, acquisition_end::failed));
    CHECK(down.ec == refused_error());
    CHECK(c.now >= t0 + 2s);
    CHECK(c.now < t0 + 2s + 10ms);
}

TEST_CASE("a cancellation at each step of a waiting call: the call ends aborted, a grant given "
          "back first") {
    for (auto make : {&lock_call, &permit_call}) {
        for (int stop = 0; stop < 4; ++stop) {
            CAPTURE(stop);
            walk w{make(true), {}};
            w.stop_at = stop;
            for (int i = 0; i < 3; ++i)
                w.answers.push_back(held(100ms));
            w.answers.push_back(granted());
            auto const done = w.run();
            CHECK(acquisition::aborted().ec == done.ec);
            CHECK(ends(done, acquisition_end::aborted));
            CHECK(w.answered == stop + 1);      // nothing asked after the cancellation
            CHECK(w.give_backs == (stop == 3)); // the grant that came for it
            CHECK(!w.machine.queued_at_server() == (stop == 3));
        }
    }
}

TEST_CASE("a cancelled call whose grant's give-back was not confirmed leaves a lock's token to "
          "be released at the end") {
    walk w{lock_call(), {}};
    w.stop_at = 1;
    w.releases = false;
    w.answers = {held(5ms), granted()};
    CHECK(ends(w.run(), acquisition_end::aborted));
    CHECK(w.give_backs == 1);
    CHECK(w.machine.outcome_unknown());
}

TEST_CASE("a co_try_lock makes one attempt, whatever it meets") {
    std::vector<std::pair<store_answer, acquisition_end>> const cases = {
        {granted(), acquisition_end::acquired},
        {held(5ms), acquisition_end::not_acquired},
        {failed(redis::error::connection_lost), acquisition_end::failed},
        {failed(refused_error(), "refused"), acquisition_end::failed},
        {failed(colock::error::timeout), acquisition_end::timed_out},
    };
    for (auto make : {&lock_call, &permit_call}) {
        // Not a structured binding: Clang 14 cannot capture one (CAPTURE is a lambda).
        for (auto const& one_case : cases) {
            auto const& answer = one_case.first;
            auto const end = one_case.second;
            CAPTURE(answer.result.ec.message());
            walk w{make(false), {answer}};
            CHECK(ends(w.run(), end));
            CHECK(w.answered == 1);
            CHECK(w.sleeps == 0);
            CHECK(!w.machine.queued_at_server());
        }
    }
}

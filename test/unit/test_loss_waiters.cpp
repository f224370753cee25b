// The wait_lost calls of one lease (core/loss_waiters): each completes exactly once, with the
// code the lease's end gives or operation_aborted when its caller cancels, never inside the
// call that decided it; the calls taken out at shutdown are not completed. On an io_context
// run by the test: no server, no timer.
#include "lock/core/loss_waiters.hpp"

#include <colock/error.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include <doctest/doctest.h>

#include <array>
#include <memory>
#include <vector>

namespace asio = boost::asio;
using boost::system::error_code;
using colock::detail::loss_waiters;

namespace {

// What one call was completed with, each time it was.
struct loss_outcome {
    std::vector<error_code> codes;
    auto handler() {
        return [this](error_code ec) { codes.push_back(ec); };
    }
};

struct waiters_fixture {
    asio::io_context ctx;
    std::shared_ptr<loss_waiters> waiters =
        std::make_shared<loss_waiters>(asio::make_strand(ctx.get_executor()));

    void settle() {
        ctx.restart();
        ctx.poll();
    }

    // A call made for `handler`, enrolled as waiting; the test holds it to its end.
    template <class Handler>
    std::shared_ptr<loss_waiters::call> enrolled(Handler handler) {
        auto call = waiters->make(std::move(handler));
        waiters->enroll(call);
        held.push_back(call);
        return call;
    }
    std::vector<std::shared_ptr<loss_waiters::call>> held;

    // Two calls of their own, both enrolled.
    std::array<loss_outcome, 2> calls;
    void enroll_calls() {
        for (auto& o : calls)
            enrolled(o.handler());
    }
};

} // namespace

TEST_CASE_FIXTURE(waiters_fixture, "loss waiters: a waiting call completes with the lease's end, "
                                   "after the call that decided it returns") {
    loss_outcome o;
    auto const c = waiters->make(o.handler());
    CHECK(waiters->enroll(c));
    waiters->finish_all(error_code());
    CHECK(o.codes.empty()); // posted, not run inside finish_all
    settle();
    CHECK(o.codes == std::vector<error_code>{error_code()});
}

TEST_CASE_FIXTURE(waiters_fixture, "loss waiters: every waiting call completes with the same code, "
                                   "once; a second end finds nobody") {
    enroll_calls();
    waiters->finish_all(colock::error::not_held);
    waiters->finish_all(error_code());
    settle();
    for (auto const& o : calls)
        CHECK(o.codes == std::vector<error_code>{colock::error::not_held});
}

TEST_CASE_FIXTURE(waiters_fixture, "loss waiters: a call finished on its own completes once, and "
                                   "the lease's end does not complete it again") {
    loss_outcome o;
    auto const c = enrolled(o.handler());
    waiters->finish(c, colock::error::not_held);
    waiters->finish(c, error_code());
    waiters->finish_all(error_code());
    settle();
    CHECK(o.codes == std::vector<error_code>{colock::error::not_held});
}

TEST_CASE_FIXTURE(waiters_fixture, "loss waiters: a call cancelled while it waits completes with "
                                   "operation_aborted and is no longer waiting") {
    loss_outcome o;
    asio::cancellation_signal stop;
    enrolled(asio::bind_cancellation_slot(stop.slot(), o.handler()));
    stop.emit(asio::cancellation_type::terminal);
    settle();
    CHECK(o.codes == std::vector<error_code>{asio::error::operation_aborted});
    CHECK(waiters->take_all().empty()); // taken out of the waiting calls, not just completed
}

TEST_CASE_FIXTURE(waiters_fixture, "loss waiters: a call cancelled before it enrolls completes "
                                   "aborted, and enrolling it then is refused") {
    loss_outcome o;
    asio::cancellation_signal stop;
    auto const c = waiters->make(asio::bind_cancellation_slot(stop.slot(), o.handler()));
    stop.emit(asio::cancellation_type::terminal); // before anything is posted
    settle();
    CHECK(o.codes == std::vector<error_code>{asio::error::operation_aborted});
    CHECK_FALSE(waiters->enroll(c));
    CHECK(waiters->take_all().empty());
}

TEST_CASE_FIXTURE(waiters_fixture, "loss waiters: cancelling one call leaves the others waiting") {
    loss_outcome a, b;
    asio::cancellation_signal stop_a;
    enrolled(asio::bind_cancellation_slot(stop_a.slot(), a.handler()));
    enrolled(b.handler());
    stop_a.emit(asio::cancellation_type::terminal);
    settle();
    CHECK(a.codes.size() == 1);
    CHECK(b.codes.empty());
    waiters->finish_all(colock::error::lock_lost);
    settle();
    CHECK(b.codes == std::vector<error_code>{colock::error::lock_lost});
    CHECK(a.codes.size() == 1);
}

TEST_CASE_FIXTURE(waiters_fixture, "loss waiters: a cancellation after the completion changes "
                                   "nothing") {
    loss_outcome o;
    asio::cancellation_signal stop;
    enrolled(asio::bind_cancellation_slot(stop.slot(), o.handler()));
    waiters->finish_all(error_code());
    settle();
    stop.emit(asio::cancellation_type::terminal); // the slot was cleared with the completion
    settle();
    CHECK(o.codes == std::vector<error_code>{error_code()});
}

TEST_CASE_FIXTURE(waiters_fixture, "loss waiters: at shutdown the waiting calls are taken out "
                                   "without completing") {
    enroll_calls();
    auto const taken = waiters->take_all();
    CHECK(taken.size() == 2);
    waiters->finish_all(error_code());
    settle();
    for (auto const& o : calls)
        CHECK(o.codes.empty());
}

TEST_CASE_FIXTURE(waiters_fixture, "loss waiters: a cancellation after the waiters are gone "
                                   "reaches nothing and completes nothing") {
    loss_outcome o;
    asio::cancellation_signal stop;
    enrolled(asio::bind_cancellation_slot(stop.slot(), o.handler()));
    waiters.reset();
    stop.emit(asio::cancellation_type::terminal);
    settle();
    CHECK(o.codes.empty());
}

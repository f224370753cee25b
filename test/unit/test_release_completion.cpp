// How a guard's awaited release completes (base/release_completion): a holding known lost
// completes at once with "not ours" and still goes out in the background; otherwise the
// holding's own release is awaited and its answer passed on, an exception in it read as an
// unexpected reply; never inside the releasing call, and without Asio's source locations.
#include "lock/base/release_completion.hpp"

#include <colock/diagnostics.hpp>
#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <boost/system/system_error.hpp>

#include <doctest/doctest.h>

#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace asio = boost::asio;
using boost::system::error_code;
using colock::detail::release_and_complete;

namespace releases {

// A holding as release_and_complete sees it; its two releases found by argument-dependent
// lookup, as a holding kind's own are.
struct holding {
    explicit holding(asio::strand<asio::any_io_executor> s) : strand_(std::move(s)) {}

    asio::strand<asio::any_io_executor> strand_;
    bool lost_ = false;
    // What its awaited release answers, or that it throws.
    error_code answer;
    bool ours = true;
    bool throws = false;
    int awaited = 0;
    int background = 0;

    asio::strand<asio::any_io_executor> const& strand() const { return strand_; }
    bool lost() const { return lost_; }
};

asio::awaitable<std::tuple<error_code, bool>> release_held(std::shared_ptr<holding> st) {
    ++st->awaited;
    if (st->throws)
        throw std::runtime_error("a reply of no known shape");
    co_return std::tuple<error_code, bool>{st->answer, st->ours};
}

void release_in_background(std::shared_ptr<holding> st) {
    ++st->background;
}

} // namespace releases

namespace {

struct release_fixture {
    asio::io_context ctx;
    std::shared_ptr<releases::holding> st =
        std::make_shared<releases::holding>(asio::make_strand(ctx.get_executor()));
    int calls = 0;
    // What the handler got, through with_diagnostics: the code of its exception and what().
    error_code ec;
    std::exception_ptr thrown;
    std::string text;
    bool ours = false;

    void release() {
        release_and_complete(
            st,
            colock::detail::diagnosing_handler<std::function<void(std::exception_ptr, bool)>>{
                [this](std::exception_ptr e, bool o) {
                    ++calls;
                    thrown = e;
                    ec = {};
                    if (e) {
                        try {
                            std::rethrow_exception(e);
                        } catch (boost::system::system_error const& failure) {
                            ec = failure.code();
                            text = failure.what();
                        }
                    }
                    ours = o;
                }},
            [](error_code e) { return "colock: release of x: " + e.message(); });
    }
    void settle() {
        ctx.restart();
        ctx.poll();
    }
    // Releases, and runs what that made ready.
    void release_settled() {
        release();
        settle();
    }
};

} // namespace

TEST_CASE_FIXTURE(release_fixture, "release completion: a held lease's release is awaited and "
                                   "its answer passed on") {
    release();
    CHECK(calls == 0); // not inside the releasing call
    settle();
    CHECK(calls == 1);
    CHECK_FALSE(ec);
    CHECK(ours);
    CHECK(st->awaited == 1);
    CHECK(st->background == 0);
}

TEST_CASE_FIXTURE(release_fixture, "release completion: a release that found the lease gone "
                                   "answers not ours, without an error") {
    st->ours = false;
    release_settled();
    CHECK(calls == 1);
    CHECK_FALSE(ec);
    CHECK_FALSE(ours);
}

TEST_CASE_FIXTURE(release_fixture, "release completion: a lease known lost completes at once with "
                                   "not ours, and its release still goes out in the background") {
    st->lost_ = true;
    release();
    CHECK(calls == 0);
    CHECK(st->background == 1); // handed on before the completion
    settle();
    CHECK(calls == 1);
    CHECK_FALSE(ec);
    CHECK_FALSE(ours);
    CHECK(st->awaited == 0);
}

TEST_CASE_FIXTURE(release_fixture, "release completion: the release's error is passed on without "
                                   "a source location") {
    static boost::source_location const where = BOOST_CURRENT_LOCATION;
    st->answer =
        error_code(static_cast<int>(colock::error::timeout), colock::error_category(), &where);
    REQUIRE(st->answer.has_location());
    release_settled();
    CHECK(ec == colock::error::timeout);
    CHECK_FALSE(ec.has_location());
    // with_diagnostics is told the text the awaitable release throws.
    CHECK_MESSAGE(text.starts_with("colock: release of x: "), text);
}

TEST_CASE_FIXTURE(release_fixture, "release completion: an exception in the release reads as an "
                                   "unexpected reply") {
    st->throws = true;
    release_settled();
    CHECK(calls == 1);
    CHECK(ec == colock::error::unexpected_reply);
}

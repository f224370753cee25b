// How the locker's co_* calls complete what they return (base/awaited_call): a refusal posted
// to the awaiting side's executor with the exception being handled, and an outcome's failure
// thrown as the right exception with its message: a connect_error (what() the message alone)
// for a connection never made, a system_error otherwise.
#include "lock/base/awaited_call.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <exception>
#include <stdexcept>
#include <string>

namespace asio = boost::asio;
using boost::system::error_code;
using colock::detail::complete_awaited;
using colock::detail::refuse_awaited;

namespace {

// An operation's outcome as the locker's calls carry it.
struct call_outcome {
    error_code ec;
    std::string message;
    int value = 0;
};

int take_value(call_outcome o) {
    return o.value;
}

// What the awaiting side was completed with.
struct completion {
    int calls = 0;
    std::exception_ptr e;
    int result = -1;
    auto handler() {
        return [this](std::exception_ptr ex, int r) {
            ++calls;
            e = ex;
            result = r;
        };
    }
};

} // namespace

TEST_CASE("awaited call: an outcome without an error completes with what take() makes of it") {
    completion c;
    complete_awaited<int>(c.handler(), nullptr, call_outcome{{}, "", 42}, take_value);
    CHECK(c.calls == 1);
    CHECK_FALSE(c.e);
    CHECK(c.result == 42);
}

TEST_CASE("awaited call: a failure throws a system_error with the outcome's code and message, "
          "and the result is a default one") {
    completion c;
    complete_awaited<int>(c.handler(), nullptr,
                          call_outcome{colock::error::timeout, "not acquired within 5 ms", 42},
                          take_value);
    REQUIRE(c.e);
    CHECK(c.result == 0);
    try {
        std::rethrow_exception(c.e);
    } catch (colock::redis::connect_error const&) {
        FAIL("a timeout is no connect failure");
    } catch (boost::system::system_error const& e) {
        CHECK(e.code() == colock::error::timeout);
        CHECK(std::string(e.what()).starts_with("not acquired within 5 ms"));
    }
}

TEST_CASE("awaited call: a connection never made throws a connect_error whose what() is the "
          "message alone") {
    completion c;
    error_code const refused = asio::error::connection_refused;
    complete_awaited<int>(
        c.handler(), nullptr,
        call_outcome{refused, "no connection to the Redis server: h:1 refused", 7}, take_value);
    REQUIRE(c.e);
    try {
        std::rethrow_exception(c.e);
    } catch (colock::redis::connect_error const& e) {
        CHECK(e.code() == refused);
        CHECK(std::string(e.what()) == "no connection to the Redis server: h:1 refused");
    }
}

TEST_CASE("awaited call: an exception already there wins over the outcome, error or not") {
    auto const thrown = std::make_exception_ptr(std::runtime_error("boom"));
    completion c;
    complete_awaited<int>(c.handler(), thrown, call_outcome{colock::error::timeout, "x", 42},
                          take_value);
    CHECK(c.e == thrown);
    CHECK(c.result == 0);
    completion d;
    complete_awaited<int>(d.handler(), thrown, call_outcome{{}, "", 42}, take_value);
    CHECK(d.e == thrown);
    CHECK(d.result == 0);
}

TEST_CASE("awaited call: a refusal is posted with the exception being handled, not run inside "
          "the refusing call") {
    asio::io_context ctx;
    completion c;
    try {
        throw std::invalid_argument("colock: lock name is empty");
    } catch (...) {
        refuse_awaited<int>(c.handler(), ctx.get_executor());
    }
    CHECK(c.calls == 0);
    ctx.run();
    REQUIRE(c.calls == 1);
    CHECK(c.result == 0);
    CHECK_THROWS_WITH_AS(std::rethrow_exception(c.e), "colock: lock name is empty",
                         std::invalid_argument);
}

TEST_CASE("awaited call: a refusal goes to the handler's own executor rather than the fallback") {
    asio::io_context own, fallback;
    completion c;
    try {
        throw std::invalid_argument("bad");
    } catch (...) {
        refuse_awaited<int>(asio::bind_executor(own, c.handler()), fallback.get_executor());
    }
    fallback.run();
    CHECK(c.calls == 0);
    own.run();
    CHECK(c.calls == 1);
}

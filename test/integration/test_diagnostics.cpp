// with_diagnostics(token): an async_* operation that fails completes with the exception its
// awaitable form throws, the same what() naming the lock (semaphore, election, ...) and what ran
// out, for coroutines, futures and callbacks; successes pass their values; the handler's
// associated executor is kept; a plain error_code token is unchanged.
#include <colock/diagnostics.hpp>
#include <colock/election.hpp>
#include <colock/locker.hpp>
#include <colock/semaphore.hpp>

#include "lock_fixture.hpp"
#include "test_util.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <exception>
#include <future>
#include <optional>
#include <string>

using namespace colock;
using namespace colock::test;
using namespace std::chrono_literals;

namespace {

// What `op` (an awaitable) throws: its code and what(); an empty code when it did not throw.
template <class Awaitable>
asio::awaitable<std::pair<error_code, std::string>> thrown_by(Awaitable op) {
    try {
        co_await std::move(op);
    } catch (boost::system::system_error const& e) {
        co_return std::pair{e.code(), std::string(e.what())};
    }
    co_return std::pair{error_code{}, std::string()};
}

std::pair<error_code, std::string> thrown_by(std::exception_ptr const& e) {
    if (!e)
        return {};
    try {
        std::rethrow_exception(e);
    } catch (boost::system::system_error const& failure) {
        return {failure.code(), failure.what()};
    }
}

} // namespace

TEST_CASE("with_diagnostics: async_lock fails with co_lock's own exception, for a coroutine, a "
          "future and a callback; a success passes the guard; a plain error_code is unchanged") {
    run_lock_test<one_locker>(
        "diag-lock",
        [](redis::connection&, redis::connection& probe, locker& locks,
           std::string const& name) -> asio::awaitable<void> {
            locker other{probe};
            auto held = co_await other.co_lock(name);
            auto const brief = waiting_up_to(lock_options{}, 150ms);

            auto const awaited = co_await thrown_by(locks.co_lock(name, brief));
            REQUIRE(awaited.first == error::timeout);
            CHECK_MESSAGE(awaited.second.find(name) != std::string::npos, awaited.second);

            auto const adapted = co_await thrown_by(
                locks.async_lock(name, brief, with_diagnostics(asio::use_awaitable)));
            CHECK(adapted.first == error::timeout);
            CHECK(adapted.second == awaited.second);

            // A future's get() throws the same; the call completes on the locker's thread.
            auto future = locks.async_lock(name, brief, with_diagnostics(asio::use_future));
            auto const from_future = co_await off_thread([&] {
                try {
                    future.get();
                } catch (boost::system::system_error const& e) {
                    return std::string(e.what());
                }
                return std::string("no exception");
            });
            CHECK(from_future == awaited.second);

            // A callback bound to a strand: called there, with the exception.
            auto strand = asio::make_strand(co_await asio::this_coro::executor);
            std::optional<std::pair<error_code, std::string>> called;
            bool on_strand = false;
            locks.async_lock(name, brief,
                             with_diagnostics(asio::bind_executor(
                                 strand, [&](std::exception_ptr e, lock_guard g) {
                                     on_strand = strand.running_in_this_thread();
                                     CHECK_FALSE(g.owns());
                                     called = thrown_by(e);
                                 })));
            CHECK(co_await eventually(
                [&]() -> asio::awaitable<bool> { co_return called.has_value(); }, 5s));
            REQUIRE(called);
            CHECK(on_strand);
            CHECK(called->second == awaited.second);

            // The plain form: the code alone, with the category's message.
            auto [plain, none] = co_await locks.async_lock(name, brief, as_tuple);
            CHECK(plain == error::timeout);
            CHECK_FALSE(none.owns());

            CHECK(co_await held.release());
            auto [e, g] = co_await locks.async_lock(
                name, with_diagnostics(asio::as_tuple(asio::use_awaitable)));
            CHECK_FALSE(e);
            CHECK(g.owns());

            // A guard's operations: an extend of a released guard says what the awaitable says.
            CHECK(co_await g.release());
            auto const extend_awaited = co_await thrown_by(g.extend(5s));
            REQUIRE(extend_awaited.first == error::not_held);
            auto const extend_adapted =
                co_await thrown_by(g.async_extend(5s, with_diagnostics(asio::use_awaitable)));
            CHECK(extend_adapted.first == error::not_held);
            CHECK(extend_adapted.second == extend_awaited.second);
            CHECK_MESSAGE(extend_adapted.second.find(name) != std::string::npos,
                          extend_adapted.second);
        });
}

TEST_CASE("with_diagnostics: a semaphore's and an election's async forms fail with their "
          "awaitable forms' exceptions") {
    run_lock_test<one_locker>(
        "diag-family",
        [](redis::connection&, redis::connection& probe, locker& locks,
           std::string const& name) -> asio::awaitable<void> {
            locker other{probe};
            auto const brief = waiting_up_to(lock_options{}, 150ms);

            semaphore theirs{other, name, 1};
            auto permit_held = co_await theirs.co_acquire();
            semaphore sem{locks, name, 1};
            auto const awaited = co_await thrown_by(sem.co_acquire(brief));
            REQUIRE(awaited.first == error::timeout);
            CHECK_MESSAGE(awaited.second.find("semaphore '" + name + "'") != std::string::npos,
                          awaited.second);
            auto const adapted = co_await thrown_by(
                sem.async_acquire(1, brief, with_diagnostics(asio::use_awaitable)));
            CHECK(adapted.first == error::timeout);
            CHECK(adapted.second == awaited.second);

            election their_vote{other, name};
            auto lead = co_await their_vote.co_campaign("them");
            election vote{locks, name};
            auto const campaign_awaited = co_await thrown_by(vote.co_campaign("us", brief));
            REQUIRE(campaign_awaited.first == error::timeout);
            auto const campaign_adapted = co_await thrown_by(
                vote.async_campaign("us", brief, with_diagnostics(asio::use_awaitable)));
            CHECK(campaign_adapted.first == error::timeout);
            CHECK(campaign_adapted.second == campaign_awaited.second);
            CHECK_MESSAGE(campaign_adapted.second.find(name) != std::string::npos,
                          campaign_adapted.second);
            // The plain form keeps only the category's message, which names nothing.
            auto [plain, none] = co_await vote.async_campaign("us", brief, as_tuple);
            CHECK(plain == error::timeout);
            CHECK(plain.message().find(name) == std::string::npos);
            CHECK_FALSE(none.owns());
            CHECK(co_await lead.release());
            CHECK(co_await permit_held.release());
        });
}

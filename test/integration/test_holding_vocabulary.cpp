// Every holding of the family speaks one vocabulary (docs/guide.md, "Every holding, one
// vocabulary"): owns() and operator bool, release() and async_release(), extend() and
// async_extend(), fence(), lost(), loss(), wait_lost() and async_wait_lost(), lease_expiry(),
// token(). The names are checked at compile time for each holding; what is new at run time
// (extending a permit, a read and a write guard, a leadership's own observers) against the
// server; and the lock guard's deprecated 0.1.0 names still do what they did.
#include <colock/election.hpp>
#include <colock/locker.hpp>
#include <colock/multi_lock_guard.hpp>
#include <colock/rw_lock.hpp>
#include <colock/semaphore.hpp>

#include "lock_fixture.hpp"
#include "test_util.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <concepts>
#include <optional>
#include <string>

using namespace colock;
using namespace colock::test;
using namespace std::chrono_literals;

namespace {

// The names every holding has.
template <class H>
concept holding = requires(H& h, H const& c, std::chrono::milliseconds ttl) {
    { c.owns() } -> std::same_as<bool>;
    static_cast<bool>(c);
    { c.lost() } -> std::same_as<bool>;
    { c.loss() } -> std::same_as<std::optional<loss_reason>>;
    { c.lease_expiry() } -> std::same_as<std::chrono::steady_clock::time_point>;
    { c.token() } -> std::same_as<std::string const&>;
    { h.release() } -> std::same_as<asio::awaitable<bool>>;
    h.async_release(asio::deferred);
    { h.wait_lost() } -> std::same_as<asio::awaitable<void>>;
    h.async_wait_lost(asio::deferred);
};
// And those of a holding of one name, with one fence, that can be extended.
template <class H>
concept single_holding = holding<H> && requires(H& h, H const& c, std::chrono::milliseconds ttl) {
    { c.name() } -> std::same_as<std::string const&>;
    { c.fence() } -> std::same_as<std::int64_t>;
    { h.extend(ttl) } -> std::same_as<asio::awaitable<bool>>;
    h.async_extend(ttl, asio::deferred);
};

static_assert(single_holding<lock_guard>);
static_assert(single_holding<permit>);
static_assert(single_holding<read_guard>);
static_assert(single_holding<write_guard>);
static_assert(single_holding<leadership>);
static_assert(holding<multi_lock_guard>);
// A lock set's fences are per name.
static_assert(requires(multi_lock_guard const& g) {
    { g.fence(std::string_view{}) } -> std::same_as<std::int64_t>;
});

// The server's expiry (ms, on its clock) of the holding of `token` in a semaphore's or a
// read-write lock's holdings, `key` + ":h".
asio::awaitable<std::int64_t> holding_expiry(redis::connection& probe, std::string const& key,
                                             std::string const& token) {
    auto const reply = co_await probe.co_exec(command("ZSCORE", key + ":h", token));
    auto const& v = reply.at(0);
    if (v.type == resp3::type::double_type)
        co_return static_cast<std::int64_t>(v.real);
    auto const text = v.as_string();
    REQUIRE_MESSAGE(text, "no holding of " << token << " in " << key << ":h");
    co_return static_cast<std::int64_t>(std::stod(std::string(*text)));
}

// `h`, a permit, read or write guard of `key` held with a 2 s ttl and no renewal: extend() and
// async_extend() move its lease later, locally and at the server; a bad ttl is refused naming
// `what`; once released, both say not_held.
template <class Guard>
asio::awaitable<void> check_extend(Guard& h, redis::connection& probe, std::string const& key,
                                   std::string const& what) {
    REQUIRE(h.owns());
    auto const before_local = h.lease_expiry();
    auto const before_server = co_await holding_expiry(probe, key, h.token());
    CHECK(co_await h.extend(20s));
    CHECK(h.lease_expiry() - before_local > 15s);
    auto const after_server = co_await holding_expiry(probe, key, h.token());
    CHECK_MESSAGE(after_server - before_server > 15000,
                  what << ": the server's expiry moved by " << after_server - before_server);

    auto [ec, extended] = co_await h.async_extend(30s, asio::as_tuple(asio::use_awaitable));
    CHECK_FALSE(ec);
    CHECK(extended);
    CHECK(co_await holding_expiry(probe, key, h.token()) - after_server > 5000);

    try {
        co_await h.extend(0ms);
        FAIL("extend(0 ms) was taken");
    } catch (boost::system::system_error const& e) {
        CHECK(e.code() == error::invalid_argument);
        CHECK_MESSAGE(std::string(e.what()).find(what) != std::string::npos, e.what());
    }
    CHECK_THROWS_AS((void)h.async_extend(0ms, asio::deferred), boost::system::system_error);

    CHECK(co_await h.release());
    CHECK_FALSE(h.owns());
    CHECK_FALSE(static_cast<bool>(h));
    try {
        co_await h.extend(5s);
        FAIL("extend of a released holding was taken");
    } catch (boost::system::system_error const& e) {
        CHECK(e.code() == error::not_held);
    }
    auto [late, late_extended] = co_await h.async_extend(5s, asio::as_tuple(asio::use_awaitable));
    CHECK(late == error::not_held);
    CHECK_FALSE(late_extended);
    auto [waited] = co_await h.async_wait_lost(asio::as_tuple(asio::use_awaitable));
    CHECK(waited == error::not_held);
}

lock_options short_unrenewed() {
    lock_options opt;
    opt.ttl = 2s;
    opt.auto_renew = false;
    return opt;
}

} // namespace

TEST_CASE("vocabulary: a permit, a read guard and a write guard extend their lease, locally and at "
          "the server, and refuse a bad ttl and a released holding") {
    run_lock_test<one_locker>("vocab-extend",
                              [](redis::connection&, redis::connection& probe, locker& locks,
                                 std::string const& name) -> asio::awaitable<void> {
                                  semaphore sem{locks, name, 2};
                                  auto p = co_await sem.co_acquire(short_unrenewed());
                                  CHECK(p);
                                  co_await check_extend(p, probe, "colock:semaphore:{" + name + "}",
                                                        "semaphore '" + name + "'");
                                  CHECK(co_await sem.co_available() == 2);

                                  rw_lock rw{locks, name + "-rw"};
                                  auto w = co_await rw.co_lock(short_unrenewed());
                                  co_await check_extend(w, probe, "colock:rw:{" + name + "-rw}",
                                                        "read-write lock '" + name + "-rw'");
                                  auto r = co_await rw.co_lock_shared(short_unrenewed());
                                  co_await check_extend(r, probe, "colock:rw:{" + name + "-rw}",
                                                        "read-write lock '" + name + "-rw'");
                              });
}

TEST_CASE("vocabulary: a leadership's own observers are its lease's, its fence is its term, and "
          "extend and release go through it") {
    run_lock_test<one_locker>(
        "vocab-lead",
        [](redis::connection&, redis::connection&, locker& locks,
           std::string const& name) -> asio::awaitable<void> {
            election vote{locks, name};
            auto lead = co_await vote.co_campaign("a", short_unrenewed());
            CHECK(lead.owns());
            CHECK(static_cast<bool>(lead));
            CHECK(lead.fence() == lead.term());
            CHECK(lead.fence() > 0);
            CHECK(lead.token() == lead.guard().token());
            CHECK_FALSE(lead.lost());
            CHECK_FALSE(lead.loss());
            auto const before = lead.lease_expiry();
            CHECK(co_await lead.extend(20s));
            CHECK(lead.lease_expiry() - before > 15s);
            auto [ec, extended] =
                co_await lead.async_extend(25s, asio::as_tuple(asio::use_awaitable));
            CHECK_FALSE(ec);
            CHECK(extended);
            auto const who = co_await vote.co_leader();
            REQUIRE(who);
            CHECK(who->term == lead.fence());

            auto [gone, resigned] =
                co_await lead.async_release(asio::as_tuple(asio::use_awaitable));
            CHECK_FALSE(gone);
            CHECK(resigned);
            CHECK_FALSE(lead.owns());
            auto [waited] = co_await lead.async_wait_lost(asio::as_tuple(asio::use_awaitable));
            CHECK(waited == error::not_held);
            CHECK_FALSE(co_await vote.co_leader());
        });
}

// The deprecated names are used here on purpose: they must keep working until they go.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST_CASE("vocabulary: the lock guard's 0.1.0 names, deprecated, still do what owns() and "
          "release() do") {
    run_lock_test<one_locker>("vocab-deprecated",
                              [](redis::connection&, redis::connection& probe, locker& locks,
                                 std::string const& name) -> asio::awaitable<void> {
                                  auto g = co_await locks.co_lock(name);
                                  CHECK(g.owns_lock());
                                  CHECK(g.owns_lock() == g.owns());
                                  CHECK(co_await g.unlock());
                                  CHECK_FALSE(g.owns_lock());
                                  CHECK_FALSE(co_await g.unlock()); // nothing left to give back

                                  auto h = co_await locks.co_lock(name);
                                  auto [ec, released] =
                                      co_await h.async_unlock(asio::as_tuple(asio::use_awaitable));
                                  CHECK_FALSE(ec);
                                  CHECK(released);
                                  CHECK_FALSE(h.owns());
                                  // Free at the server: another locker takes it at once.
                                  locker other{probe};
                                  auto taken = co_await other.co_try_lock(name);
                                  CHECK(taken);
                                  CHECK(co_await taken->release());
                              });
}
#pragma GCC diagnostic pop

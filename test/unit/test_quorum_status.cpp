// What a Redlock quorum reports without a server: the state in a lock's value, the state a
// majority of primaries shares, a forced unlock over the primaries, why a round had no majority,
// and the refusal of one server counted twice.
#include "lock/quorum/quorum_errors.hpp"
#include "lock/quorum/quorum_status.hpp"

#include "failed_reply.hpp"
#include "primary_endpoints.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/error.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace colock::detail::redlock;
using boost::system::error_code;
using colock::detail::forced_unlock_result;
using colock::detail::lock_reading;
using colock::test::endpoints;

namespace {

lock_reading value(std::string v, std::int64_t pttl = 1000, std::int64_t queued = 0) {
    lock_reading r;
    r.value = std::move(v);
    r.pttl = pttl;
    r.queued = queued;
    return r;
}

lock_reading failed_reading(error_code ec, std::string text = {}) {
    return colock::test::failed_reply<lock_reading>(ec, std::move(text));
}

forced_unlock_result ended(std::string owner, std::string token) {
    forced_unlock_result r;
    r.ended = true;
    r.owner = std::move(owner);
    r.token = std::move(token);
    return r;
}

forced_unlock_result unlock_failed(error_code ec, std::string text) {
    forced_unlock_result r;
    r.ec = ec;
    r.server_text = std::move(text);
    return r;
}

} // namespace

TEST_CASE("quorum status: the state in a lock's value, and values that are no lock's") {
    auto const held = state_of(value("H 42 locker-a tok-1 1700000000000 0"));
    REQUIRE(held);
    CHECK(held->kind == 'H');
    CHECK(held->fence == 42);
    CHECK(held->holder == "tok-1");
    auto const handed = state_of(value("R 43 locker-b"));
    REQUIRE(handed);
    CHECK(handed->kind == 'R');
    CHECK(handed->holder == "locker-b");
    auto const free = state_of(value("F 44"));
    REQUIRE(free);
    CHECK(free->kind == 'F');
    CHECK(free->fence == 44);
    CHECK(free->holder.empty());
    for (char const* foreign : {"", "hello", "H 42 locker-a tok-1", "R 43", "F 44 extra", "F -1",
                                "F 4x", "F ", "X 1", "F 99999999999999999999"})
        CHECK_MESSAGE(!state_of(value(foreign)), foreign);
}

TEST_CASE("quorum status: the state a majority shares, with its largest fence and queue") {
    std::vector<lock_reading> const readings{value("H 7 o tok 1 0", 900, 1),
                                             value("H 9 o tok 1 0", 800, 3),
                                             value("H 12 o other 1 0", 700, 0)};
    auto const r = shared_reading(readings);
    CHECK_FALSE(r.ec);
    CHECK(r.value == "H 9 o tok 1 0");
    CHECK(r.pttl == 800);
    CHECK(r.queued == 3);

    // Handed to one locker on a majority, the third primary down.
    std::vector<lock_reading> const handed{value("R 5 locker-b", 100),
                                           failed_reading(colock::redis::error::connection_lost),
                                           value("R 6 locker-b", 200)};
    CHECK(shared_reading(handed).value == "R 6 locker-b");
}

TEST_CASE("quorum status: no majority in one state reads free, with the largest fence kept") {
    std::vector<lock_reading> const split{value("H 7 o tok-a 1 0", 900), value("F 11", 300),
                                          value("H 8 o tok-b 1 0", 800)};
    auto const r = shared_reading(split);
    CHECK_FALSE(r.ec);
    CHECK(r.value == "F 11");
    CHECK(r.pttl == 300);

    // Nothing on any primary: free, no value.
    std::vector<lock_reading> const empty{value("", -2), value("", -2), value("", -2)};
    CHECK(shared_reading(empty).value.empty());

    // A value that is no lock's is shown as it is when no majority state stands.
    std::vector<lock_reading> const foreign{value("H 7 o tok-a 1 0"), value("junk", 50),
                                            value("", -2)};
    CHECK(shared_reading(foreign).value == "junk");
    CHECK(shared_reading(foreign).pttl == 50);
}

TEST_CASE("quorum status: too few readings fail, lasting errors as they are") {
    std::vector<lock_reading> const passing{failed_reading(colock::redis::error::connection_lost),
                                            value("H 7 o tok 1 0"),
                                            failed_reading(colock::error::no_quorum, "no answer")};
    auto const r = shared_reading(passing);
    CHECK(r.ec == colock::error::no_quorum);
    CHECK(r.value.empty());

    std::vector<lock_reading> const lasting{
        value("H 7 o tok 1 0"), failed_reading(colock::redis::error::server_error, "NOPERM no"),
        failed_reading(colock::redis::error::server_error, "NOPERM no")};
    auto const l = shared_reading(lasting);
    CHECK(l.ec == colock::redis::error::server_error);
    CHECK(l.server_text == "NOPERM no");
}

TEST_CASE("quorum status: a forced unlock ends the lease where a majority answered") {
    std::vector<forced_unlock_result> const one_down{
        unlock_failed(colock::redis::error::connection_lost, ""), forced_unlock_result{},
        ended("locker-a", "tok-1")};
    auto const r = shared_forced_unlock(one_down, endpoints);
    CHECK_FALSE(r.ec);
    CHECK(r.server_text.empty());
    CHECK(r.ended);
    CHECK(r.owner == "locker-a");
    CHECK(r.token == "tok-1");

    std::vector<forced_unlock_result> const two_down{
        ended("locker-a", "tok-1"), unlock_failed(colock::redis::error::server_error, "NOPERM x"),
        unlock_failed(colock::redis::error::connection_lost, "")};
    auto const f = shared_forced_unlock(two_down, endpoints);
    CHECK(f.ec == colock::redis::error::server_error);
    CHECK(f.server_text.starts_with("primary b:2: "));
    CHECK(f.server_text.ends_with(": NOPERM x"));
    CHECK(f.ended); // ended where it could be
}

TEST_CASE("quorum errors: a round without a majority, summarised") {
    using colock::redis::error::server_error;
    // A lasting error wins, named by its primary.
    std::vector<primary_error> const lasting{
        {}, {colock::redis::error::connection_lost, ""}, {server_error, "NOPERM not allowed"}};
    auto const l = summarise(lasting, endpoints);
    CHECK(l.first == server_error);
    CHECK(l.second == "primary c:3: " + describe(server_error, "NOPERM not allowed"));

    // Only connect failures: the first of them, with every primary's account.
    error_code const refused = boost::asio::error::connection_refused;
    std::vector<primary_error> const unreachable{
        {refused, ""}, {colock::redis::error::connect_timeout, ""}, {}};
    auto const c = summarise(unreachable, endpoints);
    CHECK(c.first == refused);
    CHECK(c.second.starts_with("primary a:1: "));
    CHECK(c.second.find("; primary b:2: ") != std::string::npos);

    // Otherwise no majority: no_quorum's own text as it is, the aborted left out.
    std::vector<primary_error> const silent{{colock::error::no_quorum, "no answer in time"},
                                            {boost::asio::error::operation_aborted, ""},
                                            {colock::redis::error::connection_lost, ""}};
    auto const q = summarise(silent, endpoints);
    CHECK(q.first == colock::error::no_quorum);
    CHECK(q.second == "fewer than 2 of 3 Redlock primaries answered: primary a:1: no answer in "
                      "time; primary c:3: " +
                          describe(colock::redis::error::connection_lost, ""));
}

TEST_CASE("quorum errors: texts, lasting errors, and one server counted twice") {
    error_code const lost = colock::redis::error::connection_lost;
    CHECK(describe(lost, "") == lost.message());
    CHECK(describe(lost, "why") == lost.message() + ": why");
    CHECK(is_lasting(colock::redis::error::server_error, "NOPERM no"));
    CHECK_FALSE(is_lasting(colock::redis::error::server_error, "LOADING wait"));
    CHECK_FALSE(is_lasting(lost, ""));
    CHECK_FALSE(is_lasting(boost::asio::error::connection_refused, ""));
    CHECK_FALSE(is_lasting(boost::asio::error::operation_aborted, ""));
    CHECK_FALSE(is_lasting(error_code(), ""));

    std::vector<std::string> const unknown{"", "", ""};
    CHECK_FALSE(refusal_of(unknown));
    std::vector<std::string> const distinct{"r1", "r2", "r3"};
    CHECK_FALSE(refusal_of(distinct));
    std::vector<std::string> const twice{"r1", "", "r1"};
    auto const refusal = refusal_of(twice);
    REQUIRE(refusal);
    CHECK(refusal->find("primaries 1 and 3 are the same server (run_id r1)") != std::string::npos);
}

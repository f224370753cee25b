// Edges where a value from outside (a user's name or prefix, a server's number, a foreign
// record) once went wrong: a name or prefix whose hash tag is empty split a lock's keys over
// Cluster slots, a number with both signs was read, a length near 2^64 wrapped round, a huge
// time overflowed into the past. Each is refused or clamped now.
#include "lock/base/errors.hpp"
#include "lock/core/holder_record.hpp"
#include "lock/quorum/quorum.hpp"
#include "lock/store/lease_store.hpp"
#include "redis/cluster_slots.hpp"

#include <colock/error.hpp>
#include <colock/lock_options.hpp>
#include <colock/resp3/error.hpp>
#include <colock/resp3/parser.hpp>

#include <boost/system/system_error.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <string>

namespace hostile_edges {

using colock::redis::detail::hash_slot;

// The invalid_argument text a call throws, or an empty string.
template <class F>
std::string refusal_of_call(F f) {
    try {
        f();
    } catch (boost::system::system_error const& e) {
        CHECK(e.code() == colock::error::invalid_argument);
        return e.what();
    }
    return {};
}

} // namespace hostile_edges

TEST_CASE("hostile edges: a name starting with '}' is refused, naming it and why; other braces "
          "keep every key of the name in one slot") {
    using namespace hostile_edges;
    for (std::string const name : {"}x", "}", "}{a}"}) {
        CAPTURE(name);
        auto const why = refusal_of_call([&] { colock::validate(name, {}); });
        CHECK(why.find("starts with '}'") != std::string::npos);
        CHECK(why.find("slots") != std::string::npos);
    }
    for (std::string const name : {"a}b", "{x}", "x{", "a{}b", "{", "{}"}) {
        CAPTURE(name);
        CHECK_NOTHROW(colock::validate(name, {}));
        colock::detail::lock_keys const k("colock:", name, "locker-1");
        CHECK(hash_slot(k.queue_key) == hash_slot(k.key));
        CHECK(hash_slot(k.deadlines_key) == hash_slot(k.key));
        CHECK(hash_slot(k.channel) == hash_slot(k.key));
    }
}

TEST_CASE("hostile edges: a key prefix whose first '{' closes at once is refused; other prefixes "
          "keep a name's keys in one slot") {
    using namespace hostile_edges;
    auto const why = refusal_of_call([] { colock::detail::validate_key_prefix("app{}:"); });
    CHECK(why.find("app{}:") != std::string::npos);
    CHECK(why.find("empty hash tag") != std::string::npos);
    for (std::string const prefix : {"colock:", "app{x}:", "app{", "app}{", "a{b}{}:", ""}) {
        CAPTURE(prefix);
        CHECK_NOTHROW(colock::detail::validate_key_prefix(prefix));
        colock::detail::lock_keys const k(prefix, "orders", "locker-1");
        CHECK(hash_slot(k.queue_key) == hash_slot(k.key));
        CHECK(hash_slot(k.channel) == hash_slot(k.key));
    }
}

TEST_CASE("hostile edges: a holder record's start beyond what the clock holds is clamped, not "
          "wrapped round") {
    using std::chrono::system_clock;
    auto const huge = colock::detail::read_holder({{"started", "9223372036854775807"}});
    CHECK(huge.started >= system_clock::time_point{});
    CHECK(huge.started > system_clock::now());
    auto const negative = colock::detail::read_holder({{"started", "-9223372036854775807"}});
    // Far before 1970, not wrapped into the future.
    CHECK(negative.started < system_clock::time_point{} - std::chrono::hours(24 * 365 * 100));
    auto const plain = colock::detail::read_holder({{"started", "1000"}});
    CHECK(plain.started == system_clock::time_point{} + std::chrono::seconds(1));
}

TEST_CASE("hostile edges: a RESP3 number or big number with both signs is refused") {
    boost::system::error_code ec;
    colock::resp3::parser number;
    number.consume(":+-1\r\n", ec);
    CHECK(ec == colock::resp3::error::invalid_number);
    colock::resp3::parser big;
    big.consume("(+-12\r\n", ec);
    CHECK(ec == colock::resp3::error::invalid_big_number);
    // One sign is still a number.
    for (std::string const text : {":+7\r\n", ":-7\r\n", "(+12\r\n", "(-12\r\n"}) {
        CAPTURE(text);
        colock::resp3::parser p;
        boost::system::error_code one;
        p.consume(text, one);
        CHECK_FALSE(one);
    }
}

TEST_CASE("hostile edges: a bulk length near 2^64 in a pipeline is refused, not wrapped") {
    using colock::redis::detail::split_commands;
    CHECK_FALSE(split_commands("*1\r\n$18446744073709551615\r\nPING\r\n"));
    CHECK_FALSE(split_commands("*1\r\n$18446744073709551614\r\nPING\r\n"));
    auto const ok = split_commands("*1\r\n$4\r\nPING\r\n");
    REQUIRE(ok);
    CHECK(ok->at(0).at(0) == "PING");
}

TEST_CASE("hostile edges: a Redlock grant's validity saturates for any elapsed time") {
    using std::chrono::milliseconds;
    namespace quorum = colock::detail::quorum;
    CHECK(quorum::validity(milliseconds(1000), milliseconds::max()) == milliseconds(0));
    CHECK(quorum::validity(milliseconds::max(), milliseconds::max()) == milliseconds(0));
    CHECK(quorum::validity(milliseconds(1000), milliseconds(0)) > milliseconds(900));
    CHECK(quorum::validity(milliseconds(1000), milliseconds(-5)) ==
          quorum::validity(milliseconds(1000), milliseconds(0)));
}

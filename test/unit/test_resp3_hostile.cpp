// The RESP3 parser against input a hostile or broken peer could send, beyond test_resp3_parser.cpp:
// lengths past 64 bits, nesting at the default bound, lines at the default bound, numbers at the
// edges of their grammar, and attributes that must not outlive the value they describe.
#include "resp3_parse_checks.hpp"

#include <colock/resp3/error.hpp>
#include <colock/resp3/parser.hpp>
#include <colock/resp3/value.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace resp3_hostile_test {

using boost::system::error_code;
using colock::resp3::error;
using colock::resp3::parser;
using colock::resp3::parser_limits;
using colock::resp3::type;
using colock::resp3::value;

// The error of `input` fed whole to a fresh parser, and (when short: each byte rescans the
// buffer) the same fed one byte at a time.
error_code failure_of(std::string_view input, parser_limits limits = {}) {
    parser whole{limits};
    error_code ec;
    CHECK(whole.consume(input, ec) == 0);
    CHECK_FALSE(whole.done());
    if (input.size() > 1024)
        return ec;

    parser bytewise{limits};
    std::string buffer;
    error_code split_ec;
    for (char c : input) {
        buffer += c;
        std::size_t const n = bytewise.consume(buffer, split_ec);
        if (split_ec)
            break;
        buffer.erase(0, n);
        if (bytewise.done())
            (void)bytewise.release();
    }
    INFO(input);
    CHECK(split_ec == ec);
    return ec;
}

// The one value `input` holds, all of it consumed.
using colock::test::resp3_parse_checks::parse_one;

// Each input fails with `expected`, fed whole and byte by byte.
void check_failures(error expected, std::initializer_list<std::string> inputs) {
    for (std::string const& input : inputs) {
        CAPTURE(input);
        CHECK(failure_of(input) == expected);
    }
}

std::string nested_arrays(std::size_t depth) {
    std::string out;
    for (std::size_t i = 0; i < depth; ++i)
        out += "*1\r\n";
    return out + ":1\r\n";
}

TEST_CASE("resp3 hostile: a length past 64 bits is no number, whatever it would wrap to") {
    // 2^64 + 3 would wrap to 3, a length the bytes after it satisfy.
    check_failures(error::invalid_number,
                   {"$18446744073709551619\r\nabc\r\n", "*18446744073709551617\r\n:1\r\n",
                    "%9223372036854775808\r\n", "$-9223372036854775809\r\n"});
}

TEST_CASE("resp3 hostile: the largest 64-bit length declared is refused by the limits before "
          "anything is allocated") {
    check_failures(error::blob_too_long, {"=9223372036854775807\r\n", "!9223372036854775807\r\n"});
    check_failures(
        error::aggregate_too_large,
        {"~9223372036854775807\r\n", ">9223372036854775807\r\n",
         // A map's declared pairs would double past 2^63: refused before they are doubled.
         "|9223372036854775807\r\n", "%4611686018427387904\r\n"});
}

TEST_CASE("resp3 hostile: nesting is bounded at 64 by default, aggregates of every kind "
          "counted") {
    CHECK(parse_one(nested_arrays(64)).type == type::array);
    CHECK(failure_of(nested_arrays(65)) == error::nesting_too_deep);
    std::string mixed;
    for (int i = 0; i < 16; ++i)
        mixed += "%1\r\n+k\r\n~1\r\n>1\r\n*1\r\n";
    mixed += "|1\r\n"; // the 65th aggregate
    CHECK(failure_of(mixed) == error::nesting_too_deep);
}

TEST_CASE("resp3 hostile: a line is bounded at 64 KiB by default, digits included") {
    std::string const at_limit(64 * 1024, 'a');
    CHECK(parse_one("+" + at_limit + "\r\n").text == at_limit);
    check_failures(error::line_too_long,
                   {"+" + at_limit + "a\r\n",
                    // A number of 65537 digits is refused for its length, not read.
                    ":" + std::string(64 * 1024 + 1, '1') + "\r\n",
                    "*" + std::string(64 * 1024 + 1, '0')});
}

TEST_CASE("resp3 hostile: a declared aggregate far larger than what follows fails on its first "
          "bad element, not by allocating") {
    CHECK(failure_of("*16777216\r\n:1\r\n:2\r\n#x\r\n") == error::invalid_boolean);
    CHECK(failure_of("%16777216\r\n+k\r\n@") == error::invalid_type_byte);
}

TEST_CASE("resp3 hostile: leading zeros in a length are the same length") {
    CHECK(parse_one("*002\r\n:1\r\n:2\r\n").elements.size() == 2);
    CHECK(parse_one("%01\r\n+a\r\n+b\r\n").elements.size() == 2);
    CHECK(parse_one("=0004\r\ntxt:\r\n").verbatim_format == "txt");
}

TEST_CASE("resp3 hostile: a double's grammar at its edges") {
    value const negative_zero = parse_one(",-0\r\n");
    CHECK(negative_zero.real == 0.0);
    CHECK(std::signbit(negative_zero.real));
    CHECK(std::isinf(parse_one(",+inf\r\n").real));
    CHECK(std::isnan(parse_one(",-nan\r\n").real));
    CHECK(parse_one(",1E5\r\n").real == 100000.0);
    // Too small to be represented: refused like one too large, not read as 0.
    check_failures(error::invalid_double,
                   {",1e-400\r\n", ",Inf\r\n", ",1.5.2\r\n", ", 1\r\n", ",0x10\r\n", ",--1\r\n"});
}

TEST_CASE("resp3 hostile: booleans, nulls and big numbers take their exact spelling only") {
    check_failures(error::invalid_boolean, {"#T\r\n", "#1\r\n"});
    CHECK(failure_of("_ \r\n") == error::invalid_null);
    check_failures(error::invalid_big_number, {"(+\r\n", "(--1\r\n", "( 1\r\n"});
    CHECK(parse_one("(-0\r\n").text == "-0");
    CHECK(parse_one("(007\r\n").text == "007");
}

TEST_CASE("resp3 hostile: line contents are bytes: a NUL, a lone CR-less LF and high bytes") {
    using namespace std::string_view_literals;
    CHECK(parse_one("+a\0b\r\n"sv).text == "a\0b"sv);
    CHECK(parse_one("-\r\n").type == type::simple_error);
    CHECK(parse_one("-\r\n").text.empty());
    CHECK(parse_one("+\xff\xfe\n\r\n").text == "\xff\xfe\n");
}

TEST_CASE("resp3 hostile: an attribute stays with its value: the next top-level value has none") {
    parser p;
    error_code ec;
    std::string_view const in = "|1\r\n+a\r\n+b\r\n:1\r\n:2\r\n";
    std::size_t const first = p.consume(in, ec);
    REQUIRE(p.done());
    value const described = p.release();
    REQUIRE(described.attributes);
    CHECK(described.attributes->size() == 2);
    CHECK(p.consume(in.substr(first), ec) == 4);
    REQUIRE(p.done());
    value const plain = p.release();
    CHECK(plain.integer == 2);
    CHECK_FALSE(plain.attributes);
}

TEST_CASE("resp3 hostile: an attribute pending when the parser is reset is forgotten") {
    parser p;
    error_code ec;
    CHECK(p.consume("|1\r\n+a\r\n+b\r\n", ec) == 12);
    CHECK_FALSE(p.done());
    p.reset();
    CHECK(p.consume(":3\r\n", ec) == 4);
    REQUIRE(p.done());
    CHECK_FALSE(p.release().attributes);
}

TEST_CASE("resp3 hostile: a map whose last value has not come waits, then completes") {
    parser p;
    error_code ec;
    CHECK(p.consume("%2\r\n+a\r\n:1\r\n+b\r\n", ec) == 16);
    CHECK_FALSE(ec);
    CHECK_FALSE(p.done());
    CHECK(p.consume(":2\r\n", ec) == 4);
    REQUIRE(p.done());
    value const m = p.release();
    CHECK(m.type == type::map);
    REQUIRE(m.elements.size() == 4);
    CHECK(m.elements[3].integer == 2);
}

TEST_CASE("resp3 hostile: a push inside a reply, and pushes between replies, split at every "
          "byte") {
    std::string_view const stream = ">2\r\n+invalidate\r\n*1\r\n$1\r\nk\r\n"
                                    "*2\r\n>1\r\n+x\r\n:5\r\n"
                                    "|1\r\n+ttl\r\n:3\r\n>1\r\n+p\r\n";
    for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
        CAPTURE(cut);
        parser p;
        std::string buffer;
        std::vector<value> got;
        for (std::string_view part : {stream.substr(0, cut), stream.substr(cut)}) {
            buffer += part;
            for (;;) {
                error_code ec;
                std::size_t const n = p.consume(buffer, ec);
                REQUIRE_FALSE(ec);
                buffer.erase(0, n);
                if (!p.done())
                    break;
                got.push_back(p.release());
            }
        }
        REQUIRE(got.size() == 3);
        CHECK(got[0].type == type::push);
        CHECK(got[0].elements[1].elements[0].text == "k");
        CHECK(got[1].type == type::array);
        CHECK(got[1].elements[0].type == type::push);
        CHECK(got[1].elements[1].integer == 5);
        CHECK(got[2].type == type::push);
        REQUIRE(got[2].attributes);
        CHECK(got[2].attributes->size() == 2);
        CHECK(buffer.empty());
    }
}

} // namespace resp3_hostile_test

// The RESP3 parser byte for byte: every type, every error, every limit, and the same results
// whatever the split of the input.
#include "resp3_parse_checks.hpp"

#include <colock/resp3/error.hpp>
#include <colock/resp3/parser.hpp>
#include <colock/resp3/type.hpp>
#include <colock/resp3/value.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace resp3 = colock::resp3;
using boost::system::error_code;
using resp3::error;
using resp3::parser;
using resp3::parser_limits;
using resp3::type;
using resp3::value;
using namespace std::string_view_literals;

namespace {

// ---- building expected values ----

value str(type t, std::string_view text) {
    value v;
    v.type = t;
    v.text = text;
    return v;
}
value simple(std::string_view s) {
    return str(type::simple_string, s);
}
value blob(std::string_view s) {
    return str(type::blob_string, s);
}
value num(std::int64_t n) {
    value v;
    v.type = type::number;
    v.integer = n;
    return v;
}
value dbl(double d) {
    value v;
    v.type = type::double_type;
    v.real = d;
    return v;
}
value boolean(bool b) {
    value v;
    v.type = type::boolean;
    v.boolean = b;
    return v;
}
value null() {
    return value{};
}
value verbatim(std::string_view format, std::string_view text) {
    value v = str(type::verbatim_string, text);
    v.verbatim_format = format;
    return v;
}
value agg(type t, std::initializer_list<value> children) {
    value v;
    v.type = t;
    v.elements = children;
    return v;
}
value with_attrs(value v, std::initializer_list<value> attrs) {
    v.attributes = std::make_shared<std::vector<value>>(attrs);
    return v;
}

// ---- feeding the parser ----

struct outcome {
    std::vector<value> values;
    error_code ec;
    // Bytes buffered but not consumed at the end; not kept after an error, which is found as
    // soon as the bytes that show it arrive, whatever follows them.
    std::size_t leftover = 0;

    friend bool operator==(outcome const&, outcome const&) = default;
};

std::string describe(outcome const& o) {
    std::string s;
    for (auto const& v : o.values)
        s += to_debug_string(v) + "\n";
    s += "ec=" + o.ec.message() + " leftover=" + std::to_string(o.leftover);
    return s;
}

// Feeds the chunks in order, as a connection would: keep what was not consumed, append the
// next chunk, and call again.
outcome feed(std::vector<std::string_view> const& chunks, parser_limits limits = {}) {
    parser p{limits};
    outcome out;
    std::string buf;
    for (auto chunk : chunks) {
        buf += chunk;
        for (;;) {
            error_code ec;
            std::size_t const n = p.consume(buf, ec);
            REQUIRE(n <= buf.size());
            if (ec) {
                CHECK(n == 0);
                out.ec = ec;
                // Failed for good: the same error again, nothing consumed.
                error_code again;
                CHECK(p.consume(buf, again) == 0);
                CHECK(again == ec);
                return out;
            }
            buf.erase(0, n);
            if (!p.done())
                break;
            out.values.push_back(p.release());
        }
    }
    out.leftover = buf.size();
    return out;
}

outcome parse_whole(std::string_view s, parser_limits limits = {}) {
    return feed({s}, limits);
}

// One complete value that uses the whole input.
using colock::test::resp3_parse_checks::parse_one;

// The error the input produces, fed whole and byte by byte.
error_code parse_error(std::string_view s, parser_limits limits = {}) {
    outcome const whole = parse_whole(s, limits);
    std::vector<std::string_view> bytes;
    for (std::size_t i = 0; i < s.size(); ++i)
        bytes.push_back(s.substr(i, 1));
    outcome const split = feed(bytes, limits);
    INFO(s);
    CHECK(whole.ec == split.ec);
    return whole.ec;
}

// A fresh parser fed `bytes` takes `consumed` of them and waits for the rest: no error, no value.
void check_waits_for_more(std::string_view bytes, std::size_t consumed) {
    parser p;
    error_code ec;
    CHECK(p.consume(bytes, ec) == consumed);
    CHECK_FALSE(ec);
    CHECK_FALSE(p.done());
}

} // namespace

TEST_SUITE("resp3.parser") {

    TEST_CASE("simple string, simple error") {
        CHECK(parse_one("+OK\r\n") == simple("OK"));
        CHECK(parse_one("+\r\n") == simple(""));
        CHECK(parse_one("-ERR unknown command\r\n") ==
              str(type::simple_error, "ERR unknown command"));
        CHECK(parse_one("-ERR unknown command\r\n").is_error());
        // A lone '\n' is content; only "\r\n" ends a line.
        CHECK(parse_one("+a\nb\r\n") == simple("a\nb"));
    }

    TEST_CASE("blob string, blob error") {
        CHECK(parse_one("$3\r\nabc\r\n") == blob("abc"));
        CHECK(parse_one("$0\r\n\r\n") == blob(""));
        CHECK(parse_one("$4\r\n\r\n\r\n\r\n") == blob("\r\n\r\n"));
        CHECK(parse_one("$3\r\na\0b\r\n"sv) == blob("a\0b"sv));
        CHECK(parse_one("$003\r\nabc\r\n") == blob("abc"));
        CHECK(parse_one("!21\r\nSYNTAX invalid syntax\r\n") ==
              str(type::blob_error, "SYNTAX invalid syntax"));
        CHECK(parse_one("!0\r\n\r\n") == str(type::blob_error, ""));
        std::string const big(70000, 'z');
        CHECK(parse_one("$70000\r\n" + big + "\r\n") == blob(big));
    }

    TEST_CASE("number") {
        CHECK(parse_one(":1\r\n") == num(1));
        CHECK(parse_one(":0\r\n") == num(0));
        CHECK(parse_one(":-1\r\n") == num(-1));
        CHECK(parse_one(":+17\r\n") == num(17));
        CHECK(parse_one(":9223372036854775807\r\n") ==
              num(std::numeric_limits<std::int64_t>::max()));
        CHECK(parse_one(":-9223372036854775808\r\n") ==
              num(std::numeric_limits<std::int64_t>::min()));
    }

    TEST_CASE("double") {
        CHECK(parse_one(",1.5\r\n") == dbl(1.5));
        CHECK(parse_one(",1.5e3\r\n") == dbl(1500.0));
        CHECK(parse_one(",1.5E-3\r\n") == dbl(0.0015));
        CHECK(parse_one(",-2\r\n") == dbl(-2.0));
        CHECK(parse_one(",+2.25\r\n") == dbl(2.25));
        CHECK(parse_one(",10e+2\r\n") == dbl(1000.0));
        CHECK(parse_one(",0\r\n") == dbl(0.0));
        value const inf = parse_one(",inf\r\n");
        CHECK(std::isinf(inf.real));
        CHECK(inf.real > 0);
        value const ninf = parse_one(",-inf\r\n");
        CHECK(std::isinf(ninf.real));
        CHECK(ninf.real < 0);
        CHECK(std::isnan(parse_one(",nan\r\n").real));
        CHECK(parse_one(",nan\r\n") == dbl(std::numeric_limits<double>::quiet_NaN()));
        CHECK(parse_one(",nan\r\n").type == type::double_type);
    }

    TEST_CASE("big number") {
        CHECK(parse_one("(3492890328409238509324850943850943825024385\r\n") ==
              str(type::big_number, "3492890328409238509324850943850943825024385"));
        CHECK(parse_one("(-3492890328409238509324850943850943825024385\r\n") ==
              str(type::big_number, "-3492890328409238509324850943850943825024385"));
        CHECK(parse_one("(+12\r\n") == str(type::big_number, "12"));
        CHECK(parse_one("(0\r\n") == str(type::big_number, "0"));
    }

    TEST_CASE("boolean and null") {
        CHECK(parse_one("#t\r\n") == boolean(true));
        CHECK(parse_one("#f\r\n") == boolean(false));
        CHECK(parse_one("_\r\n") == null());
        CHECK(parse_one("_\r\n").is_null());
    }

    TEST_CASE("RESP2 nulls are nulls") {
        CHECK(parse_one("$-1\r\n") == null());
        CHECK(parse_one("*-1\r\n") == null());
        CHECK(parse_one("*2\r\n$-1\r\n*-1\r\n") == agg(type::array, {null(), null()}));
    }

    TEST_CASE("verbatim string") {
        CHECK(parse_one("=15\r\ntxt:Some string\r\n") == verbatim("txt", "Some string"));
        CHECK(parse_one("=4\r\ntxt:\r\n") == verbatim("txt", ""));
        CHECK(parse_one("=8\r\nmkd:a\r\nb\r\n") == verbatim("mkd", "a\r\nb"));
        CHECK(parse_one("=4\r\ntxt:\r\n") != verbatim("mkd", ""));
    }

    TEST_CASE("aggregates") {
        CHECK(parse_one("*2\r\n:1\r\n+two\r\n") == agg(type::array, {num(1), simple("two")}));
        CHECK(parse_one("~2\r\n:1\r\n:2\r\n") == agg(type::set, {num(1), num(2)}));
        CHECK(parse_one("%2\r\n+a\r\n:1\r\n+b\r\n:2\r\n") ==
              agg(type::map, {simple("a"), num(1), simple("b"), num(2)}));
        CHECK(parse_one(">3\r\n+message\r\n+chan\r\n$2\r\nhi\r\n") ==
              agg(type::push, {simple("message"), simple("chan"), blob("hi")}));
    }

    TEST_CASE("zero-length aggregates") {
        CHECK(parse_one("*0\r\n") == agg(type::array, {}));
        CHECK(parse_one("%0\r\n") == agg(type::map, {}));
        CHECK(parse_one("~0\r\n") == agg(type::set, {}));
        CHECK(parse_one(">0\r\n") == agg(type::push, {}));
        CHECK(parse_one("*3\r\n*0\r\n%0\r\n*0\r\n") ==
              agg(type::array, {agg(type::array, {}), agg(type::map, {}), agg(type::array, {})}));
        CHECK(parse_one("*0\r\n") != agg(type::set, {}));
    }

    TEST_CASE("nested aggregates") {
        CHECK(parse_one("%2\r\n+a\r\n%1\r\n+x\r\n*2\r\n:1\r\n:2\r\n+b\r\n~1\r\n#t\r\n") ==
              agg(type::map,
                  {simple("a"), agg(type::map, {simple("x"), agg(type::array, {num(1), num(2)})}),
                   simple("b"), agg(type::set, {boolean(true)})}));
        CHECK(
            parse_one("*1\r\n*1\r\n*1\r\n*1\r\n:7\r\n") ==
            agg(type::array, {agg(type::array, {agg(type::array, {agg(type::array, {num(7)})})})}));
        // A map key may be an aggregate.
        CHECK(parse_one("%1\r\n*1\r\n:1\r\n+v\r\n") ==
              agg(type::map, {agg(type::array, {num(1)}), simple("v")}));
    }

    TEST_CASE("an attribute is attached to the value after it") {
        value const v = parse_one("|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.1923\r\n:42\r\n");
        CHECK(v == with_attrs(num(42), {simple("key-popularity"),
                                        agg(type::map, {blob("a"), dbl(0.1923)})}));
        REQUIRE(v.attributes);
        CHECK(v.attributes->size() == 2);

        // Inside an aggregate: the attribute is not an element and does not count as one.
        CHECK(parse_one("*2\r\n:1\r\n|1\r\n+ttl\r\n:3\r\n:2\r\n") ==
              agg(type::array, {num(1), with_attrs(num(2), {simple("ttl"), num(3)})}));
        // Before an aggregate.
        CHECK(parse_one("|1\r\n+a\r\n+b\r\n*1\r\n:1\r\n") ==
              with_attrs(agg(type::array, {num(1)}), {simple("a"), simple("b")}));
        // Before a child of an aggregate that itself has one.
        CHECK(parse_one("|1\r\n+o\r\n+p\r\n*1\r\n|1\r\n+i\r\n+j\r\n:1\r\n") ==
              with_attrs(agg(type::array, {with_attrs(num(1), {simple("i"), simple("j")})}),
                         {simple("o"), simple("p")}));
        // Two attributes in a row describe the same value.
        CHECK(parse_one("|1\r\n+a\r\n:1\r\n|1\r\n+b\r\n:2\r\n+v\r\n") ==
              with_attrs(simple("v"), {simple("a"), num(1), simple("b"), num(2)}));
        // An attribute inside an attribute describes the key after it.
        CHECK(
            parse_one("|1\r\n|1\r\n+m\r\n+n\r\n+k\r\n+v\r\n:0\r\n") ==
            with_attrs(num(0), {with_attrs(simple("k"), {simple("m"), simple("n")}), simple("v")}));
        // An empty attribute.
        value const e = parse_one("|0\r\n:5\r\n");
        CHECK(e == num(5));
        CHECK(e.attributes);
        // Attributes matter for equality.
        CHECK(parse_one("|1\r\n+a\r\n+b\r\n:1\r\n") != num(1));
    }

    TEST_CASE("an attribute alone is no value") {
        parser p;
        error_code ec;
        std::string_view const in = "|1\r\n+a\r\n+b\r\n";
        CHECK(p.consume(in, ec) == in.size());
        CHECK_FALSE(ec);
        CHECK_FALSE(p.done());
        CHECK(p.consume(":1\r\n", ec) == 4);
        REQUIRE(p.done());
        CHECK(p.release() == with_attrs(num(1), {simple("a"), simple("b")}));
    }

    TEST_CASE("pipelined values: consume stops after each one") {
        parser p;
        error_code ec;
        std::string_view in = "+OK\r\n:1\r\n*1\r\n$1\r\nx\r\n_\r\n";
        CHECK(p.consume(in, ec) == 5);
        REQUIRE(p.done());
        // While a value waits to be released nothing more is consumed.
        CHECK(p.consume(in.substr(5), ec) == 0);
        CHECK_FALSE(ec);
        CHECK(p.release() == simple("OK"));
        in.remove_prefix(5);
        CHECK(p.consume(in, ec) == 4);
        CHECK(p.release() == num(1));
        in.remove_prefix(4);
        CHECK(p.consume(in, ec) == 11);
        CHECK(p.release() == agg(type::array, {blob("x")}));
        in.remove_prefix(11);
        CHECK(p.consume(in, ec) == 3);
        CHECK(p.release() == null());
        CHECK(p.consume("", ec) == 0);
        CHECK_FALSE(p.done());
        CHECK_FALSE(ec);
    }

    TEST_CASE("incomplete tokens are not consumed") {
        parser p;
        error_code ec;
        for (std::string_view partial : {"+OK"sv, "+OK\r"sv, "$3\r\nab"sv, "$3\r\nabc"sv,
                                         "$3\r\nabc\r"sv, ":12"sv, "$3"sv, "$3\r"sv}) {
            CAPTURE(partial);
            CHECK(p.consume(partial, ec) == 0);
            CHECK_FALSE(ec);
            CHECK_FALSE(p.done());
        }
        // An aggregate header is a whole token: it is consumed before its elements arrive.
        CHECK(p.consume("*2\r\n:1\r\n:2", ec) == 8);
        CHECK_FALSE(p.done());
        CHECK(p.consume(":2\r\n", ec) == 4);
        CHECK(p.done());
    }

    TEST_CASE("every error code") {
        parser_limits small;
        small.max_depth = 2;
        small.max_blob_length = 4;
        small.max_aggregate_size = 3;
        small.max_line_length = 8;

        struct row {
            std::string_view input;
            error expected;
            parser_limits limits;
        };
        std::vector<row> const rows{
            {"x\r\n"sv, error::invalid_type_byte, {}},
            {"@"sv, error::invalid_type_byte, {}}, // refused before its line ends
            {"\r\n"sv, error::invalid_type_byte, {}},
            {"+OK\r\n?"sv, error::invalid_type_byte, {}},
            {":abc\r\n"sv, error::invalid_number, {}},
            {":\r\n"sv, error::invalid_number, {}},
            {":-\r\n"sv, error::invalid_number, {}},
            {":1.5\r\n"sv, error::invalid_number, {}},
            {": 1\r\n"sv, error::invalid_number, {}},
            {":9223372036854775808\r\n"sv, error::invalid_number, {}},
            {"$abc\r\n"sv, error::invalid_number, {}},
            {"$\r\n"sv, error::invalid_number, {}},
            {"$+3\r\nabc\r\n"sv, error::invalid_number, {}},
            {"*x\r\n"sv, error::invalid_number, {}},
            {",abc\r\n"sv, error::invalid_double, {}},
            {",\r\n"sv, error::invalid_double, {}},
            {",1.\r\n"sv, error::invalid_double, {}},
            {",.5\r\n"sv, error::invalid_double, {}},
            {",1e\r\n"sv, error::invalid_double, {}},
            {",infinity\r\n"sv, error::invalid_double, {}},
            {",nan(1)\r\n"sv, error::invalid_double, {}},
            {",1e400\r\n"sv, error::invalid_double, {}},
            {"#x\r\n"sv, error::invalid_boolean, {}},
            {"#\r\n"sv, error::invalid_boolean, {}},
            {"#tt\r\n"sv, error::invalid_boolean, {}},
            {"_x\r\n"sv, error::invalid_null, {}},
            {"(\r\n"sv, error::invalid_big_number, {}},
            {"(-\r\n"sv, error::invalid_big_number, {}},
            {"(12a\r\n"sv, error::invalid_big_number, {}},
            {"(1.5\r\n"sv, error::invalid_big_number, {}},
            {"=3\r\ntxt\r\n"sv, error::invalid_verbatim, {}},
            {"=4\r\ntxtx\r\n"sv, error::invalid_verbatim, {}},
            {"=0\r\n\r\n"sv, error::invalid_verbatim, {}},
            {"+OK\rX"sv, error::missing_crlf, {}},
            {"+OK\r\r\n"sv, error::missing_crlf, {}},
            {"$3\r\nabcd\r\n"sv, error::missing_crlf, {}},
            {"$3\r\nabc\rX"sv, error::missing_crlf, {}},
            {"$3\r\nabc\n\r"sv, error::missing_crlf, {}},
            {"$-2\r\n"sv, error::negative_length, {}},
            {"!-1\r\n"sv, error::negative_length, {}},
            {"=-1\r\n"sv, error::negative_length, {}},
            {"*-2\r\n"sv, error::negative_length, {}},
            {"%-1\r\n"sv, error::negative_length, {}},
            {"~-1\r\n"sv, error::negative_length, {}},
            {">-1\r\n"sv, error::negative_length, {}},
            {"|-1\r\n"sv, error::negative_length, {}},
            {"+123456789"sv, error::line_too_long, small},
            {"$123456789"sv, error::line_too_long, small},
            {"$5\r\nhello\r\n"sv, error::blob_too_long, small},
            {"$9223372036854775807\r\n"sv, error::blob_too_long, {}},
            {"*4\r\n"sv, error::aggregate_too_large, small},
            {"%4\r\n"sv, error::aggregate_too_large, small},
            {"*9223372036854775807\r\n"sv, error::aggregate_too_large, {}},
            {"*1\r\n*1\r\n*1\r\n"sv, error::nesting_too_deep, small},
            {"$?\r\n"sv, error::streamed_unsupported, {}},
            {"*?\r\n"sv, error::streamed_unsupported, {}},
            {"%?\r\n"sv, error::streamed_unsupported, {}},
            {";4\r\nabcd\r\n"sv, error::streamed_unsupported, {}},
            {".\r\n"sv, error::streamed_unsupported, {}},
        };
        for (auto const& r : rows) {
            CAPTURE(r.input);
            CHECK(parse_error(r.input, r.limits) == r.expected);
        }
    }

    TEST_CASE("error codes have their own category and messages") {
        error_code const ec = error::missing_crlf;
        CHECK(ec.category() == resp3::error_category());
        CHECK(std::string_view(ec.category().name()) == "colock.resp3");
        for (int e = static_cast<int>(error::invalid_type_byte);
             e <= static_cast<int>(error::attribute_without_value); ++e) {
            error_code const c = resp3::make_error_code(static_cast<error>(e));
            CAPTURE(e);
            CHECK(c.message().starts_with("RESP3: "));
            CHECK(c.message().find("unknown") == std::string::npos);
        }
        CHECK(resp3::make_error_code(static_cast<error>(999)).message().find("unknown") !=
              std::string::npos);
    }

    TEST_CASE("after an error the parser stays failed until reset") {
        parser p;
        error_code ec;
        CHECK(p.consume("#x\r\n", ec) == 0);
        CHECK(ec == error::invalid_boolean);
        CHECK(p.error() == error::invalid_boolean);
        ec.clear();
        CHECK(p.consume("+OK\r\n", ec) == 0);
        CHECK(ec == error::invalid_boolean);
        CHECK_FALSE(p.done());
        p.reset();
        CHECK_FALSE(p.error());
        CHECK(p.consume("+OK\r\n", ec) == 5);
        CHECK_FALSE(ec);
        CHECK(p.release() == simple("OK"));
    }

    TEST_CASE("an error inside an aggregate fails the whole parse") {
        parser p;
        error_code ec;
        CHECK(p.consume("*2\r\n:1\r\n:x\r\n", ec) == 0);
        CHECK(ec == error::invalid_number);
        CHECK_FALSE(p.done());
    }

    TEST_CASE("reset forgets a partial value") {
        parser p;
        error_code ec;
        CHECK(p.consume("*3\r\n|1\r\n+a\r\n+b\r\n:1\r\n", ec) > 0);
        CHECK_FALSE(p.done());
        p.reset();
        CHECK(p.consume(":2\r\n", ec) == 4);
        REQUIRE(p.done());
        value const v = p.release();
        CHECK(v == num(2));
        CHECK_FALSE(v.attributes);
    }

    TEST_CASE("limits: exactly at the limit passes, one over fails") {
        SUBCASE("depth") {
            parser_limits l;
            l.max_depth = 3;
            CHECK(parse_one("*1\r\n*1\r\n*1\r\n:1\r\n", l) ==
                  agg(type::array, {agg(type::array, {agg(type::array, {num(1)})})}));
            CHECK(parse_one("*1\r\n*1\r\n*0\r\n", l) ==
                  agg(type::array, {agg(type::array, {agg(type::array, {})})}));
            CHECK(parse_error("*1\r\n*1\r\n*1\r\n*0\r\n", l) == error::nesting_too_deep);
            CHECK(parse_error("*1\r\n%1\r\n~1\r\n>1\r\n", l) == error::nesting_too_deep);
            // An attribute is an aggregate too.
            CHECK(parse_error("*1\r\n*1\r\n*1\r\n|1\r\n", l) == error::nesting_too_deep);
            l.max_depth = 0;
            CHECK(parse_one(":1\r\n", l) == num(1));
            CHECK(parse_error("*0\r\n", l) == error::nesting_too_deep);
        }
        SUBCASE("deep nesting within the default limit costs no recursion") {
            parser_limits l;
            l.max_depth = 100000;
            std::string deep;
            for (int i = 0; i < 100000; ++i)
                deep += "*1\r\n";
            deep += ":1\r\n";
            parser p{l};
            error_code ec;
            CHECK(p.consume(deep, ec) == deep.size());
            REQUIRE(p.done());
            value v = p.release();
            // Take the tree apart iteratively: a recursive destructor would be the test's problem.
            std::vector<value> keep;
            while (!v.elements.empty()) {
                value child = std::move(v.elements.front());
                keep.push_back(std::move(v));
                v = std::move(child);
            }
            CHECK(v == num(1));
            while (!keep.empty()) {
                keep.back().elements.clear();
                keep.pop_back();
            }
            CHECK(parse_error(deep) == error::nesting_too_deep);
        }
        SUBCASE("blob length") {
            parser_limits l;
            l.max_blob_length = 3;
            CHECK(parse_one("$3\r\nabc\r\n", l) == blob("abc"));
            CHECK(parse_error("$4\r\nabcd\r\n", l) == error::blob_too_long);
            CHECK(parse_error("!4\r\nabcd\r\n", l) == error::blob_too_long);
            CHECK(parse_error("=8\r\ntxt:abcd\r\n", l) == error::blob_too_long);
            // Refused as soon as the length is known, before the payload arrives.
            parser p{l};
            error_code ec;
            CHECK(p.consume("$4\r\n", ec) == 0);
            CHECK(ec == error::blob_too_long);
        }
        SUBCASE("a huge declared blob within the limits waits without allocating") {
            check_waits_for_more("$536870912\r\nabc", 0);
        }
        SUBCASE("aggregate size") {
            parser_limits l;
            l.max_aggregate_size = 2;
            CHECK(parse_one("*2\r\n:1\r\n:2\r\n", l) == agg(type::array, {num(1), num(2)}));
            CHECK(parse_one("%2\r\n:1\r\n:2\r\n:3\r\n:4\r\n", l) ==
                  agg(type::map, {num(1), num(2), num(3), num(4)}));
            CHECK(parse_error("*3\r\n", l) == error::aggregate_too_large);
            CHECK(parse_error("~3\r\n", l) == error::aggregate_too_large);
            CHECK(parse_error(">3\r\n", l) == error::aggregate_too_large);
            CHECK(parse_error("%3\r\n", l) == error::aggregate_too_large);
            CHECK(parse_error("|3\r\n", l) == error::aggregate_too_large);
        }
        SUBCASE("a huge declared aggregate within the limits grows as elements arrive") {
            check_waits_for_more("*16777216\r\n:1\r\n:2\r\n", 19);
        }
        SUBCASE("line length") {
            parser_limits l;
            l.max_line_length = 4;
            CHECK(parse_one("+abcd\r\n", l) == simple("abcd"));
            CHECK(parse_one(":1234\r\n", l) == num(1234));
            CHECK(parse_error("+abcde\r\n", l) == error::line_too_long);
            CHECK(parse_error(":12345\r\n", l) == error::line_too_long);
            CHECK(parse_error("$12345\r\n", l) == error::line_too_long);
            // Refused once the line passes the limit, without waiting for its end.
            CHECK(parse_error("+abcde", l) == error::line_too_long);
            // Still incomplete, not yet too long.
            CHECK(parse_whole("+abcd", l) == outcome{{}, {}, 5});
            CHECK(parse_whole("+abcd\r", l) == outcome{{}, {}, 6});
            // A blob's payload is no line.
            CHECK(parse_one("$6\r\nabcdef\r\n", l) == blob("abcdef"));
        }
    }

    TEST_CASE("the same results whatever the split") {
        std::vector<std::string_view> const streams{
            "+OK\r\n:1\r\n$3\r\nabc\r\n"sv,
            "$0\r\n\r\n*0\r\n%0\r\n_\r\n#t\r\n#f\r\n"sv,
            "$5\r\na\r\nb\0\r\n!3\r\nERR\r\n-WRONGTYPE x\r\n"sv,
            ",1.5e3\r\n,-inf\r\n,inf\r\n,nan\r\n,-0.25\r\n(-123456789012345678901234567890\r\n"sv,
            "=15\r\ntxt:Some string\r\n:-42\r\n:+7\r\n"sv,
            "*3\r\n%2\r\n+a\r\n*2\r\n:1\r\n:2\r\n+b\r\n~1\r\n#t\r\n$2\r\nhi\r\n>2\r\n+x\r\n_\r\n"sv,
            "|1\r\n+key\r\n%1\r\n$1\r\na\r\n,0.5\r\n:42\r\n*2\r\n|1\r\n+k\r\n:1\r\n:2\r\n:3\r\n"sv,
            ">3\r\n$7\r\nmessage\r\n$4\r\nchan\r\n$2\r\nhi\r\n+OK\r\n>3\r\n$9\r\nsubscribe\r\n"
            "$1\r\nc\r\n:1\r\n"sv,
            "$-1\r\n*-1\r\n*2\r\n$-1\r\n*0\r\n"sv,
            // Errors part way: the values before the error, then the error.
            "+OK\r\n:1\r\n*2\r\n:1\r\n:x\r\n+never\r\n"sv,
            "$3\r\nabc\r\n$3\r\nabcd\r\n"sv,
            // Ends with an incomplete value: the same bytes are left over.
            "+OK\r\n*2\r\n:1\r\n$10\r\nabc"sv,
        };
        for (auto const s : streams) {
            CAPTURE(s);
            outcome const whole = parse_whole(s);
            INFO(describe(whole));
            CHECK_FALSE(whole.values.empty());

            // Byte by byte.
            std::vector<std::string_view> bytes;
            for (std::size_t i = 0; i < s.size(); ++i)
                bytes.push_back(s.substr(i, 1));
            outcome const byte_wise = feed(bytes);
            CHECK(byte_wise == whole);

            // Every single split, and every pair of splits.
            for (std::size_t i = 0; i <= s.size(); ++i) {
                outcome const one = feed({s.substr(0, i), s.substr(i)});
                if (!(one == whole)) {
                    CAPTURE(i);
                    CHECK(describe(one) == describe(whole));
                }
                for (std::size_t j = i; j <= s.size(); ++j) {
                    outcome const two = feed({s.substr(0, i), s.substr(i, j - i), s.substr(j)});
                    if (!(two == whole)) {
                        CAPTURE(i);
                        CAPTURE(j);
                        CHECK(describe(two) == describe(whole));
                    }
                }
            }
        }
    }

    TEST_CASE("whole-input results of the split streams") {
        outcome const o = parse_whole("+OK\r\n:1\r\n*2\r\n:1\r\n:x\r\n+never\r\n");
        CHECK(o.values == std::vector<value>{simple("OK"), num(1)});
        CHECK(o.ec == error::invalid_number);
        outcome const p = parse_whole("+OK\r\n*2\r\n:1\r\n$10\r\nabc");
        CHECK(p.values == std::vector<value>{simple("OK")});
        CHECK_FALSE(p.ec);
        CHECK(p.leftover == 8); // the partial blob; the array header and :1 were consumed
    }

} // TEST_SUITE

TEST_SUITE("resp3.value") {

    TEST_CASE("as_string") {
        CHECK(simple("a").as_string() == "a");
        CHECK(blob("b").as_string() == "b");
        CHECK(str(type::simple_error, "e").as_string() == "e");
        CHECK(str(type::blob_error, "E").as_string() == "E");
        CHECK(verbatim("txt", "v").as_string() == "v");
        CHECK(str(type::big_number, "123").as_string() == "123");
        CHECK_FALSE(num(1).as_string());
        CHECK_FALSE(null().as_string());
        CHECK_FALSE(agg(type::array, {}).as_string());
    }

    TEST_CASE("as_integer") {
        CHECK(num(-5).as_integer() == -5);
        CHECK(blob("42").as_integer() == 42);
        CHECK(simple("-7").as_integer() == -7);
        CHECK(str(type::big_number, "12").as_integer() == 12);
        CHECK_FALSE(str(type::big_number, "123456789012345678901234567890").as_integer());
        CHECK_FALSE(blob("").as_integer());
        CHECK_FALSE(blob("-").as_integer());
        CHECK_FALSE(blob("+1").as_integer());
        CHECK_FALSE(blob(" 1").as_integer());
        CHECK_FALSE(blob("1 ").as_integer());
        CHECK_FALSE(blob("1.5").as_integer());
        CHECK_FALSE(str(type::simple_error, "1").as_integer());
        CHECK_FALSE(dbl(1.0).as_integer());
        CHECK_FALSE(null().as_integer());
        CHECK_FALSE(boolean(true).as_integer());
    }

    TEST_CASE("equality looks at what the type uses") {
        value a = num(1);
        value b = num(1);
        b.text = "ignored";
        CHECK(a == b);
        CHECK(num(1) != num(2));
        CHECK(num(1) != blob("1"));
        CHECK(dbl(0.5) == dbl(0.5));
        CHECK(dbl(0.5) != dbl(0.25));
        CHECK(agg(type::array, {num(1)}) != agg(type::array, {num(1), num(2)}));
        value empty_attrs = num(1);
        empty_attrs.attributes = std::make_shared<std::vector<value>>();
        CHECK(empty_attrs == num(1));
    }

    TEST_CASE("to_debug_string") {
        CHECK(to_debug_string(blob("OK")) == R"([blob_string "OK"])");
        CHECK(to_debug_string(agg(type::array, {num(1), null()})) == "[array [number 1] [null]]");
        CHECK(to_debug_string(blob("a\r\n\t\"\\\0\x7f\xff"sv)) ==
              R"([blob_string "a\r\n\t\"\\\x00\x7f\xff"])");
        CHECK(to_debug_string(verbatim("txt", "hi")) == R"([verbatim_string txt "hi"])");
        CHECK(to_debug_string(dbl(1.5)) == "[double 1.5]");
        CHECK(to_debug_string(dbl(-std::numeric_limits<double>::infinity())) == "[double -inf]");
        CHECK(to_debug_string(dbl(std::numeric_limits<double>::quiet_NaN())) == "[double nan]");
        CHECK(to_debug_string(boolean(false)) == "[boolean false]");
        CHECK(to_debug_string(with_attrs(num(1), {simple("k"), num(2)})) ==
              R"([number 1 |attributes [simple_string "k"] [number 2]|])");
        CHECK(to_debug_string(agg(type::map, {simple("k"), agg(type::set, {})})) ==
              R"([map [simple_string "k"] [set]])");
    }

    TEST_CASE("type names") {
        CHECK(resp3::to_string(type::double_type) == "double");
        CHECK(resp3::to_string(type::verbatim_string) == "verbatim_string");
        CHECK(resp3::to_string(type::push) == "push");
        CHECK(resp3::is_aggregate(type::attribute));
        CHECK_FALSE(resp3::is_aggregate(type::blob_string));
        CHECK(resp3::is_error(type::blob_error));
    }

} // TEST_SUITE

// The request builder, byte for byte, and the reply counting the connection relies on.
#include <colock/resp3/request.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <forward_list>
#include <limits>
#include <list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

using colock::resp3::reply_kind;
using colock::resp3::request;
using namespace std::string_view_literals;

namespace {

// What a request of the one command `name args...` names as unmatchable (empty when none).
template <class... Args>
std::string unmatchable_of(std::string_view name, Args const&... args) {
    request r;
    r.push(name, args...);
    return r.unmatchable_command();
}

} // namespace

TEST_SUITE("resp3.request") {

    TEST_CASE("a new request is empty") {
        request r;
        CHECK(r.empty());
        CHECK(r.payload().empty());
        CHECK(r.commands() == 0);
        CHECK(r.expected_replies() == 0);
        CHECK(r.expected_confirmations() == 0);
    }

    TEST_CASE("a command is an array of bulk strings") {
        request r;
        r.push("PING");
        CHECK(r.payload() == "*1\r\n$4\r\nPING\r\n");
        r.push("SET", "key", "value");
        CHECK(r.payload() == "*1\r\n$4\r\nPING\r\n*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n");
        CHECK_FALSE(r.empty());
        CHECK(r.commands() == 2);
        CHECK(r.expected_replies() == 2);
        CHECK(r.expected_confirmations() == 0);
    }

    TEST_CASE("arguments are binary safe") {
        request r;
        std::string const nul("a\0b", 3);
        r.push("SET", "\r\n", nul, "", std::string(1, '\xff'));
        CHECK(r.payload() ==
              "*5\r\n$3\r\nSET\r\n$2\r\n\r\n\r\n$3\r\na\0b\r\n$0\r\n\r\n$1\r\n\xff\r\n"sv);
    }

    TEST_CASE("string-like arguments of several types") {
        request r;
        std::string s = "s";
        std::string_view sv = "sv";
        char const* cs = "cs";
        r.push("X", s, sv, cs, "lit");
        CHECK(r.payload() == "*5\r\n$1\r\nX\r\n$1\r\ns\r\n$2\r\nsv\r\n$2\r\ncs\r\n$3\r\nlit\r\n");
    }

    TEST_CASE("integer arguments are written in decimal") {
        request r;
        r.push("PEXPIRE", "k", 30000);
        CHECK(r.payload() == "*3\r\n$7\r\nPEXPIRE\r\n$1\r\nk\r\n$5\r\n30000\r\n");
        r.clear();
        r.push("X", std::int64_t{-42}, std::numeric_limits<std::int64_t>::min(),
               std::numeric_limits<std::uint64_t>::max(), std::size_t{0}, short{7});
        CHECK(r.payload() == "*6\r\n$1\r\nX\r\n$3\r\n-42\r\n$20\r\n-9223372036854775808\r\n"
                             "$20\r\n18446744073709551615\r\n$1\r\n0\r\n$1\r\n7\r\n");
    }

    TEST_CASE("push_range takes sized and unsized ranges") {
        request r;
        std::vector<std::string> const keys{"a", "bb"};
        r.push_range("DEL", keys);
        CHECK(r.payload() == "*3\r\n$3\r\nDEL\r\n$1\r\na\r\n$2\r\nbb\r\n");

        r.clear();
        std::list<int> const nums{1, -2, 30};
        r.push_range("X", nums);
        CHECK(r.payload() == "*4\r\n$1\r\nX\r\n$1\r\n1\r\n$2\r\n-2\r\n$2\r\n30\r\n");

        r.clear();
        std::forward_list<std::string_view> const unsized{"2", "4"};
        r.push_range("X", unsized);
        CHECK(r.payload() == "*3\r\n$1\r\nX\r\n$1\r\n2\r\n$1\r\n4\r\n");

        r.clear();
        r.push_range("PING", std::vector<std::string_view>{});
        CHECK(r.payload() == "*1\r\n$4\r\nPING\r\n");
        CHECK(r.expected_replies() == 1);
    }

    TEST_CASE("subscribe-family commands count confirmations, not replies") {
        request r;
        r.push("SUBSCRIBE", "a", "b");
        CHECK(r.expected_replies() == 0);
        CHECK(r.expected_confirmations() == 2);
        REQUIRE(r.shapes().size() == 1);
        CHECK(r.shape(0) == colock::resp3::reply_shape{colock::resp3::reply_kind::subscribe, 2});
        r.push("psubscribe", "p*");
        CHECK(r.expected_confirmations() == 3);
        r.push("SSubscribe", "s1", "s2", "s3");
        CHECK(r.expected_confirmations() == 6);
        r.push("UNSUBSCRIBE");
        CHECK(r.expected_confirmations() == 7);
        r.push("punsubscribe", "x", "y");
        CHECK(r.expected_confirmations() == 9);
        r.push("SUNSUBSCRIBE", "s1");
        CHECK(r.expected_confirmations() == 10);
        r.push_range("subscribe", std::vector<std::string>{"c1", "c2"});
        CHECK(r.expected_confirmations() == 12);
        r.push("GET", "k");
        CHECK(r.expected_replies() == 1);
        CHECK(r.commands() == 8);
        CHECK(r.payload().starts_with("*3\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n$1\r\nb\r\n"));
    }

    TEST_CASE("each command's reply shape; nothing recorded while all are ordinary") {
        using colock::resp3::reply_shape;
        request r;
        r.push("GET", "k");
        r.push("SET", "k", "v");
        CHECK(r.shapes().empty());
        CHECK(r.shape(1) == reply_shape{});
        r.push("ssubscribe", "s1", "s2");
        r.push("UNSUBSCRIBE");
        r.push("PUNSUBSCRIBE", "p*");
        r.push("PING");
        REQUIRE(r.shapes().size() == 6);
        CHECK(r.shape(0) == reply_shape{});
        CHECK(r.shape(2) == reply_shape{reply_kind::ssubscribe, 2});
        CHECK(r.shape(3) == reply_shape{reply_kind::unsubscribe, 0});
        CHECK(r.shape(4) == reply_shape{reply_kind::punsubscribe, 1});
        CHECK(r.shape(5) == reply_shape{});
        CHECK(r.unmatchable_command().empty());
        r.clear();
        CHECK(r.shapes().empty());
    }

    TEST_CASE("inside a MULTI of the same request, the subscribe family is answered +QUEUED") {
        request r;
        r.push("MULTI");
        r.push("SUBSCRIBE", "a");
        r.push("EXEC");
        r.push("SUBSCRIBE", "b");
        CHECK(r.shape(1).kind == reply_kind::ordinary);
        CHECK(r.shape(3).kind == reply_kind::subscribe);
        CHECK(r.expected_replies() == 3);
        CHECK(r.expected_confirmations() == 1);
        r.push("multi");
        r.push("UNSUBSCRIBE");
        r.push("discard");
        r.push("UNSUBSCRIBE");
        CHECK(r.shape(5).kind == reply_kind::ordinary);
        CHECK(r.shape(7).kind == reply_kind::unsubscribe);
    }

    TEST_CASE("MONITOR, RESET and CLIENT REPLY OFF|SKIP are unmatchable, and named") {
        request r;
        r.push("CLIENT", "REPLY", "ON");
        r.push("CLIENT", "SETNAME", "x");
        CHECK(r.unmatchable_command().empty());
        CHECK(r.shapes().empty());
        r.push("client", "reply", "skip");
        CHECK(r.shape(2).kind == reply_kind::unmatchable);
        CHECK(r.unmatchable_command() == "client reply skip");
        r.push("MONITOR");
        CHECK(r.unmatchable_command() == "client reply skip"); // the first one
        CHECK(r.shape(3).kind == reply_kind::unmatchable);

        CHECK(unmatchable_of("monitor") == "monitor");
        CHECK(unmatchable_of("RESET") == "RESET");
        request off;
        off.push_range("CLIENT", std::vector<std::string>{"REPLY", "OFF"});
        CHECK(off.unmatchable_command() == "CLIENT REPLY OFF");
        CHECK(unmatchable_of("CLIENT").empty());
    }

    TEST_CASE("HELLO is unmatchable: HELLO 2 would switch the shared connection to RESP2") {
        request two;
        two.push("PING");
        two.push("hello", "2");
        CHECK(two.shape(1).kind == reply_kind::unmatchable);
        CHECK(two.unmatchable_command() == "hello");
        // Any HELLO, even one that keeps RESP3: it may re-authenticate or rename the client.
        CHECK(unmatchable_of("HELLO", "3") == "HELLO");
        CHECK(unmatchable_of("HELLO") == "HELLO");
        CHECK(unmatchable_of("HELLOS").empty());
    }

    TEST_CASE("names that only resemble the subscribe family are ordinary") {
        request r;
        r.push("SUBSCRIBES", "a");
        r.push("PUBLISH", "chan", "msg");
        r.push("SUBSCRIB", "a");
        CHECK(r.expected_replies() == 3);
        CHECK(r.expected_confirmations() == 0);
    }

    TEST_CASE("subscribe without a channel is refused and leaves the request unchanged") {
        for (std::string_view cmd : {"SUBSCRIBE"sv, "psubscribe"sv, "SSUBSCRIBE"sv}) {
            CAPTURE(cmd);
            request r;
            r.push("PING");
            std::string const before(r.payload());
            try {
                r.push(cmd);
                FAIL("no exception");
            } catch (std::invalid_argument const& e) {
                CHECK(std::string_view(e.what()).find(cmd) != std::string_view::npos);
            }
            CHECK_THROWS_AS(r.push_range(cmd, std::vector<std::string>{}), std::invalid_argument);
            CHECK(r.payload() == before);
            CHECK(r.commands() == 1);
            CHECK(r.expected_replies() == 1);
            CHECK(r.expected_confirmations() == 0);
        }
    }

    TEST_CASE("an empty command name is refused") {
        request r;
        CHECK_THROWS_AS(r.push(""), std::invalid_argument);
        CHECK_THROWS_AS(r.push("", "arg"), std::invalid_argument);
        CHECK_THROWS_AS(r.push_range("", std::vector<int>{1}), std::invalid_argument);
        CHECK(r.empty());
        CHECK(r.payload().empty());
    }

    TEST_CASE("clear forgets commands and counts; reserve keeps them") {
        request r;
        r.reserve(1024);
        r.push("SUBSCRIBE", "a");
        r.push("GET", "k");
        r.clear();
        CHECK(r.empty());
        CHECK(r.payload().empty());
        CHECK(r.commands() == 0);
        CHECK(r.expected_replies() == 0);
        CHECK(r.expected_confirmations() == 0);
        r.push("GET", "k");
        r.reserve(4096);
        CHECK(r.payload() == "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    }

    TEST_CASE("a large argument is written whole") {
        request r;
        std::string const big(100000, 'x');
        r.push("SET", "k", big);
        CHECK(r.payload() == "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000\r\n" + big + "\r\n");
    }

} // TEST_SUITE

// The protocol's errors (resp3/error.cpp): the category's name, a message of its own for every
// code, each saying it is RESP3's, and a code it does not know named by its number.
#include <colock/resp3/error.hpp>

#include "category_messages.hpp"

#include <doctest/doctest.h>

#include <string>

namespace resp3 = colock::resp3;

TEST_CASE("resp3 errors: the category is colock.resp3, and every code has a RESP3 message of its "
          "own") {
    CHECK(std::string(resp3::error_category().name()) == "colock.resp3");
    for (auto const& m :
         colock::test::distinct_messages(resp3::error_category(), resp3::error::invalid_type_byte,
                                         resp3::error::attribute_without_value)) {
        CHECK_MESSAGE(m.starts_with("RESP3: "), m);
        CHECK_MESSAGE(m.find("unknown") == std::string::npos, m);
    }
}

TEST_CASE("resp3 errors: a code outside the enumeration reads as unknown, with its number") {
    CHECK(resp3::error_category().message(0) == "RESP3: unknown error 0");
    CHECK(resp3::error_category().message(-2) == "RESP3: unknown error -2");
}

TEST_CASE("resp3 errors: make_error_code gives the enumerator in the protocol's category") {
    boost::system::error_code const ec = resp3::error::missing_crlf;
    CHECK(ec.category() == resp3::error_category());
    CHECK(ec == resp3::error::missing_crlf);
    CHECK(ec != resp3::error::negative_length);
    CHECK(ec.message() == "RESP3: a line or blob not terminated by CRLF");
}

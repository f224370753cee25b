// Checks of the RESP3 parser shared by its tests: one complete value read from an input.
#pragma once

#include <colock/resp3/parser.hpp>
#include <colock/resp3/value.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <string_view>

namespace colock::test::resp3_parse_checks {

/// The one complete value `input` holds, all of it consumed by a fresh parser.
inline resp3::value parse_one(std::string_view input, resp3::parser_limits limits = {}) {
    resp3::parser p{limits};
    boost::system::error_code ec;
    std::size_t const n = p.consume(input, ec);
    INFO(input);
    REQUIRE_FALSE(ec);
    REQUIRE(p.done());
    CHECK(n == input.size());
    return p.release();
}

} // namespace colock::test::resp3_parse_checks

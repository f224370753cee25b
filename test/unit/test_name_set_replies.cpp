// A lock set's replies read (lock/store/name_sets.hpp): a grant's fence per name, a wait's time
// left, and every other shape an unexpected reply whose outcome is unknown, never a success.
#include "lock/store/name_sets.hpp"
#include "lock/store/script_client.hpp"

#include "script_reply_builders.hpp"
#include "value_builders.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/error.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <vector>

using namespace colock::detail;
using namespace colock::test;
using namespace std::chrono_literals;

TEST_CASE("read_names_grant: a fence per name when granted, the time left when not") {
    auto g =
        read_names_grant(answered(array({number(1), number(17), number(1700000000000001)})), 2);
    CHECK_FALSE(g.result.ec);
    CHECK(g.result.granted);
    CHECK(g.fences == std::vector<std::int64_t>{17, 1700000000000001});
    CHECK(g.result.fence == 17);

    g = read_names_grant(answered(array({number(0), number(250)})), 3);
    CHECK_FALSE(g.result.ec);
    CHECK_FALSE(g.result.granted);
    CHECK(g.fences.empty());
    CHECK(g.result.holder_ttl == 250ms);
    CHECK_FALSE(g.result.outcome_unknown);
}

TEST_CASE("read_names_grant: a reply of another shape may have granted: unexpected, outcome "
          "unknown, never a success") {
    for (auto const& v : {array({number(1), number(17)}),             // a fence short
                          array({number(1), number(17), number(0)}),  // a fence below 1
                          array({number(1), number(17), number(-3)}), // negative
                          array({number(2), number(17), number(18)}), // no such flag
                          array({number(0)}),                         // no time left
                          array({number(0), number(-1)}),             // a negative wait
                          array({}), number(1)}) {
        auto const g = read_names_grant(answered(v), 2);
        CHECK(g.result.ec == colock::error::unexpected_reply);
        CHECK_FALSE(g.result.granted);
        CHECK(g.fences.empty());
        CHECK(g.result.outcome_unknown);
    }
}

TEST_CASE("read_names_grant: a refusal did not run; a lost reply may have") {
    auto const refused = read_names_grant(
        script_reply{colock::redis::error::server_error, error_reply("COLOCK the lock key k ...")},
        2);
    CHECK(refused.result.ec == colock::redis::error::server_error);
    CHECK(refused.result.server_text == "COLOCK the lock key k ...");
    CHECK_FALSE(refused.result.outcome_unknown);
    auto const lost = read_names_grant(script_reply{colock::redis::error::connection_lost, {}}, 2);
    CHECK(lost.result.outcome_unknown);
    auto const unsent =
        read_names_grant(script_reply{boost::asio::error::operation_aborted, {}}, 2);
    CHECK_FALSE(unsent.result.outcome_unknown);
}

TEST_CASE("read_names_extension: ours only when every name's lease was") {
    CHECK(read_names_extension(answered(array({number(1), number(1)})), 2).ours);
    auto const one_lost = read_names_extension(answered(array({number(1), number(0)})), 2);
    CHECK_FALSE(one_lost.ec);
    CHECK_FALSE(one_lost.ours);
    CHECK(read_names_extension(answered(array({number(1)})), 2).ec ==
          colock::error::unexpected_reply);
    CHECK(read_names_extension(answered(array({number(1), number(2)})), 2).ec ==
          colock::error::unexpected_reply);
    CHECK(read_names_extension(script_reply{colock::redis::error::connection_lost, {}}, 2).ec ==
          colock::redis::error::connection_lost);
}

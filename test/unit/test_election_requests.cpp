// An election's requests without a server: the proclaim's reply read into the store's result
// (every shape the script answers with, and foreign ones), and a quorum's decisions on the
// primaries' proclaims (quorum/quorum_election.hpp).
#include "lock/quorum/quorum_election.hpp"

#include "lock/store/lock_replies.hpp"
#include "value_builders.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

using namespace colock::detail;
using colock::detail::redlock::proclaim_decision;
using colock::test::array;
using colock::test::blob;
using colock::test::error_reply;
using colock::test::number;

namespace {

proclaim_result written() {
    return proclaim_result{{}, {}, true};
}
proclaim_result not_ours() {
    return proclaim_result{{}, {}, false};
}
proclaim_result failed() {
    return proclaim_result{colock::redis::error::connection_lost, "gone", false};
}

} // namespace

TEST_CASE("read_proclaim: 1 is written, 0 is a lease not ours; any other shape is "
          "unexpected_reply with the reply shown, and a refusal keeps the server's text") {
    auto const yes = read_proclaim(script_reply{{}, number(1)});
    CHECK_FALSE(yes.ec);
    CHECK(yes.written);
    auto const no = read_proclaim(script_reply{{}, number(0)});
    CHECK_FALSE(no.ec);
    CHECK_FALSE(no.written);
    for (auto const& foreign : {number(2), number(-1), blob("1"), array({number(1)})}) {
        auto const r = read_proclaim(script_reply{{}, foreign});
        CHECK(r.ec == colock::error::unexpected_reply);
        CHECK_FALSE(r.written);
        CHECK_FALSE(r.server_text.empty());
    }
    auto const refused = read_proclaim(
        script_reply{colock::redis::error::server_error, error_reply("NOPERM no EVALSHA")});
    CHECK(refused.ec == colock::redis::error::server_error);
    CHECK(refused.server_text == "NOPERM no EVALSHA");
    CHECK_FALSE(refused.written);
}

TEST_CASE("proclaim_decision: written once a majority wrote it, not ours once no majority can "
          "write it, undecided before; a failed answer counts for neither") {
    using answers = std::vector<std::optional<proclaim_result>>;
    // Three primaries, a majority of two.
    CHECK_FALSE(proclaim_decision(answers(3), 2).has_value());
    CHECK_FALSE(proclaim_decision(answers{written(), std::nullopt, std::nullopt}, 2).has_value());
    CHECK(proclaim_decision(answers{written(), std::nullopt, written()}, 2) == true);
    CHECK(proclaim_decision(answers{not_ours(), not_ours(), std::nullopt}, 2) == false);
    // One refusal leaves a majority possible; a failure is no refusal.
    CHECK_FALSE(proclaim_decision(answers{not_ours(), written(), std::nullopt}, 2).has_value());
    CHECK_FALSE(proclaim_decision(answers{failed(), failed(), written()}, 2).has_value());
    CHECK_FALSE(proclaim_decision(answers{failed(), not_ours(), written()}, 2).has_value());
    // Five primaries, a majority of three: three refusals end it, two do not.
    CHECK_FALSE(proclaim_decision(
                    answers{not_ours(), not_ours(), std::nullopt, std::nullopt, std::nullopt}, 3)
                    .has_value());
    CHECK(proclaim_decision(answers{not_ours(), not_ours(), not_ours(), written(), written()}, 3) ==
          false);
    CHECK(proclaim_decision(answers{written(), not_ours(), written(), failed(), written()}, 3) ==
          true);
}

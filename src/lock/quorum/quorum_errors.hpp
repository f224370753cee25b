// What a quorum store says when a round over the primaries has no majority, sans I/O: a
// primary's error as text, which errors asking again cannot mend, the summary of a round's
// errors, and the refusal of primaries that are one server. Private to the library's sources;
// tested without a server in test/unit/test_quorum_status.cpp.
#pragma once

#include <boost/system/error_code.hpp>

#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace colock::detail::redlock {

// One primary's error in a round and the server's text beside it; no code where it answered.
using primary_error = std::pair<boost::system::error_code, std::string>;

// "<message>: <server text>", or the message alone.
std::string describe(boost::system::error_code ec, std::string const& server_text);

// An error that asking again cannot mend (a refusal such as NOPERM, a reply of the wrong shape):
// reported as it is rather than as a missing quorum.
bool is_lasting(boost::system::error_code ec, std::string const& server_text);

// Why a round had no majority, from each primary's error (`errors[i]`, named by
// `endpoints[i]`): a lasting error of a primary as it is; connect failures of primaries never
// reached as the first of them; otherwise no_quorum, naming each primary that did not answer.
// An error of no_quorum carries its own text (no message before it); operation_aborted (not
// asked) is left out.
primary_error summarise(std::span<primary_error const> errors,
                        std::span<std::string const> endpoints);

// The refusal quorum::check_primaries gives primaries with these run ids (one server twice,
// where run ids are known), or nothing.
std::optional<std::string> refusal_of(std::span<std::string const> run_ids);

} // namespace colock::detail::redlock

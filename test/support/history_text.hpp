// How the history checks (history.cpp, shared_history.cpp, election_history.cpp) describe what
// they found: times relative to the first acquisition, tenures, and how many problems a report
// lists.
#pragma once

#include <colock_test/history.hpp>

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace colock::test::detail {

/// The most problems a report lists; its count goes on past them.
inline constexpr std::size_t max_problems = 20;

/// A steady-clock time relative to the first acquisition, as t+S.NNNNNNNNNs.
inline std::string at(std::int64_t ns, std::int64_t t0) {
    std::int64_t const d = ns - t0;
    std::uint64_t const mag =
        d < 0 ? 0 - static_cast<std::uint64_t>(d) : static_cast<std::uint64_t>(d);
    return fmt::format("t{}{}.{:09}s", d < 0 ? '-' : '+', mag / 1'000'000'000u,
                       mag % 1'000'000'000u);
}

/// "holder (fence F, [acquired, end))", and whether its lease ended it.
inline std::string tenure(holding const& h, std::int64_t t0) {
    return fmt::format("{} (fence {}, [{}, {}){})", h.holder, h.fence, at(h.acquired_ns, t0),
                       at(h.end_ns(), t0),
                       h.lease_end_ns < h.released_ns ? " ended by its lease" : "");
}

} // namespace colock::test::detail

// Redlock's decisions over N independent primaries, sans I/O: whether the answers of one
// acquisition make a lease and for how long it is safe, which primaries to release when they do
// not, when the holder's majority lapses, and whether an extension kept the lease. The quorum
// store (issue: Redlock) does the I/O around them. Private to the library's sources; tested
// without a server in test/unit/test_quorum.cpp.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace colock::detail::quorum {

using std::chrono::milliseconds;

/// How many of `primaries` make a majority: N/2 + 1.
constexpr std::size_t majority(std::size_t primaries) noexcept {
    return primaries / 2 + 1;
}

/// The clock drift a lease of `ttl` allows for between the primaries and this process:
/// ttl × 1 % + 2 ms, as Redlock has it (rounded up to whole milliseconds).
milliseconds clock_drift(milliseconds ttl) noexcept;

/// How long a lease granted by a majority is safe, counted from the start of the attempt that
/// took `elapsed`: ttl − elapsed − drift, or zero or less when it is not safe at all.
milliseconds validity(milliseconds ttl, milliseconds elapsed) noexcept;

/// How long one acquisition, extension or release round waits for the primaries' answers: a
/// tenth of the ttl, at least 50 ms and at most 1 s. A primary that has not answered by then
/// counts as unknown (its request may still run: it is released like a grant).
milliseconds attempt_timeout(milliseconds ttl) noexcept;

/// Whether the answers so far decide a round over `primaries`: `yes` answered in favour and
/// `pending` have not answered yet. Decided when `yes` is a majority, or can no longer become one.
constexpr bool round_decided(std::size_t yes, std::size_t pending, std::size_t primaries) noexcept {
    return yes >= majority(primaries) || yes + pending < majority(primaries);
}

/// Whether the answers so far decide an acquisition's round over `primaries`: `granted` granted
/// it, `held` answered that another holds it, `pending` have not answered yet. Decided when a
/// majority granted; else, once no majority can grant, only when the pending answers can no
/// longer change what the round reports: held elsewhere or split among waiters (no error), or
/// too few answers (an error). Deciding sooner would report a primary whose answer is on its way
/// as silent, and a lock held by a majority as an error.
constexpr bool grant_round_decided(std::size_t granted, std::size_t held, std::size_t pending,
                                   std::size_t primaries) noexcept {
    auto const needed = majority(primaries);
    if (granted >= needed)
        return true;
    if (granted + pending >= needed)
        return false;
    return granted + held >= needed || granted + held + pending < needed;
}

/// Whether the answers so far decide an extension's round over `primaries`: `confirmed` counted
/// for it, `not_ours` answered that the lease is not ours there, `pending` have not answered
/// yet. Decided when a majority confirmed; else, once none can, only when the pending answers can
/// no longer change the report: lost (too many "not ours" for any majority) or an error.
constexpr bool extend_round_decided(std::size_t confirmed, std::size_t not_ours,
                                    std::size_t pending, std::size_t primaries) noexcept {
    auto const needed = majority(primaries);
    if (confirmed >= needed)
        return true;
    if (confirmed + pending >= needed)
        return false;
    auto const tolerated = primaries - needed; // "not ours" answers a majority can live with
    return not_ours > tolerated || not_ours + pending <= tolerated;
}

/// One primary's answer to an acquisition.
struct grant_vote {
    enum class kind {
        granted, // the lock is ours there, with `fence`
        held,    // another holds it there, for `holder_ttl` more (answered: nothing to undo)
        refused, // nothing was applied there (not sent, or refused before it ran)
        unknown, // no answer after it was sent: it may have been applied
    };
    kind what = kind::refused;
    std::int64_t fence = 0;
    milliseconds holder_ttl{0};
};

/// What an acquisition's answers amount to.
struct grant_decision {
    bool granted = false;
    /// Granted: how long the lease is safe from the attempt's start (positive).
    milliseconds validity{0};
    /// Granted: the largest fence of the granting primaries.
    std::int64_t fence = 0;
    /// Not granted: the primaries (indexes) where the lock may be ours, to release now.
    std::vector<std::size_t> release;
    /// Not granted: how long until the holders' majority may lapse and a new attempt may win;
    /// zero when it may win at once (too few answers, or a lease that was not safe).
    milliseconds retry_after{0};
};

/// Decides on the answers of one acquisition over `votes.size()` primaries that took `elapsed`
/// from the first request sent to the last answer read: granted when a majority granted and the
/// lease is still safe (validity above zero).
grant_decision decide_grant(std::span<grant_vote const> votes, milliseconds ttl,
                            milliseconds elapsed);

/// Whether an extension confirmed by `confirmed` of `primaries` keeps the lease, and, when it
/// does, that its new validity (validity(ttl, elapsed)) is above zero.
bool extension_holds(std::size_t confirmed, std::size_t primaries, milliseconds ttl,
                     milliseconds elapsed) noexcept;

/// Refuses (std::invalid_argument, naming what is wrong) a set of primaries Redlock cannot work
/// with: fewer than 3, an even number, or one server given twice (the same run_id, when
/// known; an empty run_id is not compared).
void check_primaries(std::span<std::string const> run_ids);

} // namespace colock::detail::quorum

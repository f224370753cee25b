// The holder-history checks for synchronizers whose holders may be several at once: a semaphore
// (at most `capacity` permits held at any instant) and a read-write lock (readers together, a
// writer alone). They read the same histories as check_history (history.hpp): one holding per
// tenure, its interval [acquired_ns, end_ns()) the time its holder knew it held (until it let
// go, or its lease's local deadline, or the loss it was told of). An empty interval (end_ns() <=
// acquired_ns: the lease was over when the call returned) holds nothing and is not checked.
#pragma once

#include <colock_test/history.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace colock::test {

/// More permits held at once than the capacity: at `at_ns`, when the last of `holders` was
/// acquired, all of them were open, holding `permits` together.
struct crowding {
    std::int64_t at_ns = 0;
    std::size_t permits = 0;
    /// The holdings open at `at_ns`, in acquisition order.
    std::vector<holding> holders;
};

/// At most this many crowdings are listed in capacity_report::crowdings; all are counted.
inline constexpr std::size_t max_listed_crowdings = 1000;

struct capacity_report {
    /// How many holdings were checked (empty ones included).
    std::size_t holdings = 0;
    std::size_t capacity = 0;
    /// The most permits held at one instant.
    std::size_t most_at_once = 0;
    /// How many acquisitions made more permits open at once than the capacity.
    std::size_t crowded = 0;
    /// The first of them (up to max_listed_crowdings), in acquisition order.
    std::vector<crowding> crowdings;
    /// How many holdings carry a fence another holding already has: every grant takes a new
    /// fence, so none may.
    std::size_t fence_repeats = 0;
    /// Within one holder's tenures (one coroutine's, which follow each other), in acquisition
    /// order, how many fences are not strictly greater than the previous one.
    std::size_t fence_inversions = 0;
    /// A human-readable line for each problem (the first 20).
    std::vector<std::string> problems;

    bool ok() const noexcept { return crowded == 0 && fence_repeats == 0 && fence_inversions == 0; }
};

/// Checks a semaphore's history: never more than `capacity` permits held at once, counting
/// holding i as `permits[i]` permits (one each when `permits` is empty; otherwise it has one
/// entry per holding); every fence given once; each holder's fences strictly increasing. Fences
/// of different holders are not compared by acquisition time: two grants close together may
/// return in either order. Intervals that touch do not overlap, as in check_history. O(n log n
/// + listed crowdings). Throws std::invalid_argument when `permits` has the wrong size.
capacity_report check_capacity(std::vector<holding> holdings, std::size_t capacity,
                               std::vector<std::size_t> const& permits = {});

struct rw_report {
    std::size_t readers = 0;
    std::size_t writers = 0;
    /// The most readers whose tenures were open at one instant.
    std::size_t most_readers_at_once = 0;
    /// A writer's tenure intersecting another tenure, reader's or writer's (up to
    /// max_listed_overlaps), ordered by the second's acquisition.
    std::vector<overlap> overlaps;
    std::size_t overlapping_pairs = 0;
    /// Writers (non-empty tenures) in acquisition order whose fence is not strictly greater than
    /// the previous writer's.
    std::size_t writer_fence_inversions = 0;
    /// Readers (non-empty tenures) whose fence was checked, and how many of them had
    /// exactly the fence of the last writer that ended before they began.
    std::size_t readers_checked = 0;
    std::size_t readers_exact = 0;
    /// Readers whose fence is below that of a writer that ended before they began (with no
    /// instant at which the lock's keys may have lapsed to excuse a fence of 0).
    std::size_t reader_fences_low = 0;
    /// Readers whose fence is not below that of a writer still open, or not yet acquired, when
    /// they began.
    std::size_t reader_fences_high = 0;
    /// Readers with fence 0 after a writer, excused by an instant between them at which the
    /// keys may have lapsed.
    std::size_t readers_after_lapse = 0;
    std::vector<std::string> problems;

    bool ok() const noexcept {
        return overlapping_pairs == 0 && writer_fence_inversions == 0 && reader_fences_low == 0 &&
               reader_fences_high == 0;
    }
};

/// Checks a read-write lock's history: no writer's tenure intersects another tenure (readers may
/// intersect each other); writers' fences strictly increasing in acquisition order; and every
/// reader's fence F (a reader carries the fence its grant found, the last writer's) bounded by
/// the writers around it:
///
///   - F >= the fence of every writer W with a non-empty tenure that ended before the reader
///     began (W.end < R.acquired): W's grant came before the reader's, since the reader could
///     not be granted while W was live at the server and W let go (or its lease ran out, no
///     later than its local deadline) before W.end. The one exception: the lock's keys lapsed
///     between them, and a reader then carries 0. A fence of 0 is excused only when some
///     instant L between the latest such W's end and the reader's start is later than the
///     lease end (lease_end_ns) of every tenure acquired before L: the keys live on a lease's
///     length after every grant and renewal, and a tenure's lease end is no later than that.
///   - F < the fence of every writer W whose tenure had not ended when the reader began
///     (W.end >= R.acquired, empty tenures included): had W been granted before the reader, it
///     would have let go or lost its lease before the reader's grant, so before R.acquired.
///
/// Only non-empty reader tenures are checked (a reader whose lease was over at the return may
/// have been granted long before). A write guard downgraded to a reader is two tenures: the
/// writer's up to the co_downgrade call, the reader's from its return. O(n log n + n x the
/// readers open at once + listed pairs).
rw_report check_rw_history(std::vector<holding> readers, std::vector<holding> writers);

} // namespace colock::test

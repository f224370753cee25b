// What reliability tests record about lock holders, and the checks run on it afterwards.
//
// Each holder appends one line per tenure to a shared history file (history_writer); after the
// run, read_history gathers them and check_history looks for two holders whose tenures overlap
// and for fences that do not increase with acquisition time. All times come from one
// machine-wide monotonic clock (steady_now_ns), so tenures recorded by different processes
// compare directly.
//
// fenced_store is the other half of the fencing story: a resource that refuses a write carrying
// a fence lower than one it already accepted, shared by processes through one file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace colock::test {

/// Nanoseconds on std::chrono::steady_clock (CLOCK_MONOTONIC on Linux: one clock for all
/// processes of one machine).
std::int64_t steady_now_ns() noexcept;

/// One holder's tenure of a lock, as the holder saw it.
struct holding {
    /// Who held it, e.g. "p2/c17" (process/coroutine). Not empty, no whitespace.
    std::string holder;
    /// lock_guard::fence().
    std::int64_t fence = 0;
    /// lock_guard::token(). Not empty, no whitespace.
    std::string token;
    /// When co_lock returned.
    std::int64_t acquired_ns = 0;
    /// When the holder stopped relying on the lock: just before release(), or when it saw the
    /// loss.
    std::int64_t released_ns = 0;
    /// The guard's local lease deadline when the holder stopped: the lease cannot outlive it.
    std::int64_t lease_end_ns = 0;

    /// End of the interval in which this holder may act: min(released_ns, lease_end_ns).
    std::int64_t end_ns() const noexcept;
    /// Whether that interval is not empty. An empty one (the lease over when the lock call
    /// returned: a reply read late) did nothing, and says nothing of the order of grants.
    bool could_act() const noexcept { return end_ns() > acquired_ns; }

    friend bool operator==(holding const&, holding const&) = default;
};

/// Appends one text line per holding to a file:
///
///     <holder> <fence> <token> <acquired_ns> <released_ns> <lease_end_ns>\n
///
/// Several processes (and threads) may append to the same file at once: it is opened with
/// O_APPEND and each line goes out in one write(), so lines never interleave. Nothing is
/// buffered in the process, so a holder killed right after record() returns has its line in
/// the file.
///
/// @par Thread safety
/// record() may be called from any thread, and from a child after fork().
class history_writer {
public:
    /// Opens (creating if needed) `path` for appending. Throws std::system_error naming the file.
    explicit history_writer(std::string const& path);
    history_writer(history_writer&& other) noexcept;
    history_writer& operator=(history_writer&& other) noexcept;
    ~history_writer();

    /// Appends `h`. Throws std::invalid_argument for a holding that could not be read back or
    /// that cannot be real: an empty holder or token or one with whitespace or control
    /// characters, acquired_ns <= 0, released_ns < acquired_ns, lease_end_ns <= 0 (a field left
    /// unset would otherwise make an empty interval that hides every overlap). Throws
    /// std::system_error naming the file when the write fails.
    void record(holding const& h);

    std::string const& path() const noexcept { return path_; }

private:
    std::string path_;
    int fd_ = -1;
};

/// Reads a file written by history_writer(s), in file order. Throws std::system_error naming the
/// file when it cannot be read, and std::runtime_error naming the file and the line number for a
/// malformed line (wrong field count, a number that is not an int64, a field history_writer
/// would refuse, or a last line without its newline).
std::vector<holding> read_history(std::string const& path);

/// Two holdings whose intervals [acquired_ns, end_ns()) intersect. `second` was acquired before
/// `first` ended (and not before `first` was acquired).
struct overlap {
    holding first;
    holding second;
    /// How long both could act: min(first.end_ns(), second.end_ns()) - second.acquired_ns.
    std::int64_t overlap_ns = 0;
};

/// At most this many overlapping pairs are listed in history_report::overlaps; all of them are
/// counted in history_report::overlapping_pairs. Only a lock that is badly broken gets near it,
/// where listing every pair could take more memory than the machine has.
inline constexpr std::size_t max_listed_overlaps = 100'000;

struct history_report {
    /// How many holdings were checked.
    std::size_t holdings = 0;
    /// Every pair of holdings whose intervals [acquired_ns, end_ns()) intersect (up to
    /// max_listed_overlaps), ordered by the second's acquisition, then the first's.
    std::vector<overlap> overlaps;
    /// How many pairs overlap, listed or not.
    std::size_t overlapping_pairs = 0;
    /// In acquisition order, how many fences are not strictly greater than the previous one;
    /// empty intervals (a lease over when co_lock returned) are left out, as they acted on
    /// nothing.
    std::size_t fence_inversions = 0;
    /// A human-readable line for each overlap and inversion, in acquisition order (the first 20).
    /// Times are shown relative to the first acquisition.
    std::vector<std::string> problems;

    /// No overlaps and no inversions.
    bool ok() const noexcept {
        return overlaps.empty() && overlapping_pairs == 0 && fence_inversions == 0;
    }
};

/// Sorts by acquired_ns (ties by fence, then end, then holder) and checks. Intervals that touch
/// (one's end_ns() == the next one's acquired_ns) do not overlap; an empty interval (end_ns() <=
/// acquired_ns) overlaps nothing. O(n log n + listed pairs): a sweep in acquisition order keeps
/// the intervals still open in a heap ordered by end, so without overlaps the heap never holds
/// more than one. 1e6 holdings take well under a second in an optimised build.
history_report check_history(std::vector<holding> holdings);

/// A tiny storage service shared by processes through one file, standing in for the database a
/// lock holder writes to. It keeps the highest fence it ever accepted and refuses a write whose
/// fence is lower: a holder that lost its lease without noticing (paused, partitioned) is
/// stopped here even though it still believes it holds the lock. Writes with an equal fence are
/// accepted (one holder writes several times).
///
/// The store's own atomicity comes from flock() on its file, as a database would provide its
/// own: every operation opens the file, takes the lock (exclusive to write, shared to read),
/// and closes it. Opening per operation keeps the lock per call even in a child forked from a
/// process that uses the same object (flock belongs to the open file description, which fork
/// shares). The state is one header line with a checksum followed by the value, rewritten with
/// one pwrite() per write; a write torn by a crash is reported, never mistaken for an empty
/// store.
///
/// @par Thread safety
/// Every member function may be called from any thread and any process.
class fenced_store {
public:
    /// Uses the store in `path`, creating an empty one if the file is missing or empty. Throws
    /// std::system_error naming the file when it cannot be opened, std::runtime_error when it
    /// holds something else than a store.
    explicit fenced_store(std::string path);

    /// Stores `value` and returns true when fence >= the highest fence accepted so far (any
    /// fence is accepted by an empty store); returns false and changes nothing but the count of
    /// refusals otherwise. Throws std::system_error naming the file when it is gone (a removed
    /// store is not silently replaced by an empty one) or cannot be written.
    bool write(std::int64_t fence, std::string_view value);

    /// The highest fence accepted; std::numeric_limits<std::int64_t>::min() before the first.
    std::int64_t highest_fence() const;
    /// The last accepted value; empty before the first.
    std::string value() const;
    /// How many writes were accepted, by every process using the file.
    std::uint64_t accepted() const;
    /// How many writes were refused, by every process using the file.
    std::uint64_t refused() const;

    std::string const& path() const noexcept { return path_; }

private:
    std::string path_;
};

} // namespace colock::test

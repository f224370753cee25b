#include <colock_test/history.hpp>

#include "history_text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace colock::test {
namespace {

using detail::at;
using detail::max_problems;
using detail::tenure;

[[noreturn]] void fail_errno(std::string const& what, std::string const& path) {
    throw std::system_error(errno, std::generic_category(), what + " " + path);
}

/// A file descriptor closed on scope exit.
class file {
public:
    file(std::string const& path, int flags) : fd_(::open(path.c_str(), flags | O_CLOEXEC, 0644)) {
        if (fd_ < 0)
            fail_errno("cannot open", path);
    }
    ~file() { ::close(fd_); }
    file(file const&) = delete;
    file& operator=(file const&) = delete;
    int get() const noexcept { return fd_; }

private:
    int fd_;
};

/// Reads up to `n` bytes at the descriptor's position; fewer only at the end of the file.
std::size_t read_some(int fd, char* out, std::size_t n, std::string const& path) {
    std::size_t got = 0;
    while (got < n) {
        ssize_t const r = ::read(fd, out + got, n - got);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            fail_errno("cannot read", path);
        }
        if (r == 0)
            break;
        got += static_cast<std::size_t>(r);
    }
    return got;
}

bool parse_int(std::string_view s, std::int64_t& out) {
    auto const [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc{} && end == s.data() + s.size() && !s.empty();
}

bool parse_uint(std::string_view s, std::uint64_t& out) {
    auto const [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc{} && end == s.data() + s.size() && !s.empty();
}

/// Splits `s` at single spaces; empty fields are kept (and then refused by the caller).
std::vector<std::string_view> split(std::string_view s) {
    std::vector<std::string_view> fields;
    for (;;) {
        std::size_t const sp = s.find(' ');
        fields.push_back(s.substr(0, sp));
        if (sp == std::string_view::npos)
            return fields;
        s.remove_prefix(sp + 1);
    }
}

bool is_word(std::string_view s) {
    return !s.empty() && std::none_of(s.begin(), s.end(), [](char c) {
        auto const u = static_cast<unsigned char>(c);
        return u <= 0x20 || u == 0x7f;
    });
}

/// Why `h` cannot be a real holding (or could not be read back); empty when it can.
std::string_view invalid_reason(holding const& h) {
    if (!is_word(h.holder))
        return "holder is empty or has whitespace or control characters";
    if (!is_word(h.token))
        return "token is empty or has whitespace or control characters";
    if (h.acquired_ns <= 0)
        return "acquired_ns <= 0";
    if (h.released_ns < h.acquired_ns)
        return "released_ns before acquired_ns";
    if (h.lease_end_ns <= 0)
        return "lease_end_ns <= 0";
    return {};
}

/// A line of a history file, or the reason it is not one.
std::string_view parse_line(std::string_view line, holding& h) {
    auto const f = split(line);
    if (f.size() != 6)
        return "expected 6 fields separated by single spaces";
    h.holder.assign(f[0]);
    h.token.assign(f[2]);
    if (!parse_int(f[1], h.fence))
        return "fence is not an int64";
    if (!parse_int(f[3], h.acquired_ns))
        return "acquired_ns is not an int64";
    if (!parse_int(f[4], h.released_ns))
        return "released_ns is not an int64";
    if (!parse_int(f[5], h.lease_end_ns))
        return "lease_end_ns is not an int64";
    return invalid_reason(h);
}

[[noreturn]] void malformed(std::string const& path, std::size_t line_no, std::string_view why,
                            std::string_view line) {
    constexpr std::size_t shown = 160;
    throw std::runtime_error(fmt::format("read_history: {}, line {}: {}: \"{}{}\"", path, line_no,
                                         why, line.substr(0, shown),
                                         line.size() > shown ? "..." : ""));
}

// ---- check_history's descriptions

std::string duration(std::int64_t ns) {
    if (ns >= 1'000'000 || ns <= -1'000'000)
        return fmt::format("{} ns ({:.3f} ms)", ns, static_cast<double>(ns) / 1e6);
    return fmt::format("{} ns", ns);
}

// ---- fenced_store's file

/// The state kept in a store's file: one header line, then the value.
///
///     colock-fenced-store 1 <highest> <accepted> <refused> <value length> <checksum>\n<value>
///
/// The checksum (FNV-1a 64, hex) covers the header's other fields and the value, so a write
/// torn by a crash is found. Bytes after the value (left by a crash between pwrite and
/// ftruncate) are ignored.
struct store_state {
    std::int64_t highest = std::numeric_limits<std::int64_t>::min();
    std::uint64_t accepted = 0;
    std::uint64_t refused = 0;
    std::string value;
};

constexpr std::string_view store_magic = "colock-fenced-store 1 ";

std::uint64_t fnv1a(std::string_view a, std::string_view b) {
    std::uint64_t h = 14695981039346656037u;
    for (std::string_view s : {a, b}) {
        for (char c : s)
            h = (h ^ static_cast<unsigned char>(c)) * 1099511628211u;
    }
    return h;
}

std::string serialise(store_state const& s) {
    std::string const fields =
        fmt::format("{}{} {} {} {}", store_magic, s.highest, s.accepted, s.refused, s.value.size());
    std::string out = fmt::format("{} {:016x}\n", fields, fnv1a(fields, s.value));
    out += s.value;
    return out;
}

[[noreturn]] void corrupt(std::string const& path, std::string_view why) {
    throw std::runtime_error(fmt::format("fenced_store: {} is not a fenced_store file or was torn "
                                         "by a crash: {}",
                                         path, why));
}

store_state parse_store(std::string_view content, std::string const& path) {
    store_state s;
    if (content.empty())
        return s; // a new store
    std::size_t const nl = content.find('\n');
    if (nl == std::string_view::npos)
        corrupt(path, "no header line");
    std::string_view const header = content.substr(0, nl);
    if (header.substr(0, store_magic.size()) != store_magic)
        corrupt(path, "unknown header");
    auto const f = split(header.substr(store_magic.size()));
    std::uint64_t length = 0;
    std::uint64_t checksum = 0;
    if (f.size() != 5 || !parse_int(f[0], s.highest) || !parse_uint(f[1], s.accepted) ||
        !parse_uint(f[2], s.refused) || !parse_uint(f[3], length) || f[4].size() != 16 ||
        std::from_chars(f[4].data(), f[4].data() + 16, checksum, 16).ptr != f[4].data() + 16)
        corrupt(path, "malformed header");
    if (length > content.size() - nl - 1)
        corrupt(path, "value shorter than its header says");
    std::string_view const value = content.substr(nl + 1, length);
    std::string_view const fields = header.substr(0, header.size() - 17);
    if (fnv1a(fields, value) != checksum)
        corrupt(path, "checksum mismatch");
    s.value.assign(value);
    return s;
}

/// Takes flock(`op`) on `fd`, waiting for it; released when the descriptor is closed.
void lock_file(int fd, int op, std::string const& path) {
    while (::flock(fd, op) != 0) {
        if (errno != EINTR)
            fail_errno("cannot flock", path);
    }
}

std::string read_all(int fd, std::string const& path) {
    struct stat st {};
    if (::fstat(fd, &st) != 0)
        fail_errno("cannot stat", path);
    std::string content(static_cast<std::size_t>(st.st_size), '\0');
    content.resize(read_some(fd, content.data(), content.size(), path));
    return content;
}

/// The store's state, read under a shared lock.
store_state load_store(std::string const& path) {
    file const f{path, O_RDONLY};
    lock_file(f.get(), LOCK_SH, path);
    return parse_store(read_all(f.get(), path), path);
}

} // namespace

std::int64_t steady_now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

std::int64_t holding::end_ns() const noexcept {
    return std::min(released_ns, lease_end_ns);
}

// ---- history_writer, read_history

history_writer::history_writer(std::string const& path)
    : path_(path), fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {
    if (fd_ < 0)
        fail_errno("history_writer: cannot open", path_);
}

history_writer::history_writer(history_writer&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

history_writer& history_writer::operator=(history_writer&& other) noexcept {
    if (this != &other) {
        if (fd_ >= 0)
            ::close(fd_);
        path_ = std::move(other.path_);
        fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
}

history_writer::~history_writer() {
    if (fd_ >= 0)
        ::close(fd_);
}

void history_writer::record(holding const& h) {
    if (fd_ < 0)
        throw std::logic_error("history_writer: record() on a moved-from writer");
    if (auto const why = invalid_reason(h); !why.empty())
        throw std::invalid_argument(
            fmt::format("history_writer: refusing a holding of '{}': {}", h.holder, why));
    std::string const line = fmt::format("{} {} {} {} {} {}\n", h.holder, h.fence, h.token,
                                         h.acquired_ns, h.released_ns, h.lease_end_ns);
    // One write() per line: with O_APPEND the kernel places it whole at the end of the file,
    // whoever else appends. A second write for the rest of a short one could land after another
    // process's line, so a short write is an error (it only happens when the disk is full).
    ssize_t r;
    do {
        r = ::write(fd_, line.data(), line.size());
    } while (r < 0 && errno == EINTR);
    if (r < 0)
        fail_errno("history_writer: cannot write to", path_);
    if (static_cast<std::size_t>(r) != line.size()) {
        errno = ENOSPC;
        fail_errno("history_writer: short write (a torn line) to", path_);
    }
}

std::vector<holding> read_history(std::string const& path) {
    file const f{path, O_RDONLY};
    std::vector<holding> out;
    std::string buf;
    std::size_t line_no = 0;
    constexpr std::size_t chunk = 1 << 20;
    for (;;) {
        std::size_t const old = buf.size();
        buf.resize(old + chunk);
        std::size_t const got = read_some(f.get(), buf.data() + old, chunk, path);
        buf.resize(old + got);
        std::size_t begin = 0;
        for (std::size_t nl; (nl = buf.find('\n', begin)) != std::string::npos; begin = nl + 1) {
            ++line_no;
            std::string_view const line(buf.data() + begin, nl - begin);
            holding h;
            if (auto const why = parse_line(line, h); !why.empty())
                malformed(path, line_no, why, line);
            out.push_back(std::move(h));
        }
        buf.erase(0, begin);
        if (got < chunk)
            break;
    }
    if (!buf.empty())
        malformed(path, line_no + 1, "no newline at the end of the file (a torn write?)", buf);
    return out;
}

// ---- check_history

history_report check_history(std::vector<holding> holdings) {
    // Sort small keys rather than the holdings themselves: no strings move.
    struct key {
        std::int64_t acquired;
        std::int64_t fence;
        std::int64_t end;
        std::size_t index;
    };
    std::vector<key> order;
    order.reserve(holdings.size());
    for (std::size_t i = 0; i < holdings.size(); ++i) {
        holding const& h = holdings[i];
        order.push_back({h.acquired_ns, h.fence, h.end_ns(), i});
    }
    std::sort(order.begin(), order.end(), [&](key const& a, key const& b) {
        if (a.acquired != b.acquired)
            return a.acquired < b.acquired;
        if (a.fence != b.fence)
            return a.fence < b.fence;
        if (a.end != b.end)
            return a.end < b.end;
        return holdings[a.index].holder < holdings[b.index].holder;
    });
    auto nth = [&](std::size_t j) -> holding const& { return holdings[order[j].index]; };

    history_report r;
    r.holdings = holdings.size();
    std::int64_t const t0 = order.empty() ? 0 : order.front().acquired;
    auto problem = [&](auto&& make) {
        if (r.problems.size() < max_problems)
            r.problems.push_back(make());
    };

    // The intervals still open at the current acquisition, as a min-heap of (end, position in
    // acquisition order). An interval leaves it once an acquisition at or after its end comes;
    // whatever is left overlaps the current one. Without overlaps it holds at most one, and an
    // acquisition at or after the latest end so far empties it at once.
    using entry = std::pair<std::int64_t, std::size_t>;
    std::vector<entry> open;
    std::int64_t latest_end = 0; // of the intervals in `open`
    std::vector<std::size_t> firsts;
    // The last tenure that could act: an empty one (its lease over when co_lock returned) did
    // nothing, and its late record says nothing of the order of grants.
    std::optional<std::size_t> last_acting;
    for (std::size_t j = 0; j < order.size(); ++j) {
        key const& cur = order[j];
        bool const acting = cur.end > cur.acquired;
        if (acting && last_acting && cur.fence <= order[*last_acting].fence) {
            ++r.fence_inversions;
            problem([&] {
                holding const& h = nth(j);
                holding const& prev = nth(*last_acting);
                return fmt::format("fence inversion: {} acquired at {} with fence {}, not above "
                                   "fence {} of {} acquired at {}",
                                   h.holder, at(h.acquired_ns, t0), h.fence, prev.fence,
                                   prev.holder, at(prev.acquired_ns, t0));
            });
        }
        if (!open.empty() && latest_end <= cur.acquired)
            open.clear();
        while (!open.empty() && open.front().first <= cur.acquired) {
            std::pop_heap(open.begin(), open.end(), std::greater<>{});
            open.pop_back();
        }
        if (!acting)
            continue; // an empty interval: this holder could not act at all
        last_acting = j;
        if (!open.empty()) {
            r.overlapping_pairs += open.size();
            if (r.overlaps.size() < max_listed_overlaps) {
                firsts.clear();
                for (auto const& e : open)
                    firsts.push_back(e.second);
                std::sort(firsts.begin(), firsts.end());
                for (std::size_t i : firsts) {
                    if (r.overlaps.size() == max_listed_overlaps)
                        break;
                    std::int64_t const both = std::min(order[i].end, cur.end) - cur.acquired;
                    r.overlaps.push_back({nth(i), nth(j), both});
                    problem([&] {
                        return fmt::format("overlap of {}: {} and {}", duration(both),
                                           tenure(nth(i), t0), tenure(nth(j), t0));
                    });
                }
            }
        }
        latest_end = open.empty() ? cur.end : std::max(latest_end, cur.end);
        open.emplace_back(cur.end, j);
        std::push_heap(open.begin(), open.end(), std::greater<>{});
    }
    return r;
}

// ---- fenced_store

fenced_store::fenced_store(std::string path) : path_(std::move(path)) {
    file const f{path_, O_RDWR | O_CREAT};
    lock_file(f.get(), LOCK_SH, path_);
    (void)parse_store(read_all(f.get(), path_), path_); // refuse a file that is not a store
}

bool fenced_store::write(std::int64_t fence, std::string_view value) {
    // No O_CREAT: a store file removed during a run must not come back empty and accept a
    // stale write.
    file const f{path_, O_RDWR};
    lock_file(f.get(), LOCK_EX, path_);
    std::string const old = read_all(f.get(), path_);
    store_state s = parse_store(old, path_);
    bool const accept = s.accepted == 0 || fence >= s.highest;
    if (accept) {
        s.highest = std::max(s.highest, fence);
        s.value.assign(value);
        ++s.accepted;
    } else {
        ++s.refused;
    }
    // One pwrite of the whole state while we hold the lock; a short one is continued (no one
    // else can write meanwhile), a crash in the middle shows as a checksum mismatch.
    std::string const next = serialise(s);
    std::size_t done = 0;
    while (done < next.size()) {
        ssize_t const n =
            ::pwrite(f.get(), next.data() + done, next.size() - done, static_cast<off_t>(done));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fail_errno("fenced_store: cannot write", path_);
        }
        done += static_cast<std::size_t>(n);
    }
    if (next.size() < old.size() && ::ftruncate(f.get(), static_cast<off_t>(next.size())) != 0)
        fail_errno("fenced_store: cannot truncate", path_);
    return accept;
}

std::int64_t fenced_store::highest_fence() const {
    return load_store(path_).highest;
}

std::string fenced_store::value() const {
    return load_store(path_).value;
}

std::uint64_t fenced_store::accepted() const {
    return load_store(path_).accepted;
}

std::uint64_t fenced_store::refused() const {
    return load_store(path_).refused;
}

} // namespace colock::test

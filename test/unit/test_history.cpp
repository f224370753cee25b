// The holder-history checker and the fenced store that reliability tests rely on: if these are
// wrong, a broken lock passes. Each check below fails for a checker that misses an overlap,
// reports a false one, or loses a line or an update between processes.
#include <colock_test/history.hpp>
#include <colock_test/shared_history.hpp>

#include <doctest/doctest.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace colock::test;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t never = std::numeric_limits<std::int64_t>::max();
// Fences as the library makes them: microsecond timestamps, beyond a double's exact integers
// once an offset is added.
constexpr std::int64_t big_fence = 1'800'000'000'000'000;

holding tenure(std::string holder, std::int64_t fence, std::int64_t acquired, std::int64_t released,
               std::int64_t lease_end = never) {
    holding h;
    h.holder = std::move(holder);
    h.fence = fence;
    h.token = "tok-" + h.holder;
    h.acquired_ns = acquired;
    h.released_ns = released;
    h.lease_end_ns = lease_end;
    return h;
}

/// A fresh directory, removed with its files at scope exit.
struct temp_dir {
    fs::path path;
    temp_dir() {
        static std::atomic<int> counter{0};
        path = fs::temp_directory_path() / fmt::format("colock-history-{}-{}-{}", ::getpid(),
                                                       counter++, std::random_device{}());
        fs::create_directories(path);
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    temp_dir(temp_dir const&) = delete;
    temp_dir& operator=(temp_dir const&) = delete;
    std::string file(std::string_view name) const { return (path / name).string(); }
};

void write_file(std::string const& path, std::string_view content) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << content;
}

/// Forks `n` children that all start `body(k)` at once (k = 0..n-1) and waits for them. A child
/// exits 0 when its body returns true. Returns how many children failed.
int run_children(int n, std::function<bool(int)> const& body) {
    int go[2];
    REQUIRE(::pipe(go) == 0);
    std::vector<pid_t> pids;
    for (int k = 0; k < n; ++k) {
        pid_t const pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            ::close(go[1]);
            char c;
            while (::read(go[0], &c, 1) < 0 && errno == EINTR) {
            }
            int rc = 3;
            try {
                rc = body(k) ? 0 : 1;
            } catch (...) {
                rc = 2;
            }
            ::_exit(rc); // no doctest reporting, no destructors, no leak check in the child
        }
        pids.push_back(pid);
    }
    ::close(go[0]);
    ::close(go[1]); // every child's read returns: they start together
    int failed = 0;
    for (pid_t pid : pids) {
        int status = 0;
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            ++failed;
    }
    return failed;
}

std::string error_of(std::function<void()> const& f) {
    try {
        f();
    } catch (std::exception const& e) {
        return e.what();
    }
    return "no error";
}

bool contains(std::string_view s, std::string_view part) {
    return s.find(part) != std::string_view::npos;
}

} // namespace

TEST_CASE("steady_now_ns is the monotonic clock in nanoseconds") {
    std::int64_t const a = steady_now_ns();
    std::int64_t const b = steady_now_ns();
    CHECK(a > 0);
    CHECK(b >= a);
    std::int64_t const ref = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count();
    CHECK(ref >= b);
    CHECK(ref - b < 1'000'000'000);
}

TEST_CASE("end_ns is the earlier of release and lease end") {
    CHECK(tenure("a", 1, 10, 20, 30).end_ns() == 20);
    CHECK(tenure("a", 1, 10, 20, 15).end_ns() == 15);
    CHECK(tenure("a", 1, 10, 20, 20).end_ns() == 20);
}

TEST_CASE("check_history: an empty history and disjoint tenures pass") {
    auto const empty = check_history({});
    CHECK(empty.ok());
    CHECK(empty.holdings == 0);

    auto const r = check_history(
        {tenure("a", 1, 100, 200), tenure("b", 2, 300, 400), tenure("c", 3, 401, 500)});
    CHECK(r.ok());
    CHECK(r.holdings == 3);
    CHECK(r.overlaps.empty());
    CHECK(r.overlapping_pairs == 0);
    CHECK(r.fence_inversions == 0);
    CHECK(r.problems.empty());
}

TEST_CASE("check_history: back-to-back tenures (end == next acquisition) pass") {
    auto const r = check_history(
        {tenure("a", 1, 100, 200), tenure("b", 2, 200, 300), tenure("c", 3, 300, 301, 300)});
    CHECK(r.ok());
    CHECK(r.overlaps.empty());
}

TEST_CASE("check_history: an overlap is found, with its duration, whatever the input order") {
    // b acquires 30 ns before a's release; b's own end is later.
    auto const r = check_history({tenure("b", 2, 170, 400), tenure("a", 1, 100, 200)});
    CHECK_FALSE(r.ok());
    REQUIRE(r.overlaps.size() == 1);
    CHECK(r.overlapping_pairs == 1);
    CHECK(r.overlaps[0].first.holder == "a");
    CHECK(r.overlaps[0].second.holder == "b");
    CHECK(r.overlaps[0].overlap_ns == 30);
    CHECK(r.fence_inversions == 0);
    REQUIRE(r.problems.size() == 1);
    CHECK(contains(r.problems[0], "overlap of 30 ns"));
    CHECK(contains(r.problems[0], "a (fence 1"));
    CHECK(contains(r.problems[0], "b (fence 2"));

    // The second one nested inside the first: the overlap is the second's whole tenure.
    auto const nested = check_history({tenure("a", 1, 100, 500), tenure("b", 2, 200, 260)});
    REQUIRE(nested.overlaps.size() == 1);
    CHECK(nested.overlaps[0].overlap_ns == 60);

    // One nanosecond is enough.
    auto const tiny = check_history({tenure("a", 1, 100, 200), tenure("b", 2, 199, 300)});
    REQUIRE(tiny.overlaps.size() == 1);
    CHECK(tiny.overlaps[0].overlap_ns == 1);

    // The same acquisition time overlaps too.
    auto const same = check_history({tenure("a", 1, 100, 200), tenure("b", 2, 100, 150)});
    REQUIRE(same.overlaps.size() == 1);
    CHECK(same.overlaps[0].overlap_ns == 50);
}

TEST_CASE("check_history: the lease end bounds a holder that kept running past it") {
    // a released at 500 but its lease ended at 200; b acquired at 250, after the lease.
    auto const r = check_history({tenure("a", 1, 100, 500, 200), tenure("b", 2, 250, 400)});
    CHECK(r.ok());
    CHECK(r.overlaps.empty());

    // Acquired before the lease end: the overlap lasts until the lease end, not the release.
    auto const o = check_history({tenure("a", 1, 100, 500, 200), tenure("b", 2, 150, 400)});
    REQUIRE(o.overlaps.size() == 1);
    CHECK(o.overlaps[0].overlap_ns == 50);
    CHECK(contains(o.problems.at(0), "ended by its lease"));

    // The second's own lease end bounds it too.
    auto const p = check_history({tenure("a", 1, 100, 500), tenure("b", 2, 150, 400, 170)});
    REQUIRE(p.overlaps.size() == 1);
    CHECK(p.overlaps[0].overlap_ns == 20);

    // A lease already over when co_lock returned: an empty interval overlaps nothing.
    auto const e = check_history({tenure("a", 1, 100, 500, 90), tenure("b", 2, 150, 400)});
    CHECK(e.ok());
}

TEST_CASE("check_history: every tenure a long one spans is listed, and no pair more") {
    // "long" holds from 100 to 1000; five short ones come and go inside it, one after it.
    std::vector<holding> hs{tenure("long", 1, 100, 1000)};
    for (int i = 0; i < 5; ++i)
        hs.push_back(tenure(fmt::format("s{}", i), 2 + i, 200 + 100 * i, 250 + 100 * i));
    hs.push_back(tenure("after", 10, 1000, 1100));
    // A second long one overlapping the first from 850 to 1000, and "after" from 1000 to 1050.
    hs.push_back(tenure("long2", 9, 850, 1050));
    auto const r = check_history(hs);
    CHECK_FALSE(r.ok());
    REQUIRE(r.overlaps.size() == 7);
    CHECK(r.overlapping_pairs == 7);
    std::vector<std::pair<std::string, std::string>> pairs;
    for (auto const& o : r.overlaps)
        pairs.emplace_back(o.first.holder, o.second.holder);
    std::vector<std::pair<std::string, std::string>> const expected{
        {"long", "s0"}, {"long", "s1"},    {"long", "s2"},    {"long", "s3"},
        {"long", "s4"}, {"long", "long2"}, {"long2", "after"}};
    CHECK(pairs == expected);
    CHECK(r.overlaps[0].overlap_ns == 50);
    CHECK(r.overlaps[5].overlap_ns == 150);
    CHECK(r.overlaps[6].overlap_ns == 50);
    // long2 (fence 9) after s4 (fence 6), then after (fence 10): no inversion.
    CHECK(r.fence_inversions == 0);
    CHECK(r.problems.size() == 7);
}

TEST_CASE("check_history: a fence equal to or below the previous one is an inversion") {
    auto const equal = check_history({tenure("a", 5, 100, 200), tenure("b", 5, 300, 400)});
    CHECK_FALSE(equal.ok());
    CHECK(equal.overlaps.empty());
    CHECK(equal.fence_inversions == 1);
    REQUIRE(equal.problems.size() == 1);
    CHECK(contains(equal.problems[0], "fence inversion: b"));

    auto const lower =
        check_history({tenure("a", big_fence + 7, 100, 200), tenure("b", big_fence + 6, 300, 400),
                       tenure("c", big_fence + 8, 500, 600), tenure("d", big_fence + 1, 700, 800)});
    CHECK(lower.fence_inversions == 2);
    CHECK(lower.overlaps.empty());
    CHECK_FALSE(lower.ok());

    // A tenure whose lease was over when co_lock returned (recorded late, after a later grant)
    // is out of the order; the next one is compared with the last that could act.
    auto const late = check_history(
        {tenure("a", 5, 100, 200), tenure("late", 4, 300, 400, 250), tenure("b", 6, 500, 600)});
    CHECK(late.ok());
    auto const after_late = check_history(
        {tenure("a", 5, 100, 200), tenure("late", 7, 300, 400, 250), tenure("b", 5, 500, 600)});
    CHECK(after_late.fence_inversions == 1);
    REQUIRE(after_late.problems.size() == 1);
    CHECK(contains(after_late.problems[0], "fence 5 of a"));

    // Fences differing only in the last digit of a large value are told apart.
    auto const close =
        check_history({tenure("a", big_fence + 1, 100, 200), tenure("b", big_fence + 2, 300, 400)});
    CHECK(close.ok());
}

TEST_CASE("check_history: problems are capped at 20, overlaps and inversions are all counted") {
    std::vector<holding> hs;
    for (int i = 0; i < 50; ++i)
        hs.push_back(tenure(fmt::format("h{}", i), 1, 100 * i, 100 * i + 150));
    auto const r = check_history(hs);
    CHECK(r.overlaps.size() == 49);
    CHECK(r.overlapping_pairs == 49);
    CHECK(r.fence_inversions == 49);
    CHECK(r.problems.size() == 20);
}

TEST_CASE("check_history: a badly broken lock is counted in full and listed up to the cap") {
    // 2000 tenures all open at once: 1,999,000 overlapping pairs.
    std::vector<holding> hs;
    for (int i = 0; i < 2000; ++i)
        hs.push_back(tenure("h", i + 1, 1000 + i, 1'000'000));
    auto const r = check_history(std::move(hs));
    CHECK(r.overlapping_pairs == 1'999'000);
    CHECK(r.overlaps.size() == max_listed_overlaps);
    CHECK(r.fence_inversions == 0);
    CHECK_FALSE(r.ok());
}

// Only reported, never asserted, how long the checks took: the machine is shared, and a timed
// check failed a loaded run (8.5 s under the sanitizers). A checker that is not O(n log n) does
// not finish 1e6 tenures within the test's timeout.
TEST_CASE("check_history: 1e6 tenures, clean, then with overlaps and a fence out of order") {
    constexpr int n = 1'000'000;
    std::vector<holding> hs;
    hs.reserve(n + 1);
    for (int i = 0; i < n; ++i) {
        std::int64_t const a = 1'000'000'000 + std::int64_t{i} * 1000;
        // Alternately released before the lease end, and released after the next acquisition
        // but bounded by the lease end.
        hs.push_back(tenure(fmt::format("p{}/c{}", i % 8, i % 64), big_fence + i, a,
                            i % 2 ? a + 900 : a + 1500, i % 2 ? a + 1000 : a + 950));
    }
    std::shuffle(hs.begin(), hs.end(), std::mt19937_64{42});

    std::vector<holding> copy = hs;
    auto start = std::chrono::steady_clock::now();
    auto const r = check_history(std::move(copy));
    auto const clean = std::chrono::steady_clock::now() - start;
    CHECK(r.holdings == n);
    CHECK(r.ok());

    // One holder that kept acting for 10 tenures, and one fence out of order.
    hs.push_back(tenure("stray", big_fence + 2 * n, 1'000'000'000 + 500'000'000,
                        1'000'000'000 + 500'010'000));
    start = std::chrono::steady_clock::now();
    auto const bad = check_history(std::move(hs));
    auto const broken = std::chrono::steady_clock::now() - start;
    CHECK(bad.overlapping_pairs == 10);
    CHECK(bad.overlaps.size() == 10);
    CHECK(bad.fence_inversions == 1); // the one after "stray"
    MESSAGE(fmt::format("check_history of 1e6 tenures: {} ms clean, {} ms with overlaps",
                        std::chrono::duration_cast<std::chrono::milliseconds>(clean).count(),
                        std::chrono::duration_cast<std::chrono::milliseconds>(broken).count()));
}

TEST_CASE("history_writer and read_history: a round trip keeps every field exactly") {
    temp_dir dir;
    std::string const path = dir.file("history.txt");
    std::vector<holding> const written{
        tenure("p1/c1", big_fence + 1, 1, 1, 1),
        tenure("p2/c17", std::numeric_limits<std::int64_t>::max(), 9'000'000'000'000'000'001,
               9'000'000'000'000'000'002, never),
        tenure("p3/c4", std::numeric_limits<std::int64_t>::min(), 123'456'789'012'345,
               123'456'789'999'999, 123'456'789'500'000),
        tenure("p3/c5", -1, 5, 6, 7),
    };
    {
        history_writer w{path};
        CHECK(w.path() == path);
        for (auto const& h : written)
            w.record(h);
    }
    CHECK(read_history(path) == written);

    // A second writer appends rather than truncating; a moved writer keeps the file.
    history_writer first{path};
    history_writer second = std::move(first);
    second.record(tenure("late", 3, 10, 20, 30));
    CHECK_THROWS_AS(first.record(tenure("moved", 3, 10, 20, 30)), std::logic_error);
    auto const again = read_history(path);
    REQUIRE(again.size() == written.size() + 1);
    CHECK(again.back().holder == "late");

    write_file(path, "");
    CHECK(read_history(path).empty());
}

TEST_CASE("history_writer refuses holdings that could not be read back or cannot be real") {
    temp_dir dir;
    history_writer w{dir.file("h.txt")};
    auto refusal = [&](holding const& h) {
        try {
            w.record(h);
        } catch (std::invalid_argument const& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    CHECK(refusal(tenure("p1/c1", 1, 10, 20, 30)) == "accepted");
    CHECK(contains(refusal(tenure("p1 c1", 1, 10, 20, 30)), "holder"));
    CHECK(contains(refusal(tenure("", 1, 10, 20, 30)), "holder"));
    holding bad_token = tenure("p1/c1", 1, 10, 20, 30);
    bad_token.token = "a\tb";
    CHECK(contains(refusal(bad_token), "token"));
    bad_token.token.clear();
    CHECK(contains(refusal(bad_token), "token"));
    CHECK(contains(refusal(tenure("p1/c1", 1, 0, 20, 30)), "acquired_ns"));
    CHECK(contains(refusal(tenure("p1/c1", 1, 10, 9, 30)), "released_ns"));
    CHECK(contains(refusal(tenure("p1/c1", 1, 10, 20, 0)), "lease_end_ns"));
    REQUIRE(read_history(w.path()).size() == 1);
}

TEST_CASE("history_writer: lines appended by several processes at once are all intact") {
    temp_dir dir;
    std::string const path = dir.file("shared.txt");
    constexpr int processes = 4;
    constexpr int per_process = 2500;
    // The same file opened once per process, as the reliability runner does.
    auto line_of = [](int k, int i) {
        holding h;
        h.holder = fmt::format("p{}/c{}", k, i % 16);
        h.fence = big_fence + std::int64_t{i} * processes + k;
        h.token = fmt::format("{:016x}{:016x}", 0x9e3779b97f4a7c15u * (i + 1),
                              static_cast<unsigned>(k * 7919 + i));
        h.acquired_ns = 1'000'000'000'000 + std::int64_t{i} * 1'000'003 + k;
        h.released_ns = h.acquired_ns + 700'000 + i;
        h.lease_end_ns = h.acquired_ns + 30'000'000'000;
        return h;
    };
    int const failed = run_children(processes, [&](int k) {
        history_writer w{path};
        for (int i = 0; i < per_process; ++i)
            w.record(line_of(k, i));
        return true;
    });
    REQUIRE(failed == 0);

    auto const all = read_history(path);
    REQUIRE(all.size() == std::size_t{processes} * per_process);
    // Every line exactly once, each process's in its own order.
    std::map<std::int64_t, holding const*> by_fence;
    std::vector<std::int64_t> last(processes, -1);
    bool in_order = true;
    for (auto const& h : all) {
        by_fence.emplace(h.fence, &h);
        int const k = static_cast<int>((h.fence - big_fence) % processes);
        in_order = in_order && h.fence > last[static_cast<std::size_t>(k)];
        last[static_cast<std::size_t>(k)] = h.fence;
    }
    CHECK(in_order);
    REQUIRE(by_fence.size() == all.size());
    int mismatched = 0;
    for (int k = 0; k < processes; ++k) {
        for (int i = 0; i < per_process; ++i) {
            holding const expected = line_of(k, i);
            auto const it = by_fence.find(expected.fence);
            if (it == by_fence.end() || !(*it->second == expected))
                ++mismatched;
        }
    }
    CHECK(mismatched == 0);
}

TEST_CASE("read_history: a malformed line is reported with the file and the line number") {
    temp_dir dir;
    std::string const path = dir.file("bad.txt");
    std::string const good = "p1/c1 1 tok 10 20 30\np1/c2 2 tok 40 50 60\n";
    auto error_for_third_line = [&](std::string_view third) {
        write_file(path, good + std::string(third));
        try {
            read_history(path);
        } catch (std::runtime_error const& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    for (std::string_view bad : {
             "p1/c3 3 tok 70 80\n",                      // a field missing
             "p1/c3 3 tok 70 80 90 100\n",               // one too many
             "p1/c3  3 tok 70 80 90\n",                  // two spaces
             "p1/c3 x tok 70 80 90\n",                   // not a number
             "p1/c3 +3 tok 70 80 90\n",                  // not as written
             "p1/c3 9223372036854775808 tok 70 80 90\n", // beyond int64
             "p1/c3 3 tok 70 80 90\r\n",                 // CRLF
             "p1/c3 3 tok 70 60 90\n",                   // released before acquired
             "p1/c3 3 tok 70 80 0\n",                    // lease end unset
             "\n",                                       // an empty line
             "p1/c3 3 tok 70 80 90",                     // torn: no newline
         }) {
        CAPTURE(bad);
        std::string const e = error_for_third_line(bad);
        CHECK(contains(e, path));
        CHECK(contains(e, "line 3"));
    }
    CHECK(contains(error_for_third_line("p1/c3 3 tok 70 80 90"), "no newline"));
    CHECK(error_for_third_line("p1/c3 3 tok 70 80 90\n") == "no error");

    std::string const missing = dir.file("missing.txt");
    CHECK_THROWS_AS(read_history(missing), std::system_error);
    CHECK(contains(error_of([&] { read_history(missing); }), missing));
    CHECK(contains(error_of([&] { history_writer{dir.file("no/such/dir/h.txt")}; }),
                   "no/such/dir/h.txt"));
}

TEST_CASE("fenced_store accepts equal and higher fences and refuses lower ones") {
    temp_dir dir;
    fenced_store s{dir.file("store")};
    CHECK(s.highest_fence() == std::numeric_limits<std::int64_t>::min());
    CHECK(s.value().empty());
    CHECK(s.accepted() == 0);
    CHECK(s.refused() == 0);

    CHECK(s.write(big_fence + 5, "first"));
    CHECK(s.write(big_fence + 5, "same holder again"));
    CHECK_FALSE(s.write(big_fence + 4, "late write of an earlier holder"));
    CHECK(s.value() == "same holder again");
    CHECK(s.highest_fence() == big_fence + 5);
    CHECK(s.write(big_fence + 6, "next"));
    CHECK_FALSE(s.write(big_fence + 5, "stale"));
    CHECK_FALSE(s.write(std::numeric_limits<std::int64_t>::min(), "stale"));
    CHECK(s.highest_fence() == big_fence + 6);
    CHECK(s.value() == "next");
    CHECK(s.accepted() == 3);
    CHECK(s.refused() == 3);

    // Any bytes, and a shorter value after a longer one.
    std::string const binary("a\nb\0c\n", 6);
    CHECK(s.write(big_fence + 6, binary));
    CHECK(s.value() == binary);
    CHECK(s.write(big_fence + 7, "x"));
    CHECK(s.value() == "x");
    CHECK(s.write(big_fence + 7, ""));
    CHECK(s.value().empty());
    CHECK(s.accepted() == 6);
}

TEST_CASE("fenced_store keeps its state in the file: another object and a reopen see it") {
    temp_dir dir;
    std::string const path = dir.file("store");
    {
        fenced_store a{path};
        CHECK(a.write(big_fence + 10, "v10"));
        CHECK_FALSE(a.write(big_fence + 9, "v9"));
    }
    fenced_store b{path};
    CHECK(b.highest_fence() == big_fence + 10);
    CHECK(b.value() == "v10");
    CHECK(b.accepted() == 1);
    CHECK(b.refused() == 1);
    fenced_store c{path};
    CHECK_FALSE(c.write(big_fence + 8, "v8"));
    CHECK(b.refused() == 2);
    CHECK(b.write(big_fence + 11, "v11"));
    CHECK(c.value() == "v11");
}

TEST_CASE("fenced_store refuses a file that is not a store, or a torn one") {
    temp_dir dir;
    std::string const path = dir.file("store");
    write_file(path, "hello\n");
    std::string e = error_of([&] { fenced_store{path}; });
    CHECK(contains(e, path));
    CHECK(contains(e, "not a fenced_store"));

    fs::remove(path);
    {
        fenced_store s{path};
        CHECK(s.write(big_fence, "a value of some length"));
    }
    // A crash in the middle of the pwrite: the value is cut short, or a byte differs.
    auto const size = fs::file_size(path);
    fs::resize_file(path, size - 3);
    e = error_of([&] { fenced_store{path}.value(); });
    CHECK(contains(e, path));
    CHECK(contains(e, "shorter"));
    fs::resize_file(path, size);
    e = error_of([&] { fenced_store{path}.highest_fence(); });
    CHECK(contains(e, "checksum"));

    // A store removed under a running test is an error, not a fresh store.
    fs::remove(path);
    fenced_store gone{path};
    fs::remove(path);
    CHECK_THROWS_AS(gone.write(big_fence, "x"), std::system_error);
    CHECK(contains(error_of([&] { gone.write(big_fence, "x"); }), path));
    CHECK_FALSE(fs::exists(path));

    std::string const nowhere = dir.file("no/such/dir/store");
    CHECK_THROWS_AS(fenced_store{nowhere}, std::system_error);
    CHECK(contains(error_of([&] { fenced_store{nowhere}; }), nowhere));
}

TEST_CASE("fenced_store: concurrent writers in several processes lose no update") {
    temp_dir dir;
    std::string const path = dir.file("store");
    fenced_store store{path}; // made before the fork: every child uses its copy of this object
    constexpr int processes = 4;
    constexpr int writes = 300;
    int report[2];
    REQUIRE(::pipe(report) == 0);
    int const failed = run_children(processes, [&](int k) {
        std::uint64_t counts[2] = {0, 0}; // accepted, refused
        for (int i = 0; i < writes; ++i) {
            std::int64_t const fence = big_fence + std::int64_t{i} * processes + k;
            bool const ok = store.write(fence, fmt::format("{}:{}", k, i));
            ++counts[ok ? 0 : 1];
        }
        // 16 bytes: one atomic write to the pipe.
        return ::write(report[1], counts, sizeof counts) == sizeof counts;
    });
    ::close(report[1]);
    REQUIRE(failed == 0);
    std::uint64_t accepted = 0;
    std::uint64_t refused = 0;
    for (int k = 0; k < processes; ++k) {
        std::uint64_t counts[2] = {0, 0};
        REQUIRE(::read(report[0], counts, sizeof counts) == sizeof counts);
        accepted += counts[0];
        refused += counts[1];
    }
    ::close(report[0]);

    CHECK(accepted + refused == std::uint64_t{processes} * writes);
    CHECK(store.accepted() == accepted);
    CHECK(store.refused() == refused);
    // The highest fence written is always accepted, and nothing after it was.
    CHECK(store.highest_fence() == big_fence + std::int64_t{writes - 1} * processes + 3);
    CHECK(store.value() == fmt::format("{}:{}", processes - 1, writes - 1));
}

// ---- check_capacity: a semaphore's "at most N at once"

namespace {

/// How many permits are open at instant `t` (a brute-force count).
std::size_t open_at(std::vector<holding> const& hs, std::vector<std::size_t> const& permits,
                    std::int64_t t) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < hs.size(); ++i)
        if (hs[i].acquired_ns <= t && t < hs[i].end_ns())
            n += permits.empty() ? 1 : permits[i];
    return n;
}

} // namespace

TEST_CASE("check_capacity: N at once pass, N + 1 at once are reported with every holder") {
    // Three holders overlapping from 300 to 400, a fourth that comes after the first left.
    std::vector<holding> const three{tenure("a", 1, 100, 400), tenure("b", 2, 200, 500),
                                     tenure("c", 3, 300, 600), tenure("d", 4, 400, 700)};
    auto const ok = check_capacity(three, 3);
    CHECK(ok.ok());
    CHECK(ok.most_at_once == 3);
    CHECK(ok.crowded == 0);
    CHECK(ok.problems.empty());
    // The same history is too much for a capacity of 2.
    auto const two = check_capacity(three, 2);
    CHECK_FALSE(two.ok());
    CHECK(two.crowded == 2); // c's acquisition (a, b, c) and d's (b, c, d)
    REQUIRE(two.crowdings.size() == 2);
    CHECK(two.crowdings[0].at_ns == 300);
    CHECK(two.crowdings[0].permits == 3);
    REQUIRE(two.crowdings[0].holders.size() == 3);
    CHECK(two.crowdings[0].holders[0].holder == "a");
    CHECK(two.crowdings[0].holders[2].holder == "c");
    CHECK(contains(two.problems.at(0), "3 permits held at once (capacity 2)"));

    // d acquired one nanosecond before a's end: four at once.
    auto four = three;
    four[3].acquired_ns = 399;
    auto const over = check_capacity(four, 3);
    CHECK_FALSE(over.ok());
    CHECK(over.crowded == 1);
    CHECK(over.most_at_once == 4);
    REQUIRE(over.crowdings.size() == 1);
    CHECK(over.crowdings[0].holders.size() == 4);
    CHECK(over.crowdings[0].holders.back().holder == "d");
}

TEST_CASE("check_capacity: the lease end bounds a tenure; touching and empty ones overlap none") {
    // a's lease ended at 250 although it released at 900: b, c and d find two open at most.
    std::vector<holding> const hs{tenure("a", 1, 100, 900, 250), tenure("b", 2, 200, 800),
                                  tenure("c", 3, 250, 800), tenure("d", 4, 260, 800, 260)};
    auto const r = check_capacity(hs, 2);
    CHECK(r.ok());
    CHECK(r.most_at_once == 2);
    // Bounded by the release instead, a is still open at c's acquisition: three at once (d
    // holds nothing: its lease was over when it began).
    auto longer = hs;
    longer[0].lease_end_ns = never;
    CHECK(check_capacity(longer, 2).crowded == 1);
    CHECK(check_capacity(longer, 2).most_at_once == 3);
}

TEST_CASE("check_capacity: a holding counts its permits") {
    std::vector<holding> const hs{tenure("a", 1, 100, 400), tenure("b", 2, 200, 500),
                                  tenure("c", 3, 300, 600)};
    CHECK(check_capacity(hs, 4, {2, 1, 1}).ok());
    CHECK(check_capacity(hs, 4, {2, 1, 1}).most_at_once == 4);
    auto const r = check_capacity(hs, 4, {2, 2, 1});
    CHECK_FALSE(r.ok());
    CHECK(r.most_at_once == 5);
    CHECK_THROWS_AS(check_capacity(hs, 4, {1, 1}), std::invalid_argument);
}

TEST_CASE("check_capacity: fences given twice, and within a holder not increasing, are reported") {
    // Across holders, fences out of acquisition order are no problem: two grants close
    // together may return in either order.
    CHECK(check_capacity({tenure("a", 9, 100, 200), tenure("b", 8, 150, 300)}, 2).ok());
    auto const twice = check_capacity({tenure("a", 9, 100, 200), tenure("b", 9, 150, 300)}, 2);
    CHECK(twice.fence_repeats == 1);
    CHECK_FALSE(twice.ok());
    CHECK(contains(twice.problems.at(0), "fence 9 given twice"));
    auto h1 = tenure("a", big_fence + 2, 100, 200);
    auto h2 = tenure("a", big_fence + 1, 300, 400);
    auto const inverted = check_capacity({h2, h1}, 1);
    CHECK(inverted.fence_inversions == 1);
    CHECK(inverted.crowded == 0);
    CHECK_FALSE(inverted.ok());
    // The same fence twice within a holder: given twice, and not increasing.
    auto const same = check_capacity({h1, tenure("a", big_fence + 2, 300, 400)}, 1);
    CHECK(same.fence_inversions == 1);
    CHECK(same.fence_repeats == 1);
}

TEST_CASE("check_capacity agrees with a brute-force count on random histories") {
    std::mt19937_64 rng(42);
    for (int round = 0; round < 200; ++round) {
        std::vector<holding> hs;
        std::vector<std::size_t> permits;
        int const n = static_cast<int>(rng() % 30) + 1;
        for (int i = 0; i < n; ++i) {
            std::int64_t const a = 1 + static_cast<std::int64_t>(rng() % 1000);
            std::int64_t const len = static_cast<std::int64_t>(rng() % 200) - 20;
            std::int64_t const release = a + std::max<std::int64_t>(0, len);
            std::int64_t const lease = rng() % 3 == 0 ? a + len : never;
            hs.push_back(
                tenure(fmt::format("h{}", i), i + 1, a, release, std::max<std::int64_t>(1, lease)));
            permits.push_back(1 + rng() % 2);
        }
        std::size_t const capacity = 1 + rng() % 5;
        // The most at once is reached at some acquisition; count there.
        std::size_t most = 0;
        for (auto const& h : hs) {
            if (!h.could_act())
                continue;
            most = std::max(most, open_at(hs, permits, h.acquired_ns));
        }
        auto const r = check_capacity(hs, capacity, permits);
        CHECK(r.most_at_once == most);
        CHECK((r.crowded == 0) == (most <= capacity));
    }
}

// ---- check_rw_history: readers together, a writer alone, readers carrying their writer's fence

TEST_CASE("check_rw_history: readers may overlap each other, a writer nothing") {
    // Writer 10, then three readers together with its fence, then writer 20.
    std::vector<holding> const writers{tenure("w1", 10, 100, 200), tenure("w2", 20, 600, 700)};
    std::vector<holding> const readers{tenure("r1", 10, 250, 500), tenure("r2", 10, 300, 550),
                                       tenure("r3", 10, 350, 600)};
    auto const ok = check_rw_history(readers, writers);
    CHECK(ok.ok());
    CHECK(ok.most_readers_at_once == 3);
    CHECK(ok.readers_checked == 3);
    CHECK(ok.readers_exact == 3);
    CHECK(ok.problems.empty());

    // The second writer acquires while r3 still reads.
    auto w = writers;
    w[1].acquired_ns = 590;
    auto const reader_overlap = check_rw_history(readers, w);
    CHECK_FALSE(reader_overlap.ok());
    CHECK(reader_overlap.overlapping_pairs == 1);
    REQUIRE(reader_overlap.overlaps.size() == 1);
    CHECK(reader_overlap.overlaps[0].first.holder == "r3");
    CHECK(reader_overlap.overlaps[0].overlap_ns == 10);

    // A reader acquires while a writer writes: r0 at 150, inside w1.
    auto r = readers;
    r.push_back(tenure("r0", 0, 150, 260));
    auto const in_writer = check_rw_history(r, writers);
    CHECK(in_writer.overlapping_pairs == 1);
    CHECK(contains(in_writer.problems.at(0), "writer w1"));

    // Two writers at once.
    auto const writers_overlap =
        check_rw_history({}, {tenure("w1", 10, 100, 200), tenure("w2", 20, 199, 300)});
    CHECK(writers_overlap.overlapping_pairs == 1);
    CHECK_FALSE(writers_overlap.ok());
}

TEST_CASE("check_rw_history: writers' fences increase; a reader's sits between its writers'") {
    auto const inverted =
        check_rw_history({}, {tenure("w1", 20, 100, 200), tenure("w2", 10, 300, 400)});
    CHECK(inverted.writer_fence_inversions == 1);
    CHECK_FALSE(inverted.ok());
    // An empty writer tenure (its lease over at the return) is left out of the order.
    CHECK(check_rw_history({}, {tenure("w1", 20, 100, 200), tenure("w2", 10, 300, 400, 300),
                                tenure("w3", 30, 500, 600)})
              .ok());

    std::vector<holding> const writers{tenure("w1", 10, 100, 200), tenure("w2", 20, 600, 700)};
    // Below the writer that ended before it.
    auto const low = check_rw_history({tenure("r", 5, 300, 400)}, writers);
    CHECK(low.reader_fences_low == 1);
    CHECK_FALSE(low.ok());
    // The fence of a writer that came after it.
    auto const high = check_rw_history({tenure("r", 20, 300, 400)}, writers);
    CHECK(high.reader_fences_high == 1);
    CHECK_FALSE(high.ok());
    // A ghost writer's fence in between (granted, its reply lost, given back): allowed, not
    // exact.
    auto const between = check_rw_history({tenure("r", 15, 300, 400)}, writers);
    CHECK(between.ok());
    CHECK(between.readers_exact == 0);
    // Fence 0 after a writer: only when the keys may have lapsed in between, at an instant past
    // the lease end of every tenure acquired before it (w1's lease ended at 250).
    std::vector<holding> const leased{tenure("w1", 10, 100, 200, 250), writers[1]};
    auto const lapse = check_rw_history({tenure("r", 0, 300, 400)}, leased);
    CHECK(lapse.ok());
    CHECK(lapse.readers_after_lapse == 1);
    // Not with w1's lease running to 300: the reader began at 300.
    auto const no_gap =
        check_rw_history({tenure("r", 0, 300, 400)}, {tenure("w1", 10, 100, 200, 300), writers[1]});
    CHECK(no_gap.reader_fences_low == 1);
    CHECK_FALSE(no_gap.ok());
    // Nor with another reader acquired in between whose lease ran past it.
    auto const covered =
        check_rw_history({tenure("r0", 10, 205, 320), tenure("r", 0, 300, 400)}, leased);
    CHECK(covered.reader_fences_low == 1);
    CHECK(covered.readers_exact == 1);
    // An empty writer (its lease over at its return) does not bound a reader from below.
    auto const empty_writer = check_rw_history(
        {tenure("r", 10, 300, 400)}, {tenure("w1", 10, 100, 200), tenure("w0", 30, 150, 250, 140)});
    CHECK(empty_writer.ok());
    // A reader whose own lease was over at its return is not checked.
    auto const empty_reader = check_rw_history({tenure("r", 5, 300, 400, 300)}, writers);
    CHECK(empty_reader.ok());
    CHECK(empty_reader.readers_checked == 0);
}

TEST_CASE("check_rw_history: a downgrade is a writer's tenure, then a reader's with its fence") {
    // w1 writes until 200, calls co_downgrade, reads from its return at 210 with fence 10; r2
    // joins at 205 (the queued readers are let in by the downgrade).
    auto const r = check_rw_history({tenure("w1-read", 10, 210, 400), tenure("r2", 10, 205, 300)},
                                    {tenure("w1", 10, 100, 200), tenure("w2", 20, 400, 500)});
    CHECK(r.ok());
    CHECK(r.readers_exact == 2);
    CHECK(r.most_readers_at_once == 2);
}

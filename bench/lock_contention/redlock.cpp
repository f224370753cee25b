// The side-by-side table of --redlock: each shape (S1, S3, S3 with cohorts off, S4; S2 when it
// ran) on independent primaries next to the same shape on the single server, from the same run:
// cycles/s, the ratio deployment/single, and the server calls per cycle summed over the
// deployment's servers (INFO commandstats, which counts the calls made inside scripts too).
// The target: with cohorts on, S3 over 3 primaries stays within 0.5x of S3 over one.
#include "lock_contention.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace colock::bench::contention {
namespace {

constexpr std::string_view single_name = "single";
constexpr std::string_view target_shape = "S3"; // the shape the target is about
constexpr double target_ratio = 0.5;

struct side_row {
    side_figure single, other;
    double ratio() const {
        return single.cycles_per_s > 0 ? other.cycles_per_s / single.cycles_per_s : 0.0;
    }
    // Where the target applies: S3, cohorts on, over Redlock primaries.
    bool has_target() const { return other.shape == target_shape && other.deployment == "redlock"; }
};

/// One row per shape and deployment other than the single server, in the order they ran; a
/// shape that did not run on the single server has no row.
std::vector<side_row> pair_up(std::vector<side_figure> const& figures) {
    std::vector<side_row> rows;
    for (auto const& f : figures) {
        if (f.deployment == single_name)
            continue;
        auto const single = std::find_if(figures.begin(), figures.end(), [&](auto const& s) {
            return s.deployment == single_name && s.shape == f.shape;
        });
        if (single != figures.end())
            rows.push_back({*single, f});
    }
    return rows;
}

void print_json(side_row const& row, options const& opts) {
    fmt::print("{{\"scenario\":\"side_by_side\",\"shape\":\"{}\",\"deployment\":\"{}\","
               "\"mode\":\"{}\",\"cycles_per_s\":{:.1f},\"single_cycles_per_s\":{:.1f},"
               "\"{}_over_single\":{:.4f},\"calls_per_cycle\":{:.4f},"
               "\"single_calls_per_cycle\":{:.4f},\"lock_calls_per_cycle\":{:.4f},"
               "\"single_lock_calls_per_cycle\":{:.4f}{}}}\n",
               row.other.shape, row.other.deployment, opts.mode(), row.other.cycles_per_s,
               row.single.cycles_per_s, row.other.deployment, row.ratio(),
               row.other.calls_per_cycle, row.single.calls_per_cycle,
               row.other.lock_calls_per_cycle, row.single.lock_calls_per_cycle,
               row.has_target() ? fmt::format(",\"target_ratio\":{},\"target_met\":{}",
                                              target_ratio, row.ratio() >= target_ratio)
                                : std::string());
}

} // namespace

void report_side_by_side(std::vector<side_figure> const& figures, options const& opts) {
    auto const rows = pair_up(figures);
    if (opts.json) {
        for (auto const& row : rows)
            print_json(row, opts);
        std::fflush(stdout);
        return;
    }

    fmt::print("\n== side by side: each shape on one server and on {} independent primaries "
               "(Redlock), in this run (mode {})\n",
               opts.redlock_primaries, opts.mode());
    fmt::print("  {:<16} {:>10} {:>12} {:>12} {:>9}   {:>12} {:>12}\n", "shape", "deployment",
               "single/s", "other/s", "ratio", "calls single", "calls other");
    bool section_calls = false;
    for (auto const& row : rows) {
        // S4's counter GET and SET are the critical section's, not the lock's: left out here.
        bool const without_section = row.other.lock_calls_per_cycle != row.other.calls_per_cycle;
        section_calls = section_calls || without_section;
        fmt::print("  {:<16} {:>10} {:>12.0f} {:>12.0f} {:>9.3f}   {:>12.3f} {:>12.3f}{}\n",
                   row.other.shape, row.other.deployment, row.single.cycles_per_s,
                   row.other.cycles_per_s, row.ratio(), row.single.lock_calls_per_cycle,
                   row.other.lock_calls_per_cycle, without_section ? " *" : "");
    }
    fmt::print("  ratio = other/single cycles/s; calls = server calls per cycle, summed over the "
               "deployment's servers, calls inside scripts included\n");
    if (section_calls)
        fmt::print("  * without the critical section's counter GET and SET (2 per cycle)\n");
    for (auto const& row : rows)
        if (row.has_target())
            fmt::print("  target: {} over {} primaries within {}x of one server (cohorts on): "
                       "{:.3f} => {}\n",
                       target_shape, opts.redlock_primaries, target_ratio, row.ratio(),
                       row.ratio() >= target_ratio ? "met" : "MISSED");
    std::fflush(stdout);
}

} // namespace colock::bench::contention

#include "lock/quorum/quorum.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace colock::detail::quorum {

milliseconds clock_drift(milliseconds ttl) noexcept {
    // ttl / 100, rounded up, without overflowing near milliseconds::max().
    auto const count = ttl.count();
    auto const percent = count / 100 + (count % 100 > 0 ? 1 : 0);
    return milliseconds(percent + 2);
}

milliseconds attempt_timeout(milliseconds ttl) noexcept {
    return std::clamp(ttl / 10, milliseconds(50), milliseconds(1000));
}

milliseconds validity(milliseconds ttl, milliseconds elapsed) noexcept {
    auto const drift = clock_drift(ttl);
    if (elapsed.count() < 0)
        elapsed = milliseconds(0);
    // ttl − elapsed − drift, saturating instead of overflowing.
    if (elapsed >= ttl || ttl - elapsed <= drift)
        return milliseconds(0);
    return ttl - elapsed - drift;
}

grant_decision decide_grant(std::span<grant_vote const> votes, milliseconds ttl,
                            milliseconds elapsed) {
    grant_decision d;
    auto const n = votes.size();
    std::size_t granted = 0;
    std::int64_t fence = 0;
    std::vector<milliseconds> held;
    for (auto const& v : votes) {
        if (v.what == grant_vote::kind::granted) {
            ++granted;
            fence = std::max(fence, v.fence);
        } else if (v.what == grant_vote::kind::held) {
            held.push_back(std::max(v.holder_ttl, milliseconds(0)));
        }
    }
    auto const safe_for = validity(ttl, elapsed);
    if (n > 0 && granted >= majority(n) && safe_for.count() > 0) {
        d.granted = true;
        d.validity = safe_for;
        d.fence = fence;
        return d;
    }
    for (std::size_t i = 0; i < n; ++i)
        if (votes[i].what == grant_vote::kind::granted ||
            votes[i].what == grant_vote::kind::unknown)
            d.release.push_back(i);
    // Every primary not held by another is one a new attempt may win (ours are released now,
    // and an unanswered one may answer next time). A majority needs that many more of the
    // held ones to lapse: the earliest time that happens is the k-th shortest holder's ttl.
    auto const open = n - held.size();
    if (n > 0 && open < majority(n)) {
        auto const k = majority(n) - open; // 1 <= k <= held.size()
        std::nth_element(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(k - 1),
                         held.end());
        d.retry_after = held[k - 1];
    }
    return d;
}

bool extension_holds(std::size_t confirmed, std::size_t primaries, milliseconds ttl,
                     milliseconds elapsed) noexcept {
    return primaries > 0 && confirmed >= majority(primaries) && validity(ttl, elapsed).count() > 0;
}

void check_primaries(std::span<std::string const> run_ids) {
    auto const n = run_ids.size();
    if (n < 3)
        throw std::invalid_argument(
            fmt::format("colock: Redlock needs at least 3 independent primaries; {} given", n));
    if (n % 2 == 0)
        throw std::invalid_argument(fmt::format(
            "colock: Redlock needs an odd number of primaries; {} given ({} tolerate no more "
            "failed primaries than {} do)",
            n, n, n - 1));
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = i + 1; j < n; ++j)
            if (!run_ids[i].empty() && run_ids[i] == run_ids[j])
                throw std::invalid_argument(fmt::format(
                    "colock: Redlock primaries {} and {} are the same server (run_id {}); each "
                    "must be an independent primary",
                    i + 1, j + 1, run_ids[i]));
}

} // namespace colock::detail::quorum

#include <colock_test/shared_history.hpp>

#include "history_text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <utility>

namespace colock::test {
namespace {

using detail::at;
using detail::max_problems;
using detail::tenure;

/// The holdings' indices in acquisition order (ties by fence, then end).
std::vector<std::size_t> by_acquisition(std::vector<holding> const& hs) {
    std::vector<std::size_t> order(hs.size());
    for (std::size_t i = 0; i < hs.size(); ++i)
        order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        holding const& x = hs[a];
        holding const& y = hs[b];
        if (x.acquired_ns != y.acquired_ns)
            return x.acquired_ns < y.acquired_ns;
        if (x.fence != y.fence)
            return x.fence < y.fence;
        return x.end_ns() < y.end_ns();
    });
    return order;
}

std::int64_t first_acquisition(std::vector<holding> const& hs) {
    std::int64_t t0 = std::numeric_limits<std::int64_t>::max();
    for (auto const& h : hs)
        t0 = std::min(t0, h.acquired_ns);
    return hs.empty() ? 0 : t0;
}

} // namespace

// ---- check_capacity

capacity_report check_capacity(std::vector<holding> holdings, std::size_t capacity,
                               std::vector<std::size_t> const& permits) {
    if (!permits.empty() && permits.size() != holdings.size())
        throw std::invalid_argument(fmt::format("check_capacity: {} permit counts for {} holdings",
                                                permits.size(), holdings.size()));
    auto weight = [&](std::size_t i) { return permits.empty() ? std::size_t{1} : permits[i]; };
    capacity_report r;
    r.holdings = holdings.size();
    r.capacity = capacity;
    std::int64_t const t0 = first_acquisition(holdings);
    auto problem = [&](auto&& make) {
        if (r.problems.size() < max_problems)
            r.problems.push_back(make());
    };
    auto const order = by_acquisition(holdings);

    // The sweep: the intervals open at the current acquisition in a min-heap by end, with the
    // permits they hold together.
    using entry = std::pair<std::int64_t, std::size_t>; // end, index in `holdings`
    std::vector<entry> open;
    std::size_t held = 0;
    for (std::size_t i : order) {
        holding const& cur = holdings[i];
        while (!open.empty() && open.front().first <= cur.acquired_ns) {
            held -= weight(open.front().second);
            std::pop_heap(open.begin(), open.end(), std::greater<>{});
            open.pop_back();
        }
        if (!cur.could_act())
            continue;
        open.emplace_back(cur.end_ns(), i);
        std::push_heap(open.begin(), open.end(), std::greater<>{});
        held += weight(i);
        r.most_at_once = std::max(r.most_at_once, held);
        if (held <= capacity)
            continue;
        ++r.crowded;
        if (r.crowdings.size() < max_listed_crowdings) {
            crowding c;
            c.at_ns = cur.acquired_ns;
            c.permits = held;
            std::vector<std::size_t> members;
            for (auto const& e : open)
                members.push_back(e.second);
            std::sort(members.begin(), members.end(), [&](std::size_t a, std::size_t b) {
                return holdings[a].acquired_ns < holdings[b].acquired_ns;
            });
            for (std::size_t m : members)
                c.holders.push_back(holdings[m]);
            problem([&] {
                std::string line = fmt::format("{} permits held at once (capacity {}) at {}:", held,
                                               capacity, at(cur.acquired_ns, t0));
                for (std::size_t m : members)
                    line += fmt::format(" {} x{}", tenure(holdings[m], t0), weight(m));
                return line;
            });
            r.crowdings.push_back(std::move(c));
        }
    }

    // Every fence once.
    std::vector<std::pair<std::int64_t, std::size_t>> fences;
    for (std::size_t i = 0; i < holdings.size(); ++i)
        fences.emplace_back(holdings[i].fence, i);
    std::sort(fences.begin(), fences.end());
    for (std::size_t k = 1; k < fences.size(); ++k) {
        if (fences[k].first != fences[k - 1].first)
            continue;
        ++r.fence_repeats;
        problem([&] {
            return fmt::format("fence {} given twice: {} and {}", fences[k].first,
                               tenure(holdings[fences[k - 1].second], t0),
                               tenure(holdings[fences[k].second], t0));
        });
    }

    // Each holder's fences increasing.
    std::map<std::string, std::size_t> last; // holder -> its previous holding
    for (std::size_t i : order) {
        holding const& cur = holdings[i];
        auto [it, first] = last.try_emplace(cur.holder, i);
        if (first)
            continue;
        holding const& prev = holdings[it->second];
        if (cur.fence <= prev.fence) {
            ++r.fence_inversions;
            problem([&] {
                return fmt::format("fence inversion within {}: {} after {}", cur.holder,
                                   tenure(cur, t0), tenure(prev, t0));
            });
        }
        it->second = i;
    }
    return r;
}

// ---- check_rw_history

rw_report check_rw_history(std::vector<holding> readers, std::vector<holding> writers) {
    rw_report r;
    r.readers = readers.size();
    r.writers = writers.size();
    // One list, writers first: index < writers.size() is a writer.
    std::vector<holding> all = std::move(writers);
    std::size_t const nw = all.size();
    all.insert(all.end(), std::make_move_iterator(readers.begin()),
               std::make_move_iterator(readers.end()));
    auto is_writer = [&](std::size_t i) { return i < nw; };
    std::int64_t const t0 = first_acquisition(all);
    auto problem = [&](auto&& make) {
        if (r.problems.size() < max_problems)
            r.problems.push_back(make());
    };
    auto const order = by_acquisition(all);

    // Exclusion: the sweep of check_capacity, every open interval listed against a writer, and
    // the open writers against a reader.
    using entry = std::pair<std::int64_t, std::size_t>;
    std::vector<entry> open;
    std::size_t open_readers = 0;
    for (std::size_t i : order) {
        holding const& cur = all[i];
        while (!open.empty() && open.front().first <= cur.acquired_ns) {
            open_readers -= is_writer(open.front().second) ? 0 : 1;
            std::pop_heap(open.begin(), open.end(), std::greater<>{});
            open.pop_back();
        }
        if (!cur.could_act())
            continue;
        std::vector<std::size_t> firsts;
        for (auto const& e : open)
            if (is_writer(i) || is_writer(e.second))
                firsts.push_back(e.second);
        std::sort(firsts.begin(), firsts.end(), [&](std::size_t a, std::size_t b) {
            return all[a].acquired_ns < all[b].acquired_ns;
        });
        r.overlapping_pairs += firsts.size();
        for (std::size_t f : firsts) {
            if (r.overlaps.size() == max_listed_overlaps)
                break;
            std::int64_t const both = std::min(all[f].end_ns(), cur.end_ns()) - cur.acquired_ns;
            r.overlaps.push_back({all[f], cur, both});
            problem([&] {
                return fmt::format("{} {} and {} {} overlap for {} ns",
                                   is_writer(f) ? "writer" : "reader", tenure(all[f], t0),
                                   is_writer(i) ? "writer" : "reader", tenure(cur, t0), both);
            });
        }
        open.emplace_back(cur.end_ns(), i);
        std::push_heap(open.begin(), open.end(), std::greater<>{});
        if (!is_writer(i))
            r.most_readers_at_once = std::max(r.most_readers_at_once, ++open_readers);
    }

    // Writers' fences in acquisition order.
    std::size_t prev = nw;
    for (std::size_t i : order) {
        if (!is_writer(i) || !all[i].could_act())
            continue;
        if (prev != nw && all[i].fence <= all[prev].fence) {
            ++r.writer_fence_inversions;
            problem([&] {
                return fmt::format("writer fence inversion: {} after {}", tenure(all[i], t0),
                                   tenure(all[prev], t0));
            });
        }
        prev = i;
    }

    // The writers by end: before a reader's start, the largest fence of a non-empty one (and
    // the latest end among those); from it on, the smallest fence of any.
    std::vector<std::size_t> by_end(nw);
    for (std::size_t i = 0; i < nw; ++i)
        by_end[i] = i;
    std::sort(by_end.begin(), by_end.end(),
              [&](std::size_t a, std::size_t b) { return all[a].end_ns() < all[b].end_ns(); });
    std::vector<std::size_t> low(nw + 1, nw); // low[k]: the max-fence non-empty one in by_end[..k)
    std::vector<std::int64_t> latest(nw + 1, 0); // its latest end among non-empty ones
    for (std::size_t k = 0; k < nw; ++k) {
        low[k + 1] = low[k];
        latest[k + 1] = latest[k];
        std::size_t const w = by_end[k];
        if (!all[w].could_act())
            continue;
        latest[k + 1] = all[w].end_ns();
        if (low[k] == nw || all[w].fence > all[low[k]].fence)
            low[k + 1] = w;
    }
    std::vector<std::size_t> high(nw + 1, nw); // high[k]: the min-fence one in by_end[k..)
    for (std::size_t k = nw; k-- > 0;) {
        std::size_t const w = by_end[k];
        high[k] = high[k + 1] == nw || all[w].fence < all[high[k + 1]].fence ? w : high[k + 1];
    }
    // The instants at which the lock's keys may have lapsed: later than the lease end of every
    // tenure acquired before them (the keys outlive every grant and renewal by a lease).
    // Between acquisitions j and j + 1 (by time) that is (max(their lease ends, a_j), a_j+1].
    std::vector<std::pair<std::int64_t, std::int64_t>> quiet; // (after, until], in order
    {
        std::int64_t lease_ends = std::numeric_limits<std::int64_t>::min();
        for (std::size_t j = 0; j <= order.size(); ++j) {
            std::int64_t const until = j < order.size() ? all[order[j]].acquired_ns
                                                        : std::numeric_limits<std::int64_t>::max();
            if (lease_ends < until)
                quiet.emplace_back(lease_ends, until);
            if (j < order.size())
                lease_ends =
                    std::max({lease_ends, all[order[j]].lease_end_ns, all[order[j]].acquired_ns});
        }
    }
    // Whether such an instant lies in [from, to).
    auto lapse_between = [&](std::int64_t from, std::int64_t to) {
        auto it = std::lower_bound(quiet.begin(), quiet.end(), from,
                                   [](auto const& q, std::int64_t t) { return q.second < t; });
        for (; it != quiet.end() && it->first + 1 < to; ++it)
            if (std::max(it->first + 1, from) <= std::min(it->second, to - 1))
                return true;
        return false;
    };
    for (std::size_t i = nw; i < all.size(); ++i) {
        holding const& rd = all[i];
        if (!rd.could_act())
            continue;
        ++r.readers_checked;
        auto const k = static_cast<std::size_t>(
            std::lower_bound(by_end.begin(), by_end.end(), rd.acquired_ns,
                             [&](std::size_t w, std::int64_t t) { return all[w].end_ns() < t; }) -
            by_end.begin());
        if (low[k] != nw) {
            holding const& w = all[low[k]];
            if (rd.fence == w.fence)
                ++r.readers_exact;
            if (rd.fence < w.fence) {
                if (rd.fence == 0 && lapse_between(latest[k], rd.acquired_ns)) {
                    ++r.readers_after_lapse;
                } else {
                    ++r.reader_fences_low;
                    problem([&] {
                        return fmt::format("reader {} has a fence below writer {}, which ended "
                                           "before it began",
                                           tenure(rd, t0), tenure(w, t0));
                    });
                }
            }
        } else if (rd.fence == 0) {
            ++r.readers_exact; // no writer before it
        }
        if (high[k] != nw && rd.fence >= all[high[k]].fence) {
            ++r.reader_fences_high;
            problem([&] {
                return fmt::format("reader {} has a fence not below writer {}, which had not "
                                   "ended when it began",
                                   tenure(rd, t0), tenure(all[high[k]], t0));
            });
        }
    }
    return r;
}

} // namespace colock::test

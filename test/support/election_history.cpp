#include <colock_test/election_history.hpp>

#include "history_text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <utility>

namespace colock::test {

namespace {

using detail::max_problems;

using change_key = std::pair<std::int64_t, std::size_t>; // (term, value index)

} // namespace

std::optional<std::pair<std::string, std::size_t>> parse_campaign_value(std::string_view value) {
    auto const slash = value.rfind("/v");
    if (slash == std::string_view::npos || slash == 0)
        return std::nullopt;
    auto const id = value.substr(0, slash);
    if (id.find('/') != std::string_view::npos)
        return std::nullopt;
    auto const digits = value.substr(slash + 2);
    std::size_t index = 0;
    auto const [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size())
        return std::nullopt;
    return std::pair{std::string(id), index};
}

watch_report check_watch(std::vector<campaign_record> const& campaigns,
                         std::vector<watch_event> const& events) {
    watch_report r;
    r.events = events.size();
    auto problem = [&r](std::string text) {
        ++r.violations;
        if (r.problems.size() < max_problems)
            r.problems.push_back(std::move(text));
    };
    std::map<std::string, campaign_record const*> by_id;
    std::map<std::int64_t, std::string> owner_of_term; // the terms co_campaign returned
    for (auto const& c : campaigns) {
        by_id[c.id] = &c;
        if (c.term && !owner_of_term.emplace(*c.term, c.id).second)
            problem(fmt::format("term {} returned to two campaigns, {} and {}", *c.term,
                                owner_of_term[*c.term], c.id));
    }

    // 1 and 2, in the order of the reports; the leaders' keys with their positions for 3.
    std::vector<std::pair<change_key, std::size_t>> reported;
    std::map<std::string, std::int64_t> unlearned; // campaign -> the term reported for it
    std::optional<change_key> last;
    for (std::size_t i = 0; i < events.size(); ++i) {
        auto const& e = events[i];
        r.resyncs += e.resynced ? 1 : 0;
        if (!e.leading) {
            // After a gap it may name a later term, one the watch learned of only by the
            // lock's fence (a term that came and went unseen).
            if (last && e.term != last->first && !(e.resynced && e.term > last->first))
                problem(fmt::format("report {}: nobody leads after term {}, but the last leader "
                                    "reported had term {}",
                                    i, e.term, last->first));
            continue;
        }
        ++r.leaders;
        auto const parsed = parse_campaign_value(e.value);
        auto const it = parsed ? by_id.find(parsed->first) : by_id.end();
        if (it == by_id.end()) {
            problem(fmt::format("report {}: leader '{}' (term {}) is no campaign's value", i,
                                e.value, e.term));
            continue;
        }
        auto const& c = *it->second;
        auto const index = parsed->second;
        if (index >= c.published.size())
            problem(fmt::format("report {}: campaign {} never proclaimed value {} (term {})", i,
                                c.id, index, e.term));
        if (c.term) {
            if (e.term != *c.term)
                problem(fmt::format("report {}: campaign {} leads at term {}, reported as term {}",
                                    i, c.id, *c.term, e.term));
        } else {
            auto const [seen, fresh] = unlearned.emplace(c.id, e.term);
            if (fresh) {
                ++r.unlearned_terms;
                if (auto const o = owner_of_term.find(e.term); o != owner_of_term.end())
                    problem(fmt::format("report {}: term {} reported for campaign {}, which "
                                        "never learned it led, but returned to campaign {}",
                                        i, e.term, c.id, o->second));
            } else if (seen->second != e.term) {
                problem(fmt::format("report {}: campaign {} reported with terms {} and {}", i, c.id,
                                    seen->second, e.term));
            }
        }
        change_key const key{e.term, index};
        if (last && !(key > *last))
            problem(fmt::format("report {}: term {} value {} after term {} value {}: out of order",
                                i, key.first, key.second, last->first, last->second));
        last = key;
        reported.emplace_back(key, i);
    }

    // 3. Each change a campaigner learned of: reported, or a resync where it would be.
    for (auto const& c : campaigns) {
        if (!c.term)
            continue;
        for (std::size_t index = 0; index < c.published.size(); ++index) {
            if (!c.published[index])
                continue;
            ++r.published;
            change_key const key{*c.term, index};
            auto const next = std::lower_bound(
                reported.begin(), reported.end(), key,
                [](auto const& entry, change_key const& k) { return entry.first < k; });
            if (next != reported.end() && next->first == key)
                continue;
            // Reports after the one before it, up to the one after it (or the end).
            std::size_t const from = next == reported.begin() ? 0 : std::prev(next)->second + 1;
            std::size_t const to = next == reported.end() ? events.size() : next->second + 1;
            bool const resynced = std::any_of(events.begin() + static_cast<std::ptrdiff_t>(from),
                                              events.begin() + static_cast<std::ptrdiff_t>(to),
                                              [](watch_event const& e) { return e.resynced; });
            if (resynced)
                ++r.missed_with_resync;
            else
                problem(fmt::format("term {} value {} (campaign {}) was published and never "
                                    "reported, with no resync between reports {} and {}",
                                    key.first, key.second, c.id, from, to));
        }
    }
    return r;
}

} // namespace colock::test

#include "election_journal.hpp"

#include <fmt/format.h>

#include <map>

namespace colock::reliability {

void election_journal_writer::campaigning(std::string const& id) {
    out_.append(fmt::format("c {}\n", id));
}

void election_journal_writer::granted(std::string const& id, std::int64_t term,
                                      std::string const& token, std::int64_t acquired_ns) {
    out_.append(fmt::format("g {} {} {} {}\n", id, term, token, acquired_ns));
}

void election_journal_writer::proclaiming(std::string const& id, std::size_t index) {
    out_.append(fmt::format("v {} {}\n", id, index));
}

void election_journal_writer::proclaimed(std::string const& id, std::size_t index) {
    out_.append(fmt::format("p {} {}\n", id, index));
}

void election_journal_writer::failed(std::string const& id) {
    out_.append(fmt::format("x {}\n", id));
}

void election_journal_writer::ended(std::string const& id, std::string_view how) {
    out_.append(fmt::format("e {} {}\n", id, how));
}

std::string campaign_value(std::string const& campaign, std::size_t index) {
    return fmt::format("{}/v{}", campaign, index);
}

election_journal read_election_journal(std::string const& path) {
    election_journal j;
    std::map<std::string, std::size_t> at; // campaign -> its record
    std::map<std::string, colock::test::holding> open;
    for_each_journal_line(
        path, "election journal",
        [&](std::string const& kind, std::string const& id, std::istream& line) {
            auto const known = at.find(id);
            auto* c = known == at.end() ? nullptr : &j.campaigns[known->second];
            // "c" starts a campaign; every other line is about one started before.
            bool ok = !id.empty() && (kind == "c") == (c == nullptr);
            if (!ok) {
                // refused: the line is reported
            } else if (kind == "c") {
                at[id] = j.campaigns.size();
                j.campaigns.push_back({id, std::nullopt, {false}});
                j.unfinished = id;
            } else if (kind == "g") {
                colock::test::holding h;
                h.holder = id;
                ok = (line >> h.fence >> h.token >> h.acquired_ns) && !c->term;
                c->term = h.fence;
                c->published[0] = true;
                open[id] = std::move(h);
            } else if (kind == "v" || kind == "p") {
                std::size_t index = 0;
                ok = (line >> index) && c->term && index > 0;
                if (ok && kind == "v") {
                    ok = index == c->published.size(); // the values are proclaimed in order
                    c->published.push_back(false);
                } else if (ok) {
                    ok = index < c->published.size();
                    if (ok)
                        c->published[index] = true;
                }
            } else if (kind == "x") {
                ok = !c->term && j.unfinished == id;
                j.unfinished.clear();
            } else if (kind == "e") {
                std::string how;
                ok = (line >> how) && open.erase(id) == 1 && j.unfinished == id;
                ++j.endings[how];
                j.unfinished.clear();
            } else {
                ok = false;
            }
            return ok;
        });
    for (auto& [id, h] : open)
        j.open.push_back(std::move(h));
    return j;
}

bool election_journal_leading(std::string const& path) {
    auto const kind = journal_last_kind(path);
    return kind == 'g' || kind == 'v' || kind == 'p';
}

} // namespace colock::reliability

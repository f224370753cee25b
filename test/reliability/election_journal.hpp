// A campaigner's own account of its campaigns, for the election scenarios (the worker mode
// campaign). As the lock's journal (journal.hpp) it survives a SIGKILL: one line per event,
// each appended with one write() before the worker goes on.
//
//     c <campaign>                         co_campaign called
//     g <campaign> <term> <token> <ns>     it returned at <ns>: the campaign leads at <term>
//     v <campaign> <index>                 co_proclaim of value <index> called
//     p <campaign> <index>                 it returned: the value is published
//     x <campaign>                         co_campaign failed (a network error, a timeout)
//     e <campaign> <how>                   the tenure is in the history (unless it was over
//                                          before co_campaign returned); the term ends by
//                                          <how>: resign (release), drop (the leadership
//                                          destroyed: resigned in the background) or lost
//
// Campaign ids are words without '/'; a campaign's values are "<campaign>/v<index>" (index 0
// its co_campaign's), as colock_test/election_history.hpp reads them.
#pragma once

#include "journal.hpp"

#include <colock_test/election_history.hpp>
#include <colock_test/history.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace colock::reliability {

class election_journal_writer {
public:
    /// Opens (creating if needed) `path` for appending. Throws std::system_error.
    explicit election_journal_writer(std::string const& path) : out_(path) {}

    void campaigning(std::string const& id);
    void granted(std::string const& id, std::int64_t term, std::string const& token,
                 std::int64_t acquired_ns);
    void proclaiming(std::string const& id, std::size_t index);
    void proclaimed(std::string const& id, std::size_t index);
    void failed(std::string const& id);
    void ended(std::string const& id, std::string_view how);

private:
    journal_writer out_;
};

/// The value of `campaign`'s value `index`.
std::string campaign_value(std::string const& campaign, std::size_t index);

struct election_journal {
    std::vector<colock::test::campaign_record> campaigns;
    /// Terms granted and never ended (the process died leading), with acquired_ns, holder (the
    /// campaign), fence (the term) and token set.
    std::vector<colock::test::holding> open;
    /// A campaign called and not over (the process died in it): its id.
    std::string unfinished;
    /// How the terms that were not cut by a kill ended ("resign", "drop", "lost"): how many.
    std::map<std::string, std::size_t> endings;
};

/// Reads a journal. A last line without its newline (a write the kill cut short) is ignored;
/// throws std::runtime_error for any other malformed line.
election_journal read_election_journal(std::string const& path);

/// Whether the journal's last whole line is a "g", "v" or "p": a campaign leads (or did when
/// the process died). Reads only the end of the file.
bool election_journal_leading(std::string const& path);

} // namespace colock::reliability

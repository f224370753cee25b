// A contending worker's own account of what it did, for the scenarios that SIGKILL it. A killed
// process prints no summary, and the tenure it was in never reaches the history (a tenure is
// recorded at its end), so the runner needs another record: one line per event, each appended
// with one write() before the worker goes on, so that everything the process did before it
// died is in its file:
//
//     a <holder> <fence> <token> <acquired_ns>   co_lock returned; nothing done yet
//     w <holder> <value>                         the shared counter was just set to <value>
//     r <holder> <fence>                         the tenure is in the history; unlock follows
//
// From the values written the runner checks the counter exactly: with no lost update, every
// value from 1 to the counter's end is written once. A duplicate is a lost update (two holders
// read the same value); a missing value is a write whose "w" line a kill cut off, allowed only
// for a tenure the kill left open without a "w" line.
#pragma once

#include <colock_test/history.hpp>

#include <cstdint>
#include <functional>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

namespace colock::reliability {

class journal_writer {
public:
    /// Opens (creating if needed) `path` for appending; an empty path keeps no journal. Throws
    /// std::system_error.
    explicit journal_writer(std::string const& path);
    ~journal_writer();
    journal_writer(journal_writer const&) = delete;
    journal_writer& operator=(journal_writer const&) = delete;

    void acquired(std::string const& holder, std::int64_t fence, std::string const& token,
                  std::int64_t acquired_ns);
    void wrote(std::string const& holder, std::int64_t value);
    void released(std::string const& holder, std::int64_t fence);
    /// Appends `line` (with its newline) in one write(); nothing without a journal.
    void append(std::string const& line);

private:
    std::string path_;
    int fd_ = -1;
};

struct journal {
    std::uint64_t acquisitions = 0;
    /// Every value the worker wrote to the counter, in order.
    std::vector<std::int64_t> written;
    /// Tenures acquired and never released (the process died in them), with acquired_ns,
    /// holder, fence and token set.
    std::vector<colock::test::holding> open;
    /// How many of the open tenures wrote no "w" line: each may have written the counter.
    std::size_t open_without_write = 0;
};

/// The whole journal at `path`; throws std::runtime_error when it cannot be read.
std::string read_journal_text(std::string const& path);

/// Reads the journal at `path` a whole line at a time (a last line without its newline is
/// ignored): `step` is given the line's first two words and the stream of the rest, and says
/// whether the line is well formed. Throws std::runtime_error naming `what` ("journal"), the
/// path and the line for one that is not.
void for_each_journal_line(std::string const& path, std::string_view what,
                           std::function<bool(std::string const& kind, std::string const& id,
                                              std::istream& rest)> const& step);

/// Reads a journal. A last line without its newline (a write the kill cut short) is ignored;
/// throws std::runtime_error for any other malformed line.
journal read_journal(std::string const& path);

/// The kind (the first word, one letter) of the journal's last whole line, or 0 when it has
/// none. Reads only the end of the file.
char journal_last_kind(std::string const& path);

/// Whether the journal's last whole line is "a" or "w": a tenure is going on (or was when the
/// process died). Reads only the end of the file, so it is cheap to ask often.
bool journal_in_tenure(std::string const& path);

} // namespace colock::reliability

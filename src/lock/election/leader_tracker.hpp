// What an election's watch reports, sans I/O: the election read by its script, its channel's
// messages, and the decision of which changes they make, when the watch must read the election
// again (a gap) and when it must look again (a lease that may lapse without a word). The
// layout of keys and messages is in election_scripts.hpp. Private to the library's sources.
#pragma once

#include "lock/store/lease_store.hpp"

#include <colock/election.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace colock::detail {

// One message of the election's channel.
struct election_message {
    enum class kind { leader, handed, ended, shortened } what = kind::ended;
    std::int64_t term = 0;
    std::int64_t version = 0;
    // leader and shortened: the record's; handed: the claim's
    std::chrono::milliseconds ttl{0};
    std::string value; // leader
};

// Nothing when `payload` is not a message of the election's.
std::optional<election_message> parse_election_message(std::string_view payload);

// A quorum's messages: each primary tells each change once; a change is passed on when a
// majority has told it, so that one a minority alone saw (a proclaim that failed) is not.
class majority_messages {
public:
    explicit majority_messages(std::size_t majority) : majority_(majority) {}
    // True when `payload` has now been told by a majority (once: at that count), or cannot be
    // read (the tracker asks for a reading).
    bool told(std::string const& payload);
    // Forgets the messages of terms before `term`.
    void forget_before(std::int64_t term);

private:
    std::size_t const majority_;
    std::map<std::string, std::size_t> counts_; // by change (kind, term, version)
};

class leader_tracker {
public:
    struct step {
        std::vector<leader_change> changes;
        // Messages may have been missed: read the election again.
        bool read_again = false;
        // Look again (read) after this long: a lease that may lapse, a hand-over that may not
        // be claimed. Nothing: no lease to watch (or keep the look already planned).
        std::optional<std::chrono::milliseconds> look_in;
        // Forget the look planned: nobody leads and no hand-over is under way.
        bool stop_looking = false;
    };

    // A reading of the election; `after_gap`: read because messages may have been missed.
    // The first reading reports the state it finds.
    step on_reading(election_reading const& r, bool after_gap);
    // A message of the election's channel; ignored before the first reading, which includes
    // what it says.
    step on_message(std::string_view payload);
    // Messages may have been missed (a reconnection): until a reading or a change says where
    // the election is, a change is reported as resynced, even one that looks like the next.
    void on_gap() noexcept { unsure_ = true; }

    bool started() const noexcept { return started_; }
    // The newest term known.
    std::int64_t term() const noexcept { return term_; }

private:
    step apply_message(std::string_view payload);
    // Reports what the server state says, when it differs from what was reported last.
    void report(step& s, bool resynced);

    bool started_ = false;
    // What the server holds, as far as known: the newest term and version seen, and whether
    // that term still leads.
    std::int64_t term_ = 0;
    std::int64_t version_ = 0;
    bool leading_ = false;
    std::string value_;
    // Messages were missed since that state: the watch said so (on_gap), or one came out of
    // step. A new term's first message then cannot tell whether whole terms went unseen.
    bool unsure_ = false;
    // What was reported last.
    bool reported_leading_ = false;
    std::int64_t reported_term_ = 0;
    std::string reported_value_;
};

} // namespace colock::detail

// What an election's watch reports, sans I/O.
#include "lock/election/leader_tracker.hpp"

#include "lock/store/lock_replies.hpp"

#include <colock/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <utility>

namespace colock::detail {

using std::chrono::milliseconds;

using replies::next_word;
using replies::number;

std::optional<election_message> parse_election_message(std::string_view payload) {
    election_message m;
    auto const kind = next_word(payload);
    if (kind == "L")
        m.what = election_message::kind::leader;
    else if (kind == "R")
        m.what = election_message::kind::handed;
    else if (kind == "N")
        m.what = election_message::kind::ended;
    else if (kind == "E")
        m.what = election_message::kind::shortened;
    else
        return std::nullopt;
    auto const term = number(next_word(payload));
    auto const version = number(next_word(payload));
    if (!term || *term == 0 || !version || *version == 0)
        return std::nullopt;
    m.term = *term;
    m.version = *version;
    if (m.what == election_message::kind::ended)
        return payload.empty() ? std::optional(m) : std::nullopt;
    // The ttl: a PTTL, which is -1 or -2 for a key gone meanwhile (none to wait for).
    auto const ttl_word = next_word(payload);
    std::int64_t ttl = 0;
    auto const [end, ec] = std::from_chars(ttl_word.data(), ttl_word.data() + ttl_word.size(), ttl);
    if (ttl_word.empty() || ec != std::errc() || end != ttl_word.data() + ttl_word.size())
        return std::nullopt;
    m.ttl = milliseconds(std::max<std::int64_t>(ttl, 0));
    if (m.what == election_message::kind::handed || m.what == election_message::kind::shortened)
        return payload.empty() ? std::optional(m) : std::nullopt;
    m.value = std::string(payload);
    return m;
}

namespace {

// What names a change on every primary alike: its kind, term and version (a leader's ttl is
// each primary's own).
std::string change_of(election_message const& m) {
    return fmt::format("{} {} {}", static_cast<int>(m.what), m.term, m.version);
}

} // namespace

bool majority_messages::told(std::string const& payload) {
    auto const m = parse_election_message(payload);
    if (!m)
        return true;
    return ++counts_[change_of(*m)] == majority_;
}

void majority_messages::forget_before(std::int64_t term) {
    std::erase_if(counts_, [term](auto const& entry) {
        auto const space = entry.first.find(' ');
        std::int64_t t = 0;
        std::from_chars(entry.first.data() + space + 1, entry.first.data() + entry.first.size(), t);
        return t < term;
    });
}

void leader_tracker::report(step& s, bool resynced) {
    resynced = resynced || unsure_;
    if (leading_) {
        if (reported_leading_ && reported_term_ == term_ && reported_value_ == value_)
            return;
        s.changes.push_back(leader_change{true, value_, term_, resynced});
        reported_leading_ = true;
        reported_term_ = term_;
        reported_value_ = value_;
        return;
    }
    if (!reported_leading_)
        return;
    s.changes.push_back(leader_change{false, {}, reported_term_, resynced});
    reported_leading_ = false;
    reported_value_.clear();
}

leader_tracker::step leader_tracker::on_reading(election_reading const& r, bool after_gap) {
    step s;
    if (r.record_ttl.count() > 0)
        s.look_in = r.record_ttl;
    else
        s.stop_looking = true;
    if (!started_) {
        started_ = true;
        term_ = r.term;
        version_ = r.version;
        leading_ = r.leading;
        value_ = r.value;
        unsure_ = false; // what is reported first is the state itself
        if (leading_)
            report(s, false);
        else // nobody leads; the last term when a record says which
            s.changes.push_back(leader_change{false, {}, r.term, false});
        return s;
    }
    // A reading older than a message that came while it was under way says nothing new.
    if (r.record && (r.term < term_ || (r.term == term_ && r.version < version_)))
        return s;
    // Messages missed, whether the watch knows it or a message out of step showed it.
    bool const gap = std::exchange(unsure_, false) || after_gap;
    // The one next change, which cannot hide another; or no change at all.
    bool const contiguous = leading_ && r.leading && r.term == term_ && r.version == version_ + 1;
    bool const same =
        r.leading == leading_ && (!r.record || (r.term == term_ && r.version == version_));
    if (gap && !leading_ && !r.leading && (r.lock_fence == 0 || r.lock_fence > term_)) {
        // Nobody leads, as before the gap; but the lock's key is gone, or has a fence above
        // the last term known: terms may have come and gone meanwhile. Said, not kept quiet.
        term_ = std::max(term_, r.lock_fence);
        value_.clear();
        s.changes.push_back(leader_change{false, {}, term_, true});
        return s;
    }
    if (r.record) {
        term_ = r.term;
        version_ = r.version;
    }
    leading_ = r.leading;
    value_ = r.value;
    report(s, gap && !contiguous && !same);
    return s;
}

leader_tracker::step leader_tracker::on_message(std::string_view payload) {
    step s = apply_message(payload);
    if (s.read_again)
        unsure_ = true; // until the reading asked for, or a change, says where things are
    else if (!s.changes.empty())
        unsure_ = false; // reported as resynced: what follows is in step with it
    return s;
}

leader_tracker::step leader_tracker::apply_message(std::string_view payload) {
    step s;
    if (!started_)
        return s;
    auto const m = parse_election_message(payload);
    if (!m) {
        s.read_again = true;
        return s;
    }
    using kind = election_message::kind;
    if (m->term < term_)
        return s; // an older term's: known from a reading, or a quorum's other primary
    if (m->what == kind::leader) {
        if (m->term == term_ && m->version <= version_)
            return s; // seen
        bool const next =
            m->term == term_ ? leading_ && m->version == version_ + 1 : m->version == 1;
        if (!next) {
            s.read_again = true;
            return s;
        }
        if (m->term > term_ && leading_) {
            // A new term while the last one was not seen to end: that one lapsed first.
            leading_ = false;
            report(s, false);
        }
        term_ = m->term;
        version_ = m->version;
        leading_ = true;
        value_ = m->value;
        s.look_in = m->ttl;
        report(s, false);
        return s;
    }
    if (m->what == kind::shortened) {
        // The leader's lease now ends sooner: looked at then, not at its old end.
        if (m->term == term_ && m->version == version_ && leading_)
            s.look_in = m->ttl;
        else if (m->term > term_ || m->version > version_)
            s.read_again = true; // of a state not seen yet
        return s;
    }
    // The end of a term, after `version`.
    if (m->term == term_ && !leading_)
        return s; // seen
    if (m->term != term_ || m->version != version_) {
        s.read_again = true;
        return s;
    }
    leading_ = false;
    if (m->what == kind::handed) {
        // Reported when the next leader claims it, or when the claim lapses and a look finds
        // nobody.
        s.look_in = m->ttl;
        return s;
    }
    s.stop_looking = true;
    report(s, false);
    return s;
}

} // namespace colock::detail

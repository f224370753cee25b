// What an election's watch reports, sans I/O.
#include "lock/election/leader_tracker.hpp"

#include "lock/store/lock_replies.hpp"

#include <colock/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace colock::detail {

using std::chrono::milliseconds;

namespace {

std::optional<std::int64_t> number(std::string_view text) {
    std::int64_t n = 0;
    auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc() || end != text.data() + text.size() || n < 0)
        return std::nullopt;
    return n;
}

// The next word of `text` (up to a space), taken off it.
std::string_view next_word(std::string_view& text) {
    auto const space = text.find(' ');
    auto const word = text.substr(0, space);
    text = space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
    return word;
}

// The fence of a lock value ("H <fence> ...", "R <fence> <owner>", "F <fence>"), else 0.
std::int64_t fence_of(std::string_view lock_value) {
    auto const kind = next_word(lock_value);
    if (kind != "H" && kind != "R" && kind != "F")
        return 0;
    return number(next_word(lock_value)).value_or(0);
}

// The token of a lock value "H <fence> <owner> <token> <since> <queued>", else empty.
std::string_view holding_token(std::string_view lock_value) {
    if (next_word(lock_value) != "H")
        return {};
    next_word(lock_value);
    next_word(lock_value);
    return next_word(lock_value);
}

} // namespace

election_reading read_election(script_reply const& reply) {
    return replies::read_value<election_reading>(
        reply, [](resp3::value const& v, election_reading& r) {
            if (v.type != resp3::type::array || v.elements.size() != 7 ||
                v.elements[6].type != resp3::type::number)
                return false;
            std::string_view text[6];
            for (int i = 0; i < 6; ++i) {
                auto const s = v.elements[i].as_string();
                if (!s)
                    return false;
                text[i] = *s;
            }
            auto const& [lock_value, token, term, value, version, owner] = text;
            r.record_ttl = milliseconds(v.elements[6].integer);
            r.lock_fence = fence_of(lock_value);
            if (version.empty())
                return term.empty() && token.empty(); // no record
            auto const version_n = number(version);
            auto const term_n = number(term);
            if (!version_n || *version_n == 0 || !term_n || *term_n == 0)
                return false;
            r.record = true;
            r.version = *version_n;
            r.term = *term_n;
            r.value = std::string(value);
            r.owner = std::string(owner);
            r.leading = !token.empty() && holding_token(lock_value) == token;
            return true;
        });
}

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

election_reading decide_reading(std::vector<election_reading> const& readings,
                                std::size_t majority) {
    std::map<std::int64_t, std::vector<election_reading const*>> leading_by_term;
    std::size_t not_leading = 0;
    milliseconds pending_claim{-2};
    std::int64_t lock_fence = 0;
    for (auto const& r : readings) {
        if (r.ec)
            continue;
        if (r.leading) {
            leading_by_term[r.term].push_back(&r);
        } else {
            ++not_leading;
            pending_claim = std::max(pending_claim, r.record_ttl);
            lock_fence = std::max(lock_fence, r.lock_fence);
        }
    }
    for (auto const& [term, group] : leading_by_term) {
        if (group.size() < majority)
            continue;
        std::vector<election_reading const*> by_version = group;
        std::sort(by_version.begin(), by_version.end(),
                  [](auto const* a, auto const* b) { return a->version > b->version; });
        election_reading out = *by_version[majority - 1];
        for (auto const* r : group)
            if (r->record_ttl.count() > 0)
                out.record_ttl = std::min(out.record_ttl, r->record_ttl);
        return out;
    }
    election_reading out;
    if (not_leading >= majority) {
        out.record_ttl = pending_claim; // a hand-over's claim: look again when it lapses
        out.lock_fence = lock_fence;
        return out;
    }
    auto const answered = static_cast<std::size_t>(
        std::count_if(readings.begin(), readings.end(), [](auto const& r) { return !r.ec; }));
    out.ec = error::no_quorum;
    out.server_text = fmt::format("{} of {} primaries answered, and no majority of them agrees "
                                  "on who leads",
                                  answered, readings.size());
    return out;
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
        if (leading_)
            report(s, false);
        else // nobody leads; the last term when a record says which
            s.changes.push_back(leader_change{false, {}, r.term, false});
        return s;
    }
    // A reading older than a message that came while it was under way says nothing new.
    if (r.record && (r.term < term_ || (r.term == term_ && r.version < version_)))
        return s;
    // The one next change, which cannot hide another; or no change at all.
    bool const contiguous = leading_ && r.leading && r.term == term_ && r.version == version_ + 1;
    bool const same =
        r.leading == leading_ && (!r.record || (r.term == term_ && r.version == version_));
    if (after_gap && !leading_ && !r.leading && (r.lock_fence == 0 || r.lock_fence > term_)) {
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
    report(s, after_gap && !contiguous && !same);
    return s;
}

leader_tracker::step leader_tracker::on_message(std::string_view payload) {
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

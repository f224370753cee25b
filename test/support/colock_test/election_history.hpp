// What reliability tests record about an election, beside the leaders' tenures (history.hpp:
// a leader's tenure is a holding whose fence is its term, checked for overlaps and terms out of
// grant order by check_history), and the check of what a leader_watch reported against it.
//
// Each campaign has an id, a word without '/', and proclaims values "<id>/v<index>": index 0
// is its co_campaign's value, 1, 2, ... its co_proclaim's in order. From the campaigners'
// journals a test knows, per campaign, whether co_campaign returned (and the term), and which
// values it proclaimed or was about to; from the watch, each change it reported.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace colock::test {

/// One campaign as its campaigner journaled it.
struct campaign_record {
    /// Names the campaign; its values are "<id>/v<index>".
    std::string id;
    /// The term, when co_campaign returned (the campaigner learned it leads).
    std::optional<std::int64_t> term;
    /// One entry per value index the campaign proclaimed or was about to (index 0: the
    /// campaign's own value): true when the campaigner learned it was published (co_campaign,
    /// or that co_proclaim, returned).
    std::vector<bool> published;
};

/// One change a leader_watch reported (leader_change), with when.
struct watch_event {
    std::int64_t ns = 0;
    bool leading = false;
    std::int64_t term = 0;
    bool resynced = false;
    std::string value;

    friend bool operator==(watch_event const&, watch_event const&) = default;
};

/// "<id>/v<index>" as its id and index; nothing for another shape.
std::optional<std::pair<std::string, std::size_t>> parse_campaign_value(std::string_view value);

struct watch_report {
    std::size_t events = 0;
    /// Reports of a leader (a new term or a new value of one).
    std::size_t leaders = 0;
    /// Reports marked resynced.
    std::size_t resyncs = 0;
    /// Changes the campaigners learned were published (see check_watch).
    std::size_t published = 0;
    /// Of those, how many the watch did not report, each with a resync where it would be.
    std::size_t missed_with_resync = 0;
    /// Distinct terms the watch reported whose campaigner never learned it led.
    std::size_t unlearned_terms = 0;
    /// What broke a rule, one line each (the first 20).
    std::vector<std::string> problems;
    /// How many rules were broken, listed or not.
    std::size_t violations = 0;

    bool ok() const noexcept { return violations == 0; }
};

/// Checks a watch's reports `events` (in the order it reported them) against the campaigns.
///
/// What "every change seen, in order" can require. A change is published by a server script:
/// a term's claim (co_campaign's last step) and each co_proclaim. The campaigner learns of it
/// when its call returns; a campaigner killed, or cut off, or timed out before its call
/// returned may still have had the change published, or may not (killed between the grant and
/// the claim, a term is granted and never published, and nobody can see it). So:
///   1. Order: the reported leaders' (term, value index) strictly increase; a report that
///      nobody leads names the term of the last leader reported before it, or, when resynced,
///      a later one (a term the watch learned of only by the lock's fence).
///   2. Attribution: a reported leader names a journaled campaign and one of its values, with
///      the term co_campaign returned; a campaign whose co_campaign never returned may be
///      reported (its term published before the campaigner was stopped), once with one term,
///      never another campaign's.
///   3. No change missed silently: every change a campaigner learned was published is
///      reported, unless a report marked resynced comes after the last report before it (in
///      (term, index) order) and no later than the first report after it. Changes no
///      campaigner learned of need not be reported.
/// The watch must have started before the first campaign, and run until the last change.
watch_report check_watch(std::vector<campaign_record> const& campaigns,
                         std::vector<watch_event> const& events);

} // namespace colock::test

// The lock scripts' steps for the differential tests (test_lock_script_differential.cpp): a
// lock key's value as a state, the kinds of step, and how each release calls its scripts for a
// step (the previous release's call form, this one's, and two releases on the same names).
#pragma once

#include "script_differential.hpp"

#include "lock/store/lock_arguments.hpp"
#include "lock/store/lock_scripts.hpp"

#include <colock_test/previous_lock_scripts.hpp>

#include <colock/resp3/request.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace colock::test::lock_script_differential {

namespace diff = differential;

/// A lock key's value as a state, whatever the format that wrote it: the test compares states,
/// not texts, so a release with another value format decodes its own into this (see `decode`).
struct lock_state {
    char kind = 0; // 'H' held, 'R' handed, 'F' free, '?' not a state, 0 no key
    std::int64_t fence = 0;
    std::string owner, token, since, queued;
    std::string raw; // '?': the text
};

/// The previous release's format ("H <fence> <owner> <token> <since> <queued>", "R <fence>
/// <owner>", "F <fence>"), read strictly: anything else is '?', compared as text. Not
/// parse_lock_record (test_util.hpp), which reads leniently and keeps only whether a locker is
/// queued.
inline lock_state decode_previous(std::string const& value) {
    // Split at each single space: an empty part (two spaces, one at an end) is no state.
    std::vector<std::string> parts(1);
    for (char const c : value) {
        if (c == ' ')
            parts.emplace_back();
        else
            parts.back() += c;
    }
    auto const number = [](std::string const& s) {
        return !s.empty() && s.size() < 19 &&
               s.find_first_not_of("0123456789") == std::string::npos;
    };
    auto const empty_part = [](std::string const& s) { return s.empty(); };
    std::size_t const parts_of[] = {6, 3, 2};
    std::string const kinds = "HRF";
    auto const k = parts[0].size() == 1 ? kinds.find(parts[0][0]) : std::string::npos;
    lock_state st;
    if (k == std::string::npos || parts.size() != parts_of[k] || !number(parts[1]) ||
        std::any_of(parts.begin(), parts.end(), empty_part)) {
        st.kind = '?';
        st.raw = value;
        return st;
    }
    st.kind = kinds[k];
    st.fence = std::stoll(parts[1]);
    if (st.kind != 'F')
        st.owner = parts[2];
    if (st.kind == 'H') {
        st.token = parts[3];
        st.since = parts[4];
        st.queued = parts[5];
    }
    return st;
}

// Every duration is a whole number of units, and time advances by whole units and a margin: no
// key lapses on its own within a run (which takes seconds), and after an advance every TTL and
// deadline is either gone or at least a unit less the margins away from lapsing (see
// script_differential.hpp).
inline constexpr std::int64_t unit_ms = 100'000;
inline constexpr std::int64_t advance_margin_ms = 1000;

enum class op { acquire, release, leave, extend, force_unlock, status, advance, overwrite };

struct lock_step {
    op what = op::status;
    std::string name;
    std::string token; // acquire, release, extend
    std::string owner; // acquire: the token's locker; leave: the leaving locker
    std::string queueing = "0";
    std::int64_t ttl = 0, entry = 0, claim = 0, ms = 0;
    /// release ARGV[5] and extend ARGV[3]: the side's stored fence plus this, or "0" when -1.
    int fence_plus = -1;
    std::string free_only; // release ARGV[6]: absent, "0" or "1"
    bool tell = true;      // force_unlock: the script tells the holder
    std::string value;     // overwrite
    /// acquire and release: what the process knows of the key, for a release that uses it (the
    /// current one): 0-5 the key's value (a release: if it is the token's), 6 the same with a
    /// fence one too low, 7 a release's with another clock, 8-9 nothing.
    int written = 0;

    std::string describe() const {
        auto const u = [](std::int64_t d) { return std::to_string(d / unit_ms) + "u"; };
        auto const fence =
            fence_plus < 0 ? std::string("0") : "fence+" + std::to_string(fence_plus);
        switch (what) {
        case op::acquire:
            return "acquire " + name + " by " + token + "@" + owner + " queueing " + queueing +
                   " ttl " + u(ttl) + " entry " + u(entry) + " claim " + u(claim);
        case op::release:
            return "release " + name + " by " + token + " last fence " + fence + " claim " +
                   u(claim) + (free_only.empty() ? "" : " free_only " + free_only);
        case op::leave:
            return "leave " + name + " by locker " + owner + " claim " + u(claim);
        case op::extend:
            return "extend " + name + " by " + token + " ttl " + u(ttl) + " fence " + fence;
        case op::force_unlock:
            return "force_unlock " + name + " quarantine " + u(ms) + (tell ? " told" : " untold");
        case op::status:
            return "status " + name;
        case op::advance:
            return "advance " + std::to_string(ms) + " ms";
        case op::overwrite:
            return "overwrite " + name + " with \"" + value + "\"";
        }
        return "?";
    }
};

/// What a side's call of a step needs beside the step: the lock's key (its queue, deadlines and
/// channels are named after it), where the holder's locker is told of a forced unlock, and the
/// fence the call passes (release's last fence, extend's fence).
struct call_site {
    std::string key;
    std::string locker_prefix;
    std::string fence;
    /// release: the lock's state on this side before the step, from which a holder's process
    /// knows what its grant wrote.
    lock_state stored;
};

/// The previous release's call form, as src/lock/store/single_connection_store.cpp makes its
/// calls: which keys, which arguments in which order.
inline void push_previous_call(lock_step const& st, call_site const& at, std::string_view source,
                               resp3::request& req) {
    auto const& k = at.key;
    std::vector<std::string> const keys{k, k + ":q", k + ":qd"};
    auto const t = [](std::int64_t n) { return std::to_string(n); };
    switch (st.what) {
    case op::acquire:
        // The client's clock (kept for status): the same on both sides.
        diff::push_eval(req, source, keys,
                        {st.token, t(st.ttl), st.owner, st.queueing, t(st.entry),
                         k + ":w:", "1700000000000", t(st.claim)});
        return;
    case op::release: {
        std::vector<std::string> args{st.token, k + ":w:", t(st.claim), "", at.fence};
        if (!st.free_only.empty())
            args.push_back(st.free_only);
        diff::push_eval(req, source, keys, args);
        return;
    }
    case op::leave:
        diff::push_eval(req, source, keys, {"", k + ":w:", t(st.claim), st.owner, "0"});
        return;
    case op::extend:
        diff::push_eval(req, source, {k}, {st.token, t(st.ttl), at.fence});
        return;
    case op::force_unlock:
        diff::push_eval(req, source, {k, k + ":e"}, {t(st.ms), at.locker_prefix});
        return;
    default: // status
        diff::push_eval(req, source, keys, {});
        return;
    }
}

/// `first` (a one-key call, on KEYS[1] and the first `first_args` arguments; `decided`, Lua that
/// returns what the store makes of its reply `r` when it decided) and otherwise `then` on all
/// keys and the remaining arguments: what the store sends as two calls, as one script, so that a
/// step stays one call. Each text is the body of a function of (KEYS, ARGV), as the store's
/// Functions library makes it.
inline std::string one_then_other(std::string_view first, std::size_t first_args,
                                  std::string_view decided, std::string_view then) {
    std::string first_argv;
    for (std::size_t i = 1; i <= first_args; ++i)
        first_argv += (i > 1 ? ", ARGV[" : "ARGV[") + std::to_string(i) + "]";
    return "local function first(KEYS, ARGV)\n" + std::string(first) +
           "\nend\nlocal function then_(KEYS, ARGV)\n" + std::string(then) +
           "\nend\nlocal r = first({KEYS[1]}, {" + first_argv + "})\n" + std::string(decided) +
           "\nlocal rest = {}\nfor i = " + std::to_string(first_args + 1) +
           ", #ARGV do rest[#rest + 1] = ARGV[i] end\nreturn then_(KEYS, rest)\n";
}

/// This release's call form (src/lock/store/lock_arguments.hpp, as the store sends it). A grant
/// on a name this process left free tries acquire_known first, and a release that knows what its
/// grant wrote tries release_known first (right, stale or absent knowledge, chosen per step); the
/// general call follows when the first answers that it changed nothing.
inline void push_current_call(lock_step const& st, call_site const& at, std::string_view source,
                              resp3::request& req) {
    auto const& k = at.key;
    std::vector<std::string> const keys{k, k + ":q", k + ":qd"};
    using std::chrono::milliseconds;
    auto const append = [](std::vector<std::string>& out, auto const& a) {
        out.insert(out.end(), a.begin(), a.end());
    };
    switch (st.what) {
    case op::acquire: {
        auto const q = st.queueing == "0"   ? detail::queueing::never
                       : st.queueing == "1" ? detail::queueing::when_held
                                            : detail::queueing::stay_after_grant;
        std::vector<std::string> args;
        auto const general =
            detail::acquire_arguments(st.owner, st.token, 1700000000000, milliseconds(st.ttl), q,
                                      milliseconds(st.entry), milliseconds(st.claim));
        // What the store would remember: the free value's fence (or, stale, one less).
        auto const free_fence = at.stored.kind == 'F' ? at.stored.fence : 41;
        auto const known =
            q == detail::queueing::stay_after_grant || st.written >= 8
                ? std::nullopt
                : detail::known_acquire_arguments(
                      free_fence - (st.written == 6 ? 1 : 0), st.owner, st.token,
                      detail::held_value{free_fence - (st.written == 6 ? 1 : 0) + 1, 1700000000000},
                      milliseconds(st.ttl));
        if (!known) {
            append(args, general);
            diff::push_eval(req, source, keys, args);
            return;
        }
        append(args, *known);
        append(args, general);
        diff::push_eval(req,
                        one_then_other(detail::acquire_known_source, 3,
                                       // Granted: the fence of the value it wrote, as the store
                                       // answers it.
                                       "if r == 1 then return tonumber(string.match(ARGV[2], "
                                       "'^H (%d+) ')) end",
                                       source),
                        keys, args);
        return;
    }
    case op::release: {
        auto const kind =
            st.free_only == "1" ? detail::release_kind::free_only : detail::release_kind::hand_on;
        auto const last_fence = std::stoll(at.fence);
        std::vector<std::string> args;
        auto const general =
            detail::release_arguments(kind, st.token, milliseconds(st.claim), last_fence);
        // The store sends what its grant wrote for a release that hands on, with a fence.
        if (kind == detail::release_kind::free_only || last_fence <= 0 || st.written >= 8) {
            append(args, general);
            diff::push_eval(req, source, keys, args);
            return;
        }
        detail::held_value written{std::max<std::int64_t>(1, at.stored.fence), 1700000000000};
        std::string owner = st.owner;
        if (at.stored.kind == 'H' && at.stored.token == st.token) {
            written.fence -= st.written == 6 ? 1 : 0;
            written.since_ms += st.written == 7 ? 1 : 0;
            owner = at.stored.owner;
        }
        auto const known = detail::known_release_arguments(owner, st.token, written, last_fence);
        append(args, known.args);
        append(args, general);
        diff::push_eval(
            req,
            one_then_other(detail::release_known_source, 2, "if r ~= 0 then return r end", source),
            keys, args);
        return;
    }
    case op::leave: {
        std::vector<std::string> args;
        append(args, detail::release_arguments(detail::release_kind::leave, st.owner,
                                               milliseconds(st.claim), 0));
        diff::push_eval(req, source, keys, args);
        return;
    }
    default: // extend, force unlock and status: as the previous release calls them
        push_previous_call(st, at, source, req);
        return;
    }
}

/// Two releases on the same names: lockers A and C run the previous release's scripts and call
/// form, locker B this release's (status and forced unlocks, by nobody's locker, this release's).
/// Equal to a fleet of the previous release alone, step by step: so a fleet can upgrade one
/// process at a time.
inline void push_mixed_call(lock_step const& st, call_site const& at, std::string_view,
                            resp3::request& req) {
    bool const current = st.owner == "B" || st.what == op::status || st.what == op::force_unlock;
    auto const source_of = [&](op what) -> std::string_view {
        switch (what) {
        case op::acquire:
            return current ? detail::acquire_source : previous::acquire_source;
        case op::release:
        case op::leave:
            return current ? detail::release_source : previous::release_source;
        case op::extend:
            return current ? detail::extend_source : previous::extend_source;
        case op::force_unlock:
            return detail::force_unlock_source;
        default:
            return detail::status_source;
        }
    };
    if (current)
        push_current_call(st, at, source_of(st.what), req);
    else
        push_previous_call(st, at, source_of(st.what), req);
}

} // namespace colock::test::lock_script_differential

// The lock's scripts against the previous release's (test/support/colock_test/
// previous_lock_scripts.hpp) on seeded random steps: acquire (never, once or still queued),
// release (with and without a larger fence, free or handed on), leave, extend (with fences),
// forced unlock, status, values written by hand, and time passing. After each step both must
// agree on the reply, every key (value, queue, deadlines, TTL) and every message published, with
// fences compared by their order on the name (script_differential.hpp), and each must keep its
// new fences above every earlier one and a TTL on every key. A rewrite of the scripts (issue 46)
// passes when it keeps every guarantee the previous release gives; a deliberately broken copy of
// the previous scripts must fail, which keeps the harness honest.
//
// Replay: COLOCK_SCRIPT_DIFF_SEED=<seed> (printed on a failure), COLOCK_SCRIPT_DIFF_STEPS=<n> for
// a longer walk.
#include "lock_call_forms.hpp"
#include "script_differential.hpp"
#include "test_util.hpp"

#include "lock/store/lock_scripts.hpp"

#include <colock_test/previous_lock_scripts.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// A namespace of its own: the unity build compiles this file with others.
namespace colock::test::lock_script_differential {

/// One release's lock scripts: their sources (owned, so that a test can break a copy), how its
/// library calls them and how its values read as states. A release that packs its arguments
/// otherwise, or writes another value format, gives its own `push_call` and `decode`; the walk,
/// the replies' meaning and the checks stay the same.
struct lock_scripts {
    std::string acquire, release, extend, status, force_unlock;
    void (*push_call)(lock_step const&, call_site const&, std::string_view,
                      resp3::request&) = push_previous_call;
    lock_state (*decode)(std::string const&) = decode_previous;

    std::string const& source_of(op what) const {
        switch (what) {
        case op::acquire:
            return acquire;
        case op::release:
        case op::leave:
            return release;
        case op::extend:
            return extend;
        case op::force_unlock:
            return force_unlock;
        default:
            return status;
        }
    }
};

lock_scripts previous_scripts() {
    return {std::string(previous::acquire_source), std::string(previous::release_source),
            std::string(previous::extend_source), std::string(previous::status_source),
            std::string(previous::force_unlock_source)};
}

lock_scripts current_scripts() {
    return {std::string(detail::acquire_source),      std::string(detail::release_source),
            std::string(detail::extend_source),       std::string(detail::status_source),
            std::string(detail::force_unlock_source), push_current_call};
}

/// One side of the run: its scripts, and what it showed so far.
struct lock_side : diff::side_base {
    lock_scripts scripts;
    std::map<std::string, diff::fence_book> fences; // by lock name
    std::map<std::string, lock_state> states;       // by lock name, after the last step
    std::map<std::string, bool> lapsed_entry;       // by lock name: a lapsed entry is queued
    std::map<std::string, int> paths;               // how often each path of the scripts ran
};

lock_side make_side(std::string label, lock_scripts scripts) {
    lock_side s;
    s.label = std::move(label);
    s.prefix = unique_key("lockdiff") + ":";
    s.scripts = std::move(scripts);
    return s;
}

std::string reply_text(resp3::value const& v, std::string const& prefix) {
    if (v.is_error())
        return "error " + diff::unprefixed(v.text, prefix);
    if (v.is_null())
        return "nil";
    if (auto const i = v.as_integer())
        return std::to_string(*i);
    if (auto const s = v.as_string())
        return diff::unprefixed(std::string(*s), prefix);
    std::string out = "{";
    for (auto const& e : v.elements)
        out += (out.size() > 1 ? ", " : "") + reply_text(e, prefix);
    return out + "}";
}

/// The kind of step at `percent` (0-99) of the walk's mix.
op pick_step(std::uint64_t percent) {
    // Acquires most, as a busy lock sees them; advances often enough that leases, claims and
    // queue entries lapse between the calls.
    static constexpr std::pair<op, std::uint64_t> mix[] = {
        {op::acquire, 40},     {op::release, 17}, {op::leave, 6},    {op::extend, 11},
        {op::force_unlock, 3}, {op::status, 4},   {op::advance, 18}, {op::overwrite, 1}};
    for (auto const& [what, share] : mix) {
        if (percent < share)
            return what;
        percent -= share;
    }
    return op::status;
}

/// The family of the lock's scripts for diff::run: three names, three lockers of two tokens
/// each.
struct lock_family {
    using step = lock_step;
    using side = lock_side;

    std::array<std::string, 3> names{"n1", "n2", "n3"};
    std::array<std::string, 6> tokens{"A1", "A2", "B1", "B2", "C1", "C2"};
    /// What a release says its grant wrote (lock_step::written).
    mutable std::mt19937_64 written_rng{46};

    static std::string key(side const& s, std::string const& name) {
        return s.prefix + "{" + name + "}";
    }

    step next_step(std::mt19937_64& rng, side const& reference) const {
        // rng() % n rather than a distribution: the same walk from a seed on every standard
        // library.
        auto const pick = [&](auto const& options) { return options[rng() % std::size(options)]; };
        auto const units = [&](std::initializer_list<std::int64_t> options) {
            return unit_ms * std::data(options)[rng() % options.size()];
        };
        step st;
        st.name = pick(names);
        st.token = pick(tokens);
        // Release and extend mostly by the holder, else nothing would ever be released.
        auto const held = reference.states.find(st.name);
        auto const kind = held == reference.states.end() ? 0 : held->second.kind;
        if (kind == 'H' && rng() % 10 < 7)
            st.token = held->second.token;
        st.owner = st.token.substr(0, 1);
        st.claim = units({1, 1, 2});
        st.what = pick_step(rng() % 100);
        switch (st.what) {
        case op::acquire:
            st.queueing = pick(std::array<char const*, 4>{"0", "1", "1", "2"});
            st.ttl = units({1, 2, 3});
            st.entry = units({1, 2, 3});
            st.token = pick(tokens); // anyone asks, not mostly the holder
            // A locker handed the lock mostly claims it, as one told "g" does at once.
            if (kind == 'R' && rng() % 2 == 0)
                st.token = held->second.owner + pick(std::array<char const*, 2>{"1", "2"});
            st.owner = st.token.substr(0, 1);
            st.written = static_cast<int>(written_rng() % 10);
            break;
        case op::release:
            st.fence_plus = static_cast<int>(rng() % 5) - 1;
            st.free_only = pick(std::array<char const*, 4>{"", "", "0", "1"});
            // From a generator of its own: the walk stays the one its seed always gave.
            st.written = static_cast<int>(written_rng() % 10);
            break;
        case op::leave:
            st.owner = pick(std::array<char const*, 3>{"A", "B", "C"});
            break;
        case op::extend:
            st.ttl = units({1, 2, 3});
            st.fence_plus = static_cast<int>(rng() % 4) - 1;
            break;
        case op::force_unlock:
            st.ms = units({1, 2});
            st.tell = rng() % 4 != 0;
            break;
        case op::advance:
            st.ms = units({1, 1, 2}) + advance_margin_ms;
            break;
        case op::overwrite:
            st.value = pick(std::array<char const*, 4>{"garbage", "F x", "H 1 A", "R 5"});
            break;
        case op::status:
            break;
        }
        return st;
    }

    void push(step const& st, side& s, resp3::request& req) const {
        if (st.what == op::advance)
            return diff::push_advance(req, s.prefix, st.ms, {":qd"});
        if (st.what == op::overwrite)
            return req.push("SET", key(s, st.name), st.value, "PX", unit_ms);
        auto const stored = s.states[st.name];
        bool const fenced = st.fence_plus >= 0 && stored.kind != 0 && stored.kind != '?';
        call_site const at{key(s, st.name), st.tell ? s.prefix + "locker:" : "",
                           fenced ? std::to_string(stored.fence + st.fence_plus) : "0", stored};
        s.scripts.push_call(st, at, s.scripts.source_of(st.what), req);
    }

    /// The field of a fence on `name`, and a violation when it goes below one seen before.
    static void fence_field(side& s, std::string const& name, std::int64_t fence,
                            diff::clock_window w, diff::observation& seen) {
        auto const named = s.fences[name].name_of(fence, w);
        if (named == "!below")
            seen.violations.push_back("fence " + std::to_string(fence) + " of " + name +
                                      " is not above the highest seen before, " +
                                      std::to_string(s.fences[name].highest()));
        seen.exact("fence", named);
    }

    void read_reply(step const& st, resp3::value const& reply, diff::clock_window w, side& s,
                    diff::observation& seen) const {
        if (st.what == op::acquire)
            return read_acquire(st, reply, w, s, seen);
        if (st.what == op::status && reply.elements.size() == 4 && !reply.is_error()) {
            auto const value = std::string(reply.elements[0].as_string().value_or(""));
            state_fields(st.name, value.empty() ? lock_state{} : s.scripts.decode(value), w, s,
                         seen);
            seen.millis("status pttl", diff::integer_of(reply.elements[1]));
            seen.exact("status live", reply_text(reply.elements[2], s.prefix));
            return;
        }
        auto const text = reply_text(reply, s.prefix);
        if (st.what == op::release)
            ++s.paths[(s.lapsed_entry[st.name] ? "release past a lapsed entry " : "release ") +
                      text];
        if (st.what == op::force_unlock)
            ++s.paths["force_unlock " + text.substr(0, 2)];
        seen.exact("reply", text);
    }

    void read_acquire(step const& st, resp3::value const& reply, diff::clock_window w, side& s,
                      diff::observation& seen) const {
        auto const& before = s.states[st.name];
        if (reply.is_error()) {
            // The kind of refusal and whether it names the key, not its wording.
            auto const code = reply.text.substr(0, reply.text.find(' '));
            bool const names_key = reply.text.find(key(s, st.name)) != std::string::npos;
            seen.exact("refused", code + (names_key ? " naming the key" : " not naming the key"));
            ++s.paths["acquire refused"];
            return;
        }
        // A grant is the bare fence or {1, fence, others}; a refusal {0, ms left, others}.
        bool granted = false;
        std::int64_t number = 0;
        std::string others = "0";
        auto const digits = reply.as_string();
        if (auto const fence = reply.as_integer()) {
            granted = true;
            number = *fence;
        } else if (digits && !digits->empty() && digits->size() < 19 &&
                   digits->find_first_not_of("0123456789") == std::string_view::npos) {
            // The uncontended path's fence as its decimal text: the same grant.
            granted = true;
            number = std::stoll(std::string(*digits));
        } else if (reply.elements.size() == 3) {
            granted = diff::integer_of(reply.elements[0]) == 1;
            number = diff::integer_of(reply.elements[1]);
            others = reply_text(reply.elements[2], s.prefix);
        } else {
            seen.exact("reply", reply_text(reply, s.prefix));
            return;
        }
        seen.exact("granted", granted ? "1" : "0");
        seen.exact("others", others);
        if (!granted) {
            seen.millis("wait", number);
            ++s.paths[before.kind == 0 ? "acquire waits, lapsed lock handed to the queue"
                                       : std::string("acquire waits on ") + before.kind];
            return;
        }
        auto& book = s.fences[st.name];
        bool const again = before.kind == 'H' && before.token == st.token;
        if (again && number != before.fence)
            seen.violations.push_back("a repeated acquire by the holder answered fence " +
                                      std::to_string(number) + ", not its " +
                                      std::to_string(before.fence));
        if (!again && book.seen(number))
            seen.violations.push_back("fence " + std::to_string(number) + " of " + st.name +
                                      " granted again");
        ++s.paths[again              ? "acquire again"
                  : before.kind == 0 ? "acquire absent"
                                     : std::string("acquire from ") + before.kind];
        fence_field(s, st.name, number, w, seen);
    }

    void state_fields(std::string const& name, lock_state const& st, diff::clock_window w, side& s,
                      diff::observation& seen) const {
        seen.exact("kind", st.kind == 0 ? "none" : std::string(1, st.kind));
        if (st.kind == '?') {
            seen.exact("raw", diff::unprefixed(st.raw, s.prefix));
            return;
        }
        if (st.kind == 0)
            return;
        fence_field(s, name, st.fence, w, seen);
        seen.exact("holder", st.owner + " " + st.token + " " + st.since + " " + st.queued);
    }

    void read_state(diff::key_dump const& dump, diff::clock_window w, side& s,
                    diff::observation& seen) const {
        s.states.clear();
        s.lapsed_entry.clear();
        for (auto const& k : dump.keys) {
            seen.exact("key", k.name + " " + k.type);
            seen.millis("pttl " + k.name, k.pttl);
            auto const open = k.name.find('{');
            auto const close = k.name.find('}');
            auto const name = open == 0 && close != std::string::npos ? k.name.substr(1, close - 1)
                                                                      : std::string();
            auto const suffix = close == std::string::npos ? k.name : k.name.substr(close + 1);
            if (!name.empty() && suffix.empty() && k.type == "string") {
                auto const st = s.scripts.decode(k.content.at(0));
                state_fields(name, st, w, s, seen);
                s.states[name] = st;
            } else if (suffix == ":qd" && k.type == "hash") {
                // A deadline on the server's clock: what is left of it.
                for (std::size_t i = 0; i + 1 < k.content.size(); i += 2) {
                    auto const left = std::stoll(k.content[i + 1]) - dump.now_ms;
                    seen.millis("deadline " + k.content[i], left);
                    s.lapsed_entry[name] = s.lapsed_entry[name] || left < 0;
                }
            } else {
                std::string joined;
                for (auto const& c : k.content)
                    joined += (joined.empty() ? "" : " ") + diff::unprefixed(c, s.prefix);
                seen.exact("content", joined);
            }
        }
    }
};

/// The default walk's seed; COLOCK_SCRIPT_DIFF_SEED replays another.
constexpr std::uint64_t default_seed = 46;
constexpr std::size_t default_steps = 4000;

/// How a run of the lock's walk ended, and how often it took each path on the reference side.
struct lock_run {
    diff::outcome outcome;
    std::map<std::string, int> paths;
};

lock_run run_lock_differential(lock_side reference, lock_side candidate, diff::settings s) {
    lock_run out;
    run_test(
        [&](asio::io_context& ctx) -> asio::awaitable<void> {
            redis::connection conn{ctx.get_executor(), shared_server().config()};
            redis::connection subscriber{ctx.get_executor(), shared_server().config()};
            lock_family family;
            out.outcome = co_await diff::run(conn, subscriber, family, reference, candidate, s);
            conn.close();
            subscriber.close();
        },
        std::chrono::seconds{240});
    out.paths = std::move(reference.paths);
    return out;
}

/// A copy of `scripts` with `from` replaced by `to` in the script `which` points to, once: the
/// text must be there (the mutations below break the frozen copy, which never changes).
lock_scripts broken(lock_scripts scripts, std::string lock_scripts::*which, std::string const& from,
                    std::string const& to) {
    auto& text = scripts.*which;
    auto const at = text.find(from);
    REQUIRE_MESSAGE(at != std::string::npos, "the mutation's text is not in the script: " << from);
    text.replace(at, from.size(), to);
    return scripts;
}

TEST_CASE("the lock scripts keep the previous release's replies, states, wake-ups and TTLs") {
    diff::settings s;
    s.seed = diff::from_env("COLOCK_SCRIPT_DIFF_SEED", default_seed);
    s.steps = diff::from_env("COLOCK_SCRIPT_DIFF_STEPS", default_steps);
    auto const run = run_lock_differential(make_side("previous release", previous_scripts()),
                                           make_side("current", current_scripts()), s);
    auto const& out = run.outcome;
    REQUIRE_MESSAGE(!out.diverged, out.report << "replay: COLOCK_SCRIPT_DIFF_SEED=" << s.seed
                                              << " COLOCK_SCRIPT_DIFF_STEPS=" << (out.step + 1));
    // The walk reaches the paths that matter, else agreeing would prove little.
    auto paths = run.paths;
    std::string counts;
    for (auto const& [path, count] : paths)
        counts += path + ": " + std::to_string(count) + "\n";
    INFO(counts);
    if (s.steps == default_steps && s.seed == default_seed) {
        for (auto const* path :
             {"release 2", "release 1", "release 0", "acquire from R", "acquire from F",
              "acquire absent", "acquire again", "acquire waits on H", "acquire waits on R",
              "acquire waits, lapsed lock handed to the queue", "acquire refused",
              "force_unlock {1", "release past a lapsed entry 2"})
            CHECK_MESSAGE(paths[path] >= 5, path);
    }
}

TEST_CASE("two releases on the same names at once: lockers of the previous release and of this "
          "one agree with a fleet of the previous release alone on every reply, state, wake-up "
          "and TTL") {
    diff::settings s;
    s.seed = diff::from_env("COLOCK_SCRIPT_DIFF_SEED", default_seed + 1);
    s.steps = diff::from_env("COLOCK_SCRIPT_DIFF_STEPS", default_steps);
    auto mixed = current_scripts();
    mixed.push_call = push_mixed_call;
    auto const run = run_lock_differential(make_side("previous release", previous_scripts()),
                                           make_side("two releases", mixed), s);
    auto const& out = run.outcome;
    REQUIRE_MESSAGE(!out.diverged, out.report << "replay: COLOCK_SCRIPT_DIFF_SEED=" << s.seed
                                              << " COLOCK_SCRIPT_DIFF_STEPS=" << (out.step + 1));
    auto paths = run.paths;
    // Hand-offs between the releases happen: the walk's releases hand the lock on.
    CHECK(paths["release 2"] >= 5);
    CHECK(paths["acquire from R"] >= 5);
}

TEST_CASE("the differential test of the lock scripts finds a broken script") {
    struct mutation {
        char const* what;
        std::string lock_scripts::*script;
        char const* from;
        char const* to;
        char const* found; // in the report
    };
    mutation const mutations[] = {
        {"a release that hands the lock on tells nobody", &lock_scripts::release,
         "redis.pcall('PUBLISH', ARGV[2] .. owner, 'g')", "local _ = owner", "messages"},
        {"a free lock granted with its last fence again", &lock_scripts::acquire,
         "fence = tonumber(fence) + 1", "fence = tonumber(fence)", "granted again"},
        {"a new queue's deadlines without a TTL", &lock_scripts::acquire,
         "  redis.call('PEXPIRE', KEYS[3], ARGV[5])\n", "", "has no TTL"},
        {"a release that counts lapsed queue entries as live", &lock_scripts::release,
         "if deadline < now then", "if false then", "has no TTL"},
        {"a forced unlock that starts the fences again", &lock_scripts::force_unlock,
         "'R ' .. fence .. ' -'", "'R 1 -'", "is not above the highest"},
        {"a hand-off's claim 600 ms too long", &lock_scripts::release,
         "put('R ' .. fence .. ' ' .. owner, 'PX', ARGV[3])",
         "put('R ' .. fence .. ' ' .. owner, 'PX', ARGV[3] + 600)", "pttl"},
    };
    for (auto const& m : mutations) {
        INFO(std::string(m.what));
        diff::settings s;
        s.seed = default_seed;
        s.steps = default_steps;
        auto const out =
            run_lock_differential(
                make_side("previous release", previous_scripts()),
                make_side("broken", broken(previous_scripts(), m.script, m.from, m.to)), s)
                .outcome;
        CHECK(out.diverged);
        CHECK_MESSAGE(out.report.find(m.found) != std::string::npos, out.report);
    }
}

} // namespace colock::test::lock_script_differential

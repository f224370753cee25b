// A differential test of two sets of Redis scripts: the same seeded random steps run through a
// reference set (the previous release's, frozen) and a candidate (today's, or a deliberately
// broken copy), each under a key prefix of its own on one server, and after every step the two
// must agree on the replies, the keys (values, TTLs), and the messages published. Each set is
// also held to what must hold whatever the other does: every key has a TTL, and what a family
// checks itself (a lock's new fence above every earlier one).
//
// What differs between the two runs of a step by nature is normalised, not ignored:
//   - fences, which come from the server's clock: each value is named by its place among the
//     fences seen on its name (fence_book), so a fence reused or not above the last is seen;
//   - durations (PTTLs, what is left of a deadline): equal within a tolerance, the few
//     milliseconds between the two runs;
//   - the prefix, wherever a key or a channel appears in a value, a reply or a message.
//
// Time passes by steps, not by sleeping: an advance takes `ms` off every key's PTTL in a prefix
// (deleting a key that would have lapsed) and off every deadline the family names, as if the
// server's clock had moved on. Families give every duration in whole units of a long period
// (the lock's: 100 s) and advance by whole units plus a margin, so that no key ever lapses on its
// own during the test (which takes seconds), and none is left within the tolerance of lapsing at
// an advance: the two runs lapse the same keys.
//
// A family (see test_lock_script_differential.cpp) provides
//   using step = ...;                                     with std::string describe() const
//   using side = ...;                                     derived from side_base
//   step next_step(std::mt19937_64&, side const& reference);
//   void push(step const&, side&, resp3::request&);       exactly one command per side
//   void read_reply(step const&, resp3::value const&, clock_window, side&, observation&);
//   void read_state(key_dump const&, clock_window, side&, observation&);
// and run() does the rest: both sides' commands and key dumps in one pipelined request per step,
// the messages through a RESP3 subscriber, the comparison and the report. The semaphore's scripts
// would be a second family: their sorted sets scored by the server's clock are deadlines that an
// advance moves as well (push_advance).
#pragma once

#include "test_util.hpp"

#include <colock/redis/connection.hpp>
#include <colock/redis/error.hpp>
#include <colock/resp3/value.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace colock::test::differential {

/// The server's clock, in microseconds, just before and just after a side's command ran: a fence
/// taken from the clock by that command lies within.
struct clock_window {
    std::int64_t first_us = 0;
    std::int64_t last_us = 0;
};

/// Names fence values by their order on one name, so that two runs whose fences come from
/// different clock readings compare equal when they give fences the same way:
///   "#i"  the i-th distinct fence seen on the name (seen again: in a state, or a grant repeated)
///   "+k"  a new fence k above the highest seen (one more than the last: "+1")
///   "clock"  a new fence taken from the clock while the step ran, above every one seen
///   "!below"  a new fence not above the highest seen: never right
class fence_book {
public:
    std::string name_of(std::int64_t fence, clock_window w) {
        auto const at = std::find(seen_.begin(), seen_.end(), fence);
        if (at != seen_.end())
            return "#" + std::to_string(at - seen_.begin());
        std::string name;
        if (!seen_.empty() && fence <= highest_)
            name = "!below";
        else if (fence >= w.first_us && fence <= w.last_us)
            name = "clock";
        else if (seen_.empty())
            name = "first"; // only a state written before the test (never, with fresh prefixes)
        else
            name = "+" + std::to_string(fence - highest_);
        seen_.push_back(fence);
        highest_ = std::max(highest_, fence);
        return name;
    }

    bool seen(std::int64_t fence) const {
        return std::find(seen_.begin(), seen_.end(), fence) != seen_.end();
    }
    /// The highest fence seen; 0 before the first.
    std::int64_t highest() const noexcept { return highest_; }

private:
    std::vector<std::int64_t> seen_;
    std::int64_t highest_ = 0;
};

/// What one side showed at one step: labelled fields, exact texts or durations, and the
/// violations of what that side must hold on its own.
struct observation {
    struct field {
        std::string label;
        std::string text;
        std::optional<std::int64_t> ms; // a duration: compared within the tolerance
    };
    std::vector<field> fields;
    std::vector<std::string> violations;

    void exact(std::string label, std::string text) {
        fields.push_back({std::move(label), std::move(text), std::nullopt});
    }
    void millis(std::string label, std::int64_t ms) {
        fields.push_back({std::move(label), {}, ms});
    }

    std::string render() const {
        std::string out;
        for (auto const& f : fields)
            out +=
                "    " + f.label + " = " + (f.ms ? std::to_string(*f.ms) + " ms" : f.text) + "\n";
        for (auto const& v : violations)
            out += "    VIOLATION: " + v + "\n";
        return out;
    }
};

/// The first field in which `a` and `b` differ, described; nullopt when they agree.
inline std::optional<std::string> difference(observation const& a, observation const& b,
                                             std::int64_t tolerance_ms) {
    auto const n = std::min(a.fields.size(), b.fields.size());
    for (std::size_t i = 0; i < n; ++i) {
        auto const& x = a.fields[i];
        auto const& y = b.fields[i];
        bool const same = x.label == y.label && x.ms.has_value() == y.ms.has_value() &&
                          (x.ms ? std::llabs(*x.ms - *y.ms) <= tolerance_ms : x.text == y.text);
        if (!same)
            return "field " + std::to_string(i) + ": " + x.label + " / " + y.label;
    }
    if (a.fields.size() != b.fields.size())
        return "one shows more fields than the other (" + std::to_string(a.fields.size()) + " / " +
               std::to_string(b.fields.size()) + ")";
    return std::nullopt;
}

/// `text` with every occurrence of `prefix` written "<p>": keys and channels of two prefixes
/// compare equal.
inline std::string unprefixed(std::string text, std::string const& prefix) {
    for (auto at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at + 3))
        text.replace(at, prefix.size(), "<p>");
    return text;
}

/// Every key under a prefix, as the dump script read it right after a step.
struct key_dump {
    struct key {
        std::string name; // without the prefix
        std::string type; // TYPE: string, list, hash, zset, set
        std::int64_t pttl = 0;
        /// A string's value; a list's elements in order; a hash's fields and values, a set's
        /// members, a zset's members and scores, each sorted by field or member.
        std::vector<std::string> content;
    };
    std::int64_t now_ms = 0; // the server's clock as the dump ran
    std::vector<key> keys;   // sorted by name
};

// Returns {now ms, {key, type, pttl, {content}}...} for every key under ARGV[1]. KEYS, not the
// keys declared: a test on one server, which must see a key a script was not meant to write.
inline constexpr std::string_view dump_source = R"lua(
local t = redis.call('TIME')
local out = {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
local keys = redis.call('KEYS', ARGV[1] .. '*')
table.sort(keys)
for _, k in ipairs(keys) do
  local ty = redis.call('TYPE', k).ok
  local content = {}
  if ty == 'string' then content = {redis.call('GET', k)}
  elseif ty == 'list' then content = redis.call('LRANGE', k, 0, -1)
  elseif ty == 'hash' then content = redis.call('HGETALL', k)
  elseif ty == 'set' then content = redis.call('SMEMBERS', k)
  elseif ty == 'zset' then content = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES') end
  out[#out + 1] = {k, ty, redis.call('PTTL', k), content}
end
return out
)lua";

// Time moves on by ARGV[2] ms for every key under ARGV[1]: its PTTL shortened, the key deleted
// when it would have lapsed; in the hashes and sorted sets whose names end in one of ARGV[3...],
// every value or score (a deadline on the server's clock) moved back as much. A key without a
// TTL is left as it is, for the check to find.
inline constexpr std::string_view advance_source = R"lua(
local d = tonumber(ARGV[2])
for _, k in ipairs(redis.call('KEYS', ARGV[1] .. '*')) do
  local pttl = redis.call('PTTL', k)
  if pttl >= 0 and pttl <= d then
    redis.call('DEL', k)
  elseif pttl > d then
    redis.call('PEXPIRE', k, pttl - d)
    for i = 3, #ARGV do
      if string.sub(k, -#ARGV[i]) == ARGV[i] then
        local ty = redis.call('TYPE', k).ok
        if ty == 'hash' then
          local h = redis.call('HGETALL', k)
          for j = 1, #h, 2 do
            local v = tonumber(h[j + 1])
            if v then redis.call('HSET', k, h[j], string.format('%.0f', v - d)) end
          end
        elseif ty == 'zset' then
          local z = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
          for j = 1, #z, 2 do redis.call('ZADD', k, tonumber(z[j + 1]) - d, z[j]) end
        end
      end
    end
  end
end
return 1
)lua";

inline constexpr std::string_view clear_source = R"lua(
for _, k in ipairs(redis.call('KEYS', ARGV[1] .. '*')) do redis.call('DEL', k) end
return 1
)lua";

/// Pushes the advance of `ms` for `prefix` onto `req`; `deadlines` are the name endings of the
/// hashes and sorted sets that hold deadlines on the server's clock.
inline void push_advance(resp3::request& req, std::string const& prefix, std::int64_t ms,
                         std::vector<std::string> const& deadlines) {
    std::vector<std::string> args{"EVAL", std::string(advance_source), "0", prefix,
                                  std::to_string(ms)};
    args.insert(args.end(), deadlines.begin(), deadlines.end());
    req.push_range(args.front(), std::vector<std::string>(args.begin() + 1, args.end()));
}

/// EVAL of `source` with `keys` and `args`, pushed onto `req`.
inline void push_eval(resp3::request& req, std::string_view source,
                      std::vector<std::string> const& keys, std::vector<std::string> const& args) {
    std::vector<std::string> all{std::string(source), std::to_string(keys.size())};
    all.insert(all.end(), keys.begin(), keys.end());
    all.insert(all.end(), args.begin(), args.end());
    req.push_range("EVAL", all);
}

inline std::int64_t integer_of(resp3::value const& v) {
    if (auto const i = v.as_integer())
        return *i;
    if (auto const s = v.as_string())
        return std::stoll(std::string(*s));
    return 0;
}

/// The dump script's reply, with `prefix` taken off the key names.
inline key_dump read_dump(resp3::value const& reply, std::string const& prefix) {
    key_dump dump;
    if (reply.elements.empty())
        return dump;
    dump.now_ms = integer_of(reply.elements[0]);
    for (std::size_t i = 1; i < reply.elements.size(); ++i) {
        auto const& e = reply.elements[i].elements;
        key_dump::key k;
        k.name = std::string(e.at(0).as_string().value_or("")).substr(prefix.size());
        k.type = std::string(e.at(1).as_string().value_or(""));
        k.pttl = integer_of(e.at(2));
        for (auto const& c : e.at(3).elements)
            k.content.emplace_back(c.as_string().value_or(""));
        // Hashes and sets come in no order: sorted by field (pairs) or member.
        if (k.type == "hash" || k.type == "zset") {
            std::vector<std::pair<std::string, std::string>> pairs;
            for (std::size_t j = 0; j + 1 < k.content.size(); j += 2)
                pairs.emplace_back(k.content[j], k.content[j + 1]);
            std::sort(pairs.begin(), pairs.end());
            k.content.clear();
            for (auto& [f, v] : pairs) {
                k.content.push_back(f);
                k.content.push_back(v);
            }
        } else if (k.type == "set") {
            std::sort(k.content.begin(), k.content.end());
        }
        dump.keys.push_back(std::move(k));
    }
    return dump;
}

/// What run() knows of a side: a label for reports and the prefix of all its keys and channels.
/// A family's side derives from it and adds its scripts and its model of the keys.
struct side_base {
    std::string label;
    std::string prefix;
};

/// Every message published under either side's prefix (PSUBSCRIBE prefix*), by pattern.
struct message_tap final : redis::push_listener {
    std::map<std::string, std::vector<std::string>> by_pattern; // "<channel> <payload>"

    void on_push(resp3::value const& push) override {
        auto const& e = push.elements;
        if (e.size() == 4 && e[0].as_string() == "pmessage")
            by_pattern[std::string(e[1].as_string().value_or(""))].push_back(
                std::string(e[2].as_string().value_or("")) + " " +
                std::string(e[3].as_string().value_or("")));
    }
    void on_reconnect() override { ++reconnects; }

    /// The messages of `side` since the last call, prefix written "<p>", sorted: one script
    /// run's messages go to different channels, whose order nobody can rely on.
    std::string take(side_base const& side) {
        auto& got = by_pattern[side.prefix + "*"];
        std::vector<std::string> out;
        for (auto const& m : got)
            out.push_back(unprefixed(m, side.prefix));
        got.clear();
        std::sort(out.begin(), out.end());
        std::string joined;
        for (auto const& m : out)
            joined += (joined.empty() ? "" : " | ") + m;
        return joined;
    }

    int reconnects = 0;
};

struct settings {
    std::uint64_t seed = 1;
    std::size_t steps = 1000;
    std::int64_t tolerance_ms = 500;
};

/// `fallback`, or the number in environment variable `name` when it is set: a failing seed is
/// replayed, or a longer walk taken, without a rebuild.
inline std::uint64_t from_env(char const* name, std::uint64_t fallback) {
    char const* text = std::getenv(name);
    return text && *text ? std::stoull(text) : fallback;
}

/// How a run ended: at the first step where the sides disagreed or one broke a rule, with a
/// report naming the seed, the step and the steps before it; else after all its steps.
struct outcome {
    bool diverged = false;
    std::size_t step = 0;
    std::string report;
};

/// Runs `s.steps` random steps of `family` through `reference` and `candidate` on `conn`, with
/// `subscriber` (another connection to the same server) receiving their messages, and stops at
/// the first disagreement. Deletes the sides' keys at the end.
template <class Family>
asio::awaitable<outcome> run(redis::connection& conn, redis::connection& subscriber, Family& family,
                             typename Family::side& reference, typename Family::side& candidate,
                             settings s) {
    auto tap = std::make_shared<message_tap>();
    subscriber.add_push_listener(tap);
    // Through async_exec: a pattern subscription, for a test on one server that does not
    // reconnect (a reconnection is checked below rather than renewed).
    co_await subscriber.co_exec(
        command("PSUBSCRIBE", reference.prefix + "*", candidate.prefix + "*"));

    std::mt19937_64 rng(s.seed);
    std::deque<std::string> recent; // the steps before a disagreement, for the report
    outcome out;
    typename Family::side* const sides[] = {&reference, &candidate};
    for (std::size_t i = 0; i < s.steps && !out.diverged; ++i) {
        auto const step = family.next_step(rng, reference);
        resp3::request req;
        for (auto* side : sides) {
            req.push("TIME");
            family.push(step, *side, req);
            req.push("TIME");
        }
        for (auto* side : sides)
            push_eval(req, dump_source, {}, {side->prefix});
        // Not a structured binding: the lambda below uses the replies (Clang 14 cannot capture
        // one).
        auto result = co_await conn.async_exec(std::move(req), as_tuple);
        // An error reply (a refusal by a script) is an answer like any other, compared below.
        if (auto const ec = std::get<0>(result); ec && ec != redis::error::server_error)
            throw system_error(ec, "differential step " + std::to_string(i));
        auto const& replies = std::get<1>(result);
        // Every message a step published is in the subscriber's stream before this answer.
        co_await subscriber.co_exec(command("PING"));

        observation seen[2];
        for (std::size_t k = 0; k < 2; ++k) {
            auto& side = *sides[k];
            auto const time_us = [&](std::size_t at) {
                auto const& t = replies.at(at).elements;
                return integer_of(t.at(0)) * 1'000'000 + integer_of(t.at(1));
            };
            clock_window const w{time_us(3 * k), time_us(3 * k + 2)};
            family.read_reply(step, replies.at(3 * k + 1), w, side, seen[k]);
            seen[k].exact("messages", tap->take(side));
            auto const dump = read_dump(replies.at(6 + k), side.prefix);
            for (auto const& key : dump.keys)
                if (key.pttl < 0)
                    seen[k].violations.push_back("key " + key.name + " has no TTL");
            family.read_state(dump, w, side, seen[k]);
        }
        if (tap->reconnects != 0)
            seen[1].violations.push_back("the subscriber reconnected: messages may be missing");

        auto const differs = difference(seen[0], seen[1], s.tolerance_ms);
        if (differs || !seen[0].violations.empty() || !seen[1].violations.empty()) {
            out.diverged = true;
            out.step = i;
            out.report = "seed " + std::to_string(s.seed) + ", step " + std::to_string(i) + " of " +
                         std::to_string(s.steps) + ": " + step.describe() + "\n";
            out.report += "  the steps before it:\n";
            for (auto const& r : recent)
                out.report += "    " + r + "\n";
            out.report += "  " + (differs ? *differs : std::string("the sides agree")) + "\n";
            for (std::size_t k = 0; k < 2; ++k)
                out.report += "  " + sides[k]->label + ":\n" + seen[k].render();
        }
        recent.push_back(std::to_string(i) + ": " + step.describe());
        if (recent.size() > 12)
            recent.pop_front();
    }

    co_await subscriber.co_exec(
        command("PUNSUBSCRIBE", reference.prefix + "*", candidate.prefix + "*"));
    subscriber.remove_push_listener(tap.get());
    for (auto* side : sides)
        co_await conn.co_exec(command("EVAL", clear_source, "0", side->prefix));
    co_return out;
}

} // namespace colock::test::differential

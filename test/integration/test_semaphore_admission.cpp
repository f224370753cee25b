// The semaphore's admission, as the Lua scripts do it on a real server, checked step by step
// against a model of its rules written out in C++ (admission_model below, from the rules in
// src/lock/store/semaphore_scripts.hpp's header): random acquisitions (queued or tries, by three
// lockers), the repeated attempts of queued calls, releases and calls leaving the queue; on a
// semaphore of 5 (calls for 1 to 3 permits), and in the read-write lock's shape (capacity 2^40,
// readers take one permit, writers all of them, and writers downgrade). After each step the reply
// and the server's state (the holdings and their weights, the count of the permits held, the
// queue in order, which entries were woken) must be the model's. Leases, queue entries and
// claims are long here, so that nothing lapses on its own during the run; a holding's lapse is a
// step (its expiry moved into the past, then a call that sweeps). What lapses by time is tested
// with the semaphore itself (test_semaphore.cpp).
#include "lock/store/semaphore_scripts.hpp"

#include "lock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/redis_server.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace colock;
using namespace colock::test;

namespace {

// The rules: free permits = capacity - the weights held. A call is admitted when its permits
// and those of every entry ahead of it in the queue fit in the free permits (a call not queued
// counts the whole queue as ahead); its attempt wakes the entries ahead of it that fit, when
// some permits are free. A call not admitted that may queue takes the last place (or keeps its
// place, not woken any more). A release, or a call leaving the queue, wakes the entries that
// fit from the head on, each once.
class admission_model {
public:
    struct entry {
        std::string token;
        std::size_t want = 0;
        bool woken = false;
    };

    explicit admission_model(std::size_t capacity) : capacity_(capacity) {}

    std::size_t free() const {
        std::size_t used = 0;
        for (auto const& h : held_)
            used += h.second;
        return capacity_ - used;
    }

    // Granted; `free_seen`: the free permits the attempt found.
    bool acquire(std::string const& token, std::size_t want, bool may_queue,
                 std::size_t& free_seen) {
        free_seen = free();
        bool admitted = false;
        auto const mine = position(token);
        if (free_seen > 0) {
            std::size_t ahead = 0;
            bool blocked = false;
            std::size_t const stop = mine.value_or(queue_.size());
            for (std::size_t i = 0; i < stop; ++i) {
                if (ahead + queue_[i].want > free_seen) {
                    blocked = true;
                    break;
                }
                ahead += queue_[i].want;
                queue_[i].woken = true;
            }
            admitted = !blocked && ahead + want <= free_seen;
        }
        if (admitted) {
            if (mine)
                queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(*mine));
            held_[token] = want;
            return true;
        }
        if (may_queue) {
            if (mine)
                queue_[*mine].woken = false;
            else
                queue_.push_back({token, want, false});
        }
        return false;
    }

    // 1 when the holding was there.
    int release(std::string const& token) {
        int const ours = held_.erase(token) == 1 ? 1 : 0;
        wake();
        return ours;
    }

    // A writer becomes a reader: 1 when the holding was there.
    int downgrade(std::string const& token) {
        auto const it = held_.find(token);
        if (it == held_.end())
            return 0;
        if (it->second > 1) {
            it->second = 1;
            wake();
        }
        return 1;
    }

    // The holding's lease ran out: its permits are free, nobody is woken (an attempt that
    // finds them free wakes the entries ahead of it that fit).
    void lapse(std::string const& token) { held_.erase(token); }

    std::size_t used() const { return capacity_ - free(); }

    // 1 when the entry was there.
    int leave(std::string const& token) {
        int ours = 0;
        if (auto const at = position(token)) {
            queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(*at));
            ours = 1;
        }
        wake();
        return ours;
    }

    std::map<std::string, std::size_t> const& held() const { return held_; }
    std::vector<entry> const& queue() const { return queue_; }

private:
    std::optional<std::size_t> position(std::string const& token) const {
        for (std::size_t i = 0; i < queue_.size(); ++i)
            if (queue_[i].token == token)
                return i;
        return std::nullopt;
    }

    void wake() {
        std::size_t ahead = 0;
        std::size_t const f = free();
        for (auto& e : queue_) {
            if (ahead + e.want > f)
                return;
            ahead += e.want;
            e.woken = true;
        }
    }

    std::size_t const capacity_;
    std::map<std::string, std::size_t> held_;
    std::vector<entry> queue_;
};

// One step of the run.
struct step {
    enum class kind { acquire, retry, release, leave, downgrade, lapse } what = kind::acquire;
    std::string token;
    std::size_t want = 1;
    bool may_queue = true;
    std::string owner;
};

std::string describe(step const& s) {
    switch (s.what) {
    case step::kind::acquire:
        return "acquire " + s.token + " x" + std::to_string(s.want) +
               (s.may_queue ? " (queues)" : " (try)") + " by " + s.owner;
    case step::kind::retry:
        return "retry " + s.token + " x" + std::to_string(s.want) + " by " + s.owner;
    case step::kind::release:
        return "release " + s.token;
    case step::kind::leave:
        return "leave " + s.token;
    case step::kind::downgrade:
        return "downgrade " + s.token;
    case step::kind::lapse:
        return "lapse " + s.token;
    }
    return {};
}

// The server's state, as the model keeps it.
struct server_state {
    std::map<std::string, std::size_t> held;
    std::vector<admission_model::entry> queue;
};

server_state parse_state(std::vector<resp3::value> const& replies) {
    // ZRANGE :h, HGETALL :hw, LRANGE :q, HGETALL :qd
    server_state s;
    for (auto const& token : replies.at(0).elements)
        s.held[std::string(token.as_string().value_or(""))] = 1;
    auto const& weights = replies.at(1).elements;
    for (std::size_t i = 0; i + 1 < weights.size(); i += 2)
        s.held[std::string(weights[i].as_string().value_or(""))] =
            std::stoul(std::string(weights[i + 1].as_string().value_or("0")));
    std::map<std::string, std::string> records;
    auto const& fields = replies.at(3).elements;
    for (std::size_t i = 0; i + 1 < fields.size(); i += 2)
        records[std::string(fields[i].as_string().value_or(""))] =
            std::string(fields[i + 1].as_string().value_or(""));
    for (auto const& token : replies.at(2).elements) {
        admission_model::entry e;
        e.token = std::string(token.as_string().value_or(""));
        // "<deadline> <permits> <owner> <woken>"
        auto const& record = records[e.token];
        auto const first = record.find(' ');
        auto const second = record.find(' ', first + 1);
        e.want = std::stoul(record.substr(first + 1, second - first - 1));
        e.woken = !record.empty() && record.back() == '1';
        s.queue.push_back(e);
    }
    return s;
}

std::string state_text(std::map<std::string, std::size_t> const& held,
                       std::vector<admission_model::entry> const& queue) {
    std::string text = "held:";
    for (auto const& h : held)
        text += " " + h.first + "x" + std::to_string(h.second); // a writer: x1099511627776
    text += "; queue:";
    for (auto const& e : queue)
        text += " " + e.token + "x" + std::to_string(e.want) + (e.woken ? "(woken)" : "");
    return text;
}

bool same(server_state const& s, admission_model const& m) {
    if (s.held != m.held() || s.queue.size() != m.queue().size())
        return false;
    for (std::size_t i = 0; i < s.queue.size(); ++i)
        if (s.queue[i].token != m.queue()[i].token || s.queue[i].want != m.queue()[i].want ||
            s.queue[i].woken != m.queue()[i].woken)
            return false;
    return true;
}

// What a new call wants: 1 to 3 of a semaphore's permits, or a reader's 1 or a writer's all.
struct shape {
    std::size_t capacity;
    bool rw; // the read-write lock's: one call in four a writer
};

std::size_t new_want(std::mt19937& rng, shape const& sh) {
    std::uniform_int_distribution<int> pick(0, 99);
    if (sh.rw)
        return pick(rng) < 25 ? sh.capacity : 1;
    return 1 + static_cast<std::size_t>(pick(rng)) % 3;
}

// The next step, drawn from what the model holds and queues: releases of holdings (and, for the
// read-write lock, writers' downgrades), retries (mostly of woken entries, as a woken call asks
// again), leaves, and new calls, fewer of them queuing while the queue is long.
step next_step(std::mt19937& rng, admission_model const& m, shape const& sh, int& tokens) {
    static char const* const owners[] = {"locker-a", "locker-b", "locker-c"};
    std::uniform_int_distribution<int> pick(0, 99);
    int const roll = pick(rng);
    step s;
    s.owner = owners[static_cast<std::size_t>(pick(rng)) % 3];
    if (roll < 30 && !m.held().empty()) {
        s.what = step::kind::release;
        auto it = m.held().begin();
        std::advance(it, static_cast<long>(static_cast<std::size_t>(pick(rng)) % m.held().size()));
        s.token = it->first;
        if (sh.rw && it->second > 1 && pick(rng) < 40)
            s.what = step::kind::downgrade;
        else if (pick(rng) < 15)
            s.what = step::kind::lapse;
        return s;
    }
    if (roll < 58 && !m.queue().empty()) {
        std::vector<std::size_t> woken;
        for (std::size_t i = 0; i < m.queue().size(); ++i)
            if (m.queue()[i].woken)
                woken.push_back(i);
        std::size_t at = static_cast<std::size_t>(pick(rng)) % m.queue().size();
        if (!woken.empty() && pick(rng) < 70)
            at = woken[static_cast<std::size_t>(pick(rng)) % woken.size()];
        s.token = m.queue()[at].token;
        s.want = m.queue()[at].want;
        s.what = roll < 52 ? step::kind::retry : step::kind::leave;
        return s;
    }
    s.what = step::kind::acquire;
    s.token = "t" + std::to_string(++tokens);
    s.want = new_want(rng, sh);
    s.may_queue = m.queue().size() < 8 && pick(rng) < 80;
    return s;
}

// Runs `steps` random steps on a fresh semaphore of `sh`, the server's answers and state
// compared with the model's after each.
asio::awaitable<void> run_against_model(redis::connection& conn, shape sh, int steps,
                                        unsigned seed) {
    auto const& scripts = colock::detail::scripts_for(colock::detail::script_variant::plain);
    auto const& acquire = scripts.semaphore_acquire;
    auto const& release = scripts.semaphore_release;
    auto const& downgrade = scripts.semaphore_downgrade;
    // Not a loop over a braced list: GCC 12 miscompiles those inside a coroutine.
    co_await conn.co_exec(command("SCRIPT", "LOAD", acquire.source));
    co_await conn.co_exec(command("SCRIPT", "LOAD", release.source));
    co_await conn.co_exec(command("SCRIPT", "LOAD", downgrade.source));
    co_await conn.co_exec(command("SCRIPT", "LOAD", scripts.semaphore_read.source));

    auto const base = "colock:semaphore:{" + unique_key("admission") + "}";
    std::vector<std::string> const keys =
        strings(base, base + ":h", base + ":hw", base + ":q", base + ":qd");
    std::string const channel_prefix = base + ":w:";
    std::string const long_time = "600000"; // leases, queue entries and claims: no lapse

    admission_model model(sh.capacity);
    std::mt19937 rng(seed);
    int tokens = 0;
    int granted = 0, refused = 0, woken_seen = 0, downgrades = 0, lapses = 0;
    for (int i = 0; i < steps; ++i) {
        auto const s = next_step(rng, model, sh, tokens);
        std::vector<std::string> words;
        bool expected_granted = false;
        std::size_t expected_free = 0;
        int expected_reply = 0;
        if (s.what == step::kind::acquire || s.what == step::kind::retry) {
            expected_granted = model.acquire(s.token, s.want, s.may_queue, expected_free);
            words = strings(acquire.sha, "5");
            words.insert(words.end(), keys.begin(), keys.end());
            // A writer numbers a new fence, a reader takes the last one.
            auto const args = strings(s.token, std::to_string(s.want), std::to_string(sh.capacity),
                                      long_time, s.owner, s.may_queue ? "1" : "0", long_time,
                                      s.want > 1 || !sh.rw ? "1" : "0", channel_prefix, long_time);
            words.insert(words.end(), args.begin(), args.end());
        } else if (s.what == step::kind::lapse) {
            // Its expiry moved into the past, then the read script: the sweep of the next call.
            model.lapse(s.token);
            co_await conn.co_exec(command("ZADD", keys[1], "XX", "1", s.token));
            words = strings(scripts.semaphore_read.sha, "5");
            words.insert(words.end(), keys.begin(), keys.end());
        } else if (s.what == step::kind::downgrade) {
            expected_reply = model.downgrade(s.token);
            ++downgrades;
            words = strings(downgrade.sha, "5");
            words.insert(words.end(), keys.begin(), keys.end());
            auto const args = strings(s.token, channel_prefix, long_time);
            words.insert(words.end(), args.begin(), args.end());
        } else {
            // The permits the caller knows it holds (or, leaving, wanted).
            std::size_t permits = s.want;
            if (s.what == step::kind::release)
                permits = model.held().at(s.token);
            if (s.what == step::kind::release)
                expected_reply = model.release(s.token);
            else
                expected_reply = model.leave(s.token);
            words = strings(release.sha, "5");
            words.insert(words.end(), keys.begin(), keys.end());
            auto const args =
                strings(s.token, channel_prefix, long_time, s.what == step::kind::leave ? "1" : "0",
                        std::to_string(permits), std::to_string(sh.capacity));
            words.insert(words.end(), args.begin(), args.end());
        }
        resp3::request req;
        req.push_range("EVALSHA", words);
        auto const replies = co_await conn.co_exec(std::move(req));
        auto const& reply = replies.at(0);
        INFO("step " << i << ": " << describe(s));
        REQUIRE_FALSE(reply.is_error());
        if (s.what == step::kind::acquire || s.what == step::kind::retry) {
            REQUIRE(reply.elements.size() >= 2);
            bool const got = reply.elements[0].as_integer().value_or(-1) == 1;
            CHECK(got == expected_granted);
            if (got) {
                ++granted;
            } else {
                ++refused;
                REQUIRE(reply.elements.size() == 3);
                CHECK(reply.elements[2].as_integer().value_or(-1) ==
                      static_cast<std::int64_t>(expected_free));
            }
        } else if (s.what == step::kind::lapse) {
            ++lapses;
            REQUIRE(reply.elements.size() == 6); // capacity, held, queued, fence, now, listed
            CHECK(reply.elements[1].as_integer().value_or(-1) ==
                  static_cast<std::int64_t>(model.used()));
        } else {
            CHECK(reply.as_integer().value_or(-1) == expected_reply);
        }

        resp3::request read;
        read.push("ZRANGE", keys[1], "0", "-1");
        read.push("HGETALL", keys[2]);
        read.push("LRANGE", keys[3], "0", "-1");
        read.push("HGETALL", keys[4]);
        read.push("HGET", keys[0], "used");
        auto const read_replies = co_await conn.co_exec(std::move(read));
        auto const state = parse_state(read_replies);
        // The count of the permits held, kept by the scripts, is the holdings' weights.
        if (auto const used = read_replies.at(4).as_string())
            CHECK(std::string(*used) == std::to_string(model.used()));
        else
            CHECK(model.used() == 0);
        for (auto const& e : state.queue)
            woken_seen += e.woken ? 1 : 0;
        INFO("server: " << state_text(state.held, state.queue));
        INFO("model:  " << state_text(model.held(), model.queue()));
        REQUIRE(same(state, model));
    }
    MESSAGE(granted << " grants, " << refused << " refusals, " << woken_seen
                    << " woken entries seen, " << downgrades << " downgrades, " << lapses
                    << " lapses");
    // The run went through the interesting cases: grants, refusals, wake-ups.
    CHECK(granted > steps / 8);
    CHECK(refused > steps / 8);
    CHECK(woken_seen > steps / 20);
    CHECK((downgrades > 0) == sh.rw);
    CHECK(lapses > 0);
    resp3::request cleanup;
    cleanup.push_range("DEL", keys);
    co_await conn.co_exec(std::move(cleanup));
}

} // namespace

TEST_CASE("semaphore admission: the scripts on a real server take the same decisions as the "
          "model of their rules, step by step, over random acquisitions, retries, releases and "
          "leaves; for a semaphore of 5 and for the read-write lock") {
    run_connected(shared_server().config(), [](redis::connection& conn) -> asio::awaitable<void> {
        co_await run_against_model(conn, shape{5, false}, 400, 20261127);
        co_await run_against_model(conn, shape{std::size_t{1} << 40, true}, 400, 20261128);
    });
}

TEST_CASE("semaphore release: a count of the permits held that is missing or not a number is "
          "counted again from the holdings, a hash deleted behind them is not made again, and "
          "every key keeps an expiry") {
    run_connected(shared_server().config(), [](redis::connection& conn) -> asio::awaitable<void> {
        auto const& scripts = colock::detail::scripts_for(colock::detail::script_variant::plain);
        co_await conn.co_exec(command("SCRIPT", "LOAD", scripts.semaphore_acquire.source));
        co_await conn.co_exec(command("SCRIPT", "LOAD", scripts.semaphore_release.source));
        for (std::string const damage : {"no count", "count zz", "no hash"}) {
            CAPTURE(damage);
            auto const base = "colock:semaphore:{" + unique_key("recount") + "}";
            auto const keys = strings(base, base + ":h", base + ":hw", base + ":q", base + ":qd");
            auto acquire = [&](std::string const& token, std::string const& permits) {
                auto words = strings(scripts.semaphore_acquire.sha, "5");
                words.insert(words.end(), keys.begin(), keys.end());
                auto const args = strings(token, permits, "5", "60000", "owner", "0", "60000", "1",
                                          base + ":w:", "1000");
                words.insert(words.end(), args.begin(), args.end());
                resp3::request req;
                req.push_range("EVALSHA", words);
                return req;
            };
            auto granted = [](std::vector<resp3::value> const& r) {
                return r.at(0).elements.at(0).as_integer().value_or(-1) == 1;
            };
            CHECK(granted(co_await conn.co_exec(acquire("two", "2"))));
            CHECK(granted(co_await conn.co_exec(acquire("one", "1"))));
            if (damage == "no count")
                co_await integer(conn, command("HDEL", base, "used"));
            else if (damage == "count zz")
                co_await integer(conn, command("HSET", base, "used", "zz"));
            else
                co_await integer(conn, command("DEL", base));

            auto words = strings(scripts.semaphore_release.sha, "5");
            words.insert(words.end(), keys.begin(), keys.end());
            auto const args = strings("one", base + ":w:", "1000", "0", "1", "5");
            words.insert(words.end(), args.begin(), args.end());
            resp3::request release;
            release.push_range("EVALSHA", words);
            CHECK(co_await integer(conn, std::move(release)) == 1);
            auto const used = co_await conn.co_exec(command("HGET", base, "used"));
            if (damage == "no hash")
                CHECK(co_await integer(conn, command("EXISTS", base)) == 0);
            else
                CHECK(used.at(0).as_string().value_or("") == "2");
            // The holding of two is still counted: three more fit, not four.
            CHECK_FALSE(granted(co_await conn.co_exec(acquire("four", "4"))));
            CHECK(granted(co_await conn.co_exec(acquire("three", "3"))));
            CHECK((co_await conn.co_exec(command("HGET", base, "used")))
                      .at(0)
                      .as_string()
                      .value_or("") == "5");
            for (auto const& key : keys) {
                auto const pttl = co_await integer(conn, command("PTTL", key));
                CHECK_MESSAGE(pttl != -1, key, " has no expiry");
            }
            resp3::request cleanup;
            cleanup.push_range("DEL", keys);
            co_await conn.co_exec(std::move(cleanup));
        }
    });
}

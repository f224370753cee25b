// The lock scripts called by hand on a real server, as the store calls them: the release's
// hand-off and the queue's expiry, the uncontended paths (the one-key calls and the general
// scripts' own) against the general ones, and a later release's key format refused.
#include "test_util.hpp"

#include "lock/store/lock_arguments.hpp"
#include "lock/store/lock_scripts.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

using namespace colock;
using namespace colock::test;

TEST_CASE("release script: a hand-off that pushes the releasing process back onto an emptied "
          "queue leaves the queue with an expiry") {
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection probe{ctx.get_executor(), shared_server().config()};
        std::string const name = unique_key("queue-expiry");
        std::string const key = lock_key(name);
        std::string const queue = key + ":q";
        std::string const deadlines = key + ":qd";
        // Held by locker "x", which is queued itself (more of its waiters follow), with locker
        // "y" queued behind it: the release hands the lock to "y" and puts "x" back.
        auto const time = co_await probe.co_exec(command("TIME"));
        auto const now_ms = std::stoll(text_of(time.at(0).elements.at(0))) * 1000 +
                            std::stoll(text_of(time.at(0).elements.at(1))) / 1000;
        auto const live = std::to_string(now_ms + 3000);
        co_await probe.co_exec(command("SET", key, "H 100 x token-x 0 2", "PX", "10000"));
        co_await probe.co_exec(command("RPUSH", queue, "x", "y"));
        co_await probe.co_exec(command("HSET", deadlines, "x", live, "y", live));
        co_await probe.co_exec(command("PEXPIRE", queue, "3000"));
        co_await probe.co_exec(command("PEXPIRE", deadlines, "3000"));

        auto const args =
            detail::release_arguments(detail::release_kind::hand_on, "token-x", 1000ms, 0);
        auto const reply = co_await probe.co_exec(
            command("EVAL", detail::release_source, "3", key, queue, deadlines, args[0], args[1]));
        CHECK(reply.at(0).as_integer() == 2); // handed to "y"
        auto const listed = co_await probe.co_exec(command("LRANGE", queue, "0", "-1"));
        REQUIRE(listed.at(0).elements.size() == 1);
        CHECK(text_of(listed.at(0).elements.at(0)) == "x");
        auto const queue_ttl = co_await integer(probe, command("PTTL", queue));
        CHECK(queue_ttl > 0);
        CHECK(queue_ttl <= 3001);
        co_await probe.co_exec(command("DEL", key, queue, deadlines));
        probe.close();
    });
}

TEST_CASE("acquire and release scripts: the uncontended paths write what the general paths do, "
          "keep the key's expiry, and act only for the token") {
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection probe{ctx.get_executor(), shared_server().config()};
        std::string const name = unique_key("uncontended-paths");
        std::string const key = lock_key(name);
        std::string const queue = key + ":q";
        std::string const deadlines = key + ":qd";
        auto const acquire = [&](std::string token, detail::queueing queueing, std::int64_t since) {
            auto const a = detail::acquire_arguments("owner-a", token, since, 10'000ms, queueing,
                                                     3000ms, 1000ms);
            return command("EVAL", detail::acquire_source, "3", key, queue, deadlines, a[0], a[1],
                           a[2]);
        };
        // A release as the store sends it: with the value its grant wrote, the one-key call
        // first (release_known), and the general one when that answers 0; without, the general
        // one alone. The reply of the one that decided, and which one it was.
        struct release_outcome {
            std::int64_t reply = 0;
            bool known = false;
        };
        auto const release = [&](std::string token, std::int64_t last_fence,
                                 std::optional<detail::held_value> written = {})
            -> asio::awaitable<release_outcome> {
            if (written) {
                auto const k =
                    detail::known_release_arguments("owner-a", token, *written, last_fence);
                auto const r = co_await integer(probe, command("EVAL", detail::release_known_source,
                                                               "1", key, k.args[0], k.args[1]));
                if (r != 0)
                    co_return release_outcome{r, true};
            }
            auto const a =
                detail::release_arguments(detail::release_kind::hand_on, token, 1000ms, last_fence);
            co_return release_outcome{
                co_await integer(probe, command("EVAL", detail::release_source, "3", key, queue,
                                                deadlines, a[0], a[1])),
                false};
        };
        auto const released =
            [&](std::string token, std::int64_t last_fence,
                std::optional<detail::held_value> written = {}) -> asio::awaitable<std::int64_t> {
            co_return (co_await release(token, last_fence, written)).reply;
        };
        using held = detail::held_value;
        auto const fence_of = [](std::vector<resp3::value> const& reply) {
            auto const& v = reply.at(0);
            return v.as_integer() ? *v.as_integer() : std::stoll(text_of(v));
        };
        co_await probe.co_exec(command("SET", key, "F 41", "PX", "60000"));

        // Free, taken without staying queued: the next fence, alone.
        CHECK(fence_of(co_await probe.co_exec(
                  acquire("tok-a", detail::queueing::when_held, 123))) == 42);
        CHECK(co_await get(probe, key) == "H 42 owner-a tok-a 123 0");
        auto ttl = co_await integer(probe, command("PTTL", key));
        CHECK(ttl > 9000);
        CHECK(ttl <= 10000);
        // Again with the same token (a lost reply's retry): the same fence.
        CHECK(fence_of(co_await probe.co_exec(
                  acquire("tok-a", detail::queueing::when_held, 124))) == 42);
        // Another token finds it held, and changes nothing.
        auto const held_reply =
            co_await probe.co_exec(acquire("tok-b", detail::queueing::never, 125));
        REQUIRE(held_reply.at(0).elements.size() == 3);
        CHECK(held_reply.at(0).elements.at(0).as_integer() == 0);
        CHECK(held_reply.at(0).elements.at(1).as_integer() > 0);
        CHECK(co_await get(probe, key) == "H 42 owner-a tok-a 123 0");

        // Released only with its token, whatever the value it says its grant wrote: a value that
        // is not the key's is put back as it was, expiry and all, and the general release
        // decides.
        auto out = co_await release("tok-b", 45, held{42, 123});
        CHECK(out.reply == 0);
        CHECK_FALSE(out.known);
        CHECK(co_await get(probe, key) == "H 42 owner-a tok-a 123 0");
        ttl = co_await integer(probe, command("PTTL", key));
        CHECK(ttl > 9000);
        out = co_await release("tok-a", 45, held{42, 999});
        CHECK(out.reply == 1);
        CHECK_FALSE(out.known);
        CHECK(co_await get(probe, key) == "F 45");
        co_await probe.co_exec(command("SET", key, "H 42 owner-a tok-a 123 0", "PX", "10000"));
        CHECK(co_await released("tok-b", 45) == 0);
        CHECK(co_await get(probe, key) == "H 42 owner-a tok-a 123 0");
        // The one-key release: the larger last fence of the holder's process is kept, and so is
        // the lease's expiry.
        out = co_await release("tok-a", 45, held{42, 123});
        CHECK(out.reply == 1);
        CHECK(out.known);
        CHECK(co_await get(probe, key) == "F 45");
        ttl = co_await integer(probe, command("PTTL", key));
        CHECK(ttl > 0);
        CHECK(ttl <= 10000);
        CHECK(co_await released("tok-a", 45, held{42, 123}) == 0);
        CHECK(co_await get(probe, key) == "F 45");

        // The one-key acquire of the free value this process left: the grant's value, the ttl;
        // anything else in the key is left as it is, for the general acquire.
        auto const acquire_known = [&](std::int64_t free_fence, std::string token) {
            auto const a = detail::known_acquire_arguments(free_fence, "owner-a", token,
                                                           held{free_fence + 1, 200}, 10'000ms);
            REQUIRE(a);
            return integer(probe, command("EVAL", detail::acquire_known_source, "1", key, (*a)[0],
                                          (*a)[1], (*a)[2]));
        };
        CHECK(co_await acquire_known(44, "tok-e") == 0);
        CHECK(co_await get(probe, key) == "F 45");
        CHECK(co_await acquire_known(45, "tok-e") == 1);
        CHECK(co_await get(probe, key) == "H 46 owner-a tok-e 200 0");
        ttl = co_await integer(probe, command("PTTL", key));
        CHECK(ttl > 9000);
        CHECK(co_await acquire_known(45, "tok-f") == 0);
        CHECK(co_await get(probe, key) == "H 46 owner-a tok-e 200 0");
        CHECK_FALSE(detail::known_acquire_arguments(detail::largest_exact_fence, "owner-a", "t",
                                                    held{detail::largest_exact_fence + 1, 1},
                                                    10'000ms));
        CHECK(co_await released("tok-e", 46, held{46, 200}) == 1);

        // A release that finds no key leaves none (its SET made one, without an expiry).
        co_await probe.co_exec(command("DEL", key));
        CHECK(co_await released("tok-a", 45, held{42, 123}) == 0);
        CHECK(co_await integer(probe, command("EXISTS", key)) == 0);

        // The next fence counted on the text, with a carry, and from values the text path leaves
        // to the general one (a zero, a leading zero): the same numbers either way.
        for (auto const& [stored, next] : std::vector<std::pair<std::string, std::int64_t>>{
                 {"F 49", 50},
                 {"F 99", 100},
                 {"F 0", 1},
                 {"F 041", 42},
                 {"F 1799999999999999", 1800000000000000},
                 {"F 9007199254740990", 9007199254740991}}) {
            co_await probe.co_exec(command("SET", key, stored, "PX", "60000"));
            CHECK(fence_of(co_await probe.co_exec(acquire("tok-d", detail::queueing::never, 7))) ==
                  next);
            CHECK(co_await get(probe, key) == fmt::format("H {} owner-a tok-d 7 0", next));
        }

        // The general path from a free state (staying queued): the same value but the queued
        // flag, and the same numbering.
        co_await probe.co_exec(command("SET", key, "F 45", "PX", "60000"));
        CHECK(fence_of(co_await probe.co_exec(
                  acquire("tok-c", detail::queueing::stay_after_grant, 126))) == 46);
        CHECK(co_await get(probe, key) == "H 46 owner-a tok-c 126 1");
        CHECK(co_await integer(probe, command("LLEN", queue)) == 1);
        // What the grant wrote says nobody is queued: the one-command path puts the value back,
        // and the general one hands the lock to the holder's own queued locker.
        out = co_await release("tok-c", 46, held{46, 126});
        CHECK(out.reply == 2);
        CHECK_FALSE(out.known);
        CHECK(co_await get(probe, key) == "R 46 owner-a");
        co_await probe.co_exec(command("DEL", key, queue, deadlines));
        probe.close();
    });
}

TEST_CASE("a lock key in a later release's key format is refused, naming the key and both "
          "formats, and left as it is") {
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection probe{ctx.get_executor(), shared_server().config()};
        std::string const key = lock_key(unique_key("later-format"));
        co_await probe.co_exec(command("SET", key, "2:H 5 x y 0 0", "PX", "60000"));
        auto const a = detail::acquire_arguments("owner-a", "tok", 1, 10'000ms,
                                                 detail::queueing::when_held, 3000ms, 1000ms);
        auto [ec, reply] =
            co_await probe.async_exec(command("EVAL", detail::acquire_source, "3", key, key + ":q",
                                              key + ":qd", a[0], a[1], a[2]),
                                      as_tuple);
        CHECK(ec == redis::error::server_error);
        REQUIRE(reply.size() == 1);
        REQUIRE(reply.at(0).is_error());
        auto const text = reply.at(0).text;
        CHECK(text.find(key) != std::string::npos);
        CHECK(text.find("key format 2") != std::string::npos);
        CHECK(text.find("key format 1") != std::string::npos);
        CHECK(co_await get(probe, key) == "2:H 5 x y 0 0");
        CHECK(co_await integer(probe, command("EXISTS", key + ":q")) == 0);
        co_await probe.co_exec(command("DEL", key));
        probe.close();
    });
}

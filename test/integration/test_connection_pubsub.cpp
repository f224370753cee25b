// Subscribe-family commands against a real redis-server: they are answered by push
// confirmations, or by one ordinary error reply when refused (an ACL user without channel
// permissions gets NOPERM). Every caller must get its own reply either way.
#include <colock/redis/connection.hpp>

#include "test_util.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/as_tuple.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

using namespace colock;
using namespace colock::test;

namespace {

/// An ACL user on `server` that may run every command on every key but use no channel
/// (Redis 7's default for a new user: acl-pubsub-default resetchannels). `channel_rules` adds
/// channel patterns such as "&ok:*".
redis::config user_without_channels(redis_server& server, std::string const& name,
                                    std::string const& channel_rules = {}) {
    auto args = colock::test::strings("ACL", "SETUSER", name, "reset", "on", ">pw", "~*", "+@all",
                                      "resetchannels");
    if (!channel_rules.empty())
        args.push_back(channel_rules);
    server.cli(args);
    auto cfg = fast_config(server);
    cfg.username = name;
    cfg.password = "pw";
    return cfg;
}

/// Variadic rather than a braced list: GCC 12 miscompiles braced lists inside coroutines.
template <class... Outcomes>
asio::awaitable<bool> all_done(std::chrono::milliseconds limit, Outcomes... each) {
    std::vector<std::shared_ptr<exec_outcome>> outcomes;
    (outcomes.push_back(each), ...);
    co_await eventually(
        [&] {
            return std::all_of(outcomes.begin(), outcomes.end(), [](auto& o) { return o->done; });
        },
        limit, 2ms);
    for (auto const& o : outcomes)
        if (!o->done)
            co_return false;
    co_return true;
}

std::shared_ptr<exec_outcome> outcome() {
    return std::make_shared<exec_outcome>();
}

bool is_push_of(resp3::value const& v, std::string const& kind) {
    return v.type == resp3::type::push && v.elements.size() == 3 &&
           v.elements[0].as_string() == kind;
}

} // namespace

TEST_CASE("a refused SUBSCRIBE between two GETs: every caller gets its own reply") {
    auto cfg = user_without_channels(shared_server(), "pubsub-refused-callers");
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), cfg};
        std::string const k1 = unique_key("refused-sub-1");
        std::string const k2 = unique_key("refused-sub-2");
        resp3::request set;
        set.push("SET", k1, "value-1");
        set.push("SET", k2, "value-2");
        co_await conn.co_exec(std::move(set));

        // Three callers in one turn: one write, pipelined.
        auto before = outcome();
        auto sub = outcome();
        auto after = outcome();
        exec_into(conn, command("GET", k1), before);
        exec_into(conn, command("SUBSCRIBE", unique_key("forbidden-channel")), sub);
        exec_into(conn, command("GET", k2), after);
        bool const done = co_await all_done(5000ms, before, sub, after);
        REQUIRE(done);

        CHECK_FALSE(before->ec);
        REQUIRE(before->replies.size() == 1);
        CHECK(text_of(before->replies[0]) == "value-1");

        CHECK(sub->ec == redis::error::server_error);
        REQUIRE(sub->replies.size() == 1);
        CHECK(sub->replies[0].is_error());
        CHECK(redis::first_error_text(sub->replies).find("NOPERM") != std::string::npos);

        CHECK_FALSE(after->ec);
        REQUIRE(after->replies.size() == 1);
        CHECK(text_of(after->replies[0]) == "value-2");

        // Still in step.
        auto pong = co_await conn.co_exec(command("PING", "in-step"));
        CHECK(text_of(pong.at(0)) == "in-step");
        conn.close();
    });
}

TEST_CASE("one request with a refused SUBSCRIBE amid GETs: one value per command") {
    auto cfg = user_without_channels(shared_server(), "pubsub-refused-request");
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), cfg};
        std::string const k = unique_key("refused-sub-request");
        co_await conn.co_exec(command("SET", k, "v"));

        resp3::request req;
        req.push("GET", k);
        req.push("SUBSCRIBE", "forbidden-a", "forbidden-b");
        req.push("PSUBSCRIBE", "forbidden-*");
        req.push("ECHO", "last");
        auto [ec, replies] = co_await conn.async_exec(std::move(req), as_tuple);
        CHECK(ec == redis::error::server_error);
        REQUIRE(replies.size() == 4);
        CHECK(text_of(replies[0]) == "v");
        CHECK(replies[1].is_error());
        CHECK(replies[1].text.find("NOPERM") != std::string::npos);
        CHECK(replies[2].is_error());
        CHECK(text_of(replies[3]) == "last");

        auto echoed = co_await conn.co_exec(command("ECHO", "next"));
        CHECK(text_of(echoed.at(0)) == "next");
        conn.close();
    });
}

TEST_CASE("subscribe-family commands in a request complete once answered, one value each") {
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), shared_server().config()};
        std::string const a = unique_key("family-a");
        std::string const b = unique_key("family-b");
        std::string const pattern = unique_key("family-p") + ":*";

        resp3::request req;
        req.push("SUBSCRIBE", a, b);
        req.push("PSUBSCRIBE", pattern);
        req.push("ECHO", "between");
        req.push("UNSUBSCRIBE"); // every channel; the pattern stays
        req.push("UNSUBSCRIBE"); // none left: one push with a null channel
        req.push("PUNSUBSCRIBE", pattern);
        req.push("SSUBSCRIBE", a);
        req.push("SUNSUBSCRIBE");
        auto [ec, replies] = co_await conn.async_exec(std::move(req), as_tuple);
        CHECK_FALSE(ec);
        REQUIRE(replies.size() == 8);
        CHECK(is_push_of(replies[0], "subscribe"));
        CHECK(replies[0].elements[2].as_integer() == 2); // the last confirmation: b, 2 in all
        CHECK(is_push_of(replies[1], "psubscribe"));
        CHECK(replies[1].elements[2].as_integer() == 3);
        CHECK(text_of(replies[2]) == "between");
        CHECK(is_push_of(replies[3], "unsubscribe"));
        CHECK(replies[3].elements[2].as_integer() == 1); // the pattern is left
        CHECK(is_push_of(replies[4], "unsubscribe"));
        CHECK(replies[4].elements[1].is_null());
        CHECK(is_push_of(replies[5], "punsubscribe"));
        CHECK(replies[5].elements[2].as_integer() == 0);
        CHECK(is_push_of(replies[6], "ssubscribe"));
        CHECK(is_push_of(replies[7], "sunsubscribe"));

        // Nothing is left over for the next caller.
        auto echoed = co_await conn.co_exec(command("ECHO", "after"));
        CHECK(text_of(echoed.at(0)) == "after");
        conn.close();
    });
}

TEST_CASE("async_subscribe refused by the server: server_error, its text, nothing counted") {
    auto cfg = user_without_channels(shared_server(), "pubsub-refused-counted");
    run_connected(cfg, [&](redis::connection& conn) -> asio::awaitable<void> {
        std::string const channel = unique_key("forbidden-counted");
        std::string const k = unique_key("refused-counted");
        co_await conn.co_exec(command("SET", k, "mine"));

        // A request pipelined right behind the subscription is not disturbed.
        auto get_after = outcome();
        bool subscribed = false;
        error_code sub_ec;
        conn.async_subscribe(colock::test::strings(channel), [&](error_code ec) {
            sub_ec = ec;
            subscribed = true;
        });
        exec_into(conn, command("GET", k), get_after);
        bool const done = co_await finishes(subscribed, 5000ms);
        REQUIRE(done);
        CHECK(sub_ec == redis::error::server_error);
        CHECK(conn.last_error_text().find("NOPERM") != std::string::npos);
        CHECK(conn.last_error_text().find(channel) != std::string::npos);
        bool const got = co_await all_done(5000ms, get_after);
        REQUIRE(got);
        CHECK_FALSE(get_after->ec);
        CHECK(text_of(get_after->replies.at(0)) == "mine");

        // The count was rolled back: a second attempt asks the server again, and is refused
        // again, instead of believing it is subscribed.
        auto [again] = co_await conn.async_subscribe(colock::test::strings(channel), as_tuple);
        CHECK(again == redis::error::server_error);
        CHECK(cli_numsub(shared_server(), channel) == 0);
        auto pong = co_await conn.co_exec(command("PING"));
        CHECK(text_of(pong.at(0)) == "PONG");
    });
}

TEST_CASE("a SUBSCRIBE refused in the reconnection handshake drops that channel only") {
    redis_server server;
    auto cfg = user_without_channels(server, "revoked", "&ok:*");
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), cfg};
        co_await conn.async_subscribe(colock::test::strings("ok:kept", "ok:revoked"),
                                      asio::use_awaitable);
        CHECK(co_await numsub_becomes(conn, "ok:revoked", 1) == 1);

        // Redis closes the connections of a user whose channel permissions shrink; the
        // reconnection's handshake then meets the new rules.
        server.cli(colock::test::strings("ACL", "SETUSER", "revoked", "resetchannels", "&ok:kept"));
        bool const back =
            co_await finishes_when([&] { return conn.reconnect_count() >= 1; }, 5000ms);
        REQUIRE(back);
        auto pong = co_await conn.co_exec(command("PING"));
        CHECK(text_of(pong.at(0)) == "PONG");
        CHECK(conn.is_connected());
        CHECK(conn.last_error_text().find("ok:revoked") != std::string::npos);
        CHECK(conn.last_error_text().find("NOPERM") != std::string::npos);
        CHECK(cli_numsub(server, "ok:kept") == 1);
        CHECK(cli_numsub(server, "ok:revoked") == 0);

        // The dropped channel is not counted: once allowed again, subscribing asks the server.
        server.cli(colock::test::strings("ACL", "SETUSER", "revoked", "&ok:revoked"));
        co_await conn.async_subscribe(colock::test::strings("ok:revoked"), asio::use_awaitable);
        CHECK(cli_numsub(server, "ok:revoked") == 1);
        conn.close();
    });
}

TEST_CASE("MONITOR, CLIENT REPLY OFF|SKIP and RESET are refused before anything is written") {
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), shared_server().config()};
        auto const before = co_await commandstats(conn);

        resp3::request skip;
        skip.push("ECHO", "never sent");
        skip.push("CLIENT", "REPLY", "SKIP");
        auto [ec, replies] = co_await conn.async_exec(std::move(skip), as_tuple);
        CHECK(ec == redis::error::unsupported_command);
        REQUIRE(replies.size() == 2);
        CHECK(replies[1].is_error());
        CHECK(replies[1].text.find("CLIENT REPLY SKIP") != std::string::npos);

        for (auto const& name : colock::test::strings("MONITOR", "RESET")) {
            CAPTURE(name);
            std::string what;
            try {
                co_await conn.co_exec(command(name));
            } catch (boost::system::system_error const& e) {
                CHECK(e.code() == redis::error::unsupported_command);
                what = e.what();
            }
            CHECK(what.find(name) != std::string::npos);
        }
        resp3::request off;
        off.push("client", "reply", "off");
        auto [oec, oreplies] = co_await conn.async_exec(std::move(off), as_tuple);
        CHECK(oec == redis::error::unsupported_command);

        // Nothing reached the server, and the connection is as good as before.
        auto const after = co_await commandstats(conn);
        CHECK(command_calls(after, "monitor") == command_calls(before, "monitor"));
        CHECK(command_calls(after, "reset") == command_calls(before, "reset"));
        CHECK(command_calls(after, "client|reply") == command_calls(before, "client|reply"));
        auto echoed = co_await conn.co_exec(command("ECHO", "fine"));
        CHECK(text_of(echoed.at(0)) == "fine");
        conn.close();
    });
}

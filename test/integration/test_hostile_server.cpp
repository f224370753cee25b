// A hostile or broken server: the fault proxy replaces real replies by bytes that are not
// RESP3, that declare absurd sizes, that never end, or that are well-formed but of a shape
// nobody asked for. The library must report a clear error, stay within bounded memory, not
// crash, and work again with the next request. The lock layer must not take a malformed
// script reply for success.
#include <colock/error.hpp>
#include <colock/locker.hpp>
#include <colock/redis/connection.hpp>
#include <colock/resp3/error.hpp>

#include "proxy_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/fault_proxy.hpp>
#include <colock_test/redis_server.hpp>

#include <boost/system/system_error.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

using namespace colock;
using namespace colock::test;

namespace {

/// Bytes of this process in RAM, from /proc/self/statm; 0 when it cannot be read.
std::size_t resident_bytes() {
    std::ifstream statm("/proc/self/statm");
    std::size_t size_pages = 0;
    std::size_t resident_pages = 0;
    if (!(statm >> size_pages >> resident_pages))
        return 0;
    return resident_pages * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

struct malformed {
    std::string what;
    std::string bytes;
    resp3::error expected;
};

std::string repeated(std::string const& piece, std::size_t times) {
    std::string out;
    out.reserve(piece.size() * times);
    for (std::size_t i = 0; i < times; ++i)
        out += piece;
    return out;
}

std::vector<malformed> malformed_replies() {
    std::vector<malformed> out;
    out.push_back({"garbage that is not RESP", std::string("hello, this is not RESP\r\n\0\xff", 27),
                   resp3::error::invalid_type_byte});
    out.push_back({"a huge declared blob", "$99999999999\r\n", resp3::error::blob_too_long});
    out.push_back({"a huge declared array", "*99999999999\r\n", resp3::error::aggregate_too_large});
    out.push_back(
        {"100,000 nested arrays", repeated("*1\r\n", 100'000), resp3::error::nesting_too_deep});
    out.push_back({"a negative length", "$-7\r\n", resp3::error::negative_length});
    out.push_back({"a number that is none", ":12ab\r\n", resp3::error::invalid_number});
    out.push_back({"a blob longer than declared", "$3\r\nabcdef\r\n", resp3::error::missing_crlf});
    out.push_back(
        {"a streamed string", "$?\r\n;3\r\nabc\r\n;0\r\n", resp3::error::streamed_unsupported});
    return out;
}

/// Lock script replies of shapes the scripts never return.
std::vector<std::pair<std::string, std::string>> wrong_shapes() {
    std::vector<std::pair<std::string, std::string>> out;
    out.emplace_back("a simple string", "+OK\r\n");
    out.emplace_back("a map", "%1\r\n+acquired\r\n:1\r\n");
    out.emplace_back("a negative number", ":-1\r\n");
    out.emplace_back("a null", "_\r\n");
    return out;
}

/// GET `key` while the proxy replaces the reply by `bytes`: the request fails, the parser's
/// error is named, and the next request reads `value` over a new connection.
asio::awaitable<void> expect_protocol_error(redis::connection& conn, fault_proxy& proxy,
                                            std::string const& key, std::string const& value,
                                            malformed m) {
    auto const reconnects = conn.reconnect_count();
    proxy.rewrite_next_reply(std::move(m.bytes));
    auto [ec, r] = co_await conn.async_exec(command("GET", key), as_tuple);
    // The reply was lost with the stream: written, outcome unknown.
    CHECK_MESSAGE(ec == redis::error::connection_lost, m.what);
    CHECK_MESSAGE(r.empty(), m.what);
    // The cause, for the logs: the parser's own message.
    auto const text = conn.last_error_text();
    CHECK_MESSAGE(text.find("protocol error") != std::string::npos, m.what, ": ", text);
    CHECK_MESSAGE(text.find(make_error_code(m.expected).message()) != std::string::npos, m.what,
                  ": ", text);

    auto const got = co_await get(conn, key);
    CHECK_MESSAGE(got == value, m.what);
    CHECK_MESSAGE(conn.reconnect_count() == reconnects + 1, m.what);
}

/// One lock, extend and unlock, so that the three scripts are loaded: later calls are one
/// EVALSHA each, with one reply for the proxy to replace.
asio::awaitable<void> load_scripts(locker& l, lock_options const& opt) {
    auto guard = co_await l.co_lock(unique_key("hostile-warm-up"), opt);
    co_await guard.extend(opt.ttl);
    co_await guard.release();
}

lock_options short_lease() {
    lock_options opt;
    opt.ttl = 10s;
    opt.auto_renew = false; // no renewal traffic: the next reply is always the call's own
    return opt;
}

/// What a lock test fed a reply of the wrong shape works with: a locker on a connection
/// through `proxy`, its scripts loaded, lock options, and the shape's name and bytes.
struct wrong_shape_case {
    fault_proxy& proxy;
    redis::connection& conn;
    locker& locks;
    lock_options const& opt;
    std::string const& what;
    std::string const& bytes;
};

/// Plays `check(case)` for each of wrong_shapes(), in order, on one connection through a proxy
/// of its own; returns how many replies the proxy replaced.
template <class Check>
std::size_t for_each_wrong_shape(Check check) {
    fault_proxy proxy{shared_server().port()};
    auto const shapes = wrong_shapes();
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), through(proxy)};
        locker locks{conn};
        auto const opt = short_lease();
        co_await load_scripts(locks, opt);
        for (auto const& [what, bytes] : shapes)
            co_await check(wrong_shape_case{proxy, conn, locks, opt, what, bytes});
        conn.close();
    });
    return proxy.stats().rewrites;
}

/// What a lock call answering a bool gave: its answer, or the code it threw.
struct bool_outcome {
    std::optional<bool> answer;
    error_code ec;
};

asio::awaitable<bool_outcome> outcome_of(asio::awaitable<bool> op) {
    bool_outcome out;
    try {
        out.answer = co_await std::move(op);
    } catch (boost::system::system_error const& e) {
        out.ec = e.code();
    }
    co_return out;
}

} // namespace

TEST_CASE("hostile server: malformed replies fail the request with the parser's error, and the "
          "connection recovers") {
    fault_proxy proxy{shared_server().port()};
    auto cases = malformed_replies();
    run_through_proxy(proxy, [&](redis::connection& conn) -> asio::awaitable<void> {
        std::string const key = unique_key("hostile");
        co_await conn.co_exec(command("SET", key, "the right value"));
        for (auto& m : cases)
            co_await expect_protocol_error(conn, proxy, key, "the right value", std::move(m));
        CHECK(proxy.stats().rewrites == cases.size());
    });
}

TEST_CASE("hostile server: a line that never ends is refused at the limit, with bounded memory") {
    // More than the bound: had the connection buffered the line, resident memory would show it.
    constexpr std::size_t hostile_bytes = 96 * 1024 * 1024;
    constexpr std::size_t bound = 64 * 1024 * 1024;
    run_through_proxy([](redis::connection& conn, fault_proxy& proxy) -> asio::awaitable<void> {
        std::string const key = unique_key("hostile-line");
        co_await conn.co_exec(command("SET", key, "fine"));

        // Made before the first measurement and moved into the proxy: its pages count in both.
        std::string line(hostile_bytes, 'a');
        line.front() = '+';
        auto const before = resident_bytes();
        malformed m{"a line without CRLF", std::move(line), resp3::error::line_too_long};
        co_await expect_protocol_error(conn, proxy, key, "fine", std::move(m));
        auto const after = resident_bytes();
        REQUIRE(before > 0);
        CHECK_MESSAGE(after < before + bound, "resident before: ", before, ", after: ", after);
    });
}

TEST_CASE("hostile server: well-formed replies of an unexpected shape") {
    run_through_proxy([](redis::connection& conn, fault_proxy& proxy) -> asio::awaitable<void> {
        std::string const key = unique_key("hostile-shape");

        // A map where SET answers a simple string: the connection does not know what each
        // command returns, so it hands the value over as it is and stays in step.
        proxy.rewrite_next_reply("%1\r\n+not\r\n+ok\r\n");
        auto [ec, r] = co_await conn.async_exec(command("SET", key, "v1"), as_tuple);
        CHECK_FALSE(ec);
        REQUIRE(r.size() == 1);
        CHECK(r[0].type == resp3::type::map);
        CHECK(r[0].elements.size() == 2);
        auto got = co_await get(conn, key);
        CHECK(got == "v1");
        CHECK(conn.is_connected());
        CHECK(conn.reconnect_count() == 0);

        // An error reply where a value was due: a server error with the server's text.
        proxy.rewrite_next_reply("-ERR hostile\r\n");
        auto [eec, er] = co_await conn.async_exec(command("GET", key), as_tuple);
        CHECK(eec == redis::error::server_error);
        CHECK(redis::first_error_text(er) == "ERR hostile");
        got = co_await get(conn, key);
        CHECK(got == "v1");
        CHECK(conn.reconnect_count() == 0);

        // A reply nobody asked for after the real one: the stream is out of step, so the
        // connection is dropped and re-established.
        proxy.rewrite_next_reply("+OK\r\n+EXTRA\r\n");
        auto [xec, xr] = co_await conn.async_exec(command("SET", key, "v2"), as_tuple);
        CHECK_FALSE(xec);
        CHECK(xr.at(0).as_string() == "OK");
        got = co_await get(conn, key);
        CHECK(got == "v2");
        CHECK(conn.reconnect_count() == 1);
        CHECK(conn.last_error_text().find("unexpected reply") != std::string::npos);
        CHECK(proxy.stats().rewrites == 3);
    });
}

TEST_CASE("hostile server: an acquire reply of the wrong shape fails co_lock with "
          "unexpected_reply") {
    for_each_wrong_shape([](wrong_shape_case shape) -> asio::awaitable<void> {
        std::string const name = unique_key("hostile-acquire");
        shape.proxy.rewrite_next_reply(shape.bytes);
        error_code ec;
        try {
            auto guard = co_await shape.locks.co_lock(name, shape.opt);
            CHECK_MESSAGE(false, shape.what, ": co_lock succeeded");
        } catch (boost::system::system_error const& e) {
            ec = e.code();
        }
        CHECK_MESSAGE(ec == colock::error::unexpected_reply, shape.what, ": ", ec.message());
        CHECK(shape.conn.reconnect_count() == 0);
        // The key may be left behind (the test below); once it is gone, the same lock can
        // be taken again over the same connection.
        co_await shape.conn.co_exec(command("DEL", lock_key(name)));
        auto guard = co_await shape.locks.co_lock(name, shape.opt);
        CHECK(guard.owns());
        CHECK(co_await guard.release());
    });
}

// The server ran the acquire script, so the key holds the attempt's token; the reply that
// would have said so was mangled. The attempt's outcome is unknown, as after a lost
// connection, so the lock is given back with its token.
TEST_CASE("hostile server: an acquire with a mangled reply leaves no lock key behind") {
    for_each_wrong_shape([](wrong_shape_case shape) -> asio::awaitable<void> {
        std::string const name = unique_key("hostile-acquire-key");
        shape.proxy.rewrite_next_reply(shape.bytes);
        try {
            auto guard = co_await shape.locks.co_lock(name, shape.opt);
        } catch (boost::system::system_error const&) {
        }
        bool const left_free = co_await free_becomes(shape.conn, name, 500ms);
        CHECK_MESSAGE(left_free, shape.what, ": the lock key is still there");
        co_await shape.conn.co_exec(command("DEL", lock_key(name))); // free it for the next run
    });
}

// extend() and release() report a malformed reply as unexpected_reply: neither reports success
// nor "not ours", and no key is left behind.
TEST_CASE("hostile server: extend and unlock replies of the wrong shape are never a success") {
    auto const rewrites = for_each_wrong_shape([](wrong_shape_case shape) -> asio::awaitable<void> {
        // extend
        {
            std::string const name = unique_key("hostile-extend");
            auto guard = co_await shape.locks.co_lock(name, shape.opt);
            shape.proxy.rewrite_next_reply(shape.bytes);
            auto const extended = co_await outcome_of(guard.extend(20s));
            CHECK_MESSAGE(extended.answer != std::optional<bool>(true), shape.what);
            CHECK_MESSAGE(extended.ec == colock::error::unexpected_reply, shape.what, ": ",
                          extended.ec.message());
            CHECK_FALSE(guard.lost()); // nothing says the lease is gone
            co_await guard.release();  // the token still matches on the server: released
            bool const left_free = co_await free_becomes(shape.conn, name, 500ms);
            CHECK_MESSAGE(left_free, shape.what, ": extend left the lock key behind");
        }
        // unlock
        {
            std::string const name = unique_key("hostile-unlock");
            auto guard = co_await shape.locks.co_lock(name, shape.opt);
            shape.proxy.rewrite_next_reply(shape.bytes);
            auto const released = co_await outcome_of(guard.release());
            CHECK_MESSAGE(released.answer != std::optional<bool>(true), shape.what);
            CHECK_MESSAGE(released.ec == colock::error::unexpected_reply, shape.what, ": ",
                          released.ec.message());
            CHECK_FALSE(guard.owns());
            // The server did run the release.
            bool const left_free = co_await free_becomes(shape.conn, name, 500ms);
            CHECK_MESSAGE(left_free, shape.what, ": unlock left the lock key behind");
        }
        CHECK(shape.conn.reconnect_count() == 0);
    });
    CHECK(rewrites == 2 * wrong_shapes().size());
}

TEST_CASE("hostile server: a renewal reply of the wrong shape is retried like a lost one, and the "
          "key goes with the guard") {
    fault_proxy proxy{shared_server().port()};
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), through(proxy)};
        locker locks{conn};
        co_await load_scripts(locks, short_lease());
        lock_options opt;
        opt.ttl = 3000ms;
        opt.renew_interval = 100ms;
        std::string const name = unique_key("hostile-renew");
        {
            auto guard = co_await locks.co_lock(name, opt);
            auto const acquired = guard.lease_expiry();
            proxy.rewrite_next_reply(":-1\r\n"); // the next reply is the renewal's
            co_await poll_until([&] { return proxy.stats().rewrites != 0; }, 200, 10ms);
            REQUIRE(proxy.stats().rewrites == 1);
            // A renewal whose answer cannot be read counts as not renewed; it is tried again
            // (the script checks the token), which moves the lease on.
            co_await poll_until([&] { return guard.lease_expiry() > acquired; }, 200, 10ms);
            CHECK(guard.lease_expiry() > acquired);
            CHECK(guard.owns());
            CHECK_FALSE(guard.lost());
        } // the guard goes: released in the background, with its token
        bool const left_free = co_await free_becomes(conn, name, 1000ms);
        CHECK(left_free);
        CHECK(conn.reconnect_count() == 0);
        conn.close();
    });
}

// The connection's errors (redis/error.cpp): its category's name and a message of its own for
// every code, the exceptions for a server's error reply and a failed connect (what() as the
// cause, the code kept), and the first error text of a response.
#include <colock/redis/error.hpp>

#include "category_messages.hpp"

#include <colock/redis/connection.hpp>
#include <colock/resp3/value.hpp>

#include <boost/asio/error.hpp>

#include <doctest/doctest.h>

#include <string>

namespace redis = colock::redis;
namespace resp3 = colock::resp3;

namespace {

resp3::value reply_of(resp3::type t, std::string text = {}) {
    resp3::value v;
    v.type = t;
    v.text = std::move(text);
    return v;
}

} // namespace

TEST_CASE("redis errors: the category is colock.redis, and every code has a message of its own") {
    CHECK(std::string(redis::error_category().name()) == "colock.redis");
    for (auto const& m : colock::test::distinct_messages(
             redis::error_category(), redis::error::server_error, redis::error::invalid_config)) {
        CHECK_FALSE(m.starts_with("unknown"));
        CHECK_MESSAGE(m.find("Redis") != std::string::npos, m); // says whose error it is
    }
}

TEST_CASE("redis errors: a code outside the enumeration reads as unknown, with its number") {
    CHECK(redis::error_category().message(0) == "unknown colock.redis error 0");
    CHECK(redis::error_category().message(4711) == "unknown colock.redis error 4711");
}

TEST_CASE("redis errors: the codes compare equal to their enumerators and to no other category's") {
    boost::system::error_code const ec = redis::error::connection_lost;
    CHECK(ec == redis::error::connection_lost);
    CHECK(ec != redis::error::closed);
    CHECK(ec.category() == redis::error_category());
    CHECK(ec.message() == "the connection to the Redis server was lost after the request was sent");
    // Same number, other category: not equal.
    CHECK(boost::system::error_code(ec.value(), boost::system::generic_category()) != ec);
}

TEST_CASE("redis errors: server_error carries the server's text and the server_error code") {
    redis::server_error const e("WRONGTYPE Operation against a key");
    CHECK(e.server_message() == "WRONGTYPE Operation against a key");
    CHECK(e.code() == redis::error::server_error);
    CHECK(std::string(e.what()).find("WRONGTYPE Operation against a key") != std::string::npos);
}

TEST_CASE("redis errors: connect_error's what() is its message alone, its code as given") {
    boost::system::error_code const refused = boost::asio::error::connection_refused;
    redis::connect_error const e(refused, "connecting to h:6379 (TCP): Connection refused");
    CHECK(std::string(e.what()) == "connecting to h:6379 (TCP): Connection refused");
    CHECK(e.code() == refused);
    CHECK_FALSE(e.code().has_location());
    redis::connect_error const t(redis::error::handshake_failed, "connecting to h:1 (HELLO): x");
    CHECK(t.code() == redis::error::handshake_failed);
}

TEST_CASE("redis errors: first_error_text finds the first error reply, simple or blob") {
    redis::response const resp{reply_of(resp3::type::simple_string, "OK"),
                               reply_of(resp3::type::blob_error, "SYNTAX one"),
                               reply_of(resp3::type::simple_error, "ERR two")};
    CHECK(redis::first_error_text(resp) == "SYNTAX one");
}

TEST_CASE("redis errors: first_error_text is empty when every reply succeeded, and names an "
          "empty error reply") {
    CHECK(redis::first_error_text({}).empty());
    CHECK(redis::first_error_text({reply_of(resp3::type::null),
                                   reply_of(resp3::type::blob_string, "ERR looks like one")})
              .empty());
    CHECK(redis::first_error_text({reply_of(resp3::type::simple_error)}) == "(empty error reply)");
}

// What a sentinel may answer beyond the shapes of test_sentinel.cpp: HELLO refused without words
// or answered with something else than a map, addresses and switch messages of odd spacing and
// types, and the follower's reading when the sentinel's link does the unexpected.
#include "redis/sentinel.hpp"
#include "value_builders.hpp"

#include <doctest/doctest.h>

#include <string>

namespace sentinel_replies_test {

using colock::redis::server_address;
using colock::resp3::type;
using colock::resp3::value;
using namespace colock::redis::detail;
using namespace colock::test;

value pushed(std::string kind, std::string channel, value payload) {
    return aggregate(type::push,
                     {blob(std::move(kind)), blob(std::move(channel)), std::move(payload)});
}

value switch_message(std::string payload) {
    return pushed("message", "+switch-master", blob(std::move(payload)));
}

value address_of(std::string host, std::string port) {
    return array({blob(std::move(host)), blob(std::move(port))});
}

value hello_reply() {
    return aggregate(type::map, {blob("server"), blob("redis"), blob("proto"), number(3)});
}

value confirmed() {
    return pushed("subscribe", "+switch-master", number(1));
}

// A follower of "m" at 127.0.0.1:7000 that has read the hello and the confirmation.
primary_follower subscribed_follower() {
    primary_follower f("m", server_address{"127.0.0.1", 7000});
    f.on_value(hello_reply());
    f.on_value(confirmed());
    return f;
}

TEST_CASE("sentinel replies: HELLO is answered by a map; a refusal without words says so") {
    CHECK(read_sentinel_hello(hello_reply()).empty());
    CHECK(read_sentinel_hello(aggregate(type::map, {})).empty());
    CHECK(read_sentinel_hello(error_reply("")) == "HELLO refused: (empty)");
    CHECK(read_sentinel_hello(error_reply("NOAUTH x")) == "HELLO refused: NOAUTH x");
    // RESP2's flat array is what a server without HELLO 3 would send: not a map.
    CHECK(
        read_sentinel_hello(array({blob("server"), blob("redis")})) ==
        R"(the answer to HELLO is not a map: [array [blob_string "server"] [blob_string "redis"]])");
}

TEST_CASE("sentinel replies: a huge foreign answer is shown cut to 200 characters") {
    std::string const huge(5000, 'x');
    std::string const problem = read_sentinel_hello(blob(huge));
    CHECK(problem.starts_with("the answer to HELLO is not a map: [blob_string \"xxx"));
    CHECK(problem.ends_with("..."));
    CHECK(problem.size() == std::string("the answer to HELLO is not a map: ").size() + 200 + 3);
    auto const answer = read_primary_address(blob(huge), "m");
    CHECK_FALSE(answer.address);
    CHECK(answer.problem.size() < 300);
    CHECK(answer.problem.ends_with("..."));
}

TEST_CASE("sentinel replies: an address refused without words, or with a port as a number") {
    CHECK(read_primary_address(error_reply(""), "m").problem ==
          "SENTINEL GET-MASTER-ADDR-BY-NAME refused: (empty)");
    // Redis answers the port as a string; a number is another shape.
    auto const numeric = read_primary_address(array({blob("h"), number(6379)}), "primary-a");
    CHECK_FALSE(numeric.address);
    CHECK(numeric.problem.starts_with("the address of 'primary-a' is not [host, port]: "));
    auto const three = read_primary_address(array({blob("h"), blob("1"), blob("x")}), "m");
    CHECK_FALSE(three.address);
    CHECK(three.problem.find("is not [host, port]") != std::string::npos);
}

TEST_CASE("sentinel replies: an address of simple strings, an IPv6 host, the last port") {
    auto const simple = read_primary_address(array({simple_text("h"), simple_text("65535")}), "m");
    REQUIRE(simple.address);
    CHECK(*simple.address == server_address{"h", 65535});
    auto const v6 = read_primary_address(address_of("fe80::1", "1"), "m");
    REQUIRE(v6.address);
    CHECK(*v6.address == server_address{"fe80::1", 1});
    CHECK(address_text(*v6.address) == "[fe80::1]:1");
    CHECK(address_text(server_address{"h", 6379}) == "h:6379");
    CHECK_FALSE(read_primary_address(address_of("h", "65536"), "m").address);
    CHECK_FALSE(read_primary_address(address_of("h", "-1"), "m").address);
    CHECK_FALSE(read_primary_address(address_of("h", " 1"), "m").address);
}

TEST_CASE("sentinel replies: a switch message with runs of spaces is read word by word") {
    auto const to = read_switch_master(switch_message("m  10.0.0.1 7000   ::1 7001 "), "m");
    REQUIRE(to);
    CHECK(*to == server_address{"::1", 7001});
}

TEST_CASE("sentinel replies: a switch message of another master, even one whose name starts the "
          "same, is not ours") {
    CHECK_FALSE(read_switch_master(switch_message("m2 1.1.1.1 1 2.2.2.2 2"), "m"));
    CHECK_FALSE(read_switch_master(switch_message("m 1.1.1.1 1 2.2.2.2 2"), "m2"));
    CHECK_FALSE(read_switch_master(switch_message("M 1.1.1.1 1 2.2.2.2 2"), "m"));
    CHECK(read_switch_master(switch_message("m2 1.1.1.1 1 2.2.2.2 2"), "m2"));
}

TEST_CASE("sentinel replies: a switch message in the wrong frame or of the wrong type is "
          "ignored") {
    // The same elements as an array: a reply, not a message.
    CHECK_FALSE(read_switch_master(
        array({blob("message"), blob("+switch-master"), blob("m 1.1.1.1 1 2.2.2.2 2")}), "m"));
    // A pattern message has four elements.
    CHECK_FALSE(read_switch_master(
        aggregate(type::push, {blob("pmessage"), blob("*"), blob("+switch-master"),
                               blob("m 1.1.1.1 1 2.2.2.2 2")}),
        "m"));
    CHECK_FALSE(read_switch_master(pushed("message", "+switch-master", number(5)), "m"));
    CHECK_FALSE(read_switch_master(switch_message("m 1.1.1.1 1 2.2.2.2 65536"), "m"));
    CHECK_FALSE(read_switch_master(switch_message("m 1.1.1.1 1 2.2.2.2 2 extra"), "m"));
    CHECK_FALSE(read_switch_master(switch_message(""), "m"));
}

TEST_CASE("sentinel replies: the question alone, and HELLO with neither password nor name") {
    colock::redis::config cfg;
    cfg.sentinel.master_name = "prim";
    CHECK(std::string(sentinel_ask_primary(cfg).payload()) ==
          "*3\r\n$8\r\nSENTINEL\r\n$23\r\nGET-MASTER-ADDR-BY-NAME\r\n$4\r\nprim\r\n");
    CHECK(sentinel_ask_primary(cfg).commands() == 1);
    cfg.client_name.clear();
    auto const hello = sentinel_hello(cfg, false);
    CHECK(hello.commands() == 2);
    CHECK(std::string(hello.payload()).starts_with("*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n*3\r\n"));
}

TEST_CASE("sentinel replies: ROLE read from simple strings; a number, an error or a null is no "
          "role") {
    CHECK(read_role(array({simple_text("sentinel"), array({})})) == "sentinel");
    CHECK(read_role(array({number(1)})).empty());
    CHECK(read_role(value{}).empty());
    CHECK(read_role(error_reply("ERR unknown command 'ROLE'")).empty());
}

TEST_CASE("sentinel replies: a follower whose HELLO is answered by something else than a map "
          "fails, naming it") {
    primary_follower f("m", server_address{"127.0.0.1", 7000});
    CHECK(f.on_value(blob("OK")) == primary_follower::verdict::failed);
    CHECK(f.outcome() == primary_follower::verdict::failed);
    CHECK(f.problem() == R"(the answer to HELLO is not a map: [blob_string "OK"])");
}

TEST_CASE("sentinel replies: a reply where the confirmation is due is the subscription's "
          "refusal, shown") {
    primary_follower f("m", server_address{"127.0.0.1", 7000});
    f.on_value(hello_reply());
    CHECK(f.on_value(address_of("127.0.0.1", "7000")) == primary_follower::verdict::failed);
    CHECK(f.problem().starts_with("SUBSCRIBE +switch-master refused: [array "));
    CHECK(f.answers() == 0);
}

TEST_CASE("sentinel replies: other messages before the confirmation are skipped, and the "
          "confirmation still moves the follower on") {
    primary_follower f("m", server_address{"127.0.0.1", 7000});
    f.on_value(hello_reply());
    CHECK(f.on_value(pushed("message", "+sdown", blob("master m 1.1.1.1 1"))) ==
          primary_follower::verdict::keep_reading);
    CHECK(f.on_value(confirmed()) == primary_follower::verdict::keep_reading);
    CHECK(f.on_value(address_of("127.0.0.1", "7000")) == primary_follower::verdict::keep_reading);
    CHECK(f.answers() == 1);
    CHECK(f.outcome() == primary_follower::verdict::keep_reading);
}

TEST_CASE("sentinel replies: a switch to the address already followed is no move") {
    auto f = subscribed_follower();
    CHECK(f.on_value(switch_message("m 10.0.0.9 1 127.0.0.1 7000")) ==
          primary_follower::verdict::keep_reading);
    CHECK(f.outcome() == primary_follower::verdict::keep_reading);
    // The same host on another port is.
    CHECK(f.on_value(switch_message("m 10.0.0.9 1 127.0.0.1 7001")) ==
          primary_follower::verdict::moved);
    CHECK(f.moved_to() == server_address{"127.0.0.1", 7001});
}

TEST_CASE("sentinel replies: a later question refused fails the follower with the sentinel's "
          "words") {
    auto f = subscribed_follower();
    CHECK(f.on_value(address_of("127.0.0.1", "7000")) == primary_follower::verdict::keep_reading);
    CHECK(f.on_value(error_reply("NOPERM sentinel")) == primary_follower::verdict::failed);
    CHECK(f.problem() == "SENTINEL GET-MASTER-ADDR-BY-NAME refused: NOPERM sentinel");
    CHECK(f.answers() == 1);
}

} // namespace sentinel_replies_test

// Redis Cluster routing without sockets, beyond test_cluster_slots.cpp: hash tags at their edges,
// the keys of commands in any case and of odd arity, whole requests, the slot table's updates,
// CLUSTER SLOTS answers of unusual but valid shapes, and redirections that are almost right.
#include "redis/cluster_slots.hpp"
#include "value_builders.hpp"

#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

namespace cluster_routing_test {

using colock::redis::server_address;
using colock::resp3::value;
using namespace colock::redis::detail;
using namespace colock::test;
using arguments = std::vector<std::string_view>;

value node(value host, std::int64_t port) {
    return array({std::move(host), number(port)});
}

value slots_entry(std::int64_t first, std::int64_t last, std::vector<value> nodes) {
    std::vector<value> e{number(first), number(last)};
    for (auto& n : nodes)
        e.push_back(std::move(n));
    return array(std::move(e));
}

server_address const here{"10.0.0.1", 7000};

TEST_CASE("cluster routing: a '}' before the first '{' does not end a tag; a tag never closed "
          "is no tag") {
    CHECK(hash_slot("}{a}") == hash_slot("a"));
    CHECK(hash_slot("x}y{a}z") == hash_slot("a"));
    CHECK(hash_slot("{a") == crc16("{a") % cluster_slots);
    CHECK(hash_slot("{") == crc16("{") % cluster_slots);
    CHECK(hash_slot("}") == crc16("}") % cluster_slots);
    CHECK(hash_slot("{user1000}") == hash_slot("user1000"));
}

TEST_CASE("cluster routing: an empty first tag makes the whole key count, a later tag "
          "included") {
    CHECK(hash_slot("a{}b{c}") == 7353);
    CHECK(hash_slot("a{}b{c}") != hash_slot("c"));
    CHECK(hash_slot("{}") == crc16("{}") % cluster_slots);
}

TEST_CASE("cluster routing: CRC16 of the empty string and of one byte") {
    CHECK(crc16("") == 0);
    CHECK(crc16("A") == 0x58E5);
    CHECK(hash_slot("a") == 15495);
    // Bytes above 0x7f are unsigned, not sign-extended.
    CHECK(crc16("\xff") != crc16("\x7f"));
    CHECK(hash_slot("\xff") < cluster_slots);
}

TEST_CASE("cluster routing: command names are matched in any case") {
    CHECK(*command_keys(arguments{"evalsha", "sha", "1", "k", "a"}) == arguments{"k"});
    CHECK(*command_keys(arguments{"Del", "a", "b"}) == arguments{"a", "b"});
    CHECK(command_keys(arguments{"ping", "x"})->empty());
    CHECK(command_keys(arguments{"sPuBlIsH", "ch", "m"})->size() == 1);
}

TEST_CASE("cluster routing: commands of odd arity give the keys they have") {
    CHECK(*command_keys(arguments{"MSET", "a", "1", "b"}) == arguments{"a", "b"});
    CHECK(*command_keys(arguments{"RENAME", "a"}) == arguments{"a"});
    CHECK(*command_keys(arguments{"RENAME", "a", "b", "c"}) == arguments{"a", "b"});
    CHECK(*command_keys(arguments{"MEMORY", "USAGE", "k"}) == arguments{"k"});
    CHECK(command_keys(arguments{"OBJECT"})->empty());
    CHECK(command_keys(arguments{"DEL"})->empty());
    CHECK(command_keys(arguments{"UNKNOWNCMD"})->empty());
    CHECK(command_keys(arguments{})->empty());
}

TEST_CASE("cluster routing: a script's key count that is negative or not a number contradicts "
          "its shape") {
    CHECK_FALSE(command_keys(arguments{"EVALSHA", "sha", "-1", "k"}));
    CHECK_FALSE(command_keys(arguments{"EVAL", "s", "1x", "k"}));
    CHECK_FALSE(command_keys(arguments{"FCALL", "f", "2", "k"}));
    CHECK(*command_keys(arguments{"FCALL_RO", "f", "2", "k1", "k2"}) == arguments{"k1", "k2"});
    // Every argument after the count may be a key.
    CHECK(*command_keys(arguments{"EVAL", "s", "2", "k1", "k2"}) == arguments{"k1", "k2"});
}

TEST_CASE("cluster routing: a request of keyless commands and keyed ones goes to the keys' slot; "
          "a malformed one names its command") {
    using command = std::vector<std::string_view>;
    auto const mixed = route_request(
        {command{"PING"}, command{"GET", "{t}a"}, command{"SET", "{t}b", "v"}, command{"TIME"}});
    REQUIRE(mixed.slot);
    CHECK(*mixed.slot == hash_slot("t"));
    CHECK(mixed.problem.empty());
    auto const empty = route_request({});
    CHECK_FALSE(empty.slot);
    CHECK(empty.problem.empty());
    auto const bad = route_request({command{"GET", "k"}, command{"EVAL", "s", "9"}});
    CHECK(bad.problem == "EVAL has a key count that does not match its arguments");
    // The second command's keys disagree with the first's: the problem names both.
    auto const spans =
        route_request({command{"GET", "{t}a"}, command{"MSET", "{t}b", "1", "c", "2"}});
    CHECK(spans.problem.find("'{t}a' in slot") != std::string::npos);
    CHECK(spans.problem.find("'c' in slot") != std::string::npos);
}

TEST_CASE("cluster routing: a slot table moves slots in range only, and re-uses a known "
          "primary") {
    slot_table table;
    CHECK(table.covered() == 0);
    CHECK(table.primary_of(0) == nullptr);
    table.move(16384, {"h", 1}); // out of range: nothing
    CHECK(table.covered() == 0);
    CHECK(table.primaries().empty());
    table.move(5, {"h", 1});
    table.move(6, {"h", 1});
    CHECK(table.covered() == 2);
    CHECK(table.primaries().size() == 1);
    REQUIRE(table.primary_of(6) != nullptr);
    CHECK(*table.primary_of(6) == server_address{"h", 1});
    CHECK(table.primary_of(16384) == nullptr);
    CHECK(table.primary_of(65535) == nullptr);
}

TEST_CASE("cluster routing: assigning a map forgets the slots and primaries of the last one") {
    slot_table table;
    table.assign({slot_range{0, 16383, {"old", 1}, "a", {}}});
    table.move(7, {"mover", 2});
    table.assign({slot_range{100, 199, {"new", 3}, "b", {}}});
    CHECK(table.covered() == 100);
    CHECK(table.primaries() == std::vector<server_address>{{"new", 3}});
    CHECK(table.primary_of(7) == nullptr);
    REQUIRE(table.primary_of(199) != nullptr);
    CHECK(table.primary_of(199)->host == "new");
    CHECK(table.primary_of(200) == nullptr);
}

TEST_CASE("cluster routing: CLUSTER SLOTS with no ranges, a port as text, a node without its "
          "id, and unknown replicas") {
    auto const none = read_cluster_slots(array({}), here);
    CHECK(none.problem.empty());
    CHECK(none.ranges.empty());

    auto const r = read_cluster_slots(
        array({slots_entry(0, 16383,
                           {node(blob("?"), 7001), array({blob("r1"), blob("7002")}),
                            node(blob(""), 7003), node(blob("?"), 7004), node(blob("r2"), 0)})}),
        here);
    CHECK(r.problem.empty());
    REQUIRE(r.ranges.size() == 1);
    // "?" is the asked node's host; no id stays empty.
    CHECK(r.ranges[0].primary == server_address{"10.0.0.1", 7001});
    CHECK(r.ranges[0].node_id.empty());
    // Replicas of unknown address or bad port are left out; a port as text is read.
    CHECK(r.ranges[0].replicas == std::vector<server_address>{{"r1", 7002}});
}

TEST_CASE("cluster routing: CLUSTER SLOTS entries without a primary, or with a primary that is "
          "not [host, port], are refused with the reason") {
    CHECK(read_cluster_slots(array({array({number(0), number(1)})}), here).problem ==
          "a CLUSTER SLOTS entry is not [first, last, primary, ...]");
    CHECK(read_cluster_slots(array({slots_entry(0, 1, {array({blob("h")})})}), here).problem ==
          "a CLUSTER SLOTS node is not [host, port, ...]");
    CHECK(read_cluster_slots(array({slots_entry(0, 1, {node(blob("h"), 65536)})}), here).problem ==
          "a CLUSTER SLOTS node has an invalid port");
    CHECK(read_cluster_slots(array({slots_entry(0, 1, {blob("h:1")})}), here).problem ==
          "a CLUSTER SLOTS node is not [host, port, ...]");
    CHECK(read_cluster_slots(array({blob("0-1")}), here).problem ==
          "a CLUSTER SLOTS entry is not [first, last, primary, ...]");
}

TEST_CASE("cluster routing: a redirection to the last slot, to an unknown host, or to an IPv6 "
          "address without brackets") {
    auto const last = read_redirect("MOVED 16383 h:1", here);
    CHECK(last.what == cluster_redirect::kind::moved);
    CHECK(last.slot == 16383);
    CHECK(read_redirect("ASK 0 ?:7005", here).to == server_address{"10.0.0.1", 7005});
    auto const v6 = read_redirect("ASK 2 ::1:7002", here);
    CHECK(v6.what == cluster_redirect::kind::ask);
    CHECK(v6.to == server_address{"::1", 7002});
}

TEST_CASE("cluster routing: redirections almost right are no redirection") {
    for (char const* text : {"moved 1 h:1", "MOVED  1 h:1", "MOVED 1 h:1 more", "MOVED -1 h:1",
                             "MOVED 1 h:+1", "ASK 1 :", "ASK 99999999999 h:1", "MOVED 1 ",
                             "CLUSTERDOWNX The cluster is down", "TRYAGAINX", "", " MOVED 1 h:1"}) {
        CAPTURE(text);
        CHECK(read_redirect(text, here).what == cluster_redirect::kind::none);
    }
    CHECK(read_redirect("TRYAGAIN", here).what == cluster_redirect::kind::try_again);
    CHECK(read_redirect("CLUSTERDOWN", here).what == cluster_redirect::kind::cluster_down);
}

TEST_CASE("cluster routing: split_commands refuses a negative, signed or oversized count") {
    for (std::string_view bad :
         {"*-1\r\n", "*+1\r\n$4\r\nPING\r\n", "*1\r\n$-1\r\n", "*99999999999999999999\r\n",
          "*1\r\n$4\r\nPING\r\nX", "*1\r\n$4\r\nPINGXX", "*1\r\n$4\r\nPING\r\n*1\r\n"}) {
        CAPTURE(bad);
        CHECK_FALSE(split_commands(bad));
    }
}

} // namespace cluster_routing_test

// Redis Cluster without sockets: hash slots (against values CLUSTER KEYSLOT gives), routing a
// request by its keys, the slot map, and redirections, hostile replies included.
#include "redis/cluster_slots.hpp"
#include "value_builders.hpp"
#include <colock/resp3/request.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace colock;
using colock::redis::server_address;
using namespace colock::redis::detail;
using namespace colock::test;

namespace {

resp3::value range(std::int64_t first, std::int64_t last, std::string host, std::int64_t port) {
    return array(
        {number(first), number(last),
         array({blob(std::move(host)), number(port), blob("id-" + std::to_string(port))})});
}

} // namespace

TEST_CASE("hash slots match CLUSTER KEYSLOT, hash tags included") {
    CHECK(crc16("123456789") == 0x31C3); // the XMODEM check value
    CHECK(hash_slot("foo") == 12182);
    CHECK(hash_slot("bar") == 5061);
    CHECK(hash_slot("123456789") == 12739);
    CHECK(hash_slot("{user1000}.following") == 3443);
    CHECK(hash_slot("{user1000}.followers") == 3443);
    CHECK(hash_slot("foo{}{bar}") == 8363);    // an empty tag: the whole key
    CHECK(hash_slot("foo{{bar}}zap") == 4015); // the tag is "{bar"
    CHECK(hash_slot("foo{bar}{zap}") == 5061); // the first tag only
    CHECK(hash_slot("") == 0);
    // A lock's keys share its slot.
    CHECK(hash_slot("colock:{name}") == 5798);
    CHECK(hash_slot("colock:{name}:fence") == 5798);
}

TEST_CASE("command_keys finds the keys of known commands and assumes the first otherwise") {
    using args = std::vector<std::string_view>;
    CHECK(*command_keys(args{"GET", "k"}) == args{"k"});
    CHECK(*command_keys(args{"set", "k", "v", "PX", "10"}) == args{"k"});
    CHECK(*command_keys(args{"DEL", "a", "b", "c"}) == args{"a", "b", "c"});
    CHECK(*command_keys(args{"MSET", "a", "1", "b", "2"}) == args{"a", "b"});
    CHECK(*command_keys(args{"EVALSHA", "sha", "2", "k1", "k2", "arg"}) == args{"k1", "k2"});
    CHECK(command_keys(args{"EVALSHA", "sha", "0", "arg"})->empty());
    CHECK(*command_keys(args{"SPUBLISH", "ch", "msg"}) == args{"ch"});
    CHECK(*command_keys(args{"SSUBSCRIBE", "a", "b"}) == args{"a", "b"});
    CHECK(command_keys(args{"PUBLISH", "ch", "msg"})->empty());
    CHECK(command_keys(args{"SCRIPT", "LOAD", "return 1"})->empty());
    CHECK(command_keys(args{"PING"})->empty());
    CHECK(*command_keys(args{"OBJECT", "ENCODING", "k"}) == args{"k"});
    CHECK(*command_keys(args{"HSETNEWCOMMAND", "k", "f"}) == args{"k"});
    // A key count beyond the arguments, or not a number.
    CHECK_FALSE(command_keys(args{"EVALSHA", "sha", "3", "k1"}));
    CHECK_FALSE(command_keys(args{"EVAL", "script", "x"}));
    CHECK_FALSE(command_keys(args{"EVALSHA", "sha"}));
}

TEST_CASE("route_request: one slot, keyless, or a clear refusal of keys across slots") {
    using cmd = std::vector<std::string_view>;
    auto const one = route_request({cmd{"GET", "colock:{name}"}, cmd{"PTTL", "colock:{name}:w"}});
    REQUIRE(one.slot);
    CHECK(*one.slot == 5798);
    CHECK(one.problem.empty());

    auto const keyless = route_request({cmd{"PING"}, cmd{"TIME"}});
    CHECK_FALSE(keyless.slot);
    CHECK(keyless.problem.empty());

    auto const spans = route_request({cmd{"GET", "foo"}, cmd{"GET", "bar"}});
    CHECK(spans.problem.find("'foo' in slot 12182, 'bar' in slot 5061") != std::string::npos);
    CHECK(spans.problem.find("hash tag") != std::string::npos);
    CHECK(route_request({cmd{"DEL", "foo", "bar"}}).problem.find("different hash slots") !=
          std::string::npos);
    CHECK(route_request({cmd{"EVALSHA", "s", "5"}}).problem.find("key count") != std::string::npos);
}

TEST_CASE("read_cluster_slots: ranges by first slot; an unknown host is the asked node's") {
    server_address const asked{"10.0.0.9", 7000};
    auto const ok =
        read_cluster_slots(array({range(5461, 10922, "10.0.0.2", 7001), range(0, 5460, "", 7000),
                                  range(10923, 16383, "10.0.0.3", 7002)}),
                           asked);
    CHECK(ok.problem.empty());
    REQUIRE(ok.ranges.size() == 3);
    CHECK(ok.ranges[0] == slot_range{0, 5460, {"10.0.0.9", 7000}, "id-7000", {}});
    CHECK(ok.ranges[1].primary == server_address{"10.0.0.2", 7001});
    CHECK(ok.ranges[2].last == 16383);

    slot_table table;
    table.assign(ok.ranges);
    CHECK(table.covered() == 16384);
    CHECK(table.primaries().size() == 3);
    CHECK(*table.primary_of(hash_slot("foo")) == server_address{"10.0.0.3", 7002});
    table.move(hash_slot("foo"), {"10.0.0.4", 7003});
    CHECK(*table.primary_of(hash_slot("foo")) == server_address{"10.0.0.4", 7003});
    CHECK(table.primaries().size() == 4);

    slot_table partial;
    partial.assign({slot_range{0, 99, {"h", 1}, "", {}}});
    CHECK(partial.covered() == 100);
    CHECK(partial.primary_of(100) == nullptr);

    resp3::value refused;
    refused.type = resp3::type::simple_error;
    refused.text = "ERR This instance has cluster support disabled";
    CHECK(read_cluster_slots(refused, asked).problem ==
          "CLUSTER SLOTS refused: ERR This instance has cluster support disabled");
    CHECK_FALSE(read_cluster_slots(blob("x"), asked).problem.empty());
    for (auto const& bad : {range(10, 5, "h", 1), range(0, 16384, "h", 1), range(0, 1, "h", 0),
                            range(-1, 1, "h", 1), array({number(0), number(1)})}) {
        auto const r = read_cluster_slots(array({bad}), asked);
        CHECK_FALSE(r.problem.empty());
        CHECK(r.ranges.empty());
    }
    auto const overlapping =
        read_cluster_slots(array({range(0, 100, "a", 1), range(100, 200, "b", 2)}), asked);
    CHECK(overlapping.problem == "CLUSTER SLOTS gives slot 100 to two ranges");
}

TEST_CASE("read_cluster_slots: the replicas of each range; malformed ones left out") {
    server_address const asked{"10.0.0.9", 7000};
    auto with_replicas = range(0, 16383, "10.0.0.1", 7000);
    with_replicas.elements.push_back(array({blob("10.0.0.4"), number(7003), blob("id-7003")}));
    with_replicas.elements.push_back(array({blob("?"), number(7004)})); // address unknown
    auto const ok = read_cluster_slots(array({with_replicas}), asked);
    CHECK(ok.problem.empty());
    REQUIRE(ok.ranges.size() == 1);
    CHECK(ok.ranges[0].replicas == std::vector<server_address>{{"10.0.0.4", 7003}});

    auto hostile = range(0, 16383, "10.0.0.1", 7000);
    hostile.elements.push_back(array({blob("10.0.0.4"), number(70000)})); // invalid port
    hostile.elements.push_back(blob("10.0.0.5"));                         // not a node
    hostile.elements.push_back(array({blob("10.0.0.6"), number(7006)}));
    auto const kept = read_cluster_slots(array({hostile}), asked);
    CHECK(kept.problem.empty());
    REQUIRE(kept.ranges.size() == 1);
    CHECK(kept.ranges[0].primary == server_address{"10.0.0.1", 7000});
    CHECK(kept.ranges[0].replicas == std::vector<server_address>{{"10.0.0.6", 7006}});
}

TEST_CASE("replaced_slots: a failover counts, a migration does not") {
    server_address const a{"h", 1};
    server_address const b{"h", 2};
    server_address const c{"h", 3};
    server_address const a_replica{"h", 4};
    server_address const fresh{"h", 5};
    std::vector<slot_range> const before{{0, 99, a, "id-a", {a_replica}},
                                         {100, 199, b, "id-b", {}}};

    CHECK(replaced_slots(before, before).empty());
    // a's replica took over a's slots (CLUSTER FAILOVER, or a killed a).
    auto const failover = replaced_slots(before, {{0, 99, a_replica, "id-r", {a}}, before[1]});
    REQUIRE(failover.size() == 100);
    CHECK(failover.front() == 0);
    CHECK(failover.back() == 99);
    // Slots 50..149 migrated to a new node c, and slots of b to a: keys went along. b serves
    // nothing any more, but c did not take all of its slots.
    CHECK(replaced_slots(before, {{0, 49, a, "id-a", {a_replica}},
                                  {50, 149, c, "id-c", {}},
                                  {150, 199, a, "id-a", {a_replica}}})
              .empty());
    // b's slots are served by a node that was no primary, and b serves nothing: a replica of b
    // that the old map did not list was promoted.
    auto const unlisted = replaced_slots(before, {before[0], {100, 199, fresh, "id-f", {}}});
    CHECK(unlisted.size() == 100);
    CHECK(unlisted.front() == 100);
    // But a new primary receiving some of b's slots while b keeps the rest is a migration.
    CHECK(replaced_slots(before,
                         {before[0], {100, 149, fresh, "id-f", {}}, {150, 199, b, "id-b", {}}})
              .empty());
    // And back (a failback): a was listed as the new primary's replica.
    std::vector<slot_range> const failed_over{{0, 99, a_replica, "id-r", {a}}, before[1]};
    CHECK(replaced_slots(failed_over, before).size() == 100);
    // Another node at a's address (a's id differs): a's slots count.
    CHECK(replaced_slots(before, {{0, 99, a, "id-new", {}}, before[1]}).size() == 100);
    // A slot unserved in one of the maps counts in neither direction.
    CHECK(replaced_slots(before, {before[1]}).empty());
    CHECK(replaced_slots({before[1]}, before).empty());
}

TEST_CASE("read_redirect: MOVED and ASK with their targets; TRYAGAIN and CLUSTERDOWN") {
    server_address const current{"10.0.0.1", 7000};
    auto const moved = read_redirect("MOVED 3999 127.0.0.1:6381", current);
    CHECK(moved.what == cluster_redirect::kind::moved);
    CHECK(moved.slot == 3999);
    CHECK(moved.to == server_address{"127.0.0.1", 6381});
    auto const ask = read_redirect("ASK 1 [::1]:7002", current);
    CHECK(ask.what == cluster_redirect::kind::ask);
    CHECK(ask.to == server_address{"::1", 7002});
    CHECK(read_redirect("MOVED 5 :7003", current).to == server_address{"10.0.0.1", 7003});
    CHECK(read_redirect("TRYAGAIN Multiple keys request during rehashing of slot", current).what ==
          cluster_redirect::kind::try_again);
    CHECK(read_redirect("CLUSTERDOWN Hash slot not served", current).what ==
          cluster_redirect::kind::cluster_down);
    for (auto const* text :
         {"ERR unknown command", "MOVED", "MOVED 3999", "MOVED x h:1", "MOVED 16384 h:1",
          "MOVED 1 h", "MOVED 1 h:0", "ASK 1 h:99999", "MOVEDX 1 h:1"})
        CHECK(read_redirect(text, current).what == cluster_redirect::kind::none);
}

TEST_CASE("split_commands: a serialised request back into its commands' arguments") {
    resp3::request req;
    req.push("SET", "{t}a", std::string("x\r\ny\0z", 6));
    req.push("PING");
    req.push("EVALSHA", "sha", 1, "k", "");
    auto const split = split_commands(req.payload());
    REQUIRE(split);
    REQUIRE(split->size() == 3);
    CHECK((*split)[0] ==
          std::vector<std::string_view>{"SET", "{t}a", std::string_view("x\r\ny\0z", 6)});
    CHECK((*split)[1] == std::vector<std::string_view>{"PING"});
    CHECK((*split)[2] == std::vector<std::string_view>{"EVALSHA", "sha", "1", "k", ""});
    CHECK(route_request(*split).slot == hash_slot("t"));
    CHECK(split_commands("")->empty());
    for (auto const* bad : {"*1\r\n$3\r\nGET", "*1\r\n$9\r\nGET\r\n", "*0\r\n", "+OK\r\n",
                            "*2\r\n$3\r\nGET\r\n", "*1\r\n:1\r\n"})
        CHECK_FALSE(split_commands(bad));
}

// Redis Sentinel without sockets: the requests sent to a sentinel and the reading of its
// answers, hostile ones included.
#include "redis/sentinel.hpp"
#include "value_builders.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace colock;
using colock::redis::server_address;
using namespace colock::redis::detail;
using namespace colock::test;

namespace {

resp3::value address(std::string host, std::string port) {
    return aggregate(resp3::type::array, {blob(std::move(host)), blob(std::move(port))});
}

resp3::value message(std::string channel, std::string payload) {
    return aggregate(resp3::type::push,
                     {blob("message"), blob(std::move(channel)), blob(std::move(payload))});
}

resp3::value hello_map() {
    return aggregate(resp3::type::map, {blob("server"), blob("redis")});
}

resp3::value subscribed() {
    return aggregate(resp3::type::push, {blob("subscribe"), blob("+switch-master"), number(1)});
}

} // namespace

TEST_CASE("sentinel requests: HELLO with the sentinels' credentials, then the question") {
    redis::config cfg;
    cfg.sentinel.master_name = "mymaster";
    cfg.client_name = "app";
    cfg.password = "data-node-secret"; // never sent to a sentinel
    CHECK(std::string(sentinel_hello(cfg, false).payload()) ==
          "*4\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$7\r\nSETNAME\r\n$3\r\napp\r\n"
          "*3\r\n$8\r\nSENTINEL\r\n$23\r\nGET-MASTER-ADDR-BY-NAME\r\n$8\r\nmymaster\r\n");

    cfg.sentinel.password = "s";
    cfg.client_name.clear();
    auto const with_auth = sentinel_hello(cfg, true);
    CHECK(with_auth.commands() == 3);
    CHECK(std::string(with_auth.payload())
              .starts_with(
                  "*5\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$1\r\ns\r\n"
                  "*2\r\n$9\r\nSUBSCRIBE\r\n$14\r\n+switch-master\r\n"));
    CHECK(std::string(with_auth.payload()).find("data-node-secret") == std::string::npos);
    cfg.sentinel.username = "watcher";
    CHECK(std::string(sentinel_hello(cfg, false).payload()).find("$7\r\nwatcher\r\n") !=
          std::string::npos);
}

TEST_CASE("GET-MASTER-ADDR-BY-NAME answers: an address, an unknown name, or hostile shapes") {
    auto const ok = read_primary_address(address("10.0.0.5", "6380"), "m");
    REQUIRE(ok.address);
    CHECK(*ok.address == server_address{"10.0.0.5", 6380});
    CHECK(ok.problem.empty());

    resp3::value null;
    CHECK(read_primary_address(null, "m").problem == "does not monitor a master named 'm'");
    CHECK(read_primary_address(aggregate(resp3::type::array, {}), "m").problem ==
          "does not monitor a master named 'm'");
    CHECK(read_primary_address(error_reply("NOAUTH Authentication required."), "m").problem ==
          "SENTINEL GET-MASTER-ADDR-BY-NAME refused: NOAUTH Authentication required.");
    for (auto const& bad :
         {address("h", "0"), address("h", "70000"), address("h", "12x"), address("", "6379"),
          address("h", ""), blob("10.0.0.5:6379"), aggregate(resp3::type::array, {blob("h")})}) {
        auto const r = read_primary_address(bad, "m");
        CHECK_FALSE(r.address);
        CHECK(r.problem.find("is not [host, port]") != std::string::npos);
    }
}

TEST_CASE("+switch-master messages about our master give the new address") {
    auto const to = read_switch_master(
        message("+switch-master", "mymaster 127.0.0.1 7000 127.0.0.1 7001"), "mymaster");
    REQUIRE(to);
    CHECK(*to == server_address{"127.0.0.1", 7001});
    CHECK_FALSE(
        read_switch_master(message("+switch-master", "other 1.1.1.1 1 2.2.2.2 2"), "mymaster"));
    CHECK_FALSE(read_switch_master(message("+sdown", "mymaster 1.1.1.1 1 2.2.2.2 2"), "mymaster"));
    CHECK_FALSE(
        read_switch_master(message("+switch-master", "mymaster 1.1.1.1 1 2.2.2.2"), "mymaster"));
    CHECK_FALSE(
        read_switch_master(message("+switch-master", "mymaster 1.1.1.1 1 2.2.2.2 0"), "mymaster"));
    CHECK_FALSE(read_switch_master(subscribed(), "mymaster"));
}

TEST_CASE("ROLE replies name the role") {
    CHECK(read_role(aggregate(resp3::type::array, {blob("master"), blob("0")})) == "master");
    CHECK(read_role(aggregate(resp3::type::array, {blob("slave"), blob("h")})) == "slave");
    CHECK(read_role(aggregate(resp3::type::array, {})).empty());
    CHECK(read_role(blob("master")).empty());
}

TEST_CASE("primary_follower: hello, subscription, then answers and messages") {
    server_address const current{"127.0.0.1", 7000};

    SUBCASE("steady: the same address keeps it reading; answers are counted") {
        primary_follower f("m", current);
        CHECK(f.on_value(hello_map()) == primary_follower::verdict::keep_reading);
        CHECK(f.on_value(subscribed()) == primary_follower::verdict::keep_reading);
        CHECK(f.on_value(address("127.0.0.1", "7000")) == primary_follower::verdict::keep_reading);
        CHECK(f.on_value(address("127.0.0.1", "7000")) == primary_follower::verdict::keep_reading);
        CHECK(f.answers() == 2);
        CHECK(f.on_value(message("+switch-master", "other 1.1.1.1 1 2.2.2.2 2")) ==
              primary_follower::verdict::keep_reading);
    }
    SUBCASE("a switch message moves it") {
        primary_follower f("m", current);
        f.on_value(hello_map());
        f.on_value(subscribed());
        CHECK(f.on_value(message("+switch-master", "m 127.0.0.1 7000 127.0.0.1 7001")) ==
              primary_follower::verdict::moved);
        CHECK(f.outcome() == primary_follower::verdict::moved);
        CHECK(f.moved_to() == server_address{"127.0.0.1", 7001});
    }
    SUBCASE("an answer naming another address disagrees: a switch missed while away, or a "
            "sentinel behind the others") {
        primary_follower f("m", current);
        f.on_value(hello_map());
        f.on_value(subscribed());
        CHECK(f.on_value(address("127.0.0.1", "7001")) == primary_follower::verdict::disagrees);
        CHECK(f.outcome() == primary_follower::verdict::disagrees);
        CHECK(f.moved_to() == server_address{"127.0.0.1", 7001});
        CHECK(f.answers() == 1);
    }
    SUBCASE("a message before the subscription's confirmation still counts") {
        primary_follower f("m", current);
        f.on_value(hello_map());
        CHECK(f.on_value(message("+switch-master", "m 127.0.0.1 7000 127.0.0.1 7002")) ==
              primary_follower::verdict::moved);
    }
    SUBCASE("refusals fail it with the sentinel's text") {
        primary_follower hello_refused("m", current);
        CHECK(hello_refused.on_value(error_reply("WRONGPASS invalid password")) ==
              primary_follower::verdict::failed);
        CHECK(hello_refused.problem() == "HELLO refused: WRONGPASS invalid password");

        primary_follower subscribe_refused("m", current);
        subscribe_refused.on_value(hello_map());
        CHECK(subscribe_refused.on_value(error_reply("NOPERM no channel")) ==
              primary_follower::verdict::failed);
        CHECK(subscribe_refused.problem() == "SUBSCRIBE +switch-master refused: NOPERM no channel");

        primary_follower forgot("m", current);
        forgot.on_value(hello_map());
        forgot.on_value(subscribed());
        resp3::value null;
        CHECK(forgot.on_value(null) == primary_follower::verdict::failed);
        CHECK(forgot.problem() == "does not monitor a master named 'm'");
        CHECK(forgot.answers() == 0); // only answers that name an address count
    }
}

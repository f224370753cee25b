#include "config_url_checks.hpp"

#include <colock/redis/config.hpp>

#include <doctest/doctest.h>

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

using colock::redis::config;
using colock::test::config_url_checks::check_parts;
using colock::test::config_url_checks::refusal;

namespace {

// ":pw@" gives the password "pw" and no user name; returns the whole config.
config check_password_only(std::string const& url) {
    CAPTURE(url);
    auto const c = config::from_url(url);
    CHECK(c.username.empty());
    CHECK(c.password == "pw");
    return c;
}

// `c`'s redacted URL, checked to be `expected` and to show nothing of the password "topsecret".
std::string check_redacted(config const& c, std::string const& expected) {
    std::string const url = c.to_redacted_url();
    CHECK(url == expected);
    CHECK(url.find("topsecret") == std::string::npos);
    return url;
}

// Each URL is refused with a message that contains its text.
void check_refusals(std::initializer_list<std::pair<std::string_view, std::string_view>> cases) {
    for (auto const& c : cases) {
        // Named copies, not a structured binding: Clang 14 cannot capture one in CAPTURE.
        std::string_view const url = c.first;
        CAPTURE(url);
        CHECK(refusal(std::string(url)).find(c.second) != std::string::npos);
    }
}

// `url`, whose password holds "Xq7" and "Zr9", is refused without either in the message.
void check_refused_unechoed(std::string const& url) {
    std::string const message = refusal(url);
    INFO(url << " -> " << message);
    CHECK(message != "accepted");
    CHECK(message.find("Xq7") == std::string::npos);
    CHECK(message.find("Zr9") == std::string::npos);
}

} // namespace

TEST_CASE("config::from_url reads every part") {
    auto const c = check_parts("redis://alice:s3cret@db.example.com:6380/4",
                               {"alice", "s3cret", "db.example.com", 6380});
    CHECK(c.database == 4);
    CHECK_FALSE(c.use_tls);
}

TEST_CASE("config::from_url defaults and short forms") {
    auto const plain = config::from_url("redis://localhost");
    CHECK(plain.host == "localhost");
    CHECK(plain.port == 6379);
    CHECK(plain.database == 0);
    CHECK(plain.password.empty());

    auto const tls = config::from_url("rediss://127.0.0.1:6390/");
    CHECK(tls.use_tls);
    CHECK(tls.port == 6390);
    CHECK(tls.database == 0);

    check_password_only("redis://:pw@h");

    auto const bare_password = config::from_url("redis://pw@h");
    CHECK(bare_password.password == "pw");
}

TEST_CASE("config::from_url decodes percent escapes and IPv6 hosts") {
    auto const c =
        check_parts("redis://us%40er:p%3Aw%2Fd@[::1]:7000/2", {"us@er", "p:w/d", "::1", 7000});
    CHECK(c.database == 2);
}

TEST_CASE("config::from_url refuses bad URLs with a message naming the fault") {
    check_refusals({
        {"localhost:6379", "missing scheme"},
        {"http://localhost", "unsupported scheme 'http'"},
        {"redis://", "missing host"},
        {"redis://h:", "empty port"},
        {"redis://h:abc", "port 'abc' is not a number"},
        {"redis://h:70000", "out of range"},
        {"redis://h:0", "out of range"},
        {"redis://h/x", "database 'x'"},
        {"redis://h/-1", "database '-1'"},
        {"redis://[::1", "closing ']'"},
        {"redis://h?db=1", "query"},
        {"redis://u:%zz@h", "password has an invalid percent escape"},
        {"redis://u:%2@h", "truncated"},
    });
}

TEST_CASE("a refused URL never echoes its password") {
    std::string const message = refusal("redis://user:hunter2@h:99999");
    CHECK(message.find("hunter2") == std::string::npos);
}

TEST_CASE("to_redacted_url hides the password and round-trips the rest") {
    auto const c = config::from_url("rediss://bob:topsecret@[::1]:6390/3");
    check_redacted(c, "rediss://bob:***@[::1]:6390/3");
    auto const back = config::from_url("redis://h:1234");
    CHECK(config::from_url(back.to_redacted_url()).port == 1234);
}

TEST_CASE("URL schemes are case-insensitive") {
    auto const upper = config::from_url("REDIS://h:7000");
    CHECK(upper.host == "h");
    CHECK(upper.port == 7000);
    CHECK_FALSE(upper.use_tls);
    CHECK(config::from_url("Rediss://h").use_tls);
    CHECK(config::from_url("rEdIsS://h").use_tls);
    // The host keeps its case; only the scheme is folded.
    CHECK(config::from_url("REDIS://MyHost").host == "MyHost");
}

TEST_CASE("unix:// URLs name a local socket, with optional credentials and database") {
    auto const plain = config::from_url("unix:///var/run/redis/redis.sock");
    CHECK(plain.unix_socket == "/var/run/redis/redis.sock");
    CHECK(plain.database == 0);
    CHECK(plain.password.empty());
    CHECK_FALSE(plain.use_tls);

    auto const full = config::from_url("UNIX://alice:s%40cret@/run/r.sock?db=3");
    CHECK(full.unix_socket == "/run/r.sock");
    CHECK(full.username == "alice");
    CHECK(full.password == "s@cret");
    CHECK(full.database == 3);

    check_password_only("unix://:pw@/r.sock");

    // redis-rs spells it redis+unix; a percent-encoded path is decoded.
    auto const alias = config::from_url("redis+unix:///tmp%20dir/r.sock?db=2");
    CHECK(alias.unix_socket == "/tmp dir/r.sock");
    CHECK(alias.database == 2);

    check_refusals({
        {"unix://", "missing socket path"},
        {"unix://host/r.sock", "no host"},
        {"unix:///r.sock?db=x", "database 'x'"},
        {"unix:///r.sock?timeout=3", "unsupported query parameter 'timeout'"},
        {"unix:///r.sock#frag", "fragment"},
    });
}

TEST_CASE("to_redacted_url round-trips unix sockets") {
    auto const c = config::from_url("unix://bob:topsecret@/run/my%20redis.sock?db=5");
    std::string const url = c.to_redacted_url();
    CHECK(url == "unix://bob:***@/run/my%20redis.sock?db=5");
    auto const back = config::from_url(url);
    CHECK(back.unix_socket == "/run/my redis.sock");
    CHECK(back.username == "bob");
    CHECK(back.database == 5);
    CHECK(config::from_url("unix:///r.sock").to_redacted_url() == "unix:///r.sock");
}

TEST_CASE("redis-sentinel:// URLs list the sentinels and name the primary") {
    auto const c =
        config::from_url("redis-sentinel://alice:pw@10.0.0.1:26380,10.0.0.2,[::1]:26381/mymaster/2"
                         "?sentinel_username=watch&sentinel_password=s%26p");
    CHECK(c.uses_sentinel());
    REQUIRE(c.sentinel.sentinels.size() == 3);
    CHECK(c.sentinel.sentinels[0] == colock::redis::server_address{"10.0.0.1", 26380});
    CHECK(c.sentinel.sentinels[1] == colock::redis::server_address{"10.0.0.2", 26379});
    CHECK(c.sentinel.sentinels[2] == colock::redis::server_address{"::1", 26381});
    CHECK(c.sentinel.master_name == "mymaster");
    CHECK(c.database == 2);
    // The URL's credentials are the data nodes'; the sentinels' come from the query.
    CHECK(c.username == "alice");
    CHECK(c.password == "pw");
    CHECK(c.sentinel.username == "watch");
    CHECK(c.sentinel.password == "s&p");
    CHECK_FALSE(c.use_tls);

    auto const minimal = config::from_url("REDIS-SENTINEL://h/m");
    REQUIRE(minimal.sentinel.sentinels.size() == 1);
    CHECK(minimal.sentinel.sentinels[0].port == 26379);
    CHECK(minimal.sentinel.master_name == "m");
    CHECK(minimal.database == 0);
    CHECK(minimal.password.empty());
    CHECK(minimal.sentinel.password.empty());
    CHECK(config::from_url("rediss-sentinel://h/m").use_tls);

    CHECK_FALSE(config::from_url("redis://h").uses_sentinel());
    CHECK(minimal.endpoint_text() == "primary 'm' of sentinels h:26379");
}

TEST_CASE("bad sentinel URLs are refused with a message naming the fault") {
    check_refusals({
        {"redis-sentinel://h", "missing master name"},
        {"redis-sentinel://h/", "missing master name"},
        {"redis-sentinel:///m", "missing host"},
        {"redis-sentinel://h,/m", "empty sentinel address"},
        {"redis-sentinel://h,,g/m", "missing host"},
        {"redis-sentinel://h:0/m", "out of range"},
        {"redis-sentinel://h/m/x", "database 'x'"},
        {"redis-sentinel://h/m?db=1", "unsupported query parameter 'db'"},
        {"redis-sentinel://h/m?sentinel_username=u", "needs a sentinel_password"},
        {"redis-sentinel://h/m#x", "fragment"},
    });
}

TEST_CASE("a malformed URL with credentials never echoes a part of a password") {
    for (auto const* url :
         {"redis://u:Xq7/Zr9@h:6379", "redis-sentinel://h/m?sentinel_password=Xq7&Zr9",
          "redis-sentinel://u:Xq7/Zr9@h/m", "rediss://:Xq7:Zr9@h:99999"}) {
        check_refused_unechoed(url);
    }
    // A raw '?' in a sentinel URL's password is taken as part of it, not as the query.
    CHECK(config::from_url("redis-sentinel://u:pa?ss@h/m").password == "pa?ss");
    // Without credentials, the faulty part is named.
    CHECK(refusal("redis://h:abc").find("port 'abc'") != std::string::npos);
}

TEST_CASE("to_redacted_url hides both passwords of a sentinel URL and round-trips the rest") {
    auto const c = config::from_url("rediss-sentinel://bob:topsecret@a:1,[::1]:2/my%20master/3"
                                    "?sentinel_username=s&sentinel_password=alsosecret");
    std::string const url = c.to_redacted_url();
    CHECK(url == "rediss-sentinel://bob:***@a:1,[::1]:2/my%20master/3"
                 "?sentinel_username=s&sentinel_password=***");
    auto const back = config::from_url(url);
    CHECK(back.sentinel.sentinels == c.sentinel.sentinels);
    CHECK(back.sentinel.master_name == "my master");
    CHECK(back.database == 3);
    CHECK(back.use_tls);
    CHECK(config::from_url("redis-sentinel://h/m").to_redacted_url() ==
          "redis-sentinel://h:26379/m");
}

TEST_CASE("redis-cluster:// URLs list the seed nodes") {
    using colock::redis::server_address;
    auto const c = config::from_url("redis-cluster://alice:s%40cret@10.0.0.1:7000,10.0.0.2,"
                                    "[::1]:7002,[fe80::1]");
    CHECK(c.uses_cluster());
    CHECK_FALSE(c.uses_sentinel());
    REQUIRE(c.cluster.seeds.size() == 4);
    CHECK(c.cluster.seeds[0] == server_address{"10.0.0.1", 7000});
    // A seed's port defaults to Redis's, not to the sentinels' 26379.
    CHECK(c.cluster.seeds[1] == server_address{"10.0.0.2", 6379});
    CHECK(c.cluster.seeds[2] == server_address{"::1", 7002});
    CHECK(c.cluster.seeds[3] == server_address{"fe80::1", 6379});
    // The URL's credentials are every node's.
    CHECK(c.username == "alice");
    CHECK(c.password == "s@cret");
    CHECK(c.database == 0);
    CHECK_FALSE(c.use_tls);

    auto const minimal = config::from_url("REDIS-CLUSTER://h");
    REQUIRE(minimal.cluster.seeds.size() == 1);
    CHECK(minimal.cluster.seeds[0] == server_address{"h", 6379});
    CHECK(minimal.password.empty());
    CHECK(minimal.username.empty());
    CHECK(minimal.sentinel.sentinels.empty());

    auto const password_only = check_password_only("redis-cluster://:pw@h:7000,g:7001/");
    CHECK(password_only.cluster.seeds.size() == 2);
    CHECK(config::from_url("redis-cluster://pw@h").password == "pw");

    auto const tls = config::from_url("rediss-cluster://h:7000/");
    CHECK(tls.use_tls);
    REQUIRE(tls.cluster.seeds.size() == 1);
    CHECK(tls.cluster.seeds[0].port == 7000);
    CHECK(config::from_url("Rediss-Cluster://h").use_tls);
    CHECK_FALSE(config::from_url("rEdIs-ClUsTeR://h").use_tls);
    // The host keeps its case; only the scheme is folded.
    CHECK(config::from_url("REDIS-CLUSTER://MyHost").cluster.seeds[0].host == "MyHost");
    // A raw '?' in the password is taken as part of it, not as the query.
    CHECK(config::from_url("redis-cluster://u:pa?ss@h").password == "pa?ss");

    CHECK_FALSE(config::from_url("redis://h").uses_cluster());
    CHECK_FALSE(config::from_url("redis-sentinel://h/m").uses_cluster());
}

TEST_CASE("bad cluster URLs are refused with a message naming the fault") {
    check_refusals({
        {"redis-cluster://", "missing host"},
        {"redis-cluster:///", "missing host"},
        {"redis-cluster://u:pw@", "missing host"},
        {"redis-cluster://h,", "empty seed address after ','"},
        {"redis-cluster://h,/", "empty seed address after ','"},
        {"redis-cluster://h,,g", "missing host"},
        {"redis-cluster://h:", "empty port"},
        {"redis-cluster://h:abc", "port 'abc' is not a number"},
        {"redis-cluster://h,g:0", "out of range"},
        {"redis-cluster://[::1", "closing ']'"},
        {"redis-cluster://h/2", "only database 0"},
        {"redis-cluster://h/0", "only database 0"},
        {"redis-cluster://h/x", "unexpected path '/x'"},
        {"redis-cluster://h/m/2", "unexpected path '/m/2'"},
        {"redis-cluster://h?db=1", "unsupported query parameter 'db'"},
        {"redis-cluster://h/?timeout", "unsupported query parameter 'timeout'"},
        {"redis-cluster://h?", "no query"},
        {"redis-cluster://h#x", "fragment"},
        {"redis-cluster://u:%zz@h", "password has an invalid percent escape"},
        {"redis-cluster://u:@h", "needs a password"},
        {"redis-clusters://h", "unsupported scheme 'redis-clusters'"},
        {"http://h", "redis-cluster or rediss-cluster"},
    });
}

TEST_CASE("a malformed cluster URL never echoes a part of a password") {
    for (auto const* url : {"redis-cluster://u:Xq7/Zr9@h", "redis-cluster://Xq7/Zr9@h",
                            "redis-cluster://:Xq7/Zr9@h:1", "redis-cluster://u:Xq7/Zr9?a@h",
                            "redis-cluster://Xq7/?Zr9@h", "rediss-cluster://:Xq7:Zr9@h:99999",
                            "redis-cluster://u:Xq7Zr9@h?password=Xq7Zr9",
                            "redis-cluster://u:Xq7Zr9@h,g:99999", "redis-cluster://u:Xq7#Zr9@h"}) {
        check_refused_unechoed(url);
    }
}

TEST_CASE("to_redacted_url hides the password of a cluster URL and round-trips the rest") {
    auto const c = config::from_url("rediss-cluster://bob:topsecret@a:7000,[::1]:7001,b");
    std::string const url = check_redacted(c, "rediss-cluster://bob:***@a:7000,[::1]:7001,b:6379");
    auto const back = config::from_url(url);
    CHECK(back.cluster.seeds == c.cluster.seeds);
    CHECK(back.username == "bob");
    CHECK(back.use_tls);
    CHECK(config::from_url("redis-cluster://h/").to_redacted_url() == "redis-cluster://h:6379");
    CHECK(config::from_url("redis-cluster://:pw@h:1").to_redacted_url() ==
          "redis-cluster://:***@h:1");
}

TEST_CASE("endpoint_text of a cluster names its seeds") {
    CHECK(config::from_url("redis-cluster://h:7000,[::1]").endpoint_text() ==
          "cluster of seeds h:7000,[::1]:6379");
    config c;
    c.cluster.seeds = {{"n1", 7000}};
    CHECK(c.uses_cluster());
    CHECK(c.endpoint_text() == "cluster of seeds n1:7000");
    CHECK(c.to_redacted_url() == "redis-cluster://n1:7000");
}

#include <colock/redis/config.hpp>

#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

using colock::redis::config;

namespace {
std::string refusal(std::string const& url) {
    try {
        (void)config::from_url(url);
    } catch (std::invalid_argument const& e) {
        return e.what();
    }
    return "accepted";
}
} // namespace

TEST_CASE("config::from_url reads every part") {
    auto const c = config::from_url("redis://alice:s3cret@db.example.com:6380/4");
    CHECK(c.host == "db.example.com");
    CHECK(c.port == 6380);
    CHECK(c.username == "alice");
    CHECK(c.password == "s3cret");
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

    auto const password_only = config::from_url("redis://:pw@h");
    CHECK(password_only.username.empty());
    CHECK(password_only.password == "pw");

    auto const bare_password = config::from_url("redis://pw@h");
    CHECK(bare_password.password == "pw");
}

TEST_CASE("config::from_url decodes percent escapes and IPv6 hosts") {
    auto const c = config::from_url("redis://us%40er:p%3Aw%2Fd@[::1]:7000/2");
    CHECK(c.username == "us@er");
    CHECK(c.password == "p:w/d");
    CHECK(c.host == "::1");
    CHECK(c.port == 7000);
    CHECK(c.database == 2);
}

TEST_CASE("config::from_url refuses bad URLs with a message naming the fault") {
    CHECK(refusal("localhost:6379").find("missing scheme") != std::string::npos);
    CHECK(refusal("http://localhost").find("unsupported scheme 'http'") != std::string::npos);
    CHECK(refusal("redis://").find("missing host") != std::string::npos);
    CHECK(refusal("redis://h:").find("empty port") != std::string::npos);
    CHECK(refusal("redis://h:abc").find("port 'abc' is not a number") != std::string::npos);
    CHECK(refusal("redis://h:70000").find("out of range") != std::string::npos);
    CHECK(refusal("redis://h:0").find("out of range") != std::string::npos);
    CHECK(refusal("redis://h/x").find("database 'x'") != std::string::npos);
    CHECK(refusal("redis://h/-1").find("database '-1'") != std::string::npos);
    CHECK(refusal("redis://[::1").find("closing ']'") != std::string::npos);
    CHECK(refusal("redis://h?db=1").find("query") != std::string::npos);
    CHECK(refusal("redis://u:%zz@h").find("password has an invalid percent escape") !=
          std::string::npos);
    CHECK(refusal("redis://u:%2@h").find("truncated") != std::string::npos);
}

TEST_CASE("a refused URL never echoes its password") {
    std::string const message = refusal("redis://user:hunter2@h:99999");
    CHECK(message.find("hunter2") == std::string::npos);
}

TEST_CASE("to_redacted_url hides the password and round-trips the rest") {
    auto const c = config::from_url("rediss://bob:topsecret@[::1]:6390/3");
    std::string const url = c.to_redacted_url();
    CHECK(url == "rediss://bob:***@[::1]:6390/3");
    CHECK(url.find("topsecret") == std::string::npos);
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

    auto const password_only = config::from_url("unix://:pw@/r.sock");
    CHECK(password_only.username.empty());
    CHECK(password_only.password == "pw");

    // redis-rs spells it redis+unix; a percent-encoded path is decoded.
    auto const alias = config::from_url("redis+unix:///tmp%20dir/r.sock?db=2");
    CHECK(alias.unix_socket == "/tmp dir/r.sock");
    CHECK(alias.database == 2);

    CHECK(refusal("unix://").find("missing socket path") != std::string::npos);
    CHECK(refusal("unix://host/r.sock").find("no host") != std::string::npos);
    CHECK(refusal("unix:///r.sock?db=x").find("database 'x'") != std::string::npos);
    CHECK(refusal("unix:///r.sock?timeout=3").find("unsupported query parameter 'timeout'") !=
          std::string::npos);
    CHECK(refusal("unix:///r.sock#frag").find("fragment") != std::string::npos);
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
    CHECK(refusal("redis-sentinel://h").find("missing master name") != std::string::npos);
    CHECK(refusal("redis-sentinel://h/").find("missing master name") != std::string::npos);
    CHECK(refusal("redis-sentinel:///m").find("missing host") != std::string::npos);
    CHECK(refusal("redis-sentinel://h,/m").find("empty sentinel address") != std::string::npos);
    CHECK(refusal("redis-sentinel://h,,g/m").find("missing host") != std::string::npos);
    CHECK(refusal("redis-sentinel://h:0/m").find("out of range") != std::string::npos);
    CHECK(refusal("redis-sentinel://h/m/x").find("database 'x'") != std::string::npos);
    CHECK(refusal("redis-sentinel://h/m?db=1").find("unsupported query parameter 'db'") !=
          std::string::npos);
    CHECK(refusal("redis-sentinel://h/m?sentinel_username=u").find("needs a sentinel_password") !=
          std::string::npos);
    CHECK(refusal("redis-sentinel://h/m#x").find("fragment") != std::string::npos);
}

TEST_CASE("a malformed URL with credentials never echoes a part of a password") {
    for (auto const* url :
         {"redis://u:Xq7/Zr9@h:6379", "redis-sentinel://h/m?sentinel_password=Xq7&Zr9",
          "redis-sentinel://u:Xq7/Zr9@h/m", "rediss://:Xq7:Zr9@h:99999"}) {
        std::string const message = refusal(url);
        INFO(url << " -> " << message);
        CHECK(message != "accepted");
        CHECK(message.find("Xq7") == std::string::npos);
        CHECK(message.find("Zr9") == std::string::npos);
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

    auto const password_only = config::from_url("redis-cluster://:pw@h:7000,g:7001/");
    CHECK(password_only.username.empty());
    CHECK(password_only.password == "pw");
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
    CHECK(refusal("redis-cluster://").find("missing host") != std::string::npos);
    CHECK(refusal("redis-cluster:///").find("missing host") != std::string::npos);
    CHECK(refusal("redis-cluster://u:pw@").find("missing host") != std::string::npos);
    CHECK(refusal("redis-cluster://h,").find("empty seed address after ','") != std::string::npos);
    CHECK(refusal("redis-cluster://h,/").find("empty seed address after ','") != std::string::npos);
    CHECK(refusal("redis-cluster://h,,g").find("missing host") != std::string::npos);
    CHECK(refusal("redis-cluster://h:").find("empty port") != std::string::npos);
    CHECK(refusal("redis-cluster://h:abc").find("port 'abc' is not a number") != std::string::npos);
    CHECK(refusal("redis-cluster://h,g:0").find("out of range") != std::string::npos);
    CHECK(refusal("redis-cluster://[::1").find("closing ']'") != std::string::npos);
    CHECK(refusal("redis-cluster://h/2").find("only database 0") != std::string::npos);
    CHECK(refusal("redis-cluster://h/0").find("only database 0") != std::string::npos);
    CHECK(refusal("redis-cluster://h/x").find("unexpected path '/x'") != std::string::npos);
    CHECK(refusal("redis-cluster://h/m/2").find("unexpected path '/m/2'") != std::string::npos);
    CHECK(refusal("redis-cluster://h?db=1").find("unsupported query parameter 'db'") !=
          std::string::npos);
    CHECK(refusal("redis-cluster://h/?timeout").find("unsupported query parameter 'timeout'") !=
          std::string::npos);
    CHECK(refusal("redis-cluster://h?").find("no query") != std::string::npos);
    CHECK(refusal("redis-cluster://h#x").find("fragment") != std::string::npos);
    CHECK(refusal("redis-cluster://u:%zz@h").find("password has an invalid percent escape") !=
          std::string::npos);
    CHECK(refusal("redis-cluster://u:@h").find("needs a password") != std::string::npos);
    CHECK(refusal("redis-clusters://h").find("unsupported scheme 'redis-clusters'") !=
          std::string::npos);
    CHECK(refusal("http://h").find("redis-cluster or rediss-cluster") != std::string::npos);
}

TEST_CASE("a malformed cluster URL never echoes a part of a password") {
    for (auto const* url : {"redis-cluster://u:Xq7/Zr9@h", "redis-cluster://Xq7/Zr9@h",
                            "redis-cluster://:Xq7/Zr9@h:1", "redis-cluster://u:Xq7/Zr9?a@h",
                            "redis-cluster://Xq7/?Zr9@h", "rediss-cluster://:Xq7:Zr9@h:99999",
                            "redis-cluster://u:Xq7Zr9@h?password=Xq7Zr9",
                            "redis-cluster://u:Xq7Zr9@h,g:99999", "redis-cluster://u:Xq7#Zr9@h"}) {
        std::string const message = refusal(url);
        INFO(url << " -> " << message);
        CHECK(message != "accepted");
        CHECK(message.find("Xq7") == std::string::npos);
        CHECK(message.find("Zr9") == std::string::npos);
    }
}

TEST_CASE("to_redacted_url hides the password of a cluster URL and round-trips the rest") {
    auto const c = config::from_url("rediss-cluster://bob:topsecret@a:7000,[::1]:7001,b");
    std::string const url = c.to_redacted_url();
    CHECK(url == "rediss-cluster://bob:***@a:7000,[::1]:7001,b:6379");
    CHECK(url.find("topsecret") == std::string::npos);
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

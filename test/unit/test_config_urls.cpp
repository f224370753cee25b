// config::from_url at the edges the first set of URL tests leaves: numbers that overflow, hosts
// with bytes no host has, escapes at the end of a part, query parameters without a value, and the
// redacted URL of names that need escaping.
#include "config_url_checks.hpp"

#include <colock/redis/config.hpp>
#include <colock/redis/error.hpp>

#include <doctest/doctest.h>

#include <initializer_list>
#include <string>
#include <string_view>

namespace config_urls_test {

using colock::redis::config;
using colock::redis::server_address;

using colock::test::config_url_checks::check_parts;
using colock::test::config_url_checks::refusal;

bool refused_with(std::string const& url, std::string_view words) {
    std::string const message = refusal(url);
    INFO(url << " -> " << message);
    return message.find(words) != std::string::npos && message.starts_with("invalid Redis URL: ");
}

// A URL and the words its refusal must contain.
struct refused_row {
    std::string url;
    std::string_view words;
};

// Each row's URL is refused with its words, after the common prefix.
void check_refused(std::initializer_list<refused_row> rows) {
    for (auto const& row : rows) {
        std::string const& url = row.url;
        CAPTURE(url);
        CHECK(refused_with(url, row.words));
    }
}

TEST_CASE("config URLs: the error_code form gives invalid_url and the throwing form's reason, "
          "or the config with the code cleared") {
    boost::system::error_code ec = colock::redis::error::closed; // cleared on success
    auto const good = config::from_url("redis://h:7000/2", ec);
    CHECK_FALSE(ec);
    CHECK(good.host == "h");
    CHECK(good.port == 7000);
    CHECK(good.database == 2);
    std::string reason;
    auto const bad = config::from_url("redis://h:99999", ec, &reason);
    CHECK(ec == colock::redis::error::invalid_url);
    CHECK(refusal("redis://h:99999").starts_with(reason + ": ")); // then the code's text
    CHECK(reason.find("port") != std::string::npos);
    CHECK(bad.host == config{}.host); // nothing of the bad URL
    CHECK(bad.port == config{}.port);
    config::from_url("no scheme at all", ec); // the reason is optional
    CHECK(ec == colock::redis::error::invalid_url);
}

TEST_CASE("config URLs: a port past 32 bits is refused, not wrapped round to a valid one") {
    // 2^32 + 6379 would read as 6379 if the number wrapped.
    check_refused({
        {"redis://h:4294973675", "is not a number"},
        {"redis://h:65536", "port 65536 is out of range 1-65535"},
    });
    CHECK(config::from_url("redis://h:65535").port == 65535);
    CHECK(config::from_url("redis://h:1").port == 1);
}

TEST_CASE("config URLs: a port with a sign or a space is not a number") {
    check_refused({
        {"redis://h:+80", "port '+80' is not a number"},
        {"redis://h:-1", "port '-1' is not a number"},
        {"redis://h: 80", "port ' 80' is not a number"},
        {"redis://h:80x", "port '80x' is not a number"},
    });
}

TEST_CASE("config URLs: a database past int, with a sign, or a second slash is refused") {
    check_refused({
        {"redis://h/99999999999", "database '99999999999'"},
        {"redis://h/+1", "database '+1'"},
        {"redis://h//", "database '/'"},
        {"redis://h/1/2", "database '1/2'"},
    });
    CHECK(config::from_url("redis://h/2147483647").database == 2147483647);
}

TEST_CASE("config URLs: a host with a space, a comma or a control byte is refused, naming it") {
    check_refused({
        {"redis://a b:1", "host contains an invalid character ' '"},
        {"redis://a,b", "host contains an invalid character ','"},
        {"redis://a\tb", "host contains an invalid character"},
        {std::string("redis://a\x01"), "host contains an invalid character"},
    });
    // A dash, a dot and an underscore are ordinary.
    CHECK(config::from_url("redis://my-host_1.example").host == "my-host_1.example");
}

TEST_CASE("config URLs: an IPv6 host followed by anything but a port, or by an empty one") {
    check_refused({
        {"redis://[::1]x", "unexpected characters after the IPv6 host"},
        {"redis://[::1]6379", "unexpected characters after the IPv6 host"},
        {"redis://[::1]:", "empty port after ':'"},
        {"redis://[]:6379", "missing host"},
    });
    auto const c = config::from_url("redis://[fe80::1%25eth0]:7000");
    // The zone's escape stays as written: a host is not percent-decoded.
    CHECK(c.host == "fe80::1%25eth0");
    CHECK(c.port == 7000);
}

TEST_CASE("config URLs: a user name with an empty password is refused; '@' alone is no "
          "credentials") {
    CHECK(refused_with("redis://u:@h", "a user name needs a password"));
    auto const bare = config::from_url("redis://@h");
    CHECK(bare.host == "h");
    CHECK(bare.username.empty());
    CHECK(bare.password.empty());
}

TEST_CASE("config URLs: the last '@' ends the credentials, so a password may hold raw '@'") {
    check_parts("redis://u:p@ss@h:7000", {"u", "p@ss", "h", 7000});
    // The first ':' splits user from password; later ones are the password's.
    CHECK(config::from_url("redis://u:a:b@h").password == "a:b");
}

TEST_CASE("config URLs: percent escapes in either case, a NUL, and a '%' at the very end") {
    auto const c = config::from_url("redis://%61%4C:%2f%2F%00x@h");
    CHECK(c.username == "aL");
    CHECK(c.password == std::string("//\0x", 4));
    check_refused({
        {"redis://:a%@h", "password has a truncated percent escape"},
        {"redis://:a%4@h", "password has a truncated percent escape"},
        {"redis://%g1:p@h", "user name has an invalid percent escape"},
    });
}

TEST_CASE("config URLs: a scheme that is empty, or lacks its slashes, is refused") {
    check_refused({
        {"://h", "unsupported scheme ''"},
        {"redis:/h", "missing scheme"},
        {"redis:h", "missing scheme"},
        {"", "missing scheme"},
        {"redis://h#top", "query parameters and fragments are not supported"},
    });
}

TEST_CASE("config URLs: unix socket paths that are only a slash, or come without one") {
    check_refused({
        {"unix:///", "missing socket path"},
        {"unix://:pw@", "missing socket path"},
        {"unix://:pw@?db=1", "missing socket path"},
    });
    CHECK(config::from_url("unix:///a%2Fb").unix_socket == "/a/b");
    CHECK(config::from_url("unix:///s").unix_socket == "/s");
}

TEST_CASE("config URLs: a unix query parameter without a value, given twice, or with an empty "
          "name") {
    check_refused({
        {"unix:///r.sock?db", "database ''"},
        {"unix:///r.sock?db=", "database ''"},
        {"unix:///r.sock?db=99999999999", "database '99999999999'"},
    });
    CHECK(config::from_url("unix:///r.sock?db=1&db=2").database == 2);
    // An empty parameter is skipped, whatever its value.
    CHECK(config::from_url("unix:///r.sock?&db=4&").database == 4);
    CHECK(config::from_url("unix:///r.sock?=9").database == 0);
}

TEST_CASE("config URLs: a sentinel URL's master name is decoded, and encoded again when "
          "redacted") {
    auto const c = config::from_url("redis-sentinel://[::1]/my%2Fmaster%20a");
    CHECK(c.sentinel.master_name == "my/master a");
    REQUIRE(c.sentinel.sentinels.size() == 1);
    CHECK(c.sentinel.sentinels[0] == server_address{"::1", 26379});
    std::string const url = c.to_redacted_url();
    CHECK(url == "redis-sentinel://[::1]:26379/my%2Fmaster%20a");
    CHECK(config::from_url(url).sentinel.master_name == "my/master a");
    CHECK(refused_with("redis-sentinel://h/m/99999999999", "database '99999999999'"));
}

TEST_CASE("config URLs: a sentinel password without a sentinel user name is redacted alone") {
    auto const c = config::from_url("redis-sentinel://h:1/m?sentinel_password=hush");
    CHECK(c.sentinel.username.empty());
    CHECK(c.sentinel.password == "hush");
    CHECK(c.password.empty());
    CHECK(c.to_redacted_url() == "redis-sentinel://h:1/m?sentinel_password=***");
    // An empty parameter between the others is skipped.
    CHECK(config::from_url("redis-sentinel://h/m?&sentinel_password=p&").sentinel.password == "p");
}

TEST_CASE("config URLs: a user name that needs escaping is escaped in the redacted URL, and "
          "reads back") {
    config c;
    c.host = "h";
    c.username = "a@b:c d";
    c.password = "secret";
    std::string const url = c.to_redacted_url();
    CHECK(url == "redis://a%40b%3Ac%20d:***@h:6379");
    CHECK(url.find("secret") == std::string::npos);
    auto const back = config::from_url(url);
    CHECK(back.username == "a@b:c d");
    CHECK(back.host == "h");
    // Without a password the user name is not shown either: no credentials are sent.
    c.password.clear();
    CHECK(c.to_redacted_url() == "redis://h:6379");
}

TEST_CASE("config URLs: endpoint_text names a plain host, an IPv6 host and a socket") {
    CHECK(config::from_url("redis://h:7000/3").endpoint_text() == "h:7000");
    CHECK(config::from_url("redis://[::1]").endpoint_text() == "[::1]:6379");
    CHECK(config::from_url("unix:///run/r.sock?db=2").endpoint_text() == "/run/r.sock");
    // The default config is a local server's.
    CHECK(config{}.endpoint_text() == "127.0.0.1:6379");
    CHECK(config{}.to_redacted_url() == "redis://127.0.0.1:6379");
}

} // namespace config_urls_test

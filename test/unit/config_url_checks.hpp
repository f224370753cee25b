// Checks of config::from_url shared by the tests of its URLs: the message of a refusal, and the
// credentials and endpoint a URL gives.
#pragma once

#include <colock/redis/config.hpp>
#include <colock/redis/error.hpp>

#include <boost/system/system_error.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace colock::test::config_url_checks {

/// The message of the refusal of `url`, or "accepted".
inline std::string refusal(std::string const& url) {
    try {
        (void)redis::config::from_url(url);
    } catch (boost::system::system_error const& e) {
        CHECK(e.code() == redis::error::invalid_url);
        return e.what();
    }
    return "accepted";
}

/// The credentials and TCP endpoint a config is expected to hold.
struct endpoint_parts {
    std::string_view username;
    std::string_view password;
    std::string_view host;
    std::uint16_t port = 0;
};

/// `url` read by from_url: checked to hold `expected`, and returned whole.
inline redis::config check_parts(std::string const& url, endpoint_parts const& expected) {
    CAPTURE(url);
    auto c = redis::config::from_url(url);
    CHECK(c.username == expected.username);
    CHECK(c.password == expected.password);
    CHECK(c.host == expected.host);
    CHECK(c.port == expected.port);
    return c;
}

} // namespace colock::test::config_url_checks

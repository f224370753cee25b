#include <colock/redis/config.hpp>

#include <fmt/format.h>

#include <charconv>
#include <stdexcept>

namespace colock::redis {
namespace {

// The URL may hold a password, so the message names the fault, never the whole URL.
[[noreturn]] void refuse(std::string_view /*url*/, std::string_view why) {
    throw std::invalid_argument(fmt::format("invalid Redis URL: {}", why));
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

std::string percent_decode(std::string_view url, std::string_view part, std::string_view what) {
    std::string out;
    out.reserve(part.size());
    for (std::size_t i = 0; i < part.size(); ++i) {
        if (part[i] != '%') {
            out.push_back(part[i]);
            continue;
        }
        if (i + 2 >= part.size())
            refuse(url, fmt::format("{} has a truncated percent escape", what));
        int const hi = hex_digit(part[i + 1]);
        int const lo = hex_digit(part[i + 2]);
        if (hi < 0 || lo < 0)
            refuse(url, fmt::format("{} has an invalid percent escape", what));
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
    }
    return out;
}

std::string percent_encode(std::string_view s) {
    std::string out;
    for (char c : s) {
        auto const u = static_cast<unsigned char>(c);
        bool const plain = (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') ||
                           (u >= '0' && u <= '9') || u == '-' || u == '_' || u == '.' || u == '~';
        if (plain)
            out.push_back(c);
        else
            out += fmt::format("%{:02X}", u);
    }
    return out;
}

} // namespace

config config::from_url(std::string_view url) {
    config cfg;
    std::string_view rest;
    if (url.starts_with("redis://")) {
        rest = url.substr(8);
    } else if (url.starts_with("rediss://")) {
        rest = url.substr(9);
        cfg.use_tls = true;
    } else {
        auto const colon = url.find("://");
        refuse(url, colon == std::string_view::npos
                        ? std::string("missing scheme (expected redis:// or rediss://)")
                        : fmt::format("unsupported scheme '{}' (expected redis or rediss)",
                                      url.substr(0, colon)));
    }
    if (rest.find_first_of("?#") != std::string_view::npos)
        refuse(url, "query parameters and fragments are not supported");

    // Authority ends at the first '/' after it; the password may not contain a raw '/'.
    auto const slash = rest.find('/');
    std::string_view authority = rest.substr(0, slash);
    std::string_view path =
        slash == std::string_view::npos ? std::string_view{} : rest.substr(slash);

    auto const at = authority.rfind('@');
    if (at != std::string_view::npos) {
        std::string_view const userinfo = authority.substr(0, at);
        authority = authority.substr(at + 1);
        auto const colon = userinfo.find(':');
        if (colon == std::string_view::npos) {
            // "redis://secret@host" is how redis-cli reads a password alone.
            cfg.password = percent_decode(url, userinfo, "password");
        } else {
            cfg.username = percent_decode(url, userinfo.substr(0, colon), "user name");
            cfg.password = percent_decode(url, userinfo.substr(colon + 1), "password");
        }
        if (cfg.password.empty() && !cfg.username.empty())
            refuse(url, "a user name needs a password");
    }

    std::string_view host;
    std::string_view port;
    if (authority.starts_with('[')) {
        auto const close = authority.find(']');
        if (close == std::string_view::npos)
            refuse(url, "IPv6 host is missing its closing ']'");
        host = authority.substr(1, close - 1);
        std::string_view const after = authority.substr(close + 1);
        if (!after.empty()) {
            if (after.front() != ':')
                refuse(url, "unexpected characters after the IPv6 host");
            port = after.substr(1);
            if (port.empty())
                refuse(url, "empty port after ':'");
        }
    } else {
        auto const colon = authority.find(':');
        host = authority.substr(0, colon);
        if (colon != std::string_view::npos) {
            port = authority.substr(colon + 1);
            if (port.empty())
                refuse(url, "empty port after ':'");
        }
    }
    if (host.empty())
        refuse(url, "missing host");
    for (char c : host)
        if (c == ' ' || c == '/' || c == '@' || static_cast<unsigned char>(c) < 0x20)
            refuse(url, fmt::format("host contains an invalid character '{}'", c));
    cfg.host = std::string(host);

    if (!port.empty()) {
        unsigned value = 0;
        auto const r = std::from_chars(port.data(), port.data() + port.size(), value);
        if (r.ec != std::errc{} || r.ptr != port.data() + port.size())
            refuse(url, fmt::format("port '{}' is not a number", port));
        if (value == 0 || value > 65535)
            refuse(url, fmt::format("port {} is out of range 1-65535", port));
        cfg.port = static_cast<std::uint16_t>(value);
    }

    if (path.size() > 1) {
        std::string_view const db = path.substr(1);
        int value = 0;
        auto const r = std::from_chars(db.data(), db.data() + db.size(), value);
        if (r.ec != std::errc{} || r.ptr != db.data() + db.size() || value < 0)
            refuse(url, fmt::format("database '{}' is not a non-negative number", db));
        cfg.database = value;
    }
    return cfg;
}

std::string config::to_redacted_url() const {
    std::string out = use_tls ? "rediss://" : "redis://";
    if (!password.empty()) {
        out += percent_encode(username);
        out += ":***@";
    }
    if (host.find(':') != std::string::npos)
        out += fmt::format("[{}]", host);
    else
        out += host;
    out += fmt::format(":{}", port);
    if (database != 0)
        out += fmt::format("/{}", database);
    return out;
}

} // namespace colock::redis

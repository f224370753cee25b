#include <colock/redis/config.hpp>
#include <colock/redis/error.hpp>

#include "sentinel.hpp"

#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>
#include <utility>

namespace colock::redis {
namespace {

// What the parser throws at the first fault; each from_url says it in its own way.
struct url_refusal {
    std::string reason;
};

// The URL may hold a password, so the message names the fault, never the whole URL.
[[noreturn]] void refuse(std::string_view /*url*/, std::string_view why) {
    throw url_refusal{fmt::format("invalid Redis URL: {}", why)};
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

bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) ==
                      std::tolower(static_cast<unsigned char>(y));
           });
}

// "[[user]:password@]": fills username and password.
void parse_userinfo(std::string_view url, std::string_view userinfo, config& cfg) {
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

int parse_database(std::string_view url, std::string_view db) {
    int value = 0;
    auto const r = std::from_chars(db.data(), db.data() + db.size(), value);
    if (r.ec != std::errc{} || r.ptr != db.data() + db.size() || value < 0)
        refuse(url, fmt::format("database '{}' is not a non-negative number", db));
    return value;
}

// "host[:port]" or "[v6]:port"; `default_port` when there is none.
server_address parse_host_port(std::string_view url, std::string_view authority,
                               std::uint16_t default_port) {
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
        if (c == ' ' || c == '/' || c == '@' || c == ',' || static_cast<unsigned char>(c) < 0x20)
            refuse(url, fmt::format("host contains an invalid character '{}'", c));
    server_address out{std::string(host), default_port};
    if (!port.empty()) {
        unsigned value = 0;
        auto const r = std::from_chars(port.data(), port.data() + port.size(), value);
        // With credentials in the URL, a raw '/' or '?' in the password can leave part of it
        // where the port is read: then the message does not repeat it.
        bool const may_be_secret = url.find('@') != std::string_view::npos;
        if (r.ec != std::errc{} || r.ptr != port.data() + port.size())
            refuse(url, may_be_secret ? std::string("a port is not a number")
                                      : fmt::format("port '{}' is not a number", port));
        if (value == 0 || value > 65535)
            refuse(url, may_be_secret ? std::string("a port is out of range 1-65535")
                                      : fmt::format("port {} is out of range 1-65535", port));
        out.port = static_cast<std::uint16_t>(value);
    }
    return out;
}

// "name=value&name=value", each value percent-decoded.
template <class OnParameter>
void parse_query(std::string_view url, std::string_view query, OnParameter on_parameter) {
    while (!query.empty()) {
        auto const amp = query.find('&');
        std::string_view const param = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
        auto const eq = param.find('=');
        std::string_view const name = param.substr(0, eq);
        std::string_view const value =
            eq == std::string_view::npos ? std::string_view{} : param.substr(eq + 1);
        if (!name.empty())
            on_parameter(name, percent_decode(url, value, fmt::format("parameter {}", name)));
    }
}

// unix://[[user]:password@]/path/to/redis.sock[?db=N], as redis-py and redis-rs read it.
config parse_unix(std::string_view url, std::string_view rest) {
    config cfg;
    if (rest.find('#') != std::string_view::npos)
        refuse(url, "fragments are not supported");
    auto const question = rest.find('?');
    std::string_view const query =
        question == std::string_view::npos ? std::string_view{} : rest.substr(question + 1);
    rest = rest.substr(0, question);
    // Credentials end at the last '@' before the path; the path starts with '/'.
    auto const slash = rest.find('/');
    std::string_view const authority = rest.substr(0, slash);
    auto const at = authority.rfind('@');
    if (at != std::string_view::npos)
        parse_userinfo(url, authority.substr(0, at), cfg);
    if (!authority.substr(at == std::string_view::npos ? 0 : at + 1).empty())
        refuse(url, "a unix:// URL takes no host: unix:///path/to/redis.sock");
    if (slash == std::string_view::npos || rest.size() - slash < 2)
        refuse(url, "missing socket path (expected unix:///path/to/redis.sock)");
    cfg.unix_socket = percent_decode(url, rest.substr(slash), "socket path");

    parse_query(url, query, [&](std::string_view name, std::string const& value) {
        if (name == "db")
            cfg.database = parse_database(url, value);
        else
            refuse(url, fmt::format("unsupported query parameter '{}' (only db is)", name));
    });
    return cfg;
}

// What follows the scheme of a sentinel or cluster URL:
// "[[user]:password@]host[:port][,host[:port]...][/path][?query]".
struct host_list_url {
    config cfg; // its credentials and TLS
    std::vector<server_address> hosts;
    std::string_view path;  // after the first '/'; empty without one
    std::string_view query; // after the '?'; empty without one
    bool has_query = false;
    // A raw '/' in the password leaves the credentials unsplit, and then a part of the password
    // may be in the path or query: messages must not repeat them.
    bool may_be_secret = false;
};

// `tls`: the scheme's; hosts without a port get `default_port`. `what` names a host in messages
// ("sentinel", "seed").
host_list_url parse_host_list_url(std::string_view url, std::string_view rest, bool tls,
                                  std::uint16_t default_port, std::string_view what) {
    if (rest.find('#') != std::string_view::npos)
        refuse(url, "fragments are not supported");
    host_list_url out;
    out.cfg.use_tls = tls;
    // Credentials first, up to the last '@' before the path: a password with a raw '?' must
    // not be read as the query (and then echoed in a message).
    auto const at = rest.substr(0, rest.find('/')).rfind('@');
    if (at != std::string_view::npos) {
        parse_userinfo(url, rest.substr(0, at), out.cfg);
        rest = rest.substr(at + 1);
    }
    // Credentials always end with an '@', and a host may not hold one.
    out.may_be_secret = rest.find('@') != std::string_view::npos;
    auto const question = rest.find('?');
    if (question != std::string_view::npos) {
        out.has_query = true;
        out.query = rest.substr(question + 1);
    }
    rest = rest.substr(0, question);
    auto const slash = rest.find('/');
    std::string_view authority = rest.substr(0, slash);
    if (slash != std::string_view::npos)
        out.path = rest.substr(slash + 1);

    while (!authority.empty() || out.hosts.empty()) {
        auto const comma = authority.find(',');
        out.hosts.push_back(parse_host_port(url, authority.substr(0, comma), default_port));
        if (comma == std::string_view::npos)
            break;
        authority = authority.substr(comma + 1);
        if (authority.empty())
            refuse(url, fmt::format("empty {} address after ','", what));
    }
    return out;
}

// redis-sentinel://[[user]:password@]host[:port][,host[:port]...]/master_name[/db]
//     [?sentinel_username=U&sentinel_password=P]
config parse_sentinel(std::string_view url, std::string_view rest, bool tls) {
    auto parts = parse_host_list_url(url, rest, tls, 26379, "sentinel");
    config cfg = std::move(parts.cfg);
    cfg.sentinel.sentinels = std::move(parts.hosts);
    std::string_view const path = parts.path;
    std::string_view const query = parts.query;

    auto const name_end = path.find('/');
    cfg.sentinel.master_name = percent_decode(url, path.substr(0, name_end), "master name");
    if (cfg.sentinel.master_name.empty())
        refuse(url, "missing master name (expected redis-sentinel://host:port/master_name)");
    if (name_end != std::string_view::npos)
        cfg.database = parse_database(url, path.substr(name_end + 1));

    parse_query(url, query, [&](std::string_view name, std::string value) {
        if (name == "sentinel_username")
            cfg.sentinel.username = std::move(value);
        else if (name == "sentinel_password")
            cfg.sentinel.password = std::move(value);
        else if (query.find("sentinel_password") != std::string_view::npos)
            // A raw '&' in the password would make its tail a "name": do not echo it.
            refuse(url, "unsupported query parameter (only sentinel_username and "
                        "sentinel_password are)");
        else
            refuse(url, fmt::format("unsupported query parameter '{}' (only sentinel_username "
                                    "and sentinel_password are)",
                                    name));
    });
    if (cfg.sentinel.password.empty() && !cfg.sentinel.username.empty())
        refuse(url, "sentinel_username needs a sentinel_password");
    return cfg;
}

// redis-cluster://[[user]:password@]host[:port][,host[:port]...][/]. No database: a Cluster has
// only database 0, so a path is a mistake to report rather than ignore.
config parse_cluster(std::string_view url, std::string_view rest, bool tls) {
    auto parts = parse_host_list_url(url, rest, tls, 6379, "seed");
    config cfg = std::move(parts.cfg);
    cfg.cluster.seeds = std::move(parts.hosts);
    if (auto const path = parts.path; !path.empty()) {
        int database = 0;
        auto const r = std::from_chars(path.data(), path.data() + path.size(), database);
        bool const number = r.ec == std::errc{} && r.ptr == path.data() + path.size();
        if (number || parts.may_be_secret)
            refuse(url, "a Redis Cluster URL takes no database: Redis Cluster has only "
                        "database 0");
        refuse(url, fmt::format("unexpected path '/{}' (a Redis Cluster URL takes no database: "
                                "Redis Cluster has only database 0)",
                                path));
    }
    if (parts.has_query) {
        // Name the first parameter, never a value (which may be a password).
        std::string_view const name = parts.query.substr(0, parts.query.find_first_of("&="));
        if (name.empty() || parts.may_be_secret)
            refuse(url, "a Redis Cluster URL takes no query parameters");
        refuse(url, fmt::format("unsupported query parameter '{}' (a Redis Cluster URL takes "
                                "none)",
                                name));
    }
    return cfg;
}

config parse_url(std::string_view url) {
    config cfg;
    auto const colon_slashes = url.find("://");
    if (colon_slashes == std::string_view::npos)
        refuse(url, "missing scheme (expected redis://, rediss://, unix://, redis-sentinel:// "
                    "or redis-cluster://)");
    std::string_view const scheme = url.substr(0, colon_slashes);
    std::string_view rest = url.substr(colon_slashes + 3);
    if (iequals(scheme, "unix") || iequals(scheme, "redis+unix"))
        return parse_unix(url, rest);
    if (iequals(scheme, "redis-sentinel") || iequals(scheme, "rediss-sentinel"))
        return parse_sentinel(url, rest, iequals(scheme, "rediss-sentinel"));
    if (iequals(scheme, "redis-cluster") || iequals(scheme, "rediss-cluster"))
        return parse_cluster(url, rest, iequals(scheme, "rediss-cluster"));
    if (iequals(scheme, "rediss"))
        cfg.use_tls = true;
    else if (!iequals(scheme, "redis"))
        refuse(url, fmt::format("unsupported scheme '{}' (expected redis, rediss, unix, "
                                "redis-sentinel, rediss-sentinel, redis-cluster or "
                                "rediss-cluster)",
                                scheme));
    if (rest.find_first_of("?#") != std::string_view::npos)
        refuse(url, "query parameters and fragments are not supported");

    // Authority ends at the first '/' after it; the password may not contain a raw '/'.
    auto const slash = rest.find('/');
    std::string_view authority = rest.substr(0, slash);
    std::string_view path =
        slash == std::string_view::npos ? std::string_view{} : rest.substr(slash);

    auto const at = authority.rfind('@');
    if (at != std::string_view::npos) {
        parse_userinfo(url, authority.substr(0, at), cfg);
        authority = authority.substr(at + 1);
    }

    auto const address = parse_host_port(url, authority, cfg.port);
    cfg.host = address.host;
    cfg.port = address.port;

    if (path.size() > 1)
        cfg.database = parse_database(url, path.substr(1));
    return cfg;
}

} // namespace

config config::from_url(std::string_view url, boost::system::error_code& ec, std::string* reason) {
    try {
        auto cfg = parse_url(url);
        ec = {};
        return cfg;
    } catch (url_refusal& r) {
        ec = error::invalid_url;
        if (reason)
            *reason = std::move(r.reason);
        return {};
    }
}

config config::from_url(std::string_view url) {
    try {
        return parse_url(url);
    } catch (url_refusal const& r) {
        throw boost::system::system_error(error::invalid_url, r.reason);
    }
}

namespace {

// "h1:p1,h2:p2", IPv6 hosts in brackets.
std::string address_list_text(std::vector<server_address> const& addresses) {
    std::string out;
    for (auto const& address : addresses) {
        if (!out.empty())
            out += ',';
        out += detail::address_text(address);
    }
    return out;
}

} // namespace

std::string config::to_redacted_url() const {
    std::string credentials;
    if (!password.empty())
        credentials = percent_encode(username) + ":***@";
    if (uses_cluster()) {
        std::string out = use_tls ? "rediss-cluster://" : "redis-cluster://";
        out += credentials + address_list_text(cluster.seeds);
        // Not a valid Cluster config, but the log should show what was asked for.
        if (database != 0)
            out += fmt::format("/{}", database);
        return out;
    }
    if (!unix_socket.empty()) {
        std::string path;
        for (char c : unix_socket)
            path += c == '/' ? std::string("/") : percent_encode(std::string_view(&c, 1));
        std::string out = "unix://" + credentials + path;
        if (database != 0)
            out += fmt::format("?db={}", database);
        return out;
    }
    if (uses_sentinel()) {
        std::string out = use_tls ? "rediss-sentinel://" : "redis-sentinel://";
        out += credentials + address_list_text(sentinel.sentinels);
        out += '/';
        out += percent_encode(sentinel.master_name);
        if (database != 0)
            out += fmt::format("/{}", database);
        if (!sentinel.password.empty())
            out += sentinel.username.empty()
                       ? std::string("?sentinel_password=***")
                       : "?sentinel_username=" + percent_encode(sentinel.username) +
                             "&sentinel_password=***";
        return out;
    }
    std::string out = use_tls ? "rediss://" : "redis://";
    out += credentials;
    if (host.find(':') != std::string::npos)
        out += fmt::format("[{}]", host);
    else
        out += host;
    out += fmt::format(":{}", port);
    if (database != 0)
        out += fmt::format("/{}", database);
    return out;
}

std::string config::endpoint_text() const {
    if (uses_sentinel()) {
        return fmt::format("primary '{}' of sentinels {}", sentinel.master_name,
                           address_list_text(sentinel.sentinels));
    }
    if (uses_cluster())
        return "cluster of seeds " + address_list_text(cluster.seeds);
    if (!unix_socket.empty())
        return unix_socket;
    return detail::address_text({host, port});
}

} // namespace colock::redis

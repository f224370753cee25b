// colock status, list and unlock: what the server holds for a lock, and the forced unlock.
#include "cli.hpp"
#include "text.hpp"

#include <colock/error.hpp>
#include <colock/redis/connection.hpp>
#include <colock/redis/error.hpp>
#include <colock/resp3/request.hpp>

#include <boost/asio/this_coro.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <exception>
#include <set>
#include <stdexcept>

namespace colock::cli {

namespace {

namespace asio = boost::asio;
using std::chrono::milliseconds;

bool no_expiry(lock_status const& s) {
    return s.ttl == milliseconds::max();
}

std::string ttl_text(lock_status const& s) {
    if (no_expiry(s))
        return "no expiry";
    if (s.ttl.count() <= 0)
        return "-";
    return format_duration(s.ttl);
}

std::string status_json(lock_status const& s) {
    std::string const holder = s.holder ? holder_json(*s.holder) : std::string("null");
    return fmt::format(R"({{"name":{},"state":{},"fence":{},"ttl_ms":{},"holder_id":{},)"
                       R"("token":{},"since":{},"holder":{},"queued":{}}})",
                       json_string(s.name), json_string(to_string(s.state)), s.fence,
                       no_expiry(s) ? std::string("null") : std::to_string(s.ttl.count()),
                       json_or_null(s.holder_id), json_or_null(s.token),
                       s.since ? json_string(iso8601(*s.since)) : std::string("null"), holder,
                       s.queued);
}

void print_status_text(lock_status const& s) {
    print_field("name", printable(s.name));
    print_field("state", std::string(to_string(s.state)));
    if (s.state == lock_state::handed && s.holder_id.empty())
        print_field("handed to", "nobody (a forced unlock; free within a second)");
    else if (s.state == lock_state::handed)
        print_field("handed to", printable(s.holder_id));
    else if (!s.holder_id.empty())
        print_field("holder id", printable(s.holder_id));
    if (s.holder)
        print_holder_fields(*s.holder);
    if (s.since)
        print_field("since", iso8601(*s.since));
    print_field(s.state == lock_state::free ? "fence kept" : "ttl", ttl_text(s));
    print_field("fence", s.fence != 0 ? std::to_string(s.fence) : std::string("none"));
    print_field("queued", std::to_string(s.queued));
}

// A Redis glob matching `text` literally.
std::string glob_escape(std::string_view text) {
    std::string out;
    for (char c : text) {
        if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\')
            out += '\\';
        out += c;
    }
    return out;
}

std::string reply_text(resp3::value const& v) {
    if (auto s = v.as_string())
        return std::string(*s);
    if (auto n = v.as_integer())
        return std::to_string(*n);
    throw std::runtime_error("SCAN: unexpected reply " + resp3::to_debug_string(v));
}

// Adds to `names` the names of the lock keys `<prefix>{name}` on the server of `conn` whose names
// match `pattern`. A lock's other keys end in "}:q" or "}:qd", so a key that ends in '}' is a
// lock key.
asio::awaitable<void> scan_server(redis::connection& conn, std::string const& prefix,
                                  std::string const& pattern, std::set<std::string>& names) {
    auto const match = glob_escape(prefix) + "{" + pattern + "}";
    auto const head = prefix + "{";
    std::string cursor = "0";
    do {
        resp3::request req;
        req.push("SCAN", cursor, "MATCH", match, "COUNT", 1000);
        auto const resp = co_await conn.co_exec(std::move(req));
        auto const& v = resp.at(0);
        if (v.elements.size() != 2)
            throw std::runtime_error("SCAN: unexpected reply " + resp3::to_debug_string(v));
        cursor = reply_text(v.elements[0]);
        for (auto const& k : v.elements[1].elements) {
            auto const key = reply_text(k);
            if (key.size() > head.size() + 1 && key.starts_with(head) && key.ends_with('}'))
                names.insert(key.substr(head.size(), key.size() - head.size() - 1));
        }
    } while (cursor != "0");
}

// The lock names matching `pattern`, sorted. SCAN runs on one server, so on a cluster each primary
// is scanned through a connection of its own, with the same settings (user, TLS, timeouts).
asio::awaitable<std::vector<std::string>>
scan_names(redis::connection& conn, std::string const& prefix, std::string const& pattern) {
    std::set<std::string> names; // SCAN may return a key more than once
    if (!conn.get_config().uses_cluster()) {
        co_await scan_server(conn, prefix, pattern, names);
    } else {
        auto const primaries = conn.cluster_primaries();
        if (primaries.empty())
            throw std::runtime_error("the cluster's slot map is not known");
        for (auto const& primary : primaries) {
            auto cfg = conn.get_config();
            cfg.cluster.seeds.clear();
            cfg.host = primary.host;
            cfg.port = primary.port;
            redis::connection node{co_await asio::this_coro::executor, std::move(cfg)};
            std::exception_ptr failure;
            try {
                co_await scan_server(node, prefix, pattern, names);
            } catch (...) {
                failure = std::current_exception();
            }
            node.close();
            if (failure)
                std::rethrow_exception(failure);
        }
    }
    co_return std::vector<std::string>(names.begin(), names.end());
}

void print_table(std::vector<lock_status> const& locks) {
    std::vector<std::array<std::string, 8>> rows;
    rows.push_back({"NAME", "STATE", "HOLDER", "PID", "HOST", "TTL", "FENCE", "QUEUED"});
    for (auto const& s : locks) {
        bool const h = s.holder.has_value();
        rows.push_back({printable(s.name), std::string(to_string(s.state)),
                        s.holder_id.empty() ? "-" : printable(s.holder_id),
                        h ? std::to_string(s.holder->pid) : "-",
                        h ? printable(s.holder->host) : "-", ttl_text(s),
                        s.fence != 0 ? std::to_string(s.fence) : "-", std::to_string(s.queued)});
    }
    std::array<std::size_t, 8> width{};
    for (auto const& r : rows)
        for (std::size_t i = 0; i < r.size(); ++i)
            width[i] = std::max(width[i], r[i].size());
    for (auto const& r : rows) {
        std::string line;
        for (std::size_t i = 0; i < r.size(); ++i)
            line += i + 1 < r.size() ? fmt::format("{:<{}}  ", r[i], width[i]) : r[i];
        fmt::print("{}\n", line);
    }
}

// A key that does not read as a lock's (a key of another type, an older layout): the server
// refused the script, or its answer was not a lock's.
bool not_a_lock(boost::system::error_code ec) {
    return ec == redis::error::server_error || ec == colock::error::unexpected_reply;
}

std::string holder_account(lock_status const& s) {
    if (s.state != lock_state::held)
        return {};
    if (s.holder)
        return fmt::format(" (held by {} pid {} on {})", printable(s.holder->program),
                           s.holder->pid, printable(s.holder->host));
    return fmt::format(" (held by locker {})", printable(s.holder_id));
}

} // namespace

asio::awaitable<int> run_status(options const& o, locker& lk) {
    auto const s = co_await lk.co_status(o.name);
    if (o.json)
        fmt::print("{}\n", status_json(s));
    else
        print_status_text(s);
    co_return s.held() ? exit_ok : exit_no;
}

asio::awaitable<int> run_list(options const& o, redis::connection& conn, locker& lk) {
    auto const names = co_await scan_names(conn, o.prefix, o.pattern);
    std::vector<lock_status> locks;
    locks.reserve(names.size());
    for (auto const& name : names) {
        if (name.size() > max_lock_name_length)
            continue;
        std::string skipped;
        try {
            locks.push_back(co_await lk.co_status(name));
        } catch (boost::system::system_error const& e) {
            if (!not_a_lock(e.code()))
                throw;
            skipped = e.what();
        }
        if (!skipped.empty())
            complain(fmt::format("skipping key '{}{{{}}}': {}", printable(o.prefix),
                                 printable(name), printable(skipped)));
    }
    if (o.json) {
        std::string out = "[";
        for (std::size_t i = 0; i < locks.size(); ++i)
            out += (i == 0 ? "\n  " : ",\n  ") + status_json(locks[i]);
        out += locks.empty() ? "]" : "\n]";
        fmt::print("{}\n", out);
    } else {
        print_table(locks);
    }
    co_return exit_ok;
}

asio::awaitable<int> run_unlock(options const& o, locker& lk) {
    // Who held it, for the message; the lock may change hands in between, which the answer
    // of the forced unlock itself tells.
    std::string holder;
    try {
        holder = holder_account(co_await lk.co_status(o.name));
    } catch (std::exception const&) {
    }
    bool const ended = co_await lk.co_force_unlock(o.name);
    if (ended) {
        fmt::print("ended the lease of lock '{}'{}\n", printable(o.name), holder);
        co_return exit_ok;
    }
    fmt::print("lock '{}' was not held: no lease to end\n", printable(o.name));
    co_return exit_no;
}

} // namespace colock::cli

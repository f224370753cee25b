#include "cluster_slots.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>
#include <unordered_map>

namespace colock::redis::detail {
namespace {

// Where a command's keys are: arguments first..last (negative: from the end, -1 the last) every
// `step`; or, for the script calls, a key count at `count_at` followed by the keys.
struct key_spec {
    int first = 0; // 0: no keys
    int last = 0;
    int step = 1;
    int count_at = 0;
};

std::unordered_map<std::string, key_spec> const& known_commands() {
    static auto const table = [] {
        std::unordered_map<std::string, key_spec> t;
        for (char const* name :
             {"PING",      "ECHO",        "TIME",       "INFO",         "SCRIPT", "PUBLISH",
              "SUBSCRIBE", "UNSUBSCRIBE", "PSUBSCRIBE", "PUNSUBSCRIBE", "HELLO",  "AUTH",
              "CLIENT",    "CLUSTER",     "COMMAND",    "CONFIG",       "DBSIZE", "FLUSHALL",
              "FLUSHDB",   "ROLE",        "SELECT",     "MULTI",        "EXEC",   "DISCARD",
              "UNWATCH",   "WAIT",        "READONLY",   "READWRITE",    "ASKING", "RANDOMKEY",
              "SCAN",      "KEYS",        "LASTSAVE",   "FUNCTION",     "ACL",    "SLOWLOG",
              "LATENCY",   "QUIT",        "RESET",      "MONITOR",      "PUBSUB", "SWAPDB"})
            t.emplace(name, key_spec{});
        for (char const* name : {"DEL", "EXISTS", "UNLINK", "TOUCH", "MGET", "WATCH", "SSUBSCRIBE",
                                 "SUNSUBSCRIBE", "PFCOUNT", "SDIFF", "SINTER", "SUNION"})
            t.emplace(name, key_spec{1, -1, 1, 0});
        for (char const* name : {"MSET", "MSETNX"})
            t.emplace(name, key_spec{1, -1, 2, 0});
        for (char const* name : {"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO"})
            t.emplace(name, key_spec{0, 0, 1, 2});
        for (char const* name : {"RENAME", "RENAMENX", "LMOVE", "RPOPLPUSH", "SMOVE", "COPY"})
            t.emplace(name, key_spec{1, 2, 1, 0});
        t.emplace("OBJECT", key_spec{2, 2, 1, 0});
        t.emplace("MEMORY", key_spec{2, 2, 1, 0});
        return t;
    }();
    return table;
}

std::string upper(std::string_view s) {
    std::string out(s);
    for (auto& c : out)
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return out;
}

template <class Int>
std::optional<Int> parse_number(std::string_view text) {
    Int value{};
    auto const r = std::from_chars(text.data(), text.data() + text.size(), value);
    if (r.ec != std::errc{} || r.ptr != text.data() + text.size())
        return std::nullopt;
    return value;
}

// "host:port" (the host may be an IPv6 address, whose last ':' is the port's).
std::optional<server_address> parse_endpoint(std::string_view text, server_address const& current) {
    auto const colon = text.rfind(':');
    if (colon == std::string_view::npos)
        return std::nullopt;
    auto const port = parse_number<unsigned>(text.substr(colon + 1));
    if (!port || *port == 0 || *port > 65535)
        return std::nullopt;
    std::string host(text.substr(0, colon));
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
        host = host.substr(1, host.size() - 2);
    if (host.empty() || host == "?")
        host = current.host;
    return server_address{std::move(host), static_cast<std::uint16_t>(*port)};
}

} // namespace

std::uint16_t crc16(std::string_view data) noexcept {
    std::uint16_t crc = 0;
    for (char c : data) {
        crc = static_cast<std::uint16_t>(
            crc ^ (static_cast<std::uint16_t>(static_cast<unsigned char>(c)) << 8));
        for (int bit = 0; bit < 8; ++bit)
            crc = (crc & 0x8000) != 0 ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021)
                                      : static_cast<std::uint16_t>(crc << 1);
    }
    return crc;
}

std::uint16_t hash_slot(std::string_view key) noexcept {
    auto const open = key.find('{');
    if (open != std::string_view::npos) {
        auto const close = key.find('}', open + 1);
        if (close != std::string_view::npos && close > open + 1)
            key = key.substr(open + 1, close - open - 1);
    }
    return static_cast<std::uint16_t>(crc16(key) % cluster_slots);
}

std::optional<std::vector<std::string_view>>
command_keys(std::vector<std::string_view> const& args) {
    std::vector<std::string_view> keys;
    if (args.empty())
        return keys;
    auto const& table = known_commands();
    auto const it = table.find(upper(args[0]));
    key_spec const spec = it == table.end() ? key_spec{1, 1, 1, 0} : it->second;
    int const n = static_cast<int>(args.size());
    if (spec.count_at != 0) {
        if (n <= spec.count_at)
            return std::nullopt;
        auto const count = parse_number<int>(args[static_cast<std::size_t>(spec.count_at)]);
        if (!count || *count < 0 || *count > n - spec.count_at - 1)
            return std::nullopt;
        for (int i = 0; i < *count; ++i)
            keys.push_back(args[static_cast<std::size_t>(spec.count_at + 1 + i)]);
        return keys;
    }
    if (spec.first == 0 || spec.first >= n)
        return keys;
    int const last = spec.last < 0 ? n + spec.last : std::min(spec.last, n - 1);
    for (int i = spec.first; i <= last; i += spec.step)
        keys.push_back(args[static_cast<std::size_t>(i)]);
    return keys;
}

request_route route_request(std::vector<std::vector<std::string_view>> const& commands) {
    request_route route;
    std::string_view first_key;
    for (auto const& args : commands) {
        auto const keys = command_keys(args);
        if (!keys) {
            route.problem = fmt::format("{} has a key count that does not match its arguments",
                                        args.empty() ? std::string_view("a command") : args[0]);
            return route;
        }
        for (auto key : *keys) {
            auto const slot = hash_slot(key);
            if (route.slot && *route.slot != slot) {
                route.problem = fmt::format(
                    "keys in different hash slots ('{}' in slot {}, '{}' in slot {}): a request "
                    "to a Redis Cluster goes to one node; use a hash tag such as {{user42}} to "
                    "put keys in one slot",
                    first_key, *route.slot, key, slot);
                return route;
            }
            if (!route.slot)
                first_key = key;
            route.slot = slot;
        }
    }
    return route;
}

std::optional<std::vector<std::vector<std::string_view>>> split_commands(std::string_view payload) {
    std::vector<std::vector<std::string_view>> out;
    // "<marker><number>\r\n", advancing `payload` past it.
    auto header = [&payload](char marker) -> std::optional<std::size_t> {
        auto const end = payload.find("\r\n");
        if (payload.empty() || payload[0] != marker || end == std::string_view::npos)
            return std::nullopt;
        auto n = parse_number<std::size_t>(payload.substr(1, end - 1));
        payload.remove_prefix(end + 2);
        return n;
    };
    while (!payload.empty()) {
        auto const count = header('*');
        if (!count || *count == 0)
            return std::nullopt;
        auto& args = out.emplace_back();
        for (std::size_t i = 0; i < *count; ++i) {
            auto const size = header('$');
            // Compared so that no length, however large, wraps round.
            if (!size || payload.size() < 2 || *size > payload.size() - 2 ||
                payload.substr(*size, 2) != "\r\n")
                return std::nullopt;
            args.push_back(payload.substr(0, *size));
            payload.remove_prefix(*size + 2);
        }
    }
    return out;
}

slot_map_answer read_cluster_slots(resp3::value const& reply, server_address const& asked) {
    slot_map_answer out;
    auto fail = [&](std::string why) {
        out.ranges.clear();
        out.problem = std::move(why);
        return out;
    };
    if (reply.is_error())
        return fail(fmt::format("CLUSTER SLOTS refused: {}", reply.text));
    if (reply.type != resp3::type::array)
        return fail("the answer to CLUSTER SLOTS is not an array");
    // [host, port, id, ...]: the address, an empty host when unknown ("?" or empty), or the
    // problem.
    std::string problem;
    auto read_node = [&problem](resp3::value const& node, std::string_view what) {
        std::optional<server_address> a;
        if (node.type != resp3::type::array || node.elements.size() < 2) {
            problem = fmt::format("a CLUSTER SLOTS {} is not [host, port, ...]", what);
            return a;
        }
        auto const host = node.elements[0].as_string();
        auto const port = node.elements[1].as_integer();
        if (!port || *port <= 0 || *port > 65535) {
            problem = fmt::format("a CLUSTER SLOTS {} has an invalid port", what);
            return a;
        }
        std::string h = host && *host != "?" ? std::string(*host) : std::string();
        a = server_address{std::move(h), static_cast<std::uint16_t>(*port)};
        return a;
    };
    for (auto const& entry : reply.elements) {
        if (entry.type != resp3::type::array || entry.elements.size() < 3)
            return fail("a CLUSTER SLOTS entry is not [first, last, primary, ...]");
        auto const first = entry.elements[0].as_integer();
        auto const last = entry.elements[1].as_integer();
        if (!first || !last || *first < 0 || *last < *first || *last >= cluster_slots)
            return fail("a CLUSTER SLOTS entry has an invalid slot range");
        auto const& node = entry.elements[2];
        auto primary = read_node(node, "node");
        if (!primary)
            return fail(std::move(problem));
        if (primary->host.empty())
            primary->host = asked.host;
        slot_range r;
        r.first = static_cast<std::uint16_t>(*first);
        r.last = static_cast<std::uint16_t>(*last);
        r.primary = std::move(*primary);
        if (node.elements.size() >= 3)
            if (auto const id = node.elements[2].as_string())
                r.node_id = std::string(*id);
        // Replicas only help to tell a failover from a migration: one whose address is unknown
        // or malformed is left out, and costs nothing of the map.
        for (std::size_t i = 3; i < entry.elements.size(); ++i)
            if (auto replica = read_node(entry.elements[i], "replica");
                replica && !replica->host.empty())
                r.replicas.push_back(std::move(*replica));
        out.ranges.push_back(std::move(r));
    }
    std::sort(out.ranges.begin(), out.ranges.end(),
              [](slot_range const& a, slot_range const& b) { return a.first < b.first; });
    for (std::size_t i = 1; i < out.ranges.size(); ++i)
        if (out.ranges[i].first <= out.ranges[i - 1].last)
            return fail(
                fmt::format("CLUSTER SLOTS gives slot {} to two ranges", out.ranges[i].first));
    return out;
}

std::vector<std::uint16_t> replaced_slots(std::vector<slot_range> const& before,
                                          std::vector<slot_range> const& after) {
    auto serves = [](std::vector<slot_range> const& map, server_address const& a) {
        return std::any_of(map.begin(), map.end(),
                           [&a](slot_range const& r) { return r.primary == a; });
    };
    slot_table now;
    now.assign(after);
    // Whether `to` serves every slot `from` served: a promoted replica takes all of them.
    auto took_all = [&](server_address const& from, server_address const& to) {
        for (auto const& r : before)
            if (r.primary == from)
                for (auto slot = r.first; slot <= r.last; ++slot)
                    if (auto const* p = now.primary_of(slot); !p || *p != to)
                        return false;
        return true;
    };
    std::vector<std::uint16_t> out;
    // Both maps are sorted by first slot: walk them together, one overlap at a time.
    std::size_t i = 0;
    std::size_t j = 0;
    while (i < before.size() && j < after.size()) {
        auto const& old_range = before[i];
        auto const& new_range = after[j];
        auto const first = std::max(old_range.first, new_range.first);
        auto const last = std::min(old_range.last, new_range.last);
        if (first <= last) {
            auto const& from = old_range.primary;
            auto const& to = new_range.primary;
            bool const same_node =
                from == to && (old_range.node_id.empty() || new_range.node_id.empty() ||
                               old_range.node_id == new_range.node_id);
            bool const promoted =
                std::find(old_range.replicas.begin(), old_range.replicas.end(), to) !=
                    old_range.replicas.end() ||
                (!serves(before, to) && !serves(after, from) && took_all(from, to));
            if (!same_node && (from == to || promoted))
                for (auto slot = first; slot <= last; ++slot)
                    out.push_back(slot);
        }
        if (old_range.last < new_range.last)
            ++i;
        else
            ++j;
    }
    return out;
}

std::uint16_t slot_table::index_of(server_address const& a) {
    auto const it = std::find(primaries_.begin(), primaries_.end(), a);
    if (it != primaries_.end())
        return static_cast<std::uint16_t>(it - primaries_.begin());
    primaries_.push_back(a);
    return static_cast<std::uint16_t>(primaries_.size() - 1);
}

void slot_table::assign(std::vector<slot_range> const& ranges) {
    owner_.fill(unowned);
    primaries_.clear();
    for (auto const& r : ranges) {
        auto const index = index_of(r.primary);
        std::fill(owner_.begin() + r.first, owner_.begin() + r.last + 1, index);
    }
}

void slot_table::move(std::uint16_t slot, server_address const& primary) {
    if (slot < cluster_slots)
        owner_[slot] = index_of(primary);
}

server_address const* slot_table::primary_of(std::uint16_t slot) const noexcept {
    if (slot >= cluster_slots || owner_[slot] == unowned)
        return nullptr;
    return &primaries_[owner_[slot]];
}

std::size_t slot_table::covered() const noexcept {
    return static_cast<std::size_t>(
        std::count_if(owner_.begin(), owner_.end(), [](std::uint16_t o) { return o != unowned; }));
}

cluster_redirect read_redirect(std::string_view error_text, server_address const& current) {
    cluster_redirect out;
    auto word_end = error_text.find(' ');
    std::string_view const word = error_text.substr(0, word_end);
    if (word == "TRYAGAIN") {
        out.what = cluster_redirect::kind::try_again;
        return out;
    }
    if (word == "CLUSTERDOWN") {
        out.what = cluster_redirect::kind::cluster_down;
        return out;
    }
    if ((word != "MOVED" && word != "ASK") || word_end == std::string_view::npos)
        return out;
    std::string_view rest = error_text.substr(word_end + 1);
    auto const space = rest.find(' ');
    if (space == std::string_view::npos)
        return out;
    auto const slot = parse_number<unsigned>(rest.substr(0, space));
    auto const to = parse_endpoint(rest.substr(space + 1), current);
    if (!slot || *slot >= cluster_slots || !to)
        return out;
    out.what = word == "MOVED" ? cluster_redirect::kind::moved : cluster_redirect::kind::ask;
    out.slot = static_cast<std::uint16_t>(*slot);
    out.to = *to;
    return out;
}

} // namespace colock::redis::detail

// Redis Cluster without sockets: the hash slot of a key, which key a request is routed by, the
// slot map from CLUSTER SLOTS, and the redirections (MOVED, ASK) and retryable refusals
// (TRYAGAIN, CLUSTERDOWN) in error replies.
#pragma once

#include <colock/redis/config.hpp>
#include <colock/resp3/value.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace colock::redis::detail {

inline constexpr std::uint16_t cluster_slots = 16384;

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), as Redis Cluster uses it.
std::uint16_t crc16(std::string_view data) noexcept;

/// The slot of `key`: CRC16 of the hash tag (the bytes between the first '{' and the next '}'
/// after it, when there are some) or of the whole key, mod 16384.
std::uint16_t hash_slot(std::string_view key) noexcept;

/// The keys of one command, as far as routing is concerned: its arguments (the command name
/// first, as the request holds them).
///
/// Known commands give their keys by position (GET k, SET k v, EVALSHA sha n k..., ...); a
/// channel of the sharded pub/sub commands (SPUBLISH, SSUBSCRIBE, SUNSUBSCRIBE) counts as a
/// key, as Redis routes it. Commands without keys (PING, TIME, SCRIPT LOAD, PUBLISH, SUBSCRIBE,
/// ...) give none and go to any node. An unknown command is taken to have its key first when
/// it has arguments, the common shape; a command that does not fit must name a key through a
/// known one. Returns nullopt for a command whose arguments contradict its shape (EVALSHA with
/// a key count larger than its arguments).
std::optional<std::vector<std::string_view>>
command_keys(std::vector<std::string_view> const& args);

/// Where a request goes: one slot, or any node (no keys).
struct request_route {
    std::optional<std::uint16_t> slot; // nullopt: keyless, any node
    std::string problem;               // set when the keys span slots, or a command is malformed
};

/// The route of a whole request, command by command (each command's arguments). All keys must
/// hash to one slot: a transaction or a pipeline that spans slots cannot be sent to one node.
request_route route_request(std::vector<std::vector<std::string_view>> const& commands);

/// The commands of a serialised request (resp3::request::payload(): arrays of bulk strings),
/// each as its arguments, views into `payload`; nullopt when it is not of that form.
std::optional<std::vector<std::vector<std::string_view>>> split_commands(std::string_view payload);

/// One range of slots, the primary that serves it and that primary's replicas.
struct slot_range {
    std::uint16_t first = 0;
    std::uint16_t last = 0; // inclusive
    server_address primary;
    std::string node_id;
    std::vector<server_address> replicas;

    friend bool operator==(slot_range const&, slot_range const&) = default;
};

/// The slot map as CLUSTER SLOTS gives it, or what was wrong with the reply. A primary whose
/// address is empty or "?" (a node that does not know its own address) is `asked`'s host, as
/// the Redis documentation says.
struct slot_map_answer {
    std::vector<slot_range> ranges; // sorted by first slot
    std::string problem;
};
slot_map_answer read_cluster_slots(resp3::value const& reply, server_address const& asked);

/// Which primary serves each slot: 16384 entries, indexes into `primaries`.
class slot_table {
public:
    slot_table() { owner_.fill(unowned); }
    /// Replaces the table with `ranges`.
    void assign(std::vector<slot_range> const& ranges);
    /// Moves one slot to `primary` (a MOVED reply), adding the primary if new.
    void move(std::uint16_t slot, server_address const& primary);
    /// The primary of `slot`, or nullptr when no node serves it.
    server_address const* primary_of(std::uint16_t slot) const noexcept;
    std::vector<server_address> const& primaries() const noexcept { return primaries_; }
    /// Slots with a primary.
    std::size_t covered() const noexcept;

private:
    static constexpr std::uint16_t unowned = 0xffff;
    std::uint16_t index_of(server_address const& a);
    std::array<std::uint16_t, cluster_slots> owner_{};
    std::vector<server_address> primaries_;
};

/// The slots whose keys may be gone from one map to the next, because their primary was replaced:
/// a slot now served by a replica of its former primary (a failover), by a node that was no
/// primary before and now serves all of the former primary's slots while that one serves nothing
/// (a replica the old map did not list), or by another node at the former primary's address. A slot
/// migrated between primaries kept its keys and does not count; nor does a slot unserved in either
/// map.
std::vector<std::uint16_t> replaced_slots(std::vector<slot_range> const& before,
                                          std::vector<slot_range> const& after);

/// A redirection or a retryable refusal in an error reply.
struct cluster_redirect {
    enum class kind { none, moved, ask, try_again, cluster_down };
    kind what = kind::none;
    std::uint16_t slot = 0;
    server_address to; // for moved and ask
};
/// Reads "MOVED <slot> <host>:<port>", "ASK <slot> <host>:<port>", "TRYAGAIN ...",
/// "CLUSTERDOWN ..."; kind::none for anything else, or a malformed redirection. An empty host
/// ("MOVED 3999 :6380", a node that does not know its address) is `current`'s host.
cluster_redirect read_redirect(std::string_view error_text, server_address const& current);

} // namespace colock::redis::detail

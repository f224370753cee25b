// Redis Sentinel without sockets: what the connection sends a sentinel and how it reads the
// answers. The I/O is in connection_sentinel.cpp.
#pragma once

#include <colock/redis/config.hpp>
#include <colock/resp3/request.hpp>
#include <colock/resp3/value.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace colock::redis::detail {

/// "host:port", with brackets around an IPv6 host.
std::string address_text(server_address const& a);

/// HELLO 3 (with AUTH when the sentinels have a password, and SETNAME), then, when `subscribe`,
/// SUBSCRIBE +switch-master, then SENTINEL GET-MASTER-ADDR-BY-NAME. Answered by one reply, a
/// confirmation push when subscribing, and one reply.
resp3::request sentinel_hello(config const& cfg, bool subscribe);
/// SENTINEL GET-MASTER-ADDR-BY-NAME <master>, alone.
resp3::request sentinel_ask_primary(config const& cfg);

/// What a sentinel said of the primary: its address, or what was wrong with the answer.
struct primary_answer {
    std::optional<server_address> address;
    std::string problem; // set when there is no address
};

/// Reads the reply to HELLO: empty when it is a map, else what was wrong.
std::string read_sentinel_hello(resp3::value const& reply);
/// Reads the reply to SENTINEL GET-MASTER-ADDR-BY-NAME: [ip, port], null for a name the sentinel
/// does not monitor, or an error.
primary_answer read_primary_address(resp3::value const& reply, std::string_view master_name);
/// A `+switch-master` message ("message", "+switch-master", "<name> <old-ip> <old-port>
/// <new-ip> <new-port>") about `master_name`: the new address. nullopt for any other push.
std::optional<server_address> read_switch_master(resp3::value const& push,
                                                 std::string_view master_name);
/// Reads what a sentinel sends on the link that follows the primary: the answer to HELLO, the
/// SUBSCRIBE +switch-master confirmation (or its refusal), then the answers to
/// SENTINEL GET-MASTER-ADDR-BY-NAME (one after the hello, one per later ask) and, at any time,
/// +switch-master messages. A +switch-master message names the new primary with authority
/// (`moved`); an answer naming another address than `current` may come from a sentinel that is
/// behind the others (`disagrees`), which the caller checks with the server itself.
class primary_follower {
public:
    enum class verdict { keep_reading, moved, disagrees, failed };

    primary_follower(std::string master_name, server_address current);

    verdict on_value(resp3::value const& v);
    /// The verdict that ended the reading (keep_reading while none has).
    verdict outcome() const noexcept { return outcome_; }
    /// The address that on_value said `moved` or `disagrees` for.
    server_address const& moved_to() const noexcept { return moved_to_; }
    /// Why on_value said `failed`.
    std::string const& problem() const noexcept { return problem_; }
    /// Answers to GET-MASTER-ADDR-BY-NAME read so far that named an address.
    std::uint64_t answers() const noexcept { return answers_; }

private:
    enum class stage { hello, subscription, addresses };
    verdict fail(std::string problem);
    verdict check(server_address const& now, verdict if_other);

    std::string master_name_;
    server_address current_;
    server_address moved_to_;
    std::string problem_;
    stage stage_ = stage::hello;
    verdict outcome_ = verdict::keep_reading;
    std::uint64_t answers_ = 0;
};

/// The role in a ROLE reply ("master", "slave", "sentinel"); empty when it is not readable.
std::string read_role(resp3::value const& reply);

} // namespace colock::redis::detail

/// \file
/// Errors of the Redis connection, with their own category.
#pragma once

#include <boost/system/error_code.hpp>

#include <string_view>
#include <type_traits>

namespace colock::redis {

/// The errors of the Redis connection. Their category is redis::error_category(); an
/// error_code made from one compares equal to the enumerator.
enum class error {
    /// The server answered a command with an error reply; the reply holds the server's text.
    server_error = 1,
    /// Resolve, connect, TLS and HELLO together took longer than config::connect_timeout.
    connect_timeout,
    /// The server's answer to the HELLO/AUTH/SELECT/SETNAME handshake was not what it must be;
    /// also when what answers is no Redis server at all (its first bytes are not RESP3: the
    /// message shows them), or, over TLS, when the server does not speak TLS. Retrying does not
    /// help: async_connect fails at once, and a waiting co_lock does not retry.
    handshake_failed,
    /// The request had been written when the connection was lost: it may or may not have run.
    connection_lost,
    /// A health-check PING went unanswered for a whole interval; the connection was dropped.
    health_check_timeout,
    /// The server sent a reply when none was expected, or a reply of the wrong shape.
    unexpected_reply,
    /// close() was called, or the connection object was destroyed.
    closed,
    /// The request holds a command that would change how the server answers later commands
    /// (MONITOR, RESET, HELLO, CLIENT REPLY OFF|SKIP), which a shared connection cannot send.
    /// Nothing
    /// was written; the response names the command.
    unsupported_command,
    /// Redis Sentinel: no sentinel gave the address of the primary (none reachable, none knows
    /// the master name, or all refused). The message says what each sentinel answered.
    no_primary_address,
    /// Redis Sentinel: the server the sentinels named says (ROLE) that it is not a primary, as
    /// during a failover.
    not_primary,
    /// Redis Sentinel: the sentinels moved the primary to another server (`+switch-master`);
    /// the connection went there.
    primary_changed,
    /// Redis Cluster: no node gave the slot map (CLUSTER SLOTS): none reachable, none in
    /// cluster mode, or all refused. The message says what each node answered.
    no_slot_map,
    /// Redis Cluster: the request's keys hash to more than one slot, so no node can run it.
    /// Nothing was written; the response names the keys (put them under one hash tag, {...}).
    cross_slot,
    /// config::from_url: the URL cannot be read (the message, or the error_code form's reason,
    /// names the part).
    invalid_url,
    /// The connection's constructor: the config cannot be used (the message names the fields).
    invalid_config,
};

/// The category of redis::error codes; its name() is "colock.redis".
boost::system::error_category const& error_category() noexcept;

/// The enumerator's name (e.g. "connection_lost"), for logs and metrics labels; "unknown" for a
/// value outside the enumeration. The error_code's message() says what it means.
std::string_view to_string(error e) noexcept;

/// The error_code for `e`, in redis::error_category(). Found by argument-dependent lookup, it
/// lets a redis::error convert to boost::system::error_code.
inline boost::system::error_code make_error_code(error e) noexcept {
    return {static_cast<int>(e), error_category()};
}

} // namespace colock::redis

/// \cond
// Lets colock::redis::error convert to boost::system::error_code; hidden from the API reference,
// as in colock/error.hpp.
template <>
struct boost::system::is_error_code_enum<colock::redis::error> : std::true_type {};
/// \endcond

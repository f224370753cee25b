// A real Redis Sentinel deployment for tests: a primary, a replica and three sentinels, all
// started on free loopback ports and stopped afterwards.
#pragma once

#include <colock/redis/config.hpp>
#include <colock_test/redis_server.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace colock::test {

/// Two data nodes (node 0 starts as the primary, node 1 as its replica) and three sentinels
/// (quorum 2, down-after 1 s) that monitor them under one master name. The constructor returns
/// once the replica is in sync and every sentinel knows the replica and the other two
/// sentinels, so that a failover can start at once.
///
/// The data nodes are redis_server objects, so tests can kill, pause and restart them. Not
/// thread-safe.
struct sentinel_set_options {
    std::string master_name = "mymaster";
    /// The data nodes' password (`requirepass`, and `masterauth` for the replica), if any; the
    /// sentinels are told it (`sentinel auth-pass`).
    std::string data_password;
    /// The sentinels' own password (`requirepass` of each sentinel), if any.
    std::string sentinel_password;
    /// Everything over TLS as well: clients, replication and the sentinels' links, with one CA
    /// (node 0's). The sentinels then name the primary's TLS port, and config() and url() go
    /// to the sentinels' TLS ports.
    bool tls = false;
    /// The sentinels log in to the data nodes as an ACL user of their own (created on both),
    /// not as the default user the clients use. A test that ends the clients' connections then
    /// names them (`CLIENT KILL TYPE normal USER default`) and leaves the sentinels' links up:
    /// a killed link is reconnected only up to a second later, long enough for the sentinels to
    /// judge the primary down (down-after 1 s) and fail over on their own.
    bool sentinels_own_user = false;
};

class sentinel_set : process_fixture {
public:
    explicit sentinel_set(sentinel_set_options opts = {});
    ~sentinel_set();

    std::string const& master_name() const noexcept { return master_name_; }
    redis_server& node(std::size_t i) { return *nodes_.at(i); }
    redis_server& sentinel(std::size_t i) { return *sentinels_.at(i); }
    std::size_t sentinel_count() const noexcept { return sentinels_.size(); }

    /// A connection config that goes through the three sentinels, with both passwords.
    colock::redis::config config() const;
    /// redis-sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/<master name>
    std::string url() const;

    /// The port of the primary that the sentinels agree on and that says ROLE master.
    /// Throws std::runtime_error when that does not hold within `within`.
    std::uint16_t wait_for_primary(std::chrono::milliseconds within);
    /// The data node on `port` (its plain or its TLS port).
    redis_server& node_on(std::uint16_t port);
    /// Waits (up to `within`) until the replica is good (its link to the primary up, and the
    /// sentinel asked listing it without flags and with its link up), then SENTINEL FAILOVER
    /// (asked again while refused), then waits (up to `within`) until every sentinel names the
    /// other node and it says ROLE master. Returns the new primary's port.
    std::uint16_t failover(std::chrono::milliseconds within);
    /// Waits until every sentinel names a primary other than `old_port` that says ROLE master
    /// (after a kill, say). Returns its port.
    std::uint16_t wait_for_new_primary(std::uint16_t old_port, std::chrono::milliseconds within);

    /// Sentinels' and nodes' log tails, for failure messages.
    std::string logs() const;

private:
    // The primary every sentinel names, or 0 when they do not all agree (or one cannot tell).
    std::uint16_t agreed_primary() const;
    // Empty when the replica of the primary on `primary_port` is one that sentinel 0 would fail
    // over to, else what it lacks.
    std::string replica_not_good(std::uint16_t primary_port);

    std::string master_name_;
    sentinel_set_options opts_;
    std::vector<std::unique_ptr<redis_server>> nodes_;
    std::vector<std::unique_ptr<redis_server>> sentinels_;
};

} // namespace colock::test

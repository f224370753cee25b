// A real Redis Cluster for tests: primaries and replicas started on free loopback ports with
// --cluster-enabled, joined by `redis-cli --cluster create`, and stopped afterwards.
#pragma once

#include <colock_test/redis_server.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace colock::test {

struct cluster_set_options {
    int primaries = 3;
    int replicas_per_primary = 1;
    /// cluster-node-timeout: how long a primary may be unreachable before its replica takes
    /// over. Short, so that a test's failover takes seconds.
    int node_timeout_ms = 1000;
};

/// The nodes are redis_server objects (kill, pause, restart work; a restarted node keeps its
/// identity, nodes.conf, and rejoins). The constructor returns once every node agrees that the
/// cluster is ok and every slot is served. Not thread-safe.
class cluster_set : process_fixture {
public:
    explicit cluster_set(cluster_set_options opts = {});
    ~cluster_set();

    std::size_t node_count() const noexcept { return nodes_.size(); }
    redis_server& node(std::size_t i) { return *nodes_.at(i); }
    redis_server& node_on(std::uint16_t port);

    /// redis-cluster://127.0.0.1:P1,127.0.0.1:P2,... with every node as a seed.
    std::string url() const;

    /// The port of the primary that serves `slot`, as node `asked` sees it (CLUSTER SLOTS).
    std::uint16_t owner_of(std::uint16_t slot, std::size_t asked = 0);
    /// The ports of the primaries, as node `asked` sees them.
    std::vector<std::uint16_t> primary_ports(std::size_t asked = 0);
    /// A replica of the primary on `primary_port`, as the primary sees it (CLUSTER NODES);
    /// waits up to 10 s for the primary to hear of one.
    std::uint16_t replica_of(std::uint16_t primary_port);

    /// Moves `slot` with its keys to the primary on `to_port`, as `redis-cli --cluster
    /// reshard` does: SETSLOT IMPORTING / MIGRATING, MIGRATE of each key, SETSLOT NODE on
    /// every primary. Keys written meanwhile get ASK redirections.
    void migrate_slot(std::uint16_t slot, std::uint16_t to_port);
    /// CLUSTER FAILOVER on the replica on `replica_port`; waits until it is a primary.
    void failover(std::uint16_t replica_port, std::chrono::milliseconds within);
    /// Waits until every running node says cluster_state:ok and serves every slot, and all
    /// agree on the slot owners. Right after a primary is killed this returns at once: the
    /// others go on counting it the owner of its slots until the node timeout and the
    /// election; wait for its replica's ROLE to say master first.
    void wait_ok(std::chrono::milliseconds within);

    std::string logs() const;

private:
    std::vector<std::unique_ptr<redis_server>> nodes_;
    std::string node_id(redis_server& node);
};

} // namespace colock::test

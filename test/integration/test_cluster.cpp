// Redis Cluster: the deployment the fixture starts (3 primaries, 3 replicas, joined by
// redis-cli --cluster create), and what the tests of the cluster connection will rely on:
// every slot served, a slot migrated with its keys, a replica promoted.
#include "test_util.hpp"
#include <colock_test/cluster_set.hpp>

#include "redis/cluster_slots.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>

using namespace colock::test;
using colock::redis::detail::hash_slot;

TEST_CASE("cluster fixture: 3 primaries with a replica each serve every slot; a slot migrates "
          "with its keys; a replica takes over") {
    cluster_set cluster;
    auto primaries = cluster.primary_ports();
    REQUIRE(primaries.size() == 3);
    for (auto const port : primaries)
        CHECK(cluster.replica_of(port) != port);

    // Our slot computation agrees with the cluster's.
    for (char const* key : {"foo", "colock:{name}", "{user1000}.following"}) {
        CHECK(std::stoi(cluster.node(0).cli({"CLUSTER", "KEYSLOT", key})) == hash_slot(key));
        auto const owner = cluster.owner_of(hash_slot(key));
        CHECK(std::find(primaries.begin(), primaries.end(), owner) != primaries.end());
        cluster.node_on(owner).cli({"SET", key, "v"});
    }

    // "foo" moves to another primary with its slot.
    auto const slot = hash_slot("foo");
    auto const from = cluster.owner_of(slot);
    auto const to = primaries[0] == from ? primaries[1] : primaries[0];
    cluster.migrate_slot(slot, to);
    CHECK(cluster.owner_of(slot) == to);
    CHECK(cluster.node_on(to).cli({"GET", "foo"}) == "v");
    CHECK_THROWS_WITH(cluster.node_on(from).cli({"GET", "foo"}), doctest::Contains("MOVED"));

    // The new owner's replica takes over.
    auto const replica = cluster.replica_of(to);
    cluster.failover(replica, 20s);
    CHECK(cluster.owner_of(slot) == replica);
    CHECK(cluster.node_on(replica).cli({"GET", "foo"}) == "v");
    CHECK(cluster.url().starts_with("redis-cluster://127.0.0.1:"));
}

#include <colock_test/cluster_set.hpp>

#include "fixture_wait.hpp"

#include <algorithm>
#include <map>
#include <sstream>
#include <stdexcept>

namespace colock::test {
namespace {

using namespace detail;
using namespace std::chrono_literals;

constexpr setup_failure fail{"cluster_set"};

// One line of CLUSTER NODES: "<id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch>
// <link> <slot ranges...>", which redis-cli prints as it is (CLUSTER SLOTS it flattens).
struct node_line {
    std::string id;
    std::uint16_t port = 0;
    bool primary = false;
    bool failed = false;
    std::string primary_id; // for a replica
    std::vector<std::pair<int, int>> slots;
};

std::vector<node_line> cluster_nodes(redis_server& n) {
    std::vector<node_line> out;
    std::istringstream lines(n.cli({"CLUSTER", "NODES"}));
    for (std::string line; std::getline(lines, line);) {
        std::istringstream words(line);
        node_line nl;
        std::string address, flags, master, ping, pong, epoch, link;
        words >> nl.id >> address >> flags >> master >> ping >> pong >> epoch >> link;
        auto const colon = address.rfind(':');
        auto const at = address.find('@');
        if (colon == std::string::npos)
            continue;
        nl.port = static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1, at - colon - 1)));
        nl.primary = flags.find("master") != std::string::npos;
        nl.failed = flags.find("fail") != std::string::npos;
        nl.primary_id = master == "-" ? std::string() : master;
        for (std::string r; words >> r;) {
            if (r.starts_with('['))
                continue; // a slot being migrated or imported
            auto const dash = r.find('-');
            int const first = std::stoi(r.substr(0, dash));
            int const last = dash == std::string::npos ? first : std::stoi(r.substr(dash + 1));
            nl.slots.emplace_back(first, last);
        }
        out.push_back(std::move(nl));
    }
    return out;
}

// Slot owner ports as one node sees them: 16384 entries, 0 for none.
std::vector<std::uint16_t> owners(redis_server& n) {
    std::vector<std::uint16_t> table(16384, 0);
    for (auto const& nl : cluster_nodes(n))
        if (nl.primary && !nl.failed)
            for (auto [first, last] : nl.slots)
                std::fill(table.begin() + first, table.begin() + last + 1, nl.port);
    return table;
}

} // namespace

cluster_set::cluster_set(cluster_set_options opts) {
    int const total = opts.primaries * (1 + opts.replicas_per_primary);
    for (int i = 0; i < total; ++i) {
        redis_server_options o;
        // nodes.conf lives in the server's directory, so a restarted node keeps its identity.
        o.extra_args = {"--cluster-enabled",          "yes",
                        "--cluster-config-file",      "nodes.conf",
                        "--cluster-node-timeout",     std::to_string(opts.node_timeout_ms),
                        "--repl-diskless-sync-delay", "0"};
        nodes_.push_back(std::make_unique<redis_server>(o));
    }
    std::vector<std::string> create = {"--cluster", "create"};
    for (auto const& n : nodes_)
        create.push_back("127.0.0.1:" + std::to_string(n->port()));
    create.insert(create.end(), {"--cluster-replicas", std::to_string(opts.replicas_per_primary),
                                 "--cluster-yes"});
    nodes_[0]->cli(create);
    wait_ok(20s);
    // Replicas in sync, so that a failover can start at once.
    bool const synced = poll_until(20s, [&] {
        for (auto const& n : nodes_) {
            auto const info = n->cli({"INFO", "replication"});
            if (info_field(info, "role") == "slave" &&
                info_field(info, "master_link_status") != "up")
                return false;
        }
        return true;
    });
    if (!synced)
        fail("the replicas did not sync within 20 s:\n" + logs());
}

cluster_set::~cluster_set() = default;

redis_server& cluster_set::node_on(std::uint16_t port) {
    for (auto& n : nodes_)
        if (n->port() == port)
            return *n;
    fail("no node on port " + std::to_string(port));
}

std::string cluster_set::url() const {
    std::string out = "redis-cluster://";
    for (std::size_t i = 0; i < nodes_.size(); ++i)
        out += (i == 0 ? "" : ",") + std::string("127.0.0.1:") + std::to_string(nodes_[i]->port());
    return out;
}

std::string cluster_set::node_id(redis_server& node) {
    return node.cli({"CLUSTER", "MYID"});
}

std::uint16_t cluster_set::owner_of(std::uint16_t slot, std::size_t asked) {
    return owners(*nodes_.at(asked)).at(slot);
}

std::vector<std::uint16_t> cluster_set::primary_ports(std::size_t asked) {
    std::vector<std::uint16_t> out;
    for (auto const& nl : cluster_nodes(*nodes_.at(asked)))
        if (nl.primary && !nl.failed && !nl.slots.empty())
            out.push_back(nl.port);
    std::sort(out.begin(), out.end());
    return out;
}

std::uint16_t cluster_set::replica_of(std::uint16_t primary_port) {
    // The primary hears of a new replica by gossip, a moment after the replica follows it.
    std::uint16_t found = 0;
    poll_until(10s, [&] {
        auto const nodes = cluster_nodes(node_on(primary_port));
        std::string primary_id;
        for (auto const& nl : nodes)
            if (nl.port == primary_port)
                primary_id = nl.id;
        for (auto const& nl : nodes)
            if (!nl.primary && nl.primary_id == primary_id && !nl.failed)
                found = nl.port;
        return found != 0;
    });
    if (found == 0)
        fail("the primary on port " + std::to_string(primary_port) + " has no replica");
    return found;
}

void cluster_set::wait_ok(std::chrono::milliseconds within) {
    bool const ok = poll_until(within, [&] {
        std::vector<std::uint16_t> first;
        for (auto const& n : nodes_) {
            if (!n->running())
                continue;
            auto const info = n->cli({"CLUSTER", "INFO"});
            if (info_field(info, "cluster_state") != "ok" ||
                info_field(info, "cluster_slots_ok") != "16384")
                return false;
            auto table = owners(*n);
            if (std::count(table.begin(), table.end(), 0) != 0)
                return false;
            if (first.empty())
                first = std::move(table);
            else if (table != first)
                return false;
        }
        return true;
    });
    if (!ok)
        fail("the cluster did not settle within " + std::to_string(within.count()) + " ms:\n" +
             logs());
}

void cluster_set::migrate_slot(std::uint16_t slot, std::uint16_t to_port) {
    auto const from_port = owner_of(slot);
    if (from_port == to_port)
        return;
    auto& from = node_on(from_port);
    auto& to = node_on(to_port);
    auto const from_id = node_id(from);
    auto const to_id = node_id(to);
    auto const s = std::to_string(slot);
    to.cli({"CLUSTER", "SETSLOT", s, "IMPORTING", from_id});
    from.cli({"CLUSTER", "SETSLOT", s, "MIGRATING", to_id});
    for (;;) {
        auto const keys = from.cli_lines({"CLUSTER", "GETKEYSINSLOT", s, "100"});
        if (keys.empty())
            break;
        std::vector<std::string> migrate = {
            "MIGRATE", "127.0.0.1", std::to_string(to_port), "", "0", "5000", "KEYS"};
        migrate.insert(migrate.end(), keys.begin(), keys.end());
        from.cli(migrate);
    }
    // The new owner first, then the old, then the others: as redis-cli does.
    to.cli({"CLUSTER", "SETSLOT", s, "NODE", to_id});
    from.cli({"CLUSTER", "SETSLOT", s, "NODE", to_id});
    for (auto const port : primary_ports())
        if (port != to_port && port != from_port)
            node_on(port).cli({"CLUSTER", "SETSLOT", s, "NODE", to_id});
    wait_ok(10s);
}

void cluster_set::failover(std::uint16_t replica_port, std::chrono::milliseconds within) {
    auto& replica = node_on(replica_port);
    replica.cli({"CLUSTER", "FAILOVER"});
    bool const promoted = poll_until(within, [&] {
        return info_field(replica.cli({"INFO", "replication"}), "role") == "master";
    });
    if (!promoted)
        fail("the replica on port " + std::to_string(replica_port) + " was not promoted within " +
             std::to_string(within.count()) + " ms:\n" + logs());
    wait_ok(within);
}

std::string cluster_set::logs() const {
    std::string out;
    for (std::size_t i = 0; i < nodes_.size(); ++i)
        out += "--- node " + std::to_string(i) + " (port " + std::to_string(nodes_[i]->port()) +
               ")\n" + nodes_[i]->log_tail(8);
    return out;
}

} // namespace colock::test

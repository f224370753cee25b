#include <colock_test/sentinel_set.hpp>

#include "fixture_wait.hpp"

#include <algorithm>
#include <stdexcept>

namespace colock::test {
namespace {

using namespace detail;
using namespace std::chrono_literals;

constexpr setup_failure fail{"sentinel_set"};

// The sentinels' own user on the data nodes, with sentinel_set_options::sentinels_own_user.
constexpr char const* sentinel_user = "colock-sentinel";
constexpr char const* sentinel_user_password = "colock-sentinel-password";

redis_server_options data_node_options(std::uint16_t primary_port, std::string const& password,
                                       bool tls, std::string const& tls_files,
                                       bool sentinels_own_user) {
    redis_server_options o;
    if (sentinels_own_user) {
        o.acl_user = sentinel_user;
        o.acl_password = sentinel_user_password;
    }
    o.requirepass = password;
    o.tls = tls;
    o.tls_files_from = tls_files;
    if (tls)
        o.extra_args = {"--tls-replication", "yes"};
    // A replica syncs at once rather than after the default 5 s diskless delay.
    o.extra_args.insert(o.extra_args.end(), {"--repl-diskless-sync-delay", "0"});
    if (!password.empty()) // a replica today, maybe: it authenticates to its primary
        o.extra_args.insert(o.extra_args.end(), {"--masterauth", password});
    if (primary_port != 0)
        o.extra_args.insert(o.extra_args.end(),
                            {"--replicaof", "127.0.0.1", std::to_string(primary_port)});
    return o;
}

} // namespace

sentinel_set::sentinel_set(sentinel_set_options opts)
    : master_name_(opts.master_name), opts_(std::move(opts)) {
    nodes_.push_back(std::make_unique<redis_server>(
        data_node_options(0, opts_.data_password, opts_.tls, {}, opts_.sentinels_own_user)));
    std::string const tls_files = nodes_[0]->tls_files_dir();
    // The replica and the sentinels reach the primary on the port clients use: its TLS port
    // when there is one.
    auto const primary_port = opts_.tls ? nodes_[0]->tls_port() : nodes_[0]->port();
    nodes_.push_back(std::make_unique<redis_server>(data_node_options(
        primary_port, opts_.data_password, opts_.tls, tls_files, opts_.sentinels_own_user)));
    // Sentinels that start after the replica is in sync learn of it from their first INFO of
    // the primary, rather than ten seconds later.
    if (!poll_until(10s, [&] {
            return info_field(nodes_[1]->cli({"INFO", "replication"}), "master_link_status") ==
                   "up";
        }))
        fail("the replica did not sync with the primary within 10 s:\n" + logs());
    for (int i = 0; i < 3; ++i) {
        redis_server_options o;
        o.sentinel_master_name = master_name_;
        o.sentinel_primary_port = primary_port;
        o.tls = opts_.tls;
        o.tls_files_from = tls_files;
        if (opts_.tls)
            o.extra_args = {"--tls-replication", "yes"};
        o.sentinel_auth_pass = opts_.data_password;
        if (opts_.sentinels_own_user) {
            o.sentinel_auth_user = sentinel_user;
            o.sentinel_auth_pass = sentinel_user_password;
        }
        o.requirepass = opts_.sentinel_password;
        sentinels_.push_back(std::make_unique<redis_server>(o));
    }
    // Sentinels find each other through hello messages every 2 s.
    bool const ready = poll_until(15s, [&] {
        for (auto const& s : sentinels_) {
            auto const lines = s->cli_lines({"SENTINEL", "MASTER", master_name_});
            auto value_of = [&](std::string const& key) {
                auto const it = std::find(lines.begin(), lines.end(), key);
                return it == lines.end() || it + 1 == lines.end() ? std::string() : *(it + 1);
            };
            if (value_of("num-other-sentinels") != "2" || value_of("num-slaves") != "1")
                return false;
        }
        return true;
    });
    if (!ready)
        fail("the sentinels did not find each other and the replica within 15 s:\n" + logs());
}

sentinel_set::~sentinel_set() {
    // Sentinels first, so that none starts a failover while the nodes stop.
    sentinels_.clear();
    nodes_.clear();
}

colock::redis::config sentinel_set::config() const {
    colock::redis::config cfg;
    for (auto const& s : sentinels_)
        cfg.sentinel.sentinels.push_back({"127.0.0.1", opts_.tls ? s->tls_port() : s->port()});
    if (opts_.tls) {
        cfg.use_tls = true;
        cfg.tls_ca_file = nodes_[0]->ca_file();
    }
    cfg.sentinel.master_name = master_name_;
    cfg.sentinel.password = opts_.sentinel_password;
    cfg.password = opts_.data_password;
    return cfg;
}

std::string sentinel_set::url() const {
    std::string out = "redis-sentinel://";
    for (std::size_t i = 0; i < sentinels_.size(); ++i)
        out +=
            (i == 0 ? "" : ",") + std::string("127.0.0.1:") + std::to_string(sentinels_[i]->port());
    // The passwords of the tests are URL-safe.
    if (!opts_.data_password.empty())
        out.insert(out.find("://") + 3, ":" + opts_.data_password + "@");
    out += "/" + master_name_;
    if (!opts_.sentinel_password.empty())
        out += "?sentinel_password=" + opts_.sentinel_password;
    return out;
}

redis_server& sentinel_set::node_on(std::uint16_t port) {
    for (auto& n : nodes_)
        if (n->port() == port || (n->tls_port() != 0 && n->tls_port() == port))
            return *n;
    fail("no data node on port " + std::to_string(port));
}

std::uint16_t sentinel_set::agreed_primary() const {
    std::uint16_t agreed = 0;
    for (auto const& s : sentinels_) {
        auto const lines = s->cli_lines({"SENTINEL", "GET-MASTER-ADDR-BY-NAME", master_name_});
        if (lines.size() != 2)
            return 0;
        auto const port = static_cast<std::uint16_t>(std::stoi(lines[1]));
        if (agreed != 0 && port != agreed)
            return 0;
        agreed = port;
    }
    return agreed;
}

std::uint16_t sentinel_set::wait_for_primary(std::chrono::milliseconds within) {
    return wait_for_new_primary(0, within);
}

std::uint16_t sentinel_set::wait_for_new_primary(std::uint16_t old_port,
                                                 std::chrono::milliseconds within) {
    std::uint16_t found = 0;
    bool const ok = poll_until(within, [&] {
        std::uint16_t const port = agreed_primary();
        if (port == 0 || port == old_port)
            return false;
        if (info_field(node_on(port).cli({"INFO", "replication"}), "role") != "master")
            return false;
        found = port;
        return true;
    });
    if (!ok)
        fail("the sentinels did not agree on a new primary within " +
             std::to_string(within.count()) + " ms:\n" + logs());
    return found;
}

std::string sentinel_set::replica_not_good(std::uint16_t primary_port) {
    // The replica's own view: its link to this primary is up.
    for (auto& n : nodes_) {
        if (n->port() == primary_port || n->tls_port() == primary_port)
            continue;
        auto const info = n->cli({"INFO", "replication"});
        if (info_field(info, "master_link_status") != "up" ||
            info_field(info, "master_port") != std::to_string(primary_port))
            return "node on port " + std::to_string(n->port()) + " says role " +
                   info_field(info, "role") + ", master_port " + info_field(info, "master_port") +
                   ", master_link_status " + info_field(info, "master_link_status");
    }
    // The view of the sentinel asked to fail over, which picks the replica: it aborts the
    // failover (-failover-abort-no-good-slave) when the replica it knows is flagged (s_down,
    // disconnected) or its last INFO of it says the link is down, which it reads only every few
    // seconds after a failover.
    auto const lines = sentinels_[0]->cli_lines({"SENTINEL", "REPLICAS", master_name_});
    std::string seen = "none listed";
    for (std::size_t i = 0; i < lines.size(); ++i) {
        if (lines[i] != "name")
            continue;
        auto value_of = [&](std::string const& key) {
            // Key, value, key, ...: from this entry's "name" to the next entry's.
            for (std::size_t k = i; k + 1 < lines.size() && (k == i || lines[k] != "name"); k += 2)
                if (lines[k] == key)
                    return lines[k + 1];
            return std::string();
        };
        if (value_of("flags") == "slave" && value_of("master-link-status") == "ok" &&
            value_of("master-link-down-time") == "0" &&
            value_of("master-port") == std::to_string(primary_port))
            return {};
        seen = "flags " + value_of("flags") + ", master-link-status " +
               value_of("master-link-status") + ", master-link-down-time " +
               value_of("master-link-down-time") + ", master-port " + value_of("master-port");
    }
    return "sentinel 0 lists the replica with " + seen;
}

std::uint16_t sentinel_set::failover(std::chrono::milliseconds within) {
    std::uint16_t const old_port = wait_for_primary(within);
    // Only once the replica is good again (after an earlier failover: the old primary, now a
    // replica, synced and seen so by the sentinels), else the sentinels accept the failover and
    // then abort it; bounded by `within`, as the failover itself is.
    std::string not_good;
    if (!poll_until(within, [&] {
            not_good = replica_not_good(old_port);
            return not_good.empty();
        }))
        fail("no good replica to fail over to within " + std::to_string(within.count()) +
             " ms: " + not_good + "\n" + logs());
    // Refused (NOGOODSLAVE, INPROG) while a failover still runs.
    std::string refusal;
    bool const started = poll_until(within, [&] {
        try {
            sentinels_[0]->cli({"SENTINEL", "FAILOVER", master_name_});
            return true;
        } catch (std::runtime_error const& e) {
            refusal = e.what();
            throw;
        }
    });
    if (!started)
        fail("SENTINEL FAILOVER was refused for " + std::to_string(within.count()) +
             " ms: " + refusal + "\n" + logs());
    return wait_for_new_primary(old_port, within);
}

std::string sentinel_set::logs() const {
    std::string out;
    for (std::size_t i = 0; i < nodes_.size(); ++i)
        out += "--- node " + std::to_string(i) + " (port " + std::to_string(nodes_[i]->port()) +
               ")\n" + nodes_[i]->log_tail(8);
    for (std::size_t i = 0; i < sentinels_.size(); ++i)
        out += "--- sentinel " + std::to_string(i) + " (port " +
               std::to_string(sentinels_[i]->port()) + ")\n" + sentinels_[i]->log_tail(12);
    return out;
}

} // namespace colock::test

// A lock in a Redis Cluster across a failover: take a lock, find the primary that serves its
// slot, have that primary's replica take over (this program asks it to, with CLUSTER FAILOVER,
// to show it), see the work's wait_lost() fire, and lock again on the promoted replica with a
// higher fence.
//
// Usage: COLOCK_REDIS_URL=redis-cluster://host:port,... colock_example_cluster_failover
// scripts/with-redis.sh --cluster starts a throwaway cluster (three primaries, a replica each)
// and sets COLOCK_REDIS_URL to it.
#include <colock/colock.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;
using namespace std::chrono_literals;

namespace {

// The primary that serves `slot` and a replica of it, as "host:port", from CLUSTER NODES: a line
// per node, "<id> <host:port@bus> <flags> <its primary's id, or -> <ping> <pong> <epoch> <link>
// <slots>...", the slots as "n" or "first-last" ("[...]": one being migrated).
std::pair<std::string, std::string> primary_and_replica(std::string const& nodes, long slot) {
    std::string primary_id, primary, replica;
    for (int pass = 0; pass < 2; ++pass) { // the primary first, then its replica
        std::istringstream lines{nodes};
        for (std::string line; std::getline(lines, line);) {
            std::istringstream in{line};
            std::string id, address, flags, of, skip, range;
            in >> id >> address >> flags >> of >> skip >> skip >> skip >> skip;
            address = address.substr(0, address.find('@'));
            if (pass == 1 && !primary_id.empty() && of == primary_id &&
                flags.find("fail") == std::string::npos)
                replica = address;
            while (pass == 0 && in >> range) {
                long first = -1, last = -1;
                if (std::sscanf(range.c_str(), "%ld-%ld", &first, &last) == 1)
                    last = first;
                if (0 <= first && first <= slot && slot <= last)
                    std::tie(primary_id, primary) = std::tie(id, address);
            }
        }
    }
    return {primary, replica};
}

asio::awaitable<int> run(colock::redis::config cfg) {
    auto const ex = co_await asio::this_coro::executor;
    colock::redis::connection conn{ex, cfg};
    co_await conn.co_connect(); // asks a seed for the slot map, then connects to the primaries
    colock::locker locker{conn};

    colock::lock_options opt;
    opt.ttl = 10s;
    opt.wait_timeout = 30s;
    std::string const name = "example:failover";
    auto guard = co_await locker.co_lock(name, opt);

    // Which primary holds the lock, and which replica of it is to take over. The lock's keys
    // ("colock:{name}", which holds the holder and the fence, and its queue's) all share the
    // slot of the hash tag {name}.
    colock::resp3::request req;
    req.push("CLUSTER", "KEYSLOT", "colock:{" + name + "}");
    req.push("CLUSTER", "NODES"); // keyless: any primary answers, as it sees the cluster now
    auto const resp = co_await conn.co_exec(req);
    long const slot = static_cast<long>(resp.at(0).as_integer().value_or(-1));
    auto const [primary, replica] =
        primary_and_replica(std::string(resp.at(1).as_string().value_or("")), slot);
    if (replica.empty()) {
        fmt::print(stderr, "cluster_failover: no primary with a replica serves slot {}\n", slot);
        co_return 1;
    }
    fmt::print("locked '{}' (slot {}) on primary {}, fence {}\n", name, slot, primary,
               guard.fence());

    // A manual failover, as an operator would do it with redis-cli: sent to the replica, which
    // waits until it has every write of its primary, then takes over its slots. A plain
    // connection, with the cluster's credentials and TLS settings.
    auto direct = cfg;
    direct.cluster = {};
    direct.host = replica.substr(0, replica.rfind(':'));
    direct.port = static_cast<std::uint16_t>(std::stoi(replica.substr(replica.rfind(':') + 1)));
    colock::redis::connection to_replica{ex, direct};
    colock::resp3::request failover;
    failover.push("CLUSTER", "FAILOVER");
    co_await to_replica.co_exec(failover);
    to_replica.close();
    fmt::print("asked replica {} to take over\n", replica);

    // The work stops when the lease does: the slot is now served by another server instance,
    // which never granted this lease, and the connection says so once it sees the change.
    auto const started = std::chrono::steady_clock::now();
    asio::steady_timer timeout{ex, 20s};
    auto const ended = co_await (timeout.async_wait(asio::use_awaitable) || guard.wait_lost());
    if (ended.index() == 0 || guard.loss() != colock::loss_reason::server_replaced) {
        fmt::print(stderr, "cluster_failover: the failover was not reported within 20 s\n");
        co_return 1;
    }
    fmt::print("lease lost after {} ms: the primary was replaced\n",
               std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - started)
                   .count());
    // Its release still goes out: the promoted replica had the lease, and gives it up now.
    co_await guard.release();

    auto again = co_await locker.co_lock(name, opt);
    fmt::print("locked again on the new primary, fence {} (fences only go up)\n", again.fence());
    int const status = again.fence() > guard.fence() ? 0 : 1;
    co_await again.release();
    conn.close();
    co_return status;
}

} // namespace

int main() {
    char const* url = std::getenv("COLOCK_REDIS_URL");
    colock::redis::config cfg;
    boost::system::error_code url_error;
    std::string reason;
    cfg = colock::redis::config::from_url(url ? url : "", url_error, &reason);
    if (url_error) {
        fmt::print(stderr, "cluster_failover: COLOCK_REDIS_URL: {}\n", reason);
        return 2;
    }
    if (!cfg.uses_cluster()) {
        fmt::print(stderr, "cluster_failover: needs a redis-cluster:// URL, got {}\n",
                   cfg.to_redacted_url());
        return 2;
    }

    try {
        asio::io_context io;
        int status = 1;
        asio::co_spawn(io, run(cfg), [&](std::exception_ptr failure, int result) {
            if (failure)
                std::rethrow_exception(failure);
            status = result;
        });
        io.run();
        return status;
    } catch (std::exception const& e) {
        fmt::print(stderr, "cluster_failover: {} ({})\n", e.what(), cfg.to_redacted_url());
        return 1;
    }
}

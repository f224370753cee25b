// The seam between a scenario and where it runs: a locker made from one connection (a single
// server or a Cluster) or from one connection per independent primary (Redlock), the nodes whose
// INFO counts, and cleanup on every server the locker writes to. S1 to S4 lock through a
// lock_target and never ask which kind it is.
#include "lock_contention.hpp"

#include <stdexcept>
#include <utility>

namespace colock::bench::contention {

asio::awaitable<lock_target> lock_target::open(deployment const& d, std::string prefix) {
    lock_target t;
    if (d.redlock()) {
        // One connection per primary, as one process of a Redlock deployment has them.
        std::vector<redis::connection*> primaries;
        for (auto const& node : d.nodes) {
            t.conns_.push_back(co_await contention::open(node));
            primaries.push_back(t.conns_.back().get());
        }
        t.locker_ = std::make_shared<colock::locker>(primaries, std::move(prefix));
    } else {
        t.conns_.push_back(co_await contention::open(d.cfg));
        t.locker_ = std::make_shared<colock::locker>(*t.conns_.front(), std::move(prefix));
    }
    t.stats_ = co_await node_stats::open(d.nodes);
    co_return t;
}

std::uint64_t lock_target::reconnects() const {
    std::uint64_t n = 0;
    for (auto const& conn : conns_)
        n += conn->reconnect_count();
    return n;
}

asio::awaitable<void> lock_target::delete_keys(std::vector<std::string> keys) {
    for (auto const& conn : conns_)
        co_await contention::delete_keys(*conn, keys);
}

void lock_target::close() {
    stats_.close();
    for (auto const& conn : conns_)
        conn->close();
}

deployment redlock_deployment(std::vector<std::string> urls) {
    if (urls.size() < 3 || urls.size() % 2 == 0)
        throw std::invalid_argument("Redlock needs an odd number of primaries, at least 3");
    deployment d{"redlock", redis::config::from_url(urls.front()), {}, 0, {}};
    for (auto const& url : urls)
        d.nodes.push_back(redis::config::from_url(url));
    d.primary_urls = std::move(urls);
    return d;
}

deployment redlock_deployment(colock::test::primary_set const& primaries) {
    std::vector<std::string> urls;
    for (auto const* server : primaries.servers())
        urls.push_back(server->url());
    return redlock_deployment(std::move(urls));
}

} // namespace colock::bench::contention

// The Cluster engine's slot map: discovery from the seeds, refreshes (after MOVED, and while a
// primary is unreachable), applying a new map to the nodes, and the watch that refreshes it.
#include "cluster_engine.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace colock::redis::detail {

void cluster_engine::refresh() {
    if (final_)
        return;
    if (refreshing_) {
        refresh_again_ = true; // what prompted it may postdate the answer under way
        return;
    }
    refreshing_ = true;
    asio::co_spawn(strand_, refresh_map(shared_from_this()), asio::detached);
}

asio::awaitable<void> cluster_engine::await_map(bool start, asio::cancellation_slot stop) {
    if (start)
        refresh();
    if (!refreshing_)
        co_return;
    co_await map_changed_.async_wait(asio::bind_cancellation_slot(stop, nothrow_awaitable));
}

void cluster_engine::reopen() {
    // Used again after close(): the map is read again, which restarts the watch.
    if (std::exchange(closed_, false))
        refresh();
}

// What a refresh of the map heard from the nodes it asked.
struct cluster_engine::map_search {
    std::vector<std::string> problems; // one per node that gave no map
    error_code last_ec = error::no_slot_map;
    bool found = false;
};

asio::awaitable<void> cluster_engine::refresh_map(std::shared_ptr<cluster_engine> self) {
    co_await asio::this_coro::throw_if_cancelled(false);
    map_search search;
    auto const closes = self->closes_;
    for (auto const& address : self->nodes_to_ask()) {
        if (self->refresh_ended(closes))
            break;
        auto n = self->node_for(address);
        auto [ec, resp] = co_await self->ask_cluster_slots(n);
        if (self->refresh_ended(closes))
            break; // close() or ~connection meanwhile: open nothing more
        if (self->take_slot_map(*n, address, ec, resp, search))
            break;
    }
    self->refreshing_ = false;
    if (self->refresh_ended(closes)) {
        self->refresh_again_ = false;
        self->finish_connect_waiters(error::closed);
    } else if (search.found) {
        // A co_connect completes once the primaries have been reached too, so that a request
        // made right after it does not wait for its node's connection (which a caller's
        // deadline of 0, a try that does not wait, would stop before it is sent).
        if (!self->connect_waiters_.empty())
            co_await self->primaries_reached();
        self->finish_connect_waiters(self->refresh_ended(closes) ? error_code(error::closed)
                                                                 : error_code{});
    } else {
        self->no_slot_map(search);
    }
    self->map_changed_.cancel();
    if (search.found && !self->refresh_ended(closes) && !self->watching_) {
        self->watching_ = true;
        asio::co_spawn(self->strand_, watch(self), asio::detached);
    }
    if (std::exchange(self->refresh_again_, false) && !self->refresh_ended(closes))
        self->refresh();
}

bool cluster_engine::refresh_ended(std::uint64_t closes) const {
    return final_ || closes_ != closes;
}

std::vector<server_address> cluster_engine::nodes_to_ask() {
    // The primaries known, then the seeds.
    std::vector<server_address> ask;
    if (ask_first_) {
        ask.push_back(*ask_first_);
        ask_first_.reset();
    }
    for (auto const& a : order_)
        if (std::find(ask.begin(), ask.end(), a) == ask.end())
            ask.push_back(a);
    for (auto const& s : cfg_.cluster.seeds)
        if (std::find(ask.begin(), ask.end(), s) == ask.end())
            ask.push_back(s);
    return ask;
}

asio::awaitable<std::tuple<error_code, response>> cluster_engine::ask_cluster_slots(node_ptr n) {
    resp3::request req;
    req.push("CLUSTER", "SLOTS");
    // Bounded by connect_timeout: a node that is down queues the request until it is back.
    auto stop = std::make_shared<asio::cancellation_signal>();
    asio::steady_timer timer(strand_, cfg_.connect_timeout);
    timer.async_wait([stop](error_code ec) {
        if (!ec)
            stop->emit(asio::cancellation_type::terminal);
    });
    auto [ec, resp] = co_await exec_on(
        *n->conn, std::move(req), asio::bind_cancellation_slot(stop->slot(), nothrow_awaitable));
    timer.cancel();
    co_return std::make_tuple(ec, std::move(resp));
}

bool cluster_engine::take_slot_map(node const& n, server_address const& address, error_code ec,
                                   response const& resp, map_search& search) {
    if (ec == asio::error::operation_aborted)
        ec = error::connect_timeout;
    if (ec && ec != error::server_error) {
        auto why = n.conn->connect_failure_text(ec);
        search.problems.push_back(why.empty() ? fmt::format("{}: {}", n.name, ec.message()) : why);
        if (is_connect_failure(ec))
            search.last_ec = error_code(ec.value(), ec.category());
        return false;
    }
    if (resp.size() != 1 || resp[0].is_error()) {
        search.problems.push_back(
            fmt::format("{}: CLUSTER SLOTS refused: {}", n.name,
                        resp.empty() ? std::string("no answer") : resp[0].text));
        search.last_ec = error::no_slot_map;
        return false;
    }
    auto answer = read_cluster_slots(resp[0], address);
    if (answer.problem.empty() && answer.ranges.empty())
        answer.problem = "the cluster serves no slot";
    if (!answer.problem.empty()) {
        search.problems.push_back(fmt::format("{}: {}", n.name, answer.problem));
        search.last_ec = error::no_slot_map;
        return false;
    }
    apply_map(answer.ranges);
    search.found = true;
    return true;
}

void cluster_engine::no_slot_map(map_search const& search) {
    auto text = fmt::format("connecting to {}: no node gave the slot map: {}", cfg_.endpoint_text(),
                            fmt::join(search.problems, "; "));
    {
        std::lock_guard lock(error_mutex_);
        last_connect_ec_ = search.last_ec;
        last_connect_error_ = text;
    }
    set_error_text(std::move(text));
    finish_connect_waiters(search.last_ec);
}

asio::awaitable<void> cluster_engine::primaries_reached() {
    struct pending {
        pending(asio::strand<asio::any_io_executor> const& strand, std::size_t n,
                std::chrono::milliseconds limit)
            : left(n), done(strand, limit) {}
        std::size_t left;
        asio::steady_timer done; // cancelled by the last connection's answer
    };
    auto p = std::make_shared<pending>(strand_, order_.size(), cfg_.connect_timeout);
    for (auto const& a : order_)
        node_for(a)->conn->start_connect([strand = strand_, p](error_code) {
            asio::dispatch(strand, [p] {
                if (--p->left == 0)
                    p->done.cancel();
            });
        });
    if (p->left > 0)
        co_await p->done.async_wait(nothrow_awaitable);
}

void cluster_engine::apply_map(std::vector<slot_range> const& ranges) {
    // Slots whose primary was replaced (a failover): the leases granted there are to be taken as
    // gone, as after a restart. Told against the last map read, not the table that MOVED
    // replies patched since: the MOVED that showed a failover is no migration.
    auto const replaced = map_known_ ? replaced_slots(map_, ranges) : std::vector<std::uint16_t>{};
    count_slot_changes(replaced);
    map_ = ranges;
    table_.assign(ranges);
    map_known_ = true;
    order_.clear();
    for (auto const& r : ranges)
        if (std::find(order_.begin(), order_.end(), r.primary) == order_.end())
            order_.push_back(r.primary);
    // Connect every primary now, so that failures show before requests need them; drop the
    // nodes that are not primaries (seeds that are replicas, demoted primaries).
    std::vector<node_ptr> stale;
    for (auto const& [name, n] : nodes_)
        if (std::find(order_.begin(), order_.end(), n->address) == order_.end())
            stale.push_back(n);
    for (auto const& a : order_)
        node_for(a)->conn->start_connect([](error_code) {});
    // Requests waiting on a node that no longer serves their slot go again (unwritten ones
    // only): before the stale nodes close, which would fail them with error::closed.
    for (auto const& [id, op] : ops_)
        reroute_if_moved(*op);
    for (auto const& n : stale)
        drop_node(n);
    follow_channels();
    std::string ids;
    for (auto const& a : order_)
        ids += (ids.empty() ? "" : ",") + node_for(a)->conn->run_id();
    {
        std::lock_guard lock(error_mutex_);
        run_ids_ = std::move(ids);
        primaries_ = order_;
    }
    ever_handshaken_ = true;
    connected_ = !closed_;
    if (!replaced.empty()) {
        ++server_changes_;
        notify_listeners([](push_listener& l) { l.on_server_change(); });
        notify_listeners([](push_listener& l) { l.on_reconnect(); });
    }
}

// While connected: a primary that is down may have been failed over; ask the others. And every
// few health-check intervals anyway.
asio::awaitable<void> cluster_engine::watch(std::shared_ptr<cluster_engine> self) {
    co_await asio::this_coro::throw_if_cancelled(false);
    auto const interval = self->cfg_.health_check_interval.count() > 0
                              ? self->cfg_.health_check_interval
                              : std::chrono::milliseconds(1000);
    constexpr int periodic_refresh_rounds = 5;
    int rounds = 0;
    while (!self->closed_ && !self->final_) {
        self->watch_timer_.expires_after(interval);
        co_await self->watch_timer_.async_wait(nothrow_awaitable);
        if (self->closed_ || self->final_)
            break;
        // Every few rounds regardless: a primary demoted by CLUSTER FAILOVER stays reachable,
        // and its guards are to be reported lost before a renewal would hear MOVED.
        bool stale = ++rounds % periodic_refresh_rounds == 0;
        bool down = false;
        std::string ids;
        for (auto const& a : self->order_) {
            auto const n = self->node_for(a);
            if (n->conn->ever_connected() && !n->conn->is_connected())
                down = true;
            ids += (ids.empty() ? "" : ",") + n->conn->run_id();
        }
        self->connected_ = !down;
        {
            std::lock_guard lock(self->error_mutex_);
            self->run_ids_ = std::move(ids);
        }
        if (stale || down)
            self->refresh();
    }
    self->watching_ = false;
}

} // namespace colock::redis::detail

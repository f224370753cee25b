// The Cluster engine's nodes: the engine's interface, the node connections, and what their
// listeners report. The slot map is read and watched in cluster_map.cpp.
#include "cluster_engine.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace colock::redis::detail {

// Forwards what a node's connection reports to the engine, on the engine's strand.
class cluster_engine::node_listener final : public push_listener {
public:
    node_listener(std::weak_ptr<cluster_engine> engine, std::string node)
        : engine_(std::move(engine)), node_(std::move(node)) {}

    void on_push(resp3::value const& push) override {
        if (auto e = engine_.lock())
            asio::dispatch(e->strand_, [e, from = node_, push] { e->on_node_push(from, push); });
    }
    void on_reconnect() override {
        if (auto e = engine_.lock())
            asio::dispatch(e->strand_, [e] { e->on_node_reconnect(); });
    }
    void on_server_change() override {
        if (auto e = engine_.lock()) {
            // Counted at once, as connection_impl does, so that a reply read after this call
            // is known to come from before the change.
            ++e->server_changes_;
            asio::dispatch(e->strand_, [e, from = node_] { e->on_node_server_change(from); });
        }
    }

private:
    std::weak_ptr<cluster_engine> engine_;
    std::string node_;
};

cluster_engine::cluster_engine(asio::any_io_executor ex, config cfg)
    : engine_base(std::move(ex), std::move(cfg))
    , map_changed_(strand_, std::chrono::steady_clock::time_point::max())
    , watch_timer_(strand_)
    , slot_changes_(std::make_unique<std::atomic<std::uint32_t>[]>(cluster_slots)) {
    if (cfg_.use_tls)
        tls_context_ = make_tls_context(cfg_);
}

std::shared_ptr<engine> make_cluster_engine(asio::any_io_executor ex, config cfg) {
    auto e = std::make_shared<cluster_engine>(std::move(ex), std::move(cfg));
    colock::detail::context_shutdown::watch(e->executor(), e);
    return e;
}

std::uint64_t cluster_engine::server_changes_for(std::string_view key) const noexcept {
    return slot_changes_[hash_slot(key)].load();
}

std::string cluster_engine::run_id() const {
    std::lock_guard lock(error_mutex_);
    return run_ids_;
}

std::vector<server_address> cluster_engine::cluster_primaries() const {
    std::lock_guard lock(error_mutex_);
    return primaries_;
}

std::string cluster_engine::connect_failure_text(error_code ec) const {
    if (!is_connect_failure(ec))
        return {};
    std::lock_guard lock(error_mutex_);
    if (ec == last_connect_ec_ && !last_connect_error_.empty())
        return last_connect_error_;
    return fmt::format("connecting to {}: {}", cfg_.endpoint_text(),
                       error_code(ec.value(), ec.category()).message());
}

// ---------------------------------------------------------------- the engine's interface

void cluster_engine::start_connect(connect_handler handler) {
    auto w = std::make_shared<connect_waiter>(std::move(handler), strand_.get_inner_executor());
    on_terminal_cancellation(w, weak_from_this(), [](auto self, auto cw) {
        asio::dispatch(self->strand_, [self, cw] {
            if (cw->done)
                return;
            cw->done = true;
            colock::detail::complete_now(self->strand_, std::move(cw->handler), cw->slot,
                                         error_code(asio::error::operation_aborted));
        });
    });
    asio::dispatch(strand_, [self = shared_from_this(), w] {
        if (w->done)
            return;
        if (self->final_) {
            w->done = true;
            colock::detail::complete_now(self->strand_, std::move(w->handler), w->slot,
                                         error_code(error::closed));
            return;
        }
        self->reopen();
        if (self->map_known_ && self->connected_) {
            w->done = true;
            colock::detail::complete_now(self->strand_, std::move(w->handler), w->slot,
                                         error_code{});
            return;
        }
        self->connect_waiters_.push_back(w);
        self->refresh();
    });
}

void cluster_engine::finish_connect_waiters(error_code ec) {
    auto waiters = std::move(connect_waiters_);
    connect_waiters_.clear();
    for (auto& w : waiters) {
        if (w->done)
            continue;
        w->done = true;
        colock::detail::complete_now(strand_, std::move(w->handler), w->slot, ec);
    }
}

void cluster_engine::start_close() {
    // post, as connection_impl does: what was asked before close() reaches the nodes first.
    asio::post(strand_, [self = shared_from_this()] {
        self->closed_ = true;
        ++self->closes_;
        self->connected_ = false;
        self->watch_timer_.cancel();
        self->map_changed_.cancel(); // requests waiting for a map look again, and end
        self->finish_connect_waiters(error::closed);
        for (auto const& [name, n] : self->nodes_)
            n->conn->start_close();
    });
}

void cluster_engine::handle_destroyed() {
    asio::post(strand_, [self = shared_from_this()] {
        self->final_ = true;
        self->closed_ = true;
        self->connected_ = false;
        self->listeners_.clear();
        self->watch_timer_.cancel();
        self->map_changed_.cancel();
        for (auto const& [name, n] : self->nodes_)
            n->conn->handle_destroyed();
        self->nodes_.clear();
        self->finish_connect_waiters(error::closed);
    });
}

void cluster_engine::drop_handlers() noexcept {
    // Coroutines of this engine may still be resumed while the context winds down: they find
    // nothing to do.
    final_ = true;
    closed_ = true;
    connected_ = false;
    auto waiters = std::move(connect_waiters_);
    auto ops = std::move(ops_);
    auto listeners = std::move(listeners_);
    auto nodes = std::move(nodes_);
    connect_waiters_.clear();
    ops_.clear();
    listeners_.clear();
    nodes_.clear();
}

// ---------------------------------------------------------------- nodes

cluster_engine::node_ptr cluster_engine::node_for(server_address const& address) {
    auto name = address_text(address);
    if (auto it = nodes_.find(name); it != nodes_.end())
        return it->second;
    config c = cfg_;
    c.cluster.seeds.clear();
    c.host = address.host;
    c.port = address.port;
    auto n = std::make_shared<node>();
    n->address = address;
    n->name = name;
    n->conn = std::make_shared<connection_impl>(executor_, std::move(c), tls_context_);
    colock::detail::context_shutdown::watch(executor_, n->conn);
    n->listener = std::make_shared<node_listener>(weak_from_this(), n->name);
    n->conn->add_listener(n->listener);
    nodes_.emplace(std::move(name), n);
    return n;
}

cluster_engine::node_ptr cluster_engine::route(std::optional<std::uint16_t> slot) {
    if (!map_known_)
        return nullptr;
    if (slot) {
        auto const* primary = table_.primary_of(*slot);
        return primary ? node_for(*primary) : nullptr;
    }
    // Keyless: a primary that is up, else the first.
    node_ptr first;
    for (auto const& a : order_) {
        auto n = node_for(a);
        if (n->conn->is_connected())
            return n;
        if (!first)
            first = n;
    }
    return first;
}

void cluster_engine::drop_node(node_ptr const& n) {
    nodes_.erase(n->name);
    move_subscriptions(n->name);
    n->conn->remove_listener(n->listener.get());
    n->conn->handle_destroyed(); // flushes what it was asked, then closes
}

// ---------------------------------------------------------------- what the nodes report

void cluster_engine::count_slot_changes(std::vector<std::uint16_t> const& slots) {
    for (auto const slot : slots)
        ++slot_changes_[slot];
}

void cluster_engine::notify_listeners(std::function<void(push_listener&)> const& call) {
    notify_each(listeners_, call, [this](std::string text) { set_error_text(std::move(text)); });
}

void cluster_engine::on_node_push(std::string const& from, resp3::value const& push) {
    // ["sunsubscribe", channel, count] for a channel still counted there: the server dropped it
    // because its slot moved. Ask that node first, which knows where it went.
    if (push.type == resp3::type::push && push.elements.size() == 3 &&
        push.elements[0].as_string() == "sunsubscribe" && push.elements[1].as_string()) {
        auto it = subscriptions_.find(
            std::pair(channel_kind::sharded, std::string(*push.elements[1].as_string())));
        if (it != subscriptions_.end() && it->second.node == from) {
            if (auto n = nodes_.find(from); n != nodes_.end())
                ask_first_ = n->second->address;
            refresh();
        }
    }
    notify_listeners([&push](push_listener& l) { l.on_push(push); });
}

void cluster_engine::on_node_reconnect() {
    ++reconnects_;
    notify_listeners([](push_listener& l) { l.on_reconnect(); });
}

void cluster_engine::on_node_server_change(std::string const& from) {
    // A primary restarted (another run_id): its slots' keys may be gone.
    std::vector<std::uint16_t> slots;
    for (std::uint16_t slot = 0; slot < cluster_slots; ++slot)
        if (auto const* p = table_.primary_of(slot); p && address_text(*p) == from)
            slots.push_back(slot);
    count_slot_changes(slots);
    notify_listeners([](push_listener& l) { l.on_server_change(); });
}

} // namespace colock::redis::detail

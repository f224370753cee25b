// The Cluster engine's counted subscriptions: each channel on one node (a sharded channel on its
// slot's primary), moved when its node goes or its slot moves.
#include "cluster_engine.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace colock::redis::detail {

void cluster_engine::start_subscription(channel_kind kind, bool subscribe,
                                        std::vector<std::string> channels,
                                        any_subscription_handler handler) {
    if (channels.empty()) {
        complete_subscription(std::move(handler), {}, {});
        return;
    }
    // On the handler's own executor, from here until its completion is handed over.
    auto work = std::visit(
        [this](auto const& h) {
            return colock::detail::work_if_foreign(h, strand_.get_inner_executor());
        },
        handler);
    asio::dispatch(strand_,
                   [self = shared_from_this(), kind, subscribe, channels = std::move(channels),
                    handler = std::move(handler), work = std::move(work)]() mutable {
                       self->reopen();
                       asio::co_spawn(self->strand_,
                                      run_subscription(self, kind, subscribe, std::move(channels),
                                                       std::move(handler), std::move(work)),
                                      asio::detached);
                   });
}

void cluster_engine::complete_subscription(any_subscription_handler handler, error_code ec,
                                           std::string text) {
    std::visit(
        [&](auto& h) {
            using handler_type = std::decay_t<decltype(h)>;
            if constexpr (std::is_same_v<handler_type, connect_handler>)
                colock::detail::complete_now(strand_, std::move(h), {}, ec);
            else
                colock::detail::complete_now(strand_, std::move(h), {}, ec, std::move(text));
        },
        handler);
}

// Each channel lives on the primary of its own slot, where it was first subscribed, and moves
// when that node goes (or, for a sharded channel, when its slot does). Classic channels would do
// anywhere (PUBLISH reaches every node); the slot spreads them. Sharded ones must be there.
asio::awaitable<void>
cluster_engine::run_subscription(std::shared_ptr<cluster_engine> self, channel_kind kind,
                                 bool subscribe, std::vector<std::string> channels,
                                 any_subscription_handler handler,
                                 [[maybe_unused]] asio::any_completion_executor work) {
    // `work` is held while it runs; its completion holds its own (complete_subscription).
    co_await asio::this_coro::throw_if_cancelled(false);
    if (self->final_) {
        self->complete_subscription(std::move(handler), error::closed, {});
        co_return;
    }
    if (subscribe && !self->map_known_) {
        co_await self->await_map(true);
        if (!self->map_known_) {
            error_code ec;
            {
                std::lock_guard lock(self->error_mutex_);
                ec = self->last_connect_ec_;
            }
            self->complete_subscription(std::move(handler),
                                        ec ? ec : error_code(error::no_slot_map), {});
            co_return;
        }
    }
    std::vector<std::pair<std::string, std::vector<std::string>>> groups; // by node name
    for (auto& c : channels) {
        std::string where;
        if (subscribe) {
            auto& p = self->subscriptions_[std::pair(kind, c)];
            if (p.count == 0) {
                auto n = self->route(hash_slot(c));
                p.node = n ? n->name : std::string();
            }
            ++p.count;
            where = p.node;
        } else {
            auto it = self->subscriptions_.find(std::pair(kind, c));
            if (it == self->subscriptions_.end())
                continue;
            where = it->second.node;
            if (--it->second.count == 0)
                self->subscriptions_.erase(it);
        }
        auto g = std::find_if(groups.begin(), groups.end(),
                              [&](auto const& x) { return x.first == where; });
        if (g == groups.end())
            groups.emplace_back(where, std::vector<std::string>{std::move(c)});
        else
            g->second.push_back(std::move(c));
    }
    error_code first_ec;
    std::string first_text;
    for (auto& [where, group] : groups) {
        auto it = self->nodes_.find(where);
        if (it == self->nodes_.end())
            continue; // its node went, and its subscriptions with it
        // A named local, and a plain pointer in the initiation: see exec_on.
        auto const conn = it->second->conn;
        auto [ec, text] = co_await asio::async_initiate<decltype(nothrow_awaitable),
                                                        void(error_code, std::string)>(
            [c = conn.get(), kind, subscribe](auto h, std::vector<std::string> chans) {
                c->start_subscription(kind, subscribe, std::move(chans),
                                      any_subscription_handler(
                                          std::in_place_type<subscription_handler>, std::move(h)));
            },
            nothrow_awaitable, group);
        if (ec && subscribe) {
            // Nothing was counted there: take back what this operation counted.
            for (auto const& c : group) {
                auto p = self->subscriptions_.find(std::pair(kind, c));
                if (p != self->subscriptions_.end() && --p->second.count == 0)
                    self->subscriptions_.erase(p);
            }
        }
        if (ec && !first_ec) {
            first_ec = ec;
            first_text = std::move(text);
        }
    }
    self->complete_subscription(std::move(handler), first_ec, std::move(first_text));
}

void cluster_engine::place_again(std::pair<channel_kind, std::string> const& key, placement& p,
                                 node_ptr const& to) {
    auto const from = nodes_.find(p.node);
    std::vector<std::string> const channel(1, key.second);
    auto ignore = [] {
        return any_subscription_handler(std::in_place_type<connect_handler>, [](error_code) {});
    };
    // The old node's counts go (its server has dropped or will drop the channel), the new
    // node's come; each with the same number of subscribers.
    for (std::size_t k = 0; k < p.count; ++k) {
        if (from != nodes_.end())
            from->second->conn->start_subscription(key.first, false, channel, ignore());
        to->conn->start_subscription(key.first, true, channel, ignore());
    }
    p.node = to->name;
}

void cluster_engine::move_subscriptions(std::string const& from) {
    for (auto& [key, p] : subscriptions_) {
        if (p.node != from)
            continue;
        auto n = route(hash_slot(key.second));
        if (n && n->name != from)
            place_again(key, p, n);
    }
}

void cluster_engine::follow_channels() {
    bool moved = false;
    for (auto& [key, p] : subscriptions_) {
        bool const placed = nodes_.contains(p.node);
        if (key.first != channel_kind::sharded && placed)
            continue; // a classic channel is heard anywhere
        auto n = route(hash_slot(key.second));
        if (n && n->name != p.node) {
            place_again(key, p, n);
            moved = true;
        }
    }
    // Messages sent while the channel was nowhere were missed.
    if (moved)
        notify_listeners([](push_listener& l) { l.on_reconnect(); });
}

} // namespace colock::redis::detail

// The engine of a connection to a Redis Cluster: the slot map from the nodes (CLUSTER SLOTS),
// one connection_impl per primary (its own pipelining, reconnection and health checks), and
// each request routed by its keys' hash slot, following MOVED and ASK and waiting out TRYAGAIN
// and CLUSTERDOWN. Private to the library: cluster_engine.cpp keeps the nodes, cluster_map.cpp
// the slot map, cluster_exec.cpp routes requests and cluster_subscriptions.cpp subscriptions.
#pragma once

#include "cluster_slots.hpp"
#include "connection_impl.hpp"

#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace colock::redis::detail {

class cluster_engine final : public engine_base,
                             public std::enable_shared_from_this<cluster_engine>,
                             public colock::detail::holds_handlers {
public:
    cluster_engine(asio::any_io_executor ex, config cfg);

    // --- the engine's interface ---
    void start_connect(connect_handler handler) override;
    void start_exec(resp3::request req, exec_handler handler, handler_work work) override;
    void start_subscription(channel_kind kind, bool subscribe, std::vector<std::string> channels,
                            any_subscription_handler handler) override;
    void start_close() override;
    void handle_destroyed() override;
    // The failovers and restarts of the primaries that served `key`'s slot.
    std::uint64_t server_changes_for(std::string_view key) const noexcept override;
    // The primaries' run_ids, in the order of their first slots, comma-separated.
    std::string run_id() const override;
    std::vector<server_address> cluster_primaries() const override;
    std::string connect_failure_text(error_code ec) const override;
    void drop_handlers() noexcept override;

    // One primary (or a seed being asked): its connection and what listens to it for us.
    struct node {
        server_address address;
        std::string name; // address_text(address)
        std::shared_ptr<connection_impl> conn;
        std::shared_ptr<push_listener> listener;
    };
    using node_ptr = std::shared_ptr<node>;
    struct request_op;
    class node_listener;

private:
    friend class node_listener;

    std::shared_ptr<engine_base> shared_base() override { return shared_from_this(); }

    std::shared_ptr<asio::ssl::context> tls_context_;

    // --- state below is touched on the strand only ---
    slot_table table_;
    std::vector<slot_range> map_; // as last read: what a failover is told by
    bool map_known_ = false;
    bool refreshing_ = false;
    bool watching_ = false;
    bool closed_ = false;        // close(): nothing runs until the next request
    std::uint64_t closes_ = 0;   // close() calls: what was under way at one ends
    bool refresh_again_ = false; // asked for while one ran: one more when it ends
    bool final_ = false;         // the connection object is gone
    // Cancelled (never expires) whenever a refresh of the map ends: waiters look again.
    asio::steady_timer map_changed_;
    asio::steady_timer watch_timer_;
    std::map<std::string, node_ptr> nodes_;   // by name
    std::vector<server_address> order_;       // the primaries by first slot, for run_id()
    std::optional<server_address> ask_first_; // the next refresh asks this node first
    std::vector<std::shared_ptr<connect_waiter>> connect_waiters_;
    std::map<std::uint64_t, std::shared_ptr<request_op>> ops_; // in flight, for rerouting
    std::uint64_t next_op_ = 1;
    // Counted subscriptions: which node has each channel, and how many subscribers.
    struct placement {
        std::string node;
        std::size_t count = 0;
    };
    std::map<std::pair<channel_kind, std::string>, placement> subscriptions_;

    // --- readable from any thread ---
    // (connected_, reconnects_, server_changes_ and the failure's texts: engine_base's)
    // Per slot: counted on the strand before listeners hear of the change.
    std::unique_ptr<std::atomic<std::uint32_t>[]> slot_changes_;
    // Under error_mutex_:
    std::string run_ids_;
    std::vector<server_address> primaries_; // order_, for other threads

    // --- the nodes (cluster_engine.cpp) and the map (cluster_map.cpp) ---
    node_ptr node_for(server_address const& address);
    // The node serving `slot`, or any primary for a keyless request; null without a map.
    node_ptr route(std::optional<std::uint16_t> slot);
    // Starts a refresh of the map unless one runs.
    void refresh();
    // Asks the nodes in turn for the slot map, until one gives it.
    static asio::awaitable<void> refresh_map(std::shared_ptr<cluster_engine> self);
    struct map_search;
    // Whether a close() (counted `closes` when the refresh began) or ~connection came since.
    bool refresh_ended(std::uint64_t closes) const;
    // Who a refresh asks: the node named first, the primaries known, then the seeds.
    std::vector<server_address> nodes_to_ask();
    // CLUSTER SLOTS on node `n`, within connect_timeout.
    asio::awaitable<std::tuple<error_code, response>> ask_cluster_slots(node_ptr n);
    // Applies the map in node `n`'s answer (true), or notes in `search` why there is none.
    bool take_slot_map(node const& n, server_address const& address, error_code ec,
                       response const& resp, map_search& search);
    // No node gave the map: the failure is recorded and the connect waiters told.
    void no_slot_map(map_search const& search);
    void apply_map(std::vector<slot_range> const& ranges);
    // Until every primary of the map has been connected to, or its connection failed, within
    // connect_timeout: what a co_connect waits for besides the map.
    asio::awaitable<void> primaries_reached();
    // Waits until the running refresh ends (starting one when none runs and `start`).
    asio::awaitable<void> await_map(bool start, asio::cancellation_slot stop = {});
    // The connection is used again after close(): reads the map again (and so watches again).
    void reopen();
    static asio::awaitable<void> watch(std::shared_ptr<cluster_engine> self);
    void finish_connect_waiters(error_code ec);
    void drop_node(node_ptr const& n);
    void notify_listeners(std::function<void(push_listener&)> const& call);
    void on_node_push(std::string const& from, resp3::value const& push);
    void on_node_reconnect();
    void on_node_server_change(std::string const& from);
    // Counts a server change for each of `slots`.
    void count_slot_changes(std::vector<std::uint16_t> const& slots);

    // --- requests (cluster_exec.cpp) and subscriptions (cluster_subscriptions.cpp) ---
    static asio::awaitable<void> run_request(std::shared_ptr<cluster_engine> self,
                                             std::shared_ptr<request_op> op);
    // A request's run is rounds: each sends the commands still pending, grouped by node, and
    // keeps what answers; a redirected or refused command goes again in the next round.
    struct request_run;
    struct request_round;
    using command_group = std::pair<node_ptr, std::vector<std::size_t>>;
    enum class round_start { go, look_again, ended };
    // Before a round: whether the request ended (completed here), waited for the map and looks
    // again, or goes on.
    asio::awaitable<round_start> start_round(request_op& op, request_run& run);
    // The pending commands by destination: the ASK targets, then the slot's primary.
    std::vector<command_group> group_pending(request_op const& op, request_run const& run,
                                             request_round& round);
    // Sends one group's commands to `to` and takes their answers.
    asio::awaitable<void> send_group(request_op& op, request_run& run, request_round& round,
                                     node_ptr to, std::vector<std::size_t> members);
    // The answers of `members` from node `from`: kept, or followed (MOVED, ASK, TRYAGAIN).
    void take_answers(request_op const& op, request_run& run, request_round& round,
                      node const& from, std::vector<std::size_t> const& members, response& resp);
    // What the next round sends.
    void end_round(request_op const& op, request_run& run, request_round& round);
    // Whether another round comes (after its pause, when it waits).
    asio::awaitable<bool> pause_for_next_round(request_op& op, request_run& run,
                                               request_round const& round, int round_no);
    // Completes the request with its answers.
    void finish_run(request_op& op, request_run& run);
    void finish_request(request_op& op, error_code ec, response resp);
    // Stops a request's attempt (when unwritten) if the slot it went for is served elsewhere now.
    void reroute_if_moved(request_op& op);
    static asio::awaitable<void> run_subscription(std::shared_ptr<cluster_engine> self,
                                                  channel_kind kind, bool subscribe,
                                                  std::vector<std::string> channels,
                                                  any_subscription_handler handler,
                                                  asio::any_completion_executor work);
    void complete_subscription(any_subscription_handler handler, error_code ec, std::string text);
    // Moves the channels placed on node `from` (it is going) to their slots' primaries.
    void move_subscriptions(std::string const& from);
    // Moves a channel's subscribers to node `to`.
    void place_again(std::pair<channel_kind, std::string> const& key, placement& p,
                     node_ptr const& to);
    // After the map changed: sharded channels go where their slots went, and channels whose node
    // went (or that had none) to their slots' primaries.
    void follow_channels();
};

// A request on one node's connection, as an Asio operation. The caller keeps `conn` alive until
// it completes. (The initiation holds a plain pointer: GCC 12 destroys a lambda temporary in a
// co_await expression twice, which a captured shared_ptr does not survive.)
template <class Token>
auto exec_on(connection_impl& conn, resp3::request req, Token token) {
    return asio::async_initiate<Token, void(error_code, response)>(
        [c = &conn](auto handler, resp3::request r) {
            c->start_exec(std::move(r), std::move(handler), handler_work::untracked);
        },
        token, std::move(req));
}

std::shared_ptr<engine> make_cluster_engine(asio::any_io_executor ex, config cfg);

} // namespace colock::redis::detail

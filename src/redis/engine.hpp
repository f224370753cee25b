// The seam between redis::connection (and colock's own layers) and the deployment behind it:
// one server, possibly found through Sentinel (connection_impl), or a Cluster (cluster_engine,
// which routes over one connection_impl per primary). Private to the library.
#pragma once

#include <colock/redis/connection.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/strand.hpp>
#include <boost/system/error_code.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace colock::redis::detail {

using connect_handler = boost::asio::any_completion_handler<void(boost::system::error_code)>;
using exec_handler = boost::asio::any_completion_handler<void(boost::system::error_code, response)>;
// A user's request counts as work on its handler's own executor while it is under way (a thread
// pool's strand is not joined under it). colock's own requests do not: their handlers run on
// strands of the connection's executor, which the connection's I/O keeps running, and their
// every request (lock, renewal, release, a Cluster's node requests) would pay for the count.
enum class handler_work : bool { untracked, tracked };
using subscription_handler =
    boost::asio::any_completion_handler<void(boost::system::error_code, std::string)>;
// Classic pub/sub channels (SUBSCRIBE, PUBLISH reaches them on every node of a Cluster), or
// sharded ones (SSUBSCRIBE, on the primary of the channel's hash slot; SPUBLISH).
enum class channel_kind : std::uint8_t { classic = 0, sharded = 1 };

// async_subscribe's handler, or colock's own (engine_change_subscription), which also gets the
// server's text.
using any_subscription_handler = std::variant<connect_handler, subscription_handler>;

// What colock's own layers hear of connection::close() and of the connection's destruction: on
// the thread that closes, before the close starts, so that the requests they make then (the
// lock layer gives back the leases it holds) are flushed with the rest. Never throws.
class close_hook {
public:
    virtual void on_close() noexcept = 0;

protected:
    ~close_hook() = default;
};

// What redis::connection promises, whatever the deployment; the member functions are the
// public operations' (connection.hpp documents them) and are callable from any thread.
class engine {
public:
    virtual ~engine() = default;

    // colock's own layers: `hook` is told of every close while it lives (held weakly).
    void add_close_hook(std::weak_ptr<close_hook> hook);
    // connection::close() and ~connection, first: marks the engine closed by its user, so that
    // colock's own requests (engine_exec, engine_change_subscription) fail with error::closed
    // rather than open it again behind the user's back, until the user uses it again (connect,
    // exec, subscribe); then runs the hooks, whose own requests on this thread still go out.
    void closing_by_user();
    void used_by_user() noexcept { closed_by_user_.store(false, std::memory_order_release); }
    bool closed_by_user() const noexcept { return closed_by_user_.load(std::memory_order_acquire); }

    virtual boost::asio::any_io_executor executor() const = 0;
    virtual config const& settings() const noexcept = 0;

    virtual void start_connect(connect_handler handler) = 0;
    // `work`: whether the request holds outstanding work on its handler's own executor
    // (colock::detail::work_if_foreign) until its completion is handed over.
    virtual void start_exec(resp3::request req, exec_handler handler, handler_work work) = 0;
    virtual void start_subscription(channel_kind kind, bool subscribe,
                                    std::vector<std::string> channels,
                                    any_subscription_handler handler) = 0;
    virtual void add_listener(std::shared_ptr<push_listener> listener) = 0;
    virtual void remove_listener(push_listener const* listener) = 0;
    // connection::close().
    virtual void start_close() = 0;
    // The connection object is gone: flush what was asked, then nothing starts again.
    virtual void handle_destroyed() = 0;

    virtual bool is_connected() const noexcept = 0;
    virtual std::uint64_t reconnects() const noexcept = 0;
    virtual std::uint64_t server_changes() const noexcept = 0;
    // Those of the changes that concern `key`: with Cluster, the failovers and restarts of the
    // primaries that served its slot; else all of them.
    virtual std::uint64_t server_changes_for(std::string_view key) const noexcept {
        (void)key;
        return server_changes();
    }
    virtual std::string run_id() const = 0;
    // connection::cluster_primaries().
    virtual std::vector<server_address> cluster_primaries() const { return {}; }
    virtual std::string last_error_text() const = 0;
    virtual std::string connect_failure_text(boost::system::error_code ec) const = 0;
    virtual bool ever_connected() const noexcept = 0;
    virtual bool logs(log_level level) const noexcept = 0;
    virtual void log(log_level level, std::string_view line) const noexcept = 0;

private:
    std::mutex hooks_mutex_;
    std::vector<std::weak_ptr<close_hook>> hooks_;
    std::atomic<bool> closed_by_user_{false};
};

// What both engines keep alike: their executor, strand and config, the push listeners, the log
// hook, the facts of the link that any thread reads, and the texts of the last failure.
class engine_base : public engine {
public:
    boost::asio::any_io_executor executor() const override { return executor_; }
    config const& settings() const noexcept override { return cfg_; }
    bool is_connected() const noexcept override { return connected_; }
    std::uint64_t reconnects() const noexcept override { return reconnects_; }
    std::uint64_t server_changes() const noexcept override { return server_changes_; }
    bool ever_connected() const noexcept override { return ever_handshaken_; }
    // On the strand; the engine notifies them as it goes.
    void add_listener(std::shared_ptr<push_listener> listener) override;
    void remove_listener(push_listener const* listener) override;
    std::string last_error_text() const override;
    // The config's log hook: whether a line of `level` goes out (format it only then), and
    // sending one.
    bool logs(log_level level) const noexcept override {
        return cfg_.log && level >= cfg_.min_log_level;
    }
    void log(log_level level, std::string_view line) const noexcept override;
    // Records the text connection::last_error_text() returns, and logs it as a warning.
    void set_error_text(std::string text);

protected:
    engine_base(boost::asio::any_io_executor ex, config cfg)
        : executor_(std::move(ex))
        , strand_(boost::asio::make_strand(executor_))
        , cfg_(std::move(cfg)) {}
    ~engine_base() override = default;

    // The engine that is this, which the strand's work holds meanwhile.
    virtual std::shared_ptr<engine_base> shared_base() = 0;

    boost::asio::any_io_executor executor_;
    boost::asio::strand<boost::asio::any_io_executor> strand_;
    config cfg_;
    std::vector<std::shared_ptr<push_listener>> listeners_; // on the strand

    // --- readable from any thread ---
    std::atomic<bool> connected_{false};
    // A connection has worked (a handshake; with Cluster, a slot map read): never reset.
    std::atomic<bool> ever_handshaken_{false};
    std::atomic<std::uint64_t> reconnects_{0};
    // Counts reconnections that reached a different server instance (another run_id) than the
    // connection before: everything the old instance held may be gone. Bumped on the strand
    // before the listeners hear of it, so a reader that saw the old value can tell that a reply
    // it holds came from before the change.
    std::atomic<std::uint64_t> server_changes_{0};
    mutable std::mutex error_mutex_; // guards the texts below, and the engine's own beside them
    std::string last_error_text_;
    // The most recent attempt to connect that failed: its code and "connecting to ...: why".
    boost::system::error_code last_connect_ec_;
    std::string last_connect_error_;
};

// Refuses a config no engine can work with (boost::system::system_error with
// error::invalid_config, naming what is wrong).
void check_config(config const& cfg);

// The engine for `cfg`: a cluster_engine for config::cluster, else a connection_impl.
std::shared_ptr<engine> make_engine(boost::asio::any_io_executor ex, config cfg);

// The way from a connection to its engine (connection befriends it), for engine_of alone.
struct connection_access {
    static shared_engine const& engine(connection const& conn) noexcept { return conn.impl_; }
};

// What colock's own layers (the lock layer, and tests of the connection) do with a connection:
// through its engine, shared so that background work (lock renewal and release) can outlive the
// connection object safely.
inline shared_engine const& engine_of(connection const& conn) noexcept {
    return connection_access::engine(conn);
}
void engine_exec(shared_engine const& engine, resp3::request req, exec_handler handler);
// Whether colock's own channels are sharded on this engine (a Cluster): they are subscribed with
// SSUBSCRIBE (engine_change_subscription does so) and published to with SPUBLISH, and their
// messages arrive as "smessage" pushes.
bool engine_shards_channels(shared_engine const& engine) noexcept;
// Counted subscriptions (connection::async_subscribe / async_unsubscribe) for colock's own
// layers, of sharded channels when engine_shards_channels. Completes once the server has answered:
// an empty code when it confirmed, or at once while disconnected after a connection has worked (the
// next handshake subscribes to every counted channel). A refusal completes with error::server_error
// and the server's text (NOPERM ...); a refused subscribe counts nothing, so nobody believes it is
// subscribed. error::closed after close(), or, until a connection has worked, the connect error of
// the attempt it waited for (nothing counted either). Never cancellable: the counts and the server
// must agree.
void engine_change_subscription(shared_engine const& engine, bool subscribe,
                                std::vector<std::string> channels, subscription_handler handler);
void engine_add_listener(shared_engine const& engine, std::shared_ptr<push_listener> l);
void engine_remove_listener(shared_engine const& engine, push_listener const* l);
boost::asio::any_io_executor engine_executor(shared_engine const& engine);
std::uint64_t engine_server_changes(shared_engine const& engine) noexcept;
// Those of the server changes that concern `key` (with Cluster: of its slot's primaries).
std::uint64_t engine_server_changes_for(shared_engine const& engine, std::string_view key) noexcept;
// connection::reconnect_count(), for holders of the engine only.
std::uint64_t engine_reconnects(shared_engine const& engine) noexcept;
// The config's log hook, for the layers on the connection: whether a line of `level` goes out
// (format it only then), and sending one.
bool engine_logs(shared_engine const& engine, log_level level) noexcept;
void engine_log(shared_engine const& engine, log_level level, std::string_view line) noexcept;
// For a code a request (engine_exec) or async_connect completed with: when it is a failure to
// establish the connection (anything but server_error, unsupported_command, connection_lost, closed
// and operation_aborted), the message connect_error would carry, "connecting to 127.0.0.1:6390:
// Connection refused" (the text recorded by the most recent failed attempt when it failed with this
// code, else built from the code); otherwise an empty string. Callable from any thread.
std::string engine_connect_failure(shared_engine const& engine, boost::system::error_code ec);
// Whether a connection of this engine has ever completed its handshake (since construction; close()
// does not reset it). Callable from any thread.
bool engine_ever_connected(shared_engine const& engine) noexcept;
// connection::last_error_text(), for holders of the engine only.
std::string engine_last_error_text(shared_engine const& engine);
bool engine_is_connected(shared_engine const& engine) noexcept;
// connection::server_run_id(), for holders of the engine only.
std::string engine_run_id(shared_engine const& engine);
// The endpoint the engine's config names, "127.0.0.1:6379" (config::endpoint_text()).
std::string engine_endpoint_text(shared_engine const& engine);

} // namespace colock::redis::detail

/// \file
/// One multiplexed, automatically pipelined connection to a Redis deployment: one server, a
/// primary found through Sentinel, or a Cluster.
#pragma once

#include <colock/redis/config.hpp>
#include <colock/redis/error.hpp>
#include <colock/resp3/request.hpp>
#include <colock/resp3/value.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/system/system_error.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace colock::redis {

/// The replies to one request, one value per command, in command order. A command the server
/// refused is an error value (`value::is_error()`) holding the server's text; a subscribe-family
/// command the server accepted has its last push confirmation.
using response = std::vector<resp3::value>;

/// Thrown by connection::co_exec when the server refuses a command: the code is
/// error::server_error and what() carries the server's own text ("ERR unknown command ...").
class server_error : public boost::system::system_error {
public:
    /// The exception for an error reply whose text is `server_message`.
    explicit server_error(std::string const& server_message);
    /// The server's text alone, as the error reply held it.
    std::string const& server_message() const noexcept { return server_message_; }

private:
    std::string server_message_;
};

/// Thrown by connection::co_connect, and by co_exec when the connection its request needed could
/// not be established. what() names the endpoint, the step and the cause:
///
///     connecting to 127.0.0.1:6390: Connection refused
///     connecting to 127.0.0.1:6390 (TLS handshake): timed out after 5000 ms
///     connecting to 127.0.0.1:6390 (HELLO): WRONGPASS invalid username-password pair or ...
///     connecting to 127.0.0.1:6390 (SELECT 16): ERR DB index is out of range
///     connecting to /run/redis/redis.sock: No such file or directory
///
/// code() is the same error_code async_connect completes with: the network's (e.g.
/// asio::error::connection_refused), error::connect_timeout or error::handshake_failed; it carries
/// no source location, so code().what() is the cause and its category only.
class connect_error : public boost::system::system_error {
public:
    /// The exception for a connection that failed with `ec`; `message` is what() (the endpoint,
    /// the step and the cause).
    connect_error(boost::system::error_code ec, std::string message);
    /// The message alone, without the code's message that system_error::what() would append.
    char const* what() const noexcept override;

private:
    std::string message_;
};

/// The first server error text in `resp`, or an empty string when every reply succeeded.
std::string first_error_text(response const& resp);

class connection;
class push_listener;

namespace detail {
class engine;
// The engine behind a connection, shared so that colock's own background work (lock renewal and
// release) can outlive the connection object safely. What the library does with it is private
// (src/redis/engine.hpp); connection_access is its way in.
using shared_engine = std::shared_ptr<engine>;
struct connection_access;
} // namespace detail

/// Receives what the server sends on its own initiative: RESP3 push messages (pub/sub
/// messages, subscribe confirmations, client-side caching invalidations), and notice that the
/// connection was (re-)established. Called on the connection's strand; must not block. An
/// exception thrown by a listener is caught and recorded in connection::last_error_text(); the
/// connection and the other listeners carry on.
class push_listener {
public:
    virtual ~push_listener() = default;
    /// One push message, as parsed (type resp3::type::push).
    virtual void on_push(resp3::value const& push) = 0;
    /// The connection is up again after a loss; subscriptions made through async_subscribe
    /// have been renewed, but messages published meanwhile were missed. No push of the new
    /// connection reaches on_push before this call, so that each message can be told to come
    /// after the gap.
    virtual void on_reconnect() {}
    /// Called just before on_reconnect() when the server reached is another instance than
    /// before (its run_id differs): a server restarted without persistence, or a failover to
    /// another node. Keys written to the old instance may not exist on this one. With Redis
    /// Cluster: the primary of some of the slots was replaced (the others kept their keys).
    virtual void on_server_change() {}
};

/// One connection to one Redis server, shared by any number of coroutines.
///
/// Requests queued while a write is in flight go out together in the next write (automatic
/// pipelining); replies are matched to requests in order, subscribe-family commands included
/// (their push confirmations, or the one error reply that refuses them). The connection
/// performs the HELLO 3 / AUTH / SELECT / CLIENT SETNAME handshake, checks the server's health
/// with PING, and re-establishes itself with backoff after a loss. A request of which at least
/// one command was written whole (all its bytes handed to the socket) before a loss fails with
/// error::connection_lost and is never re-sent: that command may have run. A request none of
/// whose commands was written whole (nothing of it written, or its first command only in part:
/// the server runs whole commands only) waits for the next connection, and is sent again whole.
///
/// The server is reached over TCP (`host`, `port`), TLS over TCP (`use_tls`), or a unix domain
/// socket (`config::unix_socket`); TLS over a unix socket is refused at construction.
///
/// Through Redis Sentinel (`config::sentinel`), each connection attempt first asks the sentinels
/// for the primary's address, and the handshake confirms with ROLE that the server is a
/// primary. While connected the connection follows `+switch-master` on one sentinel (and asks
/// it again every health-check interval): when the primary moves, the connection is dropped and
/// made again to the new one, which is another server instance (on_server_change). A config
/// with sentinels but no master name, or with a unix socket too, is refused at construction.
///
/// With Redis Cluster (`config::cluster`), the connection reads the slot map (CLUSTER SLOTS) from
/// the primaries it knows, then the seeds, and keeps one such connection per primary. Each
/// request goes to the primary of its keys' hash slot (a request without keys to any primary);
/// MOVED and ASK are followed, and TRYAGAIN and CLUSTERDOWN waited out, for at most
/// max(connect_timeout, 1 s). Only the commands redirected are sent again (with a SCRIPT LOAD or
/// WAIT of the same request); a transaction is never split or sent again. A request whose keys
/// hash to more than one slot completes with error::cross_slot, nothing written. While
/// connected the map is read again when a primary is down and every fifth health-check interval;
/// slots now served by a replica of their former primary (failed over), or by a primary that
/// restarted, count as a server change (server_change_count() and on_server_change() count
/// each, whichever slots it concerned; a locker marks lost only the guards on those slots).
/// Subscriptions of async_subscribe go to the primary of each channel's slot and move when it
/// goes. is_connected() is true while the map is known and every primary is up; server_run_id()
/// lists the primaries' run_ids, comma-separated. A config with seeds and sentinels, a unix socket,
/// or a database other than 0 is refused at construction.
///
/// @par Errors
/// A failure to connect completes async_connect, and every request that was waiting for that first
/// connection, with the cause's code, free of Boost source locations; last_error_text() then reads
/// "connecting to HOST:PORT (step): cause". co_connect and co_exec throw that as a connect_error.
///
/// @par Thread safety
/// All member functions may be called from any thread: the state lives on a strand of the
/// executor given at construction, and completion handlers run on their own associated
/// executor, or on get_executor() when they have none; never inside a turn of that strand, so
/// a handler that computes for a while holds up no reads. Cancellation signals must be emitted from
/// the handler's executor, as for any Asio operation.
///
/// @par Lifetime
/// Destroying the connection closes it as close() does, flush included (the destructor does not
/// wait: the flush runs on the executor, within config::close_timeout); requests made after the
/// destructor (colock's own, through the engine) fail with error::closed and nothing starts the
/// connection again. Internally, state is owned by shared pointers, so no operation touches freed
/// memory.
class connection {
public:
    /// The type of get_executor().
    using executor_type = boost::asio::any_io_executor;

    /// A connection whose strand runs on `ex`, to the server or deployment `cfg` names. It does
    /// not connect yet: async_connect, or the first request or subscription, does. Throws
    /// boost::system::system_error with error::invalid_config for a config it cannot use (sentinels
    /// without a master_name; sentinels and cluster seeds together; either with a `unix_socket`; a
    /// sentinel or seed without a host or port; a Cluster with a database other than 0; `use_tls`
    /// with a `unix_socket`), and boost::system::system_error when TLS is on and `tls_ca_file`
    /// cannot be loaded.
    connection(executor_type ex, config cfg);
    /// Closes the connection as close() does, flush included; never blocks.
    ~connection();
    connection(connection const&) = delete;
    connection& operator=(connection const&) = delete;

    /// The executor given at construction: where the connection's strand runs, and where
    /// handlers without an executor of their own complete.
    executor_type get_executor() const noexcept;
    /// The settings the connection was made with.
    config const& get_config() const noexcept;

    /// Establishes the connection (resolve, TCP, TLS, handshake) if it is not up, and keeps
    /// re-establishing it after losses until close(). If the very first attempt fails, the
    /// operation completes with its error and nothing keeps running.
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code)`: the network's code (connection_refused, host_not_found,
    /// ...), error::connect_timeout (config::connect_timeout passed), error::handshake_failed (the
    /// server refused HELLO or SELECT), error::no_primary_address or error::not_primary (through
    /// Sentinel: no sentinel named the primary, or the server named is not one),
    /// error::no_slot_map (Cluster: no node gave the slot map), or error::closed (close()
    /// meanwhile). The code carries no
    /// source location; last_error_text() holds the whole story, "connecting to 127.0.0.1:6390
    /// (HELLO): WRONGPASS ...". Use co_connect to have it thrown as a connect_error.
    ///
    /// @par Per-operation cancellation
    /// terminal: the attempt is abandoned and the connection closed; completes with
    /// operation_aborted.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_connect(CompletionToken&& token = {}) {
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code)>(
            [this](auto handler) { start_connect(std::move(handler)); }, token);
    }

    /// Awaitable form of async_connect that throws on failure: connect_error (what() as
    /// last_error_text(), code() as async_connect's) when the connection could not be established,
    /// boost::system::system_error for error::closed or operation_aborted.
    boost::asio::awaitable<void> co_connect();

    /// Sends every command of `req` and completes once each has its answer. Connects lazily
    /// when async_connect was not called.
    ///
    /// Subscribe-family commands (SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE and their UN- forms) are
    /// answered by push confirmations, one per channel, which the push listeners see too; their
    /// answer in the response is the last confirmation, or the error reply with which the
    /// server refused the whole command (NOPERM for an ACL user without the channel, BUSY).
    /// An argument-less UN- form is answered once every subscription of its kind is gone.
    /// Subscriptions made this way are not renewed after a reconnection and may undo those of
    /// async_subscribe (an argument-less UNSUBSCRIBE drops them all): use async_subscribe.
    ///
    /// Commands that change how the server answers later commands cannot be sent on a shared
    /// connection: a request holding MONITOR, RESET, HELLO (any HELLO: HELLO 2 would switch the
    /// connection to RESP2; the connection sends its own HELLO 3 in the handshake) or CLIENT
    /// REPLY OFF|SKIP completes at once with error::unsupported_command, nothing written, and
    /// its response holds an error value naming the command.
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code, response)`. The response holds one value per command. The
    /// code is error::server_error when any answer is an error reply (the response still holds
    /// every answer), error::connection_lost when the connection dropped after the request was
    /// written, error::closed when close() could not send it (see close()),
    /// error::unsupported_command as above, error::cross_slot (Cluster: keys in more than one
    /// slot; nothing written, the response names two of them), or async_connect's code when the
    /// connection this request started could not be established.
    ///
    /// @par Per-operation cancellation
    /// terminal, partial: a request not yet written is removed from the queue; one already
    /// written completes at once and its replies are read and discarded when they arrive, so
    /// the stream stays in step. total: honoured only before the request is written. Either way
    /// it completes with operation_aborted and the connection stays usable.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_exec(resp3::request req, CompletionToken&& token = {}) {
        return boost::asio::async_initiate<CompletionToken,
                                           void(boost::system::error_code, response)>(
            [this](auto handler, resp3::request r) {
                start_exec(std::move(r), std::move(handler));
            },
            token, std::move(req));
    }

    /// Awaitable form of async_exec that throws on failure: server_error (with the server's text)
    /// for an error reply, connect_error when the connection could not be established,
    /// boost::system::system_error otherwise (naming the command for error::unsupported_command).
    boost::asio::awaitable<response> co_exec(resp3::request req);

    /// Subscribes to channels (SUBSCRIBE) and remembers them, so they are subscribed again on
    /// every reconnection. Subscriptions are counted per channel: each async_subscribe needs its
    /// own async_unsubscribe, and only the first and the last reach the server, so independent
    /// users of one connection do not undo each other's subscriptions. Messages arrive at the push
    /// listeners.
    ///
    /// Completes once the server has confirmed every channel (including a SUBSCRIBE of the same
    /// channel already on its way for someone else), or at once while disconnected after a
    /// connection has worked: the reconnection's handshake then subscribes, before any request
    /// queued later. Until the connection has once completed its handshake (since construction
    /// or close()), it waits for the outcome of the attempt, which it starts when nothing runs:
    /// when that attempt fails, it completes with the attempt's error and counts nothing. When
    /// the server refuses (an ACL user without the channel: NOPERM), it completes with
    /// error::server_error, counts nothing, and last_error_text() holds the server's text;
    /// requests around it are not disturbed. A channel the server refuses in a reconnection's
    /// handshake is not subscribed (last_error_text() names it) and the connection works on;
    /// the subscriptions counted before stay counted, so that each async_unsubscribe still
    /// drops its own, and a later subscriber or reconnection asks the server again.
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code)`: empty, error::server_error, error::closed (close()
    /// before the answer; nothing counted), or the error of the attempt it waited for before
    /// any connection had worked (nothing counted).
    /// @par Per-operation cancellation
    /// None: the subscription count and the server must agree.
    /// @par Thread safety
    /// As every member function: callable from any thread.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_subscribe(std::vector<std::string> channels, CompletionToken&& token = {}) {
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code)>(
            [this](auto handler, std::vector<std::string> c) {
                start_subscription(true, std::move(c), std::move(handler));
            },
            token, std::move(channels));
    }

    /// Drops one subscription to each channel; the last one sends UNSUBSCRIBE. Completes once
    /// the server has confirmed, or at once when no UNSUBSCRIBE is needed or the connection is
    /// down (the next handshake subscribes only to what is still counted). A refused UNSUBSCRIBE
    /// completes with error::server_error; the count is dropped all the same (the caller has
    /// let go), and the server's subscription lasts until the next reconnection. No
    /// cancellation, as async_subscribe.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_unsubscribe(std::vector<std::string> channels, CompletionToken&& token = {}) {
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code)>(
            [this](auto handler, std::vector<std::string> c) {
                start_subscription(false, std::move(c), std::move(handler));
            },
            token, std::move(channels));
    }

    /// Registers a listener for push messages and reconnections. The listener is shared with
    /// the connection, which calls it on its strand until it is removed.
    void add_push_listener(std::shared_ptr<push_listener> listener);
    /// Removes a listener added with add_push_listener. The removal runs on the connection's
    /// strand: a push the strand handles before it still reaches the listener, which the
    /// connection keeps alive until then.
    void remove_push_listener(push_listener const* listener);

    /// Closes the connection, first sending what was asked of it before: requests already made
    /// (async_exec, and colock's own, e.g. the release of a lock_guard that was let go) are written
    /// and the replies of every request in flight read, for at most config::close_timeout; then the
    /// socket is closed, reconnection stops, and whatever is still pending completes with
    /// error::closed. close_timeout 0 closes at once. When the connection is not up at that moment
    /// (never connected, connecting, or waiting to reconnect), nothing is flushed and pending
    /// requests fail with error::closed at once: a close does not open a connection just to send
    /// them.
    ///
    /// Returns at once; the flush runs on the connection's executor and holds nothing of it
    /// afterwards, so io_context::run() returns once the flush is done or its deadline passed.
    /// "Before" is happens-before: a request made before close() on any thread is flushed. Requests
    /// made after close() are not sent on the closing connection: they wait for the flush to end
    /// and then start a new connection, as does a later async_connect (the connection can be used
    /// again after close()). is_connected() is false from the start of the flush.
    ///
    /// colock's own layers first give back what they hold through the connection, on the calling
    /// thread, so that it is flushed too: the lease of every lock_guard still holding (the guard
    /// then holds nothing; letting it go sends nothing), and the co_lock calls waiting on it end
    /// with operation_aborted (a lease caught between holders at that moment runs out by its
    /// ttl). From then on the library itself sends nothing on this connection (its requests fail
    /// with error::closed) until its user uses it again (async_connect, async_exec, a
    /// subscription): nothing reopens it behind the user's back.
    void close();

    /// True while a connection is established and its handshake done.
    bool is_connected() const noexcept;
    /// Number of times the connection was re-established after a loss.
    std::uint64_t reconnect_count() const noexcept;
    /// The run_id of the server instance the current (or last) connection reached, from
    /// `INFO server` during the handshake; empty until a server has answered INFO. A handshake
    /// whose INFO is refused (it does not fail for that) keeps the run_id known before, which
    /// the next reconnection is compared with.
    std::string server_run_id() const;
    /// With Redis Cluster: the primaries of the slot map as last read, in the order of their first
    /// slots, to reach each of them (with a connection of its own) for what concerns every node,
    /// such as SCAN. Empty before the map is read, and for the other deployments.
    std::vector<server_address> cluster_primaries() const;
    /// Number of reconnections that reached another server instance (a different run_id) than
    /// the connection before them. Both run_ids must be known for a change to count.
    std::uint64_t server_change_count() const noexcept;
    /// Text of the last failure, for logs: a connection failure ("connecting to 127.0.0.1:6390:
    /// Connection refused", as connect_error::what()), a subscription the server refused, a health
    /// check or protocol failure, or a push listener that threw.
    std::string last_error_text() const;

private:
    using connect_handler = boost::asio::any_completion_handler<void(boost::system::error_code)>;
    using exec_handler =
        boost::asio::any_completion_handler<void(boost::system::error_code, response)>;

    void start_connect(connect_handler handler);
    void start_exec(resp3::request req, exec_handler handler);
    void start_subscription(bool subscribe, std::vector<std::string> channels,
                            connect_handler handler);

    friend struct detail::connection_access;
    detail::shared_engine impl_;
};

} // namespace colock::redis

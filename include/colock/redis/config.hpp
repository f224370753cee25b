/// \file
/// Where and how a connection reaches its Redis server.
#pragma once

#include <colock/log.hpp>

#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace colock::redis {

/// Where a server listens: a host name or IP address, and a port.
struct server_address {
    /// Host name or IP address.
    std::string host;
    /// TCP port. The default, 26379, is a sentinel's: set it for a Cluster seed (a node
    /// listens on 6379 unless told otherwise, the port a redis-cluster:// URL assumes).
    std::uint16_t port = 26379;

    /// Equal when host and port are, as written: names are not resolved.
    friend bool operator==(server_address const&, server_address const&) = default;
};

/// Redis Sentinel: where the sentinels are and which primary to ask them for. The connection
/// goes to the primary they name, confirms with ROLE that it is one, and follows
/// `+switch-master` while connected. See config::sentinel.
struct sentinel_config {
    /// The sentinels, tried in order on each (re)connection, starting with the one that
    /// answered last. Empty: no Sentinel; the connection goes to `config::host`.
    std::vector<server_address> sentinels;
    /// The name the sentinels monitor the primary under (`sentinel monitor <name> ...`).
    std::string master_name;
    /// The sentinels' own credentials, which are separate from the data nodes' (`username`,
    /// `password` of the config), as in go-redis and Lettuce. `password` empty: no AUTH.
    std::string username;
    /// The sentinels' password, sent with HELLO 3 AUTH (user "default" when `username` is
    /// empty); empty: no AUTH.
    std::string password;
};

/// Redis Cluster: the seed nodes. The connection asks a seed for the slot map (CLUSTER SLOTS),
/// keeps one connection per primary and routes each request by its keys' hash slot. See
/// config::cluster.
struct cluster_config {
    /// Nodes asked for the slot map, in order (any node of the cluster will do; the rest is
    /// discovered). Empty: no Cluster.
    std::vector<server_address> seeds;
};

/// Settings of one connection. Every field has a usable default, so `config{}` reaches a
/// server on 127.0.0.1:6379 without TLS or authentication.
struct config {
    /// The server's host name or IP address; ignored with a `unix_socket`, sentinels or
    /// cluster seeds.
    std::string host = "127.0.0.1";
    /// The server's TCP port; ignored when `host` is.
    std::uint16_t port = 6379;
    /// Path of the server's unix domain socket (redis.conf `unixsocket`). When not empty the
    /// connection uses it and ignores `host` and `port`. TLS over a unix socket is not supported: a
    /// connection whose config has both this and `use_tls` refuses to be constructed
    /// (error::invalid_config).
    std::string unix_socket;

    /// ACL user name; empty means the "default" user. Only sent when `password` is set.
    std::string username;
    /// Sent with HELLO 3 AUTH when not empty.
    std::string password;
    /// Logical database, selected after the handshake when not 0.
    int database = 0;
    /// Sent as CLIENT SETNAME when not empty; shows up in CLIENT LIST.
    std::string client_name = "colock";

    /// Redis Sentinel: when `sentinel.sentinels` is not empty, `host`, `port` are ignored and the
    /// connection goes to the primary the sentinels name. `username`, `password`, `database`,
    /// `client_name` and the TLS settings apply to it; TLS applies to the sentinels too.
    sentinel_config sentinel;

    /// Redis Cluster: when `cluster.seeds` is not empty, `host` and `port` are ignored and the
    /// connection goes to the primaries of the seeds' slot map. `username`, `password`,
    /// `client_name` and the TLS settings apply to every node. `database` must be 0: a Cluster has
    /// only database 0. A config with both seeds and a `unix_socket` refuses to be constructed
    /// (error::invalid_config): the slot map names TCP addresses.
    cluster_config cluster;

    /// Connect over TLS (the `rediss://` scheme).
    bool use_tls = false;
    /// Verify the server's certificate chain and host name. Off only for tests and
    /// self-signed development servers.
    bool tls_verify_peer = true;
    /// PEM file of trusted CAs; empty means the system's default verify paths.
    std::string tls_ca_file;

    /// Budget for resolve + TCP connect + TLS handshake + the HELLO handshake of one attempt:
    /// one deadline for all of them. A name resolution still running at the deadline is
    /// abandoned (getaddrinfo cannot be interrupted; its late result is dropped). Through Sentinel,
    /// asking the sentinels has a budget of its own, shared among them, before the primary's.
    std::chrono::milliseconds connect_timeout{5000};
    /// A PING is sent this often while connected; a reply that does not come within one more
    /// interval declares the server dead and the connection is re-established. 0 disables it.
    std::chrono::milliseconds health_check_interval{2000};
    /// Delay before the first reconnect attempt after a connection is lost; it doubles per failed
    /// attempt up to `reconnect_max_delay`. A connection that has never been established does not
    /// retry by itself: its attempt fails what waits for it, and for this long after, requests and
    /// subscriptions fail with the same error rather than start another attempt (async_connect
    /// always starts one).
    std::chrono::milliseconds reconnect_initial_delay{50};
    /// The longest delay between reconnect attempts: where the doubling stops.
    std::chrono::milliseconds reconnect_max_delay{2000};
    /// How long close() and the connection's destructor may spend sending the requests already made
    /// and reading the replies of those in flight before they close the socket. 0 closes at once:
    /// whatever is pending completes with error::closed.
    std::chrono::milliseconds close_timeout{1000};
    /// How the lockers on this connection run their scripts: as a Redis Functions library
    /// (FUNCTION LOAD once per server, which keeps it and gives it to its replicas; then FCALL)
    /// when true, else by SHA (EVALSHA, SCRIPT LOAD after a restart). Where the server refuses
    /// FCALL or FUNCTION LOAD (before Redis 7.0, an ACL, a proxy) the connection falls back to
    /// EVALSHA by itself, once, and logs why at warning level. See docs/operations.md, "Scripts
    /// and Functions".
    bool use_functions = true;
    /// Where this connection, and the lockers on it, log: off when empty. Lines below
    /// `min_log_level` are not even formatted.
    log_handler log;
    /// The least level that `log` receives.
    log_level min_log_level = log_level::info;

    /// Parses one of
    ///
    ///     redis://[[user]:password@]host[:port][/db]
    ///     rediss://[[user]:password@]host[:port][/db]        (TLS)
    ///     unix://[[user]:password@]/path/to/redis.sock[?db=N] (a unix domain socket)
    ///     redis-sentinel://[[user]:password@]host[:port][,host[:port]...]/master_name[/db]
    ///         [?sentinel_username=U&sentinel_password=P]
    ///     rediss-sentinel://...                              (the same, over TLS)
    ///     redis-cluster://[[user]:password@]host[:port][,host[:port]...][/]
    ///     rediss-cluster://...                               (the same, over TLS)
    ///
    /// The scheme is case-insensitive; `redis+unix://` is accepted for `unix://` (redis-rs's
    /// spelling). `redis://secret@host` is a password alone, as redis-cli reads it. User, password
    /// and socket path may be percent-encoded (a '/', '@' or '?' in them must be); an IPv6 host
    /// goes in brackets. A unix:// URL has an empty host (three slashes) and takes only the `db`
    /// query parameter, as redis-py and redis-rs do. A sentinel URL lists the sentinels (port 26379
    /// by default) and names the primary in its path, as in Lettuce's `redis-sentinel://`; its user
    /// and password are the data nodes', and the sentinels' own credentials go in the query
    /// (they differ in most deployments). A cluster URL lists the seed nodes (port 6379 by default)
    /// and takes no database (a Cluster has only database 0); its user and password are every
    /// node's. Other URLs take no query. Throws boost::system::system_error with
    /// error::invalid_url, whose message names the part that is wrong (never the password).
    static config from_url(std::string_view url);
    /// The same without throwing: on a URL it cannot read, sets `ec` to error::invalid_url and,
    /// when given, `reason` to the message the throwing form's `what()` starts with (the code's
    /// text follows it there); returns a default config.
    /// Clears `ec` on success.
    static config from_url(std::string_view url, boost::system::error_code& ec,
                           std::string* reason = nullptr);

    /// The settings as a URL of the form from_url reads (redis-cluster:// when there are seeds,
    /// else unix:// when `unix_socket` is set), with the password replaced by "***" (safe for
    /// logs).
    std::string to_redacted_url() const;
    /// Where the connection goes, for messages: "host:port" ("[::1]:6379" for IPv6), the socket
    /// path, "primary 'name' of sentinels host:port,host:port" or "cluster of seeds
    /// host:port,host:port".
    std::string endpoint_text() const;
    /// True when the connection goes through Redis Sentinel (`sentinel.sentinels` is not empty).
    bool uses_sentinel() const noexcept { return !sentinel.sentinels.empty(); }
    /// True when the connection goes to a Redis Cluster (`cluster.seeds` is not empty).
    bool uses_cluster() const noexcept { return !cluster.seeds.empty(); }
};

} // namespace colock::redis

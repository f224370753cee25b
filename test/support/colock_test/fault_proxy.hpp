// A fault-injecting TCP proxy between the library and a real redis-server: latency, stalls,
// black holes, dropped connections, replies cut short or replaced by hostile bytes. Redis
// itself is never mocked; the proxy only mangles the bytes on their way.
#pragma once

#include <colock/redis/config.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace colock::test {

/// Counts since construction.
struct fault_proxy_stats {
    std::uint64_t accepted = 0;    // client connections accepted
    std::uint64_t dropped = 0;     // connections closed by drop_connections()
    std::uint64_t cuts = 0;        // replies cut by cut_next_reply()
    std::uint64_t rewrites = 0;    // replies replaced by rewrite_next_reply()
    std::uint64_t stalls = 0;      // stall_for() calls that took effect (a positive duration)
    std::uint64_t black_holed = 0; // connections black-holed (accepted while on, or open when
                                   // it went on)
    // Bytes written to upstream and to client sockets; a write in progress counts in full (so
    // bytes a peer has received are always counted) until it fails short.
    std::uint64_t bytes_to_server = 0;
    std::uint64_t bytes_to_client = 0;
};

/// Listens on 127.0.0.1 (a free port) and forwards every accepted connection to
/// 127.0.0.1:upstream_port, injecting the faults the control functions ask for.
///
/// Each client connection gets its own upstream connection, made when the client connects: a
/// server restarted on the same port is reached by the next connection, and an upstream that
/// refuses makes the proxy close the client's connection. Either side closing closes both
/// (Redis never half-closes).
///
/// Bytes travel as chunks: what one read from a socket returned. Each direction of each
/// connection has one read buffer and a queue of chunks waiting to be written, so latency and
/// stalls delay chunks without reordering them. "The next reply" of cut_next_reply and
/// rewrite_next_reply is the next chunk read from any upstream socket: with one request in
/// flight on an otherwise quiet connection (no health-check PING due), that is its reply.
/// A queue holding more than 4 MiB stops its reader until it drains, so a stall costs bounded
/// memory (TCP flow control holds the rest).
///
/// @par Thread safety
/// The proxy runs its own io_context on its own thread. Every member function may be called
/// from any thread: control functions post to the proxy's thread and wait, so a fault is in
/// effect when the call returns (a request sent afterwards meets it). The proxy runs no code of
/// its users, so no call can come from its own thread and wait for itself.
///
/// @par Processes
/// The proxy's sockets are close-on-exec, and closing a connection shuts it down first, so a
/// process started meanwhile (a worker, a server) neither inherits the listener nor keeps a
/// closed connection alive. A forked child that does not exec has no proxy thread: use the
/// proxy in the process that made it.
///
/// @par Lifetime
/// The destructor closes the listener and every connection (cancelling timers and pending
/// writes) and joins the thread; it returns promptly even with connections stalled or
/// black-holed. Connections are owned by the coroutines that serve them, so nothing they touch
/// is freed under them.
class fault_proxy {
public:
    /// Starts listening and serving. Throws boost::system::system_error when it cannot listen.
    explicit fault_proxy(std::uint16_t upstream_port);
    ~fault_proxy();
    fault_proxy(fault_proxy const&) = delete;
    fault_proxy& operator=(fault_proxy const&) = delete;

    /// The port the proxy listens on.
    std::uint16_t port() const noexcept;
    /// "redis://127.0.0.1:PORT".
    std::string url() const;
    /// Default settings with host 127.0.0.1 and port().
    colock::redis::config config() const;

    /// Every chunk read from now on, in both directions, is written `delay` after it was read;
    /// chunks already queued keep their time, so order is kept. 0 turns it off.
    void set_latency(std::chrono::milliseconds delay);
    /// Holds all traffic, both directions and on every connection (also ones opened meanwhile),
    /// until `d` from now: bytes are read and queued, not lost, and delivered in order when
    /// the stall ends. A later call may extend a stall, never shorten it. d <= 0 does nothing.
    void stall_for(std::chrono::milliseconds d);
    /// on: connections accepted from now on are never answered (no upstream connection is
    /// made), and bytes on open connections are swallowed both ways, queued ones included; the
    /// sockets stay open, as with a host that vanished from the network. off: the black-holed
    /// connections are closed, since bytes were lost and their streams are out of step; new
    /// connections work again.
    void set_black_hole(bool on);
    /// Closes every connection at once, both sides.
    void drop_connections();
    /// The next server->client chunk (on any connection) is cut: only its first `keep_bytes`
    /// are forwarded (half of it, at least one byte, when it is not longer than `keep_bytes`:
    /// the reply is cut wherever it ends), then that connection is closed both sides. A later
    /// call before that chunk arrives replaces the setting.
    void cut_next_reply(std::size_t keep_bytes);
    /// The next server->client chunk (on any connection) is replaced by `bytes` (empty: it
    /// vanishes); the connection stays open. When a cut is armed too, the cut takes the next
    /// chunk and the rewrite the one after.
    void rewrite_next_reply(std::string bytes);

    fault_proxy_stats stats() const;
    /// Connections accepted and not yet closed.
    std::size_t open_connections() const;

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

} // namespace colock::test

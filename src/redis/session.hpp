// One socket's state and the requests on it: what the run loop, the reader, the writer and the
// handshake of connection_impl share while a connection is up. Private to the library.
#pragma once

#include <colock/resp3/parser.hpp>

#include "engine.hpp"
#include "reply_matcher.hpp"
#include "subscription_book.hpp"

#include <boost/asio/any_completion_executor.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace colock::redis::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using tcp = asio::ip::tcp;
// TCP and unix domain sockets alike.
using stream_socket = asio::generic::stream_protocol::socket;
using stream_endpoint = asio::generic::stream_protocol::endpoint;

// A SUBSCRIBE or UNSUBSCRIBE that the subscription book asked for.
struct subscription_command {
    channel_kind kind = channel_kind::classic;
    subscription_book::command_id id = 0;
    std::string text; // "SUBSCRIBE a b", for messages
};

// One request on its way: queued, then written (awaiting replies), then done.
struct exec_entry {
    enum class stage { queued, written, done };

    std::string payload;
    std::size_t commands = 0;
    std::vector<resp3::reply_shape> shapes; // empty: every command ordinary
    response replies;
    std::variant<std::monostate, exec_handler, subscription_command> handler;
    asio::cancellation_slot slot;
    // Outstanding work on the handler's own executor (work_if_foreign), until its completion is
    // handed over.
    asio::any_completion_executor work;
    stage state = stage::queued;
    bool discard = false;   // cancelled after it was written: its replies are read and dropped
    bool from_user = false; // taken from the user queue, where it returns if not written
    // Where it went: the session's write that took it (session::writes), and in that write's
    // buffer, where its bytes begin, where its first command ends, and just after its bytes.
    std::uint64_t write = 0;
    std::size_t write_begin = 0;
    std::size_t first_command_end = 0;
    std::size_t write_end = 0;
};

using entry_ptr = std::shared_ptr<exec_entry>;

// Everything that belongs to one socket. A new session per connection attempt, so a run loop
// that is winding down never touches its successor's state.
struct session {
    explicit session(asio::strand<asio::any_io_executor> const& strand)
        : socket(strand), wakeup(strand) {}

    stream_socket socket;
    std::optional<asio::ssl::stream<stream_socket&>> tls;
    asio::steady_timer wakeup; // cancelled to wake the writer
    // Resolve, connect, TLS and the handshake all end by this time (config::connect_timeout).
    std::chrono::steady_clock::time_point deadline;
    std::deque<entry_ptr> in_flight; // written (or being written), in order
    reply_matcher matcher;           // the answers of in_flight, in step with it
    std::vector<char> read_buffer = std::vector<char>(64 * 1024);
    std::size_t read_begin = 0;
    std::size_t read_end = 0;
    resp3::parser parser;
    std::string write_buffer;
    std::uint64_t writes = 0; // numbers the writes: the current one's, once it is taken
    // Requests that only make sense on this socket: never carried over to the next one.
    std::deque<entry_ptr> handshake_queue; // written first, before the handshake is done
    std::deque<entry_ptr> session_queue;   // health-check PINGs and subscription commands
    bool ready = false;                    // handshake done: user requests may be written
    bool detached = false;                 // no longer the connection's session: takes nothing more
    std::string run_id;                    // of the server this session reached; empty when unknown
    // Where this session connects: config::host and port, or the primary the sentinels named.
    server_address target;
    // Sentinel: the index of the sentinel that named `target`.
    std::optional<std::size_t> named_by;
    // Which step of connecting this session is at, for messages: empty for the TCP (or unix socket)
    // connect, else "TLS handshake", "Redis handshake", "HELLO", ...
    std::string step;
    bool failure_recorded = false; // the reason it could not connect is in last_connect_error_
    bool answered = false;         // the server has sent a whole RESP3 value on this socket
    // A reconnection's pushes (messages on the channels it subscribed to again) wait here until
    // the listeners are told of it (on_reconnect): none reaches them as if nothing had been
    // missed before it.
    std::vector<resp3::value> held_pushes;
    // close() with this session up: it sends the requests made before close() (taken from
    // flush_queue instead of the user queue) and reads their replies, then the connection closes.
    // Requests made after close() wait in the user queue for a new connection.
    bool flushing = false;
    std::deque<entry_ptr> flush_queue;
};

} // namespace colock::redis::detail

// The counted subscriptions of a connection (async_subscribe / async_unsubscribe) and the
// commands that keep the server in agreement with them, sans I/O. Private to the library.
#pragma once

#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace colock::redis::detail {

/// Each channel has a count of subscribers; only a count leaving or reaching zero needs the
/// server. The book decides which SUBSCRIBE / UNSUBSCRIBE to send and when an operation is
/// done; the connection writes the commands and reports their answers.
///
/// Commands belong to one session (one socket, from the moment its handshake is built). They
/// are never carried over to the next: the next handshake subscribes to every counted channel
/// instead, so a stale UNSUBSCRIBE can never undo a newer handshake's SUBSCRIBE.
///
/// An operation completes:
/// - while no session is open: at once (the next handshake subscribes), unless it asked to wait
///   for the next session (wait_for_session), when it waits for that handshake's commands;
/// - otherwise when every command it needs is answered (its own, and a SUBSCRIBE of the same
///   channel already on its way), or when the session closes before (the counts stand, and
///   the next handshake subscribes).
///
/// A refused SUBSCRIBE fails each operation waiting for it with error::server_error and the
/// server's text, and each such subscribe operation takes back what it counted up: nothing
/// that waits for the server believes it is subscribed to a channel the server refused. A
/// channel such an operation leaves subscribed on the server with nobody counting it (in a
/// handshake, one command per channel: another of its channels was refused) is unsubscribed
/// (take_commands). A refused handshake SUBSCRIBE (one command per channel, so that one
/// refusal does not cost the others) keeps the counts of the subscribers told of success
/// before the session: the channel is not subscribed on the server, their unsubscriptions
/// count down without UNSUBSCRIBE and never take a newer subscriber's count, and a newer
/// subscriber, or the next handshake, asks the server again. A refused UNSUBSCRIBE fails its
/// operation but takes nothing back: its caller has let go either way, and a subscription left
/// on the server only brings messages nobody asked for, until the next session.
///
/// Invariant: a channel with a count above zero is subscribed on the open session, or its
/// SUBSCRIBE is on its way and some operation still waits for the answer, or the open
/// session's handshake SUBSCRIBE of it was refused.
class subscription_book {
public:
    using op_id = std::uint64_t;
    using command_id = std::uint64_t;

    /// A SUBSCRIBE or UNSUBSCRIBE to write on the open session, in the order given.
    struct command {
        command_id id = 0;
        bool subscribe = true;
        std::vector<std::string> channels;
    };

    /// An operation with its outcome.
    struct finished {
        op_id op = 0;
        boost::system::error_code ec; // empty, error::server_error, or what abandon_waiting said
        std::string server_text;      // the server's reason, when it refused
    };

    /// Counts each of `channels` up (subscribe) or down. Returns the operation's id and the
    /// commands to write for it now: none when the server already agrees or no session is
    /// open. An operation that waits for nothing is finished at once (take_finished).
    std::pair<op_id, std::vector<command>> change(bool subscribe, std::vector<std::string> channels,
                                                  bool wait_for_session = false);

    /// A session's handshake is being built: one SUBSCRIBE per counted channel. Operations
    /// waiting for a session now wait for these.
    std::vector<command> open_session();

    /// The server's answer to a command of the open session: confirmed, or refused with the
    /// server's text. Unknown ids (a closed session's) are ignored.
    void on_answer(command_id id, bool refused, std::string_view server_text);

    /// The session is gone: commands not answered yet never will be. Operations waiting only
    /// for them succeed (the next handshake subscribes), or, when `ec` is set (close()), fail
    /// with it and take back what they counted up.
    void close_session(boost::system::error_code ec = {});

    /// Operations waiting for a session fail with `ec` (the connection could not be
    /// established) and take back what they counted up.
    void abandon_waiting(boost::system::error_code ec);

    /// Operations finished since the last call, in the order they finished.
    std::vector<finished> take_finished();

    /// Commands to write on the open session that no change() returned, in order: an
    /// UNSUBSCRIBE for a channel that a failed subscribe operation left on the server with
    /// nobody counting it. Nobody waits for their answers.
    std::vector<command> take_commands();

    bool session_open() const noexcept { return session_open_; }
    /// The number of subscribers counted for `channel`.
    std::size_t count(std::string_view channel) const;
    /// Whether the open session subscribed (or is subscribing) to `channel`.
    bool on_server(std::string_view channel) const;
    /// Channels with a count above zero, in order.
    std::vector<std::string> counted() const;

private:
    struct channel_state {
        std::size_t count = 0;
        bool on_server = false; // once every command written or queued for it has run
        command_id latest = 0;  // the unanswered command that decides on_server; 0: none
    };
    struct command_state {
        bool subscribe = true;
        bool handshake = false;
        std::vector<std::string> channels;
        std::vector<op_id> waiters;
    };
    struct op_state {
        bool subscribe = true;
        bool waits_for_session = false;
        std::vector<std::string> counted; // counted up by this operation: what a failure undoes
        std::size_t waiting = 0;          // unanswered commands it needs
        boost::system::error_code ec;
        std::string server_text;
    };
    using channel_map = std::map<std::string, channel_state, std::less<>>;

    command_id new_command(bool subscribe, bool handshake, std::vector<std::string> channels,
                           std::vector<command>& out);
    void wait_for(op_id op, command_id cmd);
    void finish(op_id op);
    void forget_if_idle(channel_map::iterator it);
    // Takes every operation that waits for the session off that wait, one by one, and calls
    // `then(id, op)` for it (which may finish it).
    template <class Then>
    void stop_waiting_for_session(Then then);

    channel_map channels_;
    std::map<command_id, command_state> commands_;
    std::map<op_id, op_state> ops_;
    std::vector<finished> finished_;
    std::vector<command> outbox_; // for take_commands()
    op_id next_op_ = 1;
    command_id next_command_ = 1;
    bool session_open_ = false;
};

} // namespace colock::redis::detail

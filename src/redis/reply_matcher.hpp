// Which request a value read from the server answers, sans I/O. Private to the library; the
// unit tests drive it with RESP3 byte streams.
#pragma once

#include <colock/resp3/request.hpp>
#include <colock/resp3/value.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace colock::redis::detail {

/// The subscribe-family command a push confirms ("subscribe", ..., "sunsubscribe", as the
/// server names them), or reply_kind::ordinary when `v` is not such a confirmation (a message,
/// an invalidation, anything else, or not a push at all).
resp3::reply_kind confirmation_kind(resp3::value const& v) noexcept;

/// The size in bytes of the first command of `payload`, commands as resp3::request writes them
/// (an array of bulk strings); 0 when `payload` does not start with a whole command. When
/// `arguments` is given, it receives the command's arguments after its name.
std::size_t first_command(std::string_view payload,
                          std::vector<std::string_view>* arguments = nullptr);

/// Matches the values read from one connection to the requests written on it.
///
/// Redis answers the commands of a connection in order, but not one value per command: a
/// subscribe-family command is answered by one push confirmation per channel, or by a single
/// ordinary error reply when it is refused as a whole (NOPERM, BUSY, ...); an argument-less
/// UNSUBSCRIBE (PUNSUBSCRIBE, SUNSUBSCRIBE) by one push per channel of its kind the connection
/// was subscribed to, or one push with a null channel when there were none. Meanwhile pushes
/// nobody asked for (messages, invalidations, an unsolicited SUNSUBSCRIBE when a Cluster slot
/// moves) arrive at any time and answer nothing.
///
/// The rules, for each value, against the oldest command still waiting for its answer:
/// - A push that is not a confirmation of that command's kind answers nothing.
/// - A confirmation of that command's kind counts towards it; the command is answered by the
///   last one (a named command by as many as it has channels; an argument-less UN- form when no
///   subscription of its kind is left, or by its single "none" push). When the request's bytes
///   were given, a named command counts only confirmations of the channels it names, each as
///   often as named: the server's own "sunsubscribe" of another shard channel (its slot moved)
///   answers nothing.
/// - A value that is not a push answers it when it is ordinary (or unmatchable: the connection's
///   own HELLO), or when it is an error and the command, of the subscribe family, has no
///   confirmation yet. Anything else is a protocol
///   violation (route::unexpected).
/// - A subscribe-family command that has confirmations and meets a value that cannot be one
///   more of them is over (the server has moved on); the value is matched to what follows.
///   This is what keeps an argument-less UN- form in step even when the subscription count is
///   unknown, e.g. after a SUBSCRIBE inside MULTI whose confirmation sits in EXEC's reply.
///
/// To know when an argument-less UN- form is done, the matcher counts the connection's
/// subscriptions from the confirmations' count field (the connection's channels plus patterns
/// for the classic family, its shard channels for the sharded one).
///
/// One matcher per connection (socket); clear() it for the next one.
class reply_matcher {
public:
    enum class route {
        /// A push that answers no command: for the push listeners only.
        listeners,
        /// An ordinary reply or an error reply: stored as the answer of a command.
        answer,
        /// A confirmation push: stored as (the latest part of) a command's answer; the push
        /// listeners see it too.
        answer_and_listeners,
        /// Not a push, and no command may take it: the stream is out of step.
        unexpected,
    };

    /// Adds a request whose bytes are on their way to the server, behind those added before.
    /// `shapes` is empty when every command is ordinary (resp3::request::shapes()). `payload`,
    /// the request's bytes, names the channels whose confirmations its named subscribe-family
    /// commands wait for; without it they count confirmations of any channel.
    void add(std::size_t commands, std::vector<resp3::reply_shape> shapes,
             std::string_view payload = {});

    /// Routes one value read from the server. An answer is stored with its request: moved out
    /// of `v` when it is an ordinary reply, copied when it is a push (the listeners see it).
    /// Afterwards the oldest requests may be complete: take them with take_front().
    route feed(resp3::value& v);

    /// True when the oldest request has an answer for every command.
    bool front_done() const noexcept;

    /// Removes the oldest request and returns its answers, one value per command: the reply,
    /// or for a subscribe-family command its error or its last confirmation.
    /// Precondition: front_done().
    std::vector<resp3::value> take_front();

    /// Removes the newest request, whose bytes did not all reach the server. Precondition: it
    /// has no answer yet (a command the server did not receive entirely is not run).
    void drop_back();

    std::size_t size() const noexcept { return pending_.size(); }
    bool empty() const noexcept { return pending_.empty(); }

    /// Forgets every request and the subscription counts: a new connection starts from zero.
    void clear() noexcept;

private:
    struct pending {
        std::size_t commands = 0;
        std::vector<resp3::reply_shape> shapes; // empty: all ordinary
        std::vector<resp3::value> answers;      // one per command
        // Per command (empty when none is named or unknown): channels whose confirmation it
        // still waits for.
        std::vector<std::vector<std::string>> names;
        std::size_t next = 0;          // first command without its whole answer
        std::size_t confirmations = 0; // pushes the command `next` has had so far

        resp3::reply_shape current() const noexcept {
            return shapes.empty() ? resp3::reply_shape{} : shapes[next];
        }
        bool done() const noexcept { return next == commands; }
        void advance() noexcept {
            ++next;
            confirmations = 0;
        }
    };

    pending* current() noexcept;
    // Whether `v` can be one more confirmation of the command `p` is answering.
    bool continues(pending const& p, resp3::reply_kind kind, resp3::value const& v) const noexcept;
    // Whether the confirmation just counted completes the command.
    bool completes(pending const& p, resp3::value const& confirmation) const noexcept;
    void track(resp3::reply_kind kind, resp3::value const& confirmation) noexcept;
    void track_nested(resp3::value const& reply) noexcept;

    std::deque<pending> pending_;
    // Subscriptions of the connection, as the confirmations tell them.
    std::int64_t total_ = 0;    // channels + patterns: the count of the classic family
    std::int64_t channels_ = 0; // of which channels
    std::int64_t patterns_ = 0; // and patterns
    std::int64_t shard_ = 0;    // shard channels (counted apart by the server)
};

} // namespace colock::redis::detail

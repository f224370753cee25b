/// \file
/// RESP request builder, sans I/O.
#pragma once

#include <charconv>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace colock::resp3 {

/// How the server answers one command, as far as matching answers to commands is concerned.
enum class reply_kind : std::uint8_t {
    /// One reply, which may be an error reply.
    ordinary,
    /// SUBSCRIBE: one push confirmation per channel ("subscribe", channel, count), or, when the
    /// server refuses the command (NOPERM, BUSY, ...), one ordinary error reply for all of it.
    subscribe,
    /// PSUBSCRIBE: as subscribe, one confirmation per pattern.
    psubscribe,
    /// SSUBSCRIBE: as subscribe, for shard channels.
    ssubscribe,
    /// UNSUBSCRIBE: one push confirmation per channel named. Without channels: one per channel
    /// of its kind the connection was subscribed to, or a single one with a null channel when
    /// there were none. Or one ordinary error reply.
    unsubscribe,
    /// PUNSUBSCRIBE: as unsubscribe, for patterns.
    punsubscribe,
    /// SUNSUBSCRIBE: as unsubscribe, for shard channels.
    sunsubscribe,
    /// MONITOR, RESET, HELLO, CLIENT REPLY OFF|SKIP: they change how, or whether, the server
    /// answers the commands after them (HELLO 2 switches to RESP2, where pushes look like
    /// replies), so the answers of a shared connection could no longer be matched to their
    /// callers. Each is answered by one reply.
    unmatchable,
};

/// The enumerator's name (e.g. "subscribe"); "unknown" for a value outside the enumeration.
std::string_view to_string(reply_kind kind) noexcept;

/// The answer a command expects.
struct reply_shape {
    /// How the command is answered.
    reply_kind kind = reply_kind::ordinary;
    /// Channels (or patterns) the command names, for the subscribe family.
    std::size_t channels = 0;

    /// Equal when kind and channels are.
    friend bool operator==(reply_shape, reply_shape) noexcept = default;
};

/// A sequence of Redis commands serialised as RESP arrays of bulk strings, ready to be written.
/// Arguments are binary safe: any byte, "\r\n" and '\0' included, goes through unchanged.
///
/// Also records how each command will be answered (its reply_shape), so a connection can match
/// the answers to the commands. A subscribe-family command (SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE and
/// their UN- forms) is answered in RESP3 by push confirmations, or by one error reply when the
/// server refuses it. Inside a MULTI opened earlier in the same request every command is
/// answered +QUEUED (or an error), so it counts as ordinary there. A request of ordinary commands
/// only records nothing per command.
class request {
public:
    /// Appends one command. Each argument may be anything convertible to std::string_view, or
    /// an integer (written in decimal).
    ///
    /// Throws std::invalid_argument, leaving the request unchanged, for an empty command name
    /// or a SUBSCRIBE, PSUBSCRIBE or SSUBSCRIBE without a channel (which the server could only
    /// refuse).
    template <class... Args>
    void push(std::string_view command, Args const&... args) {
        // One allocation for the command, rather than one per doubling as it grows.
        payload_.reserve(payload_.size() + 16 + command.size() + (0 + ... + encoded_size(args)));
        auto const mark = begin_command(command, 1 + sizeof...(Args));
        try {
            (append_arg(args), ...);
        } catch (...) {
            payload_.resize(mark.size);
            throw;
        }
        end_command(mark, command, sizeof...(Args));
    }

    /// Appends one command whose arguments come from a (multi-pass) range of string-like or
    /// integer items. Taken by forwarding reference because some views (filter) are not
    /// iterable when const. Throws as push() does.
    template <class Range>
    void push_range(std::string_view command, Range&& args) {
        std::size_t n = 0;
        // std::size rather than std::ranges: clang 14 cannot compile libstdc++ 12's ranges.
        if constexpr (requires { std::size(args); }) {
            n = static_cast<std::size_t>(std::size(args));
        } else {
            for ([[maybe_unused]] auto const& a : args)
                ++n;
        }
        auto const mark = begin_command(command, 1 + n);
        try {
            for (auto const& a : args)
                append_arg(a);
        } catch (...) {
            payload_.resize(mark.size);
            throw;
        }
        end_command(mark, command, n);
    }

    /// The serialised bytes of every command pushed so far.
    std::string_view payload() const noexcept { return payload_; }

    /// Moves the serialised bytes out (for a connection that takes the request over); the
    /// request is empty afterwards.
    std::string take_payload() noexcept {
        std::string out = std::move(payload_);
        clear();
        return out;
    }

    /// Number of commands pushed.
    std::size_t commands() const noexcept { return commands_; }

    /// Number of commands answered by one ordinary reply (all but the subscribe family).
    std::size_t expected_replies() const noexcept { return expected_replies_; }

    /// Least number of push confirmations the subscribe-family commands get when the server
    /// accepts them (an argument-less UN- form counts one).
    std::size_t expected_confirmations() const noexcept { return expected_confirmations_; }

    /// How each command is answered, in order; empty when every command is ordinary.
    std::vector<reply_shape> const& shapes() const noexcept { return shapes_; }

    /// How command `i` (0-based, below commands()) is answered.
    reply_shape shape(std::size_t i) const noexcept {
        return shapes_.empty() ? reply_shape{} : shapes_[i];
    }

    /// The first command whose kind is reply_kind::unmatchable, as written ("MONITOR",
    /// "HELLO", "CLIENT REPLY OFF"); empty when there is none.
    std::string const& unmatchable_command() const noexcept { return unmatchable_; }

    /// True when no command has been pushed.
    bool empty() const noexcept { return commands_ == 0; }
    /// Forgets every command pushed: the request is as new (its memory is kept).
    void clear() noexcept;
    /// Makes room for `bytes` bytes of payload, to push commands without reallocating.
    void reserve(std::size_t bytes) { payload_.reserve(bytes); }

private:
    struct command_mark {
        std::size_t size; // payload size before the command, to undo it
        reply_kind kind;
    };

    // Validates the command and writes the array header and the command name.
    command_mark begin_command(std::string_view command, std::size_t argc);
    // Records the command's shape; strong guarantee (undoes the payload if that throws).
    void end_command(command_mark mark, std::string_view command, std::size_t args);
    // The argument `index` (0 is the command name) of the command written from `from`.
    std::string_view argument(std::size_t from, std::size_t index) const noexcept;
    void append_bulk(std::string_view bytes);

    // At least the bytes append_arg writes for `arg`.
    template <class T>
    static std::size_t encoded_size(T const& arg) noexcept {
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, char>)
            return 32;
        else
            return std::string_view(arg).size() + 16;
    }

    template <class T>
    void append_arg(T const& arg) {
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool> &&
                      !std::is_same_v<T, char>) {
            char buf[24];
            auto const r = std::to_chars(buf, buf + sizeof buf, arg);
            append_bulk(std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
        } else {
            static_assert(std::is_convertible_v<T const&, std::string_view>,
                          "a request argument is a string or an integer");
            append_bulk(std::string_view(arg));
        }
    }

    std::string payload_;
    std::size_t commands_ = 0;
    std::size_t expected_replies_ = 0;
    std::size_t expected_confirmations_ = 0;
    std::vector<reply_shape> shapes_; // filled from the first command that is not ordinary
    std::string unmatchable_;
    bool in_multi_ = false;
};

} // namespace colock::resp3

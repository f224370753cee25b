// RESP request builder, sans I/O.
#pragma once

#include <charconv>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>

namespace colock::resp3 {

/// A sequence of Redis commands serialised as RESP arrays of bulk strings, ready to be written.
/// Arguments are binary safe: any byte, "\r\n" and '\0' included, goes through unchanged.
///
/// Also counts the replies the commands will produce, so a connection can match them. A
/// subscribe-family command (SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE and their UN- forms) is answered
/// in RESP3 by one push confirmation per channel instead of a reply; those are counted apart.
class request {
public:
    /// Appends one command. Each argument may be anything convertible to std::string_view, or
    /// an integer (written in decimal).
    ///
    /// Throws std::invalid_argument, leaving the request unchanged, for an empty command name
    /// or a SUBSCRIBE, PSUBSCRIBE or SSUBSCRIBE without a channel: Redis would answer the latter
    /// with an ordinary error instead of a push, and the replies would no longer match.
    template <class... Args>
    void push(std::string_view command, Args const&... args) {
        auto const mark = begin_command(command, 1 + sizeof...(Args));
        try {
            (append_arg(args), ...);
        } catch (...) {
            payload_.resize(mark.size);
            throw;
        }
        end_command(mark.kind, sizeof...(Args));
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
        end_command(mark.kind, n);
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

    /// Number of ordinary replies expected (commands other than the subscribe family).
    std::size_t expected_replies() const noexcept { return expected_replies_; }

    /// Number of push confirmations expected from subscribe-family commands.
    std::size_t expected_confirmations() const noexcept { return expected_confirmations_; }

    bool empty() const noexcept { return commands_ == 0; }
    void clear() noexcept;
    void reserve(std::size_t bytes) { payload_.reserve(bytes); }

private:
    enum class command_kind : std::uint8_t { ordinary, subscribe, unsubscribe };
    struct command_mark {
        std::size_t size; // payload size before the command, to undo it
        command_kind kind;
    };

    // Validates the command and writes the array header and the command name.
    command_mark begin_command(std::string_view command, std::size_t argc);
    void end_command(command_kind kind, std::size_t channels) noexcept;
    void append_bulk(std::string_view bytes);

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
};

} // namespace colock::resp3

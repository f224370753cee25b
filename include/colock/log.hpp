/// \file
/// A hook for colock's log lines: what a connection and a locker did that an operator may want to
/// see (connections lost and regained, a server replaced, a lease lost, a release that failed).
/// Off unless a handler is set (redis::config::log).
#pragma once

#include <functional>
#include <string_view>

namespace colock {

/// How much a log line matters. Lines below redis::config::min_log_level are not even formatted.
enum class log_level {
    debug,   ///< routine steps: each retried renewal
    info,    ///< connected, reconnected
    warning, ///< a connection lost or refused, a server replaced, a lease lost
    error,   ///< a release that could not be done: the lease runs out by its ttl
};

/// "debug", "info", "warning" or "error".
constexpr std::string_view to_string(log_level level) noexcept {
    switch (level) {
    case log_level::debug:
        return "debug";
    case log_level::info:
        return "info";
    case log_level::warning:
        return "warning";
    case log_level::error:
        return "error";
    }
    return "unknown";
}

/// Receives one line (without a trailing newline) and its level. Called inline on the
/// library's strands, possibly from several threads at once when the io_context runs on
/// several: keep it short, thread-safe and non-blocking. An exception it throws is swallowed.
/// Lines never contain a password.
using log_handler = std::function<void(log_level level, std::string_view line)>;

} // namespace colock

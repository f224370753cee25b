// Text for people and for programs: durations, times, JSON strings, and names made safe for a
// terminal.
#pragma once

#include <colock/lock_status.hpp>

#include <chrono>
#include <string>
#include <string_view>

namespace colock::cli {

/// `text` with control characters, DEL, '\\' and bytes that are not UTF-8 written as \xHH, so
/// that a name read from Redis cannot drive the terminal.
std::string printable(std::string_view text);

/// "850ms", "29.5s", "2m05s", "1h02m", "366d".
std::string format_duration(std::chrono::milliseconds d);

/// ISO 8601 in UTC with milliseconds: "2024-11-24T17:16:00.123Z".
std::string iso8601(std::chrono::system_clock::time_point t);

/// A JSON string literal, quotes included. Bytes that are not UTF-8 become U+FFFD.
std::string json_string(std::string_view text);

/// json_string(text), or null when `text` is empty.
std::string json_or_null(std::string_view text);

/// A lock holder's process as a JSON object: host, pid, program, client_name, started.
std::string holder_json(holder_info const& h);

/// One "key:        value" line of `status` and `leader`, to stdout.
void print_field(std::string_view key, std::string const& value);

/// A holder's process as print_field lines: host, pid, program, client name, started.
void print_holder_fields(holder_info const& h);

} // namespace colock::cli

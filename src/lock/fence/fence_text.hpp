// What a fenced resource's two halves share (fenced_writes.cpp, fenced_resource.cpp): the
// refusal of bad input, how keys and names show in messages, the ttl bound and the fence's text.
// Private to the library's sources.
#pragma once

#include <colock/error.hpp>

#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace colock::detail::fence_text {

[[noreturn]] inline void refuse(std::string const& what) {
    throw boost::system::system_error(make_error_code(error::invalid_argument), "colock: " + what);
}

// A key or name as it appears in a message: at most 80 bytes.
inline std::string shown(std::string_view text) {
    if (text.size() <= 80)
        return std::string(text);
    return std::string(text.substr(0, 77)) + "...";
}

// The longest ttl taken: 2^40 ms, about 34 years. Redis refuses an expiry whose time from now
// overflows, and the script sends its expiries after earlier writes of the batch are made: a
// bound checked here keeps the batch whole.
inline constexpr std::int64_t max_ttl_ms = std::int64_t{1} << 40;

inline std::string ms_text(std::chrono::milliseconds ttl, std::string_view what) {
    if (ttl.count() < 1 || ttl.count() > max_ttl_ms)
        refuse(fmt::format("fenced write: {} of {} ms (1 ms to 2^40 ms)", what, ttl.count()));
    return std::to_string(ttl.count());
}

inline std::optional<std::int64_t> parse_fence(std::string_view text) {
    std::int64_t v = 0;
    auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc{} || end != text.data() + text.size() || v < 1)
        return std::nullopt;
    return v;
}

} // namespace colock::detail::fence_text

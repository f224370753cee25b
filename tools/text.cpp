#include "text.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <ctime>

namespace colock::cli {

namespace {

// Length of the well-formed UTF-8 sequence at the start of `s` (1 to 4), or 0 when it is not
// one (overlong forms, surrogates and code points above U+10FFFF included).
std::size_t utf8_length(std::string_view s) {
    auto const b0 = static_cast<unsigned char>(s[0]);
    if (b0 < 0x80)
        return 1;
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        n = 2;
        cp = b0 & 0x1Fu;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        n = 3;
        cp = b0 & 0x0Fu;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        n = 4;
        cp = b0 & 0x07u;
    } else {
        return 0;
    }
    if (s.size() < n)
        return 0;
    for (std::size_t i = 1; i < n; ++i) {
        auto const b = static_cast<unsigned char>(s[i]);
        if ((b & 0xC0u) != 0x80u)
            return 0;
        cp = (cp << 6) | (b & 0x3Fu);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

} // namespace

std::string printable(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    while (!text.empty()) {
        auto const b = static_cast<unsigned char>(text[0]);
        auto const n = utf8_length(text);
        if (n > 1 || (n == 1 && b >= 0x20 && b != 0x7F && b != '\\')) {
            out.append(text.substr(0, n));
            text.remove_prefix(n);
            continue;
        }
        out += fmt::format("\\x{:02x}", b);
        text.remove_prefix(1);
    }
    return out;
}

std::string format_duration(std::chrono::milliseconds d) {
    auto const ms = d.count();
    if (ms < 1000)
        return fmt::format("{}ms", ms);
    if (ms < 60'000)
        return ms % 1000 == 0 ? fmt::format("{}s", ms / 1000)
                              : fmt::format("{:.1f}s", static_cast<double>(ms) / 1000.0);
    auto const s = ms / 1000;
    if (s < 3600)
        return fmt::format("{}m{:02}s", s / 60, s % 60);
    if (s < 48 * 3600)
        return fmt::format("{}h{:02}m", s / 3600, s / 60 % 60);
    return fmt::format("{}d", s / 86'400);
}

std::string iso8601(std::chrono::system_clock::time_point t) {
    using namespace std::chrono;
    auto const ms = duration_cast<milliseconds>(t.time_since_epoch()).count();
    auto secs = static_cast<std::time_t>(ms / 1000);
    auto frac = ms % 1000;
    if (frac < 0) { // before 1970: floor, not truncate
        frac += 1000;
        --secs;
    }
    std::tm tm{};
    if (gmtime_r(&secs, &tm) == nullptr)
        return fmt::format("@{}ms", ms);
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900,
                       tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
}

std::string json_string(std::string_view text) {
    std::string out = "\"";
    out.reserve(text.size() + 2);
    while (!text.empty()) {
        auto const b = static_cast<unsigned char>(text[0]);
        auto const n = utf8_length(text);
        if (n == 0) {
            out += "\\ufffd";
            text.remove_prefix(1);
            continue;
        }
        text.remove_prefix(n);
        if (n > 1) {
            out.append(text.data() - n, n);
            continue;
        }
        switch (b) {
        case '"':
            out += "\\\"";
            break;
        case '\\':
            out += "\\\\";
            break;
        case '\n':
            out += "\\n";
            break;
        case '\r':
            out += "\\r";
            break;
        case '\t':
            out += "\\t";
            break;
        default:
            if (b < 0x20 || b == 0x7F)
                out += fmt::format("\\u{:04x}", b);
            else
                out += static_cast<char>(b);
        }
    }
    out += '"';
    return out;
}

std::string json_or_null(std::string_view text) {
    return text.empty() ? "null" : json_string(text);
}

std::string holder_json(holder_info const& h) {
    return fmt::format(R"({{"host":{},"pid":{},"program":{},"client_name":{},"started":{}}})",
                       json_string(h.host), h.pid, json_string(h.program),
                       json_string(h.client_name), json_string(iso8601(h.started)));
}

void print_field(std::string_view key, std::string const& value) {
    fmt::print("{:<13}{}\n", fmt::format("{}:", key), value);
}

void print_holder_fields(holder_info const& h) {
    print_field("host", printable(h.host));
    print_field("pid", std::to_string(h.pid));
    print_field("program", printable(h.program));
    print_field("client name", printable(h.client_name));
    print_field("started", iso8601(h.started));
}

} // namespace colock::cli

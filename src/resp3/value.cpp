#include <colock/resp3/value.hpp>

#include "escape.hpp"

#include <charconv>
#include <cmath>

namespace colock::resp3 {

std::optional<std::string_view> value::as_string() const noexcept {
    switch (type) {
    case resp3::type::simple_string:
    case resp3::type::simple_error:
    case resp3::type::blob_string:
    case resp3::type::blob_error:
    case resp3::type::verbatim_string:
    case resp3::type::big_number:
        return std::string_view(text);
    default:
        return std::nullopt;
    }
}

std::optional<std::int64_t> value::as_integer() const noexcept {
    if (type == resp3::type::number)
        return integer;
    switch (type) {
    case resp3::type::simple_string:
    case resp3::type::blob_string:
    case resp3::type::verbatim_string:
    case resp3::type::big_number: {
        // Only the whole string as an optional '-' and digits: " 1" or "1x" is no integer.
        char const* const first = text.data();
        char const* const last = first + text.size();
        if (first == last || (*first != '-' && (*first < '0' || *first > '9')))
            return std::nullopt;
        std::int64_t n = 0;
        auto const r = std::from_chars(first, last, n);
        if (r.ec != std::errc{} || r.ptr != last)
            return std::nullopt;
        return n;
    }
    default:
        return std::nullopt;
    }
}

namespace {

bool same_attributes(std::shared_ptr<std::vector<value>> const& a,
                     std::shared_ptr<std::vector<value>> const& b) noexcept {
    bool const a_empty = !a || a->empty();
    bool const b_empty = !b || b->empty();
    if (a_empty || b_empty)
        return a_empty == b_empty;
    return *a == *b;
}

} // namespace

bool operator==(value const& a, value const& b) noexcept {
    if (a.type != b.type || !same_attributes(a.attributes, b.attributes))
        return false;
    switch (a.type) {
    case type::simple_string:
    case type::simple_error:
    case type::blob_string:
    case type::blob_error:
    case type::big_number:
        return a.text == b.text;
    case type::verbatim_string:
        return a.text == b.text && a.verbatim_format == b.verbatim_format;
    case type::number:
        return a.integer == b.integer;
    case type::double_type:
        return (std::isnan(a.real) && std::isnan(b.real)) || a.real == b.real;
    case type::boolean:
        return a.boolean == b.boolean;
    case type::null:
        return true;
    case type::array:
    case type::map:
    case type::set:
    case type::attribute:
    case type::push:
        return a.elements == b.elements;
    }
    return false;
}

namespace detail {

void append_escaped(std::string& out, std::string_view s) {
    static constexpr char hex[] = "0123456789abcdef";
    out += '"';
    for (char const c : s) {
        auto const u = static_cast<unsigned char>(c);
        switch (c) {
        case '"':
            out += "\\\"";
            break;
        case '\\':
            out += "\\\\";
            break;
        case '\r':
            out += "\\r";
            break;
        case '\n':
            out += "\\n";
            break;
        case '\t':
            out += "\\t";
            break;
        default:
            if (u >= 0x20 && u < 0x7f) {
                out += c;
            } else {
                out += "\\x";
                out += hex[u >> 4];
                out += hex[u & 0xf];
            }
        }
    }
    out += '"';
}

} // namespace detail

namespace {

using detail::append_escaped;

void append_double(std::string& out, double d) {
    if (std::isnan(d)) {
        out += "nan";
        return;
    }
    if (std::isinf(d)) {
        out += d < 0 ? "-inf" : "inf";
        return;
    }
    char buf[32];
    auto const r = std::to_chars(buf, buf + sizeof buf, d);
    out.append(buf, r.ptr);
}

// Recursion is bounded by the parser's max_depth for parsed values; a value built by hand is
// the caller's to keep reasonable.
void append_debug(std::string& out, value const& v) {
    out += '[';
    out += to_string(v.type);
    switch (v.type) {
    case type::simple_string:
    case type::simple_error:
    case type::blob_string:
    case type::blob_error:
    case type::big_number:
        out += ' ';
        append_escaped(out, v.text);
        break;
    case type::verbatim_string:
        out += ' ';
        out += v.verbatim_format;
        out += ' ';
        append_escaped(out, v.text);
        break;
    case type::number: {
        char buf[24];
        auto const r = std::to_chars(buf, buf + sizeof buf, v.integer);
        out += ' ';
        out.append(buf, r.ptr);
        break;
    }
    case type::double_type:
        out += ' ';
        append_double(out, v.real);
        break;
    case type::boolean:
        out += v.boolean ? " true" : " false";
        break;
    case type::null:
        break;
    case type::array:
    case type::map:
    case type::set:
    case type::attribute:
    case type::push:
        for (value const& e : v.elements) {
            out += ' ';
            append_debug(out, e);
        }
        break;
    }
    if (v.attributes) {
        out += " |attributes";
        for (value const& e : *v.attributes) {
            out += ' ';
            append_debug(out, e);
        }
        out += '|';
    }
    out += ']';
}

} // namespace

std::string to_debug_string(value const& v) {
    std::string out;
    append_debug(out, v);
    return out;
}

} // namespace colock::resp3

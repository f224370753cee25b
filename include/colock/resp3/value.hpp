// A parsed RESP3 reply as a tree.
#pragma once

#include <colock/resp3/type.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace colock::resp3 {

/// One RESP3 value. Scalars keep their payload in the member that fits the type; aggregates keep
/// their children in `elements` (a map or attribute stores key, value, key, value, ...).
///
/// - simple_string, simple_error, blob_string, blob_error, big_number: `text` holds the payload
///   (a big number as its decimal digits, with a leading '-' if negative).
/// - verbatim_string: `text` holds the payload after the format, `verbatim_format` the three
///   letter format ("txt", "mkd").
/// - number: `integer`. double_type: `real` (inf, -inf and nan included). boolean: `boolean`.
/// - null: nothing.
/// - array, set, push: `elements`. map, attribute: `elements` as key/value pairs.
///
/// An attribute that precedes a value in the stream is attached to that value as `attributes`
/// (a map-like list of key/value pairs); it is never returned as a value of its own.
struct value {
    resp3::type type = resp3::type::null;
    std::string text;
    std::string verbatim_format;
    std::int64_t integer = 0;
    double real = 0.0;
    bool boolean = false;
    std::vector<value> elements;
    std::shared_ptr<std::vector<value>> attributes;

    bool is_error() const noexcept { return resp3::is_error(type); }
    bool is_null() const noexcept { return type == resp3::type::null; }

    /// The string payload of a string-like value (simple, blob, verbatim, big number, error);
    /// std::nullopt for other types.
    std::optional<std::string_view> as_string() const noexcept;

    /// The integer of a number, or of a string holding a decimal integer (Redis replies to
    /// GET with strings); std::nullopt otherwise.
    std::optional<std::int64_t> as_integer() const noexcept;

    /// Equal when the types are equal and so is what the type uses (see above); members the type
    /// does not use are ignored. Doubles compare by value, except that nan equals nan so a
    /// reply compares equal to itself. No attributes and an empty attribute list are equal.
    friend bool operator==(value const&, value const&) noexcept;
};

/// A readable one-line rendering for diagnostics and tests, e.g. `[blob_string "OK"]`,
/// `[array [number 1] [null]]`, `[verbatim_string txt "hi"]`, `[double 1.5]`; attributes come
/// last, as `[number 1 |attributes [simple_string "k"] [number 2]|]`. Bytes outside printable
/// ASCII, '"' and '\\' are escaped (\r, \n, \t, \", \\, \xHH).
std::string to_debug_string(value const& v);

} // namespace colock::resp3

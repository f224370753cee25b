/// \file
/// A parsed RESP3 reply as a tree.
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
    /// The value's type: which of the members below hold its payload.
    resp3::type type = resp3::type::null;
    /// The payload of a string-like value, an error or a big number.
    std::string text;
    /// A verbatim string's three-letter format ("txt", "mkd").
    std::string verbatim_format;
    /// A number's value.
    std::int64_t integer = 0;
    /// A double's value.
    double real = 0.0;
    /// A boolean's value.
    bool boolean = false;
    /// An aggregate's children; key, value, key, value, ... for a map or attribute.
    std::vector<value> elements;
    /// The attribute that came before the value in the stream, as key/value pairs; null when
    /// there was none.
    std::shared_ptr<std::vector<value>> attributes;

    /// True for an error reply (simple_error or blob_error).
    bool is_error() const noexcept { return resp3::is_error(type); }
    /// True for a null.
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
/// ASCII, the double quote and the backslash are escaped: `\r`, `\n`, `\t`, `\"`, `\\`, `\xHH`.
std::string to_debug_string(value const& v);

} // namespace colock::resp3

/// \file
/// The RESP3 data types, as named by the protocol specification.
#pragma once

#include <cstdint>
#include <string_view>

namespace colock::resp3 {

/// The type of a RESP3 value, as the specification names it, with the byte that starts such a
/// value on the wire.
enum class type : std::uint8_t {
    simple_string,   ///< `+`
    simple_error,    ///< `-`
    blob_string,     ///< `$`
    blob_error,      ///< `!`
    number,          ///< `:`
    double_type,     ///< `,`
    big_number,      ///< `(`
    boolean,         ///< `#`
    null,            ///< `_`
    verbatim_string, ///< `=`
    array,           ///< `*`
    map,             ///< `%`
    set,             ///< `~`
    attribute,       ///< `|`
    push,            ///< `>`
};

/// The type's name in lowercase, as used in error messages ("blob_string"; "double" for
/// double_type).
std::string_view to_string(type t) noexcept;

/// True for array, map, set, attribute and push.
constexpr bool is_aggregate(type t) noexcept {
    return t == type::array || t == type::map || t == type::set || t == type::attribute ||
           t == type::push;
}

/// True for simple_error and blob_error.
constexpr bool is_error(type t) noexcept {
    return t == type::simple_error || t == type::blob_error;
}

} // namespace colock::resp3

/// \file
/// Errors of the RESP3 parser, with their own category.
#pragma once

#include <boost/system/error_code.hpp>

#include <string_view>
#include <type_traits>

namespace colock::resp3 {

/// The errors of the RESP3 parser: input that is not RESP3, or that exceeds parser_limits.
/// Their category is resp3::error_category().
enum class error {
    invalid_type_byte = 1,  ///< a value starts with a byte that is no RESP3 type
    invalid_number,         ///< ':' or a length that is not a base-10 64-bit integer
    invalid_double,         ///< ',' that is not a double, inf, -inf or nan
    invalid_boolean,        ///< '#' other than t or f
    invalid_null,           ///< '_' with a payload
    invalid_big_number,     ///< '(' that is not an optional '-' and digits
    invalid_verbatim,       ///< '=' shorter than "xxx:" or without the ':' after the format
    missing_crlf,           ///< a line or blob not followed by `"\r\n"`
    negative_length,        ///< a length below -1, or -1 where the type forbids it
    line_too_long,          ///< a line longer than parser_limits::max_line_length
    blob_too_long,          ///< a declared blob length above parser_limits::max_blob_length
    aggregate_too_large,    ///< a declared element count above parser_limits::max_aggregate_size
    nesting_too_deep,       ///< more nested aggregates than parser_limits::max_depth
    streamed_unsupported,   ///< a streamed string or aggregate ('?' length); Redis never sends one
    attribute_without_value ///< unused: the parser waits for the value an attribute precedes
};

/// The category of resp3::error codes; its name() is "colock.resp3".
boost::system::error_category const& error_category() noexcept;

/// The enumerator's name (e.g. "missing_crlf"), for logs and metrics labels; "unknown" for a value
/// outside the enumeration. The error_code's message() says what it means.
std::string_view to_string(error e) noexcept;

/// The error_code for `e`, in resp3::error_category(). Found by argument-dependent lookup, it
/// lets a resp3::error convert to boost::system::error_code.
inline boost::system::error_code make_error_code(error e) noexcept {
    return {static_cast<int>(e), error_category()};
}

} // namespace colock::resp3

/// \cond
// Lets colock::resp3::error convert to boost::system::error_code; hidden from the API reference,
// as in colock/error.hpp.
template <>
struct boost::system::is_error_code_enum<colock::resp3::error> : std::true_type {};
/// \endcond

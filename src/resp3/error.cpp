#include <colock/resp3/error.hpp>

#include <string>

namespace colock::resp3 {
namespace {

// Boost's error_category has a protected non-virtual destructor on purpose (categories are
// never deleted through a base pointer); g++ warns about it all the same.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnon-virtual-dtor"
#endif
class category final : public boost::system::error_category {
public:
    char const* name() const noexcept override { return "colock.resp3"; }

    std::string message(int ev) const override {
        switch (static_cast<error>(ev)) {
        case error::invalid_type_byte:
            return "RESP3: a value starts with a byte that is no RESP3 type";
        case error::invalid_number:
            return "RESP3: a number or length that is not a base-10 64-bit integer";
        case error::invalid_double:
            return "RESP3: a double that is not a decimal number, inf, -inf or nan";
        case error::invalid_boolean:
            return "RESP3: a boolean other than t or f";
        case error::invalid_null:
            return "RESP3: a null with a payload";
        case error::invalid_big_number:
            return "RESP3: a big number that is not an optional sign and digits";
        case error::invalid_verbatim:
            return "RESP3: a verbatim string without its three-letter format and ':'";
        case error::missing_crlf:
            return "RESP3: a line or blob not terminated by CRLF";
        case error::negative_length:
            return "RESP3: a negative length";
        case error::line_too_long:
            return "RESP3: a line longer than the parser's limit";
        case error::blob_too_long:
            return "RESP3: a declared string length above the parser's limit";
        case error::aggregate_too_large:
            return "RESP3: a declared aggregate size above the parser's limit";
        case error::nesting_too_deep:
            return "RESP3: aggregates nested deeper than the parser's limit";
        case error::streamed_unsupported:
            return "RESP3: streamed strings and aggregates are not supported";
        case error::attribute_without_value:
            return "RESP3: an attribute not followed by a value";
        }
        return "RESP3: unknown error " + std::to_string(ev);
    }
};
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

} // namespace

boost::system::error_category const& error_category() noexcept {
    static category const instance;
    return instance;
}

std::string_view to_string(error e) noexcept {
    switch (e) {
    case error::invalid_type_byte:
        return "invalid_type_byte";
    case error::invalid_number:
        return "invalid_number";
    case error::invalid_double:
        return "invalid_double";
    case error::invalid_boolean:
        return "invalid_boolean";
    case error::invalid_null:
        return "invalid_null";
    case error::invalid_big_number:
        return "invalid_big_number";
    case error::invalid_verbatim:
        return "invalid_verbatim";
    case error::missing_crlf:
        return "missing_crlf";
    case error::negative_length:
        return "negative_length";
    case error::line_too_long:
        return "line_too_long";
    case error::blob_too_long:
        return "blob_too_long";
    case error::aggregate_too_large:
        return "aggregate_too_large";
    case error::nesting_too_deep:
        return "nesting_too_deep";
    case error::streamed_unsupported:
        return "streamed_unsupported";
    case error::attribute_without_value:
        return "attribute_without_value";
    }
    return "unknown";
}

} // namespace colock::resp3

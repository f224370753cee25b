/// \file
/// Incremental RESP3 reply parser, sans I/O.
#pragma once

#include <colock/resp3/value.hpp>

#include <boost/system/error_code.hpp>

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

namespace colock::resp3 {

/// Bounds that hostile or broken input cannot exceed. Checked against the lengths a peer
/// *declares*, before anything is allocated for them.
struct parser_limits {
    /// The most aggregates nested in one another.
    std::size_t max_depth = 64;
    /// The most bytes in one blob or verbatim string.
    std::size_t max_blob_length = 512 * 1024 * 1024;
    /// The most elements one aggregate may declare (pairs for a map or attribute).
    std::size_t max_aggregate_size = 16 * 1024 * 1024;
    /// The most bytes in one line before its `"\r\n"`, the type byte not counted: a simple string
    /// of max_line_length bytes is accepted.
    std::size_t max_line_length = 64 * 1024;
};

/// Parses one RESP3 value at a time from a byte stream that may be split at any byte.
///
/// The caller owns the buffer: `consume` reads only whole tokens (a complete line, or a
/// complete blob with its "\r\n") and returns how many bytes it used. The caller drops those
/// bytes, appends what arrives next, and calls again with the rest. Nothing is copied until a
/// token is complete, and no more is allocated than the limits allow.
///
/// After an error the parser stays failed until `reset()`: the stream cannot be resynchronised.
class parser {
public:
    /// A parser that refuses input beyond `limits`.
    explicit parser(parser_limits limits = {});

    /// Consumes complete tokens from the front of `input`, stopping when a top-level value is
    /// complete (then `done()` is true) or when more bytes are needed. Returns the number of
    /// bytes consumed, never more than `input.size()`, and clears `ec`; on error sets `ec` (a
    /// colock::resp3::error) and returns 0. While done() is true it consumes nothing: release
    /// the value first. Once failed, every call returns the same error until reset().
    std::size_t consume(std::string_view input, boost::system::error_code& ec);

    /// True when a complete top-level value is ready to be taken with `release()`.
    bool done() const noexcept { return done_; }

    /// Takes the completed value and prepares for the next one. Precondition: done().
    value release();

    /// Forgets any partial value, any completed value not yet released, and any error.
    void reset();

    /// The error that failed the parser, or an empty code.
    boost::system::error_code error() const noexcept { return error_; }

    /// The limits given at construction.
    parser_limits const& limits() const noexcept { return limits_; }

private:
    struct frame {
        value node;            // the aggregate being filled
        std::size_t remaining; // children still expected (two per map or attribute entry)
        // An attribute parsed at this level, waiting for the next child to attach to.
        std::shared_ptr<std::vector<value>> pending_attributes;
    };

    std::size_t consume_token(std::string_view input, boost::system::error_code& ec);
    // The rest of a token of `type_byte` whose line is `line`, its CRLF ending at `line_end`: a
    // simple value, a blob (its payload from `input`) or an aggregate's header.
    std::size_t consume_simple(char type_byte, std::string_view line, std::size_t line_end,
                               boost::system::error_code& ec);
    std::size_t consume_blob(char type_byte, std::string_view input, std::string_view line,
                             std::size_t line_end, boost::system::error_code& ec);
    std::size_t consume_aggregate(char type_byte, std::string_view line, std::size_t line_end,
                                  boost::system::error_code& ec);
    std::shared_ptr<std::vector<value>>& attribute_slot() noexcept;
    value& scalar_slot(type t);
    void place(value&& v);
    void value_added();

    parser_limits limits_;
    std::vector<frame> stack_;
    std::shared_ptr<std::vector<value>> top_attributes_;
    value result_;
    boost::system::error_code error_;
    bool done_ = false;
};

} // namespace colock::resp3

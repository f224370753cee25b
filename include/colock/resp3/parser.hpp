// Incremental RESP3 reply parser, sans I/O.
#pragma once

#include <colock/resp3/value.hpp>

#include <boost/system/error_code.hpp>

#include <cstddef>
#include <string_view>
#include <vector>

namespace colock::resp3 {

/// Bounds that hostile or broken input cannot exceed. Checked against the lengths a peer
/// *declares*, before anything is allocated for them.
struct parser_limits {
    std::size_t max_depth = 64;                       // nested aggregates
    std::size_t max_blob_length = 512 * 1024 * 1024; // bytes in one blob/verbatim string
    std::size_t max_aggregate_size = 16 * 1024 * 1024; // elements declared by one aggregate
    std::size_t max_line_length = 64 * 1024;          // bytes in one line before its "\r\n"
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
    explicit parser(parser_limits limits = {});

    /// Consumes complete tokens from the front of `input`, stopping when a top-level value is
    /// complete (then `done()` is true) or when more bytes are needed. Returns the number of
    /// bytes consumed; on error sets `ec` and returns 0.
    std::size_t consume(std::string_view input, boost::system::error_code& ec);

    /// True when a complete top-level value is ready to be taken with `release()`.
    bool done() const noexcept { return done_; }

    /// Takes the completed value and prepares for the next one. Precondition: done().
    value release();

    /// Forgets any partial value and any error.
    void reset();

    parser_limits const& limits() const noexcept { return limits_; }

private:
    struct frame {
        value node;
        std::size_t remaining; // children still expected
    };

    std::size_t consume_one(std::string_view input, boost::system::error_code& ec);
    void add_complete(value v);

    parser_limits limits_;
    std::vector<frame> stack_;
    std::vector<std::shared_ptr<std::vector<value>>> pending_attributes_;
    value result_;
    bool done_ = false;
    bool failed_ = false;
};

} // namespace colock::resp3

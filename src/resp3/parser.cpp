#include <colock/resp3/error.hpp>
#include <colock/resp3/parser.hpp>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>

namespace colock::resp3 {
namespace {

// Elements reserved up front for an aggregate: enough for the usual small replies, while a
// hostile declared size costs nothing until its elements really arrive.
constexpr std::size_t initial_reserve = 16;

bool is_digit(char c) noexcept {
    return c >= '0' && c <= '9';
}

// An optional '-' and one or more digits, the whole of `s`, within 64 bits. A leading '+' is
// accepted only where the specification allows one (numbers, not lengths).
bool parse_int64(std::string_view s, bool allow_plus, std::int64_t& out) noexcept {
    bool const plus = allow_plus && !s.empty() && s.front() == '+';
    if (plus)
        s.remove_prefix(1);
    // One sign at most: "+-1" is no number.
    if (s.empty() || !(is_digit(s.front()) || (!plus && s.front() == '-' && s.size() > 1)))
        return false;
    auto const r = std::from_chars(s.data(), s.data() + s.size(), out);
    return r.ec == std::errc{} && r.ptr == s.data() + s.size();
}

bool all_digits(std::string_view s) noexcept {
    return !s.empty() && std::all_of(s.begin(), s.end(), is_digit);
}

// [+|-]digits[.digits][(e|E)[+|-]digits], or [+|-]inf, [+|-]nan. std::from_chars alone would
// also take "infinity", "nan(x)" and a missing integral part, which RESP3 does not allow.
bool parse_double(std::string_view s, double& out) noexcept {
    bool negative = false;
    if (!s.empty() && (s.front() == '+' || s.front() == '-')) {
        negative = s.front() == '-';
        s.remove_prefix(1);
    }
    if (s == "inf") {
        out = negative ? -std::numeric_limits<double>::infinity()
                       : std::numeric_limits<double>::infinity();
        return true;
    }
    if (s == "nan") {
        out = std::numeric_limits<double>::quiet_NaN();
        return true;
    }
    std::size_t i = 0;
    auto skip_digits = [&] {
        std::size_t const start = i;
        while (i < s.size() && is_digit(s[i]))
            ++i;
        return i > start;
    };
    if (!skip_digits())
        return false;
    if (i < s.size() && s[i] == '.') {
        ++i;
        if (!skip_digits())
            return false;
    }
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
        ++i;
        if (i < s.size() && (s[i] == '+' || s[i] == '-'))
            ++i;
        if (!skip_digits())
            return false;
    }
    if (i != s.size())
        return false;
    double d = 0;
    auto const r = std::from_chars(s.data(), s.data() + s.size(), d);
    // Out of range (1e400) is refused rather than silently rounded to inf or 0.
    if (r.ec != std::errc{} || r.ptr != s.data() + s.size())
        return false;
    out = negative ? -d : d;
    return true;
}

std::size_t fail(boost::system::error_code& ec, error e) {
    ec = make_error_code(e);
    return 0;
}

// Whether `tb` starts a token the parser takes; else sets `ec`.
bool check_type_byte(char tb, boost::system::error_code& ec) {
    switch (tb) {
    case '+':
    case '-':
    case '$':
    case '!':
    case ':':
    case ',':
    case '(':
    case '#':
    case '_':
    case '=':
    case '*':
    case '%':
    case '~':
    case '|':
    case '>':
        return true;
    case ';': // streamed string chunk
    case '.': // end of a streamed aggregate
        fail(ec, error::streamed_unsupported);
        return false;
    default:
        fail(ec, error::invalid_type_byte);
        return false;
    }
}

// The line after the type byte of `in`, and where the token's next part begins (just after the
// line's CRLF). False when the line has not all arrived, or when it is refused (then `ec` says
// why). Searches no further than the limit allows, so a hostile endless line costs a bounded
// scan and is refused as soon as it passes the limit.
bool find_line(std::string_view in, std::size_t max_line_length, std::string_view& line,
               std::size_t& line_end, boost::system::error_code& ec) {
    std::size_t search = in.size() - 1;
    if (search > max_line_length)
        search = max_line_length + 1;
    auto const* const cr = static_cast<char const*>(std::memchr(in.data() + 1, '\r', search));
    if (cr == nullptr) {
        if (in.size() - 1 > max_line_length)
            fail(ec, error::line_too_long);
        return false;
    }
    std::size_t const line_len = static_cast<std::size_t>(cr - in.data()) - 1;
    if (line_len + 2 >= in.size())
        return false; // the '\n' has not arrived
    if (in[line_len + 2] != '\n') {
        fail(ec, error::missing_crlf);
        return false;
    }
    line = in.substr(1, line_len);
    line_end = line_len + 3;
    return true;
}

// The type of the aggregate that `tb` starts, and whether its elements come in pairs.
type aggregate_type(char tb, bool& pairs) {
    pairs = tb == '%' || tb == '|';
    switch (tb) {
    case '%':
        return type::map;
    case '~':
        return type::set;
    case '|':
        return type::attribute;
    case '>':
        return type::push;
    default:
        return type::array;
    }
}

} // namespace

parser::parser(parser_limits limits) : limits_(limits) {}

std::size_t parser::consume(std::string_view input, boost::system::error_code& ec) {
    if (error_) {
        ec = error_;
        return 0;
    }
    ec.clear();
    std::size_t used = 0;
    while (!done_) {
        std::size_t const n = consume_token(input.substr(used), ec);
        if (ec) {
            error_ = ec;
            return 0;
        }
        if (n == 0)
            break;
        used += n;
    }
    return used;
}

value parser::release() {
    value out(std::move(result_));
    result_ = value{};
    done_ = false;
    return out;
}

void parser::reset() {
    stack_.clear();
    top_attributes_.reset();
    result_ = value{};
    error_.clear();
    done_ = false;
}

std::shared_ptr<std::vector<value>>& parser::attribute_slot() noexcept {
    return stack_.empty() ? top_attributes_ : stack_.back().pending_attributes;
}

// Where the next scalar is built: straight in the result or in its parent, so a scalar costs
// no temporary value and no move.
value& parser::scalar_slot(type t) {
    value& v = stack_.empty() ? result_ : stack_.back().node.elements.emplace_back();
    v.type = t;
    if (auto& attrs = attribute_slot())
        v.attributes = std::move(attrs);
    return v;
}

void parser::place(value&& v) {
    if (stack_.empty())
        result_ = std::move(v);
    else
        stack_.back().node.elements.push_back(std::move(v));
}

// A value was just stored in result_ or as the last child of stack_.back(): complete every
// aggregate it fills. A loop, not recursion, so depth costs no native stack.
void parser::value_added() {
    for (;;) {
        if (stack_.empty()) {
            done_ = true;
            return;
        }
        if (--stack_.back().remaining != 0)
            return;
        value node = std::move(stack_.back().node);
        stack_.pop_back();
        if (node.type == type::attribute) {
            // Not a value of its own: it waits for the next value at its level. Two attributes
            // in a row describe the same value, so they merge.
            auto& slot = attribute_slot();
            if (!slot)
                slot = std::make_shared<std::vector<value>>(std::move(node.elements));
            else
                std::move(node.elements.begin(), node.elements.end(), std::back_inserter(*slot));
            return;
        }
        place(std::move(node));
    }
}

std::size_t parser::consume_token(std::string_view in, boost::system::error_code& ec) {
    if (in.empty())
        return 0;
    char const tb = in.front();
    if (!check_type_byte(tb, ec))
        return 0;
    std::string_view line;
    std::size_t line_end = 0;
    if (!find_line(in, limits_.max_line_length, line, line_end, ec))
        return 0;
    switch (tb) {
    case '+':
    case '-':
    case ':':
    case ',':
    case '(':
    case '#':
    case '_':
        return consume_simple(tb, line, line_end, ec);
    case '$':
    case '!':
    case '=':
        return consume_blob(tb, in, line, line_end, ec);
    default:
        return consume_aggregate(tb, line, line_end, ec);
    }
}

std::size_t parser::consume_simple(char tb, std::string_view line, std::size_t line_end,
                                   boost::system::error_code& ec) {
    switch (tb) {
    case '+':
    case '-': {
        value& v = scalar_slot(tb == '+' ? type::simple_string : type::simple_error);
        v.text.assign(line);
        break;
    }
    case ':': {
        std::int64_t n = 0;
        if (!parse_int64(line, true, n))
            return fail(ec, error::invalid_number);
        scalar_slot(type::number).integer = n;
        break;
    }
    case ',': {
        double d = 0;
        if (!parse_double(line, d))
            return fail(ec, error::invalid_double);
        scalar_slot(type::double_type).real = d;
        break;
    }
    case '(': {
        std::string_view digits = line;
        bool const plus = !digits.empty() && digits.front() == '+';
        if (plus)
            digits.remove_prefix(1);
        if (!all_digits(!plus && !digits.empty() && digits.front() == '-' ? digits.substr(1)
                                                                          : digits))
            return fail(ec, error::invalid_big_number);
        scalar_slot(type::big_number).text.assign(digits);
        break;
    }
    case '#':
        if (line != "t" && line != "f")
            return fail(ec, error::invalid_boolean);
        scalar_slot(type::boolean).boolean = line == "t";
        break;
    default: // '_'
        if (!line.empty())
            return fail(ec, error::invalid_null);
        scalar_slot(type::null);
        break;
    }
    value_added();
    return line_end;
}

std::size_t parser::consume_blob(char tb, std::string_view in, std::string_view line,
                                 std::size_t line_end, boost::system::error_code& ec) {
    if (line == "?")
        return fail(ec, error::streamed_unsupported);
    std::int64_t declared = 0;
    if (!parse_int64(line, false, declared))
        return fail(ec, error::invalid_number);
    if (declared == -1 && tb == '$') { // RESP2 null bulk string
        scalar_slot(type::null);
        value_added();
        return line_end;
    }
    if (declared < 0)
        return fail(ec, error::negative_length);
    auto const len = static_cast<std::uint64_t>(declared);
    if (len > limits_.max_blob_length)
        return fail(ec, error::blob_too_long);
    // len fits in 63 bits, so len + 2 cannot overflow.
    std::size_t const n = static_cast<std::size_t>(len);
    std::size_t const avail = in.size() - line_end;
    // Check the terminator as soon as it is visible, so a wrong length fails early.
    if (avail > n && in[line_end + n] != '\r')
        return fail(ec, error::missing_crlf);
    if (avail > n + 1 && in[line_end + n + 1] != '\n')
        return fail(ec, error::missing_crlf);
    if (avail < n + 2)
        return 0;
    std::string_view const payload = in.substr(line_end, n);
    if (tb == '=') {
        if (n < 4 || payload[3] != ':')
            return fail(ec, error::invalid_verbatim);
        value& v = scalar_slot(type::verbatim_string);
        v.verbatim_format.assign(payload.substr(0, 3));
        v.text.assign(payload.substr(4));
    } else {
        scalar_slot(tb == '$' ? type::blob_string : type::blob_error).text.assign(payload);
    }
    value_added();
    return line_end + n + 2;
}

std::size_t parser::consume_aggregate(char tb, std::string_view line, std::size_t line_end,
                                      boost::system::error_code& ec) {
    if (line == "?")
        return fail(ec, error::streamed_unsupported);
    std::int64_t declared = 0;
    if (!parse_int64(line, false, declared))
        return fail(ec, error::invalid_number);
    if (declared == -1 && tb == '*') { // RESP2 null array
        scalar_slot(type::null);
        value_added();
        return line_end;
    }
    if (declared < 0)
        return fail(ec, error::negative_length);
    if (stack_.size() >= limits_.max_depth)
        return fail(ec, error::nesting_too_deep);
    auto const count = static_cast<std::uint64_t>(declared);
    if (count > limits_.max_aggregate_size)
        return fail(ec, error::aggregate_too_large);
    bool pairs = false;
    type const t = aggregate_type(tb, pairs);
    // count fits in 63 bits, so doubling it cannot overflow 64 bits.
    auto const children = static_cast<std::size_t>(pairs ? count * 2 : count);
    if (children == 0) {
        if (t == type::attribute) {
            if (!attribute_slot())
                attribute_slot() = std::make_shared<std::vector<value>>();
            return line_end;
        }
        scalar_slot(t);
        value_added();
        return line_end;
    }
    frame f{value{}, children, nullptr};
    f.node.type = t;
    // An attribute describes the value after it, so it does not take the one pending here.
    if (t != type::attribute) {
        if (auto& attrs = attribute_slot())
            f.node.attributes = std::move(attrs);
    }
    f.node.elements.reserve(std::min(children, initial_reserve));
    stack_.push_back(std::move(f));
    return line_end;
}

} // namespace colock::resp3

// libFuzzer target for the RESP3 parser. The first byte picks the limits (the defaults or
// small ones, so every limit is reached); the rest is the stream. It is parsed whole, split at
// offsets drawn from the data, and, when short, byte by byte; all three must agree. Every
// parsed value is written back as RESP3 and must parse to an equal value.
#include <colock/resp3/error.hpp>
#include <colock/resp3/parser.hpp>
#include <colock/resp3/value.hpp>

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace resp3 = colock::resp3;

namespace {

void check(bool ok, char const* what) {
    if (!ok) {
        std::fprintf(stderr, "invariant broken: %s\n", what);
        std::abort();
    }
}

struct outcome {
    std::vector<resp3::value> values;
    boost::system::error_code ec;
    std::size_t leftover = 0; // unconsumed bytes at the end, when no error
};

// Nesting as the parser counts it: an attribute is an aggregate at its value's level.
std::size_t depth_of(resp3::value const& v) {
    std::size_t d = 0;
    for (auto const& e : v.elements)
        d = std::max(d, depth_of(e));
    d += resp3::is_aggregate(v.type) ? 1 : 0;
    if (v.attributes) {
        std::size_t a = 0;
        for (auto const& e : *v.attributes)
            a = std::max(a, depth_of(e));
        d = std::max(d, a + 1);
    }
    return d;
}

void check_limits(resp3::value const& v, resp3::parser_limits const& l) {
    check(v.type != resp3::type::attribute, "an attribute returned as a value");
    check(v.text.size() <= std::max(l.max_blob_length, l.max_line_length), "text over limits");
    std::size_t const per = (v.type == resp3::type::map) ? 2 : 1;
    check(v.elements.size() <= l.max_aggregate_size * per, "aggregate over limit");
    if (resp3::is_aggregate(v.type))
        check(v.elements.size() % per == 0, "map with an odd element count");
    for (auto const& e : v.elements)
        check_limits(e, l);
    if (v.attributes)
        for (auto const& e : *v.attributes)
            check_limits(e, l);
}

// Feeds the chunks as a connection would, checking the parser's contract on every call.
outcome feed(std::vector<std::string_view> const& chunks, resp3::parser_limits const& limits) {
    resp3::parser p{limits};
    outcome out;
    std::string buf;
    for (auto chunk : chunks) {
        buf += chunk;
        for (;;) {
            boost::system::error_code ec;
            std::size_t const n = p.consume(buf, ec);
            check(n <= buf.size(), "consumed more than given");
            if (ec) {
                check(n == 0, "consumed bytes on error");
                check(ec.category() == resp3::error_category(), "foreign error category");
                check(!p.done(), "done after an error");
                boost::system::error_code again;
                check(p.consume(buf, again) == 0 && again == ec, "recovered without reset");
                out.ec = ec;
                return out;
            }
            buf.erase(0, n);
            if (!p.done()) {
                // It stopped for more bytes: the same bytes again must not change that.
                check(p.consume(buf, ec) == 0 && !ec && !p.done(), "stopped early");
                break;
            }
            check(p.consume(buf, ec) == 0 && !ec, "consumed past a completed value");
            out.values.push_back(p.release());
            check(!p.done(), "done after release");
        }
    }
    out.leftover = buf.size();
    return out;
}

bool same(outcome const& a, outcome const& b) {
    return a.values == b.values && a.ec == b.ec && (a.ec || a.leftover == b.leftover);
}

void write_line(std::string& out, char t, std::string_view s) {
    out += t;
    out += s;
    out += "\r\n";
}

void write_length(std::string& out, char t, std::size_t n) {
    char buf[24];
    auto const r = std::to_chars(buf, buf + sizeof buf, n);
    write_line(out, t, std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
}

void serialise(std::string& out, resp3::value const& v) {
    using resp3::type;
    if (v.attributes) {
        write_length(out, '|', v.attributes->size() / 2);
        for (auto const& e : *v.attributes)
            serialise(out, e);
    }
    char buf[40];
    switch (v.type) {
    case type::simple_string:
        return write_line(out, '+', v.text);
    case type::simple_error:
        return write_line(out, '-', v.text);
    case type::blob_string:
    case type::blob_error:
        write_length(out, v.type == type::blob_string ? '$' : '!', v.text.size());
        out += v.text;
        out += "\r\n";
        return;
    case type::verbatim_string:
        check(v.verbatim_format.size() == 3, "verbatim format not three bytes");
        write_length(out, '=', v.text.size() + 4);
        out += v.verbatim_format;
        out += ':';
        out += v.text;
        out += "\r\n";
        return;
    case type::number: {
        auto const r = std::to_chars(buf, buf + sizeof buf, v.integer);
        return write_line(out, ':', std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
    }
    case type::double_type: {
        if (std::isnan(v.real))
            return write_line(out, ',', "nan");
        if (std::isinf(v.real))
            return write_line(out, ',', v.real < 0 ? "-inf" : "inf");
        // Shortest round trip, in a form the RESP3 grammar accepts ("1e+20" has no '.').
        auto const r = std::to_chars(buf, buf + sizeof buf, v.real);
        return write_line(out, ',', std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
    }
    case type::big_number:
        return write_line(out, '(', v.text);
    case type::boolean:
        return write_line(out, '#', v.boolean ? "t" : "f");
    case type::null:
        return write_line(out, '_', "");
    case type::array:
    case type::set:
    case type::push:
    case type::map:
    case type::attribute: {
        char const t = v.type == type::array  ? '*'
                       : v.type == type::set  ? '~'
                       : v.type == type::push ? '>'
                       : v.type == type::map  ? '%'
                                              : '|';
        bool const pairs = v.type == type::map || v.type == type::attribute;
        write_length(out, t, pairs ? v.elements.size() / 2 : v.elements.size());
        for (auto const& e : v.elements)
            serialise(out, e);
        return;
    }
    }
    check(false, "unknown type");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
    if (size == 0)
        return 0;
    resp3::parser_limits limits;
    if (data[0] & 1) {
        limits.max_depth = (data[0] >> 1) & 7;
        limits.max_blob_length = static_cast<std::size_t>((data[0] >> 4) * 3);
        limits.max_aggregate_size = static_cast<std::size_t>((data[0] >> 4) & 7);
        limits.max_line_length = static_cast<std::size_t>(((data[0] >> 2) & 15) + 1);
    }
    std::string_view const input(reinterpret_cast<char const*>(data + 1), size - 1);

    outcome const whole = feed({input}, limits);

    // Split at offsets drawn from the data itself, so the fuzzer steers them too.
    std::vector<std::string_view> chunks;
    std::size_t pos = 0;
    std::uint32_t h = 2166136261u;
    for (unsigned char c : input)
        h = (h ^ c) * 16777619u;
    while (pos < input.size()) {
        h = h * 1103515245u + 12345u;
        std::size_t const len = 1 + (h >> 16) % (input.size() - pos);
        chunks.push_back(input.substr(pos, len));
        pos += len;
    }
    check(same(feed(chunks, limits), whole), "split input parsed differently");

    if (input.size() <= 512) {
        std::vector<std::string_view> bytes;
        for (std::size_t i = 0; i < input.size(); ++i)
            bytes.push_back(input.substr(i, 1));
        check(same(feed(bytes, limits), whole), "byte-wise input parsed differently");
    }

    for (auto const& v : whole.values) {
        check_limits(v, limits);
        check(depth_of(v) <= limits.max_depth, "deeper than max_depth");
        (void)resp3::to_debug_string(v);
        (void)v.as_integer();
        (void)v.as_string();
        check(v == v, "a value unequal to itself");

        std::string again;
        serialise(again, v);
        resp3::parser p; // default limits: the writer's form may be longer than the original
        boost::system::error_code ec;
        std::size_t const n = p.consume(again, ec);
        check(!ec && p.done() && n == again.size(), "re-serialised value does not parse");
        check(p.release() == v, "re-serialised value differs");
    }
    return 0;
}

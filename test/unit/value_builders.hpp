// RESP3 values built by hand, for tests of code that reads replies.
#pragma once

#include <colock/resp3/value.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace colock::test {

/// A value of type `t` that carries `text`: a blob, simple string or simple error.
inline resp3::value text_value(resp3::type t, std::string text) {
    resp3::value v;
    v.type = t;
    v.text = std::move(text);
    return v;
}

inline resp3::value blob(std::string text) {
    return text_value(resp3::type::blob_string, std::move(text));
}

inline resp3::value simple_text(std::string text) {
    return text_value(resp3::type::simple_string, std::move(text));
}

inline resp3::value error_reply(std::string text) {
    return text_value(resp3::type::simple_error, std::move(text));
}

inline resp3::value number(std::int64_t n) {
    resp3::value v;
    v.type = resp3::type::number;
    v.integer = n;
    return v;
}

inline resp3::value aggregate(resp3::type t, std::vector<resp3::value> elements) {
    resp3::value v;
    v.type = t;
    v.elements = std::move(elements);
    return v;
}

inline resp3::value array(std::vector<resp3::value> elements) {
    return aggregate(resp3::type::array, std::move(elements));
}

} // namespace colock::test

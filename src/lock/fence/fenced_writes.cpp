// The batch of writes a fenced resource applies (colock::fenced_writes), as the script takes it:
// each write's words, its keys, and the checks made before any I/O.
#include "lock/fence/fence_text.hpp"

#include <colock/fenced_resource.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace colock {

using detail::fence_text::ms_text;
using detail::fence_text::refuse;
using detail::fence_text::shown;

// ---------------------------------------------------------------------- fenced_writes

std::size_t fenced_writes::use(std::string_view key, shape as, std::string_view what) {
    if (key.empty())
        refuse(fmt::format("fenced write: {} of an empty key", what));
    auto const at = std::find(keys_.begin(), keys_.end(), key);
    std::size_t const index = static_cast<std::size_t>(at - keys_.begin());
    if (at == keys_.end()) {
        keys_.emplace_back(key);
        uses_.emplace_back();
    }
    auto& u = uses_[index];
    if (as != shape::any) {
        if (u.as != shape::any && u.as != as)
            refuse(fmt::format("fenced write: {} of '{}', which the batch writes as a {} too", what,
                               shown(key), u.as == shape::hash ? "hash" : "string"));
        u.as = as;
    }
    return index + 2; // KEYS[1] is the fence key
}

void fenced_writes::add_increment(std::string_view key, std::string_view field, std::int64_t by,
                                  bool hash) {
    std::string_view const what = hash ? "HINCRBY" : "INCRBY";
    auto const k = use(key, hash ? shape::hash : shape::string, what);
    auto& u = uses_[k - 2];
    // The script checks the stored value, not one written earlier in the batch.
    bool const earlier =
        u.written || (hash && std::find(u.fields.begin(), u.fields.end(), field) != u.fields.end());
    if (earlier)
        refuse(fmt::format("fenced write: {} of '{}'{} after another write of it in the batch "
                           "(an increment goes first; add increments up into one)",
                           what, shown(key), hash ? fmt::format(" field '{}'", shown(field)) : ""));
    // The stored value v must keep v + by within 64 bits: lo <= v <= hi.
    constexpr auto min = std::numeric_limits<std::int64_t>::min();
    constexpr auto max = std::numeric_limits<std::int64_t>::max();
    std::int64_t const lo = by < 0 ? min - by : min;
    std::int64_t const hi = by > 0 ? max - by : max;
    words_.emplace_back(hash ? "J" : "I");
    words_.push_back(std::to_string(k));
    if (hash) {
        words_.emplace_back(field);
        u.fields.emplace_back(field);
    } else {
        u.written = true;
    }
    words_.push_back(std::to_string(by));
    words_.push_back(std::to_string(lo));
    words_.push_back(std::to_string(hi));
    ++count_;
}

fenced_writes& fenced_writes::set(std::string_view key, std::string_view value) {
    auto const k = use(key, shape::string, "SET");
    uses_[k - 2].written = true;
    words_.insert(words_.end(), {"S", std::to_string(k), std::string(value)});
    ++count_;
    return *this;
}

fenced_writes& fenced_writes::set(std::string_view key, std::string_view value,
                                  std::chrono::milliseconds ttl) {
    auto ms = ms_text(ttl, "a SET's ttl");
    auto const k = use(key, shape::string, "SET");
    uses_[k - 2].written = true;
    words_.insert(words_.end(), {"P", std::to_string(k), std::string(value), std::move(ms)});
    ++count_;
    return *this;
}

fenced_writes& fenced_writes::hset(std::string_view key, std::string_view field,
                                   std::string_view value) {
    auto const k = use(key, shape::hash, "HSET");
    uses_[k - 2].fields.emplace_back(field);
    words_.insert(words_.end(), {"H", std::to_string(k), std::string(field), std::string(value)});
    ++count_;
    return *this;
}

fenced_writes& fenced_writes::hdel(std::string_view key, std::string_view field) {
    auto const k = use(key, shape::hash, "HDEL");
    uses_[k - 2].fields.emplace_back(field);
    words_.insert(words_.end(), {"D", std::to_string(k), std::string(field)});
    ++count_;
    return *this;
}

fenced_writes& fenced_writes::incr_by(std::string_view key, std::int64_t by) {
    add_increment(key, {}, by, false);
    return *this;
}

fenced_writes& fenced_writes::hincr_by(std::string_view key, std::string_view field,
                                       std::int64_t by) {
    add_increment(key, field, by, true);
    return *this;
}

fenced_writes& fenced_writes::del(std::string_view key) {
    auto const k = use(key, shape::any, "DEL");
    uses_[k - 2].written = true;
    words_.insert(words_.end(), {"X", std::to_string(k)});
    ++count_;
    return *this;
}

fenced_writes& fenced_writes::expire(std::string_view key, std::chrono::milliseconds ttl) {
    auto ms = ms_text(ttl, "an EXPIRE's ttl");
    auto const k = use(key, shape::any, "EXPIRE");
    words_.insert(words_.end(), {"E", std::to_string(k), std::move(ms)});
    ++count_;
    return *this;
}

} // namespace colock

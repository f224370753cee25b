// to_string of every public enumeration: each enumerator has its own name, and a value outside
// the enumeration reads "unknown".
#include <colock/error.hpp>
#include <colock/lock_observer.hpp>
#include <colock/redis/error.hpp>
#include <colock/resp3/error.hpp>
#include <colock/resp3/request.hpp>

#include <doctest/doctest.h>

#include <set>
#include <string>
#include <string_view>

namespace {

// The names of the values first..last (by their underlying numbers), all distinct and none
// "unknown"; the value after last is "unknown".
template <class Enum>
std::set<std::string> names_between(Enum first, Enum last) {
    std::set<std::string> names;
    auto const from = static_cast<int>(first);
    auto const to = static_cast<int>(last);
    for (int v = from; v <= to; ++v) {
        std::string const name{to_string(static_cast<Enum>(v))};
        CHECK_MESSAGE(name != "unknown", "value " << v);
        CHECK_MESSAGE(names.insert(name).second, "value " << v << " repeats " << name);
    }
    CHECK(names.size() == static_cast<std::size_t>(to - from + 1));
    CHECK(to_string(static_cast<Enum>(to + 1)) == std::string_view("unknown"));
    return names;
}

} // namespace

TEST_CASE("to_string names every enumerator of the observer's enumerations") {
    using colock::acquired_by;
    using colock::loss_reason;
    names_between(acquired_by::first_attempt, acquired_by::retained);
    names_between(loss_reason::not_ours, loss_reason::forced);
    CHECK(to_string(acquired_by::local_handoff) == std::string_view("local_handoff"));
    CHECK(to_string(acquired_by::retained) == std::string_view("retained"));
    CHECK(to_string(loss_reason::server_replaced) == std::string_view("server_replaced"));
}

TEST_CASE("to_string names every error enumerator and reply kind") {
    names_between(colock::error::timeout, colock::error::stale_fence);
    names_between(colock::redis::error::server_error, colock::redis::error::invalid_config);
    names_between(colock::resp3::error::invalid_type_byte,
                  colock::resp3::error::attribute_without_value);
    names_between(colock::resp3::reply_kind::ordinary, colock::resp3::reply_kind::unmatchable);
    CHECK(to_string(colock::error::not_held) == std::string_view("not_held"));
    CHECK(to_string(colock::redis::error::connection_lost) == std::string_view("connection_lost"));
    CHECK(to_string(colock::resp3::error::missing_crlf) == std::string_view("missing_crlf"));
    CHECK(to_string(colock::resp3::reply_kind::subscribe) == std::string_view("subscribe"));
}

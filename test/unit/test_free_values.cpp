// The free values a store remembers for its one-key calls (store/free_values): taken once, only
// while they live, forgotten only by the release that remembered them, and bounded.
#include "lock/store/free_values.hpp"
#include "lock/store/lock_arguments.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <string>

using colock::detail::free_values;
using colock::detail::lock_clock;
using namespace std::chrono_literals;

TEST_CASE("free values: a remembered value is taken once, while it lives") {
    free_values values;
    auto const now = lock_clock::now();
    values.remember("p{a}", 41, now + 10s);
    CHECK(values.take("p{b}", now) == std::nullopt);
    CHECK(values.take("p{a}", now) == 41);
    CHECK(values.take("p{a}", now) == std::nullopt); // a grant replaces it
    // One that lapses by the time of the grant is not offered, and is gone.
    values.remember("p{a}", 42, now + 10s);
    CHECK(values.take("p{a}", now + 10s) == std::nullopt);
    CHECK(values.size() == 0);
    // One that has lapsed already is not remembered.
    CHECK(values.remember("p{a}", 43, now - 1ms) == 0);
    CHECK(values.size() == 0);
}

TEST_CASE("free values: a release that did not leave its value forgets only its own entry") {
    free_values values;
    auto const now = lock_clock::now();
    auto const first = values.remember("p{a}", 41, now + 10s);
    auto const second = values.remember("p{a}", 45, now + 10s);
    CHECK(first != second);
    values.forget("p{a}", first); // the older release: a newer one replaced it
    CHECK(values.take("p{a}", now) == 45);
    auto const third = values.remember("p{a}", 46, now + 10s);
    values.forget("p{a}", third);
    CHECK(values.take("p{a}", now) == std::nullopt);
}

TEST_CASE("free values: bounded; lapsed entries make room, live ones are kept") {
    free_values values;
    auto const now = lock_clock::now();
    for (std::size_t i = 0; i < free_values::capacity; ++i)
        values.remember("p{" + std::to_string(i) + "}", 1, now + (i == 0 ? 100ms : 1h));
    CHECK(values.size() == free_values::capacity);
    // Full of live values but one: that one goes, the new one comes in.
    CHECK(values.remember("p{new}", 7, now + 10s) == 0); // nothing has lapsed yet
    lock_clock::advance(200ms);                          // the test clock: the first one lapses
    CHECK(values.remember("p{new}", 7, now + 1h) != 0);
    CHECK(values.size() == free_values::capacity);
    CHECK(values.take("p{0}", lock_clock::now()) == std::nullopt);
    CHECK(values.take("p{new}", lock_clock::now()) == 7);
    // A name already remembered is replaced even when full.
    CHECK(values.remember("p{5}", 9, now + 1h) != 0);
    CHECK(values.take("p{5}", lock_clock::now()) == 9);
    values.clear();
    CHECK(values.size() == 0);
}

TEST_CASE("the one-key calls' arguments: the values the scripts compare, and no fence past 2^53") {
    using colock::detail::held_value;
    auto const a =
        colock::detail::known_acquire_arguments(41, "own", "tok", held_value{42, 7}, 30'000ms);
    REQUIRE(a);
    CHECK((*a)[0] == "F 41");
    CHECK((*a)[1] == "H 42 own tok 7 0");
    CHECK((*a)[2] == "30000");
    // The grant's fence must be one more than the free value's.
    CHECK_FALSE(
        colock::detail::known_acquire_arguments(41, "own", "tok", held_value{43, 7}, 30'000ms));
    CHECK_FALSE(colock::detail::known_acquire_arguments(0, "own", "tok", held_value{1, 7}, 1s));
    auto const r = colock::detail::known_release_arguments("own", "tok", held_value{42, 7}, 45);
    CHECK(r.args[0] == "H 42 own tok 7 0");
    CHECK(r.args[1] == "F 45");
    CHECK(r.free_fence == 45);
    // The stored fence when it is the larger (a Redlock primary's, a renewal's).
    CHECK(colock::detail::known_release_arguments("own", "tok", held_value{50, 7}, 45).free_fence ==
          50);
}

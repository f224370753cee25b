// The tokens that mark a lease's holder in Redis (base/token): 32 lower-case hex digits, never
// the same twice, from a pool that is refilled across its 4 KiB (256 tokens) without repeating.
#include "lock/base/token.hpp"

#include <doctest/doctest.h>

#include <set>
#include <string>

using colock::detail::random_token;

namespace {

bool lower_hex(std::string const& s) {
    for (char const c : s)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
    return true;
}

} // namespace

TEST_CASE("token: 32 lower-case hex digits, 128 bits") {
    auto const t = random_token();
    CHECK(t.size() == 32);
    CHECK(lower_hex(t));
}

TEST_CASE("token: a thousand in a row, across several refills of the pool, are all distinct and "
          "all well formed") {
    std::set<std::string> seen;
    for (int i = 0; i < 1000; ++i) { // the pool holds 256
        auto t = random_token();
        CHECK_MESSAGE(t.size() == 32, t);
        CHECK_MESSAGE(lower_hex(t), t);
        CHECK_MESSAGE(seen.insert(std::move(t)).second, "token " << i << " repeats");
    }
}

TEST_CASE("token: no token is all zeros (the pool's used bytes are never handed out again)") {
    std::string const zeros(32, '0');
    for (int i = 0; i < 600; ++i)
        CHECK(random_token() != zeros);
}

TEST_CASE("token: every hex digit occurs, in high and low nibbles alike") {
    // 300 tokens are 9600 digits: a digit missing from either half would be a broken encoding
    // (by chance the odds are below 1e-100).
    std::set<char> high, low;
    for (int i = 0; i < 300; ++i) {
        auto const t = random_token();
        for (std::size_t j = 0; j < t.size(); j += 2) {
            high.insert(t[j]);
            low.insert(t[j + 1]);
        }
    }
    CHECK(high.size() == 16);
    CHECK(low.size() == 16);
}

TEST_CASE("token: the two digits of a byte are drawn from its two halves: they differ in most "
          "bytes") {
    // Equal digits in every byte would be 64 bits of randomness spelt as 128: in 100 tokens, 3200
    // bytes, about 200 have equal halves by chance.
    int equal = 0, bytes = 0;
    for (int i = 0; i < 100; ++i) {
        auto const t = random_token();
        for (std::size_t j = 0; j < t.size(); j += 2, ++bytes)
            equal += t[j] == t[j + 1];
    }
    CHECK(equal < bytes / 4);
}

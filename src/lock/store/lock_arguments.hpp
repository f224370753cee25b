// The lock scripts' arguments (lock_scripts.hpp says what each means): their order and packing in
// one place, for the store that sends them, the benchmarks that measure them and the tests that
// call the scripts by hand. Pure; private to the library's sources, its tests and benchmarks.
#pragma once

#include "lock/store/lease_types.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace colock::detail {

// The acquire script's ARGV: the holder as the value shows it ("<owner> <token> <since>"), the
// ttl, and "<queueing> <entry ms> <claim ms>".
inline std::array<std::string, 3> acquire_arguments(std::string_view owner, std::string_view token,
                                                    std::int64_t since_ms,
                                                    std::chrono::milliseconds ttl, queueing queue,
                                                    std::chrono::milliseconds entry_ttl,
                                                    std::chrono::milliseconds claim) {
    char const queue_digit = queue == queueing::never       ? '0'
                             : queue == queueing::when_held ? '1'
                                                            : '2';
    return {fmt::format("{} {} {}", owner, token, since_ms), std::to_string(ttl.count()),
            fmt::format("{} {} {}", queue_digit, entry_ttl.count(), claim.count())};
}

// The lock key's value after a grant with nobody queued (what `written` describes): the release
// compares it whole with what it replaces.
inline std::string held_value_text(std::string_view owner, std::string_view token,
                                   held_value const& written) {
    return fmt::format("H {} {} {} {} 0", written.fence, owner, token, written.since_ms);
}

// What a release call does: give the lease of a token back (to a queued locker, or free), or
// take a locker out of the queue.
enum class release_kind {
    hand_on,   // free, or to the first live queued locker
    free_only, // free, never handed on (Redlock's give-back)
    leave,     // the locker's entry out of the queue, passing on a hand-off it was given
};

// The release script's ARGV. `who`: the lease's token, or for `leave` the leaving locker.
// `last_fence`: the largest fence the holder's process gave under the lease (0: none known).
// `written`: the value the grant wrote, when the holder's process knows nothing changed it since
// (then the server frees the lock in one command); `owner` is the holder's locker.
inline std::array<std::string, 3> release_arguments(release_kind kind, std::string_view who,
                                                    std::chrono::milliseconds claim,
                                                    std::int64_t last_fence,
                                                    std::optional<held_value> const& written = {},
                                                    std::string_view owner = {}) {
    char const how = kind == release_kind::hand_on     ? 'h'
                     : kind == release_kind::free_only ? 'f'
                                                       : 'l';
    std::string expected;
    std::int64_t free_fence = std::max<std::int64_t>(0, last_fence);
    // Only with a known fence: a release that gives none (0) must read the stored one.
    if (written && kind != release_kind::leave && last_fence > 0) {
        expected = held_value_text(owner, who, *written);
        free_fence = std::max(free_fence, written->fence);
    }
    return {std::move(expected), fmt::format("F {}", free_fence),
            fmt::format("{} {} {}", claim.count(), how, who)};
}

} // namespace colock::detail

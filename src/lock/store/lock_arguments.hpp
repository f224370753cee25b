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

// The lock key's value after a grant with nobody queued (what `written` describes).
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
inline std::array<std::string, 2> release_arguments(release_kind kind, std::string_view who,
                                                    std::chrono::milliseconds claim,
                                                    std::int64_t last_fence) {
    char const how = kind == release_kind::hand_on     ? 'h'
                     : kind == release_kind::free_only ? 'f'
                                                       : 'l';
    return {fmt::format("F {}", std::max<std::int64_t>(0, last_fence)),
            fmt::format("{} {} {}", claim.count(), how, who)};
}

// The largest fence Lua counts on exactly (lock_scripts.hpp): a grant's is at most this.
inline constexpr std::int64_t largest_exact_fence = 9007199254740991; // 2^53 - 1

// acquire_known's ARGV: the free value this process's release left (with `free_fence`), the
// grant's value (`written`: its fence one more, this request's clock) and the ttl. Nothing when
// one more than `free_fence` is past the fences Lua counts on: the general acquire refuses it.
inline std::optional<std::array<std::string, 3>>
known_acquire_arguments(std::int64_t free_fence, std::string_view owner, std::string_view token,
                        held_value const& written, std::chrono::milliseconds ttl) {
    if (free_fence < 1 || free_fence >= largest_exact_fence || written.fence != free_fence + 1)
        return std::nullopt;
    return std::array<std::string, 3>{fmt::format("F {}", free_fence),
                                      held_value_text(owner, token, written),
                                      std::to_string(ttl.count())};
}

// release_known's ARGV: the value the grant wrote and the free value to leave, with the larger
// of its fence and `last_fence` (the holder's process's last); that fence too.
struct known_release {
    std::array<std::string, 2> args;
    std::int64_t free_fence = 0;
};
inline known_release known_release_arguments(std::string_view owner, std::string_view token,
                                             held_value const& written, std::int64_t last_fence) {
    auto const free_fence = std::max(written.fence, last_fence);
    return {{held_value_text(owner, token, written), fmt::format("F {}", free_fence)}, free_fence};
}

} // namespace colock::detail

// A semaphore's decisions without I/O: its scripts' replies read into results (every shape a
// server or a proxy could send) and the checks of its arguments. What to do after an attempt,
// and when a waiting acquire asks again, are the acquisition machine's (lock/core/
// acquisition.hpp), shared with the lock: a permit is a lease like a lock's. Private to the
// library's sources; tested without a server in test/unit/test_semaphore_policy.cpp.
#pragma once

#include "lock/base/common.hpp"
#include "lock/core/acquire_policy.hpp"
#include "lock/store/lease_store.hpp"
#include "lock/store/script_client.hpp"

#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace colock::detail {

// The largest capacity a semaphore may have, and the most permits one call may take (each is
// a member of the permits' sorted set, written in one command).
inline constexpr std::size_t max_semaphore_capacity = 1'000'000;
inline constexpr std::size_t max_permits_per_call = 1000;

// The acquire script's answer.
struct permit_grant {
    // As grant_result's: the request's failure, or unexpected_reply for a reply of another shape.
    boost::system::error_code ec;
    std::string server_text;
    bool outcome_unknown = false; // it may have run: the token may hold permits
    bool granted = false;
    std::int64_t fence = 0;            // when granted
    std::chrono::milliseconds wait{0}; // not granted: until the first permit held expires
    std::int64_t free = 0;             // not granted: the free permits it saw
    std::optional<std::string> stored; // the capacity at the server, as stored, when it differs
};

// {1, fence}, {0, wait ms, free} or {-1, capacity as stored}.
permit_grant read_permit_grant(script_reply const& reply);

// The release script's (and the extend script's) 1 or 0: `ours`.
lease_reply read_permit_reply(script_reply const& reply);

// The extend script's answer when asked for the weight: 0 not ours, 1 ours and one permit, 2
// ours and more (`weighted`).
struct permit_extension {
    lease_reply reply;
    bool weighted = false;
};
permit_extension read_permit_extension(script_reply const& reply);

// The read script's answer.
struct semaphore_reading {
    boost::system::error_code ec;
    std::string server_text;
    std::optional<std::string> capacity; // as stored; none: nothing stored (nothing held or waited)
    std::int64_t held = 0;               // live permits
    std::int64_t queued = 0;             // waiting calls
};

// {capacity as stored or "", live permits, queued calls}.
semaphore_reading read_semaphore(script_reply const& reply);

// The attempt's answer as the lock's decision reads it (acquire_policy.hpp): not granted is
// "held by others" with `wait` as the holder's time left.
grant_result as_grant_result(permit_grant const& g);

// The message of a semaphore's refusal or failure, naming it: "<what> of semaphore '<name>'...".
// `kind` is what the user made ("semaphore"), `key` the one that holds the capacity, `stored`
// its text there (shown as it is, quoted unless it is a number as this library writes it).
std::string capacity_mismatch_text(std::string_view kind, std::string_view name,
                                   std::string_view key, std::size_t capacity,
                                   std::string_view stored);

// Throws system_error(error::invalid_argument) naming what is wrong: an empty or overlong name,
// a capacity of 0 or above max_semaphore_capacity.
void validate_semaphore(std::string_view name, std::size_t capacity);
// ... permits of 0, above the capacity or above max_permits_per_call.
void validate_permits(std::string_view name, std::size_t capacity, std::size_t permits);

} // namespace colock::detail

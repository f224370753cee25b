// A semaphore's decisions without I/O: the checks of its arguments, its failures' texts, and
// its store's answers as the acquisition machine reads them (the replies themselves are read in
// lock/store/permit_replies.hpp). What to do after an attempt, and when a waiting acquire asks
// again, are the acquisition machine's (lock/core/acquisition.hpp), shared with the lock: a
// permit is a lease like a lock's. Private to the
// library's sources; tested without a server in test/unit/test_semaphore_policy.cpp.
#pragma once

#include "lock/base/common.hpp"
#include "lock/core/acquire_policy.hpp"
#include "lock/store/lease_store.hpp"
#include "lock/store/permit_replies.hpp"

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

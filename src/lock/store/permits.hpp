// A semaphore's holdings as the lease store serves them (a read-write lock is a semaphore whose
// writer takes every permit): the keys, the requests and their answers. The scripts and the
// layout of the keys are in semaphore_scripts.hpp; the readers of the replies in
// permit_replies.hpp. Private to the library's sources.
#pragma once

#include "lock/store/lease_types.hpp"

#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace colock::detail {

// The keys of semaphore `name` under a prefix, all in the hash slot of `{name}`.
struct semaphore_keys {
    std::string key;            // capacity and last fence
    std::string permits_key;    // the holdings, by expiry
    std::string weights_key;    // the weight of each holding of more than one permit
    std::string queue_key;      // the waiting calls, in order
    std::string entries_key;    // each waiting call's entry
    std::string channel_prefix; // + a locker's id: its wake channel
    std::string channel;        // this locker's
    std::string capacity;       // the semaphore's, as the scripts are given it

    semaphore_keys(std::string const& prefix, std::string_view name, std::string_view owner,
                   std::size_t capacity);
};

// A request for `permits` of a semaphore of `capacity` for `token`, for `ttl`; `queue`: wait in
// the server's queue when they are not free (this locker, `owner`, is told on its channel);
// `new_fence`: with a new fence (a writer, a permit) or the last one given (a reader).
struct permit_request {
    std::string const& token;
    std::size_t permits = 1;
    std::size_t capacity = 1;
    std::chrono::milliseconds ttl{0};
    std::string const& owner;
    bool queue = false;
    bool new_fence = true;
};

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

// The extend script's answer; when asked for the weight, also whether the holding weighs more
// than one permit (`weighted`).
struct permit_extension {
    lease_reply reply;
    bool weighted = false;
};

// One holding, as the read script lists it.
struct holding_reading {
    std::string token;
    std::int64_t expiry_ms = 0; // on the server's clock
    std::int64_t permits = 1;
};

// The read script's answer.
struct semaphore_reading {
    boost::system::error_code ec;
    std::string server_text;
    std::optional<std::string> capacity; // as stored; none: nothing stored (nothing held or waited)
    std::int64_t held = 0;               // live permits
    std::int64_t queued = 0;             // waiting calls
    std::string fence;                   // the last one given, as stored; empty: none
    std::int64_t now_ms = 0;             // the server's time
    std::vector<holding_reading> holdings; // the first to expire, as many as asked for
};

} // namespace colock::detail

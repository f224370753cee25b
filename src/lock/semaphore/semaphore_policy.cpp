// A semaphore's decisions without I/O.
#include "lock/semaphore/semaphore_policy.hpp"

#include "lock/store/lock_replies.hpp"

#include <colock/error.hpp>
#include <colock/lock_options.hpp>

#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace colock::detail {

using std::chrono::milliseconds;

grant_result as_grant_result(permit_grant const& g) {
    grant_result r;
    r.ec = g.ec;
    r.server_text = g.server_text;
    r.granted = g.granted;
    r.fence = g.fence;
    r.holder_ttl = g.wait;
    r.outcome_unknown = g.outcome_unknown;
    return r;
}

std::string capacity_mismatch_text(std::string_view kind, std::string_view name,
                                   std::string_view key, std::size_t capacity,
                                   std::string_view stored) {
    // A number as this library writes it is shown as it is; anything else quoted, so that
    // "3.0" is not read as 3.
    bool const canonical = !stored.empty() && stored.size() <= 20 &&
                           stored.find_first_not_of("0123456789") == std::string_view::npos &&
                           (stored.size() == 1 || stored.front() != '0');
    auto const shown =
        canonical ? std::string(stored) : fmt::format("\"{}\"", stored.substr(0, 40));
    return fmt::format("colock: {} '{}' has capacity {} at the server, not {}: every user of a {} "
                       "must give the same capacity (nothing was changed; it is stored in key {})",
                       kind, name, shown, capacity, kind, key);
}

namespace {

[[noreturn]] void refuse(std::string text) {
    throw boost::system::system_error(make_error_code(error::invalid_argument), text);
}

} // namespace

void validate_semaphore(std::string_view name, std::size_t capacity) {
    validate(name, lock_options{});
    if (capacity == 0 || capacity > max_semaphore_capacity)
        refuse(fmt::format("colock: semaphore '{}': capacity must be 1 to {}, got {}", name,
                           max_semaphore_capacity, capacity));
}

void validate_permits(std::string_view name, std::size_t capacity, std::size_t permits) {
    if (permits == 0 || permits > capacity || permits > max_permits_per_call)
        refuse(fmt::format("colock: semaphore '{}': permits must be 1 to {} (its capacity, and "
                           "at most {} per call), got {}",
                           name, std::min(capacity, max_permits_per_call), max_permits_per_call,
                           permits));
}

} // namespace colock::detail

/// \file
/// Errors of the lock layer, with their own category.
#pragma once

#include <boost/system/error_code.hpp>

#include <string_view>
#include <type_traits>

namespace colock {

/// The errors of the lock layer (locker, lock_guard). Their category is error_category();
/// an error_code made from one compares equal to the enumerator (`ec == colock::error::timeout`).
enum class error {
    /// A deadline passed: co_lock's lock_options::wait_timeout before the lock was free, or
    /// release()'s deadline before the server confirmed the release. One code for both,
    /// whatever the token; the message says which.
    timeout = 1,
    /// The lease was lost: the key expired, or was deleted or overwritten from outside.
    lock_lost,
    /// An argument or option was refused before any I/O; the message names it.
    invalid_argument,
    /// The server's answer to a lock script was not of the shape the script returns.
    unexpected_reply,
    /// The guard holds no lock: it was moved from, let go, or never held.
    not_held,
    /// Fewer replicas than lock_options::wait_replicas acknowledged the lock within
    /// replicas_timeout; the lock was released. The message says how many did.
    replicas_not_acknowledged,
    /// Redlock: fewer than a majority of the primaries answered an attempt, an extension or a
    /// release (down, unreachable, or slower than the attempt's timeout). A waiting co_lock,
    /// a renewal and a release try again within their deadlines; the message names each
    /// primary that did not answer, and why.
    no_quorum,
    /// A fenced_resource refused a write: it holds a higher fence, given to a later holder (the
    /// writer's lease ran out meanwhile). Nothing was written; the message names both fences.
    stale_fence,
};

/// The category of colock::error codes; its name() is "colock".
boost::system::error_category const& error_category() noexcept;

/// The enumerator's name (e.g. "not_held"), for logs and metrics labels; "unknown" for a value
/// outside the enumeration. The error_code's message() says what it means.
std::string_view to_string(error e) noexcept;

/// True for a Redis error reply that describes a passing state of the server rather than a
/// refusal: LOADING (a restart reading its data), BUSY (a script runs), TRYAGAIN and
/// CLUSTERDOWN (a Cluster resharding or recovering), MASTERDOWN and READONLY (a failover in
/// progress). The command was not run; a waiting co_lock, a renewal and a release try again
/// within their deadlines. `server_text` is the reply's text, e.g. "LOADING Redis is loading".
bool is_transient_server_error(std::string_view server_text) noexcept;

/// The error_code for `e`, in error_category(). Found by argument-dependent lookup, it lets a
/// colock::error convert to boost::system::error_code.
inline boost::system::error_code make_error_code(error e) noexcept {
    return {static_cast<int>(e), error_category()};
}

} // namespace colock

/// \cond
// Lets colock::error convert to boost::system::error_code. Hidden from the API reference,
// whose parser cannot place a specialisation of another library's template.
template <>
struct boost::system::is_error_code_enum<colock::error> : std::true_type {};
/// \endcond

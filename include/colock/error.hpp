// Errors of the lock layer, with their own category.
#pragma once

#include <boost/system/error_code.hpp>

#include <type_traits>

namespace colock {

enum class error {
    /// co_lock gave up: lock_options::wait_timeout passed before the lock was free.
    timeout = 1,
    /// The lease was lost: the key expired, or was deleted or overwritten from outside.
    lock_lost,
    /// An argument or option was refused before any I/O; the message names it.
    invalid_argument,
    /// The server's answer to a lock script was not of the shape the script returns.
    unexpected_reply,
    /// The guard holds no lock: it was moved from, unlocked, or never locked.
    not_held,
};

boost::system::error_category const& error_category() noexcept;

inline boost::system::error_code make_error_code(error e) noexcept {
    return {static_cast<int>(e), error_category()};
}

} // namespace colock

template <>
struct boost::system::is_error_code_enum<colock::error> : std::true_type {};

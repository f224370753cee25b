// A script's reply as the script client hands it to the readers of lock, semaphore and election
// replies, for their unit tests.
#pragma once

#include "lock/store/script_client.hpp"

#include <colock/resp3/value.hpp>

#include <utility>

namespace colock::test {

/// The reply `v`, answered without an error.
inline detail::script_reply answered(resp3::value v) {
    return detail::script_reply{{}, std::move(v)};
}

} // namespace colock::test

// The semaphore scripts' replies read into the store's results (permits.hpp), as
// lock_replies.hpp reads the lock's: every shape a server or a proxy could send is tested
// without one (test/unit/test_semaphore_policy.cpp). Private to the library's sources.
#pragma once

#include "lock/store/lease_types.hpp"
#include "lock/store/permits.hpp"
#include "lock/store/script_client.hpp"

namespace colock::detail {

// {1, fence}, {0, wait ms, free} or {-1, capacity as stored}.
permit_grant read_permit_grant(script_reply const& reply);

// The release script's (and the extend script's) 1 or 0: `ours`.
lease_reply read_permit_reply(script_reply const& reply);

// The extend script's answer when asked for the weight: 0 not ours, 1 ours and one permit, 2
// ours and more.
permit_extension read_permit_extension(script_reply const& reply);

// {capacity as stored or "", live permits, queued calls}.
semaphore_reading read_semaphore(script_reply const& reply);

} // namespace colock::detail

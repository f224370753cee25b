// The lock scripts' replies read into the lease store's results: pure functions of a
// script_reply, so that every shape a server or a proxy could send (a wrong type, a wrong
// count, a negative or unknown number, an error where a value was due) is tested without one.
// A reply of any shape but the script's own is error::unexpected_reply, shown in server_text,
// and never read as "granted", "done" or "not ours". Private to the library's sources.
#pragma once

#include "lease_store.hpp"
#include "script_client.hpp"

#include <string>

namespace colock::detail {

// The acquire script's {1, fence, others} or {0, holder's pttl, others}. An outcome is unknown
// (outcome_unknown: the lease may be ours) for a failure after the request may have run: a
// lost connection or a garbled reply, not a refusal or a request stopped before it was sent.
grant_result read_grant(script_reply const& reply);

// The text of error::replicas_not_acknowledged for a grant that `acked` acknowledged for
// `wanted`.
std::string replicas_failure_text(wait_reply const& acked, replica_wait const& wanted);

// The extend script's 1 (extended) or 0 (not ours).
lease_reply read_extend(script_reply const& reply);

// The release script's 2 (handed to a queued locker), 1 (freed) or 0 (not ours).
lease_reply read_release(script_reply const& reply);

// The status script's {value or "", pttl, live queue entries, server time}.
lock_reading read_lock(script_reply const& reply);

// HGETALL's map (RESP3) or flat array (RESP2) of string fields.
record_reading read_record(script_reply const& reply);

// The forced unlock's {1, owner, token} or {0}.
forced_unlock_result read_forced_unlock(script_reply const& reply);

} // namespace colock::detail

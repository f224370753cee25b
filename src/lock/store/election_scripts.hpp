// The Lua scripts of an election, beside the lock's (lock_scripts.hpp), whose queue, grant,
// renewal and release a campaign goes through. Private to the library's sources, its tests
// and benchmarks.
//
// Keys of election `name` under prefix p, all in the hash slot of `{name}`:
//   pelection:{name}     the leadership's lock, as any lock's key (with its :q, :qd, :w:)
//   pelection:{name}:e   the term's record (a hash), which lives and ends with the lease: the
//                        extend script renews it, the release script ends it
//                            token    the leader's lease token ("" once handed on, unclaimed)
//                            term     the leader's fence
//                            version  1 for the term's claim, one more at each proclaim
//                            value    what the leader proclaimed
//                            owner    the leader's locker (its holder record names its process)
// Channel pelection:{name}:e, every change in order:
//   "L <term> <version> <ttl ms> <value>"  a leader: a new term (version 1) or a new value
//   "R <term> <version> <claim ms>"        the term ended after that version, handed to a
//                                          queued candidate
//   "N <term> <version>"                   the term ended after that version; nobody leads
//   "E <term> <version> <ttl ms>"          the leader shortened its lease (extend): the record
//                                          now lapses in <ttl ms> unless renewed
// A term and a version name one state of the election on every primary alike (the leader's
// process numbers the versions), so that a watcher can tell a message it has seen (from another
// primary of a quorum) from one it missed (a version skipped).
#pragma once

#include "lock/store/scripts.hpp"

#include <string_view>

namespace colock::detail {

// Proclaim (the campaign's claim of its term, and every new value). KEYS[1] the lock, KEYS[2]
// the record; ARGV[1] the lease's token, ARGV[2] its fence (the term), ARGV[3] the value,
// ARGV[4] the leader's locker, ARGV[5] the version. Writes the record to expire with the lease
// and tells the channel. Returns 1, or 0 when the lease is not ARGV[1]'s (lost meanwhile). A
// repeat after a lost reply changes nothing and tells nobody.
inline constexpr std::string_view proclaim_source = R"lua(
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local token = string.match(v, '^H %d+ %S+ (%S+) %d+ %d$')
if token ~= ARGV[1] then return 0 end
local r = redis.call('HMGET', KEYS[2], 'token', 'version', 'value')
if r[1] == ARGV[1] and r[2] == ARGV[5] and r[3] == ARGV[3] then return 1 end
-- The lease's end read before the record is written: a refusal of PEXPIRETIME (an ACL user
-- without it) then leaves no record without an expiry behind.
local ends = redis.call('PEXPIRETIME', KEYS[1])
redis.call('HSET', KEYS[2], 'token', ARGV[1], 'term', ARGV[2], 'version', ARGV[5], 'value',
           ARGV[3], 'owner', ARGV[4])
redis.call('PEXPIREAT', KEYS[2], ends)
local ttl = redis.call('PTTL', KEYS[2])
redis.pcall('PUBLISH', KEYS[2], 'L ' .. ARGV[2] .. ' ' .. ARGV[5] .. ' ' .. ttl .. ' ' .. ARGV[3])
return 1
)lua";

// Reads the election. KEYS[1] the lock, KEYS[2] the record. Returns {the lock's value or "",
// the record's token, term, value, version and owner (each "" when absent), the record's
// PTTL}.
inline constexpr std::string_view election_read_source = R"lua(
local r = redis.call('HMGET', KEYS[2], 'token', 'term', 'value', 'version', 'owner')
return {redis.call('GET', KEYS[1]) or '', r[1] or '', r[2] or '', r[3] or '', r[4] or '',
        r[5] or '', redis.call('PTTL', KEYS[2])}
)lua";

} // namespace colock::detail

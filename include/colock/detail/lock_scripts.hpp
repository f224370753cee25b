// The Lua scripts of the lock algorithm. In a header of their own so that tools (the
// benchmark measuring the server's limit for them) run exactly what the library runs.
#pragma once

#include <string_view>

namespace colock::detail {

// KEYS[1] lock key, KEYS[2] fence key; ARGV[1] token, ARGV[2] ttl ms.
// Returns {1, fence} when acquired (or already ours: a retry after a lost reply), else
// {0, remaining ttl ms of the holder}.
// The fence is max(last fence + 1, the server's clock in microseconds): strictly increasing,
// and still larger than every earlier fence after a restart that lost the fence key, as long
// as the server's clock does not step back. (Lua numbers are doubles: exact up to 2^53, which
// microseconds since 1970 stay below for another two centuries.)
// Every key expires: the fence key lives as long as the lock key (extend moves both), so a
// name that is no longer used leaves nothing behind. Once the fence key has lapsed, the next
// fence comes from the clock, which by then is past every earlier fence: each fence was the
// clock at its grant, or at most a few increments above it (one per script run within the
// same microsecond), and the key lapses at least one ttl (>= 1 ms) after the last grant.
inline constexpr std::string_view acquire_source = R"lua(
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  local now = redis.call('TIME')
  local fence = math.max(tonumber(redis.call('GET', KEYS[2]) or '0') + 1,
                         tonumber(now[1]) * 1000000 + tonumber(now[2]))
  redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[2])
  return {1, fence}
end
return {0, redis.call('PTTL', KEYS[1])}
)lua";

// KEYS[1] lock key; ARGV[1] token, ARGV[2] wake channel. 1 when released, 0 when not ours.
// The wake-up is a courtesy: pcall, so that a user without permission for the channel (Redis 7
// gives a new ACL user none) still releases, and its waiters find out by polling.
inline constexpr std::string_view release_source = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.pcall('PUBLISH', ARGV[2], '1')
  return 1
end
return 0
)lua";

// KEYS[1] lock key, KEYS[2] fence key; ARGV[1] token, ARGV[2] ttl ms. 1 when extended, 0 when
// not ours. The fence key's expiry follows the lock's, so it outlives no lease it numbered.
inline constexpr std::string_view extend_source = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
return 0
)lua";

} // namespace colock::detail

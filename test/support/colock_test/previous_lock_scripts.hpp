// The lock's scripts as the previous release runs them: a frozen copy of the Lua of
// src/lock/store/lock_scripts.hpp at commit 7700996 (version 0.1.0 with its unreleased changes),
// the last state before issue 46's leaner scripts and versioned key format. Frozen, not included
// from src/: the differential test (test/integration/test_lock_script_differential.cpp) runs the
// same random steps through these and through today's scripts and wants every reply, state,
// wake-up and TTL the same, and the mixed-fleet test runs both releases on the same names. The one
// intended copy of library code in the tests: never edit it to follow src/, only add a newer
// release beside it when one ships.
//
// The value format they read and write (the reference is lock_scripts.hpp at that commit):
//   p{name}      "H <fence> <owner> <token> <since> <queued>" held (queued: 0 nobody, 1 only the
//                holder's own locker, 2 another locker), "R <fence> <owner>" handed to locker
//                `owner` to claim (owner "-" after a forced unlock), "F <fence>" free
//   p{name}:q    the queued lockers in arrival order (a list)
//   p{name}:qd   each queued locker's deadline in the server's milliseconds (a hash)
// Wake-ups: p{name}:w:<owner> "g" (handed to it), "q" (another locker queued behind its lease);
// p locker:<owner> "f <token> <lock key>" (its lease was ended by a forced unlock).
#pragma once

#include <string_view>

namespace colock::test::previous {

// KEYS lock, queue, deadlines. ARGV token, ttl ms, owner, queueing "0" / "1" / "2", the queue
// entry's lifetime ms, the channel prefix p{name}:w:, the client's time ms, the claim's ms.
// {1, fence, others} or the bare fence when granted, {0, remaining ms, others} when not.
inline constexpr std::string_view acquire_source = R"lua(
local v = redis.call('GET', KEYS[1])
-- The uncontended path, before the general one below defines its functions (each run pays
-- for the closures it creates): a free lock, taken by a call that does not stay queued. It does
-- what grant(fence + 1, false) below does then, and must keep doing so.
if v and ARGV[4] ~= '2' and string.sub(v, 1, 2) == 'F ' then
  local fence = string.match(v, '^F (%d+)$')
  if fence and tonumber(fence) < 9007199254740991 then
    fence = tonumber(fence) + 1
    redis.call('SET', KEYS[1], 'H ' .. string.format('%.0f', fence) .. ' ' .. ARGV[3] .. ' ' ..
               ARGV[1] .. ' ' .. ARGV[7] .. ' 0', 'PX', ARGV[2])
    return fence
  end
end
local function enqueue()
  local t = redis.call('TIME')
  local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[5])
  if redis.call('HSET', KEYS[3], ARGV[3], string.format('%.0f', deadline)) == 1 then
    redis.call('RPUSH', KEYS[2], ARGV[3])
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
  redis.call('PEXPIRE', KEYS[3], ARGV[5])
end
-- `queue_may_exist`: the queue may hold other lockers.
local function grant(fence, queue_may_exist)
  local queued = 0
  if ARGV[4] == '2' then enqueue() end
  if queue_may_exist then
    local others = redis.call('LLEN', KEYS[2])
    if ARGV[4] == '2' then others = others - 1 end
    if others > 0 then queued = 2 elseif ARGV[4] == '2' then queued = 1 end
  elseif ARGV[4] == '2' then
    queued = 1
  end
  redis.call('SET', KEYS[1], 'H ' .. string.format('%.0f', fence) .. ' ' .. ARGV[3] .. ' ' ..
             ARGV[1] .. ' ' .. ARGV[7] .. ' ' .. queued, 'PX', ARGV[2])
  if queued == 2 then return {1, fence, 1} end
  return fence
end
-- A fence Lua counts on exactly: below 2^53 - 1, so that one more is exact too.
local function exact(fence)
  return fence and tonumber(fence) < 9007199254740991
end
if not v then
  local t = redis.call('TIME')
  local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local queue_exists = redis.call('EXISTS', KEYS[2]) == 1
  if queue_exists then
    -- A lease that lapsed (its holder dead) or a forced unlock's quarantine that ended: the
    -- lock goes to the first live entry, as a release hands it, not to whoever asks first.
    local now = math.floor(fence / 1000)
    while true do
      local head = redis.call('LINDEX', KEYS[2], 0)
      if not head or head == ARGV[3] then break end
      redis.call('LPOP', KEYS[2])
      local live = tonumber(redis.call('HGET', KEYS[3], head) or '0') >= now
      redis.call('HDEL', KEYS[3], head)
      if live then
        redis.call('SET', KEYS[1], 'R ' .. string.format('%.0f', fence) .. ' ' .. head, 'PX',
                   ARGV[8])
        redis.pcall('PUBLISH', ARGV[6] .. head, 'g')
        if ARGV[4] ~= '0' then enqueue() end
        return {0, tonumber(ARGV[8]), 0}
      end
    end
    if redis.call('HDEL', KEYS[3], ARGV[3]) == 1 then
      redis.call('LREM', KEYS[2], 1, ARGV[3])
    end
  end
  return grant(fence, queue_exists)
end
local kind = string.sub(v, 1, 2)
if kind == 'F ' then
  local fence = string.match(v, '^F (%d+)$')
  if exact(fence) then return grant(tonumber(fence) + 1, false) end
elseif kind == 'R ' then
  local fence, owner = string.match(v, '^R (%d+) (%S+)$')
  if exact(fence) then
    if owner == ARGV[3] then return grant(tonumber(fence) + 1, true) end
    if ARGV[4] ~= '0' then enqueue() end
    return {0, redis.call('PTTL', KEYS[1]), 0}
  end
elseif kind == 'H ' then
  local fence, owner, token, queued = string.match(v, '^H (%d+) (%S+) (%S+) %d+ (%d)$')
  if exact(fence) then
    if token == ARGV[1] then
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
      if queued == '2' then return {1, tonumber(fence), 1} end
      return tonumber(fence)
    end
    if ARGV[4] ~= '0' then
      enqueue()
      local now_queued = queued
      if owner ~= ARGV[3] then now_queued = '2' elseif queued == '0' then now_queued = '1' end
      if now_queued ~= queued then
        redis.call('SET', KEYS[1], string.sub(v, 1, -2) .. now_queued, 'KEEPTTL')
      end
      -- At every attempt of another locker, not only the first: a message the holder's locker
      -- missed (not yet subscribed) would otherwise let its cohort go on for good.
      if owner ~= ARGV[3] then redis.pcall('PUBLISH', ARGV[6] .. owner, 'q') end
      return {0, redis.call('PTTL', KEYS[1]), (owner == ARGV[3] and now_queued == '2') and 1 or 0}
    end
    if owner == ARGV[3] then
      return {0, redis.call('PTTL', KEYS[1]), queued == '2' and 1 or 0}
    end
    return {0, redis.call('PTTL', KEYS[1]), 0}
  end
end
-- Not a value this script writes (set by hand, a negative time, a fence of 2^53 or more, which
-- Lua's numbers cannot count on): refused, naming the key, rather than waited on or counted
-- from wrongly.
return redis.error_reply('COLOCK the lock key ' .. KEYS[1] .. ' holds "' .. string.sub(v, 1, 80) ..
                         '", which is not a lock state colock writes (a fence must be below ' ..
                         '2^53 - 1); delete the key to use the lock')
)lua";

// KEYS lock, queue, deadlines[, the lease's record]. ARGV token (or "" to leave), the channel
// prefix, the claim's ms, the leaving locker, the last fence given, "1" to leave it free.
// 2 handed to a queued locker, 1 released free (or left), 0 not held by the token.
inline constexpr std::string_view release_source = R"lua(
local v = redis.call('GET', KEYS[1])
-- The uncontended path, before the general one below defines its functions (each run pays
-- for the closures it creates): our lease, nobody queued, no record. It does what the general
-- path does then (the same match, put() and the larger fence), and must keep doing so.
if ARGV[1] ~= '' and v and not KEYS[4] then
  local fence, token, queued = string.match(v, '^H (%d+) %S+ (%S+) %d+ (%d)$')
  if fence and token == ARGV[1] and queued == '0' then
    local last = tonumber(ARGV[5] or '0') or 0
    if last > tonumber(fence) then fence = string.format('%.0f', last) end
    if redis.pcall('SET', KEYS[1], 'F ' .. fence, 'KEEPTTL').err then
      redis.call('DEL', KEYS[1])
    end
    return 1
  end
end
-- Writes `value` (with `expiry`) or, on a full server (maxmemory with noeviction refuses the
-- SET), deletes the key: a release must free the lock even then. The fence then comes from
-- the clock again.
local function put(value, ...)
  if redis.pcall('SET', KEYS[1], value, ...).err then redis.call('DEL', KEYS[1]) end
end
local function grant_to(fence, owner)
  redis.call('HDEL', KEYS[3], owner)
  put('R ' .. fence .. ' ' .. owner, 'PX', ARGV[3])
  redis.pcall('PUBLISH', ARGV[2] .. owner, 'g')
end
-- To the first live entry; the releasing process's own entry (`releasing`) goes behind the
-- others, so that a cohort giving the lock up is not handed it straight back.
local function hand_off(fence, releasing)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local deferred = nil
  local deferred_left = 0
  while true do
    local owner = redis.call('LPOP', KEYS[2])
    if not owner then break end
    local deadline = tonumber(redis.call('HGET', KEYS[3], owner) or '0')
    if deadline < now then
      redis.call('HDEL', KEYS[3], owner)
    elseif owner == releasing and not deferred then
      deferred = owner
      deferred_left = deadline - now + 1
    else
      if deferred then
        -- The LPOPs may have emptied the list, and so deleted it with its expiry: the RPUSH
        -- then makes a new one, which must expire too (with the entry it holds, at least).
        redis.call('RPUSH', KEYS[2], deferred)
        if redis.call('PTTL', KEYS[2]) < deferred_left then
          redis.call('PEXPIRE', KEYS[2], deferred_left)
        end
      end
      grant_to(fence, owner)
      return true
    end
  end
  if deferred then
    grant_to(fence, deferred)
    return true
  end
  return false
end
if ARGV[1] == '' then
  if redis.call('HDEL', KEYS[3], ARGV[4]) == 1 then redis.call('LREM', KEYS[2], 1, ARGV[4]) end
  if not v then return 1 end
  local fence, owner = string.match(v, '^R (%d+) (%S+)$')
  if owner == ARGV[4] and not hand_off(fence, '') then
    put('F ' .. fence, 'KEEPTTL')
  end
  return 1
end
if not v then return 0 end
local fence, holder, token, queued = string.match(v, '^H (%d+) (%S+) (%S+) %d+ (%d)$')
if not fence or token ~= ARGV[1] then return 0 end
-- The lease's record (an election's term), when it has one, ends with the lease; its channel
-- is told: "R <term> <version> <claim ms>" handed to a queued locker, which claims it at once
-- (else the record lapses with the claim), "N <term> <version>" nobody leads. See
-- election_scripts.hpp.
local function end_record(handed)
  if not KEYS[4] then return end
  local r = redis.call('HMGET', KEYS[4], 'token', 'term', 'version')
  if r[1] ~= ARGV[1] then return end
  local told = (r[2] or '0') .. ' ' .. (r[3] or '0')
  local kept = handed and redis.pcall('HSET', KEYS[4], 'token', '')
  if kept and type(kept) ~= 'table' then
    redis.call('PEXPIRE', KEYS[4], ARGV[3])
    redis.pcall('PUBLISH', KEYS[4], 'R ' .. told .. ' ' .. ARGV[3])
  else
    redis.call('DEL', KEYS[4])
    redis.pcall('PUBLISH', KEYS[4], 'N ' .. told)
  end
end
local last = tonumber(ARGV[5] or '0') or 0
if last > tonumber(fence) then fence = string.format('%.0f', last) end
if queued ~= '0' and ARGV[6] ~= '1' and hand_off(fence, holder) then
  end_record(true)
  return 2
end
put('F ' .. fence, 'KEEPTTL')
end_record(false)
return 1
)lua";

// KEYS lock[, the lease's record]. ARGV token, ttl ms, the holder's fence. 1 extended, 0 not ours.
inline constexpr std::string_view extend_source = R"lua(
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local fence, rest, token = string.match(v, '^H (%d+) (%S+ (%S+) %d+ %d)$')
if not fence or token ~= ARGV[1] then return 0 end
-- PEXPIRE first: it needs no memory, so the lease is renewed on a full server (maxmemory with
-- noeviction) too. Redis refuses a script's commands that need memory only before its first
-- write, so the SET that stores a larger fence then runs as well; pcall all the same, so that
-- a refusal could only leave the stored fence as it was, never the lease unrenewed.
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if KEYS[2] then
  local r = redis.call('HMGET', KEYS[2], 'token', 'term', 'version')
  if r[1] == ARGV[1] then
    local before = redis.call('PTTL', KEYS[2])
    redis.call('PEXPIRE', KEYS[2], ARGV[2])
    -- A shorter lease is told (a watch looks again when the record would lapse, else at its
    -- old end); a renewal, which lengthens it, is not.
    if before > tonumber(ARGV[2]) then
      redis.pcall('PUBLISH', KEYS[2], 'E ' .. r[2] .. ' ' .. r[3] .. ' ' .. ARGV[2])
    end
  end
end
local wanted = tonumber(ARGV[3] or '0') or 0
if wanted > tonumber(fence) then
  redis.pcall('SET', KEYS[1], 'H ' .. string.format('%.0f', wanted) .. ' ' .. rest, 'KEEPTTL')
end
return 1
)lua";

// KEYS as for acquire. {value or "", its PTTL, live queue entries, the server's time ms}.
inline constexpr std::string_view status_source = R"lua(
local v = redis.call('GET', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadlines = redis.call('HGETALL', KEYS[3])
local live = 0
for i = 2, #deadlines, 2 do
  if (tonumber(deadlines[i]) or 0) >= now then live = live + 1 end
end
return {v or '', pttl, live, now}
)lua";

// KEYS lock, the lease's record's key. ARGV the longest quarantine ms, the prefix where the
// holder's locker is told (or ""). {1, owner, token} when a lease was ended, {0} when not held.
inline constexpr std::string_view force_unlock_source = R"lua(
local v = redis.call('GET', KEYS[1])
if not v then return {0} end
local fence, owner, token = string.match(v, '^H (%d+) (%S+) (%S+) %d+ %d$')
if not fence then return {0} end
local left = redis.call('PTTL', KEYS[1])
local quarantine = tonumber(ARGV[1])
if left >= 0 and left < quarantine then quarantine = left end
if quarantine < 1 then quarantine = 1 end
redis.call('SET', KEYS[1], 'R ' .. fence .. ' -', 'PX', quarantine)
-- The lease's record (an election's term) ends with it, and its watchers are told nobody leads.
-- HGET first: a lock has no record, and its ACL user needs no HMGET.
if KEYS[2] and redis.call('HGET', KEYS[2], 'token') == token then
  local r = redis.call('HMGET', KEYS[2], 'term', 'version')
  redis.call('DEL', KEYS[2])
  redis.pcall('PUBLISH', KEYS[2], 'N ' .. (r[1] or '0') .. ' ' .. (r[2] or '0'))
end
if ARGV[2] ~= '' then
  redis.pcall('PUBLISH', ARGV[2] .. owner, 'f ' .. token .. ' ' .. KEYS[1])
end
return {1, owner, token}
)lua";

} // namespace colock::test::previous

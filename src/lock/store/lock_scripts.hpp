// The Lua scripts of the lock algorithm. In a header of their own so that tools (the
// benchmark measuring the server's limit for them) run exactly what the library runs. Private to
// the library's sources, its tests and benchmarks: not installed.
//
// Key format 1 (unmarked: the values of every release so far). A later format will mark its
// values "<format>:..."; these scripts refuse such a value, naming the key and both formats,
// rather than read it (docs/operations.md, "Sharing a server between releases").
// Keys of lock `name` under prefix p, all in the hash slot of `{name}`:
//   p{name}      the lock: one string, with the last fence folded in
//                  "H <fence> <owner> <token> <since> <queued>"  held by `token` of locker
//                        `owner` since <since> (the holder's clock, ms since 1970, for status);
//                        <queued>: 0 nobody queued, 1 only the holder's own locker,
//                        2 another locker (the holder's process is told "q" at each of
//                        that locker's attempts, at least every queue_refresh_interval)
//                  "R <fence> <owner>"  handed to locker `owner`, which is told and claims
//                                       it (a short expiry: the claim), by a release or by
//                                       an attempt that found the key gone while `owner`
//                                       headed the queue; owner "-" after a forced unlock:
//                                       claimed by nobody, it lapses
//                  "F <fence>"          free; kept for the rest of the last lease so the
//                                       next fence is one more
//   p{name}:q    the processes waiting, one entry per locker, in arrival order (a list)
//   p{name}:qd   each queued locker's deadline in the server's milliseconds (a hash); a
//                process refreshes it while it waits, so a dead one's entry lapses
// Channel p{name}:w:<owner>: messages to locker `owner` alone: "g" the lock was handed to it,
// "q" another locker queued behind the lease it holds.
// Per locker, outside any lock's slot: p locker:<owner> is its record (a hash: host, pid,
// program, client_name, started), kept while it holds leases, and the channel of the same name
// tells it "f <token> <lock key>": its lease was ended by a forced unlock.
//
// Fences: the value's fence + 1, or the server's clock in microseconds when the key is absent
// (never used, or lapsed; a hand-off of an absent key to the queue's head stores the clock, its
// claim adds one). A holder's process hands the lease to its own waiters without a
// script, numbering them on from the lease's fence, and the release stores the last of those.
// Strictly increasing: each fence is the clock at its grant or a few increments above it (one
// per script run within the same microsecond; the process gives at most one local fence per
// microsecond since the grant), and the key lapses at least 1 ms (1000 increments) after the
// last grant, so by then the clock is past every earlier fence, as long as it does not step
// back. (Lua numbers are doubles: exact up to 2^53,
// which microseconds since 1970 stay below for another two centuries.)
#pragma once

#include "lock/store/scripts.hpp"

#include <string_view>

namespace colock::detail {

// KEYS[1] lock, KEYS[2] queue, KEYS[3] queue deadlines (lock_arguments.hpp builds the ARGV).
// ARGV[1] the holder as the value shows it: "<owner> <token> <since>", the locker, the lease's
// token and the time of the request on the client's clock (ms since 1970, for status); ARGV[2]
// the ttl in ms; ARGV[3] "<queueing> <entry ms> <claim ms>": queueing "0" never (co_try_lock),
// "1" queue the owner when held, "2" also keep it queued after a grant (more of its waiters are
// behind this one); the queue entry's lifetime; the claim's length (as the release's). The
// channels are named after KEYS[1] (p{name}:w:<owner>).
// A key that is absent (never used, a lease that lapsed, a forced unlock's quarantine over) goes
// to the first live entry of the queue, as a release hands it: when that is another locker, the
// key becomes "R <the clock's fence> <that locker>" for the claim, that locker is told, and the
// asker, queued behind (unless queueing is "0"), waits. So a holder's death keeps the queue's
// order.
// Returns {1, fence, others} when granted (or already ours: a retry after a lost reply is
// idempotent), else {0, remaining ms of the holder's lease or of the claim, others}; `others`
// is 1 when the lease is (or would be) ours and another locker is queued for it. A grant with
// `others` 0 answers the bare fence instead (at least 1; a number, or its decimal text on the
// uncontended path): that reply costs the server less to send. An error reply "COLOCK ..."
// naming the key when its value is none of the states above (and the key format when it is one
// of a later release).
inline constexpr std::string_view acquire_source = R"lua(
local v = redis.call('GET', KEYS[1])
-- The uncontended path, before the general one below defines its functions (each run pays
-- for the closures it creates): a free lock, taken by a call that does not stay queued. It does
-- what grant(fence + 1, false) below does then, and must keep doing so. The next fence is
-- counted on the text (string.format costs more than the rest of this path): a last digit below
-- 9 goes up by one; a fence that must carry is formatted. Fences below 2^53 - 1 only (see
-- exact() below), and no leading zero, so that the text is the number's.
if v and string.byte(ARGV[3]) ~= 50 then
  local last = string.match(v, '^F ([1-9]%d*)$')
  if last and (#last < 16 or (#last == 16 and last < '9007199254740991')) then
    local digit = string.byte(last, -1)
    local fence
    if digit < 57 then
      fence = string.sub(last, 1, -2) .. string.char(digit + 1)
    else
      fence = string.format('%.0f', tonumber(last) + 1)
    end
    redis.call('SET', KEYS[1], 'H ' .. fence .. ' ' .. ARGV[1] .. ' 0', 'PX', ARGV[2])
    return fence
  end
end
local owner, token = string.match(ARGV[1], '^(%S+) (%S+) %d+$')
local queueing, entry_ms, claim_ms = string.match(ARGV[3], '^([012]) (%d+) (%d+)$')
if not owner or not queueing then
  return redis.error_reply('COLOCK the acquire of ' .. KEYS[1] .. ' got arguments it cannot ' ..
                           'read: a client of another release of colock?')
end
local channels = KEYS[1] .. ':w:'
local function enqueue()
  local t = redis.call('TIME')
  local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(entry_ms)
  if redis.call('HSET', KEYS[3], owner, string.format('%.0f', deadline)) == 1 then
    redis.call('RPUSH', KEYS[2], owner)
  end
  redis.call('PEXPIRE', KEYS[2], entry_ms)
  redis.call('PEXPIRE', KEYS[3], entry_ms)
end
-- `queue_may_exist`: the queue may hold other lockers.
local function grant(fence, queue_may_exist)
  local queued = 0
  if queueing == '2' then enqueue() end
  if queue_may_exist then
    local others = redis.call('LLEN', KEYS[2])
    if queueing == '2' then others = others - 1 end
    if others > 0 then queued = 2 elseif queueing == '2' then queued = 1 end
  elseif queueing == '2' then
    queued = 1
  end
  redis.call('SET', KEYS[1], 'H ' .. string.format('%.0f', fence) .. ' ' .. ARGV[1] .. ' ' ..
             queued, 'PX', ARGV[2])
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
      if not head or head == owner then break end
      redis.call('LPOP', KEYS[2])
      local live = tonumber(redis.call('HGET', KEYS[3], head) or '0') >= now
      redis.call('HDEL', KEYS[3], head)
      if live then
        redis.call('SET', KEYS[1], 'R ' .. string.format('%.0f', fence) .. ' ' .. head, 'PX',
                   claim_ms)
        redis.pcall('PUBLISH', channels .. head, 'g')
        if queueing ~= '0' then enqueue() end
        return {0, tonumber(claim_ms), 0}
      end
    end
    if redis.call('HDEL', KEYS[3], owner) == 1 then
      redis.call('LREM', KEYS[2], 1, owner)
    end
  end
  return grant(fence, queue_exists)
end
local kind = string.sub(v, 1, 2)
if kind == 'F ' then
  local fence = string.match(v, '^F (%d+)$')
  if exact(fence) then return grant(tonumber(fence) + 1, false) end
elseif kind == 'R ' then
  local fence, handed_to = string.match(v, '^R (%d+) (%S+)$')
  if exact(fence) then
    if handed_to == owner then return grant(tonumber(fence) + 1, true) end
    if queueing ~= '0' then enqueue() end
    return {0, redis.call('PTTL', KEYS[1]), 0}
  end
elseif kind == 'H ' then
  local fence, holder, held_by, queued = string.match(v, '^H (%d+) (%S+) (%S+) %d+ (%d)$')
  if exact(fence) then
    if held_by == token then
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
      if queued == '2' then return {1, tonumber(fence), 1} end
      return tonumber(fence)
    end
    if queueing ~= '0' then
      enqueue()
      local now_queued = queued
      if holder ~= owner then now_queued = '2' elseif queued == '0' then now_queued = '1' end
      if now_queued ~= queued then
        redis.call('SET', KEYS[1], string.sub(v, 1, -2) .. now_queued, 'KEEPTTL')
      end
      -- At every attempt of another locker, not only the first: a message the holder's locker
      -- missed (not yet subscribed) would otherwise let its cohort go on for good.
      if holder ~= owner then redis.pcall('PUBLISH', channels .. holder, 'q') end
      return {0, redis.call('PTTL', KEYS[1]), (holder == owner and now_queued == '2') and 1 or 0}
    end
    if holder == owner then
      return {0, redis.call('PTTL', KEYS[1]), queued == '2' and 1 or 0}
    end
    return {0, redis.call('PTTL', KEYS[1]), 0}
  end
end
-- A value of a later release's key format ("<format>:..."): refused, naming both formats, never
-- read as one of ours (docs/operations.md, "Sharing a server between releases").
local format = string.match(v, '^(%d+):')
if format then
  return redis.error_reply('COLOCK the lock key ' .. KEYS[1] .. ' holds a value in key format ' ..
                           format .. ', which a later release of colock writes; this release ' ..
                           'reads key format 1 only: upgrade it to share the lock')
end
-- Not a value this script writes (set by hand, a negative time, a fence of 2^53 or more, which
-- Lua's numbers cannot count on): refused, naming the key, rather than waited on or counted
-- from wrongly.
return redis.error_reply('COLOCK the lock key ' .. KEYS[1] .. ' holds "' .. string.sub(v, 1, 80) ..
                         '", which is not a lock state colock writes (a fence must be below ' ..
                         '2^53 - 1); delete the key to use the lock')
)lua";

// Release and leave. KEYS as for acquire, and KEYS[4] the lease's record when it has one
// (lock_arguments.hpp builds the ARGV). ARGV[1] the value a release with nobody queued leaves,
// "F <last fence>": the largest fence the holder's process gave (its own waiters' turns, and the
// grant's), stored when larger than the key's ("F 0": none given); ARGV[2] "<claim ms> <how>
// <who>": the claim's length; how "h" release and hand the lock on, "f" release and leave it
// free rather than hand it to a queued locker (Redlock gives back the grants of an acquisition
// without a majority so: handed to another waiter that is itself giving back, they would only
// trade places), "l" take locker <who> out of the queue (its waiters left); who: the holder's
// token ("h", "f") or the leaving locker ("l"). The channels are named after KEYS[1]. A release
// of a lock some process is queued for hands it to the first live entry (its fence stays, the
// next grant adds one) and tells that process alone; the releasing process's own entry goes
// behind the others. Otherwise it leaves the lock free. A leaving locker that was handed the
// lock passes it on the same way. 2 when handed to a queued locker, 1 when released free (or
// left), 0 when the token does not hold the lock.
// The wake-up is a courtesy: pcall, so that a user without permission for the channel (Redis 7
// gives a new ACL user none) still releases; its waiters find their turn by polling.
inline constexpr std::string_view release_source = R"lua(
local v = redis.call('GET', KEYS[1])
local claim_ms, how, who = string.match(ARGV[2], '^(%d+) ([hfl]) (%S+)$')
if not claim_ms then
  return redis.error_reply('COLOCK the release of ' .. KEYS[1] .. ' got arguments it cannot ' ..
                           'read: a client of another release of colock?')
end
-- Our lease, nobody queued, no record: freed before the general path below defines its
-- functions (each run pays for the closures it creates). It does what the general path does
-- then (the same match, put() and the larger fence), and must keep doing so.
if how ~= 'l' and v and not KEYS[4] then
  local fence, token, queued = string.match(v, '^H (%d+) %S+ (%S+) %d+ (%d)$')
  if fence and token == who and queued == '0' then
    local last = tonumber(string.sub(ARGV[1], 3)) or 0
    if last > tonumber(fence) then fence = string.format('%.0f', last) end
    if redis.pcall('SET', KEYS[1], 'F ' .. fence, 'KEEPTTL').err then
      redis.call('DEL', KEYS[1])
    end
    return 1
  end
end
local channels = KEYS[1] .. ':w:'
-- Writes `value` (with `expiry`) or, on a full server (maxmemory with noeviction refuses the
-- SET), deletes the key: a release must free the lock even then. The fence then comes from
-- the clock again.
local function put(value, ...)
  if redis.pcall('SET', KEYS[1], value, ...).err then redis.call('DEL', KEYS[1]) end
end
local function grant_to(fence, owner)
  redis.call('HDEL', KEYS[3], owner)
  put('R ' .. fence .. ' ' .. owner, 'PX', claim_ms)
  redis.pcall('PUBLISH', channels .. owner, 'g')
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
if how == 'l' then
  if redis.call('HDEL', KEYS[3], who) == 1 then redis.call('LREM', KEYS[2], 1, who) end
  if not v then return 1 end
  local fence, owner = string.match(v, '^R (%d+) (%S+)$')
  if owner == who and not hand_off(fence, '') then
    put('F ' .. fence, 'KEEPTTL')
  end
  return 1
end
if not v then return 0 end
local fence, holder, token, queued = string.match(v, '^H (%d+) (%S+) (%S+) %d+ (%d)$')
if not fence or token ~= who then return 0 end
-- The lease's record (an election's term), when it has one, ends with the lease; its channel
-- is told: "R <term> <version> <claim ms>" handed to a queued locker, which claims it at once
-- (else the record lapses with the claim), "N <term> <version>" nobody leads. See
-- election_scripts.hpp.
local function end_record(handed)
  if not KEYS[4] then return end
  local r = redis.call('HMGET', KEYS[4], 'token', 'term', 'version')
  if r[1] ~= token then return end
  local told = (r[2] or '0') .. ' ' .. (r[3] or '0')
  local kept = handed and redis.pcall('HSET', KEYS[4], 'token', '')
  if kept and type(kept) ~= 'table' then
    redis.call('PEXPIRE', KEYS[4], claim_ms)
    redis.pcall('PUBLISH', KEYS[4], 'R ' .. told .. ' ' .. claim_ms)
  else
    redis.call('DEL', KEYS[4])
    redis.pcall('PUBLISH', KEYS[4], 'N ' .. told)
  end
end
local last = tonumber(string.sub(ARGV[1], 3)) or 0
if last > tonumber(fence) then fence = string.format('%.0f', last) end
if queued ~= '0' and how ~= 'f' and hand_off(fence, holder) then
  end_record(true)
  return 2
end
put('F ' .. fence, 'KEEPTTL')
end_record(false)
return 1
)lua";

// The uncontended cycle in calls of one key, for a name whose value this process knows: what
// its own release left ("F <fence>", while the lease it ended would still be running), and what
// its grant wrote. Each does what acquire_source and release_source do from that value, and
// nothing when the key holds anything else; the caller then asks those (one more round trip,
// only when someone else changed the key meanwhile).
//
// acquire_known: KEYS[1] lock; ARGV[1] the free value this process's release left, ARGV[2] the
// grant's value ("H <that fence + 1> <owner> <token> <since> 0"), ARGV[3] the ttl in ms. 1 when
// granted, 0 when the key holds anything else (nothing changed).
inline constexpr std::string_view acquire_known_source = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
)lua";

// release_known: KEYS[1] lock; ARGV[1] the value the holder's grant wrote ("H <fence> <owner>
// <token> <since> 0": the token's, nobody queued), ARGV[2] the free value to leave ("F <last
// fence>", no smaller than that fence: the holder's process gave every fence from it on). One
// command: the free value written at once, the value it replaced compared whole. Anything else
// is put back as it was (KEEPTTL twice: the expiry stays; a key that was absent is deleted again,
// since the SET made it without one). 1 when released free, 0 when the key held anything else
// (nothing changed: ask release_source). A full server refuses the SET (maxmemory with
// noeviction): nothing was written, 0, and release_source frees the lock even then.
inline constexpr std::string_view release_known_source = R"lua(
local old = redis.pcall('SET', KEYS[1], ARGV[2], 'KEEPTTL', 'GET')
if old == ARGV[1] then return 1 end
if type(old) ~= 'table' then
  if old then redis.call('SET', KEYS[1], old, 'KEEPTTL') else redis.call('DEL', KEYS[1]) end
end
return 0
)lua";

// KEYS[1] lock, KEYS[2] (when the lease has one) its record; ARGV[1] token, ARGV[2] ttl ms,
// ARGV[3] the holder's fence. 1 when extended (the record too, when it is this lease's, and
// its channel told "E <term> <version> <ttl ms>" when that shortens it), 0 when not ours. A
// fence above the stored one is stored: with Redlock, each primary grants its own fence and the
// lease's is the largest, which a majority must keep (see docs/safety.md, "Fences across
// primaries"); on one server, a holder handed the lease in its process numbers on from the
// stored fence.
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

// extend_known: the renewals of one locker's leases that fall due together, on one server or one
// Cluster slot, in one call. KEYS[i] a lock; ARGV[1] the ttl in ms, every lease's; ARGV[i + 1]
// the value KEYS[i]'s grant wrote, which the holder's process knows ("H <fence> <owner> <token>
// <since> 0"). A key that holds its value whole is set to the ttl from now (PEXPIRE: it needs
// no memory, so leases are renewed on a full server too). One answer per key, in order: 1
// extended, 0 the key held anything else (nothing changed: ask extend_source, which tells a
// lost lease from one whose value changed while ours, and keeps a larger fence). pcall: a key
// of the wrong type answers 0 rather than failing the others.
inline constexpr std::string_view extend_known_source = R"lua(
local out = {}
for i = 1, #KEYS do
  if redis.pcall('GET', KEYS[i]) == ARGV[i + 1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
)lua";

// Status: reads the lock. KEYS as for acquire. Returns {value or "", its PTTL, the number of
// queued lockers whose entries are live, the server's time in ms}.
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

// Forced unlock. KEYS[1] lock, KEYS[2] where a lease's record would be (p{name}:e: an
// election's term; a lock has none); ARGV[1] the longest quarantine in ms; ARGV[2] where the
// holder's locker is told (+ its id: "f <token> <lock key>"), or "" when the caller tells it (a
// Cluster: that channel is on another slot than the lock, so only the client can SPUBLISH there).
// Ends whatever lease holds the lock: the key becomes "R <fence> -", handed to nobody, for the
// quarantine or what the lease had left, whichever is shorter, so that the holder's locker,
// told meanwhile, stops handing the lease to its own waiters before anyone else can take the
// lock; then the key lapses and the next fence comes from the clock, above every fence the
// holder gave (each at most the clock at its time). Told from the script, the holder hears of
// it even when the caller is gone before it could say so. Returns {1, owner, token} when a
// lease was ended, {0} when the lock was not held.
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
-- A lock set's holder is its entry "<locker>/<n>": its locker is told.
if ARGV[2] ~= '' then
  redis.pcall('PUBLISH', ARGV[2] .. string.match(owner, '^[^/]*'), 'f ' .. token .. ' ' .. KEYS[1])
end
return {1, owner, token}
)lua";

} // namespace colock::detail

// The Lua scripts of a semaphore, and of a read-write lock, which is a semaphore whose writer
// takes every permit. Private to the library's sources, its tests and benchmarks.
//
// Keys of semaphore `name` under prefix p (the locker's prefix + "semaphore:", or + "rw:" for a
// read-write lock), all in the hash slot of `{name}`:
//   p{name}      a hash: `capacity` (every user must agree on it), `fence` (the last one
//                given) and `used` (the permits of the holdings in p{name}:h, counted by the
//                scripts that add and remove them). Its expiry is never earlier than any
//                holding's or queue entry's.
//   p{name}:h    the holdings: a sorted set, one member per holding (its token), scored by its
//                expiry in the server's milliseconds.
//   p{name}:hw   the weight of each holding of more than one permit (a hash: token -> permits);
//                a holding not listed holds one.
//   p{name}:q    the waiting calls, in arrival order (a list of their tokens)
//   p{name}:qd   each waiting call's entry (a hash): "<deadline ms> <permits> <owner> <woken>";
//                the call refreshes the deadline while it waits, so a dead one's entry lapses.
// Channel p{name}:w:<owner>: "g <token>" to locker `owner`: its waiting call `token` may fit now.
//
// Free permits = capacity - `used`. A script reads the first holding to expire (one command);
// only when it has expired are the expired ones removed, their weights taken off `used`. So a
// holding that lapses frees its permits at the next call, and `used` never drifts from the
// holdings: when p{name}:h is gone (every holding lapsed) `used` is 0 whatever is stored, and
// without a `used` field (or with one that is not a count) it is counted again from the
// holdings and their weights.
//
// Admission, first come first served across processes: a call is admitted when its permits and
// those of every live entry ahead of it in the queue fit in the free permits (a call not queued
// counts the whole queue as ahead). So a large request is never overtaken by small ones, and
// the calls admitted together are exactly those a release made room for. A release wakes the
// entries that now fit, each once (their `woken` mark), and shortens their deadline to the
// claim: a woken process that died holds the others up that long at most.
//
// A read-write lock: capacity 2^40, a reader takes one permit, a writer all of them. A writer
// is admitted when nothing is held and nobody is queued ahead of it; a reader when no writer
// holds and no writer is queued ahead of it: a waiting writer stops the readers that come after
// it (no writer starves), and the readers queued behind a writer enter together when it leaves
// (no reader starves). A downgrade makes the writer's holding a reader's: same lease, no gap.
//
// Fences: a semaphore's grant and a writer take the server's clock in microseconds, or one more
// than the last fence when that is not below it (two grants within a microsecond); a reader takes
// the last fence given (its writer's). The hash outlives every holding, and lapses at least a ttl
// after the last grant, by when the clock is past every fence given.
#pragma once

#include "lock/store/scripts.hpp"

#include <string_view>

namespace colock::detail {

// A shared prologue of the scripts that admit or wake: `now` (the server's time in ms), the walk
// of the queue, the live holdings' permits, the wake-ups, and the keys' expiries.
#define COLOCK_SEMAPHORE_PROLOGUE                                                                  \
    "local t = redis.call('TIME')\n"                                                               \
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"                      \
    "-- The lockers one of whose entries lapsed in this script: a process dies as a whole, so\n"   \
    "-- their other entries go too (a live call that loses its entry so asks again, last).\n"      \
    "local gone = {}\n"                                                                            \
    "-- The permits entry `e` (its record `d`) waits for; nil, and the entry removed, when it\n"   \
    "-- lapsed (or is garbled), or its locker's did.\n"                                            \
    "local function live_entry(e, d)\n"                                                            \
    "  if d then\n"                                                                                \
    "    local deadline, want, owner = string.match(d, '^(%d+) (%d+) (%S+)')\n"                    \
    "    if deadline and not gone[owner] then\n"                                                   \
    "      if tonumber(deadline) >= now then return tonumber(want) end\n"                          \
    "      gone[owner] = true\n"                                                                   \
    "    end\n"                                                                                    \
    "  end\n"                                                                                      \
    "  redis.call('HDEL', KEYS[5], e)\n"                                                           \
    "  redis.call('LREM', KEYS[4], 1, e)\n"                                                        \
    "  return nil\n"                                                                               \
    "end\n"                                                                                        \
    "-- Walks the queue from its head while the permits of the live entries fit in `free`,\n"      \
    "-- calling visit(entry, want, record) for each that fits, until `stop_at` (an entry) is\n"    \
    "-- reached. Returns the permits of the entries that fit ahead of `stop_at` (or of the\n"      \
    "-- whole queue), and whether the walk ended because the next did not fit. Reads the\n"        \
    "-- queue by chunks, each with its records in one HMGET.\n"                                    \
    "local function walk(free, stop_at, visit)\n"                                                  \
    "  local ahead = 0\n"                                                                          \
    "  local pos = 0\n"                                                                            \
    "  while true do\n"                                                                            \
    "    -- At most 16 entries a chunk: a read-write lock's readers fit by the thousand.\n"        \
    "    local last = pos + math.min(math.max(free, 1), 15)\n"                                     \
    "    local chunk = redis.call('LRANGE', KEYS[4], pos, last)\n"                                 \
    "    if #chunk == 0 then return ahead, false, false end\n"                                     \
    "    local records = redis.call('HMGET', KEYS[5], unpack(chunk))\n"                            \
    "    for i, e in ipairs(chunk) do\n"                                                           \
    "      if e == stop_at then return ahead, false, true end\n"                                   \
    "      local want = live_entry(e, records[i])\n"                                               \
    "      if want then\n"                                                                         \
    "        if ahead + want > free then return ahead, true, false end\n"                          \
    "        ahead = ahead + want\n"                                                               \
    "        pos = pos + 1\n"                                                                      \
    "        if visit then visit(e, want, records[i]) end\n"                                       \
    "      end\n"                                                                                  \
    "    end\n"                                                                                    \
    "  end\n"                                                                                      \
    "end\n"                                                                                        \
    "-- The permits of a holding whose weight is stored as `w` (false: not listed, one). A\n"      \
    "-- weight this library writes is 2 .. 2^40, in digits; anything else is refused, naming\n"    \
    "-- the key, rather than counted from wrongly.\n"                                              \
    "local function weight(w)\n"                                                                   \
    "  if not w then return 1 end\n"                                                               \
    "  if not string.match(w, '^[1-9]%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?$') then\n"               \
    "    error({err = 'COLOCK the weights key ' .. KEYS[3] .. ' holds \"' .. string.sub(w, 1, "    \
    "40) ..\n"                                                                                     \
    "                 '\", which is not a weight colock writes; delete the key to use it'})\n"     \
    "  end\n"                                                                                      \
    "  return tonumber(w)\n"                                                                       \
    "end\n"                                                                                        \
    "-- The permits the live holdings hold, from `stored` (the hash's `used` as stored, false\n"   \
    "-- when it has none), and the expiry of the first holding to expire (nil when none is\n"      \
    "-- held). One command when no holding has expired; else the expired ones are removed\n"       \
    "-- with their weights and uncounted. A count that changed is stored back when the hash\n"     \
    "-- exists (`exists`: this never makes the hash).\n"                                           \
    "local function held(stored, exists)\n"                                                        \
    "  local used = stored and #stored <= 16 and string.match(stored, '^%d+$') and "               \
    "tonumber(stored)\n"                                                                           \
    "  local count = used\n"                                                                       \
    "  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')\n"                          \
    "  if first[1] and tonumber(first[2]) <= now then\n"                                           \
    "    while true do\n"                                                                          \
    "      local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 500)\n"   \
    "      if #expired == 0 then break end\n"                                                      \
    "      if count then\n"                                                                        \
    "        for _, w in ipairs(redis.call('HMGET', KEYS[3], unpack(expired))) do\n"               \
    "          count = count - weight(w)\n"                                                        \
    "        end\n"                                                                                \
    "      end\n"                                                                                  \
    "      redis.call('ZREM', KEYS[2], unpack(expired))\n"                                         \
    "      redis.call('HDEL', KEYS[3], unpack(expired))\n"                                         \
    "    end\n"                                                                                    \
    "    first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')\n"                              \
    "  end\n"                                                                                      \
    "  if not first[1] then\n"                                                                     \
    "    -- Nothing held (the holdings' key may have lapsed with a count stored): 0.\n"            \
    "    count = 0\n"                                                                              \
    "  elseif not count or count < 0 then\n"                                                       \
    "    -- No count (or none this library writes): counted from the holdings.\n"                  \
    "    count = redis.call('ZCARD', KEYS[2])\n"                                                   \
    "    for _, w in ipairs(redis.call('HVALS', KEYS[3])) do count = count + weight(w) - 1 end\n"  \
    "  end\n"                                                                                      \
    "  if exists and count ~= used then redis.call('HSET', KEYS[1], 'used', count) end\n"          \
    "  return count, first[2] and tonumber(first[2])\n"                                            \
    "end\n"                                                                                        \
    "-- Wakes entry `e` (it fits now), once: its process is told (channel `prefix` + its\n"        \
    "-- locker), and the entry is kept for the claim (`claim` ms) at most, so that a dead\n"       \
    "-- process's entry lapses then rather than at its deadline.\n"                                \
    "local function wake_entry(e, want, record, prefix, claim)\n"                                  \
    "  local deadline, owner, woken = string.match(record, '^(%d+) %d+ (%S+) (%d)$')\n"            \
    "  if woken ~= '0' or not owner then return end\n"                                             \
    "  local until_ms = math.min(tonumber(deadline), now + claim)\n"                               \
    "  redis.call('HSET', KEYS[5], e, string.format('%.0f', until_ms) .. ' ' ..\n"                 \
    "             string.format('%.0f', want) .. ' ' .. owner .. ' 1')\n"                          \
    "  redis.pcall('PUBLISH', prefix .. owner, 'g ' .. e)\n"                                       \
    "end\n"                                                                                        \
    "-- Wakes the entries that fit in `free` permits.\n"                                           \
    "local function wake(free, prefix, claim)\n"                                                   \
    "  if free <= 0 then return end\n"                                                             \
    "  walk(free, nil, function(e, want, record) wake_entry(e, want, record, prefix, claim) "      \
    "end)\n"                                                                                       \
    "end\n"                                                                                        \
    "-- Keeps `key` (made by this script when `fresh`) for `ms` from now at least.\n"              \
    "local function keep(key, ms, fresh)\n"                                                        \
    "  if fresh then redis.call('PEXPIRE', key, ms) else redis.call('PEXPIRE', key, ms, 'GT') "    \
    "end\n"                                                                                        \
    "end\n"

// Acquire. KEYS[1] the semaphore, KEYS[2] its holdings, KEYS[3] their weights, KEYS[4] the
// queue, KEYS[5] its entries. ARGV[1] token, ARGV[2] permits wanted (1..capacity), ARGV[3] the
// caller's capacity, ARGV[4] ttl ms, ARGV[5] owner (the locker), ARGV[6] "1" to queue when not
// admitted ("0": a try), ARGV[7] the queue entry's lifetime in ms, ARGV[8] "1" for a new fence,
// "0" for the last one (a reader), ARGV[9] the channel prefix p{name}:w:, ARGV[10] the claim in
// ms (the entries ahead that fit in free permits are woken as a release wakes them).
// Returns {1, fence} when granted; {0, ms until the first holding expires (0 when none is held:
// try again soon), free permits}; {-1, the capacity stored, as stored} when it differs from
// ARGV[3] (nothing changed); an error "COLOCK ..." naming the key when the stored fence or a
// weight is not one this library writes. A token already granted is not granted again: the caller
// uses a new token after a request whose reply it did not see (and gives that one back).
inline constexpr std::string_view semaphore_acquire_source = COLOCK_SEMAPHORE_PROLOGUE R"lua(
local state = redis.call('HMGET', KEYS[1], 'capacity', 'fence', 'used')
-- The stored text itself, for the caller to quote: "3.0" is not the capacity 3 colock writes.
if state[1] and state[1] ~= ARGV[3] then return {-1, state[1]} end
-- A fence Lua counts on exactly (digits, below 2^53 - 1, so that one more is exact too); else
-- refused, naming the key, rather than two grants given the same fence.
if state[2] and not (string.match(state[2], '^%d+$') and #state[2] <= 16 and
                     tonumber(state[2]) < 9007199254740991) then
  return redis.error_reply('COLOCK the semaphore key ' .. KEYS[1] .. ' holds fence "' ..
                           string.sub(state[2], 1, 40) .. '", which is not a fence colock ' ..
                           'writes (it must be below 2^53 - 1); delete the key to use it')
end
local fresh_state = not state[1]
local k = tonumber(ARGV[2])
local ttl = tonumber(ARGV[4])
local used, first = held(state[3], not fresh_state)
local free = tonumber(ARGV[3]) - used
local admitted = false
local queued = false -- the call's entry was found in the queue
if free > 0 then
  -- The entries ahead that fit are woken, if no release did it (permits freed by a lease
  -- that ran out): told, and kept for the claim only.
  local claim = tonumber(ARGV[10])
  local ahead, blocked
  ahead, blocked, queued = walk(free, ARGV[1], function(e, want, record)
    wake_entry(e, want, record, ARGV[9], claim)
  end)
  admitted = not blocked and ahead + k <= free
end
if admitted then
  if queued then
    redis.call('HDEL', KEYS[5], ARGV[1])
    redis.call('LREM', KEYS[4], 1, ARGV[1])
  end
  local fence = tonumber(state[2] or '0') or 0
  if ARGV[8] == '1' then
    local last = fence
    fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if last >= fence then fence = last + 1 end
    redis.call('HSET', KEYS[1], 'capacity', ARGV[3], 'fence', string.format('%.0f', fence),
               'used', used + k)
  else
    redis.call('HSET', KEYS[1], 'capacity', ARGV[3], 'used', used + k)
  end
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
  if k > 1 then
    redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
    if redis.call('PTTL', KEYS[3]) < ttl then redis.call('PEXPIRE', KEYS[3], ttl) end
  end
  keep(KEYS[2], ttl, not first)
  keep(KEYS[1], ttl, fresh_state)
  return {1, fence}
end
if ARGV[6] == '1' then
  local life = tonumber(ARGV[7])
  local entry = string.format('%.0f', now + life) .. ' ' .. ARGV[2] .. ' ' .. ARGV[5] .. ' 0'
  if redis.call('HSET', KEYS[5], ARGV[1], entry) == 1 then
    redis.call('RPUSH', KEYS[4], ARGV[1])
  end
  -- Each entry's deadline is at most `life` from its last refresh: the keys outlive them all.
  redis.call('PEXPIRE', KEYS[4], life)
  redis.call('PEXPIRE', KEYS[5], life)
  if fresh_state then redis.call('HSET', KEYS[1], 'capacity', ARGV[3]) end
  keep(KEYS[1], life, fresh_state)
elseif fresh_state then
  -- Nothing held, nothing written: a try needs no key.
  return {0, 0, free}
end
local wait = 0
if first then wait = math.max(first - now, 0) end
return {0, wait, free}
)lua";

// Release, and leave. KEYS as for acquire. ARGV[1] token, ARGV[2] the channel prefix p{name}:w:,
// ARGV[3] the claim in ms (how long a woken entry is kept for its process), ARGV[4] "1" when the
// call leaves the queue (a waiting call given up, or one whose request's reply was lost) rather
// than gives back a holding, ARGV[5] the holding's permits as its holder knows them (above 1:
// its weight is removed too), ARGV[6] the capacity. The permits freed go to the entries that now
// fit, first come first served, each woken once. Returns 1 when the holding was live and is
// released (or the entry left), 0 when it was not ours any more (expired, or never granted).
inline constexpr std::string_view semaphore_release_source = COLOCK_SEMAPHORE_PROLOGUE R"lua(
local ours = 0
if ARGV[4] == '1' then
  if redis.call('HDEL', KEYS[5], ARGV[1]) == 1 then
    redis.call('LREM', KEYS[4], 1, ARGV[1])
    ours = 1
  end
end
-- The permits of the token's holding, its weight removed with it.
local function weighs()
  if ARGV[5] == '1' then return 1 end
  local w = weight(redis.call('HGET', KEYS[3], ARGV[1]))
  redis.call('HDEL', KEYS[3], ARGV[1])
  return w
end
local capacity, used
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
-- No holding has expired, so the token's, if there, is live.
local current = first[1] and tonumber(first[2]) > now
if current and redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  -- The common path: its holder asked with the capacity stored (the hash outlives every
  -- holding, and its capacity does not change), and the count goes down by its permits.
  ours = 1
  local n = redis.pcall('HINCRBY', KEYS[1], 'used', -weighs())
  if type(n) == 'number' and n >= 0 then
    capacity = tonumber(ARGV[6])
    used = n
  elseif type(n) == 'number' and not redis.call('HGET', KEYS[1], 'capacity') then
    -- No hash was there (deleted behind the holdings): none is left made here.
    redis.call('DEL', KEYS[1])
    return ours
  else
    -- No count, or none this library writes: counted again below.
    redis.call('HDEL', KEYS[1], 'used')
  end
end
if not used then
  local state = redis.call('HMGET', KEYS[1], 'capacity', 'used')
  -- Expired holdings, the token's among them, go here: what is left of them is live.
  used = held(state[2], state[1])
  if first[1] and not current and redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
    ours = 1
    used = used - weighs()
    if state[1] then redis.call('HSET', KEYS[1], 'used', used) end
  end
  capacity = state[1] and tonumber(state[1])
end
if capacity then wake(capacity - used, ARGV[2], tonumber(ARGV[3])) end
return ours
)lua";

// Downgrade (a read-write lock's writer to a reader). KEYS as for acquire; ARGV[1] token,
// ARGV[2] the channel prefix, ARGV[3] the claim in ms. The holding keeps its lease and weighs
// one permit from now on; the readers queued behind are woken. 1 when the holding is live (now
// a reader's), 0 when it is not ours any more.
inline constexpr std::string_view semaphore_downgrade_source = COLOCK_SEMAPHORE_PROLOGUE R"lua(
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score or tonumber(score) <= now then return 0 end
local w = redis.call('HGET', KEYS[3], ARGV[1])
if w then
  local state = redis.call('HMGET', KEYS[1], 'capacity', 'used')
  local used = held(state[2], state[1]) - weight(w) + 1
  redis.call('HDEL', KEYS[3], ARGV[1])
  if state[1] then
    redis.call('HSET', KEYS[1], 'used', used)
    wake(tonumber(state[1]) - used, ARGV[2], tonumber(ARGV[3]))
  end
end
return 1
)lua";

// Extend. KEYS[1] the semaphore, KEYS[2] its holdings, KEYS[3] their weights; ARGV[1] token,
// ARGV[2] ttl ms, ARGV[3] "1" to be told the holding's weight (after a downgrade whose reply was
// not seen). 1 when extended, 0 when the holding is not live any more (an expired one is
// left to the next call's sweep, and never revived); asked for the weight, 2 when extended and the
// holding weighs more than one permit (a writer's), 1 when it weighs one.
inline constexpr std::string_view semaphore_extend_source = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score then return 0 end
-- Expired: not revived; the next sweep removes it and counts its permits free.
if tonumber(score) <= now then return 0 end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[2], 'XX', now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[2], ttl, 'GT')
redis.call('PEXPIRE', KEYS[1], ttl, 'GT')
redis.call('PEXPIRE', KEYS[3], ttl, 'GT')
if ARGV[3] == '1' and redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then return 2 end
return 1
)lua";

// Reads the semaphore. KEYS as for acquire; ARGV[1] how many holdings to list (0: none). Returns
// {capacity stored, as stored, or "", permits held by live holdings, queued calls, the last fence
// as stored or "", the server's time in ms, {token, expiry ms, permits, ...} of the first
// holdings to expire}. Lapsed holdings are swept first, as any call sweeps them.
inline constexpr std::string_view semaphore_read_source = COLOCK_SEMAPHORE_PROLOGUE R"lua(
local state = redis.call('HMGET', KEYS[1], 'capacity', 'used', 'fence')
local used = held(state[2], state[1])
local listed = {}
local n = tonumber(ARGV[1] or '0') or 0
if n > 0 then
  local h = redis.call('ZRANGE', KEYS[2], 0, n - 1, 'WITHSCORES')
  local tokens = {}
  for i = 1, #h, 2 do tokens[#tokens + 1] = h[i] end
  if #tokens > 0 then
    local weights = redis.call('HMGET', KEYS[3], unpack(tokens))
    for i, token in ipairs(tokens) do
      listed[#listed + 1] = token
      listed[#listed + 1] = tonumber(h[2 * i])
      listed[#listed + 1] = weight(weights[i])
    end
  end
end
return {state[1] or '', used, redis.call('LLEN', KEYS[4]), state[3] or '', now, listed}
)lua";

#undef COLOCK_SEMAPHORE_PROLOGUE

} // namespace colock::detail

// The Lua scripts of the lock on several names (a lock set): all of the names or none, in one
// call, on the lock's own keys (lock_scripts.hpp, key format 1), so that co_lock of one of the
// names and a lock set that holds it exclude each other, and each name's queue is one FIFO for
// both. Private to the library's sources, its tests and benchmarks: not installed.
//
// A process's calls for one set of names are one waiter in each name's queue: their entry
// `<locker>/<n>`, told on `p{name}:w:<entry>` like a locker, asked under by the first of them
// (set_queue.hpp); a lone attempt (co_try_lock_all) has an entry of its own. A set holds a name
// as "H <fence> <entry> <token> <since> <queued>", is handed one as "R <fence> <entry>", and
// keeps what it may take while it waits for the rest (a reservation, below) as "R <fence>
// <entry>" too. Any call under the entry may take what is handed or reserved to it.
//
// No deadlock, no starvation:
// - A waiting call enters the queues of all its names in one script, so any two waiting calls
//   stand in the same order in every queue they share: an entry's place is its arrival.
// - It reserves a name that is free (or handed to it) only while it heads that name's queue of
//   live entries, and keeps the reservation while it waits for the rest, renewing it at each
//   attempt (queue_refresh_interval) for queue_entry_ttl: a dead process's reservations lapse as
//   its entries do. Nobody else takes a reserved name: a call for many names is not overtaken
//   by calls for few (the semaphore's rule for a call of k permits).
// - So a call waits only for holders (which wait for nothing) and for calls that reserved a name
//   ahead of it, which arrived before it: the waits-for relation follows arrival order and has
//   no cycle. The oldest waiting call is at the head of every queue it is in, and is granted
//   once the holders before it are done.
// - A call whose entry lapsed from one of its queues (its process stalled past the entry's
//   lifetime) has lost its place: it gives back every reservation and enters every queue again
//   at its tail, as a new arrival, so that the order stays one.
#pragma once

#include <string_view>

namespace colock::detail {

// acquire_all: KEYS, three per name: the lock, its queue, its queue deadlines (as acquire_source
// takes them). ARGV[1] "<entry> <token> <since>": the call's queue entry (the holder as the
// value shows it), the lease's token and the request's time on the client's clock (ms since
// 1970, for status); ARGV[2] the ttl in ms; ARGV[3] "<queueing> <entry ms> <claim ms>": queueing
// "0" one attempt (co_try_lock_all: nothing left behind), "1" wait in the queues; the queue
// entry's (and a reservation's) lifetime; a hand-off's claim. Returns {1, fence of each name}
// when every name was granted (or is already the token's: a retry after a lost reply is
// idempotent), else {0, the shortest time left to a lease or claim in the way (ms; 0: ask
// again at once)}. An error reply "COLOCK ..." naming the key whose value is not a lock state.
inline constexpr std::string_view acquire_all_source = R"lua(
local entry, token = string.match(ARGV[1], '^(%S+) (%S+) %d+$')
local queueing, entry_ms, claim_ms = string.match(ARGV[3], '^([01]) (%d+) (%d+)$')
if not entry or not queueing or #KEYS == 0 or #KEYS % 3 ~= 0 then
  return redis.error_reply('COLOCK the acquire of a lock set at ' .. tostring(KEYS[1]) ..
                           ' got arguments it cannot read: a client of another release of colock?')
end
local n = #KEYS / 3
local t = redis.call('TIME')
local clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(clock / 1000)
-- Every name's state, read before anything is written: a value that is not a lock state is
-- refused with nothing changed.
local kind, fence, who, value = {}, {}, {}, {}
for i = 1, n do
  local key = KEYS[3 * i - 2]
  local v = redis.call('GET', key)
  value[i] = v
  if not v then
    kind[i] = 'A'
  else
    local k, f, w = string.sub(v, 1, 1), nil, nil
    if k == 'F' then
      f = string.match(v, '^F (%d+)$')
    elseif k == 'R' then
      f, w = string.match(v, '^R (%d+) (%S+)$')
    elseif k == 'H' then
      f, w = string.match(v, '^H (%d+) %S+ (%S+) %d+ %d$')
    end
    if not (f and tonumber(f) < 9007199254740991) then
      local format = string.match(v, '^(%d+):')
      if format then
        return redis.error_reply('COLOCK the lock key ' .. key .. ' holds a value in key format ' ..
                                 format .. ', which a later release of colock writes; this ' ..
                                 'release reads key format 1 only: upgrade it to share the lock')
      end
      return redis.error_reply('COLOCK the lock key ' .. key .. ' holds "' .. string.sub(v, 1, 80) ..
                               '", which is not a lock state colock writes (a fence must be ' ..
                               'below 2^53 - 1); delete the key to use the lock')
    end
    kind[i], fence[i], who[i] = k, tonumber(f), w
  end
end
local function keys_of(i) return KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i] end
-- A full server (maxmemory with noeviction) refuses the SET: the key goes, so that a name is
-- never left reserved or held by a write that failed halfway.
local function put(key, v, ...)
  if redis.pcall('SET', key, v, ...).err then redis.call('DEL', key) end
end
-- The first live entry of name i's queue, dropping lapsed ones before it; nil when none.
local function first_live(i)
  local _, q, qd = keys_of(i)
  while true do
    local head = redis.call('LINDEX', q, 0)
    if not head or head == entry then return head end
    if tonumber(redis.call('HGET', qd, head) or '0') >= now then return head end
    redis.call('LPOP', q)
    redis.call('HDEL', qd, head)
  end
end
-- Name i, with fence f, to the first live entry of its queue (told on its channel), else free:
-- what release_source does for a lease nobody of its own process waits for.
local function hand_on(i, f)
  local key, q, qd = keys_of(i)
  local text = string.format('%.0f', f)
  while true do
    local head = redis.call('LPOP', q)
    if not head then break end
    local live = tonumber(redis.call('HGET', qd, head) or '0') >= now
    redis.call('HDEL', qd, head)
    if live then
      put(key, 'R ' .. text .. ' ' .. head, 'PX', claim_ms)
      redis.pcall('PUBLISH', key .. ':w:' .. head, 'g')
      return
    end
  end
  put(key, 'F ' .. text, 'KEEPTTL')
end
local function leave(i)
  local _, q, qd = keys_of(i)
  if redis.call('HDEL', qd, entry) == 1 then redis.call('LREM', q, 1, entry) end
end
-- Which names are the call's to take: its own lease (a retry), a name handed or reserved to it,
-- a free one. A name whose lease lapsed goes to the first live entry of its queue, as the lock's
-- acquire hands it (FIFO survives a holder's death), unless that is this call.
local ours, all = {}, true
for i = 1, n do
  local k = kind[i]
  if k == 'H' or k == 'R' then
    ours[i] = (k == 'H' and who[i] == token) or (k == 'R' and who[i] == entry)
  elseif k == 'F' then
    ours[i] = true
  else
    local head = first_live(i)
    if head and head ~= entry then
      local key, q, qd = keys_of(i)
      redis.call('LPOP', q)
      redis.call('HDEL', qd, head)
      put(key, 'R ' .. string.format('%.0f', clock) .. ' ' .. head, 'PX', claim_ms)
      redis.pcall('PUBLISH', key .. ':w:' .. head, 'g')
      kind[i], fence[i], who[i] = 'R', clock, head
      ours[i] = false
    else
      ours[i] = true
    end
  end
  all = all and ours[i]
end
if all then
  local out = {1}
  for i = 1, n do
    local key, q = keys_of(i)
    local f
    if kind[i] == 'H' then f = fence[i] elseif kind[i] == 'A' then f = clock else f = fence[i] + 1 end
    local queued = 0
    if redis.call('EXISTS', q) == 1 then
      leave(i)
      if redis.call('LLEN', q) > 0 then queued = 2 end
    end
    put(key, 'H ' .. string.format('%.0f', f) .. ' ' .. ARGV[1] .. ' ' .. queued, 'PX', ARGV[2])
    out[i + 1] = f
  end
  return out
end
-- Not every name: the time left to what is in the way, for the caller's next attempt.
local function in_the_way()
  local wait = nil
  for i = 1, n do
    if not ours[i] then
      local left = redis.call('PTTL', KEYS[3 * i - 2])
      if left < 0 then left = 0 end
      if not wait or left < wait then wait = left end
    end
  end
  return {0, wait or 0}
end
if queueing == '0' then
  -- One attempt holds nothing after it: a lease of a lost reply's grant goes back.
  for i = 1, n do
    if kind[i] == 'H' and ours[i] then hand_on(i, fence[i]) end
  end
  return in_the_way()
end
local deadline = string.format('%.0f', now + tonumber(entry_ms))
local function enqueue(i)
  local _, q, qd = keys_of(i)
  if redis.call('HSET', qd, entry, deadline) == 1 then redis.call('RPUSH', q, entry) end
  redis.call('PEXPIRE', q, entry_ms)
  redis.call('PEXPIRE', qd, entry_ms)
end
local present = true
for i = 1, n do
  local _, _, qd = keys_of(i)
  if not (kind[i] == 'R' and who[i] == entry) and redis.call('HEXISTS', qd, entry) == 0 then
    present = false
  end
end
if not present then
  -- A first attempt, or a place lost: what this call holds or has reserved goes back, and it
  -- enters every queue at its tail.
  for i = 1, n do
    if ours[i] and (kind[i] == 'H' or kind[i] == 'R') then
      leave(i)
      hand_on(i, fence[i])
      ours[i] = false
    end
  end
  for i = 1, n do
    leave(i)
    enqueue(i)
  end
end
for i = 1, n do
  local key, _, qd = keys_of(i)
  if ours[i] then
    if kind[i] == 'R' then
      redis.call('PEXPIRE', key, entry_ms)
    else
      local head = first_live(i)
      if not head or head == entry then
        -- Reserved: this call heads the name's queue.
        leave(i)
        local f = kind[i] == 'A' and clock or fence[i]
        put(key, 'R ' .. string.format('%.0f', f) .. ' ' .. entry, 'PX', entry_ms)
      else
        ours[i] = false
        if present then enqueue(i) end
      end
    end
  else
    if present then enqueue(i) end
    if kind[i] == 'H' then
      -- The holder's release hands the name on rather than freeing it, and its process stops
      -- passing the lease to its own waiters (told at every attempt: a message it missed would
      -- let its cohort go on).
      local v = value[i]
      local holder, queued = string.match(v, '^H %d+ (%S+) %S+ %d+ (%d)$')
      -- A set's holder (an entry "<locker>/<n>") passes its lease to nobody: not told.
      if queued ~= '2' then put(key, string.sub(v, 1, -2) .. '2', 'KEEPTTL') end
      if not string.find(holder, '/', 1, true) then
        redis.pcall('PUBLISH', key .. ':w:' .. holder, 'q')
      end
    end
  end
end
return in_the_way()
)lua";

// release_all: KEYS as acquire_all's. ARGV[1] "<claim ms> <how> <entry> <token>": how "h" the
// lease of `token` on each name goes back (to the first live entry of the name's queue, or
// free), "l" the same, and the entry leaves every queue, passing on a name handed or reserved to
// it (the last call of a process's queue for the set ends without it). ARGV[2], when given, the
// last fence given under the lease for each name, in order: the fence stored is the larger of it
// and the stored one. It is above the stored one after hand-offs inside the process (each gave
// every name the next fence), and with Redlock, where a lease's fence is the largest its
// majority gave and this primary may have given less. Returns how many of the names the token
// held.
inline constexpr std::string_view release_all_source = R"lua(
local claim_ms, how, entry, token = string.match(ARGV[1], '^(%d+) ([hl]) (%S+) (%S+)$')
local last, unread = {}, false
if ARGV[2] then
  for f in string.gmatch(ARGV[2], '%S+') do
    last[#last + 1] = f
    unread = unread or not string.match(f, '^%d+$')
  end
  unread = unread or #last ~= #KEYS / 3
end
if not claim_ms or #KEYS == 0 or #KEYS % 3 ~= 0 or unread then
  return redis.error_reply('COLOCK the release of a lock set at ' .. tostring(KEYS[1]) ..
                           ' got arguments it cannot read: a client of another release of colock?')
end
local now = nil
local function put(key, v, ...)
  if redis.pcall('SET', key, v, ...).err then redis.call('DEL', key) end
end
-- What acquire_all's hand_on does.
local function hand_on(key, q, qd, f)
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  while true do
    local head = redis.call('LPOP', q)
    if not head then break end
    local live = tonumber(redis.call('HGET', qd, head) or '0') >= now
    redis.call('HDEL', qd, head)
    if live then
      put(key, 'R ' .. f .. ' ' .. head, 'PX', claim_ms)
      redis.pcall('PUBLISH', key .. ':w:' .. head, 'g')
      return
    end
  end
  put(key, 'F ' .. f, 'KEEPTTL')
end
local held = 0
for i = 1, #KEYS / 3 do
  local key, q, qd = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  if how == 'l' and redis.call('HDEL', qd, entry) == 1 then redis.call('LREM', q, 1, entry) end
  local v = redis.pcall('GET', key)
  if type(v) == 'string' then
    local fence, holder_token, queued = string.match(v, '^H (%d+) %S+ (%S+) %d+ (%d)$')
    if fence and holder_token == token then
      held = held + 1
      if last[i] and tonumber(last[i]) > tonumber(fence) then fence = last[i] end
      if queued == '0' then put(key, 'F ' .. fence, 'KEEPTTL') else hand_on(key, q, qd, fence) end
    elseif how == 'l' then
      local handed, to = string.match(v, '^R (%d+) (%S+)$')
      if to == entry then hand_on(key, q, qd, handed) end
    end
  end
end
return held
)lua";

// extend_all: KEYS the lock keys of the names; ARGV[1] the token, ARGV[2] the ttl in ms. Each key
// whose lease is the token's is set to the ttl from now (PEXPIRE: it needs no memory, so the
// lease is renewed on a full server too). One answer per key, in order: 1 extended, 0 not the
// token's (pcall: a key of the wrong type answers 0).
inline constexpr std::string_view extend_all_source = R"lua(
local out = {}
for i = 1, #KEYS do
  local v = redis.pcall('GET', KEYS[i])
  if type(v) == 'string' and string.match(v, '^H %d+ %S+ (%S+) %d+ %d$') == ARGV[1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
)lua";

} // namespace colock::detail

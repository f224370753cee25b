// The Lua script of a fenced resource (colock::fenced_resource): writes applied only under a
// fence at least the highest the resource has seen, atomically with the check. Private to the
// library's sources, its tests and benchmarks.
//
// The resource keeps its record in one key of the user's choosing: "<fence> <name>", the highest
// fence accepted and the name of the lock (semaphore, read-write lock, election) it came from.
// Fences of two names are not comparable, so a fence of another name is refused too.
#pragma once

#include <string_view>

namespace colock::detail {

// KEYS[1] the record, KEYS[2..] the keys written (each once). ARGV[1] the fence (digits, from 1),
// ARGV[2] the name, ARGV[3] the record's ttl in ms ("0": the record keeps no expiry), then the
// writes, each a letter, the index in KEYS of its key, and its words:
//   S k value          SET          P k value ms       SET PX
//   H k field value    HSET         D k field          HDEL
//   I k by lo hi       INCRBY       J k field by lo hi HINCRBY
//   X k                DEL          E k ms             PEXPIRE
// For an increment, lo..hi is the range the stored integer must be in for the sum to fit in 64
// bits (an absent one is 0). The client has checked what it can without the server: an
// increment is the first write of its key (its field) in the batch, and no key is written both
// as a string and as a hash. Every write is checked here before the first is made (a key of
// another type, a value that is not an integer, a sum out of range), so the batch is applied
// whole or not at all.
// Returns {1, the fence stored before or "", each write's reply}; {0, the fence stored, the
// name stored} when the fence is below it or of another name (nothing changed); an error
// "COLOCK ..." naming the key for a record or a value that the writes cannot go on.
inline constexpr std::string_view fenced_write_source = R"lua(
-- a < b, for digit strings without leading zeros.
local function below(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
-- a < b, for integers in Redis's canonical text.
local function int_below(a, b)
  local na, nb = string.sub(a, 1, 1) == '-', string.sub(b, 1, 1) == '-'
  if na ~= nb then return na end
  if na then return below(string.sub(b, 2), string.sub(a, 2)) end
  return below(a, b)
end
local function refuse(text)
  return redis.error_reply('COLOCK ' .. text)
end
local function quoted(v)
  return '"' .. string.sub(v, 1, 40) .. '"'
end
local record = redis.pcall('GET', KEYS[1])
if type(record) == 'table' and record.err then
  return refuse('the fence key ' .. KEYS[1] .. ' is not a string (' .. record.err ..
                '): it holds no fence record colock writes')
end
local seen
if record then
  local name
  seen, name = string.match(record, '^([1-9]%d*) (.+)$')
  if not seen or #seen > 19 then
    return refuse('the fence key ' .. KEYS[1] .. ' holds ' .. quoted(record) ..
                  ', which is not a fence record colock writes')
  end
  if name ~= ARGV[2] or below(ARGV[1], seen) then return {0, seen, name} end
end
-- Every write checked before any is made: the types, and the values an increment adds to.
local kinds = {}
local function kind_of(k)
  if kinds[k] == nil then kinds[k] = redis.call('TYPE', KEYS[k]).ok end
  return kinds[k]
end
local function need(k, wanted, what)
  local have = kind_of(k)
  if have ~= 'none' and have ~= wanted then
    error({err = 'COLOCK ' .. what .. ' of ' .. KEYS[k] .. ' refused: the key holds a ' .. have ..
                 ', not a ' .. wanted .. ' (nothing was written)'})
  end
end
local function check_sum(k, v, lo, hi, what)
  if not v then return end
  if not (v == '0' or string.match(v, '^-?[1-9]%d*$')) or #v > 20 then
    error({err = 'COLOCK ' .. what .. ' of ' .. KEYS[k] .. ' refused: it holds ' .. quoted(v) ..
                 ', not an integer (nothing was written)'})
  end
  if int_below(v, lo) or int_below(hi, v) then
    error({err = 'COLOCK ' .. what .. ' of ' .. KEYS[k] .. ' refused: ' .. v ..
                 ' and the increment overflow 64 bits (nothing was written)'})
  end
end
local i = 4
while i <= #ARGV do
  local op, k = ARGV[i], tonumber(ARGV[i + 1])
  if op == 'S' then kinds[k] = 'string'; i = i + 3
  elseif op == 'P' then kinds[k] = 'string'; i = i + 4
  elseif op == 'H' then need(k, 'hash', 'HSET'); kinds[k] = 'hash'; i = i + 4
  elseif op == 'D' then need(k, 'hash', 'HDEL'); i = i + 3
  elseif op == 'I' then
    need(k, 'string', 'INCRBY')
    if kind_of(k) == 'string' then
      check_sum(k, redis.call('GET', KEYS[k]), ARGV[i + 3], ARGV[i + 4], 'INCRBY')
    end
    kinds[k] = 'string'
    i = i + 5
  elseif op == 'J' then
    need(k, 'hash', 'HINCRBY')
    if kind_of(k) == 'hash' then
      check_sum(k, redis.call('HGET', KEYS[k], ARGV[i + 2]), ARGV[i + 4], ARGV[i + 5],
                'HINCRBY ' .. ARGV[i + 2])
    end
    kinds[k] = 'hash'
    i = i + 6
  elseif op == 'X' then kinds[k] = 'none'; i = i + 2
  elseif op == 'E' then i = i + 3
  else return refuse('fenced write: unknown write ' .. quoted(op)) end
end
local out = {1, seen or ''}
i = 4
while i <= #ARGV do
  local op, key = ARGV[i], KEYS[tonumber(ARGV[i + 1])]
  local r
  if op == 'S' then r = redis.call('SET', key, ARGV[i + 2]); i = i + 3
  elseif op == 'P' then r = redis.call('SET', key, ARGV[i + 2], 'PX', ARGV[i + 3]); i = i + 4
  elseif op == 'H' then r = redis.call('HSET', key, ARGV[i + 2], ARGV[i + 3]); i = i + 4
  elseif op == 'D' then r = redis.call('HDEL', key, ARGV[i + 2]); i = i + 3
  elseif op == 'I' then r = redis.call('INCRBY', key, ARGV[i + 2]); i = i + 5
  elseif op == 'J' then r = redis.call('HINCRBY', key, ARGV[i + 2], ARGV[i + 3]); i = i + 6
  elseif op == 'X' then r = redis.call('DEL', key); i = i + 2
  else r = redis.call('PEXPIRE', key, ARGV[i + 2]); i = i + 3 end
  out[#out + 1] = r
end
local value = ARGV[1] .. ' ' .. ARGV[2]
if ARGV[3] ~= '0' then
  redis.call('SET', KEYS[1], value, 'PX', ARGV[3])
else
  redis.call('SET', KEYS[1], value)
end
return out
)lua";

} // namespace colock::detail

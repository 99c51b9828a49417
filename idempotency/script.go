package idempotency

import "github.com/redis/go-redis/v9"

// The scripts call only HGET and HSET on fences (and SET or DEL on effect
// keys), so a Redis user that could run earlier versions runs them too;
// endScript adds UNLINK and PEXPIRE.

// luaNewer defines newer(a, b): whether order a is greater than order b.
// Orders are decimal strings of up to 20 digits; Lua numbers are doubles,
// exact only to 2^53, so long ones are compared by length, then in two
// parts of at most 10 digits. A stored value that is not an order makes
// the script return a BADFENCE error before it writes anything.
const luaNewer = `
local function check(s)
  if s ~= '0' and not string.find(s, '^[1-9]%d*$') then
    return redis.error_reply('BADFENCE fence field holds ' .. s .. ', not an order')
  end
end
local function newer(a, b)
  if #a ~= #b then return #a > #b end
  local n = #a
  if n <= 15 then return tonumber(a) > tonumber(b) end
  local ha, hb = tonumber(string.sub(a, 1, n - 10)), tonumber(string.sub(b, 1, n - 10))
  if ha ~= hb then return ha > hb end
  return tonumber(string.sub(a, n - 9)) > tonumber(string.sub(b, n - 9))
end
`

// luaCurrent defines current(): the document's stored order (false when
// none) and whether its index ended. KEYS[1] is the document's hash,
// KEYS[2] the legacy hash (or KEYS[1] again); ARGV[1] the field, ARGV[2]
// the legacy field ("" = no legacy hash), ARGV[3] "1" when KEYS[1] may
// hold the "ended" marker of EndIndex.
const luaCurrent = `
local function current()
  if ARGV[3] == '1' and redis.call('HGET', KEYS[1], 'ended') then return false, true end
  local cur = redis.call('HGET', KEYS[1], ARGV[1])
  if not cur and ARGV[2] ~= '' then cur = redis.call('HGET', KEYS[2], ARGV[2]) end
  return cur, false
end
`

// readScript: KEYS and ARGV[1..3] as for current(). Returns {0} when
// nothing is stored, {1, order} and {2} when the index ended.
var readScript = redis.NewScript(luaCurrent + `
local cur, ended = current()
if ended then return {2} end
if not cur then return {0} end
return {1, cur}
`)

// recordScript: KEYS and ARGV[1..3] as for current(), ARGV[4] the order.
// Returns 1 when it raised the order, 0 when the stored one was not lower,
// 2 when the index ended (nothing written).
var recordScript = redis.NewScript(luaNewer + luaCurrent + `
local cur, ended = current()
if ended then return 2 end
if cur then
  local bad = check(cur)
  if bad then return bad end
  if not newer(ARGV[4], cur) then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
return 1
`)

// applyScript: KEYS[1..2] and ARGV[1..3] as for current(), ARGV[1] ""
// when the event is not fenced (perform the effect only); KEYS[3..] the
// effect's keys; ARGV[4] order, ARGV[5] effect ("set", "del" or "none"),
// ARGV[6] value, ARGV[7] TTL in milliseconds ("0" = none). Returns 1 when
// applied, 0 when the fence refused, 2 when the index ended. The fence is
// read and checked before anything is written.
var applyScript = redis.NewScript(luaNewer + luaCurrent + `
if ARGV[1] ~= '' then
  local cur, ended = current()
  if ended then return 2 end
  if cur then
    local bad = check(cur)
    if bad then return bad end
    if not newer(ARGV[4], cur) then return 0 end
  end
end
if ARGV[5] == 'set' then
  if ARGV[7] ~= '0' then
    redis.call('SET', KEYS[3], ARGV[6], 'PX', ARGV[7])
  else
    redis.call('SET', KEYS[3], ARGV[6])
  end
elseif ARGV[5] == 'del' then
  redis.call('DEL', unpack(KEYS, 3))
end
if ARGV[1] ~= '' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
end
return 1
`)

// endScript: KEYS[1] one hash of an index's fences; ARGV[1] the time it
// ended (Unix ms), ARGV[2] the grace in ms, ARGV[3] "1" to mark the hash
// even when it held nothing. It drops the hash's fences (UNLINK: freed
// off the main thread) and leaves only the "ended" marker, expiring after
// the grace. Returns 1 when the hash existed.
var endScript = redis.NewScript(`
local n = redis.call('UNLINK', KEYS[1])
if n == 1 or ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 'ended', ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return n
`)

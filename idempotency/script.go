package idempotency

import "github.com/redis/go-redis/v9"

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

// recordScript: KEYS[1] fence hash; ARGV[1] field, ARGV[2] order.
// Returns 1 when it raised the order, 0 when the stored one was not lower.
var recordScript = redis.NewScript(luaNewer + `
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local bad = check(cur)
  if bad then return bad end
  if not newer(ARGV[2], cur) then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
`)

// applyScript: KEYS[1] fence hash, KEYS[2..] the effect's keys; ARGV[1]
// field ("" = not fenced: perform the effect only), ARGV[2] order,
// ARGV[3] effect ("set", "del" or "none"), ARGV[4] value, ARGV[5] TTL in
// milliseconds ("0" = none). Returns 1 when applied, 0 when the fence
// refused. The fence is read and checked before anything is written.
var applyScript = redis.NewScript(luaNewer + `
if ARGV[1] ~= '' then
  local cur = redis.call('HGET', KEYS[1], ARGV[1])
  if cur then
    local bad = check(cur)
    if bad then return bad end
    if not newer(ARGV[2], cur) then return 0 end
  end
end
if ARGV[3] == 'set' then
  if ARGV[5] ~= '0' then
    redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])
  else
    redis.call('SET', KEYS[2], ARGV[4])
  end
elseif ARGV[3] == 'del' then
  redis.call('DEL', unpack(KEYS, 2))
end
if ARGV[1] ~= '' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return 1
`)

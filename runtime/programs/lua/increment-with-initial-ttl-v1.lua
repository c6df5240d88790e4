-- increment-with-initial-ttl-v1
-- Replaces INCR -> EXPIRE. Adds ARGV[1] to the counter at KEYS[1] unless the
-- result would exceed ARGV[2]; the first increment creates the key with a PX
-- TTL of ARGV[3], later ones keep it. Values stay within +-(2^53-1) so Lua
-- numbers are exact. A denial changes nothing. O(1); no clock.
-- Result: {1, status, 0, value, pttlMillis}
-- status: 1 INCREMENTED, 2 LIMIT_EXCEEDED, 3 OVERFLOW, 4 WRONG_TYPE, 5 INVALID
local HARD = 9007199254740991
if #KEYS ~= 1 or #ARGV ~= 3 then return {1, 5, 0, 0, 0} end
local deltaArg, maxArg, ttlArg = ARGV[1], ARGV[2], ARGV[3]
if #deltaArg > 16 or not string.match(deltaArg, '^[1-9][0-9]*$') then return {1, 5, 0, 0, 0} end
if #maxArg > 16 or not string.match(maxArg, '^[1-9][0-9]*$') then return {1, 5, 0, 0, 0} end
if #ttlArg > 16 or not string.match(ttlArg, '^[1-9][0-9]*$') then return {1, 5, 0, 0, 0} end
local delta, max, ttl = tonumber(deltaArg), tonumber(maxArg), tonumber(ttlArg)
if delta > HARD or max > HARD then return {1, 5, 0, 0, 0} end
if ttl < 1 or ttl > 2592000000 then return {1, 5, 0, 0, 0} end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  if delta > max then return {1, 2, 0, 0, 0} end
  redis.call('SET', KEYS[1], deltaArg, 'PX', ttlArg)
  return {1, 1, 0, delta, ttl}
end
if kind ~= 'string' then return {1, 4, 0, 0, 0} end
local raw = redis.call('GET', KEYS[1])
if #raw > 17 or not (raw == '0' or string.match(raw, '^%-?[1-9][0-9]*$')) then return {1, 4, 0, 0, 0} end
local current = tonumber(raw)
if current > HARD or current < -HARD then return {1, 4, 0, 0, 0} end
if delta > HARD - current then return {1, 3, 0, current, 0} end
if current + delta > max then return {1, 2, 0, current, 0} end
local value = redis.call('INCRBY', KEYS[1], deltaArg)
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then
  -- A counter without a TTL was not created by this program; bound its life
  -- rather than let it live forever.
  redis.call('PEXPIRE', KEYS[1], ttlArg)
  pttl = ttl
end
return {1, 1, 0, value, pttl}

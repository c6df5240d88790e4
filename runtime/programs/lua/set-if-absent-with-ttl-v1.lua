-- set-if-absent-with-ttl-v1
-- Replaces GET -> decide -> SET. Stores ARGV[1] at KEYS[1] with a PX TTL only
-- when the key is absent. O(1) (plus bounded value bytes); no clock.
-- Result: {1, status, 0, pttlMillis, sameValue}
-- status: 1 SET, 2 EXISTS, 3 WRONG_TYPE, 4 INVALID
if #KEYS ~= 1 or #ARGV ~= 3 then return {1, 4, 0, 0, 0} end
local value, ttlArg, opId = ARGV[1], ARGV[2], ARGV[3]
if #value < 1 or #value > 1048576 then return {1, 4, 0, 0, 0} end
if #ttlArg > 16 or not string.match(ttlArg, '^[1-9][0-9]*$') then return {1, 4, 0, 0, 0} end
local ttl = tonumber(ttlArg)
if ttl < 1 or ttl > 2592000000 then return {1, 4, 0, 0, 0} end
if #opId < 1 or #opId > 128 then return {1, 4, 0, 0, 0} end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  redis.call('SET', KEYS[1], value, 'PX', ttlArg)
  return {1, 1, 0, ttl, 1}
end
if kind ~= 'string' then return {1, 3, 0, 0, 0} end
local same = 0
if redis.call('GET', KEYS[1]) == value then same = 1 end
return {1, 2, 0, redis.call('PTTL', KEYS[1]), same}

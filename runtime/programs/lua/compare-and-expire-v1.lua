-- compare-and-expire-v1
-- Replaces GET owner -> PEXPIRE. Sets a new PX TTL on KEYS[1] only while it
-- holds exactly ARGV[1]. O(1); no clock.
-- Result: {1, status, 0, pttlMillis}
-- status: 1 RENEWED, 2 ABSENT, 3 NOT_OWNER, 4 WRONG_TYPE, 5 INVALID
if #KEYS ~= 1 or #ARGV ~= 2 then return {1, 5, 0, 0} end
local owner, ttlArg = ARGV[1], ARGV[2]
if #owner < 1 or #owner > 128 then return {1, 5, 0, 0} end
if #ttlArg > 16 or not string.match(ttlArg, '^[1-9][0-9]*$') then return {1, 5, 0, 0} end
local ttl = tonumber(ttlArg)
if ttl < 1 or ttl > 2592000000 then return {1, 5, 0, 0} end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return {1, 2, 0, 0} end
if kind ~= 'string' then return {1, 4, 0, 0} end
if redis.call('GET', KEYS[1]) ~= owner then return {1, 3, 0, 0} end
redis.call('PEXPIRE', KEYS[1], ttlArg)
return {1, 1, 0, ttl}

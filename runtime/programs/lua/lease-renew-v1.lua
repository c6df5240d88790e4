-- lease-renew-v1
-- Replaces GET owner -> PEXPIRE. Sets the PX TTL of the efficiency lease
-- KEYS[1] to ARGV[3] only while the lease is held by the attempt (owner
-- ARGV[1], operation ARGV[2]): the TTL really becomes ARGV[3] (PEXPIRE),
-- and the reply reports it. A lease of the same owner under another
-- operation is NOT_OWNER: this attempt's lease is gone. O(1); no clock.
-- Result: {1, status, 0, pttlMillis}
-- status: 1 RENEWED, 2 ABSENT, 3 NOT_OWNER, 4 WRONG_TYPE, 5 INVALID
if #KEYS ~= 1 or #ARGV ~= 3 then return {1, 5, 0, 0} end
local owner, opId, ttlArg = ARGV[1], ARGV[2], ARGV[3]
if #owner < 1 or #owner > 128 then return {1, 5, 0, 0} end
if #opId < 1 or #opId > 128 then return {1, 5, 0, 0} end
if #ttlArg > 10 or not string.match(ttlArg, '^[1-9][0-9]*$') then return {1, 5, 0, 0} end
local ttl = tonumber(ttlArg)
if ttl > 2592000000 then return {1, 5, 0, 0} end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return {1, 2, 0, 0} end
if kind ~= 'string' then return {1, 4, 0, 0} end
local cur = redis.call('GET', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
local n = string.match(cur, '^L1:([1-9][0-9]?[0-9]?):')
if not n or pttl < 0 then return {1, 4, 0, 0} end
local h, on = #n + 4, tonumber(n)
local opLen = #cur - h - on - 1
if on > 128 or opLen < 1 or opLen > 128 or string.sub(cur, h + on + 1, h + on + 1) ~= ':' then return {1, 4, 0, 0} end
if on ~= #owner or string.sub(cur, h + 1, h + on) ~= owner or string.sub(cur, h + on + 2) ~= opId then return {1, 3, 0, 0} end
redis.call('PEXPIRE', KEYS[1], ttlArg)
return {1, 1, 0, ttl}

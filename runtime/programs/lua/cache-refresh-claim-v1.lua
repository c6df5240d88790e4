-- cache-refresh-claim-v1
-- Replaces GET lease -> SET NX PX. Claims the soft refresh lease KEYS[1] for
-- owner ARGV[1] with a PX TTL of ARGV[2]; a claim by the current owner reports
-- ALREADY_OWNED without extending it. O(1); no clock.
-- Result: {1, status, 0, pttlMillis}
-- status: 1 ACQUIRED, 2 CONTENDED, 3 ALREADY_OWNED, 4 WRONG_TYPE, 5 INVALID
if #KEYS ~= 1 or #ARGV ~= 3 then return {1, 5, 0, 0} end
local owner, ttlArg, opId = ARGV[1], ARGV[2], ARGV[3]
if #owner < 1 or #owner > 128 then return {1, 5, 0, 0} end
if #ttlArg > 16 or not string.match(ttlArg, '^[1-9][0-9]*$') then return {1, 5, 0, 0} end
local ttl = tonumber(ttlArg)
if ttl < 1 or ttl > 2592000000 then return {1, 5, 0, 0} end
if #opId < 1 or #opId > 128 then return {1, 5, 0, 0} end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  redis.call('SET', KEYS[1], owner, 'PX', ttlArg)
  return {1, 1, 0, ttl}
end
if kind ~= 'string' then return {1, 4, 0, 0} end
local pttl = redis.call('PTTL', KEYS[1])
if redis.call('GET', KEYS[1]) == owner then return {1, 3, 0, pttl} end
return {1, 2, 0, pttl}

-- lease-acquire-v1
-- Replaces SET NX PX plus a client-side GET that tells a replay from
-- contention. Acquires the efficiency lease KEYS[1] for the attempt (owner
-- ARGV[1], operation ARGV[3]) with a PX TTL of ARGV[2]. The value is the
-- attempt envelope 'L1:' .. #owner .. ':' .. owner .. ':' .. operationId.
-- The same attempt again is REPLAYED_SAME_OPERATION with the server's
-- remaining PTTL (the TTL is not extended); the same owner under another
-- operation is OWNER_OPERATION_CONFLICT; another live attempt is CONTENDED
-- with its remaining PTTL (the retry-after). A string that is no envelope,
-- or an envelope without a TTL, is WRONG_TYPE. O(1); no clock.
-- Result: {1, status, 0, pttlMillis}
-- status: 1 ACQUIRED, 2 REPLAYED_SAME_OPERATION, 3 CONTENDED, 4 OWNER_OPERATION_CONFLICT, 5 WRONG_TYPE, 6 INVALID
if #KEYS ~= 1 or #ARGV ~= 3 then return {1, 6, 0, 0} end
local owner, ttlArg, opId = ARGV[1], ARGV[2], ARGV[3]
if #owner < 1 or #owner > 128 then return {1, 6, 0, 0} end
if #ttlArg > 10 or not string.match(ttlArg, '^[1-9][0-9]*$') then return {1, 6, 0, 0} end
local ttl = tonumber(ttlArg)
if ttl > 2592000000 then return {1, 6, 0, 0} end
if #opId < 1 or #opId > 128 then return {1, 6, 0, 0} end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  redis.call('SET', KEYS[1], 'L1:' .. #owner .. ':' .. owner .. ':' .. opId, 'PX', ttlArg)
  return {1, 1, 0, ttl}
end
if kind ~= 'string' then return {1, 5, 0, 0} end
local cur = redis.call('GET', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
-- The stored envelope: 'L1:', the owner length n (1..128), ':', n owner
-- bytes, ':', the operation id (1..128 bytes).
local n = string.match(cur, '^L1:([1-9][0-9]?[0-9]?):')
if not n or pttl < 0 then return {1, 5, 0, 0} end
local h, on = #n + 4, tonumber(n)
local opLen = #cur - h - on - 1
if on > 128 or opLen < 1 or opLen > 128 or string.sub(cur, h + on + 1, h + on + 1) ~= ':' then return {1, 5, 0, 0} end
if on ~= #owner or string.sub(cur, h + 1, h + on) ~= owner then return {1, 3, 0, pttl} end
if string.sub(cur, h + on + 2) ~= opId then return {1, 4, 0, pttl} end
return {1, 2, 0, pttl}

-- lease-acquire-v2
-- lease-acquire-v1's arguments, envelope, statuses and result (v1 and v2
-- may share a key) in fewer Redis calls and less interpreter work: a free
-- key is taken by one SET NX PX (v1: TYPE, then SET), GET and PTTL run only
-- when the key exists, and the TTL is checked by value (tonumber, range,
-- canonical form) instead of by pattern.
-- Acquires the efficiency lease KEYS[1] for the attempt (owner ARGV[1],
-- operation ARGV[3]) with a PX TTL of ARGV[2]. The value is the attempt
-- envelope 'L1:' .. #owner .. ':' .. owner .. ':' .. operationId. The same
-- attempt again is REPLAYED_SAME_OPERATION with the server's remaining
-- PTTL (the TTL is not extended); the same owner under another operation
-- is OWNER_OPERATION_CONFLICT; another live attempt is CONTENDED with its
-- remaining PTTL. Another Redis type, a string that is no envelope, or an
-- envelope without a TTL is WRONG_TYPE (SET NX never overwrites them).
-- O(1); no clock.
-- Result: {1, status, 0, pttlMillis}
-- status: 1 ACQUIRED, 2 REPLAYED_SAME_OPERATION, 3 CONTENDED, 4 OWNER_OPERATION_CONFLICT, 5 WRONG_TYPE, 6 INVALID
if #KEYS ~= 1 or #ARGV ~= 3 then return {1, 6, 0, 0} end
local owner, ttlArg, opId = ARGV[1], ARGV[2], ARGV[3]
local ttl = tonumber(ttlArg)
-- A failed tonumber is nil; tostring gives back exactly a canonical
-- decimal (no sign, leading zero, exponent, fraction or space) below 1e14.
if not (ttl and ttl >= 1 and ttl <= 2592000000 and tostring(ttl) == ttlArg
  and #owner >= 1 and #owner <= 128 and #opId >= 1 and #opId <= 128) then
  return {1, 6, 0, 0}
end
if redis.call('SET', KEYS[1], 'L1:' .. #owner .. ':' .. owner .. ':' .. opId, 'NX', 'PX', ttlArg) then
  return {1, 1, 0, ttl}
end
-- The key exists (a script sees no expiry between two of its calls).
local cur = redis.pcall('GET', KEYS[1])
if type(cur) ~= 'string' then
  if type(cur) == 'table' and cur['err'] and string.sub(cur['err'], 1, 10) == 'WRONGTYPE ' then return {1, 5, 0, 0} end
  return cur
end
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

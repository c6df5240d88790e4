-- lease-acquire-v3
-- lease-acquire-v2's key, envelope, statuses and meaning (v1, v2 and v3
-- hosts share lease keys) with the host doing the work that protects no
-- Redis state: the host validates owner, operation id and TTL and builds
-- the envelope, so a free key costs one SET NX PX and the reply is the
-- integer 1 (ACQUIRED; the PTTL is the TTL sent). Redis itself refuses a PX
-- that is no positive integer. Only the slow paths parse and build a table.
-- Acquires the efficiency lease KEYS[1] by storing the attempt envelope
-- ARGV[1] ('L1:' .. #owner .. ':' .. owner .. ':' .. operationId) with a
-- PX TTL of ARGV[2]. The same envelope again is REPLAYED_SAME_OPERATION
-- with the remaining PTTL (not extended); the same owner prefix under
-- another operation is OWNER_OPERATION_CONFLICT; another live attempt is
-- CONTENDED with its remaining PTTL. Another Redis type, a string that is
-- no envelope, or an envelope without a TTL is WRONG_TYPE (SET NX never
-- overwrites them). O(1); no clock.
-- Result: 1 (ACQUIRED), or {1, status, 0, pttlMillis}
-- status: 1 ACQUIRED, 2 REPLAYED_SAME_OPERATION, 3 CONTENDED, 4 OWNER_OPERATION_CONFLICT, 5 WRONG_TYPE, 6 INVALID
if #KEYS ~= 1 or #ARGV ~= 2 then return {1, 6, 0, 0} end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
-- The key exists (a script sees no expiry between two of its calls).
local cur = redis.pcall('GET', KEYS[1])
if type(cur) ~= 'string' then
  if type(cur) == 'table' and cur['err'] and string.sub(cur['err'], 1, 10) == 'WRONGTYPE ' then return {1, 5, 0, 0} end
  return cur
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then return {1, 5, 0, 0} end
if cur == ARGV[1] then return {1, 2, 0, pttl} end
-- The stored envelope: 'L1:', the owner length n (1..128), ':', n owner
-- bytes, ':', the operation id (1..128 bytes).
local n = string.match(cur, '^L1:([1-9][0-9]?[0-9]?):')
if not n then return {1, 5, 0, 0} end
local h, on = #n + 4, tonumber(n)
local opLen = #cur - h - on - 1
if on > 128 or opLen < 1 or opLen > 128 or string.sub(cur, h + on + 1, h + on + 1) ~= ':' then return {1, 5, 0, 0} end
-- Same owner iff the sent envelope starts with the stored owner prefix
-- 'L1:n:owner:' (the length field and the colons pin where each ends).
if string.sub(ARGV[1], 1, h + on + 1) ~= string.sub(cur, 1, h + on + 1) then return {1, 3, 0, pttl} end
return {1, 4, 0, pttl}

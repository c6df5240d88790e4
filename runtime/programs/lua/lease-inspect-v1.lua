-- lease-inspect-v1
-- Read-only. Reports whether the efficiency lease KEYS[1] is held by the
-- attempt (owner ARGV[1], operation ARGV[2]) and, only then, its remaining
-- PTTL: what a caller whose acquire timed out needs to recover the handle
-- (OWNED) or to learn that it does not hold it. The same owner under
-- another operation is OWNER_OPERATION_CONFLICT. O(1); no clock.
-- Result: {1, status, 0, pttlMillis}
-- status: 1 OWNED, 2 ABSENT, 3 NOT_OWNER, 4 OWNER_OPERATION_CONFLICT, 5 WRONG_TYPE, 6 INVALID
if #KEYS ~= 1 or #ARGV ~= 2 then return {1, 6, 0, 0} end
local owner, opId = ARGV[1], ARGV[2]
if #owner < 1 or #owner > 128 then return {1, 6, 0, 0} end
if #opId < 1 or #opId > 128 then return {1, 6, 0, 0} end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return {1, 2, 0, 0} end
if kind ~= 'string' then return {1, 5, 0, 0} end
local cur = redis.call('GET', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
local n = string.match(cur, '^L1:([1-9][0-9]?[0-9]?):')
if not n or pttl < 0 then return {1, 5, 0, 0} end
local h, on = #n + 4, tonumber(n)
local opLen = #cur - h - on - 1
if on > 128 or opLen < 1 or opLen > 128 or string.sub(cur, h + on + 1, h + on + 1) ~= ':' then return {1, 5, 0, 0} end
if on ~= #owner or string.sub(cur, h + 1, h + on) ~= owner then return {1, 3, 0, 0} end
if string.sub(cur, h + on + 2) ~= opId then return {1, 4, 0, 0} end
return {1, 1, 0, pttl}

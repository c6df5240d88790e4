-- compare-and-delete-v1
-- Replaces GET owner -> DEL. Deletes KEYS[1] only while it holds exactly
-- ARGV[1]. O(1); no clock.
-- Result: {1, status, 0, deletedCount}
-- status: 1 DELETED, 2 ABSENT, 3 NOT_OWNER, 4 WRONG_TYPE, 5 INVALID
if #KEYS ~= 1 or #ARGV ~= 1 then return {1, 5, 0, 0} end
local owner = ARGV[1]
if #owner < 1 or #owner > 128 then return {1, 5, 0, 0} end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return {1, 2, 0, 0} end
if kind ~= 'string' then return {1, 4, 0, 0} end
if redis.call('GET', KEYS[1]) ~= owner then return {1, 3, 0, 0} end
return {1, 1, 0, redis.call('DEL', KEYS[1])}

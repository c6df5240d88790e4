-- cache-read-bounded-v1
-- Replaces GET of a cache entry whose size the caller cannot bound. Reads
-- KEYS[1] only when its length is at most ARGV[1] bytes (1..1048576); a
-- longer value is reported by length (TOO_LARGE) and not a byte of it is
-- sent. The read itself is GETRANGE 0 max (inclusive end: at most max+1
-- bytes), so the reply stays bounded by construction. Read-only; O(1) plus
-- bounded value bytes; no clock.
-- Result: {1, status, 0, value, length}
-- status: 1 FOUND, 2 ABSENT, 3 TOO_LARGE, 4 WRONG_TYPE, 5 INVALID
if #KEYS ~= 1 or #ARGV ~= 1 then return {1, 5, 0, '', 0} end
local maxArg = ARGV[1]
if #maxArg > 7 or not string.match(maxArg, '^[1-9][0-9]*$') then return {1, 5, 0, '', 0} end
local max = tonumber(maxArg)
if max < 1 or max > 1048576 then return {1, 5, 0, '', 0} end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return {1, 2, 0, '', 0} end
if kind ~= 'string' then return {1, 4, 0, '', 0} end
local length = redis.call('STRLEN', KEYS[1])
if length > max then return {1, 3, 0, '', length} end
return {1, 1, 0, redis.call('GETRANGE', KEYS[1], 0, max), length}

-- notify-inspect-v1
-- Read-only: what the intent record holds, for GET /v1/notify/{id}: the
-- state, attempts, remaining retention, the stream entry id, the plan
-- digest and the receipt log (two-byte length-prefixed host-encoded
-- receipts). The record is checked as by notify-submit-v1 (WRONG_TYPE).
-- KEYS[1] intent record. No ARGV. No clock. O(1).
-- Result: {1, status, 0, state, attempts, recordTtlMillis, entryId, planDigest, receipts}
-- status: 1 FOUND, 2 ABSENT, 3 WRONG_TYPE, 4 INVALID
if #KEYS ~= 1 or #ARGV ~= 0 then return {1, 4, 0, 0, 0, 0, '', '', ''} end
local rk = redis.call('TYPE', KEYS[1])['ok']
if rk == 'none' then return {1, 2, 0, 0, 0, 0, '', '', ''} end
if rk ~= 'hash' then return {1, 3, 0, 0, 0, 0, '', '', ''} end
local f = redis.call('HMGET', KEYS[1], 'v', 'st', 'att', 'eid', 'pd', 'rc')
local pttl = redis.call('PTTL', KEYS[1])
if f[1] ~= '1' or not f[2] or not string.match(f[2], '^[1-6]$') or not f[3] or not (f[3] == '0' or string.match(f[3], '^[1-9][0-9]?[0-9]?[0-9]?$')) then return {1, 3, 0, 0, 0, 0, '', '', ''} end
if not f[4] or not string.match(f[4], '^[0-9]+%-[0-9]+$') or #f[4] > 41 or not f[5] or #f[5] ~= 64 or not f[6] or #f[6] > 16384 or pttl < 0 then return {1, 3, 0, 0, 0, 0, '', '', ''} end
return {1, 1, 0, tonumber(f[2]), tonumber(f[3]), pttl, f[4], f[5], f[6]}

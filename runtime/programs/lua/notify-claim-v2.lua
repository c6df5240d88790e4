-- notify-claim-v2
-- Begin one delivery attempt of an intent read from the stream, never
-- after an attempt that may have been sent: notify-claim-v1 with one
-- change. Consumer dedup first: a record already final (3 DELIVERED,
-- 4 FAILED, 5 QUARANTINED, 6 INDETERMINATE) is ALREADY_FINAL and its
-- entry is acknowledged (XACK); an absent record (retention over) is
-- ABSENT, also acknowledged. A record found DELIVERING (2) means an
-- earlier attempt began and was never finalized (its consumer died, was
-- stopped or could not record the receipt): that send may have happened,
-- so no attempt follows on any transport. The record becomes
-- INDETERMINATE (final) and the entry is acknowledged: IN_DOUBT. A
-- PENDING record whose attempts reached maxAttempts (definite rejections
-- only) becomes FAILED and is acknowledged: EXHAUSTED. Otherwise
-- attempts + 1 and DELIVERING: CLAIMED. A repeat of a CLAIMED call is
-- therefore IN_DOUBT, never a second attempt.
-- KEYS[1] stream, KEYS[2] intent record (one slot). ARGV: group, entryId,
-- maxAttempts (1..1000). The record is checked as by notify-submit-v1
-- (WRONG_TYPE); every check runs before the first write. TTL unchanged.
-- No clock. O(1).
-- Result: {1, status, 0, state, attempts, acked}
-- status: 1 CLAIMED, 2 ALREADY_FINAL, 3 EXHAUSTED, 4 ABSENT, 5 WRONG_TYPE, 6 INVALID, 7 IN_DOUBT
if #KEYS ~= 2 or #ARGV ~= 3 then return {1, 6, 0, 0, 0, 0} end
local g, e, mx = ARGV[1], ARGV[2], ARGV[3]
if #g < 1 or #g > 64 or not string.match(g, '^[%w%._%-]+$') then return {1, 6, 0, 0, 0, 0} end
if #e > 41 or not string.match(e, '^[0-9]+%-[0-9]+$') then return {1, 6, 0, 0, 0, 0} end
if #mx > 4 or not string.match(mx, '^[1-9][0-9]*$') or tonumber(mx) > 1000 then return {1, 6, 0, 0, 0, 0} end
local sk = redis.call('TYPE', KEYS[1])['ok']
local rk = redis.call('TYPE', KEYS[2])['ok']
if (sk ~= 'none' and sk ~= 'stream') or (rk ~= 'none' and rk ~= 'hash') then return {1, 5, 0, 0, 0, 0} end
if rk == 'none' then
  return {1, 4, 0, 0, 0, redis.call('XACK', KEYS[1], g, e)}
end
local f = redis.call('HMGET', KEYS[2], 'v', 'st', 'att', 'eid', 'pd', 'rc')
local pttl = redis.call('PTTL', KEYS[2])
if f[1] ~= '1' or not f[2] or not string.match(f[2], '^[1-6]$') or not f[3] or not (f[3] == '0' or string.match(f[3], '^[1-9][0-9]?[0-9]?[0-9]?$')) then return {1, 5, 0, 0, 0, 0} end
if not f[4] or not string.match(f[4], '^[0-9]+%-[0-9]+$') or #f[4] > 41 or not f[5] or #f[5] ~= 64 or not f[6] or #f[6] > 16384 or pttl < 0 then return {1, 5, 0, 0, 0, 0} end
local st, att = tonumber(f[2]), tonumber(f[3])
if st >= 3 then
  return {1, 2, 0, st, att, redis.call('XACK', KEYS[1], g, e)}
end
if st == 2 then
  redis.call('HSET', KEYS[2], 'st', '6')
  return {1, 7, 0, 6, att, redis.call('XACK', KEYS[1], g, e)}
end
if att >= tonumber(mx) then
  redis.call('HSET', KEYS[2], 'st', '4')
  return {1, 3, 0, 4, att, redis.call('XACK', KEYS[1], g, e)}
end
redis.call('HSET', KEYS[2], 'st', '2', 'att', tostring(att + 1))
return {1, 1, 0, 2, att + 1, 0}

-- notify-claim-v1
-- Begin one delivery attempt of an intent read from the stream: consumer
-- dedup first. A record already final (3 DELIVERED, 4 FAILED,
-- 5 QUARANTINED, 6 INDETERMINATE) is ALREADY_FINAL and its entry is
-- acknowledged (XACK), so a redelivered entry never reaches a transport
-- again; an absent record (retention over) is ABSENT, also acknowledged.
-- A record whose attempts reached maxAttempts is EXHAUSTED: it becomes
-- final (INDETERMINATE when the last attempt was in flight, DELIVERING,
-- since that send may have happened; FAILED otherwise) and is
-- acknowledged. Otherwise attempts + 1 and DELIVERING: CLAIMED.
-- KEYS[1] stream, KEYS[2] intent record (one slot). ARGV: group, entryId,
-- maxAttempts (1..1000). The record is checked as by notify-submit-v1
-- (WRONG_TYPE); every check runs before the first write. TTL unchanged.
-- No clock. O(1).
-- Result: {1, status, 0, state, attempts, acked}
-- status: 1 CLAIMED, 2 ALREADY_FINAL, 3 EXHAUSTED, 4 ABSENT, 5 WRONG_TYPE, 6 INVALID
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
if att >= tonumber(mx) then
  local ns = 4
  if st == 2 then ns = 6 end
  redis.call('HSET', KEYS[2], 'st', tostring(ns))
  return {1, 3, 0, ns, att, redis.call('XACK', KEYS[1], g, e)}
end
redis.call('HSET', KEYS[2], 'st', '2', 'att', tostring(att + 1))
return {1, 1, 0, 2, att + 1, 0}

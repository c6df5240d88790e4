-- rate-concurrency-renew-v1
-- Extends a live owner's concurrency permit to effectiveNow + ARGV[3].
-- Replaces ZSCORE -> ZADD XX from the client. An expired or unknown owner is
-- NOT_HELD (it must acquire again; its slot may be taken).
-- State KEYS[1]: ZSET owner -> expiry ms plus the sentinel '!v1:<revision>'
-- scored -ts (last effective time; owners may not start with '!'). Reads
-- Redis TIME once. Clock: effectiveNow = max(TIME, ts); ts - TIME > step is
-- CLOCK_UNSAFE (nothing written). Owners with expiry <= effectiveNow are
-- pruned first (bounded by maxPermits <= 10000), even when refused.
-- ARGV: 1 revision, 2 owner, 3 ttlMillis, 4 maxClockStepMillis,
-- 5 cleanupGraceMillis. O(log N + M), M <= maxPermits.
-- Result: {1, status, serverNowMillis, inUse, expiresAtMillis}
-- status: 1 RENEWED, 2 NOT_HELD, 3 CLOCK_UNSAFE, 4 WRONG_TYPE, 5 INVALID
if #KEYS ~= 1 or #ARGV ~= 5 then return {1, 5, 0, 0, 0} end
local rev, owner, ttlArg, stepArg, graceArg = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if #rev < 1 or #rev > 64 then return {1, 5, 0, 0, 0} end
if #owner < 1 or #owner > 128 or string.sub(owner, 1, 1) == '!' then return {1, 5, 0, 0, 0} end
if #ttlArg > 16 or not string.match(ttlArg, '^[1-9][0-9]*$') then return {1, 5, 0, 0, 0} end
if #stepArg > 16 or not (stepArg == '0' or string.match(stepArg, '^[1-9][0-9]*$')) then return {1, 5, 0, 0, 0} end
if #graceArg > 16 or not (graceArg == '0' or string.match(graceArg, '^[1-9][0-9]*$')) then return {1, 5, 0, 0, 0} end
local ttl, step, grace = tonumber(ttlArg), tonumber(stepArg), tonumber(graceArg)
if ttl > 2592000000 or step > 86400000 or grace > 86400000 then return {1, 5, 0, 0, 0} end
local tv = redis.call('TIME')
local now = tonumber(tv[1]) * 1000 + math.floor(tonumber(tv[2]) / 1000)
local sentinel = '!v1:' .. rev
local kind = redis.call('TYPE', KEYS[1])['ok']
local ts = false
if kind == 'zset' then
  local raw = redis.call('ZSCORE', KEYS[1], sentinel)
  if not raw or #raw > 17 or not (raw == '0' or string.match(raw, '^%-[1-9][0-9]*$')) then return {1, 4, now, 0, 0} end
  ts = -tonumber(raw)
  if ts > 9007199254740991 then return {1, 4, now, 0, 0} end
elseif kind ~= 'none' then
  return {1, 4, now, 0, 0}
end
local eff = now
if ts and ts > now then
  if ts - now > step then return {1, 3, now, 0, 0} end
  eff = ts
end
-- Bounded prune: owners never exceed maxPermits (<= 10000); the sentinel's
-- score is <= 0 and stays.
if ts then redis.call('ZREMRANGEBYSCORE', KEYS[1], '(0', string.format('%.0f', eff)) end
local inUse = redis.call('ZCOUNT', KEYS[1], '(0', '+inf')
if not redis.call('ZSCORE', KEYS[1], owner) then return {1, 2, now, inUse, 0} end
redis.call('ZADD', KEYS[1], 'XX', string.format('%.0f', eff + ttl), owner)
redis.call('ZADD', KEYS[1], string.format('%.0f', -eff), sentinel)
local top = redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', '(0', 'WITHSCORES', 'LIMIT', 0, 1)
-- Key TTL is real time: the latest expiry measured from TIME, plus grace.
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', tonumber(top[2]) - now + grace))
return {1, 1, now, inUse, eff + ttl}

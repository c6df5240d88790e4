-- rate-concurrency-release-v1
-- Returns a live owner's concurrency permit; only the owner can (owner-safe
-- release). Replaces ZSCORE -> ZREM from the client. An expired or unknown
-- owner is NOT_HELD. The key's TTL is left as is.
-- State KEYS[1]: ZSET owner -> expiry ms plus the sentinel '!v1:<revision>'
-- scored -ts (last effective time; owners may not start with '!'). Reads
-- Redis TIME once. Clock: effectiveNow = max(TIME, ts); ts - TIME > step is
-- CLOCK_UNSAFE (nothing written). Owners with expiry <= effectiveNow are
-- pruned first (bounded by maxPermits <= 10000), even when refused.
-- ARGV: 1 revision, 2 owner, 3 maxClockStepMillis. O(log N + M).
-- Result: {1, status, serverNowMillis, inUse}
-- status: 1 RELEASED, 2 NOT_HELD, 3 CLOCK_UNSAFE, 4 WRONG_TYPE, 5 INVALID
if #KEYS ~= 1 or #ARGV ~= 3 then return {1, 5, 0, 0} end
local rev, owner, stepArg = ARGV[1], ARGV[2], ARGV[3]
if #rev < 1 or #rev > 64 then return {1, 5, 0, 0} end
if #owner < 1 or #owner > 128 or string.sub(owner, 1, 1) == '!' then return {1, 5, 0, 0} end
if #stepArg > 16 or not (stepArg == '0' or string.match(stepArg, '^[1-9][0-9]*$')) then return {1, 5, 0, 0} end
local step = tonumber(stepArg)
if step > 86400000 then return {1, 5, 0, 0} end
local tv = redis.call('TIME')
local now = tonumber(tv[1]) * 1000 + math.floor(tonumber(tv[2]) / 1000)
local sentinel = '!v1:' .. rev
local kind = redis.call('TYPE', KEYS[1])['ok']
local ts = false
if kind == 'zset' then
  local raw = redis.call('ZSCORE', KEYS[1], sentinel)
  if not raw or #raw > 17 or not (raw == '0' or string.match(raw, '^%-[1-9][0-9]*$')) then return {1, 4, now, 0} end
  ts = -tonumber(raw)
  if ts > 9007199254740991 then return {1, 4, now, 0} end
elseif kind ~= 'none' then
  return {1, 4, now, 0}
end
local eff = now
if ts and ts > now then
  if ts - now > step then return {1, 3, now, 0} end
  eff = ts
end
-- Bounded prune: owners never exceed maxPermits (<= 10000); the sentinel's
-- score is <= 0 and stays.
if ts then redis.call('ZREMRANGEBYSCORE', KEYS[1], '(0', string.format('%.0f', eff)) end
local inUse = redis.call('ZCOUNT', KEYS[1], '(0', '+inf')
if not redis.call('ZSCORE', KEYS[1], owner) then return {1, 2, now, inUse} end
redis.call('ZREM', KEYS[1], owner)
redis.call('ZADD', KEYS[1], string.format('%.0f', -eff), sentinel)
return {1, 1, now, inUse - 1}

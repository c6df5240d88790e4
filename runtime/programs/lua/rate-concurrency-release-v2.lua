-- rate-concurrency-release-v2
-- rate-concurrency-release-v1's state, algorithm, clock rule and statuses
-- (v1 and v2 may share a key) in fewer Redis calls and less interpreter
-- work: the sentinel's ZSCORE doubles as the type check (EXISTS runs only
-- when it finds nothing; v1: TYPE + ZSCORE on every call), integers are
-- checked by value (tonumber, range, integrality) instead of by pattern.
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
local rev, owner, step = ARGV[1], ARGV[2], tonumber(ARGV[3])
-- A failed tonumber is nil and every comparison with NaN is false.
if not (step and #rev >= 1 and #rev <= 64
  and #owner >= 1 and #owner <= 128 and string.sub(owner, 1, 1) ~= '!'
  and step >= 0 and step <= 86400000 and step % 1 == 0) then
  return {1, 5, 0, 0}
end
local tv = redis.call('TIME')
local us = tv[2] + 0
local now = tv[1] * 1000 + (us - us % 1000) / 1000
local sentinel = '!v1:' .. rev
-- ZSCORE fails on a non-zset key with WRONGTYPE and is false for a missing
-- key or member: only then does EXISTS tell a fresh set from a sorted set
-- without this revision's sentinel.
local raw = redis.pcall('ZSCORE', KEYS[1], sentinel)
local ts = false
if raw then
  if type(raw) == 'table' then
    if raw['err'] and string.sub(raw['err'], 1, 10) == 'WRONGTYPE ' then return {1, 4, now, 0} end
    return raw
  end
  if #raw > 17 or not (raw == '0' or string.match(raw, '^%-[1-9][0-9]*$')) then return {1, 4, now, 0} end
  ts = -raw
  if ts > 9007199254740991 then return {1, 4, now, 0} end
elseif redis.call('EXISTS', KEYS[1]) == 1 then
  return {1, 4, now, 0}
end
local eff = now
if ts and ts > now then
  if ts - now > step then return {1, 3, now, 0} end
  eff = ts
end
-- Bounded prune: owners never exceed maxPermits (<= 10000); the sentinel's
-- score is <= 0 and stays.
if ts then redis.call('ZREMRANGEBYSCORE', KEYS[1], '(0', string.format('%d', eff)) end
local inUse = redis.call('ZCOUNT', KEYS[1], '(0', '+inf')
if not redis.call('ZSCORE', KEYS[1], owner) then return {1, 2, now, inUse} end
redis.call('ZREM', KEYS[1], owner)
redis.call('ZADD', KEYS[1], string.format('%d', -eff), sentinel)
return {1, 1, now, inUse - 1}

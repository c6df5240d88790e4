-- rate-concurrency-acquire-v2
-- rate-concurrency-acquire-v1's state, algorithm, clock rule and statuses
-- (v1 and v2 may share a key) in fewer Redis calls and less interpreter
-- work: the sentinel's ZSCORE doubles as the type check (EXISTS runs only
-- when it finds nothing; v1: TYPE + ZSCORE on every call), an acquire
-- writes the owner and the sentinel in one ZADD, integers are checked by
-- value (tonumber, range, integrality) instead of by pattern.
-- Concurrency limiter (not a rate limit; never emulated with token-bucket
-- cost). Replaces ZREMRANGEBYSCORE -> ZCARD -> ZADD from the client. Takes a
-- permit for owner ARGV[3] until effectiveNow + ARGV[4] when fewer than
-- ARGV[2] live owners hold one. A live owner gets ALREADY_HELD (not
-- extended: renew does that); a full set gets CONTENDED with the wait until
-- the earliest expiry.
-- State KEYS[1]: ZSET owner -> expiry ms plus the sentinel '!v1:<revision>'
-- scored -ts (last effective time; owners may not start with '!'). Reads
-- Redis TIME once. Clock: effectiveNow = max(TIME, ts); ts - TIME > step is
-- CLOCK_UNSAFE (nothing written). Owners with expiry <= effectiveNow are
-- pruned first (bounded by maxPermits <= 10000), even when refused.
-- ARGV: 1 revision, 2 maxPermits (<= 10000), 3 owner (1..128 bytes),
-- 4 ttlMillis, 5 maxClockStepMillis, 6 cleanupGraceMillis.
-- O(log N + M), M <= maxPermits.
-- Result: {1, status, serverNowMillis, inUse, maxPermits, expiresAtMillis, retryAfterMillis}
-- status: 1 ACQUIRED, 2 ALREADY_HELD, 3 CONTENDED, 4 CLOCK_UNSAFE, 5 WRONG_TYPE, 6 INVALID
if #KEYS ~= 1 or #ARGV ~= 6 then return {1, 6, 0, 0, 0, 0, 0} end
local tonumber = tonumber
local rev, owner = ARGV[1], ARGV[3]
local maxPermits, ttl, step, grace = tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
-- A failed tonumber is nil and every comparison with NaN is false, so each
-- bad value fails this one test.
if not (maxPermits and ttl and step and grace and #rev >= 1 and #rev <= 64
  and #owner >= 1 and #owner <= 128 and string.sub(owner, 1, 1) ~= '!'
  and maxPermits >= 1 and maxPermits <= 10000 and maxPermits % 1 == 0
  and ttl >= 1 and ttl <= 2592000000 and ttl % 1 == 0
  and step >= 0 and step <= 86400000 and step % 1 == 0
  and grace >= 0 and grace <= 86400000 and grace % 1 == 0) then
  return {1, 6, 0, 0, 0, 0, 0}
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
    if raw['err'] and string.sub(raw['err'], 1, 10) == 'WRONGTYPE ' then return {1, 5, now, 0, 0, 0, 0} end
    return raw
  end
  if #raw > 17 or not (raw == '0' or string.match(raw, '^%-[1-9][0-9]*$')) then return {1, 5, now, 0, 0, 0, 0} end
  ts = -raw
  if ts > 9007199254740991 then return {1, 5, now, 0, 0, 0, 0} end
elseif redis.call('EXISTS', KEYS[1]) == 1 then
  return {1, 5, now, 0, 0, 0, 0}
end
local eff = now
if ts and ts > now then
  if ts - now > step then return {1, 4, now, 0, 0, 0, 0} end
  eff = ts
end
-- Bounded prune: owners never exceed maxPermits (<= 10000); the sentinel's
-- score is <= 0 and stays.
if ts then redis.call('ZREMRANGEBYSCORE', KEYS[1], '(0', string.format('%d', eff)) end
local inUse = redis.call('ZCOUNT', KEYS[1], '(0', '+inf')
local held = redis.call('ZSCORE', KEYS[1], owner)
if held then return {1, 2, now, inUse, maxPermits, held + 0, 0} end
if inUse >= maxPermits then
  local first = redis.call('ZRANGEBYSCORE', KEYS[1], '(0', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local wait = first[2] - eff
  if wait < 1 then wait = 1 end
  return {1, 3, now, inUse, maxPermits, 0, wait}
end
redis.call('ZADD', KEYS[1], string.format('%d', eff + ttl), owner, string.format('%d', -eff), sentinel)
local top = redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', '(0', 'WITHSCORES', 'LIMIT', 0, 1)
-- Key TTL is real time: the latest expiry measured from TIME, plus grace.
redis.call('PEXPIRE', KEYS[1], string.format('%d', top[2] - now + grace))
return {1, 1, now, inUse + 1, maxPermits, eff + ttl, 0}

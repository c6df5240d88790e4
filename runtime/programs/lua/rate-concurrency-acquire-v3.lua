-- rate-concurrency-acquire-v3
-- rate-concurrency-acquire-v1's and -v2's state, arguments, clock rule,
-- statuses and decisions (v1, v2 and v3 hosts share one permit set during a
-- rolling upgrade: same key, key version 1, owner -> expiry ms plus the
-- sentinel '!v1:<rev>' scored -ts) in fewer Redis calls than v2 (6 on an
-- admit, v2: 8): one ZMSCORE reads the sentinel and the owner (and is the
-- type check: WRONGTYPE on a non-zset; EXISTS only when it finds neither,
-- and an owner without the sentinel is a sorted set that is not ours);
-- ZCARD - 1 after the prune counts the live owners (everything left but the
-- sentinel; v2: ZCOUNT, ZSCORE); the key TTL is one PEXPIRE GT of this
-- owner's expiry (v2: ZREVRANGEBYSCORE of the latest expiry + PEXPIRE).
-- Why GT keeps v1/v2's TTL invariant: every writer (v1, v2 and v3 acquire
-- and renew) leaves the key's TTL >= latest owner expiry - TIME + grace,
-- and an owner's expiry only changes through those writers; GT keeps
-- max(current, this owner's expiry - TIME + grace), so the invariant holds
-- after v3 too. GT treats a key without TTL as infinite, so a new key (no
-- sentinel found) gets a plain PEXPIRE; a sentinel key without TTL is only
-- made by hand and keeps none. GT never lowers the TTL: after a release
-- (which never touches it) or a shorter renew v3 may leave a longer TTL
-- than v2 would; harmless, the TTL is cleanup only (decisions read scores).
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
-- pruned first (bounded by maxPermits <= 10000), even when refused; an
-- owner whose expiry <= effectiveNow does not hold a permit.
-- ARGV: 1 revision, 2 maxPermits (<= 10000), 3 owner (1..128 bytes),
-- 4 ttlMillis, 5 maxClockStepMillis, 6 cleanupGraceMillis.
-- O(log N + M), M <= maxPermits. Needs Redis >= 7.0 (PEXPIRE GT).
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
-- ZMSCORE fails on a non-zset key with WRONGTYPE; for a missing key every
-- score is false. Neither found: EXISTS tells a fresh set from a sorted set
-- without this revision's sentinel; the owner found without the sentinel
-- is such a set.
local sc = redis.pcall('ZMSCORE', KEYS[1], sentinel, owner)
if sc['err'] then
  if string.sub(sc['err'], 1, 10) == 'WRONGTYPE ' then return {1, 5, now, 0, 0, 0, 0} end
  return sc
end
local raw, held = sc[1], sc[2]
local ts = false
if raw then
  if #raw > 17 or not (raw == '0' or string.match(raw, '^%-[1-9][0-9]*$')) then return {1, 5, now, 0, 0, 0, 0} end
  ts = -raw
  if ts > 9007199254740991 then return {1, 5, now, 0, 0, 0, 0} end
elseif held or redis.call('EXISTS', KEYS[1]) == 1 then
  return {1, 5, now, 0, 0, 0, 0}
end
local eff = now
if ts and ts > now then
  if ts - now > step then return {1, 4, now, 0, 0, 0, 0} end
  eff = ts
end
-- Bounded prune: owners never exceed maxPermits (<= 10000); the sentinel's
-- score is <= 0 and stays, so all but one member left is a live owner.
local inUse = 0
if ts then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '(0', string.format('%d', eff))
  inUse = redis.call('ZCARD', KEYS[1]) - 1
end
-- Read before the prune: an owner at or before eff was just pruned.
if held and held + 0 > eff then return {1, 2, now, inUse, maxPermits, held + 0, 0} end
if inUse >= maxPermits then
  local first = redis.call('ZRANGEBYSCORE', KEYS[1], '(0', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local wait = first[2] - eff
  if wait < 1 then wait = 1 end
  return {1, 3, now, inUse, maxPermits, 0, wait}
end
redis.call('ZADD', KEYS[1], string.format('%d', eff + ttl), owner, string.format('%d', -eff), sentinel)
-- Key TTL is real time: this expiry measured from TIME, plus grace; GT
-- keeps a later one (see above).
local pttl = string.format('%d', eff + ttl - now + grace)
if ts then
  redis.call('PEXPIRE', KEYS[1], pttl, 'GT')
else
  redis.call('PEXPIRE', KEYS[1], pttl)
end
return {1, 1, now, inUse + 1, maxPermits, eff + ttl, 0}

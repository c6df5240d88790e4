-- rate-concurrency-renew-v3
-- rate-concurrency-renew-v1's and -v2's state, arguments, clock rule,
-- statuses and replies (v1, v2 and v3 hosts share one permit set during a
-- rolling upgrade: same key, key version 1, owner -> expiry ms plus the
-- sentinel '!v1:<rev>' scored -ts) in fewer Redis calls than v2 (5 on a
-- renewal, v2: 8): one ZMSCORE reads the sentinel and the owner (and is the
-- type check: WRONGTYPE on a non-zset; EXISTS only when it finds neither,
-- and an owner without the sentinel is a sorted set that is not ours); no
-- prune: ZCOUNT (effectiveNow, +inf) counts the live owners (v2 prunes
-- (0, effectiveNow] and counts (0, +inf): the same set, the sentinel's
-- score is <= 0), and an owner whose expiry <= effectiveNow does not hold a
-- permit (v2 prunes it first: same decision and reply; v3 leaves it for the
-- next acquire's prune); the owner and the sentinel are written in one
-- ZADD XX as v2; the key TTL is one PEXPIRE GT of the new expiry (v2:
-- ZREVRANGEBYSCORE of the latest expiry + PEXPIRE).
-- Why GT keeps v1/v2's TTL invariant: every writer (v1, v2 and v3 acquire
-- and renew) leaves the key's TTL >= latest owner expiry - TIME + grace;
-- GT keeps max(current, new expiry - TIME + grace), so it holds after v3
-- too (the key exists here: the owner was found). GT never lowers the TTL,
-- so after a shorter renewal v3 may leave a longer TTL than v2 would (v2
-- sets it from the latest expiry); harmless, the TTL is cleanup only. A
-- sentinel key without TTL is only made by hand and keeps none.
-- Extends a live owner's concurrency permit to effectiveNow + ARGV[3].
-- Replaces ZSCORE -> ZADD XX from the client. An expired or unknown owner is
-- NOT_HELD (it must acquire again; its slot may be taken).
-- State KEYS[1]: ZSET owner -> expiry ms plus the sentinel '!v1:<revision>'
-- scored -ts (last effective time; owners may not start with '!'). Reads
-- Redis TIME once. Clock: effectiveNow = max(TIME, ts); ts - TIME > step is
-- CLOCK_UNSAFE (nothing written). Owners with expiry <= effectiveNow are
-- not counted and not pruned (acquire prunes them).
-- ARGV: 1 revision, 2 owner, 3 ttlMillis, 4 maxClockStepMillis,
-- 5 cleanupGraceMillis. O(log N), N <= maxPermits + 1 <= 10001.
-- Needs Redis >= 7.0 (PEXPIRE GT).
-- Result: {1, status, serverNowMillis, inUse, expiresAtMillis}
-- status: 1 RENEWED, 2 NOT_HELD, 3 CLOCK_UNSAFE, 4 WRONG_TYPE, 5 INVALID
if #KEYS ~= 1 or #ARGV ~= 5 then return {1, 5, 0, 0, 0} end
local tonumber = tonumber
local rev, owner = ARGV[1], ARGV[2]
local ttl, step, grace = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
-- A failed tonumber is nil and every comparison with NaN is false, so each
-- bad value fails this one test.
if not (ttl and step and grace and #rev >= 1 and #rev <= 64
  and #owner >= 1 and #owner <= 128 and string.sub(owner, 1, 1) ~= '!'
  and ttl >= 1 and ttl <= 2592000000 and ttl % 1 == 0
  and step >= 0 and step <= 86400000 and step % 1 == 0
  and grace >= 0 and grace <= 86400000 and grace % 1 == 0) then
  return {1, 5, 0, 0, 0}
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
  if string.sub(sc['err'], 1, 10) == 'WRONGTYPE ' then return {1, 4, now, 0, 0} end
  return sc
end
local raw, held = sc[1], sc[2]
local ts = false
if raw then
  if #raw > 17 or not (raw == '0' or string.match(raw, '^%-[1-9][0-9]*$')) then return {1, 4, now, 0, 0} end
  ts = -raw
  if ts > 9007199254740991 then return {1, 4, now, 0, 0} end
elseif held or redis.call('EXISTS', KEYS[1]) == 1 then
  return {1, 4, now, 0, 0}
end
-- A fresh key: nobody holds a permit.
if not ts then return {1, 2, now, 0, 0} end
local eff = now
if ts > now then
  if ts - now > step then return {1, 3, now, 0, 0} end
  eff = ts
end
local inUse = redis.call('ZCOUNT', KEYS[1], string.format('(%d', eff), '+inf')
if not held or held + 0 <= eff then return {1, 2, now, inUse, 0} end
redis.call('ZADD', KEYS[1], 'XX', string.format('%d', eff + ttl), owner, string.format('%d', -eff), sentinel)
-- Key TTL is real time: the new expiry measured from TIME, plus grace; GT
-- keeps a later one (see above).
redis.call('PEXPIRE', KEYS[1], string.format('%d', eff + ttl - now + grace), 'GT')
return {1, 1, now, inUse, eff + ttl}

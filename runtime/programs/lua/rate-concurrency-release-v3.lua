-- rate-concurrency-release-v3
-- rate-concurrency-release-v1's and -v2's state, arguments, clock rule,
-- statuses and replies (v1, v2 and v3 hosts share one permit set during a
-- rolling upgrade: same key, key version 1, owner -> expiry ms plus the
-- sentinel '!v1:<rev>' scored -ts) in fewer Redis calls than v2 (5 on a
-- release, v2: 7): one ZMSCORE reads the sentinel and the owner (and is the
-- type check: WRONGTYPE on a non-zset; EXISTS only when it finds neither,
-- and an owner without the sentinel is a sorted set that is not ours); no
-- prune: ZCOUNT (effectiveNow, +inf) counts the live owners (v2 prunes
-- (0, effectiveNow] and counts (0, +inf): the same set, the sentinel's
-- score is <= 0), and an owner whose expiry <= effectiveNow does not hold a
-- permit: NOT_HELD without writing (v2 prunes it first: same status and
-- reply; v3 leaves it for the next acquire's prune).
-- Returns a live owner's concurrency permit; only the owner can (owner-safe
-- release). Replaces ZSCORE -> ZREM from the client. An expired or unknown
-- owner is NOT_HELD. The key's TTL is left as is (acquire and renew keep it
-- past the latest expiry).
-- State KEYS[1]: ZSET owner -> expiry ms plus the sentinel '!v1:<revision>'
-- scored -ts (last effective time; owners may not start with '!'). Reads
-- Redis TIME once. Clock: effectiveNow = max(TIME, ts); ts - TIME > step is
-- CLOCK_UNSAFE (nothing written). Owners with expiry <= effectiveNow are
-- not counted and not pruned (acquire prunes them).
-- ARGV: 1 revision, 2 owner, 3 maxClockStepMillis.
-- O(log N), N <= maxPermits + 1 <= 10001.
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
-- ZMSCORE fails on a non-zset key with WRONGTYPE; for a missing key every
-- score is false. Neither found: EXISTS tells a fresh set from a sorted set
-- without this revision's sentinel; the owner found without the sentinel
-- is such a set.
local sc = redis.pcall('ZMSCORE', KEYS[1], sentinel, owner)
if sc['err'] then
  if string.sub(sc['err'], 1, 10) == 'WRONGTYPE ' then return {1, 4, now, 0} end
  return sc
end
local raw, held = sc[1], sc[2]
local ts = false
if raw then
  if #raw > 17 or not (raw == '0' or string.match(raw, '^%-[1-9][0-9]*$')) then return {1, 4, now, 0} end
  ts = -raw
  if ts > 9007199254740991 then return {1, 4, now, 0} end
elseif held or redis.call('EXISTS', KEYS[1]) == 1 then
  return {1, 4, now, 0}
end
-- A fresh key: nobody holds a permit.
if not ts then return {1, 2, now, 0} end
local eff = now
if ts > now then
  if ts - now > step then return {1, 3, now, 0} end
  eff = ts
end
local inUse = redis.call('ZCOUNT', KEYS[1], string.format('(%d', eff), '+inf')
if not held or held + 0 <= eff then return {1, 2, now, inUse} end
redis.call('ZADD', KEYS[1], string.format('%d', -eff), sentinel)
redis.call('ZREM', KEYS[1], owner)
return {1, 1, now, inUse - 1}

-- rate-gcra-v2
-- rate-gcra-v1's algorithm, clock rule, dedup records and statuses in
-- fewer Redis calls and less interpreter work: the state is one string
-- written with SET PX (v1: a hash, TYPE + HMGET + HSET + PEXPIRE), integers
-- are checked by value (tonumber, range, integrality) instead of by
-- pattern, and the dedup key and arguments are sent only with dedup on.
-- ARGV[2] units per ARGV[3] ms with a burst of ARGV[2]. Times in
-- microseconds: emission = ceil(period*1000/limit) (rounded up:
-- conservative, and why GCRA is not the token bucket); tat =
-- max(storedTat, now); newTat = tat + emission*cost; admits iff newTat - now
-- <= emission*limit. A denial writes no algorithm state. State KEYS[1]: the
-- string 'g1:<tat us>:<ts>:<revision>' (ts = last effective ms), TTL
-- ceil((newTat-now)/1000) + cleanup grace. Clock: effectiveNow = max(TIME,
-- ts); ts - TIME > ARGV[5] is CLOCK_UNSAFE. Dedup KEYS[2] (same slot, only
-- with dedup): hash evaluationId ->
-- 'allowed:limit:remaining:retryAfter:resetAt:recordedAt', at most ARGV[8]
-- ids (a new id evicts one random id when full), key TTL ARGV[7].
-- KEYS: 1 state; 2 dedup, exactly when ARGV has 9 entries.
-- ARGV: 1 revision, 2 limit, 3 periodMillis, 4 cost, 5 maxClockStepMillis,
-- 6 cleanupGraceMillis; with dedup also 7 dedupTtlMillis (>= 1),
-- 8 dedupMaxEntries, 9 evaluationId. No argument reaches a command verbatim
-- except the revision (inside the state value) and the evaluation id (a
-- dedup hash field). O(1); now*1000 + 2*period*1000 < 2^53.
-- Result: {1, status, serverNowMillis, allowed, limit, remaining, retryAfterMillis, resetAtMillis}
-- status: 1 ALLOWED, 2 DENIED, 3 DEDUP_REPLAY, 4 CLOCK_UNSAFE, 5 WRONG_TYPE, 6 INVALID
local n = #ARGV
if not ((n == 6 and #KEYS == 1) or (n == 9 and #KEYS == 2)) then return {1, 6, 0, 0, 0, 0, 0, 0} end
local tonumber = tonumber
local rev = ARGV[1]
local limit, period, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local step, grace = tonumber(ARGV[5]), tonumber(ARGV[6])
-- A failed tonumber is nil and every comparison with NaN is false, so each
-- bad value fails this one test.
if not (limit and period and cost and step and grace and #rev >= 1 and #rev <= 64
  and limit >= 1 and limit <= 1000000000 and limit % 1 == 0
  and cost >= 1 and cost <= limit and cost % 1 == 0
  and period >= 1 and period <= 2592000000 and period % 1 == 0
  and step >= 0 and step <= 86400000 and step % 1 == 0
  and grace >= 0 and grace <= 86400000 and grace % 1 == 0) then
  return {1, 6, 0, 0, 0, 0, 0, 0}
end
local dttl, dmax, evalId = 0, 0, ''
if n == 9 then
  dttl, dmax, evalId = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9]
  if not (dttl and dmax and dttl >= 1 and dttl <= 86400000 and dttl % 1 == 0
    and dmax >= 1 and dmax <= 4096 and dmax % 1 == 0 and #evalId >= 1 and #evalId <= 128) then
    return {1, 6, 0, 0, 0, 0, 0, 0}
  end
end
local tv = redis.call('TIME')
local us = tv[2] + 0
local now = tv[1] * 1000 + (us - us % 1000) / 1000
-- GET is false for a missing key (a fresh window) and fails on any other
-- type with WRONGTYPE.
-- GET is false for a missing key (a fresh state) and fails on any other
-- type with WRONGTYPE.
local st = redis.pcall('GET', KEYS[1])
local stored, last = 0, 0
if st then
  if type(st) == 'table' then
    if st['err'] and string.sub(st['err'], 1, 10) == 'WRONGTYPE ' then return {1, 5, now, 0, 0, 0, 0, 0} end
    return st
  end
  -- The pattern admits only digits, so the coercions below cannot fail.
  local t, l, sr
  if #st <= 110 then t, l, sr = string.match(st, '^g1:(%d+):(%d+):(.*)$') end
  if sr ~= rev or #t > 16 or #l > 16 then return {1, 5, now, 0, 0, 0, 0, 0} end
  stored, last = t + 0, l + 0
  if stored > 9007199254740991 or last > 9007199254740991 then return {1, 5, now, 0, 0, 0, 0, 0} end
end
local rec = false
if n == 9 then
  -- HGET is false for a missing key or id and fails on a non-hash key.
  rec = redis.pcall('HGET', KEYS[2], evalId)
  if rec then
    if type(rec) == 'table' then
      if rec['err'] and string.sub(rec['err'], 1, 10) == 'WRONGTYPE ' then return {1, 5, now, 0, 0, 0, 0, 0} end
      return rec
    end
    local a, l, rm, ra, rs, at = string.match(rec, '^([01]):(%d+):(%d+):(%d+):(%d+):(%d+)$')
    if #rec > 120 or not at then return {1, 5, now, 0, 0, 0, 0, 0} end
    if now - at < dttl then return {1, 3, now, a + 0, l + 0, rm + 0, ra + 0, rs + 0} end
  end
end
local eff = now
if last > now then
  if last - now > step then return {1, 4, now, 0, 0, 0, 0, 0} end
  eff = last
end
-- Exact integer division below 2^53 via math.fmod (a double floor(a/b)
-- can round up near 2^53).
local fmod = math.fmod
local full = period * 1000
local r = fmod(full, limit)
local emission = (full - r) / limit
if r > 0 then emission = emission + 1 end
local tau = emission * limit
local nowU = eff * 1000
local tat = nowU
if stored > nowU then tat = stored end
local nextTat = tat + emission * cost
local allowed, remaining, retry, resetAt = 0, 0, 0, 0
if nextTat - nowU <= tau then
  allowed = 1
  local slack = tau - (nextTat - nowU)
  remaining = (slack - fmod(slack, emission)) / emission
  local life = nextTat - nowU
  r = fmod(life, 1000)
  local ttl = (life - r) / 1000
  if r > 0 then ttl = ttl + 1 end
  -- Integers below 2^53 render exactly with %d; the revision is appended,
  -- not formatted (%s would stop at a NUL byte).
  redis.call('SET', KEYS[1], string.format('g1:%d:%d:', nextTat, eff) .. rev, 'PX', string.format('%d', ttl + grace))
  resetAt = nextTat
else
  local slack = tau - (tat - nowU)
  if slack > 0 then remaining = (slack - fmod(slack, emission)) / emission end
  local over = nextTat - nowU - tau
  r = fmod(over, 1000)
  retry = (over - r) / 1000
  if r > 0 then retry = retry + 1 end
  resetAt = tat
end
r = fmod(resetAt, 1000)
resetAt = (resetAt - r) / 1000
if r > 0 then resetAt = resetAt + 1 end
if n == 9 then
  -- A new id (HGET found none) evicts one random id when the hash is full.
  if not rec and redis.call('HLEN', KEYS[2]) >= dmax then
    local victim = redis.call('HRANDFIELD', KEYS[2])
    redis.call('HDEL', KEYS[2], victim)
  end
  redis.call('HSET', KEYS[2], evalId, string.format('%d:%d:%d:%d:%d:%d', allowed, limit, remaining, retry, resetAt, now))
  redis.call('PEXPIRE', KEYS[2], string.format('%d', dttl))
end
if allowed == 1 then return {1, 1, now, 1, limit, remaining, 0, resetAt} end
return {1, 2, now, 0, limit, remaining, retry, resetAt}

-- rate-token-bucket-v2
-- rate-token-bucket-v1's algorithm, clock rule, dedup records and statuses
-- in fewer Redis calls and less interpreter work: the state is one string
-- written with SET PX (v1: a hash, HMGET + TYPE + HSET + PEXPIRE), integers
-- are checked by value (tonumber, range, integrality) instead of by
-- pattern, and the dedup key and arguments are sent only with dedup on.
-- Amounts are micro-tokens (SCALE = 1000000): elapsed = effectiveNow - ts;
-- refill = floor(elapsed*refill/period) (saturating at capacity once
-- elapsed >= horizon, so the product stays below 2^53); available =
-- min(capacity, tokens + refill); admits iff available >= cost. A fresh
-- bucket is full. A denial writes no algorithm state. State KEYS[1]: the
-- string '1:<tokens>:<ts>:<revision>' (ts = last effective time), TTL
-- horizon + cleanup grace with horizon = ceil(capacity*period/refill) <= 30
-- days. Clock: effectiveNow = max(serverNow, ts); ts - serverNow > ARGV[6]
-- is CLOCK_UNSAFE. Dedup KEYS[2] (same slot, only with dedup): hash
-- evaluationId -> 'allowed:limit:remaining:retryAfter:resetAt:recordedAt',
-- at most ARGV[9] ids (a new id evicts one random id when full), key TTL
-- ARGV[8].
-- KEYS: 1 state; 2 dedup, exactly when ARGV has 10 entries.
-- ARGV: 1 revision, 2 capacityScaled, 3 refillScaled, 4 periodMillis,
-- 5 costScaled, 6 maxClockStepMillis, 7 cleanupGraceMillis; with dedup
-- also 8 dedupTtlMillis (>= 1), 9 dedupMaxEntries, 10 evaluationId. No
-- argument reaches a command verbatim except the revision (inside the
-- state value) and the evaluation id (a dedup hash field). O(1);
-- capacity*period <= 2^52.
-- Result: {1, status, serverNowMillis, allowed, limit, remaining, retryAfterMillis, resetAtMillis}
-- status: 1 ALLOWED, 2 DENIED, 3 DEDUP_REPLAY, 4 CLOCK_UNSAFE, 5 WRONG_TYPE, 6 INVALID
local n = #ARGV
if not ((n == 7 and #KEYS == 1) or (n == 10 and #KEYS == 2)) then return {1, 6, 0, 0, 0, 0, 0, 0} end
local tonumber = tonumber
local rev = ARGV[1]
local cap, refill, period, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local step, grace = tonumber(ARGV[6]), tonumber(ARGV[7])
-- A failed tonumber is nil and every comparison with NaN is false, so each
-- bad value fails this one test.
if not (cap and refill and period and cost and step and grace and #rev >= 1 and #rev <= 64
  and cap >= 1 and cap <= 4503599627370496 and cap % 1 == 0
  and refill >= 1 and refill <= 4503599627370496 and refill % 1 == 0
  and period >= 1 and period <= 2592000000 and period % 1 == 0
  and cost >= 1 and cost <= cap and cost % 1 == 0
  and step >= 0 and step <= 86400000 and step % 1 == 0
  and grace >= 0 and grace <= 86400000 and grace % 1 == 0
  and cap * period <= 4503599627370496) then
  return {1, 6, 0, 0, 0, 0, 0, 0}
end
-- Exact integer division below 2^53 via math.fmod (a double floor(a/b) can
-- round up near 2^53).
local fmod = math.fmod
local full = cap * period
local r = fmod(full, refill)
local horizon = (full - r) / refill
if r > 0 then horizon = horizon + 1 end
if horizon > 2592000000 then return {1, 6, 0, 0, 0, 0, 0, 0} end
local dttl, dmax, evalId = 0, 0, ''
if n == 10 then
  dttl, dmax, evalId = tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10]
  if not (dttl and dmax and dttl >= 1 and dttl <= 86400000 and dttl % 1 == 0
    and dmax >= 1 and dmax <= 4096 and dmax % 1 == 0 and #evalId >= 1 and #evalId <= 128) then
    return {1, 6, 0, 0, 0, 0, 0, 0}
  end
end
local tv = redis.call('TIME')
local us = tv[2] + 0
local now = tv[1] * 1000 + (us - us % 1000) / 1000
-- GET is false for a missing key (a fresh bucket) and fails on any other
-- type with WRONGTYPE.
local st = redis.pcall('GET', KEYS[1])
local tokens, last = cap, now
if st then
  if type(st) == 'table' then
    if st['err'] and string.sub(st['err'], 1, 10) == 'WRONGTYPE ' then return {1, 5, now, 0, 0, 0, 0, 0} end
    return st
  end
  -- The pattern admits only digits, so the coercions below cannot fail.
  local t, l, sr
  if #st <= 100 then t, l, sr = string.match(st, '^1:(%d+):(%d+):(.*)$') end
  if sr ~= rev or #t > 16 or #l > 16 then return {1, 5, now, 0, 0, 0, 0, 0} end
  tokens, last = t + 0, l + 0
  if tokens > cap or last > 9007199254740991 then return {1, 5, now, 0, 0, 0, 0, 0} end
end
local rec = false
if n == 10 then
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
local available = cap
local elapsed = eff - last
if elapsed < horizon then
  -- elapsed < horizon bounds elapsed*refill below capacity*period + refill < 2^53.
  local num = elapsed * refill
  local gained = (num - fmod(num, period)) / period
  if tokens + gained < cap then available = tokens + gained end
end
local allowed, remaining, retry = 0, available, 0
if available >= cost then
  allowed, remaining = 1, available - cost
  -- Integers below 2^53 render exactly with %d; the revision is appended,
  -- not formatted (%s would stop at a NUL byte).
  redis.call('SET', KEYS[1], string.format('1:%d:%d:', remaining, eff) .. rev, 'PX', string.format('%d', horizon + grace))
else
  local need = (cost - available) * period
  r = fmod(need, refill)
  retry = (need - r) / refill
  if r > 0 then retry = retry + 1 end
end
local fill = (cap - remaining) * period
r = fmod(fill, refill)
local resetAt = eff + (fill - r) / refill
if r > 0 then resetAt = resetAt + 1 end
if n == 10 then
  -- A new id (HGET found none) evicts one random id when the hash is full.
  if not rec and redis.call('HLEN', KEYS[2]) >= dmax then
    local victim = redis.call('HRANDFIELD', KEYS[2])
    redis.call('HDEL', KEYS[2], victim)
  end
  redis.call('HSET', KEYS[2], evalId, string.format('%d:%d:%d:%d:%d:%d', allowed, cap, remaining, retry, resetAt, now))
  redis.call('PEXPIRE', KEYS[2], string.format('%d', dttl))
end
if allowed == 1 then return {1, 1, now, 1, cap, remaining, retry, resetAt} end
return {1, 2, now, 0, cap, remaining, retry, resetAt}

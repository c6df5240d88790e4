-- rate-sliding-counter-v2
-- rate-sliding-counter-v1's algorithm, clock rule, dedup records and
-- statuses in fewer Redis calls and less interpreter work: the state is one
-- string written with SET PX (v1: a hash, TYPE + HMGET + HSET + PEXPIRE),
-- integers are checked by value (tonumber, range, integrality) instead of
-- by pattern, and the dedup key and arguments are sent only with dedup on.
-- windowStart = effectiveNow - effectiveNow mod window; previousWeight =
-- ceil((window - elapsed) * SCALE / window) with SCALE = 1000000; weighted =
-- current*SCALE + previous*previousWeight; admits iff weighted + cost*SCALE
-- <= limit*SCALE. Approximate (never exact remaining). A denial writes no
-- algorithm state. State KEYS[1]: the string 's1:<cur>:<prev>:<ts>:<revision>'
-- (ts = last effective time; cur counts the window holding ts, prev the one
-- before it), TTL 2*window + cleanup grace. v1 also stored the window id; it
-- is always floor(ts/window) (ts never goes back), so v2 derives it. Clock:
-- effectiveNow = max(serverNow, ts); ts - serverNow > ARGV[5] is
-- CLOCK_UNSAFE. Dedup KEYS[2] (same slot, only with dedup): hash
-- evaluationId -> 'allowed:limit:remaining:retryAfter:resetAt:recordedAt',
-- at most ARGV[8] ids (a new id evicts one random id when full), key TTL
-- ARGV[7].
-- KEYS: 1 state; 2 dedup, exactly when ARGV has 9 entries.
-- ARGV: 1 revision, 2 limit, 3 cost, 4 windowMillis, 5 maxClockStepMillis,
-- 6 cleanupGraceMillis; with dedup also 7 dedupTtlMillis (>= 1),
-- 8 dedupMaxEntries, 9 evaluationId. No argument reaches a command verbatim
-- except the revision (inside the state value) and the evaluation id (a
-- dedup hash field). O(1); limit <= 10^9 and window <= 30 days keep
-- integers below 2^53.
-- Result: {1, status, serverNowMillis, allowed, limit, remaining, retryAfterMillis, resetAtMillis}
-- status: 1 ALLOWED, 2 DENIED, 3 DEDUP_REPLAY, 4 CLOCK_UNSAFE, 5 WRONG_TYPE, 6 INVALID
local n = #ARGV
if not ((n == 6 and #KEYS == 1) or (n == 9 and #KEYS == 2)) then return {1, 6, 0, 0, 0, 0, 0, 0} end
local tonumber = tonumber
local rev = ARGV[1]
local limit, cost, win = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local step, grace = tonumber(ARGV[5]), tonumber(ARGV[6])
-- A failed tonumber is nil and every comparison with NaN is false, so each
-- bad value fails this one test.
if not (limit and cost and win and step and grace and #rev >= 1 and #rev <= 64
  and limit >= 1 and limit <= 1000000000 and limit % 1 == 0
  and cost >= 1 and cost <= limit and cost % 1 == 0
  and win >= 1 and win <= 2592000000 and win % 1 == 0
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
-- GET is false for a missing key (a fresh window) and fails on any other
-- type with WRONGTYPE.
local st = redis.pcall('GET', KEYS[1])
local cur, prev, last = 0, 0, 0
if st then
  if type(st) == 'table' then
    if st['err'] and string.sub(st['err'], 1, 10) == 'WRONGTYPE ' then return {1, 5, now, 0, 0, 0, 0, 0} end
    return st
  end
  -- The pattern admits only digits, so the coercions below cannot fail.
  local c, p, l, sr
  if #st <= 130 then c, p, l, sr = string.match(st, '^s1:(%d+):(%d+):(%d+):(.*)$') end
  if sr ~= rev or #c > 16 or #p > 16 or #l > 16 then return {1, 5, now, 0, 0, 0, 0, 0} end
  cur, prev, last = c + 0, p + 0, l + 0
  if cur > 9007199254740991 or prev > 9007199254740991 or last > 9007199254740991 then return {1, 5, now, 0, 0, 0, 0, 0} end
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
local SCALE = 1000000
local fmod = math.fmod
-- Exact: fmod of non-negative integers below 2^53 (a double floor(a/b)
-- can round up near 2^53). ts <= eff: ts in this window keeps both counts,
-- ts in the one before makes its current count the previous one.
local elapsed = fmod(eff, win)
local start = eff - elapsed
if last < start then
  if st and last >= start - win then prev = cur else prev = 0 end
  cur = 0
end
local num = (win - elapsed) * SCALE
local r = fmod(num, win)
local weight = (num - r) / win
if r > 0 then weight = weight + 1 end
local weighted = cur * SCALE + prev * weight
local after = limit * SCALE - cost * SCALE - weighted
local allowed, remaining, retry, resetAt = 1, 0, 0, start + 2 * win
if after >= 0 then
  remaining = (after - fmod(after, SCALE)) / SCALE
  -- Integers below 2^53 render exactly with %d; the revision is appended,
  -- not formatted (%s would stop at a NUL byte).
  redis.call('SET', KEYS[1], string.format('s1:%d:%d:%d:', cur + cost, prev, eff) .. rev, 'PX', string.format('%d', 2 * win + grace))
else
  allowed = 0
  local left = limit * SCALE - weighted
  if left > 0 then remaining = (left - fmod(left, SCALE)) / SCALE end
  -- retryAfter: the earliest time this request passes with no other traffic.
  -- budget is what the previous window may still weigh; maxWeight is capped
  -- at SCALE so maxWeight*window stays below 2^53.
  local budget = limit * SCALE - cost * SCALE - cur * SCALE
  local divisor, lead = prev, -elapsed
  if budget < 0 then
    -- The current window alone is over: in the next window today's count
    -- becomes the previous one.
    budget, divisor, lead = (limit - cost) * SCALE, cur, start + win - eff
  end
  local maxWeight = (budget - fmod(budget, divisor)) / divisor
  if maxWeight > SCALE then maxWeight = SCALE end
  local part = maxWeight * win
  retry = lead + win - (part - fmod(part, SCALE)) / SCALE
  if retry < 1 then retry = 1 end
  resetAt = eff
  if cur > 0 then
    resetAt = start + 2 * win
  elseif prev > 0 then
    resetAt = start + win
  end
end
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

-- rate-fixed-window-v3
-- rate-fixed-window-v2 with a longer window: up to 366 days (31622400000
-- ms; v2: 30 days), so that a window of a year (envoyproxy/ratelimit's
-- unit YEAR, 365 days aligned to the Unix epoch) is one fixed window.
-- Everything else is v2's: keys, arguments, state string, dedup records,
-- statuses and result. A v2 host and a v3 host read and write each other's
-- state identically (same 'f1:' layout, same key version), so during a
-- rolling upgrade old and new hosts share one window per subject; only a
-- policy whose window is above 30 days needs v3 (v2 refuses it as INVALID).
-- windowStart = effectiveNow - effectiveNow mod window; admits iff used +
-- cost <= limit, where used is the stored count when the stored last
-- observation lies in this window, else 0. A denial writes no algorithm
-- state. State KEYS[1]: the string 'f1:<used>:<ts>:<revision>' (ts = last
-- effective time), TTL windowEnd - effectiveNow + cleanup grace (at most
-- 31622400000 + 86400000 ms). The window id is floor(ts/window) (ts never
-- goes back). Clock: effectiveNow = max(serverNow, ts); ts - serverNow
-- > ARGV[5] is CLOCK_UNSAFE, so effectiveNow <= serverNow + 1 day. Dedup
-- KEYS[2] (same slot, only with dedup):
-- hash evaluationId -> 'allowed:limit:remaining:retryAfter:resetAt:recordedAt',
-- at most ARGV[8] ids (a new id evicts one random id when full), key TTL
-- ARGV[7].
-- KEYS: 1 state; 2 dedup, exactly when ARGV has 9 entries.
-- ARGV: 1 revision, 2 limit, 3 cost, 4 windowMillis, 5 maxClockStepMillis,
-- 6 cleanupGraceMillis; with dedup also 7 dedupTtlMillis (>= 1),
-- 8 dedupMaxEntries, 9 evaluationId. No argument reaches a command verbatim
-- except the revision (inside the state value) and the evaluation id (a
-- dedup hash field). O(1); integers stay below 2^53: effectiveNow is at
-- most serverNow + 86400000 and windowEnd at most effectiveNow + window,
-- both far below 2^53 (about 9.0e15 ms) for any server clock before the
-- year 285000.
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
  and win >= 1 and win <= 31622400000 and win % 1 == 0
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
local st = redis.pcall('GET', KEYS[1])
local used, last = 0, 0
if st then
  if type(st) == 'table' then
    if st['err'] and string.sub(st['err'], 1, 10) == 'WRONGTYPE ' then return {1, 5, now, 0, 0, 0, 0, 0} end
    return st
  end
  -- The pattern admits only digits, so the coercions below cannot fail.
  local u, l, sr
  if #st <= 110 then u, l, sr = string.match(st, '^f1:(%d+):(%d+):(.*)$') end
  if sr ~= rev or #u > 16 or #l > 16 then return {1, 5, now, 0, 0, 0, 0, 0} end
  used, last = u + 0, l + 0
  if used > 9007199254740991 or last > 9007199254740991 then return {1, 5, now, 0, 0, 0, 0, 0} end
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
-- Exact: fmod of non-negative integers below 2^53 (a double floor(a/b)
-- can round up near 2^53). ts <= eff, so ts lies in this window iff it is
-- not before its start.
local start = eff - math.fmod(eff, win)
if last < start then used = 0 end
local windowEnd = start + win
local allowed, remaining, retry = 0, limit - used, windowEnd - eff
if remaining < 0 then remaining = 0 end
if used + cost <= limit then
  allowed, remaining, retry = 1, limit - used - cost, 0
  -- Integers below 2^53 render exactly with %d; the revision is appended,
  -- not formatted (%s would stop at a NUL byte).
  redis.call('SET', KEYS[1], string.format('f1:%d:%d:', used + cost, eff) .. rev, 'PX', string.format('%d', windowEnd - eff + grace))
end
if n == 9 then
  -- A new id (HGET found none) evicts one random id when the hash is full.
  if not rec and redis.call('HLEN', KEYS[2]) >= dmax then
    local victim = redis.call('HRANDFIELD', KEYS[2])
    redis.call('HDEL', KEYS[2], victim)
  end
  redis.call('HSET', KEYS[2], evalId, string.format('%d:%d:%d:%d:%d:%d', allowed, limit, remaining, retry, windowEnd, now))
  redis.call('PEXPIRE', KEYS[2], string.format('%d', dttl))
end
if allowed == 1 then return {1, 1, now, 1, limit, remaining, 0, windowEnd} end
return {1, 2, now, 0, limit, remaining, retry, windowEnd}

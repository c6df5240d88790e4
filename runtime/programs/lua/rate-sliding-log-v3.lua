-- rate-sliding-log-v3
-- rate-sliding-log-v2's algorithm, clock rule, dedup records, arguments and
-- statuses in fewer Redis calls on the hot path: an admit trims the
-- expired events and extends the key's TTL only when it is the first
-- admit of a new tick (one eighth of the window, at least 1 ms), so an
-- admit inside the current tick is TIME + ZSCORE + ZCOUNT + ZADD (v2 adds
-- ZREMRANGEBYSCORE + PEXPIRE to every admit); a denial is v2's.
-- Exact sliding-window log, cost 1 only. The window is (effectiveNow -
-- window, effectiveNow]: an event scored exactly effectiveNow - window no
-- longer counts. Admits iff fewer than ARGV[2] events are live (ZCOUNT
-- counts live events only, so expired ones left until the next tick never
-- count); adds member '<effectiveNow>:<count>' (unique: the count grows at
-- a fixed time). At the first admit of tick k (ticks are
-- [k*tick, (k+1)*tick) of effective time; the sentinel's ts, the previous
-- admit's time, lies in an earlier tick or the log is new) the events in
-- (0, effectiveNow - window] are trimmed and the key expires at the
-- absolute server time (k+1)*tick + window + grace: later than every
-- event of this tick stops counting, and never earlier than v2's TTL
-- (now + window + grace, now <= effectiveNow < (k+1)*tick). Between two
-- trims the log holds the events of less than window + tick <= 2 windows,
-- so at most 2 * limit events (at most limit are admitted in any window).
-- A denial writes nothing. State KEYS[1]: ZSET of events plus the sentinel
-- '!v1:<revision>' scored -ts (last effective time; negative so trimming
-- and counting never touch it) -- v2's layout, but its keys keep v2's TTL
-- rule: a v3 log lives under its own key version, never shared with v1 or
-- v2. Clock: effectiveNow = max(TIME, ts); ts - TIME > ARGV[4] is
-- CLOCK_UNSAFE. Dedup KEYS[2] (same slot, only with dedup): hash
-- evaluationId -> 'allowed:limit:remaining:retryAfter:resetAt:recordedAt',
-- at most ARGV[7] ids (a new id evicts one random id when full), key TTL
-- ARGV[6].
-- KEYS: 1 state; 2 dedup, exactly when ARGV has 8 entries.
-- ARGV: 1 revision, 2 limit (<= 10000), 3 windowMillis, 4 maxClockStepMillis,
-- 5 cleanupGraceMillis; with dedup also 6 dedupTtlMillis (>= 1),
-- 7 dedupMaxEntries, 8 evaluationId. O(log N + M), N <= 2 * limit, M the
-- events trimmed.
-- Result: {1, status, serverNowMillis, allowed, limit, remaining, retryAfterMillis, resetAtMillis}
-- status: 1 ALLOWED, 2 DENIED, 3 DEDUP_REPLAY, 4 CLOCK_UNSAFE, 5 WRONG_TYPE, 6 INVALID
local n = #ARGV
if not ((n == 5 and #KEYS == 1) or (n == 8 and #KEYS == 2)) then return {1, 6, 0, 0, 0, 0, 0, 0} end
local tonumber = tonumber
local rev = ARGV[1]
local limit, win, step, grace = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
-- A failed tonumber is nil and every comparison with NaN is false, so each
-- bad value fails this one test.
if not (limit and win and step and grace and #rev >= 1 and #rev <= 64
  and limit >= 1 and limit <= 10000 and limit % 1 == 0
  and win >= 1 and win <= 2592000000 and win % 1 == 0
  and step >= 0 and step <= 86400000 and step % 1 == 0
  and grace >= 0 and grace <= 86400000 and grace % 1 == 0) then
  return {1, 6, 0, 0, 0, 0, 0, 0}
end
local dttl, dmax, evalId = 0, 0, ''
if n == 8 then
  dttl, dmax, evalId = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
  if not (dttl and dmax and dttl >= 1 and dttl <= 86400000 and dttl % 1 == 0
    and dmax >= 1 and dmax <= 4096 and dmax % 1 == 0 and #evalId >= 1 and #evalId <= 128) then
    return {1, 6, 0, 0, 0, 0, 0, 0}
  end
end
local tv = redis.call('TIME')
local us = tv[2] + 0
local now = tv[1] * 1000 + (us - us % 1000) / 1000
local sentinel = '!v1:' .. rev
-- ZSCORE fails on a non-zset key with WRONGTYPE and is false for a missing
-- key or member: only then does EXISTS tell a fresh log from a zset
-- without this revision's sentinel.
local raw = redis.pcall('ZSCORE', KEYS[1], sentinel)
local ts = false
if raw then
  if type(raw) == 'table' then
    if raw['err'] and string.sub(raw['err'], 1, 10) == 'WRONGTYPE ' then return {1, 5, now, 0, 0, 0, 0, 0} end
    return raw
  end
  if #raw > 17 or not (raw == '0' or string.match(raw, '^%-[1-9][0-9]*$')) then return {1, 5, now, 0, 0, 0, 0, 0} end
  ts = -raw
  if ts > 9007199254740991 then return {1, 5, now, 0, 0, 0, 0, 0} end
elseif redis.call('EXISTS', KEYS[1]) == 1 then
  return {1, 5, now, 0, 0, 0, 0, 0}
end
local rec = false
if n == 8 then
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
if ts and ts > now then
  if ts - now > step then return {1, 4, now, 0, 0, 0, 0, 0} end
  eff = ts
end
local cutoff = string.format('(%d', eff - win)
local count = redis.call('ZCOUNT', KEYS[1], cutoff, '+inf')
local allowed, remaining, retry, resetAt = 0, limit - count, 0, eff + win
if remaining < 0 then remaining = 0 end
if count < limit then
  allowed, remaining = 1, limit - count - 1
  redis.call('ZADD', KEYS[1], string.format('%d', eff), string.format('%d:%d', eff, count), string.format('%d', -eff), sentinel)
  -- tick = max(1, floor(window / 8)); fmod of non-negative integers below
  -- 2^53 is exact.
  local tick = (win - math.fmod(win, 8)) / 8
  if tick < 1 then tick = 1 end
  local tickStart = eff - math.fmod(eff, tick)
  if not ts or ts < tickStart then
    -- Trim (0, effectiveNow - window]: the sentinel's score is <= 0 and stays.
    if ts then redis.call('ZREMRANGEBYSCORE', KEYS[1], '(0', string.format('%d', eff - win)) end
    redis.call('PEXPIREAT', KEYS[1], string.format('%d', tickStart + tick + win + grace))
  end
else
  local oldest = redis.call('ZRANGEBYSCORE', KEYS[1], cutoff, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local newest = redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', cutoff, 'WITHSCORES', 'LIMIT', 0, 1)
  retry = oldest[2] + win - eff
  if retry < 1 then retry = 1 end
  resetAt = newest[2] + win
end
if n == 8 then
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

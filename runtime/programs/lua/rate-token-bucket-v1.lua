-- rate-token-bucket-v1
-- Replaces the caller-clock HMGET tokens -> refill -> HSET bucket. Reads
-- Redis TIME once. Amounts are micro-tokens (SCALE = 1000000): elapsed =
-- effectiveNow - ts; refill = floor(elapsed*refill/period) (saturating at
-- capacity once elapsed >= horizon, so the product stays below 2^53);
-- available = min(capacity, tokens + refill); admits iff available >= cost.
-- A fresh bucket is full. A denial writes no algorithm state. State KEYS[1]:
-- hash v=1, rev, tok, ts (last effective time), TTL horizon + cleanup grace
-- with horizon = ceil(capacity*period/refill) <= 30 days.
-- Clock: effectiveNow = max(serverNow, ts); ts - serverNow > ARGV[6] is
-- CLOCK_UNSAFE. Dedup KEYS[2] (same slot): hash evaluationId ->
-- 'allowed:limit:remaining:retryAfter:resetAt:recordedAt', at most ARGV[9]
-- ids (a new id evicts one random id when full), key TTL ARGV[8] (0 = off).
-- ARGV: 1 revision, 2 capacityScaled, 3 refillScaled, 4 periodMillis,
-- 5 costScaled, 6 maxClockStepMillis, 7 cleanupGraceMillis, 8 dedupTtlMillis,
-- 9 dedupMaxEntries, 10 evaluationId. O(1); capacity*period <= 2^52.
-- Result: {1, status, serverNowMillis, allowed, limit, remaining, retryAfterMillis, resetAtMillis}
-- status: 1 ALLOWED, 2 DENIED, 3 DEDUP_REPLAY, 4 CLOCK_UNSAFE, 5 WRONG_TYPE, 6 INVALID
if #KEYS ~= 2 or #ARGV ~= 10 then return {1, 6, 0, 0, 0, 0, 0, 0} end
local rev, capArg, refillArg, periodArg, costArg = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local stepArg, graceArg, dttlArg, dmaxArg, evalId = ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]
if #rev < 1 or #rev > 64 then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #evalId < 1 or #evalId > 128 then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #capArg > 16 or not string.match(capArg, '^[1-9][0-9]*$') then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #refillArg > 16 or not string.match(refillArg, '^[1-9][0-9]*$') then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #periodArg > 16 or not string.match(periodArg, '^[1-9][0-9]*$') then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #costArg > 16 or not string.match(costArg, '^[1-9][0-9]*$') then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #dmaxArg > 16 or not string.match(dmaxArg, '^[1-9][0-9]*$') then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #stepArg > 16 or not (stepArg == '0' or string.match(stepArg, '^[1-9][0-9]*$')) then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #graceArg > 16 or not (graceArg == '0' or string.match(graceArg, '^[1-9][0-9]*$')) then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #dttlArg > 16 or not (dttlArg == '0' or string.match(dttlArg, '^[1-9][0-9]*$')) then return {1, 6, 0, 0, 0, 0, 0, 0} end
local cap, refill, period, cost = tonumber(capArg), tonumber(refillArg), tonumber(periodArg), tonumber(costArg)
local step, grace, dttl, dmax = tonumber(stepArg), tonumber(graceArg), tonumber(dttlArg), tonumber(dmaxArg)
if cap > 4503599627370496 or refill > 4503599627370496 or period > 2592000000 or cost > cap then return {1, 6, 0, 0, 0, 0, 0, 0} end
if cap * period > 4503599627370496 then return {1, 6, 0, 0, 0, 0, 0, 0} end
if step > 86400000 or grace > 86400000 or dttl > 86400000 or dmax > 4096 then return {1, 6, 0, 0, 0, 0, 0, 0} end
local full = cap * period
local horizon = (full - math.fmod(full, refill)) / refill
if math.fmod(full, refill) > 0 then horizon = horizon + 1 end
if horizon > 2592000000 then return {1, 6, 0, 0, 0, 0, 0, 0} end
local tv = redis.call('TIME')
local now = tonumber(tv[1]) * 1000 + math.floor(tonumber(tv[2]) / 1000)
-- One HMGET reads the state (a non-hash key fails it with WRONGTYPE); TYPE
-- runs only when no schema field came back, to tell a missing key (a fresh
-- bucket) from a foreign hash.
local st = redis.pcall('HMGET', KEYS[1], 'v', 'rev', 'tok', 'ts')
if st['err'] then
  if string.sub(st['err'], 1, 10) == 'WRONGTYPE ' then return {1, 5, now, 0, 0, 0, 0, 0} end
  return st
end
if not st[1] then
  if redis.call('TYPE', KEYS[1])['ok'] ~= 'none' then return {1, 5, now, 0, 0, 0, 0, 0} end
  st = false
else
  if st[1] ~= '1' or st[2] ~= rev then return {1, 5, now, 0, 0, 0, 0, 0} end
  if type(st[3]) ~= 'string' or #st[3] > 16 or not string.match(st[3], '^%d+$') then return {1, 5, now, 0, 0, 0, 0, 0} end
  if tonumber(st[3]) > 9007199254740991 then return {1, 5, now, 0, 0, 0, 0, 0} end
  if type(st[4]) ~= 'string' or #st[4] > 16 or not string.match(st[4], '^%d+$') then return {1, 5, now, 0, 0, 0, 0, 0} end
  if tonumber(st[4]) > 9007199254740991 then return {1, 5, now, 0, 0, 0, 0, 0} end
end
if dttl > 0 then
  -- HGET is false for a missing key or id and fails on a non-hash key.
  local rec = redis.pcall('HGET', KEYS[2], evalId)
  if type(rec) == 'table' then
    if rec['err'] and string.sub(rec['err'], 1, 10) == 'WRONGTYPE ' then return {1, 5, now, 0, 0, 0, 0, 0} end
    return rec
  end
  if rec then
    local a, l, r, ra, rs, at = string.match(rec, '^([01]):(%d+):(%d+):(%d+):(%d+):(%d+)$')
    if #rec > 120 or not at then return {1, 5, now, 0, 0, 0, 0, 0} end
    if now - tonumber(at) < dttl then return {1, 3, now, tonumber(a), tonumber(l), tonumber(r), tonumber(ra), tonumber(rs)} end
  end
end
local eff = now
if st and tonumber(st[4]) > now then
  if tonumber(st[4]) - now > step then return {1, 4, now, 0, 0, 0, 0, 0} end
  eff = tonumber(st[4])
end
local tokens, last = cap, eff
if st then tokens, last = tonumber(st[3]), tonumber(st[4]) end
local elapsed = eff - last
if elapsed < 0 then elapsed = 0 end
local available = cap
if elapsed < horizon then
  -- elapsed < horizon bounds elapsed*refill below capacity*period + refill < 2^53.
  local num = elapsed * refill
  local gained = (num - math.fmod(num, period)) / period
  if tokens + gained < cap then available = tokens + gained end
end
local status, allowed, remaining, retry = 2, 0, available, 0
if available >= cost then
  status, allowed, remaining = 1, 1, available - cost
  -- Values are integers below 2^53: %d renders them exactly, cheaper than
  -- %.0f. Schema and revision already hold in an existing bucket.
  if st then
    redis.call('HSET', KEYS[1], 'tok', string.format('%d', remaining), 'ts', string.format('%d', eff))
  else
    redis.call('HSET', KEYS[1], 'v', '1', 'rev', rev, 'tok', string.format('%d', remaining), 'ts', string.format('%d', eff))
  end
  redis.call('PEXPIRE', KEYS[1], string.format('%d', horizon + grace))
else
  local need = (cost - available) * period
  retry = (need - math.fmod(need, refill)) / refill
  if math.fmod(need, refill) > 0 then retry = retry + 1 end
end
local fill = (cap - remaining) * period
local resetAt = eff + (fill - math.fmod(fill, refill)) / refill
if math.fmod(fill, refill) > 0 then resetAt = resetAt + 1 end
if dttl > 0 then
  if redis.call('HEXISTS', KEYS[2], evalId) == 0 and redis.call('HLEN', KEYS[2]) >= dmax then
    local victim = redis.call('HRANDFIELD', KEYS[2])
    redis.call('HDEL', KEYS[2], victim)
  end
  redis.call('HSET', KEYS[2], evalId, string.format('%d:%.0f:%.0f:%.0f:%.0f:%.0f', allowed, cap, remaining, retry, resetAt, now))
  redis.call('PEXPIRE', KEYS[2], dttlArg)
end
if status == 1 then return {1, 1, now, 1, cap, remaining, retry, resetAt} end
return {1, 2, now, 0, cap, remaining, retry, resetAt}

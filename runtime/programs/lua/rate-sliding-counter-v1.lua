-- rate-sliding-counter-v1
-- Replaces the caller-clock two-field weighted window. Reads Redis TIME once.
-- windowId = floor(effectiveNow/window) (never below the stored window);
-- previousWeight = ceil((window - elapsed) * SCALE / window) with SCALE =
-- 1000000; weighted = current*SCALE + previous*previousWeight; admits iff
-- weighted + cost*SCALE <= limit*SCALE. Approximate (never exact remaining).
-- A denial writes no algorithm state. State KEYS[1]: one hash v=1, rev, wid,
-- cur, prev, ts (last effective time), TTL 2*window + cleanup grace.
-- Clock: effectiveNow = max(serverNow, ts); ts - serverNow > ARGV[5] is
-- CLOCK_UNSAFE. Dedup KEYS[2] (same slot): hash evaluationId ->
-- 'allowed:limit:remaining:retryAfter:resetAt:recordedAt', at most ARGV[8]
-- ids (a new id evicts one random id when full), key TTL ARGV[7] (0 = off).
-- ARGV: 1 revision, 2 limit, 3 cost, 4 windowMillis, 5 maxClockStepMillis,
-- 6 cleanupGraceMillis, 7 dedupTtlMillis, 8 dedupMaxEntries, 9 evaluationId.
-- O(1); limit <= 10^9 and window <= 30 days keep integers below 2^53.
-- Result: {1, status, serverNowMillis, allowed, limit, remaining, retryAfterMillis, resetAtMillis}
-- status: 1 ALLOWED, 2 DENIED, 3 DEDUP_REPLAY, 4 CLOCK_UNSAFE, 5 WRONG_TYPE, 6 INVALID
if #KEYS ~= 2 or #ARGV ~= 9 then return {1, 6, 0, 0, 0, 0, 0, 0} end
local rev, limitArg, costArg, winArg = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local stepArg, graceArg, dttlArg, dmaxArg, evalId = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
if #rev < 1 or #rev > 64 then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #evalId < 1 or #evalId > 128 then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #limitArg > 16 or not string.match(limitArg, '^[1-9][0-9]*$') then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #costArg > 16 or not string.match(costArg, '^[1-9][0-9]*$') then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #winArg > 16 or not string.match(winArg, '^[1-9][0-9]*$') then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #dmaxArg > 16 or not string.match(dmaxArg, '^[1-9][0-9]*$') then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #stepArg > 16 or not (stepArg == '0' or string.match(stepArg, '^[1-9][0-9]*$')) then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #graceArg > 16 or not (graceArg == '0' or string.match(graceArg, '^[1-9][0-9]*$')) then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #dttlArg > 16 or not (dttlArg == '0' or string.match(dttlArg, '^[1-9][0-9]*$')) then return {1, 6, 0, 0, 0, 0, 0, 0} end
local limit, cost, win = tonumber(limitArg), tonumber(costArg), tonumber(winArg)
local step, grace, dttl, dmax = tonumber(stepArg), tonumber(graceArg), tonumber(dttlArg), tonumber(dmaxArg)
if limit > 1000000000 or cost > limit or win > 2592000000 then return {1, 6, 0, 0, 0, 0, 0, 0} end
if step > 86400000 or grace > 86400000 or dttl > 86400000 or dmax > 4096 then return {1, 6, 0, 0, 0, 0, 0, 0} end
local SCALE = 1000000
local tv = redis.call('TIME')
local now = tonumber(tv[1]) * 1000 + math.floor(tonumber(tv[2]) / 1000)
local kind = redis.call('TYPE', KEYS[1])['ok']
local st = false
if kind == 'hash' then
  st = redis.call('HMGET', KEYS[1], 'v', 'rev', 'wid', 'cur', 'prev', 'ts')
  if st[1] ~= '1' or st[2] ~= rev then return {1, 5, now, 0, 0, 0, 0, 0} end
  if type(st[3]) ~= 'string' or #st[3] > 16 or not string.match(st[3], '^%d+$') then return {1, 5, now, 0, 0, 0, 0, 0} end
  if tonumber(st[3]) > 9007199254740991 then return {1, 5, now, 0, 0, 0, 0, 0} end
  if type(st[4]) ~= 'string' or #st[4] > 16 or not string.match(st[4], '^%d+$') then return {1, 5, now, 0, 0, 0, 0, 0} end
  if tonumber(st[4]) > 9007199254740991 then return {1, 5, now, 0, 0, 0, 0, 0} end
  if type(st[5]) ~= 'string' or #st[5] > 16 or not string.match(st[5], '^%d+$') then return {1, 5, now, 0, 0, 0, 0, 0} end
  if tonumber(st[5]) > 9007199254740991 then return {1, 5, now, 0, 0, 0, 0, 0} end
  if type(st[6]) ~= 'string' or #st[6] > 16 or not string.match(st[6], '^%d+$') then return {1, 5, now, 0, 0, 0, 0, 0} end
  if tonumber(st[6]) > 9007199254740991 then return {1, 5, now, 0, 0, 0, 0, 0} end
elseif kind ~= 'none' then
  return {1, 5, now, 0, 0, 0, 0, 0}
end
if dttl > 0 then
  local dkind = redis.call('TYPE', KEYS[2])['ok']
  if dkind == 'hash' then
    local rec = redis.call('HGET', KEYS[2], evalId)
    if rec then
      local a, l, r, ra, rs, at = string.match(rec, '^([01]):(%d+):(%d+):(%d+):(%d+):(%d+)$')
      if #rec > 120 or not at then return {1, 5, now, 0, 0, 0, 0, 0} end
      if now - tonumber(at) < dttl then return {1, 3, now, tonumber(a), tonumber(l), tonumber(r), tonumber(ra), tonumber(rs)} end
    end
  elseif dkind ~= 'none' then
    return {1, 5, now, 0, 0, 0, 0, 0}
  end
end
local eff = now
if st and tonumber(st[6]) > now then
  if tonumber(st[6]) - now > step then return {1, 4, now, 0, 0, 0, 0, 0} end
  eff = tonumber(st[6])
end
-- Exact floor division of non-negative integers below 2^53: fmod is exact,
-- unlike floor(a/b) which can round up near 2^53.
local wid = (eff - math.fmod(eff, win)) / win
if st and tonumber(st[3]) > wid then wid = tonumber(st[3]) end
local cur, prev = 0, 0
if st and tonumber(st[3]) == wid then
  cur, prev = tonumber(st[4]), tonumber(st[5])
elseif st and tonumber(st[3]) == wid - 1 then
  prev = tonumber(st[4])
end
local elapsed = eff - wid * win
if elapsed < 0 then elapsed = 0 end
if elapsed > win then elapsed = win end
local num = (win - elapsed) * SCALE
local weight = (num - math.fmod(num, win)) / win
if math.fmod(num, win) > 0 then weight = weight + 1 end
local weighted = cur * SCALE + prev * weight
local after = limit * SCALE - cost * SCALE - weighted
local status, allowed, remaining, retry, resetAt = 1, 1, 0, 0, (wid + 2) * win
if after >= 0 then
  remaining = (after - math.fmod(after, SCALE)) / SCALE
  redis.call('HSET', KEYS[1], 'v', '1', 'rev', rev, 'wid', string.format('%.0f', wid),
    'cur', string.format('%.0f', cur + cost), 'prev', string.format('%.0f', prev), 'ts', string.format('%.0f', eff))
  redis.call('PEXPIRE', KEYS[1], string.format('%.0f', 2 * win + grace))
else
  status, allowed = 2, 0
  local left = limit * SCALE - weighted
  if left > 0 then remaining = (left - math.fmod(left, SCALE)) / SCALE end
  -- retryAfter: the earliest time this request passes with no other traffic.
  -- budget is what the previous window may still weigh; maxWeight is capped
  -- at SCALE so maxWeight*window stays below 2^53.
  local budget = limit * SCALE - cost * SCALE - cur * SCALE
  local divisor, lead = prev, -elapsed
  if budget < 0 then
    -- The current window alone is over: in the next window today's count
    -- becomes the previous one.
    budget, divisor, lead = (limit - cost) * SCALE, cur, (wid + 1) * win - eff
  end
  local maxWeight = (budget - math.fmod(budget, divisor)) / divisor
  if maxWeight > SCALE then maxWeight = SCALE end
  local part = maxWeight * win
  retry = lead + win - (part - math.fmod(part, SCALE)) / SCALE
  if retry < 1 then retry = 1 end
  resetAt = eff
  if cur > 0 then
    resetAt = (wid + 2) * win
  elseif prev > 0 then
    resetAt = (wid + 1) * win
  end
end
if dttl > 0 then
  if redis.call('HEXISTS', KEYS[2], evalId) == 0 and redis.call('HLEN', KEYS[2]) >= dmax then
    local victim = redis.call('HRANDFIELD', KEYS[2])
    redis.call('HDEL', KEYS[2], victim)
  end
  redis.call('HSET', KEYS[2], evalId, string.format('%d:%.0f:%.0f:%.0f:%.0f:%.0f', allowed, limit, remaining, retry, resetAt, now))
  redis.call('PEXPIRE', KEYS[2], dttlArg)
end
if status == 1 then return {1, 1, now, 1, limit, remaining, retry, resetAt} end
return {1, 2, now, 0, limit, remaining, retry, resetAt}

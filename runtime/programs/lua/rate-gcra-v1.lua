-- rate-gcra-v1
-- Generic cell rate algorithm: ARGV[2] units per ARGV[3] ms with a burst of
-- ARGV[2]. Reads Redis TIME once. Times in microseconds: emission =
-- ceil(period*1000/limit) (rounded up: conservative, and why GCRA is not the
-- token bucket); tat = max(storedTat, now); newTat = tat + emission*cost;
-- admits iff newTat - now <= emission*limit. A denial writes no algorithm
-- state. State KEYS[1]: hash v=1, rev, tat (us), ts (last effective ms), TTL
-- ceil((newTat-now)/1000) + cleanup grace. Clock: effectiveNow = max(TIME,
-- ts); ts - TIME > ARGV[5] is CLOCK_UNSAFE. Dedup KEYS[2] (same slot): hash
-- evaluationId -> 'allowed:limit:remaining:retryAfter:resetAt:recordedAt', at
-- most ARGV[8] ids (a new id evicts one random id when full), key TTL ARGV[7]
-- (0 = off). ARGV: 1 revision, 2 limit, 3 periodMillis, 4 cost,
-- 5 maxClockStepMillis, 6 cleanupGraceMillis, 7 dedupTtlMillis,
-- 8 dedupMaxEntries, 9 evaluationId. O(1); now*1000 + 2*period*1000 < 2^53.
-- Result: {1, status, serverNowMillis, allowed, limit, remaining, retryAfterMillis, resetAtMillis}
-- status: 1 ALLOWED, 2 DENIED, 3 DEDUP_REPLAY, 4 CLOCK_UNSAFE, 5 WRONG_TYPE, 6 INVALID
if #KEYS ~= 2 or #ARGV ~= 9 then return {1, 6, 0, 0, 0, 0, 0, 0} end
local rev, limitArg, periodArg, costArg = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local stepArg, graceArg, dttlArg, dmaxArg, evalId = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
if #rev < 1 or #rev > 64 then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #evalId < 1 or #evalId > 128 then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #limitArg > 16 or not string.match(limitArg, '^[1-9][0-9]*$') then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #costArg > 16 or not string.match(costArg, '^[1-9][0-9]*$') then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #periodArg > 16 or not string.match(periodArg, '^[1-9][0-9]*$') then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #dmaxArg > 16 or not string.match(dmaxArg, '^[1-9][0-9]*$') then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #stepArg > 16 or not (stepArg == '0' or string.match(stepArg, '^[1-9][0-9]*$')) then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #graceArg > 16 or not (graceArg == '0' or string.match(graceArg, '^[1-9][0-9]*$')) then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #dttlArg > 16 or not (dttlArg == '0' or string.match(dttlArg, '^[1-9][0-9]*$')) then return {1, 6, 0, 0, 0, 0, 0, 0} end
local limit, period, cost = tonumber(limitArg), tonumber(periodArg), tonumber(costArg)
local step, grace, dttl, dmax = tonumber(stepArg), tonumber(graceArg), tonumber(dttlArg), tonumber(dmaxArg)
if limit > 1000000000 or cost > limit or period > 2592000000 then return {1, 6, 0, 0, 0, 0, 0, 0} end
if step > 86400000 or grace > 86400000 or dttl > 86400000 or dmax > 4096 then return {1, 6, 0, 0, 0, 0, 0, 0} end
local tv = redis.call('TIME')
local now = tonumber(tv[1]) * 1000 + math.floor(tonumber(tv[2]) / 1000)
local kind = redis.call('TYPE', KEYS[1])['ok']
local st = false
if kind == 'hash' then
  st = redis.call('HMGET', KEYS[1], 'v', 'rev', 'tat', 'ts')
  if st[1] ~= '1' or st[2] ~= rev then return {1, 5, now, 0, 0, 0, 0, 0} end
  if type(st[3]) ~= 'string' or #st[3] > 16 or not string.match(st[3], '^%d+$') then return {1, 5, now, 0, 0, 0, 0, 0} end
  if tonumber(st[3]) > 9007199254740991 then return {1, 5, now, 0, 0, 0, 0, 0} end
  if type(st[4]) ~= 'string' or #st[4] > 16 or not string.match(st[4], '^%d+$') then return {1, 5, now, 0, 0, 0, 0, 0} end
  if tonumber(st[4]) > 9007199254740991 then return {1, 5, now, 0, 0, 0, 0, 0} end
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
if st and tonumber(st[4]) > now then
  if tonumber(st[4]) - now > step then return {1, 4, now, 0, 0, 0, 0, 0} end
  eff = tonumber(st[4])
end
local full = period * 1000
local emission = (full - math.fmod(full, limit)) / limit
if math.fmod(full, limit) > 0 then emission = emission + 1 end
local tau = emission * limit
local nowU = eff * 1000
local tat = nowU
if st and tonumber(st[3]) > nowU then tat = tonumber(st[3]) end
local nextTat = tat + emission * cost
local status, allowed, remaining, retry, resetAt = 2, 0, 0, 0, 0
if nextTat - nowU <= tau then
  status, allowed = 1, 1
  local slack = tau - (nextTat - nowU)
  remaining = (slack - math.fmod(slack, emission)) / emission
  local life = nextTat - nowU
  local ttl = (life - math.fmod(life, 1000)) / 1000
  if math.fmod(life, 1000) > 0 then ttl = ttl + 1 end
  redis.call('HSET', KEYS[1], 'v', '1', 'rev', rev, 'tat', string.format('%.0f', nextTat), 'ts', string.format('%.0f', eff))
  redis.call('PEXPIRE', KEYS[1], string.format('%.0f', ttl + grace))
  resetAt = nextTat
else
  local slack = tau - (tat - nowU)
  if slack > 0 then remaining = (slack - math.fmod(slack, emission)) / emission end
  local over = nextTat - nowU - tau
  retry = (over - math.fmod(over, 1000)) / 1000
  if math.fmod(over, 1000) > 0 then retry = retry + 1 end
  resetAt = tat
end
local resetMicros = resetAt
resetAt = (resetMicros - math.fmod(resetMicros, 1000)) / 1000
if math.fmod(resetMicros, 1000) > 0 then resetAt = resetAt + 1 end
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

-- rate-sliding-log-v1
-- Exact sliding-window log, cost 1 only. Replaces ZREMRANGEBYSCORE -> ZCOUNT
-- -> ZADD from the client. Reads Redis TIME once. The window is
-- (effectiveNow - window, effectiveNow]: an event scored exactly
-- effectiveNow - window no longer counts. Admits iff fewer than ARGV[2]
-- events are live; an admit trims the expired events (at most limit, since
-- the log never holds more), adds member '<effectiveNow>:<count>' (unique:
-- the count grows at a fixed time) and sets TTL window + cleanup grace. A
-- denial writes nothing. State KEYS[1]: ZSET of events plus the sentinel
-- '!v1:<revision>' scored -ts (last effective time; negative so trimming
-- and counting never touch it). Clock: effectiveNow = max(TIME, ts); ts -
-- TIME > ARGV[4] is CLOCK_UNSAFE. Dedup KEYS[2] (same slot): hash
-- evaluationId -> 'allowed:limit:remaining:retryAfter:resetAt:recordedAt', at
-- most ARGV[7] ids (a new id evicts one random id when full), key TTL ARGV[6]
-- (0 = off). ARGV: 1 revision, 2 limit (<= 10000), 3 windowMillis,
-- 4 maxClockStepMillis, 5 cleanupGraceMillis, 6 dedupTtlMillis,
-- 7 dedupMaxEntries, 8 evaluationId. O(log N + limit).
-- Result: {1, status, serverNowMillis, allowed, limit, remaining, retryAfterMillis, resetAtMillis}
-- status: 1 ALLOWED, 2 DENIED, 3 DEDUP_REPLAY, 4 CLOCK_UNSAFE, 5 WRONG_TYPE, 6 INVALID
if #KEYS ~= 2 or #ARGV ~= 8 then return {1, 6, 0, 0, 0, 0, 0, 0} end
local rev, limitArg, winArg = ARGV[1], ARGV[2], ARGV[3]
local stepArg, graceArg, dttlArg, dmaxArg, evalId = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
if #rev < 1 or #rev > 64 then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #evalId < 1 or #evalId > 128 then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #limitArg > 16 or not string.match(limitArg, '^[1-9][0-9]*$') then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #winArg > 16 or not string.match(winArg, '^[1-9][0-9]*$') then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #dmaxArg > 16 or not string.match(dmaxArg, '^[1-9][0-9]*$') then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #stepArg > 16 or not (stepArg == '0' or string.match(stepArg, '^[1-9][0-9]*$')) then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #graceArg > 16 or not (graceArg == '0' or string.match(graceArg, '^[1-9][0-9]*$')) then return {1, 6, 0, 0, 0, 0, 0, 0} end
if #dttlArg > 16 or not (dttlArg == '0' or string.match(dttlArg, '^[1-9][0-9]*$')) then return {1, 6, 0, 0, 0, 0, 0, 0} end
local limit, win = tonumber(limitArg), tonumber(winArg)
local step, grace, dttl, dmax = tonumber(stepArg), tonumber(graceArg), tonumber(dttlArg), tonumber(dmaxArg)
if limit > 10000 or win > 2592000000 then return {1, 6, 0, 0, 0, 0, 0, 0} end
if step > 86400000 or grace > 86400000 or dttl > 86400000 or dmax > 4096 then return {1, 6, 0, 0, 0, 0, 0, 0} end
local tv = redis.call('TIME')
local now = tonumber(tv[1]) * 1000 + math.floor(tonumber(tv[2]) / 1000)
local sentinel = '!v1:' .. rev
local kind = redis.call('TYPE', KEYS[1])['ok']
local ts = false
if kind == 'zset' then
  local raw = redis.call('ZSCORE', KEYS[1], sentinel)
  if not raw or #raw > 17 or not (raw == '0' or string.match(raw, '^%-[1-9][0-9]*$')) then return {1, 5, now, 0, 0, 0, 0, 0} end
  ts = -tonumber(raw)
  if ts > 9007199254740991 then return {1, 5, now, 0, 0, 0, 0, 0} end
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
if ts and ts > now then
  if ts - now > step then return {1, 4, now, 0, 0, 0, 0, 0} end
  eff = ts
end
local cutoff = string.format('(%.0f', eff - win)
local count = redis.call('ZCOUNT', KEYS[1], cutoff, '+inf')
local status, allowed, remaining, retry, resetAt = 2, 0, limit - count, 0, eff + win
if remaining < 0 then remaining = 0 end
if count < limit then
  status, allowed, remaining = 1, 1, limit - count - 1
  -- Trim (0, effectiveNow - window]: the sentinel's score is <= 0 and stays.
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '(0', string.format('%.0f', eff - win))
  redis.call('ZADD', KEYS[1], string.format('%.0f', eff), string.format('%.0f:%.0f', eff, count))
  redis.call('ZADD', KEYS[1], string.format('%.0f', -eff), sentinel)
  redis.call('PEXPIRE', KEYS[1], string.format('%.0f', win + grace))
else
  local oldest = redis.call('ZRANGEBYSCORE', KEYS[1], cutoff, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local newest = redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', cutoff, 'WITHSCORES', 'LIMIT', 0, 1)
  retry = tonumber(oldest[2]) + win - eff
  if retry < 1 then retry = 1 end
  resetAt = tonumber(newest[2]) + win
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

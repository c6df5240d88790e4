-- notify-submit-v1
-- Durable notification submit: append the frozen plan to the shard's
-- stream (XADD MAXLEN ~ maxLen, so the stream stays bounded) and create
-- the intent record (a hash with the retention TTL) in one step, only when
-- the record is absent. The record key is derived from the caller's
-- idempotency key (HMAC'd by the key builder), so a repeat with the same
-- key appends nothing and is DUPLICATE with the first intent's entry id,
-- state and attempts (DUPLICATE_OTHER_PLAN when the plan digest differs).
-- KEYS[1] stream (the shard anchor), KEYS[2] intent record (a member of
-- the same shard: one slot). ARGV: intentId (64 lower-hex), plan,
-- planDigest (64 lower-hex), retentionMillis, maxLen.
-- Record: hash v=1, st (1 PENDING, 2 DELIVERING, 3 DELIVERED, 4 FAILED,
-- 5 QUARANTINED, 6 INDETERMINATE), att, eid, pd, rc (receipt log).
-- Every check runs before the first write. No clock. O(1) amortised:
-- MAXLEN ~ trims whole macro nodes, never an entry-by-entry scan.
-- Result: {1, status, 0, entryId, state, attempts, recordTtlMillis}
-- status: 1 SUBMITTED, 2 DUPLICATE, 3 DUPLICATE_OTHER_PLAN, 4 WRONG_TYPE, 5 INVALID
if #KEYS ~= 2 or #ARGV ~= 5 then return {1, 5, 0, '', 0, 0, 0} end
local id, plan, digest, ret, maxlen = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if #id ~= 64 or not string.match(id, '^[0-9a-f]+$') or #digest ~= 64 or not string.match(digest, '^[0-9a-f]+$') then return {1, 5, 0, '', 0, 0, 0} end
if #plan < 1 or #plan > 1048576 then return {1, 5, 0, '', 0, 0, 0} end
if #ret > 10 or not string.match(ret, '^[1-9][0-9]*$') or tonumber(ret) > 2592000000 then return {1, 5, 0, '', 0, 0, 0} end
if #maxlen > 9 or not string.match(maxlen, '^[1-9][0-9]*$') then return {1, 5, 0, '', 0, 0, 0} end
local sk = redis.call('TYPE', KEYS[1])['ok']
local rk = redis.call('TYPE', KEYS[2])['ok']
if (sk ~= 'none' and sk ~= 'stream') or (rk ~= 'none' and rk ~= 'hash') then return {1, 4, 0, '', 0, 0, 0} end
if rk == 'hash' then
  local f = redis.call('HMGET', KEYS[2], 'v', 'st', 'att', 'eid', 'pd', 'rc')
  local pttl = redis.call('PTTL', KEYS[2])
  if f[1] ~= '1' or not f[2] or not string.match(f[2], '^[1-6]$') or not f[3] or not (f[3] == '0' or string.match(f[3], '^[1-9][0-9]?[0-9]?[0-9]?$')) then return {1, 4, 0, '', 0, 0, 0} end
  if not f[4] or not string.match(f[4], '^[0-9]+%-[0-9]+$') or #f[4] > 41 or not f[5] or #f[5] ~= 64 or not f[6] or #f[6] > 16384 or pttl < 0 then return {1, 4, 0, '', 0, 0, 0} end
  if f[5] == digest then return {1, 2, 0, f[4], tonumber(f[2]), tonumber(f[3]), pttl} end
  return {1, 3, 0, f[4], tonumber(f[2]), tonumber(f[3]), pttl}
end
local eid = redis.call('XADD', KEYS[1], 'MAXLEN', '~', maxlen, '*', 'i', id, 'p', plan)
redis.call('HSET', KEYS[2], 'v', '1', 'st', '1', 'att', '0', 'eid', eid, 'pd', digest, 'rc', '')
redis.call('PEXPIRE', KEYS[2], ret)
return {1, 1, 0, eid, 1, 0, tonumber(ret)}

-- notify-submit-v2
-- notify-submit-v1 (same keys, arguments, record, stream entry and
-- statuses; v1 and v2 hosts share intents in a rolling upgrade) in fewer
-- Redis calls, with an integer-only reply so the host can pipeline
-- concurrent submits: a new intent is EXISTS (the record) + XADD + HSET +
-- PEXPIRE (v1: TYPE + TYPE first). The stream's type check is the XADD
-- itself under pcall (it fails with WRONGTYPE before writing anything);
-- the record's is the HMGET under pcall, run only when the record exists.
-- Integers are checked by value (tonumber, range, integrality) and sent on
-- in canonical form; ids and digests by length and alphabet.
-- KEYS[1] stream (the shard anchor), KEYS[2] intent record (same slot).
-- ARGV: intentId (64 lower-hex), plan, planDigest (64 lower-hex),
-- retentionMillis, maxLen.
-- Record: hash v=1, st (1 PENDING .. 6 INDETERMINATE), att, eid, pd, rc.
-- Every check runs before the first write. No clock. O(1) amortised.
-- Result: {1, status, 0, state, attempts, recordTtlMillis}
-- status: 1 SUBMITTED, 2 DUPLICATE, 3 DUPLICATE_OTHER_PLAN, 4 WRONG_TYPE, 5 INVALID
if #KEYS ~= 2 or #ARGV ~= 5 then return {1, 5, 0, 0, 0, 0} end
local id, plan, digest = ARGV[1], ARGV[2], ARGV[3]
local ret, maxlen = tonumber(ARGV[4]), tonumber(ARGV[5])
-- A failed tonumber is nil and every comparison with NaN is false, so each
-- bad value fails this one test.
if not (ret and maxlen and #id == 64 and #digest == 64 and #plan >= 1 and #plan <= 1048576
  and ret >= 1 and ret <= 2592000000 and ret % 1 == 0
  and maxlen >= 1 and maxlen <= 999999999 and maxlen % 1 == 0
  and not string.find(id, '[^0-9a-f]') and not string.find(digest, '[^0-9a-f]')) then
  return {1, 5, 0, 0, 0, 0}
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  local f = redis.pcall('HMGET', KEYS[2], 'v', 'st', 'att', 'eid', 'pd', 'rc')
  if f['err'] then
    if string.sub(f['err'], 1, 10) == 'WRONGTYPE ' then return {1, 4, 0, 0, 0, 0} end
    return f
  end
  local pttl = redis.call('PTTL', KEYS[2])
  if f[1] ~= '1' or not f[2] or not string.match(f[2], '^[1-6]$') or not f[3] or not (f[3] == '0' or string.match(f[3], '^[1-9][0-9]?[0-9]?[0-9]?$')) then return {1, 4, 0, 0, 0, 0} end
  if not f[4] or not string.match(f[4], '^[0-9]+%-[0-9]+$') or #f[4] > 41 or not f[5] or #f[5] ~= 64 or not f[6] or #f[6] > 16384 or pttl < 0 then return {1, 4, 0, 0, 0, 0} end
  if f[5] == digest then return {1, 2, 0, tonumber(f[2]), tonumber(f[3]), pttl} end
  return {1, 3, 0, tonumber(f[2]), tonumber(f[3]), pttl}
end
local eid = redis.pcall('XADD', KEYS[1], 'MAXLEN', '~', string.format('%d', maxlen), '*', 'i', id, 'p', plan)
if type(eid) == 'table' then
  if eid['err'] and string.sub(eid['err'], 1, 10) == 'WRONGTYPE ' then return {1, 4, 0, 0, 0, 0} end
  return eid
end
redis.call('HSET', KEYS[2], 'v', '1', 'st', '1', 'att', '0', 'eid', eid, 'pd', digest, 'rc', '')
redis.call('PEXPIRE', KEYS[2], string.format('%d', ret))
return {1, 1, 0, 1, 0, ret}

-- idempotency-claim-v1
-- Replaces find -> tryBegin. Claims the idempotency record KEYS[1] (a
-- hash) for the attempt (owner ARGV[1], claim operation ARGV[2]) of the
-- request fingerprint ARGV[3], with a processing lease of ARGV[4] ms and a
-- retention of ARGV[5] ms after the lease (the key lives lease + retention
-- while CLAIMED or EXECUTING, so an expired execution is still found);
-- ARGV[6] response codec id, ARGV[7] policy revision.
-- Deadlines are PTTL-based, no clock is read: the processing lease ends
-- when PTTL falls to the stored retention 'gr' (remaining lease = PTTL -
-- gr); a COMPLETED record's PTTL is its replay TTL.
-- Absent (or RELEASED): ACQUIRED, a new CLAIMED record (attempt 1, or the
-- released attempt + 1). Else, in order: another fingerprint
-- FINGERPRINT_MISMATCH; COMPLETED: another codec id or policy revision
-- POLICY_MISMATCH, else COMPLETED_REPLAY (response, codec id, version,
-- digest, remaining replay TTL); ABANDONED RECOVERY_REQUIRED (current
-- attempt, remaining retention); an EXECUTING
-- record whose lease expired is never taken over: it becomes ABANDONED and
-- the claim is RECOVERY_REQUIRED; FAILED_RETRYABLE, or a CLAIMED record
-- whose lease expired, is TAKEN_OVER_CLAIMED by this attempt with attempt
-- + 1; the same owner and claim operation REPLAYED_ACQUIRE (no change,
-- remaining lease); the same owner under another operation
-- OWNER_OPERATION_CONFLICT; else IN_PROGRESS (retry-after = remaining
-- lease, current attempt). Every check runs before the first write. O(1).
-- Result: {1, status, 0, state, attempt, stateRevision, leaseMillis, recordTtlMillis, responseVersion, codecId, responseDigest, response}
-- state: 0 none, 1 CLAIMED, 2 EXECUTING, 3 COMPLETED, 4 FAILED_RETRYABLE, 5 ABANDONED, 6 RELEASED
-- status: 1 ACQUIRED, 2 REPLAYED_ACQUIRE, 3 TAKEN_OVER_CLAIMED, 4 COMPLETED_REPLAY, 5 IN_PROGRESS, 6 RECOVERY_REQUIRED, 7 FINGERPRINT_MISMATCH, 8 OWNER_OPERATION_CONFLICT, 9 POLICY_MISMATCH, 10 WRONG_TYPE, 11 INVALID
local MAX = 9007199254740991
if #KEYS ~= 1 or #ARGV ~= 7 then return {1, 11, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local owner, opId, fpArg, leaseArg, grArg, codec, policy = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
if #owner < 1 or #owner > 128 or #opId < 1 or #opId > 128 then return {1, 11, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if #fpArg < 16 or #fpArg > 128 or not string.match(fpArg, '^[0-9a-f]+$') then return {1, 11, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if #leaseArg > 10 or not string.match(leaseArg, '^[1-9][0-9]*$') or #grArg > 10 or not string.match(grArg, '^[1-9][0-9]*$') then return {1, 11, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local lease, grace = tonumber(leaseArg), tonumber(grArg)
if lease + grace > 2592000000 then return {1, 11, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if #codec < 1 or #codec > 64 or #policy < 1 or #policy > 128 then return {1, 11, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'hash' then return {1, 10, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local sc, rev, att = 0, 0, 0
local f, pttl, gr = {}, 0, 0
if kind == 'hash' then
  -- The record: every field present; v 2; st a state; rev, att 1..2^53-2;
  -- gr 1..2592000000; own, cop 1..128 bytes; a TTL; COMPLETED carries a
  -- response version and digest.
  f = redis.call('HMGET', KEYS[1], 'v', 'st', 'rev', 'fp', 'own', 'att', 'cop', 'sop', 'lop', 'lk', 'lrd', 'gr', 'cod', 'pol', 'rv', 'rd')
  pttl = redis.call('PTTL', KEYS[1])
  sc = ({CLAIMED = 1, EXECUTING = 2, COMPLETED = 3, FAILED_RETRYABLE = 4, ABANDONED = 5, RELEASED = 6})[f[2]]
  if f[1] ~= '2' or not sc or pttl < 0 or not (f[4] and f[5] and f[7] and f[8] and f[9] and f[10] and f[11] and f[13] and f[14] and f[15] and f[16]) then return {1, 10, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
  if not (f[3] and #f[3] <= 16 and string.match(f[3], '^[1-9][0-9]*$') and f[6] and #f[6] <= 16 and string.match(f[6], '^[1-9][0-9]*$') and f[12] and #f[12] <= 10 and string.match(f[12], '^[1-9][0-9]*$')) then return {1, 10, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
  rev, att, gr = tonumber(f[3]), tonumber(f[6]), tonumber(f[12])
  if rev >= MAX or att >= MAX or gr > 2592000000 or #f[5] < 1 or #f[5] > 128 or #f[7] < 1 or #f[7] > 128 then return {1, 10, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
  if sc == 3 and not (#f[15] <= 16 and string.match(f[15], '^[1-9][0-9]*$') and #f[16] >= 16) then return {1, 10, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
end
if sc == 0 or sc == 6 then
  local a, r = string.format('%.0f', att + 1), string.format('%.0f', rev + 1)
  redis.call('HSET', KEYS[1], 'v', '2', 'st', 'CLAIMED', 'rev', r, 'fp', fpArg, 'own', owner, 'att', a, 'cop', opId, 'sop', '', 'lop', opId, 'lk', 'claim', 'lrd', '', 'gr', grArg, 'cod', codec, 'pol', policy, 'rv', '', 'rd', '', 'rp', '')
  redis.call('PEXPIRE', KEYS[1], lease + grace)
  return {1, 1, 0, 1, att + 1, rev + 1, lease, 0, 0, '', '', ''}
end
if f[4] ~= fpArg then return {1, 7, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if sc == 3 then
  if f[13] ~= codec or f[14] ~= policy then return {1, 9, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
  local body = redis.call('HGET', KEYS[1], 'rp')
  if not body then return {1, 10, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
  return {1, 4, 0, 3, att, rev, 0, pttl, tonumber(f[15]), f[13], f[16], body}
end
if sc == 5 then return {1, 6, 0, 5, att, rev, 0, pttl, 0, '', '', ''} end
local left = pttl - gr
if sc == 2 and left <= 0 then
  redis.call('HSET', KEYS[1], 'st', 'ABANDONED', 'rev', string.format('%.0f', rev + 1), 'lop', '', 'lk', 'expire', 'lrd', '')
  return {1, 6, 0, 5, att, rev + 1, 0, pttl, 0, '', '', ''}
end
if sc == 4 or (sc == 1 and left <= 0) then
  redis.call('HSET', KEYS[1], 'st', 'CLAIMED', 'rev', string.format('%.0f', rev + 1), 'fp', fpArg, 'own', owner, 'att', string.format('%.0f', att + 1), 'cop', opId, 'sop', '', 'lop', opId, 'lk', 'claim', 'lrd', '', 'gr', grArg, 'cod', codec, 'pol', policy, 'rv', '', 'rd', '', 'rp', '')
  redis.call('PEXPIRE', KEYS[1], lease + grace)
  return {1, 3, 0, 1, att + 1, rev + 1, lease, 0, 0, '', '', ''}
end
if f[5] == owner then
  if f[7] == opId then return {1, 2, 0, sc, att, rev, left, 0, 0, '', '', ''} end
  return {1, 8, 0, 0, 0, 0, 0, 0, 0, '', '', ''}
end
return {1, 5, 0, sc, att, rev, left, 0, 0, '', '', ''}

-- idempotency-inspect-v1
-- Read-only. Reports what the idempotency record KEYS[1] holds for the
-- attempt (owner ARGV[1], claim operation ARGV[2]) of the request
-- fingerprint ARGV[3], read with response codec id ARGV[4] and policy
-- revision ARGV[5]: what a caller whose claim or start reply was lost
-- needs to recover its handle without claiming as a new owner. Absent (or
-- RELEASED): ABSENT; another fingerprint FINGERPRINT_MISMATCH; COMPLETED:
-- another codec id or policy revision POLICY_MISMATCH, else
-- COMPLETED_REPLAY with the response and the remaining replay TTL;
-- FAILED_RETRYABLE, ABANDONED as such (current attempt); CLAIMED or
-- EXECUTING by this owner and claim operation CLAIMED_SAME_OPERATION /
-- EXECUTING_SAME_OPERATION (attempt, remaining lease, 0 when it expired);
-- the same owner under another operation OPERATION_CONFLICT; another owner
-- IN_PROGRESS_OTHER (retry-after = its remaining lease). Deadlines are
-- PTTL-based (remaining lease = PTTL - gr); no clock. O(1).
-- Result: {1, status, 0, state, attempt, stateRevision, leaseMillis, recordTtlMillis, responseVersion, codecId, responseDigest, response}
-- status: 1 ABSENT, 2 CLAIMED_SAME_OPERATION, 3 EXECUTING_SAME_OPERATION, 4 COMPLETED_REPLAY, 5 IN_PROGRESS_OTHER, 6 FAILED_RETRYABLE, 7 ABANDONED, 8 FINGERPRINT_MISMATCH, 9 OPERATION_CONFLICT, 10 POLICY_MISMATCH, 11 WRONG_TYPE, 12 INVALID
local MAX = 9007199254740991
if #KEYS ~= 1 or #ARGV ~= 5 then return {1, 12, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local owner, opId, fpArg, codec, policy = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if #owner < 1 or #owner > 128 or #opId < 1 or #opId > 128 then return {1, 12, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if #fpArg < 16 or #fpArg > 128 or not string.match(fpArg, '^[0-9a-f]+$') then return {1, 12, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if #codec < 1 or #codec > 64 or #policy < 1 or #policy > 128 then return {1, 12, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return {1, 1, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if kind ~= 'hash' then return {1, 11, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local f = redis.call('HMGET', KEYS[1], 'v', 'st', 'rev', 'fp', 'own', 'att', 'cop', 'sop', 'lop', 'lk', 'lrd', 'gr', 'cod', 'pol', 'rv', 'rd')
local pttl = redis.call('PTTL', KEYS[1])
local sc = ({CLAIMED = 1, EXECUTING = 2, COMPLETED = 3, FAILED_RETRYABLE = 4, ABANDONED = 5, RELEASED = 6})[f[2]]
if f[1] ~= '2' or not sc or pttl < 0 or not (f[4] and f[5] and f[7] and f[8] and f[9] and f[10] and f[11] and f[13] and f[14] and f[15] and f[16]) then return {1, 11, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if not (f[3] and #f[3] <= 16 and string.match(f[3], '^[1-9][0-9]*$') and f[6] and #f[6] <= 16 and string.match(f[6], '^[1-9][0-9]*$') and f[12] and #f[12] <= 10 and string.match(f[12], '^[1-9][0-9]*$')) then return {1, 11, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local rev, att, gr = tonumber(f[3]), tonumber(f[6]), tonumber(f[12])
if rev >= MAX or att >= MAX or gr > 2592000000 or #f[5] < 1 or #f[5] > 128 or #f[7] < 1 or #f[7] > 128 then return {1, 11, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if sc == 3 and not (#f[15] <= 16 and string.match(f[15], '^[1-9][0-9]*$') and #f[16] >= 16) then return {1, 11, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if sc == 6 then return {1, 1, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if f[4] ~= fpArg then return {1, 8, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if sc == 3 then
  if f[13] ~= codec or f[14] ~= policy then return {1, 10, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
  local body = redis.call('HGET', KEYS[1], 'rp')
  if not body then return {1, 11, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
  return {1, 4, 0, 3, att, rev, 0, pttl, tonumber(f[15]), f[13], f[16], body}
end
if sc == 4 then return {1, 6, 0, 4, att, rev, 0, pttl, 0, '', '', ''} end
if sc == 5 then return {1, 7, 0, 5, att, rev, 0, pttl, 0, '', '', ''} end
local left = math.max(pttl - gr, 0)
if f[5] == owner then
  if f[7] ~= opId then return {1, 9, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
  if sc == 1 then return {1, 2, 0, 1, att, rev, left, 0, 0, '', '', ''} end
  return {1, 3, 0, 2, att, rev, left, 0, 0, '', '', ''}
end
return {1, 5, 0, sc, att, rev, left, 0, 0, '', '', ''}

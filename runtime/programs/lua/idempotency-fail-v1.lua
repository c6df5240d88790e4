-- idempotency-fail-v1
-- markFailed after the action ran: EXECUTING -> FAILED_RETRYABLE
-- (ARGV[4] 'retryable': no effect is proven; the next claim takes the
-- record over with attempt + 1) or -> ABANDONED (ARGV[4] 'abandoned': the
-- effect is unknown; every claim is RECOVERY_REQUIRED until a
-- reconciliation), kept for ARGV[5] ms (the key's TTL becomes the
-- retention). The same mark again (same operation and disposition) is
-- ALREADY_MARKED_SAME_OPERATION with the remaining retention; another
-- operation or disposition on a record this owner marked
-- OPERATION_CONFLICT; a record in another state NOT_IN_PROGRESS (a CLAIMED
-- record is released, not failed); absent or RELEASED ABSENT.
-- The owner handle is (owner token ARGV[1], attempt ARGV[2]); ARGV[3] is
-- this transition's operation id. An operation id names one transition of
-- the record: one already used by the claim, the start or another kind of
-- transition is OPERATION_CONFLICT. A stale owner (another token, or an
-- older attempt) is NOT_OWNER and changes nothing. The record is checked
-- as by idempotency-claim-v1 (WRONG_TYPE); every check runs before the
-- first write. Deadlines are PTTL-based: the key lives lease + gr while
-- CLAIMED or EXECUTING (remaining lease = PTTL - gr); no clock. O(1).
-- Result: {1, status, 0, state, attempt, stateRevision, leaseMillis, recordTtlMillis, responseVersion, codecId, responseDigest, response}
-- status: 1 MARKED_RETRYABLE, 2 MARKED_ABANDONED, 3 ALREADY_MARKED_SAME_OPERATION, 4 ABSENT, 5 NOT_OWNER, 6 NOT_IN_PROGRESS, 7 OPERATION_CONFLICT, 8 WRONG_TYPE, 9 INVALID
local MAX = 9007199254740991
if #KEYS ~= 1 or #ARGV ~= 5 then return {1, 9, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local owner, attArg, opId = ARGV[1], ARGV[2], ARGV[3]
if #owner < 1 or #owner > 128 or #opId < 1 or #opId > 128 then return {1, 9, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if #attArg > 16 or not string.match(attArg, '^[1-9][0-9]*$') or tonumber(attArg) >= MAX then return {1, 9, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local disp, ttlArg = ARGV[4], ARGV[5]
local target = ({retryable = 'FAILED_RETRYABLE', abandoned = 'ABANDONED'})[disp]
if not target then return {1, 9, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if #ttlArg > 10 or not string.match(ttlArg, '^[1-9][0-9]*$') or tonumber(ttlArg) > 2592000000 then return {1, 9, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return {1, 4, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if kind ~= 'hash' then return {1, 8, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local f = redis.call('HMGET', KEYS[1], 'v', 'st', 'rev', 'fp', 'own', 'att', 'cop', 'sop', 'lop', 'lk', 'lrd', 'gr', 'cod', 'pol', 'rv', 'rd')
local pttl = redis.call('PTTL', KEYS[1])
local sc = ({CLAIMED = 1, EXECUTING = 2, COMPLETED = 3, FAILED_RETRYABLE = 4, ABANDONED = 5, RELEASED = 6})[f[2]]
if f[1] ~= '2' or not sc or pttl < 0 or not (f[4] and f[5] and f[7] and f[8] and f[9] and f[10] and f[11] and f[13] and f[14] and f[15] and f[16]) then return {1, 8, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if not (f[3] and #f[3] <= 16 and string.match(f[3], '^[1-9][0-9]*$') and f[6] and #f[6] <= 16 and string.match(f[6], '^[1-9][0-9]*$') and f[12] and #f[12] <= 10 and string.match(f[12], '^[1-9][0-9]*$')) then return {1, 8, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local rev, att, gr = tonumber(f[3]), tonumber(f[6]), tonumber(f[12])
if rev >= MAX or att >= MAX or gr > 2592000000 or #f[5] < 1 or #f[5] > 128 or #f[7] < 1 or #f[7] > 128 then return {1, 8, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if sc == 3 and not (#f[15] <= 16 and string.match(f[15], '^[1-9][0-9]*$') and #f[16] >= 16) then return {1, 8, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if sc == 6 then return {1, 4, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if f[5] ~= owner or f[6] ~= attArg then return {1, 5, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if (sc == 4 or sc == 5) and string.sub(f[10], 1, 5) == 'fail-' then
  if f[9] == opId and f[10] == 'fail-' .. disp then return {1, 3, 0, sc, att, rev, 0, pttl, 0, '', '', ''} end
  return {1, 7, 0, 0, 0, 0, 0, 0, 0, '', '', ''}
end
if sc ~= 2 then return {1, 6, 0, sc, att, rev, 0, 0, 0, '', '', ''} end
if opId == f[7] or opId == f[8] or opId == f[9] then return {1, 7, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
redis.call('HSET', KEYS[1], 'st', target, 'rev', string.format('%.0f', rev + 1), 'lop', opId, 'lk', 'fail-' .. disp, 'lrd', '')
redis.call('PEXPIRE', KEYS[1], ttlArg)
if disp == 'retryable' then return {1, 1, 0, 4, att, rev + 1, 0, tonumber(ttlArg), 0, '', '', ''} end
return {1, 2, 0, 5, att, rev + 1, 0, tonumber(ttlArg), 0, '', '', ''}

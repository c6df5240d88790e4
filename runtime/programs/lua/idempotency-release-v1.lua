-- idempotency-release-v1
-- releaseBeforeExecution: a CLAIMED record whose action never started
-- becomes RELEASED, a tombstone that every claim treats as absent (the
-- next claim is ACQUIRED with attempt + 1, so attempts never repeat) and
-- that keeps the key's TTL. The same release again is
-- ALREADY_RELEASED_SAME_OPERATION; a released record this owner released
-- under another operation OPERATION_CONFLICT; a record past CLAIMED
-- EXECUTION_ALREADY_STARTED (deleting it would erase the evidence that
-- prevents a duplicate execution); absent ABSENT.
-- The owner handle is (owner token ARGV[1], attempt ARGV[2]); ARGV[3] is
-- this transition's operation id. An operation id names one transition of
-- the record: one already used by the claim, the start or another kind of
-- transition is OPERATION_CONFLICT. A stale owner (another token, or an
-- older attempt) is NOT_OWNER and changes nothing. The record is checked
-- as by idempotency-claim-v1 (WRONG_TYPE); every check runs before the
-- first write. Deadlines are PTTL-based: the key lives lease + gr while
-- CLAIMED or EXECUTING (remaining lease = PTTL - gr); no clock. O(1).
-- Result: {1, status, 0, state, attempt, stateRevision, leaseMillis, recordTtlMillis, responseVersion, codecId, responseDigest, response}
-- status: 1 RELEASED_BEFORE_EXECUTION, 2 ALREADY_RELEASED_SAME_OPERATION, 3 ABSENT, 4 NOT_OWNER, 5 EXECUTION_ALREADY_STARTED, 6 OPERATION_CONFLICT, 7 WRONG_TYPE, 8 INVALID
local MAX = 9007199254740991
if #KEYS ~= 1 or #ARGV ~= 3 then return {1, 8, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local owner, attArg, opId = ARGV[1], ARGV[2], ARGV[3]
if #owner < 1 or #owner > 128 or #opId < 1 or #opId > 128 then return {1, 8, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if #attArg > 16 or not string.match(attArg, '^[1-9][0-9]*$') or tonumber(attArg) >= MAX then return {1, 8, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return {1, 3, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if kind ~= 'hash' then return {1, 7, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local f = redis.call('HMGET', KEYS[1], 'v', 'st', 'rev', 'fp', 'own', 'att', 'cop', 'sop', 'lop', 'lk', 'lrd', 'gr', 'cod', 'pol', 'rv', 'rd')
local pttl = redis.call('PTTL', KEYS[1])
local sc = ({CLAIMED = 1, EXECUTING = 2, COMPLETED = 3, FAILED_RETRYABLE = 4, ABANDONED = 5, RELEASED = 6})[f[2]]
if f[1] ~= '2' or not sc or pttl < 0 or not (f[4] and f[5] and f[7] and f[8] and f[9] and f[10] and f[11] and f[13] and f[14] and f[15] and f[16]) then return {1, 7, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if not (f[3] and #f[3] <= 16 and string.match(f[3], '^[1-9][0-9]*$') and f[6] and #f[6] <= 16 and string.match(f[6], '^[1-9][0-9]*$') and f[12] and #f[12] <= 10 and string.match(f[12], '^[1-9][0-9]*$')) then return {1, 7, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local rev, att, gr = tonumber(f[3]), tonumber(f[6]), tonumber(f[12])
if rev >= MAX or att >= MAX or gr > 2592000000 or #f[5] < 1 or #f[5] > 128 or #f[7] < 1 or #f[7] > 128 then return {1, 7, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if sc == 3 and not (#f[15] <= 16 and string.match(f[15], '^[1-9][0-9]*$') and #f[16] >= 16) then return {1, 7, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if f[5] ~= owner or f[6] ~= attArg then return {1, 4, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if sc == 6 then
  if f[9] == opId then return {1, 2, 0, 6, att, rev, 0, pttl, 0, '', '', ''} end
  return {1, 6, 0, 0, 0, 0, 0, 0, 0, '', '', ''}
end
if sc ~= 1 then return {1, 5, 0, sc, att, rev, 0, 0, 0, '', '', ''} end
if opId == f[7] or opId == f[9] then return {1, 6, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
redis.call('HSET', KEYS[1], 'st', 'RELEASED', 'rev', string.format('%.0f', rev + 1), 'lop', opId, 'lk', 'release', 'lrd', '')
return {1, 1, 0, 6, att, rev + 1, 0, pttl, 0, '', '', ''}

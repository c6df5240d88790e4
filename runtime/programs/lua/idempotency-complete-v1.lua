-- idempotency-complete-v1
-- Owner-safe complete: EXECUTING -> COMPLETED with the response (version
-- ARGV[4], digest ARGV[5], payload ARGV[6]) replayed for ARGV[7] ms (the
-- key's TTL becomes the replay TTL: the processing lease no longer
-- matters). ARGV[8] is the host's bound on the payload (1..1048576 bytes;
-- the host's default 64 KiB): a longer payload is RESPONSE_TOO_LARGE
-- before anything is read or written. A COMPLETED record of this owner
-- with the same version and digest is ALREADY_COMPLETED_SAME_RESULT when
-- the operation is the same (the reply of the first complete was lost),
-- OPERATION_CONFLICT otherwise; another version or digest
-- RESPONSE_CONFLICT. A record in another state NOT_IN_PROGRESS (an
-- ABANDONED record is completed only by reconciliation); absent or
-- RELEASED ABSENT. An EXECUTING record whose lease expired completes: the
-- effect happened and nobody took the record over. The digest is the
-- host's; the program cannot recompute it.
-- The owner handle is (owner token ARGV[1], attempt ARGV[2]); ARGV[3] is
-- this transition's operation id. An operation id names one transition of
-- the record: one already used by the claim, the start or another kind of
-- transition is OPERATION_CONFLICT. A stale owner (another token, or an
-- older attempt) is NOT_OWNER and changes nothing. The record is checked
-- as by idempotency-claim-v1 (WRONG_TYPE); every check runs before the
-- first write. Deadlines are PTTL-based: the key lives lease + gr while
-- CLAIMED or EXECUTING (remaining lease = PTTL - gr); no clock. O(1).
-- Result: {1, status, 0, state, attempt, stateRevision, leaseMillis, recordTtlMillis, responseVersion, codecId, responseDigest, response}
-- status: 1 COMPLETED, 2 ALREADY_COMPLETED_SAME_RESULT, 3 RESPONSE_CONFLICT, 4 ABSENT, 5 NOT_OWNER, 6 NOT_IN_PROGRESS, 7 OPERATION_CONFLICT, 8 RESPONSE_TOO_LARGE, 9 WRONG_TYPE, 10 INVALID
local MAX = 9007199254740991
if #KEYS ~= 1 or #ARGV ~= 8 then return {1, 10, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local owner, attArg, opId = ARGV[1], ARGV[2], ARGV[3]
if #owner < 1 or #owner > 128 or #opId < 1 or #opId > 128 then return {1, 10, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if #attArg > 16 or not string.match(attArg, '^[1-9][0-9]*$') or tonumber(attArg) >= MAX then return {1, 10, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local verArg, digest, body, ttlArg, maxArg = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
if #verArg > 16 or not string.match(verArg, '^[1-9][0-9]*$') or tonumber(verArg) > MAX then return {1, 10, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if #digest < 16 or #digest > 128 or not string.match(digest, '^[0-9a-f]+$') then return {1, 10, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if #ttlArg > 10 or not string.match(ttlArg, '^[1-9][0-9]*$') or tonumber(ttlArg) > 2592000000 then return {1, 10, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if #maxArg > 7 or not string.match(maxArg, '^[1-9][0-9]*$') or tonumber(maxArg) > 1048576 then return {1, 10, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if #body > tonumber(maxArg) then return {1, 8, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return {1, 4, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if kind ~= 'hash' then return {1, 9, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local f = redis.call('HMGET', KEYS[1], 'v', 'st', 'rev', 'fp', 'own', 'att', 'cop', 'sop', 'lop', 'lk', 'lrd', 'gr', 'cod', 'pol', 'rv', 'rd')
local pttl = redis.call('PTTL', KEYS[1])
local sc = ({CLAIMED = 1, EXECUTING = 2, COMPLETED = 3, FAILED_RETRYABLE = 4, ABANDONED = 5, RELEASED = 6})[f[2]]
if f[1] ~= '2' or not sc or pttl < 0 or not (f[4] and f[5] and f[7] and f[8] and f[9] and f[10] and f[11] and f[13] and f[14] and f[15] and f[16]) then return {1, 9, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if not (f[3] and #f[3] <= 16 and string.match(f[3], '^[1-9][0-9]*$') and f[6] and #f[6] <= 16 and string.match(f[6], '^[1-9][0-9]*$') and f[12] and #f[12] <= 10 and string.match(f[12], '^[1-9][0-9]*$')) then return {1, 9, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
local rev, att, gr = tonumber(f[3]), tonumber(f[6]), tonumber(f[12])
if rev >= MAX or att >= MAX or gr > 2592000000 or #f[5] < 1 or #f[5] > 128 or #f[7] < 1 or #f[7] > 128 then return {1, 9, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if sc == 3 and not (#f[15] <= 16 and string.match(f[15], '^[1-9][0-9]*$') and #f[16] >= 16) then return {1, 9, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if sc == 6 then return {1, 4, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if f[5] ~= owner or f[6] ~= attArg then return {1, 5, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
if sc == 3 then
  if f[15] ~= verArg or f[16] ~= digest then return {1, 3, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
  if f[10] ~= 'complete' or f[9] ~= opId then return {1, 7, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
  return {1, 2, 0, 3, att, rev, 0, pttl, 0, '', '', ''}
end
if sc ~= 2 then return {1, 6, 0, sc, att, rev, 0, 0, 0, '', '', ''} end
if opId == f[7] or opId == f[8] or opId == f[9] then return {1, 7, 0, 0, 0, 0, 0, 0, 0, '', '', ''} end
redis.call('HSET', KEYS[1], 'st', 'COMPLETED', 'rev', string.format('%.0f', rev + 1), 'lop', opId, 'lk', 'complete', 'lrd', digest, 'rv', verArg, 'rd', digest, 'rp', body)
redis.call('PEXPIRE', KEYS[1], ttlArg)
return {1, 1, 0, 3, att, rev + 1, 0, tonumber(ttlArg), 0, '', '', ''}

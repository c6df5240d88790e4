-- fenced-lease-inspect-v1
-- Read-only. Reports the attempt's fencing token and remaining PTTL, only
-- while the resource (epoch, digest), the owner ARGV[3] and the operation
-- ARGV[4] all match a live record (OWNED): how a caller whose acquire timed
-- out recovers the handle. Another owner is NOT_OWNER, the same owner
-- under another operation OWNER_OPERATION_CONFLICT; nothing of theirs is
-- reported.
-- KEYS[1] is the lease owner record 'F1:<epoch>:<counter>:<#owner>:<owner>:
-- <operationId>' (PX TTL), KEYS[2] the fence counter 'C1:<epoch>:<counter>:
-- <registrationDigest>' (no TTL, created only by fenced-counter-provision-v1);
-- both share a hash tag (one slot). Checks, in order, before any write:
-- arguments; both key types and schemas (a counter with a TTL, an owner
-- record without one, anything unparsable: WRONG_TYPE); the counter exists
-- (never created here: FENCE_COUNTER_MISSING); its epoch and registration
-- digest are the caller's (EPOCH_MISMATCH, REGISTRATION_CONFLICT); a live
-- owner record carries the counter's epoch and a counter not above it
-- (else the counter regressed under it: FENCE_REGRESSION, fail closed).
-- Integers stay within 2^53-1. O(1); no clock. fenceEpoch/fenceCounter
-- report the counter whenever it was read.
-- Result: {1, status, 0, epoch, counter, pttlMillis, fenceEpoch, fenceCounter}
-- status: 1 OWNED, 2 ABSENT, 3 NOT_OWNER, 4 OWNER_OPERATION_CONFLICT, 5 FENCE_COUNTER_MISSING, 6 EPOCH_MISMATCH, 7 REGISTRATION_CONFLICT, 8 FENCE_REGRESSION, 9 WRONG_TYPE, 10 INVALID
local MAX = 9007199254740991
if #KEYS ~= 2 or #ARGV ~= 4 then return {1, 10, 0, 0, 0, 0, 0, 0} end
local epochArg, digest, owner, opId = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if #epochArg > 16 or not string.match(epochArg, '^[1-9][0-9]*$') or tonumber(epochArg) > MAX then return {1, 10, 0, 0, 0, 0, 0, 0} end
if #digest < 16 or #digest > 128 or not string.match(digest, '^[0-9a-f]+$') then return {1, 10, 0, 0, 0, 0, 0, 0} end
if #owner < 1 or #owner > 128 then return {1, 10, 0, 0, 0, 0, 0, 0} end
if #opId < 1 or #opId > 128 then return {1, 10, 0, 0, 0, 0, 0, 0} end
local okind = redis.call('TYPE', KEYS[1])['ok']
local fkind = redis.call('TYPE', KEYS[2])['ok']
if (okind ~= 'none' and okind ~= 'string') or (fkind ~= 'none' and fkind ~= 'string') then return {1, 9, 0, 0, 0, 0, 0, 0} end
-- The counter: 'C1:<epoch>:<counter>:<registrationDigest>', no TTL.
local fe, fen, fc, fd = false, 0, 0, ''
if fkind == 'string' then
  local raw = redis.call('GET', KEYS[2])
  local e, c, d = string.match(raw, '^C1:([1-9][0-9]*):([0-9]+):([0-9a-f]+)$')
  if not e or #e > 16 or #c > 16 or (#c > 1 and string.sub(c, 1, 1) == '0') or #d < 16 or #d > 128 then return {1, 9, 0, 0, 0, 0, 0, 0} end
  fe, fen, fc, fd = e, tonumber(e), tonumber(c), d
  if fen > MAX or fc > MAX or redis.call('PTTL', KEYS[2]) ~= -1 then return {1, 9, 0, 0, 0, 0, 0, 0} end
end
-- The owner record: 'F1:<epoch>:<counter>:<#owner>:<owner>:<operationId>', with a TTL.
local oe, oc, oOwner, oOp, opttl = false, 0, '', '', 0
if okind == 'string' then
  local cur = redis.call('GET', KEYS[1])
  opttl = redis.call('PTTL', KEYS[1])
  local e, c, n = string.match(cur, '^F1:([1-9][0-9]*):([1-9][0-9]*):([1-9][0-9]?[0-9]?):')
  if not e or #e > 16 or #c > 16 or opttl < 0 then return {1, 9, 0, 0, 0, 0, 0, 0} end
  local h, on = #e + #c + #n + 6, tonumber(n)
  local opLen = #cur - h - on - 1
  if on > 128 or opLen < 1 or opLen > 128 or string.sub(cur, h + on + 1, h + on + 1) ~= ':' then return {1, 9, 0, 0, 0, 0, 0, 0} end
  oe, oc = e, tonumber(c)
  if tonumber(e) > MAX or oc > MAX then return {1, 9, 0, 0, 0, 0, 0, 0} end
  oOwner, oOp = string.sub(cur, h + 1, h + on), string.sub(cur, h + on + 2)
end
if not fe then return {1, 5, 0, 0, 0, 0, 0, 0} end
if fe ~= epochArg then return {1, 6, 0, 0, 0, 0, fen, fc} end
if fd ~= digest then return {1, 7, 0, 0, 0, 0, fen, fc} end
if not oe then return {1, 2, 0, 0, 0, 0, fen, fc} end
if oe ~= fe or oc > fc then return {1, 8, 0, 0, 0, 0, fen, fc} end
if oOwner ~= owner then return {1, 3, 0, 0, 0, 0, fen, fc} end
if oOp ~= opId then return {1, 4, 0, 0, 0, 0, fen, fc} end
return {1, 1, 0, fen, oc, opttl, fen, fc}

-- fenced-lease-renew-v1
-- Replaces GET owner -> PEXPIRE for a fenced lease. Sets the record's PX TTL
-- to ARGV[5] (PEXPIRE, reported) only for
-- a live record of owner ARGV[3] whose token is exactly (ARGV[1], ARGV[4])
-- (the handle's); the same owner with another token is TOKEN_MISMATCH,
-- another owner NOT_OWNER. The counter is never changed. Generic
-- lease-renew/release programs are never used on fenced records.
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
-- status: 1 RENEWED, 2 ABSENT, 3 NOT_OWNER, 4 TOKEN_MISMATCH, 5 EPOCH_MISMATCH, 6 REGISTRATION_CONFLICT, 7 FENCE_COUNTER_MISSING, 8 FENCE_REGRESSION, 9 WRONG_TYPE, 10 INVALID
local MAX = 9007199254740991
if #KEYS ~= 2 or #ARGV ~= 5 then return {1, 10, 0, 0, 0, 0, 0, 0} end
local epochArg, digest, owner, counterArg, ttlArg = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if #epochArg > 16 or not string.match(epochArg, '^[1-9][0-9]*$') or tonumber(epochArg) > MAX then return {1, 10, 0, 0, 0, 0, 0, 0} end
if #digest < 16 or #digest > 128 or not string.match(digest, '^[0-9a-f]+$') then return {1, 10, 0, 0, 0, 0, 0, 0} end
if #owner < 1 or #owner > 128 then return {1, 10, 0, 0, 0, 0, 0, 0} end
if #counterArg > 16 or not string.match(counterArg, '^[1-9][0-9]*$') or tonumber(counterArg) > MAX then return {1, 10, 0, 0, 0, 0, 0, 0} end
if #ttlArg > 10 or not string.match(ttlArg, '^[1-9][0-9]*$') or tonumber(ttlArg) > 2592000000 then return {1, 10, 0, 0, 0, 0, 0, 0} end
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
if not fe then return {1, 7, 0, 0, 0, 0, 0, 0} end
if fe ~= epochArg then return {1, 5, 0, 0, 0, 0, fen, fc} end
if fd ~= digest then return {1, 6, 0, 0, 0, 0, fen, fc} end
if not oe then return {1, 2, 0, 0, 0, 0, fen, fc} end
if oe ~= fe or oc > fc then return {1, 8, 0, 0, 0, 0, fen, fc} end
if oOwner ~= owner then return {1, 3, 0, 0, 0, 0, fen, fc} end
if oc ~= tonumber(counterArg) then return {1, 4, 0, 0, 0, 0, fen, fc} end
redis.call('PEXPIRE', KEYS[1], ttlArg)
return {1, 1, 0, fen, oc, tonumber(ttlArg), fen, fc}

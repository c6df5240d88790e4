-- fenced-counter-provision-v1
-- Provisions the fence counter KEYS[1] of a fenced resource from its
-- durable registration (the protected store's epoch, registration digest
-- and high watermark): the only way a counter comes to exist. The request
-- path never creates one, because a missing counter cannot be told from a
-- lost one. Creates 'C1:<epoch>:<counter>:<registrationDigest>' with
-- counter = ARGV[3] and no TTL (SET NX semantics: an existing counter is
-- never overwritten, never lowered). The same registration again is
-- ALREADY_SAME while the stored counter is at least the high watermark,
-- REGRESSION below it (the counter lost increments the protected store saw:
-- an operator workflow, nothing written); another epoch or digest is
-- REGISTRATION_CONFLICT. A string that is no counter, or a counter with a
-- TTL, is WRONG_TYPE. Integers stay within 2^53-1. O(1); no clock.
-- The result is the read-back receipt: the stored epoch, counter, digest.
-- Result: {1, status, 0, fenceEpoch, fenceCounter, registrationDigest}
-- status: 1 PROVISIONED, 2 ALREADY_SAME, 3 REGISTRATION_CONFLICT, 4 REGRESSION, 5 WRONG_TYPE, 6 INVALID
local MAX = 9007199254740991
if #KEYS ~= 1 or #ARGV ~= 3 then return {1, 6, 0, 0, 0, ''} end
local epochArg, digest, markArg = ARGV[1], ARGV[2], ARGV[3]
if #epochArg > 16 or not string.match(epochArg, '^[1-9][0-9]*$') or tonumber(epochArg) > MAX then return {1, 6, 0, 0, 0, ''} end
if #digest < 16 or #digest > 128 or not string.match(digest, '^[0-9a-f]+$') then return {1, 6, 0, 0, 0, ''} end
if #markArg > 16 or not (markArg == '0' or string.match(markArg, '^[1-9][0-9]*$')) or tonumber(markArg) >= MAX then return {1, 6, 0, 0, 0, ''} end
local mark = tonumber(markArg)
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  redis.call('SET', KEYS[1], 'C1:' .. epochArg .. ':' .. markArg .. ':' .. digest)
  return {1, 1, 0, tonumber(epochArg), mark, digest}
end
if kind ~= 'string' then return {1, 5, 0, 0, 0, ''} end
local raw = redis.call('GET', KEYS[1])
local fe, c, fd = string.match(raw, '^C1:([1-9][0-9]*):([0-9]+):([0-9a-f]+)$')
if not fe or #fe > 16 or #c > 16 or (#c > 1 and string.sub(c, 1, 1) == '0') or #fd < 16 or #fd > 128 then return {1, 5, 0, 0, 0, ''} end
local fen, fc = tonumber(fe), tonumber(c)
if fen > MAX or fc > MAX or redis.call('PTTL', KEYS[1]) ~= -1 then return {1, 5, 0, 0, 0, ''} end
if fe ~= epochArg or fd ~= digest then return {1, 3, 0, fen, fc, fd} end
if fc < mark then return {1, 4, 0, fen, fc, fd} end
return {1, 2, 0, fen, fc, fd}

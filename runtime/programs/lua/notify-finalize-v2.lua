-- notify-finalize-v2
-- Record one transport receipt and reduce the intent's state so that the
-- state an attempt's receipts leave depends on which receipts arrived,
-- never on their order: notify-finalize-v1 with two changes, both for a
-- REJECTED_DEFINITE (outcome 2) and an INDETERMINATE (3) receipt of the
-- same, current attempt. A definite report resolves the doubt: (a) a
-- REJECTED_DEFINITE receipt for the current attempt turns INDETERMINATE
-- into FAILED (RECONCILED), final=1 or final=0 alike (the entry may be
-- acknowledged already, so no retry may follow); (b) an INDETERMINATE
-- receipt for the current attempt of a PENDING record (that attempt's
-- definite rejection was recorded with a retry to follow) makes it
-- FAILED (FINALIZED), not INDETERMINATE. The rest is v1: ACCEPTED (1)
-- proves the message left, so it makes any state DELIVERED (FINALIZED
-- from PENDING/DELIVERING, RECONCILED from FAILED, QUARANTINED or
-- INDETERMINATE) and nothing ever leaves DELIVERED; otherwise a
-- REJECTED_DEFINITE or INDETERMINATE receipt never changes a final state
-- (ALREADY_FINAL) and applies only to the current attempt (STALE_ATTEMPT
-- otherwise). final=1 ends the dispatch (FINALIZED: FAILED for 2,
-- INDETERMINATE for 3 on DELIVERING); final=0 with outcome 2 means a
-- retry follows (RECORDED: back to PENDING). An INDETERMINATE receipt is
-- always final: it is never retried. When the state is final after the
-- call and entryId is given, the entry is acknowledged in the same step
-- (XACK); entryId '' records a receipt that arrived out of band (no XACK).
-- The receipt bytes (0..512, host-encoded) are appended to rc with a
-- two-byte length while rc stays within 16384 bytes (else dropped).
-- KEYS[1] stream, KEYS[2] intent record (one slot). ARGV: group, entryId,
-- attempt (1..1000), outcome (1..3), final (0|1), receipt. The record is
-- checked as by notify-submit-v1 (WRONG_TYPE); every check runs before the
-- first write. TTL unchanged. No clock. O(1).
-- Result: {1, status, 0, state, attempts, acked}
-- status: 1 FINALIZED, 2 RECORDED, 3 RECONCILED, 4 ALREADY_FINAL, 5 STALE_ATTEMPT, 6 ABSENT, 7 WRONG_TYPE, 8 INVALID
if #KEYS ~= 2 or #ARGV ~= 6 then return {1, 8, 0, 0, 0, 0} end
local g, e, a, o, fin, rcpt = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
if #g < 1 or #g > 64 or not string.match(g, '^[%w%._%-]+$') then return {1, 8, 0, 0, 0, 0} end
if e ~= '' and (#e > 41 or not string.match(e, '^[0-9]+%-[0-9]+$')) then return {1, 8, 0, 0, 0, 0} end
if #a > 4 or not string.match(a, '^[1-9][0-9]*$') or tonumber(a) > 1000 then return {1, 8, 0, 0, 0, 0} end
if not string.match(o, '^[123]$') or not string.match(fin, '^[01]$') or #rcpt > 512 then return {1, 8, 0, 0, 0, 0} end
if o == '3' and fin ~= '1' then return {1, 8, 0, 0, 0, 0} end
local sk = redis.call('TYPE', KEYS[1])['ok']
local rk = redis.call('TYPE', KEYS[2])['ok']
if (sk ~= 'none' and sk ~= 'stream') or (rk ~= 'none' and rk ~= 'hash') then return {1, 7, 0, 0, 0, 0} end
if rk == 'none' then
  local n = 0
  if e ~= '' then n = redis.call('XACK', KEYS[1], g, e) end
  return {1, 6, 0, 0, 0, n}
end
local f = redis.call('HMGET', KEYS[2], 'v', 'st', 'att', 'eid', 'pd', 'rc')
local pttl = redis.call('PTTL', KEYS[2])
if f[1] ~= '1' or not f[2] or not string.match(f[2], '^[1-6]$') or not f[3] or not (f[3] == '0' or string.match(f[3], '^[1-9][0-9]?[0-9]?[0-9]?$')) then return {1, 7, 0, 0, 0, 0} end
if not f[4] or not string.match(f[4], '^[0-9]+%-[0-9]+$') or #f[4] > 41 or not f[5] or #f[5] ~= 64 or not f[6] or #f[6] > 16384 or pttl < 0 then return {1, 7, 0, 0, 0, 0} end
local st, att = tonumber(f[2]), tonumber(f[3])
local cur = tonumber(a) == att
local rc = f[6]
if #rcpt > 0 and #rc + 2 + #rcpt <= 16384 then
  rc = rc .. string.char(math.floor(#rcpt / 256), #rcpt % 256) .. rcpt
end
local n = 0
if o == '1' then
  redis.call('HSET', KEYS[2], 'st', '3', 'rc', rc)
  if e ~= '' then n = redis.call('XACK', KEYS[1], g, e) end
  if st == 3 then return {1, 4, 0, 3, att, n} end
  if st >= 4 then return {1, 3, 0, 3, att, n} end
  return {1, 1, 0, 3, att, n}
end
if st == 6 and o == '2' and cur then
  redis.call('HSET', KEYS[2], 'st', '4', 'rc', rc)
  if e ~= '' then n = redis.call('XACK', KEYS[1], g, e) end
  return {1, 3, 0, 4, att, n}
end
if st >= 3 then
  redis.call('HSET', KEYS[2], 'rc', rc)
  if e ~= '' then n = redis.call('XACK', KEYS[1], g, e) end
  return {1, 4, 0, st, att, n}
end
if not cur then
  redis.call('HSET', KEYS[2], 'rc', rc)
  return {1, 5, 0, st, att, 0}
end
if fin == '0' then
  redis.call('HSET', KEYS[2], 'st', '1', 'rc', rc)
  return {1, 2, 0, 1, att, 0}
end
local ns = 4
if o == '3' and st == 2 then ns = 6 end
redis.call('HSET', KEYS[2], 'st', tostring(ns), 'rc', rc)
if e ~= '' then n = redis.call('XACK', KEYS[1], g, e) end
return {1, 1, 0, ns, att, n}

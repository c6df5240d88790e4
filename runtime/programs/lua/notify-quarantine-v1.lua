-- notify-quarantine-v1
-- Move a message that keeps failing (delivered too often, or a plan that
-- does not decode) out of dispatch: copy the entry (its first 8 fields,
-- after src = entryId and r = reason) to the shard's quarantine stream
-- (XADD MAXLEN ~ maxLen), acknowledge it (XACK) and, when intentId names
-- the record and it is not final, make the record QUARANTINED, in one
-- step. Only an entry still pending in the group is moved: a repeat after
-- a lost reply is NOT_PENDING and copies nothing twice. A pending entry
-- already trimmed from the stream is quarantined with copied = 0.
-- KEYS[1] stream, KEYS[2] quarantine stream, KEYS[3] intent record (all
-- one slot; with intentId '' the record key is not read). ARGV: group,
-- entryId, intentId ('' or 64 lower-hex), reason ([a-z0-9-], 1..32),
-- maxLen. The record is checked as by notify-submit-v1 (WRONG_TYPE);
-- every check runs before the first write. No clock. O(1) amortised.
-- Result: {1, status, 0, copied, state}
-- status: 1 QUARANTINED, 2 NOT_PENDING, 3 WRONG_TYPE, 4 INVALID
if #KEYS ~= 3 or #ARGV ~= 5 then return {1, 4, 0, 0, 0} end
local g, e, id, why, maxlen = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if #g < 1 or #g > 64 or not string.match(g, '^[%w%._%-]+$') then return {1, 4, 0, 0, 0} end
if #e > 41 or not string.match(e, '^[0-9]+%-[0-9]+$') then return {1, 4, 0, 0, 0} end
if id ~= '' and (#id ~= 64 or not string.match(id, '^[0-9a-f]+$')) then return {1, 4, 0, 0, 0} end
if #why < 1 or #why > 32 or not string.match(why, '^[a-z0-9%-]+$') then return {1, 4, 0, 0, 0} end
if #maxlen > 9 or not string.match(maxlen, '^[1-9][0-9]*$') then return {1, 4, 0, 0, 0} end
local sk = redis.call('TYPE', KEYS[1])['ok']
local qk = redis.call('TYPE', KEYS[2])['ok']
if (sk ~= 'none' and sk ~= 'stream') or (qk ~= 'none' and qk ~= 'stream') then return {1, 3, 0, 0, 0} end
local rk = 'none'
local st = 0
if id ~= '' then
  rk = redis.call('TYPE', KEYS[3])['ok']
  if rk ~= 'none' and rk ~= 'hash' then return {1, 3, 0, 0, 0} end
end
if rk == 'hash' then
  local f = redis.call('HMGET', KEYS[3], 'v', 'st', 'att', 'eid', 'pd', 'rc')
  local pttl = redis.call('PTTL', KEYS[3])
  if f[1] ~= '1' or not f[2] or not string.match(f[2], '^[1-6]$') or not f[3] or not (f[3] == '0' or string.match(f[3], '^[1-9][0-9]?[0-9]?[0-9]?$')) then return {1, 3, 0, 0, 0} end
  if not f[4] or not string.match(f[4], '^[0-9]+%-[0-9]+$') or #f[4] > 41 or not f[5] or #f[5] ~= 64 or not f[6] or #f[6] > 16384 or pttl < 0 then return {1, 3, 0, 0, 0} end
  st = tonumber(f[2])
end
if sk == 'none' then return {1, 2, 0, 0, st} end
local p = redis.pcall('XPENDING', KEYS[1], g, e, e, 1)
if type(p) ~= 'table' or p.err or #p == 0 then return {1, 2, 0, 0, st} end
local entry = redis.call('XRANGE', KEYS[1], e, e)
local fields = {}
local copied = 0
if #entry == 1 then
  fields = entry[1][2]
  copied = 1
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', maxlen, '*', 'src', e, 'r', why, unpack(fields, 1, math.min(#fields, 16)))
redis.call('XACK', KEYS[1], g, e)
if rk == 'hash' and st < 3 then
  st = 5
  redis.call('HSET', KEYS[3], 'st', '5')
end
return {1, 1, 0, copied, st}

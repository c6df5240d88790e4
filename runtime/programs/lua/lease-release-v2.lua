-- lease-release-v2
-- lease-release-v1's arguments, envelope, statuses and result (v1 and v2
-- may share a key) in fewer Redis calls and less interpreter work: GET
-- (pcall) doubles as the type check (v1: TYPE, then GET), and the stored
-- value is compared with the attempt's envelope as a whole; only a value
-- that differs is parsed, to tell NOT_OWNER from WRONG_TYPE.
-- Deletes the efficiency lease KEYS[1] only while it is held by the
-- attempt (owner ARGV[1], operation ARGV[2]). A lease of the same owner
-- under another operation is NOT_OWNER and stays. An envelope without a
-- TTL is WRONG_TYPE and stays. O(1); no clock.
-- Result: {1, status, 0, deleted}
-- status: 1 RELEASED, 2 ABSENT, 3 NOT_OWNER, 4 WRONG_TYPE, 5 INVALID
if #KEYS ~= 1 or #ARGV ~= 2 then return {1, 5, 0, 0} end
local owner, opId = ARGV[1], ARGV[2]
if #owner < 1 or #owner > 128 or #opId < 1 or #opId > 128 then return {1, 5, 0, 0} end
local cur = redis.pcall('GET', KEYS[1])
if type(cur) ~= 'string' then
  if not cur then return {1, 2, 0, 0} end
  if type(cur) == 'table' and cur['err'] and string.sub(cur['err'], 1, 10) == 'WRONGTYPE ' then return {1, 4, 0, 0} end
  return cur
end
local pttl = redis.call('PTTL', KEYS[1])
if cur == 'L1:' .. #owner .. ':' .. owner .. ':' .. opId then
  if pttl < 0 then return {1, 4, 0, 0} end
  return {1, 1, 0, redis.call('DEL', KEYS[1])}
end
local n = string.match(cur, '^L1:([1-9][0-9]?[0-9]?):')
if not n or pttl < 0 then return {1, 4, 0, 0} end
local h, on = #n + 4, tonumber(n)
local opLen = #cur - h - on - 1
if on > 128 or opLen < 1 or opLen > 128 or string.sub(cur, h + on + 1, h + on + 1) ~= ':' then return {1, 4, 0, 0} end
return {1, 3, 0, 0}

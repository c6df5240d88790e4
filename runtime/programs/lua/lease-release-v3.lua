-- lease-release-v3
-- lease-release-v2's key, envelope, statuses and meaning (v1, v2 and v3
-- hosts share lease keys) with the host doing the work that protects no
-- Redis state: the host validates owner and operation id and builds the
-- envelope, so releasing the caller's own live lease is GET, one compare,
-- PTTL (an envelope without a TTL is WRONG_TYPE and stays) and DEL, and the
-- reply is the integer 1 (RELEASED, deleted 1). Only a value that differs
-- is parsed, to tell NOT_OWNER from WRONG_TYPE.
-- Deletes the efficiency lease KEYS[1] only while it holds the attempt
-- envelope ARGV[1] ('L1:' .. #owner .. ':' .. owner .. ':' .. operationId).
-- A lease of the same owner under another operation is NOT_OWNER and
-- stays. O(1); no clock.
-- Result: 1 (RELEASED), or {1, status, 0, deleted}
-- status: 1 RELEASED, 2 ABSENT, 3 NOT_OWNER, 4 WRONG_TYPE, 5 INVALID
if #KEYS ~= 1 or #ARGV ~= 1 then return {1, 5, 0, 0} end
local cur = redis.pcall('GET', KEYS[1])
if cur == ARGV[1] then
  if redis.call('PTTL', KEYS[1]) < 0 then return {1, 4, 0, 0} end
  redis.call('DEL', KEYS[1])
  return 1
end
if type(cur) ~= 'string' then
  if not cur then return {1, 2, 0, 0} end
  if type(cur) == 'table' and cur['err'] and string.sub(cur['err'], 1, 10) == 'WRONGTYPE ' then return {1, 4, 0, 0} end
  return cur
end
local n = string.match(cur, '^L1:([1-9][0-9]?[0-9]?):')
if not n or redis.call('PTTL', KEYS[1]) < 0 then return {1, 4, 0, 0} end
local h, on = #n + 4, tonumber(n)
local opLen = #cur - h - on - 1
if on > 128 or opLen < 1 or opLen > 128 or string.sub(cur, h + on + 1, h + on + 1) ~= ':' then return {1, 4, 0, 0} end
return {1, 3, 0, 0}

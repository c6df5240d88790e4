-- compare-and-set-with-ttl-v1
-- Replaces GET -> compare revision -> SET. Replaces the value of KEYS[1]
-- with ARGV[2] and a PX TTL of ARGV[3] only while the lower-case hex SHA-1
-- of the stored bytes equals ARGV[1]. O(1) plus bounded value bytes; no clock.
-- Result: {1, status, 0, pttlMillis, sameValue}
-- status: 1 STORED, 2 ABSENT, 3 REVISION_CONFLICT, 4 WRONG_TYPE, 5 INVALID
if #KEYS ~= 1 or #ARGV ~= 3 then return {1, 5, 0, 0, 0} end
local expected, value, ttlArg = ARGV[1], ARGV[2], ARGV[3]
if #expected ~= 40 or not string.match(expected, '^[0-9a-f]+$') then return {1, 5, 0, 0, 0} end
if #value < 1 or #value > 1048576 then return {1, 5, 0, 0, 0} end
if #ttlArg > 16 or not string.match(ttlArg, '^[1-9][0-9]*$') then return {1, 5, 0, 0, 0} end
local ttl = tonumber(ttlArg)
if ttl < 1 or ttl > 2592000000 then return {1, 5, 0, 0, 0} end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return {1, 2, 0, 0, 0} end
if kind ~= 'string' then return {1, 4, 0, 0, 0} end
local current = redis.call('GET', KEYS[1])
if redis.sha1hex(current) ~= expected then
  local same = 0
  if current == value then same = 1 end
  return {1, 3, 0, 0, same}
end
redis.call('SET', KEYS[1], value, 'PX', ttlArg)
return {1, 1, 0, ttl, 1}

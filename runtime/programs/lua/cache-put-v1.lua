-- cache-put-v1
-- Replaces GET generation -> compare -> GET entry -> compare source revision
-- -> SET PX: the conditional write of one cache entry. Stores the envelope
-- ARGV[2] at KEYS[2] with a PX TTL of ARGV[3] only while the region
-- generation KEYS[1] exists and equals the captured ARGV[1] and, under the
-- condition 'newer-source-revision' (ARGV[4]), only while no readable stored
-- entry carries a source revision >= the new one. Condition 'any' skips the
-- revision check. Envelope layout (host/cache/envelope): magic C5 'CAP',
-- version (byte 5), codec id length n (byte 6), codec id, payload version
-- (4 bytes), flags (byte 11+n; bit2 = source revision present), then the
-- revision as 8 bytes big-endian, compared as two unsigned 32-bit halves
-- (exact; never a locale-dependent string comparison, never a double above
-- 2^53). A stored v1 envelope or a v2 one without a revision is older than
-- any revision; a stored value whose header is not v1/v2 is
-- STORED_UNREADABLE under 'newer-source-revision' (nothing written).
-- O(1) plus bounded value bytes; no clock.
-- Result: {1, status, 0, pttlMillis, sameValue}
-- status: 1 STORED, 2 GENERATION_MISSING, 3 GENERATION_MOVED, 4 NOT_NEWER, 5 STORED_UNREADABLE, 6 WRONG_TYPE, 7 INVALID
if #KEYS ~= 2 or #ARGV ~= 4 then return {1, 7, 0, 0, 0} end
local captured, value, ttlArg, condition = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if #captured < 16 or #captured > 128 then return {1, 7, 0, 0, 0} end
if #value < 1 or #value > 1048576 then return {1, 7, 0, 0, 0} end
if #ttlArg > 16 or not string.match(ttlArg, '^[1-9][0-9]*$') then return {1, 7, 0, 0, 0} end
local ttl = tonumber(ttlArg)
if ttl < 1 or ttl > 2592000000 then return {1, 7, 0, 0, 0} end
local newer = condition == 'newer-source-revision'
if not newer and condition ~= 'any' then return {1, 7, 0, 0, 0} end
local newHi, newLo = 0, 0
if newer then
  -- The new value must be a v2 envelope carrying a source revision.
  local n = string.byte(value, 6) or 0
  if string.sub(value, 1, 5) ~= '\197CAP\2' or n < 1 or #value < 19 + n then return {1, 7, 0, 0, 0} end
  local flags = string.byte(value, 11 + n)
  if flags >= 16 or flags % 8 < 4 then return {1, 7, 0, 0, 0} end
  newHi, newLo = struct.unpack('>I4I4', value, 12 + n)
end
local genKind = redis.call('TYPE', KEYS[1])['ok']
local entryKind = redis.call('TYPE', KEYS[2])['ok']
if genKind ~= 'none' and genKind ~= 'string' then return {1, 6, 0, 0, 0} end
if entryKind ~= 'none' and entryKind ~= 'string' then return {1, 6, 0, 0, 0} end
if genKind == 'none' then return {1, 2, 0, 0, 0} end
if redis.call('GET', KEYS[1]) ~= captured then return {1, 3, 0, 0, 0} end
if newer and entryKind == 'string' then
  -- Only the header is read: at most 4+1+1+255+4+1+8 = 274 bytes.
  local head = redis.call('GETRANGE', KEYS[2], 0, 273)
  local version = string.byte(head, 5)
  local n = string.byte(head, 6) or 0
  if string.sub(head, 1, 4) ~= '\197CAP' or (version ~= 1 and version ~= 2) or n < 1 or #head < 11 + n then
    return {1, 5, 0, 0, 0}
  end
  local flags = string.byte(head, 11 + n)
  if (version == 1 and flags >= 4) or flags >= 16 then return {1, 5, 0, 0, 0} end
  if version == 2 and flags % 8 >= 4 then
    if #head < 19 + n then return {1, 5, 0, 0, 0} end
    local hi, lo = struct.unpack('>I4I4', head, 12 + n)
    if hi > newHi or (hi == newHi and lo >= newLo) then
      local same = 0
      if redis.call('STRLEN', KEYS[2]) == #value and redis.call('GET', KEYS[2]) == value then same = 1 end
      return {1, 4, 0, 0, same}
    end
  end
end
redis.call('SET', KEYS[2], value, 'PX', ttlArg)
return {1, 1, 0, ttl, 1}

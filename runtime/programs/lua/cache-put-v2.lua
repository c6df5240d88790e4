-- cache-put-v2
-- Replaces GET generation -> compare -> GET entry -> compare observation and
-- source revision -> SET PX: the one conditional write of a cache entry (a
-- load's result, a per-key invalidation's tombstone, a quarantine). Stores
-- ARGV[2] at the entry KEYS[2] with a PX TTL of ARGV[3] only while the shard
-- generation KEYS[1] exists and equals the captured ARGV[1]; with an
-- observation (ARGV[5..7]) only while the entry is still what the lookup saw;
-- under 'newer-source-revision' (ARGV[4]) only while no readable stored
-- envelope carries a source revision >= the new one.
-- The value is an envelope (C5 'CAP', version 1 or 2) or a tombstone
-- (C5 'TMB', version 1, 21 bytes in all); anything else is INVALID.
-- Observation modes: 'none'; 'absent' (the entry must not exist); 'value'
-- (it must exist with STRLEN = ARGV[6] and redis.sha1hex of its first
-- min(length, 384) bytes = ARGV[7]; the envelope header, digest included,
-- fits in 384 bytes); 'tombstone' (as 'value', or the entry is absent: the
-- tombstone expired, and a newer invalidation would have written a new one).
-- Envelope header (host/cache/envelope): version (byte 5), codec id length n
-- (byte 6), flags (byte 11+n; bit2 = source revision), revision as 8 bytes
-- big-endian at 12+n, compared as two unsigned 32-bit halves (exact; never
-- a locale-dependent string comparison, never a double above 2^53). A
-- stored tombstone, v1 envelope or v2 one without a revision is older than
-- any revision; any other stored value is STORED_UNREADABLE there.
-- A generation key holding a string outside 16..128 bytes is no generation:
-- WRONG_TYPE. Checks run in the order arguments, key types, generation,
-- observation, revision; nothing is written before the last.
-- sameValue: the stored bytes equal ARGV[2] (1 on STORED); previous: what
-- the entry held before (0 absent, 1 envelope, 2 tombstone, 3 other), set
-- once the generation check passed; generation: the current one on
-- GENERATION_MOVED. O(1) plus bounded value bytes; no clock.
-- Result: {1, status, 0, pttlMillis, sameValue, previous, generation}
-- status: 1 STORED, 2 GENERATION_MISSING, 3 GENERATION_MOVED, 4 NOT_NEWER, 5 OBSERVATION_CHANGED, 6 STORED_UNREADABLE, 7 WRONG_TYPE, 8 INVALID
if #KEYS ~= 2 or #ARGV ~= 7 then return {1, 8, 0, 0, 0, 0, ''} end
local captured, value, ttlArg, condition = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local mode, lengthArg, digest = ARGV[5], ARGV[6], ARGV[7]
if #captured < 16 or #captured > 128 then return {1, 8, 0, 0, 0, 0, ''} end
if #value < 1 or #value > 1048576 then return {1, 8, 0, 0, 0, 0, ''} end
local magic, version = string.sub(value, 1, 4), string.byte(value, 5)
local envelope = magic == '\197CAP' and (version == 1 or version == 2)
local tombstone = magic == '\197TMB' and version == 1 and #value == 21
if not envelope and not tombstone then return {1, 8, 0, 0, 0, 0, ''} end
if #ttlArg > 16 or not string.match(ttlArg, '^[1-9][0-9]*$') then return {1, 8, 0, 0, 0, 0, ''} end
local ttl = tonumber(ttlArg)
if ttl < 1 or ttl > 2592000000 then return {1, 8, 0, 0, 0, 0, ''} end
local newer = condition == 'newer-source-revision'
if not newer and condition ~= 'any' then return {1, 8, 0, 0, 0, 0, ''} end
local newHi, newLo = 0, 0
if newer then
  -- The new value must be a v2 envelope carrying a source revision.
  local n = string.byte(value, 6) or 0
  if not envelope or version ~= 2 or n < 1 or #value < 19 + n then return {1, 8, 0, 0, 0, 0, ''} end
  local flags = string.byte(value, 11 + n)
  if flags >= 16 or flags % 8 < 4 then return {1, 8, 0, 0, 0, 0, ''} end
  newHi, newLo = struct.unpack('>I4I4', value, 12 + n)
end
local observed = mode == 'value' or mode == 'tombstone'
if not observed and mode ~= 'none' and mode ~= 'absent' then return {1, 8, 0, 0, 0, 0, ''} end
local observedLength = 0
if observed then
  if #lengthArg > 7 or not string.match(lengthArg, '^[1-9][0-9]*$') then return {1, 8, 0, 0, 0, 0, ''} end
  observedLength = tonumber(lengthArg)
  if observedLength > 1048576 then return {1, 8, 0, 0, 0, 0, ''} end
  if #digest ~= 40 or not string.match(digest, '^[0-9a-f]+$') then return {1, 8, 0, 0, 0, 0, ''} end
elseif lengthArg ~= '0' or digest ~= '' then
  return {1, 8, 0, 0, 0, 0, ''}
end
local genKind = redis.call('TYPE', KEYS[1])['ok']
local entryKind = redis.call('TYPE', KEYS[2])['ok']
if genKind ~= 'none' and genKind ~= 'string' then return {1, 7, 0, 0, 0, 0, ''} end
if entryKind ~= 'none' and entryKind ~= 'string' then return {1, 7, 0, 0, 0, 0, ''} end
if genKind == 'none' then return {1, 2, 0, 0, 0, 0, ''} end
local current = redis.call('GET', KEYS[1])
if #current < 16 or #current > 128 then return {1, 7, 0, 0, 0, 0, ''} end
if current ~= captured then return {1, 3, 0, 0, 0, 0, current} end
-- The entry: its length and at most its first 384 bytes (every header, the
-- observation prefix); the whole value only for sameValue, never to store.
local length, head, previous = 0, '', 0
if entryKind == 'string' then
  length = redis.call('STRLEN', KEYS[2])
  head = redis.call('GETRANGE', KEYS[2], 0, 383)
  local m, v = string.sub(head, 1, 4), string.byte(head, 5)
  if m == '\197TMB' and v == 1 and length == 21 then
    previous = 2
  elseif m == '\197CAP' and (v == 1 or v == 2) then
    previous = 1
  else
    previous = 3
  end
end
local status = 1
if mode == 'absent' and entryKind ~= 'none' then
  status = 5
elseif observed and entryKind == 'none' then
  if mode ~= 'tombstone' then status = 5 end
elseif observed and (length ~= observedLength or redis.sha1hex(head) ~= digest) then
  status = 5
end
if status == 1 and newer and previous == 3 then status = 6 end
if status == 1 and newer and previous == 1 then
  local v, n = string.byte(head, 5), string.byte(head, 6) or 0
  local flags = string.byte(head, 11 + n) or 255
  if n < 1 or (v == 1 and flags >= 4) or flags >= 16 then
    status = 6
  elseif v == 2 and flags % 8 >= 4 then
    if #head < 19 + n then
      status = 6
    else
      local hi, lo = struct.unpack('>I4I4', head, 12 + n)
      if hi > newHi or (hi == newHi and lo >= newLo) then status = 4 end
    end
  end
end
if status == 1 then
  redis.call('SET', KEYS[2], value, 'PX', ttlArg)
  return {1, 1, 0, ttl, 1, previous, ''}
end
local same = 0
if length == #value then
  if length <= 384 then
    if head == value then same = 1 end
  elseif redis.call('GET', KEYS[2]) == value then
    same = 1
  end
end
if status == 4 then return {1, 4, 0, 0, same, previous, ''} end
if status == 5 then return {1, 5, 0, 0, same, previous, ''} end
return {1, 6, 0, 0, same, previous, ''}

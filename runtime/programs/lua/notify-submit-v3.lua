-- notify-submit-v3
-- notify-submit-v2 for one to four intents of one shard in one script
-- call (the host groups concurrent submits of a stream): each intent is
-- judged on its own exactly as v2 judges it, with v2's record, stream
-- entry and statuses, so v1, v2 and v3 hosts share intents in a rolling
-- upgrade. The call overhead (~2.8 us of server time) is paid once per
-- call, not once per intent.
-- The host checks the ids, plans, digests and maxLen (v2 did it here);
-- Lua keeps what protects Redis state: the arity, the retention (PEXPIRE
-- runs after HSET, so a bad value must not reach it), the record's type,
-- shape and TTL on the duplicate path, and the stream's type (XADD under
-- pcall: WRONGTYPE writes nothing). The blocks are unrolled (no loops).
-- Each intent's checks run before its own writes. A non-WRONGTYPE error
-- returns the error while nothing is written yet; after a write it ends
-- the call with that intent and the later ones at status 0 (not run).
-- KEYS[1] stream (the shard anchor), KEYS[2] to KEYS[n+1] intent records (n 1 to 4,
-- same slot). ARGV: retentionMillis, maxLen, then intentId (64 lower-hex),
-- plan, planDigest (64 lower-hex) of each intent, in KEYS order.
-- Record: hash v=1, st (1 PENDING .. 6 INDETERMINATE), att, eid, pd, rc.
-- No clock. O(1): at most four intents.
-- Result: {1, 1, 0, then status, state, attempts of intents 1..4 (0s
-- past n)}; {1, 5, 0, 0...} when the arity or retention is invalid.
-- status: 1 SUBMITTED, 2 DUPLICATE, 3 DUPLICATE_OTHER_PLAN, 4 WRONG_TYPE, 5 INVALID
local n = #KEYS - 1
if n < 1 or n > 4 or #ARGV ~= 2 + 3 * n then return {1, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0} end
local ret = tonumber(ARGV[1])
if not (ret and ret >= 1 and ret <= 2592000000 and ret % 1 == 0) then return {1, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0} end
local r = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
local wrote, stop = false, false
if n >= 1 and not stop then
  local s, st, att = 4, 0, 0
  if redis.call('EXISTS', KEYS[2]) == 1 then
    local f = redis.pcall('HMGET', KEYS[2], 'v', 'st', 'att', 'eid', 'pd', 'rc')
    if f['err'] then
      if string.sub(f['err'], 1, 10) ~= 'WRONGTYPE ' then
        if not wrote then return f end
        s, stop = 0, true
      end
    else
      local pttl = redis.call('PTTL', KEYS[2])
      if f[1] == '1' and f[2] and string.match(f[2], '^[1-6]$') and f[3] and (f[3] == '0' or string.match(f[3], '^[1-9][0-9]?[0-9]?[0-9]?$'))
        and f[4] and string.match(f[4], '^[0-9]+%-[0-9]+$') and #f[4] <= 41 and f[5] and #f[5] == 64 and f[6] and #f[6] <= 16384 and pttl >= 0 then
        s, st, att = 3, tonumber(f[2]), tonumber(f[3])
        if f[5] == ARGV[5] then s = 2 end
      end
    end
  else
    local eid = redis.pcall('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'i', ARGV[3], 'p', ARGV[4])
    if type(eid) == 'table' then
      if not (eid['err'] and string.sub(eid['err'], 1, 10) == 'WRONGTYPE ') then
        if not wrote then return eid end
        s, stop = 0, true
      end
    else
      redis.call('HSET', KEYS[2], 'v', '1', 'st', '1', 'att', '0', 'eid', eid, 'pd', ARGV[5], 'rc', '')
      redis.call('PEXPIRE', KEYS[2], ARGV[1])
      s, st, wrote = 1, 1, true
    end
  end
  r[1], r[2], r[3] = s, st, att
end
if n >= 2 and not stop then
  local s, st, att = 4, 0, 0
  if redis.call('EXISTS', KEYS[3]) == 1 then
    local f = redis.pcall('HMGET', KEYS[3], 'v', 'st', 'att', 'eid', 'pd', 'rc')
    if f['err'] then
      if string.sub(f['err'], 1, 10) ~= 'WRONGTYPE ' then
        if not wrote then return f end
        s, stop = 0, true
      end
    else
      local pttl = redis.call('PTTL', KEYS[3])
      if f[1] == '1' and f[2] and string.match(f[2], '^[1-6]$') and f[3] and (f[3] == '0' or string.match(f[3], '^[1-9][0-9]?[0-9]?[0-9]?$'))
        and f[4] and string.match(f[4], '^[0-9]+%-[0-9]+$') and #f[4] <= 41 and f[5] and #f[5] == 64 and f[6] and #f[6] <= 16384 and pttl >= 0 then
        s, st, att = 3, tonumber(f[2]), tonumber(f[3])
        if f[5] == ARGV[8] then s = 2 end
      end
    end
  else
    local eid = redis.pcall('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'i', ARGV[6], 'p', ARGV[7])
    if type(eid) == 'table' then
      if not (eid['err'] and string.sub(eid['err'], 1, 10) == 'WRONGTYPE ') then
        if not wrote then return eid end
        s, stop = 0, true
      end
    else
      redis.call('HSET', KEYS[3], 'v', '1', 'st', '1', 'att', '0', 'eid', eid, 'pd', ARGV[8], 'rc', '')
      redis.call('PEXPIRE', KEYS[3], ARGV[1])
      s, st, wrote = 1, 1, true
    end
  end
  r[4], r[5], r[6] = s, st, att
end
if n >= 3 and not stop then
  local s, st, att = 4, 0, 0
  if redis.call('EXISTS', KEYS[4]) == 1 then
    local f = redis.pcall('HMGET', KEYS[4], 'v', 'st', 'att', 'eid', 'pd', 'rc')
    if f['err'] then
      if string.sub(f['err'], 1, 10) ~= 'WRONGTYPE ' then
        if not wrote then return f end
        s, stop = 0, true
      end
    else
      local pttl = redis.call('PTTL', KEYS[4])
      if f[1] == '1' and f[2] and string.match(f[2], '^[1-6]$') and f[3] and (f[3] == '0' or string.match(f[3], '^[1-9][0-9]?[0-9]?[0-9]?$'))
        and f[4] and string.match(f[4], '^[0-9]+%-[0-9]+$') and #f[4] <= 41 and f[5] and #f[5] == 64 and f[6] and #f[6] <= 16384 and pttl >= 0 then
        s, st, att = 3, tonumber(f[2]), tonumber(f[3])
        if f[5] == ARGV[11] then s = 2 end
      end
    end
  else
    local eid = redis.pcall('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'i', ARGV[9], 'p', ARGV[10])
    if type(eid) == 'table' then
      if not (eid['err'] and string.sub(eid['err'], 1, 10) == 'WRONGTYPE ') then
        if not wrote then return eid end
        s, stop = 0, true
      end
    else
      redis.call('HSET', KEYS[4], 'v', '1', 'st', '1', 'att', '0', 'eid', eid, 'pd', ARGV[11], 'rc', '')
      redis.call('PEXPIRE', KEYS[4], ARGV[1])
      s, st, wrote = 1, 1, true
    end
  end
  r[7], r[8], r[9] = s, st, att
end
if n >= 4 and not stop then
  local s, st, att = 4, 0, 0
  if redis.call('EXISTS', KEYS[5]) == 1 then
    local f = redis.pcall('HMGET', KEYS[5], 'v', 'st', 'att', 'eid', 'pd', 'rc')
    if f['err'] then
      if string.sub(f['err'], 1, 10) ~= 'WRONGTYPE ' then
        if not wrote then return f end
        s, stop = 0, true
      end
    else
      local pttl = redis.call('PTTL', KEYS[5])
      if f[1] == '1' and f[2] and string.match(f[2], '^[1-6]$') and f[3] and (f[3] == '0' or string.match(f[3], '^[1-9][0-9]?[0-9]?[0-9]?$'))
        and f[4] and string.match(f[4], '^[0-9]+%-[0-9]+$') and #f[4] <= 41 and f[5] and #f[5] == 64 and f[6] and #f[6] <= 16384 and pttl >= 0 then
        s, st, att = 3, tonumber(f[2]), tonumber(f[3])
        if f[5] == ARGV[14] then s = 2 end
      end
    end
  else
    local eid = redis.pcall('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'i', ARGV[12], 'p', ARGV[13])
    if type(eid) == 'table' then
      if not (eid['err'] and string.sub(eid['err'], 1, 10) == 'WRONGTYPE ') then
        if not wrote then return eid end
        s, stop = 0, true
      end
    else
      redis.call('HSET', KEYS[5], 'v', '1', 'st', '1', 'att', '0', 'eid', eid, 'pd', ARGV[14], 'rc', '')
      redis.call('PEXPIRE', KEYS[5], ARGV[1])
      s, st, wrote = 1, 1, true
    end
  end
  r[10], r[11], r[12] = s, st, att
end
return {1, 1, 0, r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12]}

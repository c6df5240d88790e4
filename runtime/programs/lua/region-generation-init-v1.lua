-- region-generation-init-v1
-- Replaces GET -> SET for the first generation of a cache region. Stores the
-- random generation ARGV[1] at KEYS[1] (no TTL: a region generation must
-- outlive its entries) only when absent. O(1); no clock.
-- Result: {1, status, 0, generation}
-- status: 1 INITIALIZED, 2 EXISTING, 3 WRONG_TYPE, 4 INVALID
if #KEYS ~= 1 or #ARGV ~= 1 then return {1, 4, 0, ''} end
local generation = ARGV[1]
if #generation < 16 or #generation > 128 then return {1, 4, 0, ''} end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  redis.call('SET', KEYS[1], generation)
  return {1, 1, 0, generation}
end
if kind ~= 'string' then return {1, 3, 0, ''} end
return {1, 2, 0, redis.call('GET', KEYS[1])}

-- region-generation-bump-v1
-- Replaces GET -> SET for mass invalidation. Replaces the generation at
-- KEYS[1] with the fresh random ARGV[1] (no TTL). Because generations are
-- random, finding ARGV[1] already stored means this bump was applied before
-- (a repeat after a timeout) and nothing is written. O(1); no clock.
-- Result: {1, status, 0, generation}
-- status: 1 BUMPED, 2 ALREADY_APPLIED, 3 WRONG_TYPE, 4 INVALID
if #KEYS ~= 1 or #ARGV ~= 2 then return {1, 4, 0, ''} end
local generation, opId = ARGV[1], ARGV[2]
if #generation < 16 or #generation > 128 then return {1, 4, 0, ''} end
if #opId < 1 or #opId > 128 then return {1, 4, 0, ''} end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'string' then return {1, 3, 0, ''} end
if kind == 'string' and redis.call('GET', KEYS[1]) == generation then
  return {1, 2, 0, generation}
end
redis.call('SET', KEYS[1], generation)
return {1, 1, 0, generation}

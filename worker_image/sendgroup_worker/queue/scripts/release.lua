-- release: move a reserved job back to delayed with score now + delay (Laravel's release():
-- the reserved string, with its incremented attempts, is what goes to :delayed).
-- KEYS: 1 reserved, 2 delayed, 3 stats
-- ARGV: 1 reserved bytes, 2 now, 3 delay seconds
-- Reply: 1 when the reservation was gone (lost; nothing changed), else 0.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 1 end
redis.call('ZADD', KEYS[2], tonumber(ARGV[2]) + tonumber(ARGV[3]), ARGV[1])
redis.call('HINCRBY', KEYS[3], 'released', 1)
return 0

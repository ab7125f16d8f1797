-- fail: move a reserved job to the failed structure with its exception, and count it.
-- KEYS: 1 reserved, 2 failed, 3 failed_jobs, 4 stats
-- ARGV: 1 reserved bytes, 2 uuid, 3 exception class, 4 message, 5 now, 6 failed_max_count,
--       7 failed_max_age
-- Reply: 1 when the reservation was gone (lost; nothing changed), else 0.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 1 end
local uuid = ARGV[2]
if uuid == '' then uuid = nil end
sg_insert_failed(KEYS[2], KEYS[3], uuid, ARGV[1], ARGV[3], ARGV[4], tonumber(ARGV[5]),
  tonumber(ARGV[6]), tonumber(ARGV[7]))
redis.call('HINCRBY', KEYS[4], 'failed', 1)
return 0

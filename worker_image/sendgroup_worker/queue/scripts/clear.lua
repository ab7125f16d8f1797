-- clear: delete the four Laravel keys; reply = jobs dropped (ready + delayed + reserved),
-- as Laravel's clear(). The failed structure and counters are left alone.
-- KEYS: 1 ready, 2 delayed, 3 reserved, 4 notify
local n = redis.call('LLEN', KEYS[1]) + redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[3])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return n

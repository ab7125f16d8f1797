-- size: ready + delayed + reserved (Laravel's size(); notify is not counted).
-- KEYS: 1 ready, 2 delayed, 3 reserved
return redis.call('LLEN', KEYS[1]) + redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[3])

-- Read the group's backpressure state. KEYS[1] = backpressure hash (see backpressure_failure).
-- ARGV[1] = 1 to reset the run of temporary failures (a send succeeded).
-- Returns {run, remaining_ms}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[1] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'run', 0)
end
local v = redis.call('HMGET', KEYS[1], 'run', 'until')
local run = tonumber(v[1] or '0')
local remaining = tonumber(v[2] or '0') - now
if remaining < 0 then remaining = 0 end
return {run, remaining}

-- Count one temporary failure (4xx, connection error, timeout) for the group and suspend the
-- group when the run reaches the limit or the reply matched a deferral pattern.
-- KEYS[1] = backpressure hash: run = temporary failures in a row, until = suspension end (ms
--           since epoch, Redis clock)
-- ARGV[1] = suspendAfter (failures in a row), ARGV[2] = suspendFor (ms), ARGV[3] = 1 to suspend
-- now (pattern match), ARGV[4] = key lifetime (ms)
-- Returns {run, remaining_ms}: the run after this failure (0 once it triggered a suspension)
-- and how long the group stays suspended (0 = not suspended).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local run = redis.call('HINCRBY', KEYS[1], 'run', 1)
local untilms = tonumber(redis.call('HGET', KEYS[1], 'until') or '0')
if run >= tonumber(ARGV[1]) or ARGV[3] == '1' then
  untilms = now + tonumber(ARGV[2])
  redis.call('HSET', KEYS[1], 'until', string.format('%.0f', untilms), 'run', 0)
  run = 0
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]))
local remaining = untilms - now
if remaining < 0 then remaining = 0 end
return {run, remaining}

-- GCRA (Generic Cell Rate Algorithm, "virtual scheduling" form) for one send group's shared
-- rate limit. Sources: ITU-T I.371 / ATM Forum TM 4.1 (GCRA definition); Brandur Leach,
-- "Rate limiting, cells, and GCRA" (2015); redis-cell (brandur/redis-cell) for the Redis use.
--
-- State: KEYS[1] holds the theoretical arrival time (TAT), integer microseconds of Redis' own
-- clock (TIME), so every worker process shares one clock.
-- ARGV[1] = emission interval T (microseconds per message, > 0)
-- ARGV[2] = tolerance tau = (burst - 1) * T (microseconds)
-- ARGV[3] = n: > 0 take up to n messages; < 0 give back -n unused messages
-- ARGV[4] = "charge" (optional): take all n now, free or not (recipients beyond a job's
--           first: the debt delays the next messages)
-- Returns {granted, wait_us}: granted messages (0..n), and when 0, microseconds until one is
-- allowed.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local T = tonumber(ARGV[1])
local tau = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local function store(v)
  if v <= now then
    redis.call('DEL', KEYS[1])
  else
    redis.call('SET', KEYS[1], string.format('%.0f', v), 'PX', math.ceil((v - now) / 1000) + 1000)
  end
end
if n < 0 or ARGV[4] == 'charge' then
  store(tat + n * T)
  return {0, 0}
end
local free = math.floor((tau - (tat - now)) / T) + 1
if free < 1 then
  return {0, tat - now - tau}
end
local granted = math.min(n, free)
store(tat + granted * T)
return {granted, 0}

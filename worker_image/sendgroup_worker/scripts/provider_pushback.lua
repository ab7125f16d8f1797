-- Count one reply that matched a provider's pushback rule, across all workers of all groups of
-- the provider, and fire the rule when its trigger is met. Redis' clock (TIME).
-- KEYS[1] rules: hash, field = rule name, value = "action|value|since_ms|until_ms|step_pct|every_ms"
--         (read by provider_permit.lua on every permit, so an effect reaches every worker at
--         its next permit call)
-- KEYS[2] this rule's matches: sorted set, member = unique id, score = ms (the sliding window)
-- KEYS[3] fired events: list of "rule|since_ms|until_ms|action|value|reply", newest first,
--         capped at 100, read by the operator for status and events
-- ARGV[1] rule name
-- ARGV[2] trigger count (1 = immediate)
-- ARGV[3] window (ms; ignored when count is 1)
-- ARGV[4] action: suspend, scale or cap
-- ARGV[5] action value (percent for scale, transactions for cap, 0 for suspend)
-- ARGV[6] duration (ms)
-- ARGV[7] recovery step (percent), ARGV[8] recovery every (ms)
-- ARGV[9] the reply (code and text), ARGV[10] a unique id for this match
-- Returns {fired, until_ms_from_now, matches_in_window}: fired 1 when this reply fired (or
-- renewed) the rule.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local name = ARGV[1]
local count = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local duration = tonumber(ARGV[6])
local n = 1
if count > 1 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  redis.call('ZADD', KEYS[2], now, ARGV[10])
  redis.call('PEXPIRE', KEYS[2], window + 1000)
  n = redis.call('ZCARD', KEYS[2])
  if n < count then
    return {0, 0, n}
  end
  redis.call('DEL', KEYS[2])
end
local untilms = now + duration
local since = now
local old = redis.call('HGET', KEYS[1], name)
if old then
  local o_since, o_until = string.match(old, '^[a-z]+|[0-9.]+|([0-9]+)|([0-9]+)|')
  if o_until and tonumber(o_until) > now then
    -- still in force: renewed from now, keeps its start
    since = tonumber(o_since)
    if tonumber(o_until) > untilms then untilms = tonumber(o_until) end
  end
end
redis.call('HSET', KEYS[1], name, string.format('%s|%s|%.0f|%.0f|%s|%s',
  ARGV[4], ARGV[5], since, untilms, ARGV[7], ARGV[8]))
redis.call('LPUSH', KEYS[3], string.format('%s|%.0f|%.0f|%s|%s|%s',
  name, since, untilms, ARGV[4], ARGV[5], ARGV[9]))
redis.call('LTRIM', KEYS[3], 0, 99)
return {1, untilms - now, n}

-- measure: every count the operator needs, atomically.
-- KEYS: 1 ready, 2 delayed, 3 reserved, 4 failed, 5 stats
-- Reply: {ready, delayed, reserved, failed, pushedAt (else Laravel 12's createdAt) of the
--         ready head as text or "",
--         delivered, failed_total, released, redis TIME seconds, redis TIME microseconds}
local head = redis.call('LINDEX', KEYS[1], 0)
local pushed_at = ''
if head then
  local ok, obj = pcall(cjson.decode, head)
  if ok and type(obj) == 'table' then
    local p = obj['pushedAt']
    if p == nil then p = obj['createdAt'] end
    if type(p) == 'string' then
      pushed_at = p
    elseif type(p) == 'number' then
      pushed_at = string.format('%.17g', p)
    end
  end
end
local s = redis.call('HMGET', KEYS[5], 'delivered', 'failed', 'released')
local t = redis.call('TIME')
return {
  redis.call('LLEN', KEYS[1]), redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[4]), pushed_at,
  tonumber(s[1] or 0) or 0, tonumber(s[2] or 0) or 0, tonumber(s[3] or 0) or 0,
  t[1], t[2],
}

-- measure: one atomic measurement of a queue, every number the operator and the worker's
-- `stats` need (sendgroup_contract.measure parses the reply into a QueueMeasure).
-- KEYS: 1 ready, 2 delayed, 3 reserved, 4 failed, 5 stats, 6 purge marker, 7 lock,
--       8 restore progress, 9 backpressure, 10 pause marker, 11.. the dump's staging keys
-- Reply: {ready, delayed, reserved, failed, pushedAt (else Laravel 12's createdAt) of the
--         ready head as text or "",
--         delivered, failed_total, released, redis TIME seconds, redis TIME microseconds,
--         staging keys present, purge marker present (0/1), lock or restore progress
--         present (0/1), backpressure `until` (unix ms) as text or "", pause marker
--         present (0/1)}
-- A head job larger than 64 KiB is not decoded (a producer's 100 MB job would hold the shared
-- Redis for the whole decode on every pass): its pushedAt/createdAt is read from its last
-- 4 KiB, where Laravel's payload ends with them (after `data`); else it is reported as "".
local head = redis.call('LINDEX', KEYS[1], 0)
local pushed_at = ''
if head and #head > 65536 then
  local tail = string.sub(head, -4096)
  local p = string.match(tail, '"pushedAt"%s*:%s*"([0-9.eE+-]+)"')
    or string.match(tail, '"pushedAt"%s*:%s*([0-9.eE+-]+)')
    or string.match(tail, '"createdAt"%s*:%s*([0-9.eE+-]+)')
  if p then pushed_at = p end
elseif head then
  local ok, obj = pcall(cjson.decode, head)
  if ok and type(obj) == 'table' then
    local p = obj['pushedAt']
    if p == nil then p = obj['createdAt'] end  -- Laravel 12 writes createdAt (unix s)
    if type(p) == 'string' then
      pushed_at = p
    elseif type(p) == 'number' then
      pushed_at = string.format('%.17g', p)
    end
  end
end
local s = redis.call('HMGET', KEYS[5], 'delivered', 'failed', 'released')
local t = redis.call('TIME')
local staging = 0
for i = 11, #KEYS do
  staging = staging + redis.call('EXISTS', KEYS[i])
end
local busy = redis.call('EXISTS', KEYS[7]) + redis.call('EXISTS', KEYS[8])
local until_ms = redis.call('HGET', KEYS[9], 'until') or ''
return {
  redis.call('LLEN', KEYS[1]), redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[4]), pushed_at,
  tonumber(s[1] or 0) or 0, tonumber(s[2] or 0) or 0, tonumber(s[3] or 0) or 0,
  t[1], t[2],
  staging, redis.call('EXISTS', KEYS[6]), (busy > 0) and 1 or 0, until_ms,
  redis.call('EXISTS', KEYS[10]),
}

-- failed_retry: push failed jobs back to the tail of ready with attempts reset to 0 (only the
-- value of the top-level "attempts" changes; other bytes are kept), one notify token each,
-- and forget them. Laravel's queue:retry does the same through PHP.
-- KEYS: 1 failed, 2 failed_jobs, 3 ready, 4 notify
-- ARGV: 1 mode ("ids" or "all"), 2 limit for "all" (jobs), then uuids for "ids"
-- Reply: {retried, missing uuids...}
local ids
if ARGV[1] == 'all' then
  ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
else
  ids = {}
  for i = 3, #ARGV do ids[#ids + 1] = ARGV[i] end
end
local out = {0}
local n = 0
for _, id in ipairs(ids) do
  local rec = redis.call('HGET', KEYS[2], id)
  local payload = nil
  if rec then
    local ok, obj = pcall(cjson.decode, rec)
    if ok and type(obj) == 'table' and type(obj['payload']) == 'string' then
      payload = obj['payload']
    end
  end
  if payload then
    -- reset attempts only when the payload has a usable one (else push it unchanged: the
    -- pop will report it invalid again rather than us inventing an attempts field)
    local obj, _, attempts = sg_check_payload(payload)
    local reset = nil
    if obj and attempts ~= 0 then reset = sg_set_attempts(payload, 0) end
    redis.call('RPUSH', KEYS[3], reset or payload)
    redis.call('RPUSH', KEYS[4], '1')
    n = n + 1
  else
    out[#out + 1] = id
  end
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
end
out[1] = n
return out

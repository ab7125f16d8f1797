-- failed_forget: delete failed records by uuid, or all of them.
-- KEYS: 1 failed, 2 failed_jobs
-- ARGV: 1 mode ("ids" or "all"), then uuids for "ids"
-- Reply: number of records deleted.
if ARGV[1] == 'all' then
  local n = math.max(redis.call('ZCARD', KEYS[1]), redis.call('HLEN', KEYS[2]))
  redis.call('DEL', KEYS[1], KEYS[2])
  return n
end
local n = 0
for i = 2, #ARGV do
  n = n + redis.call('HDEL', KEYS[2], ARGV[i])
  redis.call('ZREM', KEYS[1], ARGV[i])
end
return n

-- failed_list: a page of failed records, newest first.
-- KEYS: 1 failed, 2 failed_jobs
-- ARGV: 1 offset, 2 limit (jobs)
-- Reply: {total, id1, record1, id2, record2, ...} (records as stored, JSON text; the id lets
--        a client name a record it cannot read)
local total = redis.call('ZCARD', KEYS[1])
local offset, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {total}
if limit <= 0 then return out end
local ids = redis.call('ZREVRANGE', KEYS[1], offset, offset + limit - 1)
if #ids == 0 then return out end
-- HMGET in chunks: unpack() of thousands of ids would overflow the Lua stack
for first = 1, #ids, 500 do
  local last = math.min(first + 499, #ids)
  local recs = redis.call('HMGET', KEYS[2], unpack(ids, first, last))
  for i = 1, last - first + 1 do
    if recs[i] then
      out[#out + 1] = ids[first + i - 1]
      out[#out + 1] = recs[i]
    end
  end
end
return out

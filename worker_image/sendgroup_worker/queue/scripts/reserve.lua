-- reserve: acknowledge finished jobs, migrate due jobs, pop up to `count` jobs. One round trip.
-- KEYS: 1 ready, 2 delayed, 3 reserved, 4 notify, 5 failed, 6 failed_jobs, 7 stats, 8 sent,
--       9 paused (the operator's pause marker: while it exists, acks only),
--       10 (only when an ack carries one) the stream of the acks' entries
-- ARGV: 1 now, 2 retry_after, 3 count, 4 migrate_limit, 5 failed_max_count, 6 failed_max_age,
--       7 sent_ttl, 8 n_acks, 9 the stream's MAXLEN ~ cap (0: no entries), then per ack:
--       delivered ("1"/"0"), reserved bytes, uuid, n (entry field+value count, 0: none),
--       then the entry's n field/value texts
-- Reply: {lost_ack_indexes (1-based), {migrated, invalid, paused (0/1), refused_entries},
--         raw1, reserved1, ...}
local ready, delayed, reserved, notify = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local failed, failed_jobs, stats, sent = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local now = tonumber(ARGV[1])
local retry_after = tonumber(ARGV[2])
local count = tonumber(ARGV[3])
local migrate_limit = tonumber(ARGV[4])
local max_count, max_age = tonumber(ARGV[5]), tonumber(ARGV[6])
local sent_ttl = tonumber(ARGV[7])
local n_acks = tonumber(ARGV[8])
local maxlen = ARGV[9]

-- 1. acknowledgements (same rules as done.lua), each after its stream entry (if any)
local lost, refused = sg_ack(reserved, sent, stats, KEYS[10], maxlen, ARGV, 9, n_acks, now,
  sent_ttl)

-- paused: the acks above count (those mails went out), nothing else moves
if redis.call('EXISTS', KEYS[9]) == 1 then
  return {lost, {0, 0, 1, refused}}
end

-- 2. migration of due delayed jobs and expired reservations (bounded per call)
local migrated = 0
if migrate_limit > 0 then
  migrated = sg_migrate(delayed, ready, notify, ARGV[1], migrate_limit)
    + sg_migrate(reserved, ready, notify, ARGV[1], migrate_limit)
end

-- The cheap reading of a popped payload, without cjson.decode (~6 us for 1.5 KB): a text that
-- opens with '{', holds a "uuid" key with a non-empty string value, and ends with an integer
-- "attempts" as the object's last key (Laravel's RedisQueue writes it so: in a valid JSON
-- object the key before the final '}' is a top-level key, see sg_set_attempts). Returns the
-- payload with attempts + 1, or nil: then the full check decides. Not a JSON
-- validation: the worker decodes every reserved payload (decode_job) and fails the ones that
-- are not JSON objects with a top-level string "uuid" (protocol._reserved_from), as this
-- script would have; nothing is run unchecked.
local function sg_quick(raw)
  if string.byte(raw, 1) ~= 123 then return nil end
  local _, _, v1, v2 = string.find(raw, '[{,]%s*"attempts"%s*:%s*()%d+()%s*}%s*$',
    math.max(1, #raw - 63))
  if not v1 then return nil end
  local old = string.sub(raw, v1, v2 - 1)
  if #old > 15 or (#old > 1 and string.byte(old, 1) == 48) then return nil end  -- not JSON's
  if not string.find(raw, '"uuid"%s*:%s*"[^"]') then return nil end
  return string.sub(raw, 1, v1 - 1) .. sg_number_text(tonumber(old) + 1) .. string.sub(raw, v2)
end

-- 3. pop
local out = {lost, {migrated, 0, 0, refused}}
local got, popped, invalid = 0, 0, 0
local until_score = now + retry_after
local held = {}
while got < count and popped < count + 100 do
  local raw = redis.call('LPOP', ready)
  if not raw then break end
  popped = popped + 1
  local res = sg_quick(raw)
  local uuid, info
  if not res then
    -- on success `info` is the attempts number, else the reason the payload is unusable
    local obj
    obj, uuid, info = sg_check_payload(raw)
    if obj then
      res = sg_set_attempts(raw, info + 1)
      if not res then info = 'payload "attempts" could not be rewritten' end
    end
  end
  if res then
    held[#held + 1] = until_score
    held[#held + 1] = res
    out[#out + 1] = raw
    out[#out + 1] = res
    got = got + 1
  else
    sg_insert_failed(failed, failed_jobs, uuid, raw, 'InvalidPayload', info, now,
      max_count, max_age)
    redis.call('HINCRBY', stats, 'failed', 1)
    invalid = invalid + 1
  end
end
-- one notify token dropped per pop, one reservation per job kept: one call each (chunked)
if popped > 0 then
  redis.call('LTRIM', notify, popped, -1)
end
for i = 1, #held, 2 * SG_CHUNK do
  redis.call('ZADD', reserved, unpack(held, i, math.min(i + 2 * SG_CHUNK - 1, #held)))
end
out[2][2] = invalid
return out

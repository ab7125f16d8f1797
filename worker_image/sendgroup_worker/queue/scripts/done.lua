-- done: remove a finished job's reservation (Laravel's delete(): ZREM of the exact reserved
-- string) and, when the mail went out, record the idempotency marker and count it.
-- KEYS: 1 reserved, 2 sent, 3 stats, 4 (optional) the stream of the job's outcome entry
-- ARGV: 1 reserved bytes, 2 uuid, 3 delivered ("1"/"0"), 4 now, 5 sent_ttl, then with KEYS[4]:
--       6 the stream's MAXLEN ~ cap, 7.. the entry's field/value texts
-- Reply: bit 1 set when the reservation was already gone (lost); bit 2 set when Redis refused
-- the entry (the rest was done all the same). A delivered mail is marked
-- sent and counted even when lost: it did go out, and the marker stops a second send.
-- `delivered` counts a uuid once (only when its marker is new), so a retried done() after a
-- dropped reply, or a second ack of the same job, does not count twice.
local refused = 0
if KEYS[4] then
  refused = sg_add_entry(KEYS[4], ARGV[6], ARGV, 7, #ARGV - 6)
end
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
if ARGV[3] == '1' then
  local now = tonumber(ARGV[4])
  if redis.call('ZADD', KEYS[2], now, ARGV[2]) == 1 then
    redis.call('HINCRBY', KEYS[3], 'delivered', 1)
  end
  sg_trim_sent(KEYS[2], now, tonumber(ARGV[5]))
end
local lost = 0
if removed == 0 then lost = 1 end
return lost + 2 * refused

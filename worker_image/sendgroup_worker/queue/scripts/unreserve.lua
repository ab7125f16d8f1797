-- unreserve: hand reserved jobs that were never started back to the head of the ready list,
-- as popped (their `attempts` as before the reservation: no attempt counted), one notify
-- token each. Used by a worker that reserved a batch and will not run all of it (stopping,
-- paused, or too little of the reservation left for the next job).
-- KEYS: 1 ready, 2 reserved, 3 notify
-- ARGV: per job, in reservation order: reserved bytes, raw (popped) bytes
-- Reply: the number of jobs handed back. A job whose reservation is gone (expired and
-- migrated, or taken by another worker) is left alone.
local back = 0
-- last first: LPUSH puts each in front of the one pushed before, so the batch keeps its order
for i = #ARGV - 1, 1, -2 do
  if redis.call('ZREM', KEYS[2], ARGV[i]) == 1 then
    redis.call('LPUSH', KEYS[1], ARGV[i + 1])
    redis.call('RPUSH', KEYS[3], '1')
    back = back + 1
  end
end
return back

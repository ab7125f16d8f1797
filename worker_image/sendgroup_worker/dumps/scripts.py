"""The Lua scripts of dump, restore and purge. Each runs atomically on one queue's keys (one
hash tag, so one cluster slot) and touches a bounded amount of data, so Redis never stalls:
staging is a handful of O(1) RENAMEs, a merge is one chunk (<= ``chunk_jobs`` records), purge
UNLINKs (large values are freed in Redis' background thread).
"""

from __future__ import annotations

from typing import Final

#: KEYS (``sendgroup_worker.dumps.dump.move_keys``, shared with :data:`UNSTAGE`): ready,
#: delayed, reserved, failed, failed_jobs, their 5 staging names, staging meta, notify.
#: ARGV: new segment id, createdAt.
#: Returns {0} (nothing to dump), {1, id, createdAt} (staged now) or {2, id, createdAt}
#: (an interrupted dump's staging found: resume it).
STAGE: Final = """
local meta = KEYS[11]
if redis.call('EXISTS', meta) == 1 then
  return {2, redis.call('HGET', meta, 'segment'), redis.call('HGET', meta, 'createdAt')}
end
for i = 6, 10 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return redis.error_reply('ERR staging key ' .. KEYS[i] .. ' exists without its dump record '
      .. meta .. '; refusing to overwrite it')
  end
end
local moved = 0
for i = 1, 5 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    redis.call('RENAME', KEYS[i], KEYS[i + 5])
    moved = moved + 1
  end
end
if moved == 0 then return {0} end
redis.call('UNLINK', KEYS[12])
redis.call('HSET', meta, 'segment', ARGV[1], 'createdAt', ARGV[2])
return {1, ARGV[1], ARGV[2]}
"""

#: KEYS: the 5 staging keys, staging meta. ARGV: segment id whose file is durable.
DROP_STAGING: Final = """
if redis.call('HGET', KEYS[6], 'segment') ~= ARGV[1] then
  return redis.error_reply('ERR dump record ' .. KEYS[6] .. ' does not name segment ' .. ARGV[1])
end
return redis.call('UNLINK', unpack(KEYS))
"""

#: KEYS: ready, notify, delayed, reserved, failed, failed_jobs, restored.
#: ARGV: segment id, chunk index, kind (R/D/V/F), records...
#:   R: payloads; D/V: score, member pairs; F: uuid, flags, failedAt, record quadruples.
#: Applies the chunk and advances the segment's progress in one atomic step; a chunk already
#: applied returns -1 (idempotent re-run), a gap is an error. Returns records merged.
MERGE: Final = """
local done = tonumber(redis.call('HGET', KEYS[7], ARGV[1]) or '0')
local idx = tonumber(ARGV[2])
if done > idx then return -1 end
if done < idx then
  return redis.error_reply('ERR restore of segment ' .. ARGV[1] .. ' stands at chunk ' .. done
    .. ', cannot apply chunk ' .. idx)
end
local kind = ARGV[3]
local n = 0
if kind == 'R' then
  n = #ARGV - 3
  redis.call('RPUSH', KEYS[1], unpack(ARGV, 4))
  local tokens = {}
  for i = 1, n do tokens[i] = '1' end
  redis.call('RPUSH', KEYS[2], unpack(tokens))
elseif kind == 'D' or kind == 'V' then
  n = (#ARGV - 3) / 2
  local key = KEYS[3]
  if kind == 'V' then key = KEYS[4] end
  redis.call('ZADD', key, 'NX', unpack(ARGV, 4))
elseif kind == 'F' then
  for i = 4, #ARGV, 4 do
    local flags = tonumber(ARGV[i + 1])
    if flags % 2 == 1 then redis.call('ZADD', KEYS[5], 'NX', ARGV[i + 2], ARGV[i]) end
    if flags >= 2 then redis.call('HSETNX', KEYS[6], ARGV[i], ARGV[i + 3]) end
    n = n + 1
  end
else
  return redis.error_reply('ERR unknown chunk kind ' .. kind)
end
redis.call('HSET', KEYS[7], ARGV[1], idx + 1)
return n
"""

#: KEYS: ready, notify. ARGV: max tokens to add or remove in this call.
#: Brings LLEN notify towards LLEN ready; returns tokens added (>0), removed (<0) or 0 (equal).
RECONCILE_NOTIFY: Final = """
local r = redis.call('LLEN', KEYS[1])
local n = redis.call('LLEN', KEYS[2])
local step = tonumber(ARGV[1])
if n < r then
  local k = math.min(r - n, step)
  local tokens = {}
  for i = 1, k do tokens[i] = '1' end
  redis.call('RPUSH', KEYS[2], unpack(tokens))
  return k
elseif n > r then
  local k = math.min(n - r, step)
  redis.call('LTRIM', KEYS[2], k, -1)
  return -k
end
return 0
"""

#: KEYS: ready, delayed, reserved, staging ready/delayed/reserved, failed, staging failed,
#: then every key to delete. Returns the counts (before deletion) of those first 8 keys.
PURGE: Final = """
local counts = {
  redis.call('LLEN', KEYS[1]), redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]),
  redis.call('LLEN', KEYS[4]), redis.call('ZCARD', KEYS[5]), redis.call('ZCARD', KEYS[6]),
  redis.call('ZCARD', KEYS[7]), redis.call('ZCARD', KEYS[8])
}
local deleted = redis.call('UNLINK', unpack(KEYS, 9))
counts[9] = deleted
return counts
"""

#: KEYS: the same 12 as :data:`STAGE` (``sendgroup_worker.dumps.dump.move_keys``): ready,
#: delayed, reserved, failed, failed_jobs, their 5 staging names, staging meta, notify.
#: ARGV: max records per kind in this call.
#: Moves up to ARGV[1] records of each kind from staging back into the live keys (ready
#: appended with notify tokens; sorted sets and failed entries added with NX semantics) and
#: removes them from staging, atomically; when staging is empty deletes the meta record.
#: Returns {ready, delayed, reserved, failed, done (1 when staging is gone)}.
UNSTAGE: Final = """
local n = tonumber(ARGV[1])
local moved = {0, 0, 0, 0, 0}
local items = redis.call('LRANGE', KEYS[6], 0, n - 1)
if #items > 0 then
  redis.call('RPUSH', KEYS[1], unpack(items))
  local tokens = {}
  for i = 1, #items do tokens[i] = '1' end
  redis.call('RPUSH', KEYS[12], unpack(tokens))
  redis.call('LTRIM', KEYS[6], #items, -1)
  moved[1] = #items
end
for k = 0, 1 do
  local z = redis.call('ZRANGE', KEYS[7 + k], 0, n - 1, 'WITHSCORES')
  if #z > 0 then
    local args = {}
    for i = 1, #z, 2 do
      args[#args + 1] = z[i + 1]
      args[#args + 1] = z[i]
    end
    redis.call('ZADD', KEYS[2 + k], 'NX', unpack(args))
    redis.call('ZREMRANGEBYRANK', KEYS[7 + k], 0, #z / 2 - 1)
    moved[2 + k] = #z / 2
  end
end
local f = redis.call('ZRANGE', KEYS[9], 0, n - 1, 'WITHSCORES')
for i = 1, #f, 2 do
  redis.call('ZADD', KEYS[4], 'NX', f[i + 1], f[i])
  local rec = redis.call('HGET', KEYS[10], f[i])
  if rec then
    redis.call('HSETNX', KEYS[5], f[i], rec)
    redis.call('HDEL', KEYS[10], f[i])
  end
end
if #f > 0 then
  redis.call('ZREMRANGEBYRANK', KEYS[9], 0, #f / 2 - 1)
  moved[4] = #f / 2
elseif redis.call('EXISTS', KEYS[10]) == 1 then
  -- records without an index entry
  local scan = redis.call('HSCAN', KEYS[10], 0, 'COUNT', n)
  local kv = scan[2]
  for i = 1, #kv, 2 do
    redis.call('HSETNX', KEYS[5], kv[i], kv[i + 1])
    redis.call('HDEL', KEYS[10], kv[i])
  end
  moved[4] = #kv / 2
end
if redis.call('EXISTS', KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]) == 0 then
  redis.call('DEL', KEYS[11])
  moved[5] = 1
end
return moved
"""

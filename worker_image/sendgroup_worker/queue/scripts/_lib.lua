-- Shared helpers, prepended to every queue script when it is loaded (sendgroup_worker.queue
-- .protocol). Only local functions: nothing global, so scripts stay independent.
--
-- Layout and semantics follow Laravel's Illuminate/Queue/LuaScripts.php (push, pop,
-- migrateExpiredJobs, release, size, clear), with two deliberate differences:
--   * the popped payload is not re-encoded with cjson: only the value of its top-level
--     "attempts" key is rewritten, so every other byte survives (key order, escapes, number
--     precision, empty arrays);
--   * a payload that is not JSON, not an object, or lacks "uuid"/"attempts" is moved to the
--     failed structure with a reason instead of being dropped.

local SG_CHUNK = 100

-- RPUSH `items` (a Lua array of strings) to `key`, in chunks so unpack() stays small.
local function sg_rpush_all(key, items)
  local n = #items
  local i = 1
  while i <= n do
    local j = math.min(i + SG_CHUNK - 1, n)
    redis.call('RPUSH', key, unpack(items, i, j))
    i = j + 1
  end
end

-- RPUSH `n` notify tokens ("1", as Laravel) to `key`.
local function sg_push_tokens(key, n)
  local ones = {}
  for i = 1, math.min(n, SG_CHUNK) do ones[i] = '1' end
  while n > 0 do
    local k = math.min(n, SG_CHUNK)
    redis.call('RPUSH', key, unpack(ones, 1, k))
    n = n - k
  end
end

-- Move up to `limit` members of sorted set `from` whose score <= now (a score equal to now is
-- due, as Laravel's ZRANGEBYSCORE -inf now) to the tail of `ready`, one notify token each.
-- Returns the number moved.
local function sg_migrate(from, ready, notify, now, limit)
  local due = redis.call('ZRANGEBYSCORE', from, '-inf', now, 'LIMIT', 0, limit)
  local n = #due
  if n > 0 then
    -- the n lowest scores are exactly ranks 0..n-1 (same trick as Laravel's script)
    redis.call('ZREMRANGEBYRANK', from, 0, n - 1)
    sg_rpush_all(ready, due)
    sg_push_tokens(notify, n)
  end
  return n
end

-- End (inclusive) of the JSON string that starts with the quote at `p`, or nil.
local function sg_string_end(s, p)
  local j = p + 1
  while true do
    local q = string.find(s, '["\\]', j)
    if not q then return nil end
    if string.byte(s, q) == 92 then j = q + 2 else return q end
  end
end

-- Text of a JSON number for attempts: integers without a decimal point.
local function sg_number_text(n)
  if n == math.floor(n) and math.abs(n) < 1e15 then
    return string.format('%d', n)
  end
  return string.format('%.17g', n)
end

-- `payload` with the value of its top-level "attempts" set to number `n`, every other byte
-- unchanged. Each textual occurrence of the key "attempts" followed by ':' and a scalar is a
-- candidate; the first whose replacement decodes to a top-level attempts == n wins (a nested
-- "attempts" in data leaves the top level unchanged, so it is never taken). This costs one
-- cjson.decode per candidate instead of a scan of the whole text in Lua.
-- Falls back to cjson re-encoding (Laravel's behaviour) when no candidate works (e.g. the key
-- is written with \u escapes), and returns nil when the payload cannot be decoded at all.
local function sg_set_attempts(payload, n)
  local text = sg_number_text(n)
  -- Fast path: a numeric "attempts" that is the object's last key (Laravel's RedisQueue
  -- writes it so; Horizon and our producer append pushedAt after it and take the general
  -- path). In a valid JSON object the key right before the final '}' is a top-level key, and
  -- a ',' or '{' before its quote rules out a string, so no check is needed.
  local _, _, v1, v2 = string.find(payload,
    '[{,]%s*"attempts"%s*:%s*()%-?%d[%d.eE+-]*()%s*}%s*$', math.max(1, #payload - 63))
  if v1 then
    return string.sub(payload, 1, v1 - 1) .. text .. string.sub(payload, v2)
  end
  -- Second fast path: the literal "attempts" occurs once and the text has no \u escape. The
  -- caller decoded a top-level attempts; without escapes its key can only be written
  -- literally, so the single occurrence is that key.
  local k1, k2 = string.find(payload, '"attempts"', 1, true)
  if k1 and not string.find(payload, '"attempts"', k2 + 1, true)
      and not string.find(payload, '\\u', 1, true) then
    local _, colon = string.find(payload, '^%s*:%s*', k2 + 1)
    if colon then
      local _, e = string.find(payload, '^%-?%d[%d.eE+-]*', colon + 1)
      if not e and string.byte(payload, colon + 1) == 34 then
        e = sg_string_end(payload, colon + 1)
      end
      if e then
        return string.sub(payload, 1, colon) .. text .. string.sub(payload, e + 1)
      end
    end
  end
  local init = 1
  while true do
    local k1, k2 = string.find(payload, '"attempts"', init, true)
    if not k1 then break end
    init = k2 + 1
    local _, colon = string.find(payload, '^%s*:%s*', k2 + 1)
    if colon then
      local v1 = colon + 1
      local b = string.byte(payload, v1)
      local v2 = nil
      if b == 34 then
        v2 = sg_string_end(payload, v1)
      elseif b ~= 123 and b ~= 91 then
        local _, e = string.find(payload, '^[^,}%]%s]+', v1)
        v2 = e
      end
      if v2 then
        local candidate = string.sub(payload, 1, v1 - 1) .. text .. string.sub(payload, v2 + 1)
        local ok, obj = pcall(cjson.decode, candidate)
        if ok and type(obj) == 'table' and obj['attempts'] == n then
          return candidate
        end
      end
    end
  end
  local ok, obj = pcall(cjson.decode, payload)
  if ok and type(obj) == 'table' then
    obj['attempts'] = n
    -- cjson refuses to encode what it decoded in some cases (1e999 became inf): nil, not an
    -- error that would abort the whole reserve call on every try
    local encoded, text_or_err = pcall(cjson.encode, obj)
    if encoded then return text_or_err end
  end
  return nil
end

-- Validate a popped payload. Returns (object, uuid, attempts) or (nil, uuid_or_nil, reason).
local function sg_check_payload(raw)
  local ok, obj = pcall(cjson.decode, raw)
  if not ok then
    return nil, nil, 'payload is not JSON: ' .. tostring(obj)
  end
  if type(obj) ~= 'table' then
    return nil, nil, 'payload is not a JSON object'
  end
  local uuid = obj['uuid']
  if type(uuid) ~= 'string' or uuid == '' then
    return nil, nil, 'payload has no "uuid"'
  end
  local a = obj['attempts']
  local n = nil
  if type(a) == 'number' or type(a) == 'string' then n = tonumber(a) end
  if n == nil then
    return nil, uuid, 'payload has no numeric "attempts"'
  end
  -- negative (would retry without end), NaN (n ~= n) or infinite: refused, never reserved
  if n ~= n or n < 0 or n == math.huge then
    return nil, uuid, 'payload "attempts" is not a finite number >= 0'
  end
  return obj, uuid, n
end

-- Drop failed records older than max_age seconds and beyond max_count (oldest first), at most
-- 1000 per call so a huge backlog never stalls Redis. 0 disables a bound.
local function sg_trim_failed(fkey, jkey, now, max_count, max_age)
  local limit = 1000
  if max_age > 0 then
    local old = redis.call('ZRANGEBYSCORE', fkey, '-inf', '(' .. sg_number_text(now - max_age),
      'LIMIT', 0, limit)
    if #old > 0 then
      redis.call('ZREM', fkey, unpack(old))
      redis.call('HDEL', jkey, unpack(old))
      limit = limit - #old
    end
  end
  if max_count > 0 and limit > 0 then
    local over = redis.call('ZCARD', fkey) - max_count
    if over > 0 then
      local ids = redis.call('ZRANGE', fkey, 0, math.min(over, limit) - 1)
      redis.call('ZREM', fkey, unpack(ids))
      redis.call('HDEL', jkey, unpack(ids))
    end
  end
end

-- Store a failed job: index `fkey` (uuid -> failedAt) + record in hash `jkey`; trims after.
-- `id` nil means the payload had no usable uuid: an id is derived from its bytes. A record is
-- never overwritten: a second record for the same id (two jobs sharing a uuid, or identical
-- garbage) gets the id suffixed with "#2", "#3", ... Returns the id used.
local function sg_insert_failed(fkey, jkey, id, payload, exception, message, now,
                                max_count, max_age)
  if id == nil then
    id = 'invalid-' .. redis.sha1hex(payload)
  end
  if redis.call('HEXISTS', jkey, id) == 1 then
    local n = 2
    while redis.call('HEXISTS', jkey, id .. '#' .. n) == 1 do n = n + 1 end
    id = id .. '#' .. n
  end
  local record = cjson.encode({
    uuid = id,
    payload = payload,
    exception = exception,
    message = message,
    failedAt = now,
  })
  redis.call('HSET', jkey, id, record)
  redis.call('ZADD', fkey, now, id)
  sg_trim_failed(fkey, jkey, now, max_count, max_age)
  return id
end

-- Drop idempotency markers older than ttl seconds (at most 1000 per call). 0 disables.
local function sg_trim_sent(skey, now, ttl)
  if ttl > 0 then
    local old = redis.call('ZRANGEBYSCORE', skey, '-inf', '(' .. sg_number_text(now - ttl),
      'LIMIT', 0, 1000)
    if #old > 0 then redis.call('ZREM', skey, unpack(old)) end
  end
end

-- Add a stream entry: XADD key MAXLEN ~ maxlen * argv[first], ..., argv[first + n - 1]
-- (field/value texts). redis.pcall: a refusal (the key holds another type) must not stop the
-- acknowledgement that comes with it. Returns 1 when refused, else 0.
local function sg_add_entry(key, maxlen, argv, first, n)
  local cmd = {'XADD', key, 'MAXLEN', '~', maxlen, '*'}
  for i = first, first + n - 1 do cmd[#cmd + 1] = argv[i] end
  local res = redis.pcall(unpack(cmd))
  if type(res) == 'table' and res.err then return 1 end
  return 0
end

-- Acknowledge a lane's finished jobs (the rules of done.lua), each after its stream entry (if
-- any): n_acks acks from argv[base + 1] on, each: delivered ("1"/"0"), reserved bytes, uuid,
-- n (entry field+value count, 0: none), then the entry's n field/value texts, written to
-- stream_key with MAXLEN ~ maxlen. The delivered ones' `sent` markers go in one ZADD per
-- SG_CHUNK and count once per uuid (only a new marker counts: ZADD answers how many members
-- were new). Used by reserve.lua and ack_begin.lua.
-- Returns lost (1-based indexes of acks whose reservation was gone), refused (entries the
-- stream refused) and the index of the last ARGV item read.
local function sg_ack(reserved, sent, stats, stream_key, maxlen, argv, base, n_acks, now,
    sent_ttl)
  local lost = {}
  local refused = 0
  local uuids = {}
  for a = 1, n_acks do
    local delivered = argv[base + 1] == '1'
    local n_fields = tonumber(argv[base + 4])
    if n_fields > 0 then
      refused = refused + sg_add_entry(stream_key, maxlen, argv, base + 5, n_fields)
    end
    if redis.call('ZREM', reserved, argv[base + 2]) == 0 then lost[#lost + 1] = a end
    if delivered then
      uuids[#uuids + 1] = now
      uuids[#uuids + 1] = argv[base + 3]
    end
    base = base + 4 + n_fields
  end
  local delivered_n = 0
  for i = 1, #uuids, 2 * SG_CHUNK do
    delivered_n = delivered_n
      + redis.call('ZADD', sent, unpack(uuids, i, math.min(i + 2 * SG_CHUNK - 1, #uuids)))
  end
  if delivered_n > 0 then
    redis.call('HINCRBY', stats, 'delivered', delivered_n)
  end
  if #uuids > 0 then
    sg_trim_sent(sent, now, sent_ttl)
  end
  return lost, refused, base
end

-- One send permit from a provider's budget AND the group's share of it, plus a concurrency lease,
-- in one atomic call (hierarchical GCRA). Sources: GCRA as in gcra.lua (ITU-T I.371, ATM Forum
-- TM 4.1; Brandur Leach, "Rate limiting, cells, and GCRA"); hierarchical token/cell schedulers
-- as in HTB (Linux traffic control: a child is bounded by its own rate and its parent's).
-- Nothing is taken unless every level allows it, so a denied call takes nothing (it only
-- records the group's demand, KEYS[6], and drops the lane's lease).
--
-- Every key shares the provider's hash tag (one Redis Cluster slot). Redis' clock (TIME).
-- KEYS[1] provider TAT: "<tat> <interval>" (microseconds; see tat_of)
-- KEYS[2] this group's TAT inside the provider, the same way
-- KEYS[3] leases: sorted set, member = lane id, score = lease expiry (ms)
-- KEYS[4] rules: hash, field = rule name, value = "action|value|since_ms|until_ms|step_pct|every_ms"
--         (written by provider_pushback.lua); action one of suspend, scale, cap
-- KEYS[5] shares: hash, field = group id, value = the group's share (recipients per minute) of
--         the rate after scale rules, written by the operator; no field = no share limit (the
--         provider's budget still holds)
-- KEYS[6] demand: hash, field = group id, value = the time (ms) of the group's last "take" call
--         with a sign of work (ARGV[11]), read by the operator: such a group has work (a share)
-- ARGV[1] provider perMinute (0 = no provider-wide rate)
-- ARGV[2] provider burst (>= 1)
-- ARGV[3] provider concurrency (0 = no limit)
-- ARGV[4] group id (field of KEYS[5])
-- ARGV[5] the group's own allowed perMinute now (rate.perMinute after warm-up; 0 = none)
-- ARGV[6] the group's own burst (0 = none: the share's, ceil(limit / 60))
-- ARGV[7] lane id (lease member; "" = take no lease)
-- ARGV[8] lease lifetime (ms): a killed worker's lease is gone after this
-- ARGV[9] debt: recipients of the lane's previous mail beyond the one its permit counted,
--         charged to both TATs unconditionally (rates count recipients, not jobs)
-- ARGV[10] mode: "take" (one permit + lease), "give" (return the permit of the lane's last
--          "take", release the lease: see below),
--          "release" (release the lease only), "peek" (state only: with a debt, the charge of
--          a mail's extra recipients right after its reserve, before its send; the lease and
--          the permits are left as they are), "refund" (give back ARGV[12] cells of an
--          earlier peek's charge: see below)
-- ARGV[11] "1": the calling lane has a sign of work (it sent a mail, or a job woke it), so a
--          "take" records the group's demand; "0": an idle lane's poll (records nothing)
-- ARGV[12] "refund" only: cells to give back (recipients charged but not sent to)
-- ARGV[13], ARGV[14] "refund" and "give" only: KEYS[1]'s and KEYS[2]'s value as the peek
--          that charged them, or the take that granted the permit, left it (its elements 6 and
--          7; "" = none)
-- Returns {granted, wait_us, rate_milli, cap, why, p_tat, g_tat}: granted 1/0; when 0,
-- microseconds until a retry may succeed; the provider's effective perMinute now x 1000 (-1 =
-- none); the effective concurrency (-1 = none); why = "" or the limiting level:
-- "suspended:<rule>", "provider", "share", "concurrency". "peek" also returns KEYS[1]'s and
-- KEYS[2]'s value after its charge ("" = none), a granted "take" after its permit; "refund"
-- and "give" return 1/0 there: whether that level gave the cells back.
--
-- A refund is exact only when nothing was charged to that level since the peek: the charged
-- cells are then the last ones of its schedule, and the TAT moves back by them (not below
-- now: the part already past was time nobody used). Once anyone took a cell after them, that
-- cell's place was fixed behind them; moving the TAT back would put the next cell on top of
-- it, and the sum sent over a window could pass rate x window + burst. So a level whose
-- value changed since the peek keeps the charge (refunds nothing): the budget errs low. A
-- "give" (the reserve found no job for the permit) is a refund of that one cell against the
-- take's values, so it follows the same rule.
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)
local p_rate = tonumber(ARGV[1])
local p_burst = tonumber(ARGV[2])
local p_conc = tonumber(ARGV[3])
local group = ARGV[4]
local g_rate = tonumber(ARGV[5])
local g_burst = tonumber(ARGV[6])
local lane = ARGV[7]
local lease_ms = tonumber(ARGV[8])
local debt = tonumber(ARGV[9])
local mode = ARGV[10]

if mode == 'take' and ARGV[11] == '1' then
  -- the key lives a day past its newest group (a new field renews it; fields are ~40 bytes;
  -- the operator deletes fields older than a day)
  if redis.call('HSET', KEYS[6], group, now_ms) == 1 then
    redis.call('PEXPIRE', KEYS[6], 86400000)
  end
end

-- pushback rules in force: suspension, the lowest rate factor, the lowest concurrency cap
local factor = 1.0
local cap = p_conc
local suspended_until = 0
local suspended_by = ''
local rules = redis.call('HGETALL', KEYS[4])
for i = 1, #rules, 2 do
  local name = rules[i]
  local action, value, since, untilms, step, every =
    string.match(rules[i + 1], '^([a-z]+)|([0-9.]+)|([0-9]+)|([0-9]+)|([0-9]+)|([0-9]+)$')
  if action then
    value = tonumber(value)
    untilms = tonumber(untilms)
    if action == 'suspend' then
      if now_ms < untilms then
        if untilms > suspended_until then
          suspended_until = untilms
          suspended_by = name
        end
      elseif now_ms > untilms + 86400000 then
        redis.call('HDEL', KEYS[4], name)
      end
    elseif action == 'cap' then
      if now_ms < untilms then
        if cap == 0 or value < cap then cap = value end
      elseif now_ms > untilms + 86400000 then
        redis.call('HDEL', KEYS[4], name)
      end
    elseif action == 'scale' then
      local f = value / 100
      if now_ms >= untilms then
        -- additive recovery: step percent of the rate every `every` ms after the rule ended
        local steps = math.floor((now_ms - untilms) / math.max(1, tonumber(every))) + 1
        f = f + steps * tonumber(step) / 100
      end
      if f < 1 then
        if f < factor then factor = f end
      elseif now_ms > untilms + 86400000 then
        redis.call('HDEL', KEYS[4], name)
      end
    end
  end
end

local rate_milli = -1
if p_rate > 0 then rate_milli = math.floor(p_rate * factor * 1000) end
local cap_out = -1
if cap > 0 then cap_out = cap end

-- A TAT is stored with the emission interval it was counted in: "<tat_us> <interval_us>".
-- When the rate rose since (a share rose, a scale rule ended), the backlog ahead of now is cut
-- to what a grant at the new rate leaves at most (tolerance + interval), but not below the
-- same number of cells at the new interval (a debt of N recipients stays N cells): a group
-- whose share goes from 1/min to 600/min waits 0.1 s, not the 60 s a cell cost at the old
-- rate (179 s and 46 s were seen), and a rule's end gives no burst beyond the configured one.
-- When the rate fell, the TAT is kept as it is: the past stays charged at the rate it was
-- sent at, the new rate applies from now. A plain number (written before the interval was
-- stored) is read at the current interval. The second value says whether the backlog was
-- cut: the caller stores it at once (the cut is relative to now; read again later from the
-- old value it would never shrink).
local function tat_of(key, interval, tolerance)
  local raw = redis.call('GET', key)
  local v = 0
  if raw then
    local tat, was = string.match(raw, '^([0-9]+) ([0-9.]+)$')
    if tat then
      v = tonumber(tat)
      was = tonumber(was)
      if v > now_us and interval < was * (1 - 1e-6) then
        local backlog = v - now_us
        v = now_us + math.max(backlog * interval / was,
                              math.min(backlog, tolerance + interval))
        return v, true
      end
    else
      v = tonumber(raw) or 0
    end
  end
  if v < now_us then v = now_us end
  return v, false
end
local function store(key, v, interval)
  if v <= now_us then
    redis.call('DEL', key)
  else
    redis.call('SET', key, string.format('%.0f %.3f', v, interval), 'PX',
               math.ceil((v - now_us) / 1000) + 1000)
  end
end

-- the levels: {key, emission interval us, tolerance us}
local levels = {}
if p_rate > 0 then
  local T = 60000000 / (p_rate * factor)
  local burst = p_burst
  if factor < 1 then burst = math.max(1, math.min(p_burst, math.ceil(p_rate * factor / 60))) end
  levels[#levels + 1] = {KEYS[1], T, (burst - 1) * T, 'provider'}
end
-- the share as written: the operator splits the rate its scale rules leave (high groups
-- first) and rewrites the shares within a second of a rule firing; the provider level above
-- is scaled at once, so the sum holds meanwhile
local share = tonumber(redis.call('HGET', KEYS[5], group) or '-1')
local g_limit = -1
if share >= 0 then g_limit = share end
if g_rate > 0 and (g_limit < 0 or g_rate < g_limit) then g_limit = g_rate end
if g_limit > 0 then
  local T = 60000000 / g_limit
  local burst = math.max(1, math.ceil(g_limit / 60))
  if g_burst > 0 and g_burst < burst then burst = g_burst end
  levels[#levels + 1] = {KEYS[2], T, (burst - 1) * T, 'share'}
end

if debt > 0 then
  for _, l in ipairs(levels) do store(l[1], tat_of(l[1], l[2], l[3]) + debt * l[2], l[2]) end
end

if g_limit == 0 and mode == 'take' then
  -- a share of zero: this group may not send now (high groups hold the budget)
  if lane ~= '' then redis.call('ZREM', KEYS[3], lane) end
  return {0, 1000000, rate_milli, cap_out, 'share'}
end

if mode == 'refund' or mode == 'give' then
  local n = tonumber(ARGV[12])
  if mode == 'give' then
    n = 1
    if lane ~= '' then redis.call('ZREM', KEYS[3], lane) end
  end
  local done = {0, 0}
  for i = 1, 2 do
    local expected = ARGV[12 + i]
    local raw = redis.call('GET', KEYS[i])
    if n > 0 and expected ~= '' and raw == expected then
      local tat, was = string.match(raw, '^([0-9]+) ([0-9.]+)$')
      if tat then
        -- the cells' own interval (the value is unchanged, so is the rate they were charged at)
        local interval = tonumber(was)
        store(KEYS[i], math.max(now_us, tonumber(tat) - n * interval), interval)
        done[i] = 1
      end
    end
  end
  return {0, 0, rate_milli, cap_out, '', done[1], done[2]}
end
if mode == 'release' or mode == 'peek' then
  if mode == 'release' and lane ~= '' then redis.call('ZREM', KEYS[3], lane) end
  if mode == 'peek' then
    return {0, 0, rate_milli, cap_out, '', redis.call('GET', KEYS[1]) or '',
            redis.call('GET', KEYS[2]) or ''}
  end
  return {0, 0, rate_milli, cap_out, ''}
end

if suspended_until > now_ms then
  if lane ~= '' then redis.call('ZREM', KEYS[3], lane) end
  return {0, math.min(suspended_until - now_ms, 1000) * 1000, rate_milli, cap_out,
          'suspended:' .. suspended_by}
end

-- every level must allow one more cell now
local wait = 0
local why = ''
local tats = {}
for i, l in ipairs(levels) do
  local tat, cut = tat_of(l[1], l[2], l[3])
  if cut then store(l[1], tat, l[2]) end
  tats[i] = tat
  local over = tat - now_us - l[3]
  if over > 0 and over > wait then
    wait = over
    why = l[4]
  end
end
if wait > 0 then
  if lane ~= '' then redis.call('ZREM', KEYS[3], lane) end
  return {0, math.floor(wait), rate_milli, cap_out, why}
end

-- concurrency: leases expire on their own; this lane's own lease is renewed, not counted twice
if lane ~= '' then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms)
  if cap > 0 and not redis.call('ZSCORE', KEYS[3], lane) then
    local held = redis.call('ZCARD', KEYS[3])
    if held >= cap then
      local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
      local until_first = (tonumber(first[2]) - now_ms) * 1000
      return {0, math.max(1000, math.min(until_first, 50000)), rate_milli, cap_out,
              'concurrency'}
    end
  end
  redis.call('ZADD', KEYS[3], now_ms + lease_ms, lane)
  -- the key outlives its longest lease: groups of one provider may have different timeouts,
  -- and a short lease must not cut a long one's life (each member expires by its own score)
  if redis.call('PTTL', KEYS[3]) < lease_ms + 1000 then
    redis.call('PEXPIRE', KEYS[3], lease_ms + 1000)
  end
end
local after = {[KEYS[1]] = '', [KEYS[2]] = ''}
for i, l in ipairs(levels) do
  store(l[1], tats[i] + l[2], l[2])
  after[l[1]] = string.format('%.0f %.3f', tats[i] + l[2], l[2])
end
return {1, 0, rate_milli, cap_out, '', after[KEYS[1]], after[KEYS[2]]}

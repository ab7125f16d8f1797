-- GCRA (Generic Cell Rate Algorithm, "virtual scheduling" form) for one send group's shared
-- rate limit. Sources: ITU-T I.371 / ATM Forum TM 4.1 (GCRA definition); Brandur Leach,
-- "Rate limiting, cells, and GCRA" (2015); redis-cell (brandur/redis-cell) for the Redis use.
--
-- State: KEYS[1] holds the theoretical arrival time (TAT), integer microseconds of Redis' own
-- clock (TIME), so every worker process shares one clock. KEYS[2], the ledger, a hash in the
-- same hash tag: "e" the ledger's epoch (the TIME it was created, microseconds), "a" the
-- microseconds of schedule every take and charge added since, "l" the TIME of the latest of
-- them. Both keys expire on their own (the ledger an hour after the TAT).
-- ARGV[1] = emission interval T (microseconds per message, > 0)
-- ARGV[2] = tolerance tau = (burst - 1) * T (microseconds)
-- ARGV[3] = n (>= 1): messages to take, to charge, or to give back
-- ARGV[4] = mode: "take" (up to n, what is free), "charge" (all n now, free or not: recipients
--           beyond a job's first; the debt delays the next messages), "refund" (give back n
--           cells of an earlier take or charge that went unused; see below)
-- ARGV[5], ARGV[6], ARGV[7] = "refund" only: the mark of the take or charge the cells came
--           from (its epoch and "a" as it returned them) and the emission interval it used
-- Returns {granted, wait_us, epoch, added}: "take": messages granted (0..n) and, when 0,
-- microseconds until one is allowed; "charge": {0, 0}; both with the mark of the call (the
-- ledger's epoch and "a" after it; {.., "", 0} when nothing was added). "refund": {cells given
-- back (how far the schedule moved back, in emission intervals, rounded), 0, "", 0}.
--
-- A refund must not let the sum sent over a window pass rate x window + burst. Keep R, the TAT
-- virtual scheduling gives over the cells actually kept: R = max over the takes k (and the
-- start) of (t_k + the schedule added from k on). The stored TAT is never below R (true for
-- takes; kept by every refund below). Removing n cells taken at k0 (emission interval Tm)
-- lowers every term with k <= k0 by n x Tm, so those stay <= TAT - n x Tm; a term with k > k0
-- is at most l + A, where l is the time of the latest take (l >= t_k) and A the schedule added
-- since the mark (>= what was added from k on). So the TAT becomes max(TAT - n x Tm, l + A),
-- or TAT - n x Tm exactly when nothing was added since the mark (A = 0). A ledger re-created
-- since the mark (a new epoch) refunds nothing: its "a" does not count from the mark.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local T = tonumber(ARGV[1])
local tau = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local mode = ARGV[4]
local tat = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if tat < now then tat = now end
local function store(v)
  if v <= now then
    redis.call('DEL', KEYS[1])
  else
    redis.call('SET', KEYS[1], string.format('%.0f', v), 'PX', math.ceil((v - now) / 1000) + 1000)
  end
end
-- schedule added (microseconds), up to v: returns the mark {epoch, added}
local function add(cells, v)
  local epoch = redis.call('HGET', KEYS[2], 'e')
  if not epoch then
    epoch = string.format('%.0f', now)
    redis.call('HSET', KEYS[2], 'e', epoch, 'a', 0)
  end
  local added = redis.call('HINCRBY', KEYS[2], 'a', cells * T)
  redis.call('HSET', KEYS[2], 'l', string.format('%.0f', now))
  redis.call('PEXPIRE', KEYS[2], math.ceil(math.max(0, v - now) / 1000) + 3600000)
  return epoch, added
end
if mode == 'refund' then
  local e = redis.call('HGET', KEYS[2], 'e')
  if n < 1 or e == false or e ~= ARGV[5] or tat <= now then return {0, 0, '', 0} end
  local tm = tonumber(ARGV[7])
  local since = tonumber(redis.call('HGET', KEYS[2], 'a') or '0') - tonumber(ARGV[6])
  local floor = tat - n * tm
  if since > 0 then
    local latest = tonumber(redis.call('HGET', KEYS[2], 'l') or '0')
    if latest + since > floor then floor = latest + since end
  end
  if floor >= tat then return {0, 0, '', 0} end
  store(floor)
  return {math.floor((tat - math.max(floor, now)) / tm + 0.5), 0, '', 0}
end
if mode == 'charge' then
  store(tat + n * T)
  local epoch, added = add(n, tat + n * T)
  return {0, 0, epoch, added}
end
local free = math.floor((tau - (tat - now)) / T) + 1
if free < 1 then
  return {0, tat - now - tau, '', 0}
end
local granted = math.min(n, free)
store(tat + granted * T)
local epoch, added = add(granted, tat + granted * T)
return {granted, 0, epoch, added}

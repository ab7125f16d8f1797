-- claim: make the queue belong to one SendGroup, atomically (first claim wins).
-- KEYS: 1 owner
-- ARGV: 1 owner ("<namespace>/<name>/<uid>"), 2 mode: "claim", "release" or "replace",
--       3 (replace only) the stale owner to take over from
-- Reply: {1, owner} when ARGV[1] owns the queue after the call ("release": {1, ""} when it
--        held it and let go, or nobody held it), {0, current owner} otherwise (nothing changed).
--        "replace" claims like "claim", and also takes the queue when ARGV[3] holds it.
local current = redis.call('GET', KEYS[1])
if ARGV[2] == 'release' then
  if not current then return {1, ''} end
  if current == ARGV[1] then
    redis.call('DEL', KEYS[1])
    return {1, ''}
  end
  return {0, current}
end
if ARGV[2] == 'replace' and current and current == ARGV[3] then
  -- the previous incarnation of the same group (same namespace and name, older uid) is gone
  redis.call('SET', KEYS[1], ARGV[1])
  return {1, ARGV[1]}
end
if not current then
  redis.call('SET', KEYS[1], ARGV[1])
  return {1, ARGV[1]}
end
if current == ARGV[1] then return {1, current} end
return {0, current}

-- later: ZADD payloads to delayed (Laravel's laterRaw: no notify token).
-- KEYS: 1 delayed
-- ARGV: score1, payload1, score2, payload2, ...
-- Reply: number of payloads added.
local n = 0
for i = 1, #ARGV, 2 do
  redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i + 1])
  n = n + 1
end
return n

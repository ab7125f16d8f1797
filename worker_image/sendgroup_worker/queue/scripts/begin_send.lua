-- begin_send: may this reservation send its mail now? With a suppression set, also: which of
-- the mail's recipients it holds (the same round trip, the last check before MAIL FROM).
-- KEYS: 1 reserved, 2 sent[, 3 suppression set (a set of lower-case addresses)]
-- ARGV: 1 reserved bytes, 2 uuid[, 3.. the recipients, lower-cased]
-- Reply: "lost" (reservation gone: another worker owns the job), "already_sent" (an earlier
-- reservation of this uuid delivered it), or "ok" without KEYS[3]; with KEYS[3] and the job
-- still ours, an array of 0/1, one per recipient (1: in the set). A KEYS[3] holding another
-- type is an error (WRONGTYPE), like a SISMEMBER of its own: no mail goes out unchecked.
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 'lost' end
if redis.call('ZSCORE', KEYS[2], ARGV[2]) then return 'already_sent' end
if #KEYS < 3 then return 'ok' end
local hits = {}
for i = 3, #ARGV do
  hits[#hits + 1] = redis.call('SISMEMBER', KEYS[3], ARGV[i])
end
return hits

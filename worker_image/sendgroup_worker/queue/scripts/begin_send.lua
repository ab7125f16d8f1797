-- begin_send: may this reservation send its mail now?
-- KEYS: 1 reserved, 2 sent
-- ARGV: 1 reserved bytes, 2 uuid
-- Reply: "lost" (reservation gone: another worker owns the job), "already_sent" (an earlier
-- reservation of this uuid delivered it), or "ok".
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 'lost' end
if redis.call('ZSCORE', KEYS[2], ARGV[2]) then return 'already_sent' end
return 'ok'

-- push: RPUSH payloads to the ready list and one notify token per payload (Laravel's push;
-- push-many is the same script with more arguments: one round trip for a batch).
-- KEYS: 1 ready, 2 notify
-- ARGV: payloads
-- Reply: number of payloads pushed.
sg_rpush_all(KEYS[1], ARGV)
sg_push_tokens(KEYS[2], #ARGV)
return #ARGV

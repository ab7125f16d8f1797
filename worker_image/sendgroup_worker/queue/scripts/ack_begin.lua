-- ack_begin: acknowledge a lane's delivered jobs (as reserve.lua's acks do), then begin_send
-- for its next job (as begin_send.lua, with or without the suppression check). One round
-- trip: a lane running a reserved batch writes each delivered mail's ack (its `sent` marker)
-- before it sends the next mail, as it did when every job had its own reserve.
-- KEYS: 1 reserved, 2 sent, 3 stats, then 4 the suppression set when ARGV[6] == '1', then the
--       stream of the acks' entries when ARGV[5] ~= '0' (its index: #KEYS)
-- ARGV: 1 reserved bytes, 2 uuid (the job to begin), 3 now, 4 sent_ttl, 5 the stream's
--       MAXLEN ~ cap (0: no entries), 6 screen ('1': check the recipients), 7 n_acks, then per
--       ack: delivered ("1"/"0"), reserved bytes, uuid, n (entry field+value count), the n
--       texts; then the recipients (lower-cased) when screening
-- Reply: {lost_ack_indexes (1-based), refused_entries, answer}; answer as begin_send.lua's:
--        "lost", "already_sent", "ok" (no screen) or one 0/1 per recipient.
local reserved, sent, stats = KEYS[1], KEYS[2], KEYS[3]
local now = tonumber(ARGV[3])
local sent_ttl = tonumber(ARGV[4])
local maxlen = ARGV[5]
local screen = ARGV[6] == '1'
local n_acks = tonumber(ARGV[7])

local lost, refused, base = sg_ack(reserved, sent, stats, KEYS[#KEYS], maxlen, ARGV, 7,
  n_acks, now, sent_ttl)

local answer
if not redis.call('ZSCORE', reserved, ARGV[1]) then
  answer = 'lost'
elseif redis.call('ZSCORE', sent, ARGV[2]) then
  answer = 'already_sent'
elseif not screen then
  answer = 'ok'
else
  answer = {}
  for i = base + 1, #ARGV do
    answer[#answer + 1] = redis.call('SISMEMBER', KEYS[4], ARGV[i])
  end
end
return {lost, refused, answer}

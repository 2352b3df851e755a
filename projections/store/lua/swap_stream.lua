-- swap_stream.lua: replace a namespace's stream by its redacted copy in one atomic step,
-- taking along the entries appended to it since the copy was made, so that concurrent
-- appenders lose nothing and the projector reads the same ids before and after.
--
-- KEYS[1] stream  the stream rewritten (hm:{ns}:events, :dead, :audit or :qembeddings)
-- KEYS[2] copy    its redacted copy (hm:{ns}:rewrite): every entry of the stream up to
--                 ARGV[1], same ids, the erased content redacted
-- ARGV[1] id of the newest entry the copy holds
-- ARGV[2..] needles: bytes an entry to redact holds (for the log: the msgpack of the key
--           `note_id` and of one erased id, side by side; for the audit: the JSON of a text);
--           an entry appended since the copy that holds one may carry content to redact, so
--           it is not taken along verbatim (the caller copies it redacted)
-- Returns {1, n}: swapped, n entries appended meanwhile taken along; {0, id}: not swapped,
-- entry id (after ARGV[1]) holds a needle (copy it redacted, then call again); {-1, n}: not
-- swapped, the stream lost entries the copy holds (deleted meanwhile: copy again).
local unpack = unpack or table.unpack
local newer = redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], '+')
for _, e in ipairs(newer) do
  local f = e[2]
  for j = 2, #f, 2 do
    for k = 2, #ARGV do
      if string.find(f[j], ARGV[k], 1, true) then return {0, e[1]} end
    end
  end
end
for _, e in ipairs(newer) do
  redis.call('XADD', KEYS[2], e[1], unpack(e[2]))
end
local n = redis.call('XLEN', KEYS[1])
if redis.call('XLEN', KEYS[2]) ~= n then return {-1, n} end
local function info(key)
  local x = redis.call('XINFO', 'STREAM', key)
  local t = {}
  for i = 1, #x, 2 do t[x[i]] = x[i + 1] end
  return t
end
local a, b = info(KEYS[1]), info(KEYS[2])
if a['last-generated-id'] ~= b['last-generated-id'] or a['entries-added'] ~= b['entries-added']
    or a['max-deleted-entry-id'] ~= b['max-deleted-entry-id'] then
  -- the stream had entries deleted: keep its last id and counters (new ids stay above).
  -- (fakeredis has no XSETID; hivemind never deletes entries, so there they always match)
  redis.call('XSETID', KEYS[2], a['last-generated-id'], 'ENTRIESADDED', a['entries-added'],
             'MAXDELETEDID', a['max-deleted-entry-id'])
end
redis.call('RENAME', KEYS[2], KEYS[1])
return {1, #newer}

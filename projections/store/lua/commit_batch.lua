-- commit_batch.lua: apply one folded batch to a namespace's read model atomically, and
-- only if the checkpoint is still the one the batch was read after (compare-and-set).
-- A crash before this script runs leaves nothing; after it, the whole batch and its
-- checkpoint are in. A stale projector (another one committed first) changes nothing.
--
-- KEYS[1] checkpoint  string: last applied stream entry id of the namespace
-- KEYS[2] notes       hash:   note_id -> msgpack NoteState
-- KEYS[3] seen        set:    applied event_ids
-- KEYS[4] dead        stream: dead letters (entry, reason, raw)
-- KEYS[5] changes     stream: one entry per batch (pos, touched note ids)
-- KEYS[6] generation  string: bumped by each replay write-back ('' = never)
-- KEYS[7] projected   string: how many stream entries the checkpoint covers (lag = XLEN - it)
-- KEYS[8] lock        string: the projection lease (its holder's token, with a TTL)
-- KEYS[9] dupbands    hash:   the near-duplicate lookup's buckets, field -> entries (each a
--                     2-byte fingerprint, then an 8-byte note key)
-- KEYS[10] dupspec    string: the spec the lookup was made with (set here only if unset:
--                     by a namespace's first commit; replay sets it)
-- KEYS[11] digests    hash:   event_id -> keyed digest of its content (eventdigest.py)
-- KEYS[12] dupnotes   hash:   the lookup's records, note key -> record
-- ARGV[1] expected checkpoint ("" = none yet), then "|", then the expected generation
-- ARGV[2] new checkpoint (stream entry id)
-- ARGV[3] committed_at, ms since the epoch, from Python (scripts never read the clock)
-- ARGV[4] changes stream MAXLEN (approximate)
-- ARGV[5] the committer's lease token ("" = the caller holds no lease: not checked)
-- ARGV[6] lease renewal in ms ("0" = leave the lease's TTL alone); only with a token
-- ARGV[7] n_notes, then n_notes pairs: note_id, blob
-- then    n_seen,  then n_seen event_ids
-- then    n_dead,  then n_dead triples: entry_id, reason, raw
-- then    the number of stream entries in the batch (added to KEYS[7])
-- then    the touched note ids joined by spaces (the changes entry's 'notes' field)
-- then    n_cut, then n_cut pairs: bucket field, the entries (10 bytes each) leaving it
-- then    n_join, then n_join pairs: bucket field, the entries joining it
-- then    n_drop, then n_drop note keys whose records go (notes that left the lookup)
-- then    n_rec, then n_rec pairs: note key, record
-- then    the lookup's spec tag
-- then    n_dig, then n_dig pairs: event_id, digest (the batch's seen ids)
-- Returns 1 when applied, 0 when the checkpoint had moved or the lease was lost (nothing
-- written). Both checkpoint and generation must match: a replay may write back the very
-- checkpoint string a stale batch read, but never without bumping the generation. The lease
-- fences a projector whose lease expired mid-batch: it cannot commit, even before the new
-- holder has committed anything. A commit that applied also renews the lease (one round
-- trip per batch instead of two).
--
-- Notes and seen ids are written with variadic HSET / SADD over slices of ARGV (one call per
-- CHUNK values instead of one per item): a call from Lua costs far more than an argument.
local CHUNK = 4000  -- values per call; well under Lua's unpack limit (LUAI_MAXCSTACK 8000)
if ARGV[5] ~= '' and redis.call('GET', KEYS[8]) ~= ARGV[5] then
  return 0
end
local current = (redis.call('GET', KEYS[1]) or '') .. '|' .. (redis.call('GET', KEYS[6]) or '')
if current ~= ARGV[1] then
  return 0
end
local i = 7
local n = tonumber(ARGV[i]); i = i + 1
local last = i + 2 * n - 1
while i <= last do
  local j = math.min(i + CHUNK - 1, last)
  redis.call('HSET', KEYS[2], unpack(ARGV, i, j))
  i = j + 1
end
n = tonumber(ARGV[i]); i = i + 1
last = i + n - 1
while i <= last do
  local j = math.min(i + CHUNK - 1, last)
  redis.call('SADD', KEYS[3], unpack(ARGV, i, j))
  i = j + 1
end
n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do
  redis.call('XADD', KEYS[4], '*', 'entry', ARGV[i], 'reason', ARGV[i + 1], 'raw', ARGV[i + 2],
             'at_ms', ARGV[3])
  i = i + 3
end
redis.call('INCRBY', KEYS[7], ARGV[i])
redis.call('SET', KEYS[1], ARGV[2])
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[4], '*', 'pos', ARGV[2],
           'notes', ARGV[i + 1])
i = i + 2
-- the near-duplicate lookup: per bucket, cut the entries that leave it, then append those
-- that join it (each bucket read and written once); then the records
local W = 10  -- bytes of an entry: fingerprint (2), note key (8)
local function cut(cur, gone)
  local drop = {}
  for p = 1, #gone, W do
    drop[string.sub(gone, p, p + W - 1)] = true
  end
  local keep = {}
  for p = 1, #cur, W do
    local d = string.sub(cur, p, p + W - 1)
    if not drop[d] then
      keep[#keep + 1] = d
    end
  end
  return table.concat(keep)
end
n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do
  local cur = redis.call('HGET', KEYS[9], ARGV[i])
  if cur then
    local left = cut(cur, ARGV[i + 1])
    if left == '' then
      redis.call('HDEL', KEYS[9], ARGV[i])
    else
      redis.call('HSET', KEYS[9], ARGV[i], left)
    end
  end
  i = i + 2
end
n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do
  local cur = redis.call('HGET', KEYS[9], ARGV[i])
  redis.call('HSET', KEYS[9], ARGV[i], (cur or '') .. ARGV[i + 1])
  i = i + 2
end
n = tonumber(ARGV[i]); i = i + 1
last = i + n - 1
while i <= last do
  local j = math.min(i + CHUNK - 1, last)
  redis.call('HDEL', KEYS[12], unpack(ARGV, i, j))
  i = j + 1
end
n = tonumber(ARGV[i]); i = i + 1
last = i + 2 * n - 1
while i <= last do
  local j = math.min(i + CHUNK - 1, last)
  redis.call('HSET', KEYS[12], unpack(ARGV, i, j))
  i = j + 1
end
redis.call('SET', KEYS[10], ARGV[i], 'NX')
i = i + 1
n = tonumber(ARGV[i]); i = i + 1
last = i + 2 * n - 1
while i <= last do
  local j = math.min(i + CHUNK - 1, last)
  redis.call('HSET', KEYS[11], unpack(ARGV, i, j))
  i = j + 1
end
if ARGV[5] ~= '' and ARGV[6] ~= '0' then
  redis.call('PEXPIRE', KEYS[8], ARGV[6])
end
return 1

-- append_unless_named.lua: a checked `remember` of a fresh note in one step when nothing can
-- name it. The near-duplicate lookup is read as dup_lookup.lua reads it (twin key, band hits
-- counted where they are stored, big buckets skipped); a note it names is then bounded on its
-- filed term digests (as ``dupsketch.overlaps``: never below the word overlap), so only a
-- note that may reach the threshold counts as named. The note is appended (XADD), its
-- namespace registered and its projection marker set, all in this one atomic step, only when:
--   * the lookup was made with the writer's spec (ARGV[4]);
--   * no note is filed under the twin key, and none named by its bands reaches ARGV[5];
--   * the write's note id is not in the read model, nor its event id among the applied ones;
--   * the log's unprojected tail (entries after the checkpoint) holds only entries the writer
--     already compared with its note (it keeps them decoded: ARGV[7], ARGV[8]).
-- Else nothing is written, and the answer says why, with the tail entries the writer has not
-- seen (up to ARGV[12]) so that it can compare them and send again, or check as before.
--
-- KEYS[1] dupbands    hash:   field (twin key, 8 bytes; band bucket, 3 bytes) -> entries
--                             (fingerprint, 2 bytes, then note key, 8 bytes; concatenated)
-- KEYS[2] dupnotes    hash:   note key -> record (4-byte LE count, uint16 LE term digests, id)
-- KEYS[3] dupspec     string: the spec tag the lookup was made with
-- KEYS[4] checkpoint  string: the read model's checkpoint (the lookup stands at it)
-- KEYS[5] stream      stream: the namespace's event log
-- KEYS[6] notes       hash:   note_id -> folded state
-- KEYS[7] seen        set:    applied event ids
-- KEYS[8] scheduled   string: the projection marker (set NX here, with ARGV[13] s of TTL)
-- KEYS[9] namespaces  set:    the namespace registry (ARGV[14] added)
-- ARGV[1] the band hits a note needs        ARGV[2] bucket cap (0: none)
-- ARGV[3] the most bands left uncounted     ARGV[4] the spec tag the writer's config makes
-- ARGV[5] the overlap a named note must stay under (the threshold, less a rounding margin)
-- ARGV[6] the write's term digests (uint16 LE, sorted, repeats kept: ``Probe.hashes``)
-- ARGV[7] the newest entry the writer compared with ('' none)
-- ARGV[8] the checkpoint the writer's compared entries start after ('' the log's start)
-- ARGV[9] the write's note id               ARGV[10] its event id
-- ARGV[11] the field name of an entry       ARGV[12] the most tail entries returned
-- ARGV[13] the marker's TTL (s)             ARGV[14] the namespace's name
-- ARGV[15] the encoded event
-- ARGV[16] the twin key's digest (8 bytes)  ARGV[17..] the band keys (bucket 3, fingerprint 2)
-- Returns {status, checkpoint, payload}:
--   'appended', cp, {entry id, 1 if this call set the marker else 0}
--   'tail', cp, the entries after max(ARGV[7], checkpoint) (XRANGE's reply; at most ARGV[12]
--           + 1: more than ARGV[12] means there were more), the lookup named nothing
--   'named' | 'exists' | 'spec', cp, {}   (the caller checks as before)
local W, FP = 10, 2
local need, cap, skips = tonumber(ARGV[1]), W * tonumber(ARGV[2]), tonumber(ARGV[3])
local sub, find, byte = string.sub, string.find, string.byte
local cp = redis.call('GET', KEYS[4]) or ''
local tag = redis.call('GET', KEYS[3])
if tag and tag ~= ARGV[4] then
  return {'spec', cp, {}}
end
if redis.call('HEXISTS', KEYS[6], ARGV[9]) == 1 or
    redis.call('SISMEMBER', KEYS[7], ARGV[10]) == 1 then
  return {'exists', cp, {}}
end
local fields, fps = {ARGV[16]}, {false}
for i = 17, #ARGV do
  if #ARGV[i] ~= 3 + FP then
    return redis.error_reply('append_unless_named: band key ' .. (i - 16) .. ' is ' ..
                             #ARGV[i] .. ' bytes, not ' .. (3 + FP))
  end
  fields[#fields + 1] = sub(ARGV[i], 1, 3)
  fps[#fps + 1] = sub(ARGV[i], 4, 3 + FP)
end
local vals = redis.call('HMGET', KEYS[1], unpack(fields))
if vals[1] then
  return {'named', cp, {}}
end
local v
if cap > 0 and skips > 0 then
  local big = {}
  for i = 2, #vals do
    v = vals[i]
    if v and #v > cap then
      big[#big + 1] = i
    end
  end
  if #big > skips then
    table.sort(big, function(a, b)
      local la, lb = #vals[a], #vals[b]
      if la ~= lb then
        return la > lb
      end
      return a < b
    end)
  end
  for j = 1, math.min(skips, #big) do
    vals[big[j]] = false
  end
end
local hits, near = {}, {}
for i = 2, #vals do
  v = vals[i]
  if v then
    local f, p, last = fps[i], 1, #v - W + 1
    while p <= last do
      local s = find(v, f, p, true)
      if not s then
        break
      end
      local off = (s - 1) % W
      if off == 0 then
        local d = sub(v, s + FP, s + W - 1)
        local h = (hits[d] or 0) + 1
        hits[d] = h
        if h == need then
          near[#near + 1] = d
        end
      end
      p = s - off + W
    end
  end
end
if #near > 0 then
  local mine, n = {}, #ARGV[6] / 2
  for i = 1, #ARGV[6], 2 do
    mine[sub(ARGV[6], i, i + 1)] = true
  end
  local bar = tonumber(ARGV[5])
  for _, rec in ipairs(redis.call('HMGET', KEYS[2], unpack(near))) do
    if rec then
      local b1, b2, b3, b4 = byte(rec, 1, 4)
      local k = b1 + 256 * (b2 + 256 * (b3 + 256 * b4))
      local shared = 0
      for q = 5, 4 + 2 * k, 2 do
        if mine[sub(rec, q, q + 1)] then
          shared = shared + 1
        end
      end
      local union = n + k - shared
      if n > 0 and k > 0 and (union <= 0 or shared / union >= bar) then
        return {'named', cp, {}}
      end
    end
  end
end
-- entry ids as numbers, to compare them ('' is before every entry)
local function pos(id)
  if id == '' then
    return -1, -1
  end
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function before(x, y)  -- x <= y
  local a1, b1 = pos(x)
  local a2, b2 = pos(y)
  return a1 < a2 or (a1 == a2 and b1 <= b2)
end
local top = redis.call('XREVRANGE', KEYS[5], '+', '-', 'COUNT', 1)
local newest = ''
if #top > 0 then
  newest = top[1][1]
end
local known, floor = ARGV[7], ARGV[8]
if not (before(newest, cp) or (newest == known and before(floor, cp))) then
  local from = cp
  if known ~= '' and before(floor, cp) and before(cp, known) then
    from = known
  end
  local lo = '-'
  if from ~= '' then
    lo = '(' .. from
  end
  return {'tail', cp, redis.call('XRANGE', KEYS[5], lo, '+', 'COUNT', tonumber(ARGV[12]) + 1)}
end
local id = redis.call('XADD', KEYS[5], '*', ARGV[11], ARGV[15])
redis.call('SADD', KEYS[9], ARGV[14])
local set = redis.call('SET', KEYS[8], '1', 'NX', 'EX', tonumber(ARGV[13]))
local marked = 0
if set then
  marked = 1
end
return {'appended', cp, {id, marked}}

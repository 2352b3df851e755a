-- append_unless_named.lua: a checked `remember` of a fresh note, appended in one atomic step
-- when nothing can name it. The writer has read the near-duplicate lookup's buckets at the
-- checkpoint ARGV[6] (one MULTI, before this call) and counted the band hits itself
-- (``dupsketch.band_hits``: dup_lookup.lua's rule, big buckets left uncounted alike); it
-- sends the note keys that reached the hits a note needs (ARGV[14..]). This script bounds each on its filed term digests (as
-- ``dupsketch.overlaps``: never below the word overlap), so only a note that may reach the
-- threshold counts as named; it reads no bucket, so its time does not grow with the
-- namespace. The note is appended (XADD), its namespace registered and its projection marker
-- set, all in this one step, only when:
--   * the lookup holds no spec tag, or the writer's (ARGV[1]);
--   * none of the notes sent reaches ARGV[2] (a note removed since has no record: it no
--     longer names anything);
--   * the write's note id is not in the read model, nor its event id among the applied ones;
--   * every log entry after the checkpoint the buckets were read at (ARGV[6]) is one the
--     writer already compared with its note (it keeps them decoded: ARGV[4], ARGV[5]). The
--     lookup at any later checkpoint is the one read plus those entries folded, so nothing
--     the writer has not compared can name the note.
-- Else nothing is written, and the answer says why, with the log entries the writer has not
-- seen (up to ARGV[10]) so that it can compare them and send again, or check as before.
--
-- KEYS[1] dupnotes    hash:   note key -> record (4-byte LE count, uint16 LE term digests, id)
-- KEYS[2] dupspec     string: the spec tag the lookup was made with
-- KEYS[3] stream      stream: the namespace's event log
-- KEYS[4] notes       hash:   note_id -> folded state
-- KEYS[5] seen        set:    applied event ids
-- KEYS[6] scheduled   string: the projection marker (set NX here, with ARGV[11] s of TTL)
-- KEYS[7] namespaces  set:    the namespace registry (ARGV[12] added)
-- ARGV[1] the spec tag the writer's config makes
-- ARGV[2] the overlap a named note must stay under (the threshold, less a rounding margin)
-- ARGV[3] the write's term digests (uint16 LE, sorted, repeats kept: ``Probe.hashes``)
-- ARGV[4] the newest entry the writer compared with ('' none)
-- ARGV[5] the checkpoint the writer's compared entries start after ('' the log's start)
-- ARGV[6] the checkpoint the writer read the buckets at ('' none yet)
-- ARGV[7] the write's note id               ARGV[8] its event id
-- ARGV[9] the field name of an entry        ARGV[10] the most tail entries returned
-- ARGV[11] the marker's TTL (s)             ARGV[12] the namespace's name
-- ARGV[13] the encoded event                ARGV[14..] the note keys the bands name (8 bytes)
-- Returns {status, payload}:
--   'appended', {entry id, 1 if this call set the marker else 0}
--   'tail', the entries after max(ARGV[4], ARGV[6]) (XRANGE's reply; at most ARGV[10] + 1:
--           more than ARGV[10] means there were more); no note sent was named
--   'named' | 'exists' | 'spec', {}   (the caller checks as before)
local sub, byte = string.sub, string.byte
local tag = redis.call('GET', KEYS[2])
if tag and tag ~= ARGV[1] then
  return {'spec', {}}
end
if redis.call('HEXISTS', KEYS[4], ARGV[7]) == 1 or
    redis.call('SISMEMBER', KEYS[5], ARGV[8]) == 1 then
  return {'exists', {}}
end
if #ARGV >= 14 then
  local near = {}
  for i = 14, #ARGV do
    if #ARGV[i] ~= 8 then
      return redis.error_reply('append_unless_named: note key ' .. (i - 13) .. ' is ' ..
                               #ARGV[i] .. ' bytes, not 8')
    end
    near[#near + 1] = ARGV[i]
  end
  local mine, n = {}, #ARGV[3] / 2
  for i = 1, #ARGV[3], 2 do
    mine[sub(ARGV[3], i, i + 1)] = true
  end
  local bar = tonumber(ARGV[2])
  for _, rec in ipairs(redis.call('HMGET', KEYS[1], unpack(near))) do
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
        return {'named', {}}
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
local top = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
local newest = ''
if #top > 0 then
  newest = top[1][1]
end
local known, floor, cp = ARGV[4], ARGV[5], ARGV[6]
if not (before(newest, cp) or (newest == known and before(floor, cp))) then
  local from = cp
  if known ~= '' and before(floor, cp) and before(cp, known) then
    from = known
  end
  local lo = '-'
  if from ~= '' then
    lo = '(' .. from
  end
  return {'tail', redis.call('XRANGE', KEYS[3], lo, '+', 'COUNT', tonumber(ARGV[10]) + 1)}
end
local id = redis.call('XADD', KEYS[3], '*', ARGV[9], ARGV[13])
redis.call('SADD', KEYS[7], ARGV[12])
local set = redis.call('SET', KEYS[6], '1', 'NX', 'EX', tonumber(ARGV[11]))
local marked = 0
if set then
  marked = 1
end
return {'appended', {id, marked}}

-- dup_lookup.lua: the notes a write's near-duplicate keys name, counted where they are stored
-- (read only). A note filed under the twin key is named at once; under the band keys, only
-- when at least ARGV[1] of the write's bands name it (unrelated notes share a band or two by
-- chance, a near-duplicate several). Only the records of the notes that pass leave Redis.
-- A band whose bucket holds more than ARGV[2] note keys says little (on a corpus of common
-- words, many unrelated notes share its values) and costs the most to count: up to ARGV[3]
-- such bands, the largest first (ties: the earlier band), are not counted (the caller sizes
-- ARGV[3] so that a pair at the threshold still reaches ARGV[1] hits with the chance the
-- spec asks for: ``dupsketch.spec_of``). ARGV[2] = 0 counts every band.
--
-- KEYS[1] dupbands    hash:   key digest (8 bytes) -> note keys (8 bytes each, concatenated)
-- KEYS[2] dupnotes    hash:   note key -> record (term digests, then the note id)
-- KEYS[3] dupspec     string: the spec tag the lookup was made with
-- KEYS[4] checkpoint  string: the read model's checkpoint (the lookup stands at it)
-- (the caller reads the stream's tail after the checkpoint with a plain XRANGE in the same
-- MULTI: one atomic read of the lookup and the unprojected tail, without converting every
-- tail entry to Lua and back)
-- ARGV[1] the band hits a note needs
-- ARGV[2] the most note keys a bucket may hold and be sure to be counted (0: no limit)
-- ARGV[3] the most bands left uncounted for holding more
-- ARGV[4] the twin key's digest
-- ARGV[5..] the band digests
-- Returns {spec tag or '', checkpoint or '', {twin records}, {near records}}
-- (twins as filed; near notes in the order they reached ARGV[1] hits).
local CHUNK = 4000  -- values per HMGET; well under Lua's unpack limit
local function records(ks)
  local out = {}
  for i = 1, #ks, CHUNK do
    local got = redis.call('HMGET', KEYS[2], unpack(ks, i, math.min(i + CHUNK - 1, #ks)))
    for _, v in ipairs(got) do
      if v then
        out[#out + 1] = v
      end
    end
  end
  return out
end
local need, cap, skips = tonumber(ARGV[1]), 8 * tonumber(ARGV[2]), tonumber(ARGV[3])
local vals = redis.call('HMGET', KEYS[1], unpack(ARGV, 4))
local sub = string.sub
local twins = {}
local v = vals[1]
if v then
  for p = 1, #v, 8 do
    twins[#twins + 1] = sub(v, p, p + 7)
  end
end
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
-- a note is named when its count reaches need (most notes are met once: no list of them all)
local hits, near = {}, {}
for i = 2, #vals do
  v = vals[i]
  if v then
    for p = 1, #v, 8 do
      local d = sub(v, p, p + 7)
      local h = hits[d]
      if h == nil then
        hits[d] = 1
        if need <= 1 then
          near[#near + 1] = d
        end
      else
        h = h + 1
        hits[d] = h
        if h == need then
          near[#near + 1] = d
        end
      end
    end
  end
end
return {redis.call('GET', KEYS[3]) or '', redis.call('GET', KEYS[4]) or '',
        records(twins), records(near)}

-- dup_lookup.lua: the notes a write's near-duplicate keys name, counted where they are stored
-- (read only). A note filed under the twin key is named at once; under the band keys, only
-- when at least ARGV[1] of the write's bands name it (unrelated notes share a band or two by
-- chance, a near-duplicate several). Only the records of the notes that pass leave Redis.
-- A bucket holds entries of several band values (the bands of unrelated notes folded into
-- it, more as the namespace grows); each entry starts with its band's fingerprint, and only
-- the entries with the write's own band's fingerprint are counted: found with a plain
-- string.find (C), so the entries a bucket holds by chance cost a scan of bytes, not a Lua
-- step each.
-- A band whose bucket holds more than ARGV[2] entries says little (on a corpus of common
-- words, many unrelated notes share its values) and costs the most to count: up to ARGV[3]
-- such bands, the largest first (ties: the earlier band), are not counted (the caller sizes
-- ARGV[3] so that a pair at the threshold still reaches ARGV[1] hits with the chance the
-- spec asks for: ``dupsketch.spec_of``). ARGV[2] = 0 counts every band.
--
-- KEYS[1] dupbands    hash:   field (twin key, 8 bytes; band bucket, 3 bytes) -> entries
--                             (fingerprint, 2 bytes, then note key, 8 bytes; concatenated)
-- KEYS[2] dupnotes    hash:   note key -> record (term digests, then the note id)
-- KEYS[3] dupspec     string: the spec tag the lookup was made with
-- KEYS[4] checkpoint  string: the read model's checkpoint (the lookup stands at it)
-- (the caller reads the stream's tail after the checkpoint with a plain XRANGE in the same
-- MULTI: one atomic read of the lookup and the unprojected tail, without converting every
-- tail entry to Lua and back)
-- ARGV[1] the band hits a note needs
-- ARGV[2] the most entries a bucket may hold and be sure to be counted (0: no limit)
-- ARGV[3] the most bands left uncounted for holding more
-- ARGV[4] the twin key's digest (8 bytes)
-- ARGV[5..] the band keys: bucket (3 bytes), then fingerprint (2 bytes)
-- Returns {spec tag or '', checkpoint or '', {twin records}, {near records}}
-- (twins as filed; near notes in the order they reached ARGV[1] hits).
local W, FP = 10, 2  -- bytes of an entry, of its fingerprint
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
local need, cap, skips = tonumber(ARGV[1]), W * tonumber(ARGV[2]), tonumber(ARGV[3])
local sub, find = string.sub, string.find
local fields, fps = {ARGV[4]}, {false}
for i = 5, #ARGV do
  if #ARGV[i] ~= 3 + FP then
    return redis.error_reply('dup_lookup: band key ' .. (i - 4) .. ' is ' .. #ARGV[i] ..
                             ' bytes, not ' .. (3 + FP))
  end
  fields[#fields + 1] = sub(ARGV[i], 1, 3)
  fps[#fps + 1] = sub(ARGV[i], 4, 3 + FP)
end
local vals = redis.call('HMGET', KEYS[1], unpack(fields))
local twins = {}
local v = vals[1]
if v then
  for p = 1, #v, W do
    twins[#twins + 1] = sub(v, p + FP, p + W - 1)
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
    local f, p, last = fps[i], 1, #v - W + 1
    while p <= last do  -- (an empty fingerprint would match everywhere: never one step back)
      local s = find(v, f, p, true)
      if not s then
        break
      end
      local off = (s - 1) % W
      if off == 0 then  -- an entry's fingerprint (else the bytes fell inside a note key)
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
return {redis.call('GET', KEYS[3]) or '', redis.call('GET', KEYS[4]) or '',
        records(twins), records(near)}

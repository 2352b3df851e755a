-- dup_lookup.lua: the notes a write's near-duplicate keys name, counted where they are stored
-- (read only). A note filed under the twin key is named at once; under the band keys, only
-- when at least ARGV[1] of the write's bands name it (unrelated notes share a band or two by
-- chance, a near-duplicate several). Only the records of the notes that pass leave Redis.
--
-- KEYS[1] dupbands    hash:   key digest (8 bytes) -> note keys (8 bytes each, concatenated)
-- KEYS[2] dupnotes    hash:   note key -> record (term digests, then the note id)
-- KEYS[3] dupspec     string: the spec tag the lookup was made with
-- KEYS[4] checkpoint  string: the read model's checkpoint (the lookup stands at it)
-- KEYS[5] stream      the namespace's log: its entries after the checkpoint come back too,
--                     so the write reads the lookup and the unprojected tail in one atomic
--                     read (what the check sees is one instant of the namespace)
-- ARGV[1] the band hits a note needs
-- ARGV[2] the twin key's digest
-- ARGV[3..] the band digests
-- Returns {spec tag or '', checkpoint or '', {twin records}, {near records}, tail}
-- (notes first seen first; tail: XRANGE's reply for the entries after the checkpoint).
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
local vals = redis.call('HMGET', KEYS[1], unpack(ARGV, 2))
local sub = string.sub
local twins = {}
local v = vals[1]
if v then
  for p = 1, #v, 8 do
    twins[#twins + 1] = sub(v, p, p + 7)
  end
end
local hits, order = {}, {}
for i = 2, #vals do
  v = vals[i]
  if v then
    for p = 1, #v, 8 do
      local d = sub(v, p, p + 7)
      local h = hits[d]
      if h == nil then
        hits[d] = 1
        order[#order + 1] = d
      else
        hits[d] = h + 1
      end
    end
  end
end
local need = tonumber(ARGV[1])
local near = {}
for _, d in ipairs(order) do
  if hits[d] >= need then
    near[#near + 1] = d
  end
end
local cp = redis.call('GET', KEYS[4]) or ''
local from = '-'
if cp ~= '' then
  from = '(' .. cp
end
return {redis.call('GET', KEYS[3]) or '', cp, records(twins), records(near),
        redis.call('XRANGE', KEYS[5], from, '+')}

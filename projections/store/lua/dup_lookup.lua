-- dup_lookup.lua: the notes a write's near-duplicate keys name, counted where they are stored
-- (read only). A note filed under the twin key is named at once; under the band keys, only
-- when at least ARGV[1] of the write's bands name it (most unrelated notes share one band
-- by chance, a near-duplicate several). Only the ids that pass leave Redis.
--
-- KEYS[1] dupidx      zset:   members digest(8 bytes)..note_id, score 0 (lex ranges)
-- KEYS[2] dupspec     string: the spec tag the lookup was made with
-- KEYS[3] checkpoint  string: the read model's checkpoint (the lookup stands at it)
-- KEYS[4] stream      the namespace's log: its entries after the checkpoint come back too,
--                     so the write reads the lookup and the unprojected tail in one atomic
--                     read (what the check sees is one instant of the namespace)
-- ARGV[1] the band hits a note needs
-- ARGV[2] the twin key's digest
-- ARGV[3] the terms members' mark (dupsketch.TERMS_MARK)
-- ARGV[4..] the band digests
-- Returns {spec tag or '', checkpoint or '', {twin note ids}, {near note ids}, tail,
-- {near notes' term digests}} (ids first seen first; tail: XRANGE's reply for the entries
-- after the checkpoint; each near note's packed term digests, '' when it has no terms member).
local idx = KEYS[1]
local function named(d)
  return redis.call('ZRANGEBYLEX', idx, '[' .. d, '(' .. d .. '\255')
end
local twins = {}
for _, m in ipairs(named(ARGV[2])) do
  twins[#twins + 1] = string.sub(m, 9)
end
local hits, order = {}, {}
for i = 4, #ARGV do
  for _, m in ipairs(named(ARGV[i])) do
    local nid = string.sub(m, 9)
    local h = hits[nid]
    if h == nil then
      hits[nid] = 1
      order[#order + 1] = nid
    else
      hits[nid] = h + 1
    end
  end
end
local need = tonumber(ARGV[1])
local near, terms = {}, {}
local mark = ARGV[3]
for _, nid in ipairs(order) do
  if hits[nid] >= need then
    near[#near + 1] = nid
    local p = mark .. nid .. '\0'
    local m = redis.call('ZRANGEBYLEX', idx, '[' .. p, '(' .. mark .. nid .. '\1', 'LIMIT', 0, 1)[1]
    terms[#terms + 1] = m and string.sub(m, #p + 1) or ''
  end
end
local cp = redis.call('GET', KEYS[3]) or ''
local from = '-'
if cp ~= '' then
  from = '(' .. cp
end
return {redis.call('GET', KEYS[2]) or '', cp, twins, near,
        redis.call('XRANGE', KEYS[4], from, '+'), terms}

-- raise_fence.lua: raise a namespace's erasure fence to a log position, never lower it.
--
-- KEYS[1] fence  string: the stream position ("ms-seq") every index snapshot stored from now
--                on must have folded up to (hm:{ns}:erasure_fence)
-- ARGV[1] the position ("ms-seq") an erasure needs
-- Returns the fence as it stands afterwards.
local function before(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end
local cur = redis.call('GET', KEYS[1])
if cur and not before(cur, ARGV[1]) then return cur end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]

-- publish_snapshot.lua: rename a finished index snapshot draft over the namespace's snapshot,
-- unless an erasure's fence is past the position the index had folded up to (the index may
-- still hold content that was erased since: the draft is dropped, no snapshot is stored).
--
-- KEYS[1] draft     hash: the snapshot being assembled (hm:{ns}:index:vN:draft:TOKEN)
-- KEYS[2] snapshot  hash: the namespace's index snapshot (hm:{ns}:index:vN)
-- KEYS[3] fence     string: the erasure fence, "ms-seq" (hm:{ns}:erasure_fence; may be absent)
-- ARGV[1] the checkpoint ("ms-seq") the index had folded up to
-- Returns 1 stored (persistent), 0 refused by the fence (draft deleted), -1 no draft (it
-- expired before its writer was done).
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local fence = redis.call('GET', KEYS[3])
if fence then
  local am, as = string.match(ARGV[1], '^(%d+)-(%d+)$')
  local bm, bs = string.match(fence, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  if am < bm or (am == bm and as < bs) then
    redis.call('DEL', KEYS[1])
    return 0
  end
end
redis.call('RENAME', KEYS[1], KEYS[2])
redis.call('PERSIST', KEYS[2])
return 1

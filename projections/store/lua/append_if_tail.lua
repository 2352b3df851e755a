-- append_if_tail.lua: append a checked write to a namespace's stream only if the stream
-- still ends where the writer's check read it (compare-and-set on the newest entry id), so
-- the check and the append are one atomic step against every other checked writer.
--
-- KEYS[1] stream  the namespace's event stream
-- ARGV[1] the newest entry id the check saw ("" = the stream was empty)
-- ARGV[2] the field name of an entry's encoded event
-- ARGV[3..] the encoded events, in order
-- Returns the new entry ids in order, or false when the stream had moved on (nothing
-- written: the writer checks again against the new tail).
local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local newest = ''
if #top > 0 then newest = top[1][1] end
if newest ~= ARGV[1] then return false end
local ids = {}
for i = 3, #ARGV do
  ids[#ids + 1] = redis.call('XADD', KEYS[1], '*', ARGV[2], ARGV[i])
end
return ids

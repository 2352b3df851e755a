-- finish_job.lua: end of a projection job. Atomically: if the stream has entries past the
-- checkpoint, keep (refresh) the 'scheduled' marker and tell the caller to enqueue again;
-- otherwise delete the marker, so the next append schedules a new job. Between the two
-- outcomes no event can fall through: an append after this script sees no marker.
--
-- KEYS[1] stream      the namespace's event log
-- KEYS[2] checkpoint  last applied entry id ('' if none)
-- KEYS[3] scheduled   marker key
-- ARGV[1] marker TTL in seconds
-- Returns 1 (more to do, marker kept) or 0 (caught up, marker deleted).
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local cp = redis.call('GET', KEYS[2]) or ''
if #last > 0 and last[1][1] ~= cp then
  redis.call('SET', KEYS[3], '1', 'EX', ARGV[1])
  return 1
end
redis.call('DEL', KEYS[3])
return 0

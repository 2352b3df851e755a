-- renew_lease.lua: extend a namespace's projection lease, or give it back, but only while
-- the caller still owns it (a lease that expired and was taken by another projector is left
-- alone).
-- KEYS[1] lease key (string: the owner's token, with a TTL)
-- ARGV[1] owner token
-- ARGV[2] new lease in ms; "0" = release (delete the key)
-- Returns 1 if we owned it, 0 otherwise.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if ARGV[2] == '0' then
  redis.call('DEL', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1

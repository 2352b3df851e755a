-- release_lock.lua: delete or extend a lease only if we still own it.
-- KEYS[1] lock key
-- ARGV[1] owner token
-- ARGV[2] new lease in ms; "0" = release
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

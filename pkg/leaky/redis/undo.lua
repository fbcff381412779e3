-- envoy-rls: undo what decide.lua charged, for a request that another hash
-- slot rejected. Never rejects: it only gives back.
--
-- KEYS[i]  the bucket keys, all in one hash slot
-- ARGV[1]  the time in Unix microseconds, or "" to read the server's TIME
-- ARGV[2+5*(i-1) ...] per bucket: the counter and timestamp the charge left,
--          the counter and timestamp before it, and the expiry (ms) of the
--          state before it
-- A bucket nobody has changed since is put back exactly as it was; one that
-- others changed meanwhile loses what the charge added, keeping its
-- timestamp and expiry. Returns, per bucket, its counter and timestamp
-- afterwards; then the time.

local now
if ARGV[1] == '' then
  if redis.replicate_commands then redis.replicate_commands() end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end

local out = {}
for i = 1, #KEYS do
  local a = 2 + 5 * (i - 1)
  local after_c, after_t = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local before_c, before_t = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local v = redis.call('GET', KEYS[i])
  local c, t = load(v)
  if (v and c == after_c and t == after_t) or (not v and after_c == 0) then
    c, t = before_c, before_t
    if c > 0 then
      store(KEYS[i], c, t, 'PX', tonumber(ARGV[a + 4]))
    elseif v then
      redis.call('DEL', KEYS[i])
    end
  else
    c = c - (after_c - before_c)
    if c > 0 and v then
      store(KEYS[i], c, t, 'KEEPTTL')
    elseif c > 0 then
      t = before_t
      store(KEYS[i], c, t, 'PX', tonumber(ARGV[a + 4]))
    else
      c, t = 0, 0
      if v then
        redis.call('DEL', KEYS[i])
      end
    end
  end
  out[#out + 1] = c
  out[#out + 1] = t
end
out[#out + 1] = now
return out

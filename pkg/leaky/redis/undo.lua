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

local now = time_now(ARGV[1])

-- Each bucket as undone (the Go twin is undone in tx.go).
local out, k = {}, 0
for i = 1, #KEYS do
  local a = 2 + 5 * (i - 1)
  local after_c, after_t = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local before_c, before_t = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local before_ttl = tonumber(ARGV[a + 4])
  local v = redis.call('GET', KEYS[i])
  local c, t = load_state(v)
  if (v and c == after_c and t == after_t) or (not v and after_c == 0) then
    -- Nobody changed it since: as it was.
    c, t = before_c, before_t
    if c > 0 then
      store_state(KEYS[i], c, t, 'PX', before_ttl)
    elseif v then
      redis.call('DEL', KEYS[i])
    end
  else
    -- Changed since: less what the charge added.
    c = c - (after_c - before_c)
    if c <= 0 then
      c, t = 0, 0
      if v then
        redis.call('DEL', KEYS[i])
      end
    elseif v then
      store_state(KEYS[i], c, t, 'KEEPTTL')
    else
      t = before_t
      store_state(KEYS[i], c, t, 'PX', before_ttl)
    end
  end
  out[k + 1], out[k + 2] = c, t
  k = k + 2
end
out[k + 1] = now
return out

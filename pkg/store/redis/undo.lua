-- envoy-rls: undo what decide.lua charged, for a request that another hash
-- slot rejected. Never rejects: it only gives back.
--
-- KEYS[i]  the bucket keys, all in one hash slot
-- ARGV[1]  the time in Unix microseconds, or "" to read the server's TIME
-- ARGV[2+6*(i-1) ...] per bucket: its algorithm (0 leaky bucket, 1 sliding
--          window, 2 fixed window, 3 calendar window), then for a leaky
--          bucket the counter and timestamp the charge left, the counter
--          and timestamp before it, and the expiry (ms) of the state
--          before it; for a window the hits charged, the time they were
--          charged at (a calendar window's: the start of the period they
--          were charged in), the resolution or window (microseconds; 0 for
--          a calendar window), the number of sub-windows (1 for a fixed
--          window, 0 for a calendar window) and 0.
-- A leaky bucket nobody has changed since is put back exactly as it was;
-- one that others changed meanwhile loses what the charge added, keeping
-- its timestamp and expiry. A window loses the hits from the (sub-)window
-- they were charged to, if it is still counted, keeping its expiry.
-- Returns, per bucket, its counter and timestamp afterwards (a window's
-- count and newest start); then the time. The Go twin is in tx.go.

local now = time_now(ARGV[1])

local out, k = {}, 0
for i = 1, #KEYS do
  local a = 2 + 6 * (i - 1)
  local algo = tonumber(ARGV[a])
  local v = rcall('GET', KEYS[i])
  local c, t
  if algo == 1 then
    -- Sliding window: less the hits in the sub-window they went to.
    if not load_window then define_window_state() end
    local hits, at, res = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    local cs
    t, cs = load_window(v)
    local back = floor(t / res) - floor(at / res)
    if back >= 0 and back < #cs then
      local take = cs[back + 1]
      if take > hits then take = hits end
      cs[back + 1] = cs[back + 1] - take
      store_window(KEYS[i], v, t, cs, 'KEEPTTL')
    end
    c = 0
    for m = 1, #cs do
      c = c + cs[m]
    end
  elseif algo == 2 or algo == 3 then
    -- Fixed window: less the hits, if it is still their window (a
    -- calendar window's: the period starting at at).
    local hits, at, win = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    c, t = load_state(v)
    local same = t == at
    if algo == 2 then same = floor(t / win) == floor(at / win) end
    if v and same then
      c = c - hits
      if c <= 0 then
        c, t = 0, 0
        rcall('DEL', KEYS[i])
      else
        store_state(KEYS[i], c, t, 'KEEPTTL')
      end
    end
  else
    local after_c, after_t = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    local before_c, before_t = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
    local before_ttl = tonumber(ARGV[a + 5])
    c, t = load_state(v)
    if (v and c == after_c and t == after_t) or (not v and after_c == 0) then
      -- Nobody changed it since: as it was.
      c, t = before_c, before_t
      if c > 0 then
        store_state(KEYS[i], c, t, 'PX', before_ttl)
      elseif v then
        rcall('DEL', KEYS[i])
      end
    else
      -- Changed since: less what the charge added.
      c = c - (after_c - before_c)
      if c <= 0 then
        c, t = 0, 0
        if v then
          rcall('DEL', KEYS[i])
        end
      elseif v then
        store_state(KEYS[i], c, t, 'KEEPTTL')
      else
        t = before_t
        store_state(KEYS[i], c, t, 'PX', before_ttl)
      end
    end
  end
  out[k + 1], out[k + 2] = c, t
  k = k + 2
end
out[k + 1] = now
return out

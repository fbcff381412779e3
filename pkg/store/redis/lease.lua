-- envoy-rls: lease units of buckets to a replica that decides locally
-- (the local-first mode): limit.Lease (pkg/limit), for many buckets in one
-- call. Each bucket first gets back the units the replica did not use,
-- then grants up to what the replica asks, as much as it has room for; a
-- grant is charged like admitted hits.
--
-- KEYS     the bucket keys, all in one hash slot
-- ARGV[1]  the time in Unix microseconds, or "" to read the server's TIME
-- per bucket, 7 arguments: its algorithm (0 leaky bucket, 1 sliding
--          window, 2 fixed window), its three parameters (as decide.lua
--          takes them), the units given back, the time they were granted
--          at (Unix microseconds) and the units asked for.
-- Returns, per bucket: the units granted, its counter and timestamp
-- afterwards (a window's count at the time decided at and the start of
-- its current (sub-)window), and the time until it has room for one more
-- unit (microseconds; 0 if it has); then the time. A bucket neither given back
-- nor granted anything is not written.

local now = time_now(ARGV[1])

-- grant is what a bucket whose decision with no hits said admitted and
-- remaining grants of ask: all of it, or the room there is.
local function grant(admitted, ask, remaining)
  if admitted ~= 1 or ask <= 0 or remaining <= 0 then return 0 end
  if ask < remaining then return ask end
  return remaining
end

local out, k = {}, 0
local _ -- the values a call returns that are not needed
for i = 1, #KEYS do
  local key = KEYS[i]
  local a = 2 + 7 * (i - 1)
  local algo = tonumber(ARGV[a])
  local p1, p2, p3 = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local ret, at, ask = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6])
  if ret < 0 then ret = 0 elseif ret > MAX then ret = MAX end
  if ask < 0 then ask = 0 elseif ask > MAX then ask = MAX end
  local v = rcall('GET', key)
  local granted, c, t, wait = 0, 0, 0, 0
  if algo == 0 then
    c, t = load_state(v)
    if ret > 0 then
      _, c, t = decide(c, t, p1, p2, p3, -ret, now)
    end
    local admitted, c2, t2, remaining, _, _, ttl = decide(c, t, p1, p2, p3, 0, now)
    granted = grant(admitted, ask, remaining)
    if granted > 0 then
      _, c2, t2, _, _, _, ttl = decide(c, t, p1, p2, p3, granted, now)
    end
    c, t = c2, t2
    local fits, _, _, _, _, reset = decide(c, t, p1, p2, p3, 1, now)
    if fits == 0 then wait = reset end
    if granted > 0 or ret > 0 then
      if ttl > 0 then
        store_state(key, c, t, 'PX', px(ttl))
      elseif v then
        rcall('DEL', key)
      end
    end
  else
    if not decide_sliding then define_windows() end
    if algo == 1 then
      local start, cs = load_window(v)
      if ret > 0 then
        local back = floor(start / p2) - floor(at / p2)
        if back >= 0 and back < #cs then
          local take = cs[back + 1]
          if take > ret then take = ret end
          cs[back + 1] = cs[back + 1] - take
        end
      end
      local admitted, after, cur, remaining, _, _, ttl = decide_sliding(start, cs, p1, p2, p3, 0, now)
      granted = grant(admitted, ask, remaining)
      if granted > 0 then
        _, after, cur, _, _, _, ttl = decide_sliding(start, cs, p1, p2, p3, granted, now)
        start, cs = charge_sliding(start, cs, p2, p3, granted, now)
        store_window(key, v, start, cs, 'PX', px(ttl))
      elseif ret > 0 then
        store_window(key, v, start, cs, 'KEEPTTL')
      end
      local fits, _, _, _, _, reset = decide_sliding(start, cs, p1, p2, p3, 1, now)
      if fits == 0 then wait = reset end
      c, t = after, cur
    else
      c, t = load_state(v)
      if ret > 0 and v and floor(t / p2) == floor(at / p2) then
        c = c - ret
        if c <= 0 then c, t = 0, 0 end
        if c > 0 then
          store_state(key, c, t, 'KEEPTTL')
        else
          rcall('DEL', key)
        end
      end
      local admitted, after, cur, remaining, _, _, ttl = decide_fixed(c, t, p1, p2, 0, now)
      granted = grant(admitted, ask, remaining)
      if granted > 0 then
        _, after, cur, _, _, _, ttl = decide_fixed(c, t, p1, p2, granted, now)
        store_state(key, after, cur, 'PX', px(ttl))
      end
      c, t = after, cur
      local fits, _, _, _, _, reset = decide_fixed(c, t, p1, p2, 1, now)
      if fits == 0 then wait = reset end
    end
  end
  out[k + 1], out[k + 2], out[k + 3], out[k + 4] = granted, c, t, wait
  k = k + 4
end
out[k + 1] = now
return out

-- envoy-rls: lease units of buckets to a replica that decides locally
-- (the local-first mode): limit.Lease (pkg/limit), for many buckets in one
-- call. Each bucket first gets back the units the replica did not use,
-- then grants up to what the replica asks, as much as it has room for; a
-- grant is charged like admitted hits.
--
-- KEYS     the bucket keys, all in one hash slot
-- ARGV[1]  the time in Unix microseconds, or "" to read the server's TIME
-- ARGV[2]  the number of limits; then per limit its algorithm (0 leaky
--          bucket, 1 sliding window, 2 fixed window, 3 calendar window)
--          and its parameters (3, or a calendar window's 5, as decide.lua
--          takes them)
-- then     per bucket, 4 arguments: the index of its limit (from 1), the
--          units given back, the time they were granted at (Unix
--          microseconds; 0 if none are given back; a calendar window's,
--          the start of the period they were granted in) and the units
--          asked for
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

-- LIM holds each limit's algorithm and parameters (3, or a calendar
-- window's 5), from offset 6*(index-1).
local LIM = {}
local a = 3 -- the next argument
for s = 1, tonumber(ARGV[2]) do
  local o = 6 * s - 6
  LIM[o + 1], LIM[o + 2] = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  LIM[o + 3], LIM[o + 4] = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  a = a + 4
  if LIM[o + 1] == CALENDAR then
    LIM[o + 5], LIM[o + 6] = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
    a = a + 2
    -- As decide.lua: the time decided at must be within the periods sent.
    if now < LIM[o + 3] or now >= LIM[o + 6] then
      return redis.error_reply(calendar_skew(now, LIM[o + 3], LIM[o + 6]))
    end
  end
end

local out, k = {}, 0
local _ -- the values a call returns that are not needed
for i = 1, #KEYS do
  local key = KEYS[i]
  local o = 6 * tonumber(ARGV[a]) - 6
  local algo, p1, p2, p3 = LIM[o + 1], LIM[o + 2], LIM[o + 3], LIM[o + 4]
  -- Most buckets give nothing back, or ask nothing: '0' is not parsed.
  local ret, at, ask = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  ret = ret == '0' and 0 or tonumber(ret)
  at = at == '0' and 0 or tonumber(at)
  ask = ask == '0' and 0 or tonumber(ask)
  a = a + 4
  if ret < 0 then ret = 0 elseif ret > MAX then ret = MAX end
  if ask < 0 then ask = 0 elseif ask > MAX then ask = MAX end
  local v = rcall('GET', key)
  local granted, c, t, wait = 0, 0, 0, 0
  if algo == 0 then
    -- leak's steps, not decide's: a lease call is made for every bucket a
    -- replica holds, and decide's report (clear, reset) is not needed but
    -- for the wait.
    c, t = load_state(v)
    if ret > 0 then
      _, c, t = leak(c, t, p1, p2, p3, -ret, now)
    end
    -- The grant is decided, as limit.Lease does, from the state given
    -- back to, not from the one dripped to now (they differ where the
    -- clamps bite).
    local c0, t0, since, ttl = c, t
    _, c, t, since, ttl = leak(c0, t0, p1, p2, p3, 0, now)
    granted = grant(1, ask, p1 - c)
    if granted > 0 then
      _, c, t, since, ttl = leak(c0, t0, p1, p2, p3, granted, now)
    end
    if p1 - c < 1 then
      -- Perhaps no room for one more unit (dripping again from the
      -- state, as decide would, may find some): decide's reset for a hit
      -- of 1.
      local fits, c1, _, s1 = leak(c, t, p1, p2, p3, 1, now)
      if fits == 0 then
        if p1 >= 1 then
          wait = drain_time(1 - (p1 - c1), p3, p2, s1)
        else
          wait = drain_time(c1, p3, p2, s1) + p2
          if wait > MAX then wait = MAX end
        end
      end
    end
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
      -- Units given back leave the window they were charged to, if it is
      -- still the one counted: a calendar window's starts where at says.
      local same = t == at
      if algo == FIXED then same = floor(t / p2) == floor(at / p2) end
      if ret > 0 and v and same then
        c = c - ret
        if c <= 0 then c, t = 0, 0 end
        if c > 0 then
          store_state(key, c, t, 'KEEPTTL')
        else
          rcall('DEL', key)
        end
      end
      local admitted, after, cur, remaining, _, _, ttl = decide_count(algo, c, t, LIM, o + 2, 0, now)
      granted = grant(admitted, ask, remaining)
      if granted > 0 then
        _, after, cur, _, _, _, ttl = decide_count(algo, c, t, LIM, o + 2, granted, now)
        store_state(key, after, cur, 'PX', px(ttl))
      end
      c, t = after, cur
      local fits, _, _, _, _, reset = decide_count(algo, c, t, LIM, o + 2, 1, now)
      if fits == 0 then wait = reset end
    end
  end
  out[k + 1], out[k + 2], out[k + 3], out[k + 4] = granted, c, t, wait
  k = k + 4
end
out[k + 1] = now
return out

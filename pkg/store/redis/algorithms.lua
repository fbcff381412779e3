-- envoy-rls: the decisions, prepended (after state.lua) to the scripts that
-- decide: decide.lua and lease.lua.
--
-- A port of the decisions limit.DecideAll calls (pkg/limit): Bucket.Decide
-- (pkg/leaky) for a leaky bucket, window.Sliding and window.Fixed
-- (pkg/window) for the windows. Lua numbers are doubles; every value stays
-- at or below 2^53, where doubles are exact integers, as in the Go code.

local SLIDING, FIXED, CALENDAR = 1, 2, 3

-- calendar_skew is the error of a call whose time is outside the periods
-- the service sent for a calendar window.
local function calendar_skew(now, first, last)
  return format('calendar window: the time %d is outside the periods the service sent (%d to %d): ' ..
    "Redis's clock and the service's differ by more than a period", now, first, last)
end

-- floor(a / b) is exact for integers 0 <= a <= MAX, 1 <= b <= MAX: the
-- double quotient is rounded, but within this range never up to the next
-- integer. A leaky bucket's path writes floor(q) as q - q % 1, the same
-- double without calling math.floor (a C function, dearer than the
-- arithmetic).

-- drain_time is how long until n units have dripped out, the first drip
-- being since into its period.
local function drain_time(n, drip_size, rate, since)
  if n <= 0 then
    return 0
  end
  local drips = n / drip_size
  drips = drips - drips % 1
  if drips * drip_size < n then drips = drips + 1 end
  local t = drips * rate
  if t > MAX then t = MAX end
  t = t - since
  if t > MAX then t = MAX end
  return t
end

-- leak is the first steps of leaky.Bucket.Decide: it drips the bucket to
-- now and charges the hits if they fit, and returns admitted (1/0), the
-- counter and timestamp, the time since the last drip and how long the
-- bucket must be kept (its TTL: until it has drained, plus one drip; 0
-- when empty). The parameters are valid (leaky.Bucket.Clamped: params in
-- args.go sends them so); the state and hits are moved into range here.
local function leak(counter, ts, size, rate, drip_size, hits, now)
  if counter < 0 then counter = 0 elseif counter > MAX then counter = MAX end
  if ts > MAX then ts = MAX elseif ts < -MAX then ts = -MAX end
  if hits > MAX then hits = MAX elseif hits < -MAX then hits = -MAX end
  local since = now - ts
  if since > MAX then since = MAX elseif since < -MAX then since = -MAX end

  -- 1. Drip: whole drips since the last one leave the bucket. If time went
  -- backwards (since < 0), nothing leaks until it has caught up.
  if counter > 0 and since > 0 then
    local drips = since / rate
    drips = drips - drips % 1
    local full = counter / drip_size
    full = full - full % 1
    if full * drip_size < counter then full = full + 1 end
    if drips >= full then
      counter = 0
    elseif drips > 0 then
      counter = counter - drips * drip_size
      ts = ts + drips * rate
      since = since - drips * rate
    end
  end
  if counter == 0 then
    ts, since = now, 0
  end

  -- 2. Check, and charge what fits.
  local admitted = 0
  if hits < 0 then
    admitted = 1
    counter = counter + hits
    if counter <= 0 then
      counter, ts, since = 0, now, 0
    end
  elseif hits <= size - counter then
    admitted = 1
    counter = counter + hits
  end

  -- The TTL: drain_time's, written out (a call per bucket costs Redis).
  local ttl = 0
  if counter > 0 then
    local drips = counter / drip_size
    drips = drips - drips % 1
    if drips * drip_size < counter then drips = drips + 1 end
    ttl = drips * rate
    if ttl > MAX then ttl = MAX end
    ttl = ttl - since
    if ttl > MAX then ttl = MAX end
    ttl = ttl + rate
    if ttl > MAX then ttl = MAX end
  end
  return admitted, counter, ts, since, ttl
end

-- decide is leaky.Bucket.Decide: it returns admitted (1/0), counter,
-- timestamp, remaining, clear, reset and ttl. decide.lua needs only what
-- leak returns.
local function decide(counter, ts, size, rate, drip_size, hits, now)
  local admitted, since, ttl
  admitted, counter, ts, since, ttl = leak(counter, ts, size, rate, drip_size, hits, now)

  -- 3. Report.
  local clear = drain_time(counter, drip_size, rate, since)
  local remaining = 0
  if admitted == 1 and counter < size then
    remaining = size - counter
  end
  local reset = 0
  if admitted == 0 then
    if hits <= size then
      reset = drain_time(hits - (size - counter), drip_size, rate, since)
    else
      reset = clear + rate
      if reset > MAX then reset = MAX end
    end
  end
  return admitted, counter, ts, remaining, clear, reset, ttl
end

-- The windows' functions, made only by a call that has a window: Redis
-- makes a script's functions anew on every call, and a call of leaky
-- buckets alone should not pay for them.
local decide_sliding, charge_sliding, decide_fixed, decide_calendar, decide_count
local function define_windows()
  define_window_state()
  -- admit_count is the windows' shared rule: hits fit when the count
  -- leaves room for them (a negative hits returns units, never below 0).
  -- It returns admitted (1/0), the count after and the remaining.
  local function admit_count(count, limit, hits)
    if hits > limit - count then return 0, count, 0 end
    local after = count + hits
    if after < 0 then after = 0 end
    if after < limit then return 1, after, limit - after end
    return 1, after, 0
  end
  -- decide_sliding is window.Sliding.Decide: for the window whose newest
  -- sub-window starts at start, with counts cs (newest first), it returns
  -- what decide returns (the count after the decision as the counter, the
  -- current sub-window's start as the timestamp). It changes nothing.
  decide_sliding = function(start, cs, limit, res, n, hits, now)
    if hits > MAX then hits = MAX elseif hits < -MAX then hits = -MAX end
    local newest = floor(start / res)
    local cur = floor(now / res)
    if newest > cur then cur = newest end
    local shift = cur - newest -- sub-windows that passed since the newest count
    local m = #cs -- the counts still in the window
    if m > n - shift then m = n - shift end
    local count = 0
    for k = 1, m do
      count = count + cs[k]
    end
    local admitted, after, remaining = admit_count(count, limit, hits)
    -- The sub-window k back from cur leaves the window when cur+n-k begins.
    local clear = 0
    if admitted == 1 and hits > 0 then
      clear = (cur + n) * res - now
    elseif after > 0 then
      for k = 1, m do
        if cs[k] > 0 then
          clear = (cur + n - (k - 1 + shift)) * res - now
          break
        end
      end
    end
    local reset = 0
    if admitted == 0 then
      reset = n * res -- hits over the limit never fit: a whole window
      if hits <= limit then
        local need = count + hits - limit -- hits that must leave first
        for k = n - 1 - shift, 0, -1 do
          if k < #cs then need = need - cs[k + 1] end
          if need <= 0 then
            reset = (cur + n - (k + shift)) * res - now
            break
          end
        end
      end
    end
    return admitted, after, cur * res, remaining, clear, reset, clear
  end

  -- charge_sliding is window.Sliding.Charge: it returns the newest start and
  -- the counts once hits are added at now (a refund taken from the newest).
  charge_sliding = function(start, cs, res, n, hits, now)
    if hits > MAX then hits = MAX elseif hits < -MAX then hits = -MAX end
    local newest = floor(start / res)
    local cur = floor(now / res)
    if newest > cur then cur = newest end
    local shift = cur - newest
    local out = {}
    for k = 1, n do
      out[k] = 0
    end
    for k = 1, #cs do
      if k + shift <= n then out[k + shift] = cs[k] end
    end
    if hits >= 0 then
      out[1] = out[1] + hits
      if out[1] > MAXSIZE then out[1] = MAXSIZE end
    else
      for k = 1, n do
        local take = out[k]
        if take > -hits then take = -hits end
        out[k] = out[k] - take
        hits = hits + take
        if hits == 0 then break end
      end
    end
    return cur * res, out
  end

  -- decide_fixed is window.Fixed.Decide, charged by the caller.
  decide_fixed = function(count, start, limit, win, hits, now)
    if hits > MAX then hits = MAX elseif hits < -MAX then hits = -MAX end
    local index = floor(start / win)
    local cur = floor(now / win)
    if index > cur then cur = index end
    if cur ~= index then count = 0 end
    local admitted, after, remaining = admit_count(count, limit, hits)
    local finish = (cur + 1) * win - now
    local clear, reset = 0, 0
    if after > 0 then clear = finish end
    if admitted == 0 then reset = finish end
    return admitted, after, cur * win, remaining, clear, reset, clear
  end

  -- decide_calendar is window.CalendarFixed.Decide, charged by the
  -- caller, on the periods the service sent: b0 to b3 bound the period
  -- before the service's, its own and the one after, and the period is
  -- picked among them by the time decided at (or the state's start, if
  -- later: the clock stepped back).
  decide_calendar = function(count, start, limit, b0, b1, b2, b3, hits, now)
    if hits > MAX then hits = MAX elseif hits < -MAX then hits = -MAX end
    local at = now
    if start > at then at = start end
    local from, to = b2, b3
    if at < b1 then from, to = b0, b1 elseif at < b2 then from, to = b1, b2 end
    if start < from then count = 0 end
    local admitted, after, remaining = admit_count(count, limit, hits)
    -- At least 1: past b3 (a state of a later period than any sent), the
    -- count holds until the last period's end only.
    local finish = to - now
    if finish < 1 then finish = 1 end
    local clear, reset = 0, 0
    if after > 0 then clear = finish end
    if admitted == 0 then reset = finish end
    return admitted, after, from, remaining, clear, reset, clear
  end

  -- decide_count is decide_fixed, or decide_calendar for a calendar
  -- window, of the limit whose fields start at lim[at]: its limit, then
  -- its window, or its calendar's four period bounds.
  decide_count = function(algo, c, t, lim, at, hits, now)
    if algo == FIXED then
      return decide_fixed(c, t, lim[at], lim[at + 1], hits, now)
    end
    return decide_calendar(c, t, lim[at], lim[at + 1], lim[at + 2], lim[at + 3], lim[at + 4], hits, now)
  end
end


-- envoy-rls: decide the buckets of one request, or of several in turn,
-- each all or nothing.
--
-- A port of leaky.DecideAll (pkg/leaky) and of the decisions it calls:
-- leaky.decide for a leaky bucket, window.Sliding and window.Fixed (pkg/window)
-- for the windows. Lua numbers are doubles; every value stays at or below
-- 2^53, where doubles are exact integers, as in the Go code. Written for
-- speed: Redis runs it for every request, so it creates no table per leaky
-- bucket or fixed window and calls Redis only for TIME, a GET and a SET per
-- bucket. (Not MGET: Redis reuses the argument objects of a script's calls,
-- and a SET's value would then keep the larger allocation of MGET's second
-- key, 32 bytes more per bucket.)
--
-- One call decides one request or several, in order, each all or nothing
-- on its own.
--
-- KEYS     the bucket keys of every request in turn, all in one hash slot
-- ARGV[1]  the time in Unix microseconds, or "" to read the server's TIME
-- ARGV[2]  "1" to also return each leaky bucket as it was before being
--          charged (dripped to now), so that the charge can be undone
-- ARGV[3]  the number of requests; then for each, its time ("" for
--          ARGV[1]'s), its number of buckets and its buckets' arguments, as
--          follows
-- per bucket, 5 arguments: kind (algorithm*2 + shadow), three
--          parameters, hits. The parameters of a leaky bucket (algorithm
--          0) are size, drip rate (microseconds) and drip size; of a
--          sliding window (1) limit, resolution (microseconds) and the
--          number of sub-windows; of a fixed window (2) limit, window
--          (microseconds) and 0.
-- A leaky bucket or a fixed window is stored in 12 bytes, a sliding window
-- in 7 plus 6 per sub-window, with an expiry (state.lua, state.go).
-- Returns, per bucket of each request in turn: admitted (1/0), counter, timestamp, remaining,
-- clear, reset, ttl (times in microseconds), and if asked the counter and
-- timestamp before the charge (0, 0 for a window); then the time decided
-- at. A window's counter is its count after the decision, its timestamp
-- the start of its current (sub-)window.

local SLIDING, FIXED = 1, 2

-- floor(a / b) is exact for integers 0 <= a <= MAX, 1 <= b <= MAX: the
-- double quotient is rounded, but within this range never up to the next
-- integer.

-- drain_time is how long until n units have dripped out, the first drip
-- being since into its period.
local function drain_time(n, drip_size, rate, since)
  if n <= 0 then
    return 0
  end
  local drips = floor(n / drip_size)
  if drips * drip_size < n then drips = drips + 1 end
  local t = drips * rate
  if t > MAX then t = MAX end
  t = t - since
  if t > MAX then t = MAX end
  return t
end

-- decide is leaky.decide: it returns admitted (1/0), counter, timestamp,
-- remaining, clear, reset and ttl.
local function decide(counter, ts, size, rate, drip_size, hits, now)
  -- Out-of-range values read as their nearest valid value (Limit.clamped).
  if size < 0 then size = 0 elseif size > MAXSIZE then size = MAXSIZE end
  if rate < 1 then rate = 1 elseif rate > MAX then rate = MAX end
  if drip_size < 1 then drip_size = 1 elseif drip_size > MAXSIZE then drip_size = MAXSIZE end
  if counter < 0 then counter = 0 elseif counter > MAX then counter = MAX end
  if ts > MAX then ts = MAX elseif ts < -MAX then ts = -MAX end
  if hits > MAX then hits = MAX elseif hits < -MAX then hits = -MAX end
  local since = now - ts
  if since > MAX then since = MAX elseif since < -MAX then since = -MAX end

  -- 1. Drip: whole drips since the last one leave the bucket. If time went
  -- backwards (since < 0), nothing leaks until it has caught up.
  if counter > 0 and since > 0 then
    local drips = floor(since / rate)
    local full = floor(counter / drip_size)
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
  local ttl = 0
  if counter > 0 then
    ttl = clear + rate
    if ttl > MAX then ttl = MAX end
  end
  return admitted, counter, ts, remaining, clear, reset, ttl
end

-- The windows' functions, made only by a call that has a window: Redis
-- makes a script's functions anew on every call, and a call of leaky
-- buckets alone should not pay for them.
local decide_sliding, charge_sliding, decide_fixed
local function define_windows()
  define_window_state()
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
    local admitted, after = 0, count
    if hits <= limit - count then
      admitted, after = 1, count + hits
      if after < 0 then after = 0 end
    end
    local remaining = 0
    if admitted == 1 and after < limit then remaining = limit - after end
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
    local admitted, after = 0, count
    if hits <= limit - count then
      admitted, after = 1, count + hits
      if after < 0 then after = 0 end
    end
    local remaining = 0
    if admitted == 1 and after < limit then remaining = limit - after end
    local finish = (cur + 1) * win - now
    local clear, reset = 0, 0
    if after > 0 then clear = finish end
    if admitted == 0 then reset = finish end
    return admitted, after, cur * win, remaining, clear, reset, clear
  end
end

local now = time_now(ARGV[1])
local before = ARGV[2] == '1'

-- Each request: read every bucket, then decide them all (leaky.DecideAll),
-- then charge them, before the next request reads: a bucket two requests
-- of the call share is decided for the second as the first left it. res
-- holds 7 values per bucket; counters, stamps and (sliding windows) counts
-- the states as read; they are reused by each request in turn. The
-- arguments are read by offset into flat tables, not into a table per
-- field: each table a call makes costs Redis time on every request (a
-- version with named per-field arrays took 1 us more per call, about 9%).
-- A kind of "0" or "1" is a leaky bucket, the hot path.
local stored, counters, stamps, counts, res = {}, {}, {}, {}, {}
local windows = false
local out, k = {}, 0
local call_now = now
local key0, arg = 0, 4 -- the keys of the requests before; the ARGV of this one's time
for _ = 1, tonumber(ARGV[3]) do
  now = call_now
  if ARGV[arg] ~= '' then now = tonumber(ARGV[arg]) end
  local n = tonumber(ARGV[arg + 1])
  local arg0 = arg + 2 -- this request's first bucket's arguments
  local allowed = true
  for i = 1, n do
    local key = KEYS[key0 + i]
    stored[i] = redis.call('GET', key)
    local a = arg0 + 5 * (i - 1)
    local j = 7 * i - 7
    local kind = ARGV[a]
    local admitted
    if kind == '0' or kind == '1' then
      local c, t = load_state(stored[i])
      counters[i], stamps[i] = c, t
      admitted, res[j + 2], res[j + 3], res[j + 4], res[j + 5], res[j + 6], res[j + 7] =
        decide(c, t, tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), now)
    else
      if not windows then
        windows = true
        define_windows()
      end
      local p1, p2, p3, hits = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
      if floor(tonumber(kind) / 2) == SLIDING then
        counters[i] = 0
        stamps[i], counts[i] = load_window(stored[i])
        admitted, res[j + 2], res[j + 3], res[j + 4], res[j + 5], res[j + 6], res[j + 7] =
          decide_sliding(stamps[i], counts[i], p1, p2, p3, hits, now)
      else
        counters[i], stamps[i] = load_state(stored[i])
        admitted, res[j + 2], res[j + 3], res[j + 4], res[j + 5], res[j + 6], res[j + 7] =
          decide_fixed(counters[i], stamps[i], p1, p2, hits, now)
      end
    end
    res[j + 1] = admitted
    if admitted == 0 and tonumber(kind) % 2 == 0 then
      allowed = false
    end
  end

  for i = 1, n do
    local key = KEYS[key0 + i]
    local a = arg0 + 5 * (i - 1)
    local j = 7 * i - 7
    local kind = ARGV[a]
    if kind == '0' or kind == '1' then
      if allowed then
        if res[j + 7] > 0 then
          -- Keep the bucket until it has drained, plus one drip (ms, rounded up).
          store_state(key, res[j + 2], res[j + 3], 'PX', ceil(res[j + 7] / 1000))
        elseif stored[i] then
          redis.call('DEL', key) -- empty: nothing to keep
        end
      elseif res[j + 1] == 1 and tonumber(ARGV[a + 4]) ~= 0 then
        -- Rejected: show the bucket as it stays, uncharged.
        res[j + 1], res[j + 2], res[j + 3], res[j + 4], res[j + 5], res[j + 6], res[j + 7] =
          decide(counters[i], stamps[i], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), 0, now)
      end
    else
      local p1, p2, p3, hits = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
      local sliding = floor(tonumber(kind) / 2) == SLIDING
      if res[j + 1] == 0 or hits == 0 then
        -- Not charged: a window is left as it was.
      elseif allowed and sliding then
        local start, cs = charge_sliding(stamps[i], counts[i], p2, p3, hits, now)
        -- Kept until the newest hits have left the window (ms, rounded up).
        store_window(key, stored[i], start, cs, 'PX', ceil(res[j + 7] / 1000))
      elseif allowed then
        if res[j + 7] > 0 then
          -- Kept until the window ends (ms, rounded up).
          store_state(key, res[j + 2], res[j + 3], 'PX', ceil(res[j + 7] / 1000))
        elseif stored[i] then
          redis.call('DEL', key) -- a refund emptied it
        end
      elseif sliding then
        -- Rejected: show the window as it stays, uncharged.
        res[j + 1], res[j + 2], res[j + 3], res[j + 4], res[j + 5], res[j + 6], res[j + 7] =
          decide_sliding(stamps[i], counts[i], p1, p2, p3, 0, now)
      else
        res[j + 1], res[j + 2], res[j + 3], res[j + 4], res[j + 5], res[j + 6], res[j + 7] =
          decide_fixed(counters[i], stamps[i], p1, p2, 0, now)
      end
    end
    for m = 1, 7 do
      out[k + m] = res[j + m]
    end
    k = k + 7
    if before then
      -- A leaky bucket's state before the charge, for its undo; a window's
      -- undo takes back its hits instead.
      local _, c, t = 0, 0, 0
      if kind == '0' or kind == '1' then
        _, c, t = decide(counters[i], stamps[i], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), 0, now)
      end
      out[k + 1], out[k + 2] = c, t
      k = k + 2
    end
  end
  key0, arg = key0 + n, arg0 + 5 * n
end
out[k + 1] = call_now
return out

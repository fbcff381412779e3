-- envoy-rls: decide the buckets of one request, all or nothing.
--
-- A port of leaky.decide and leaky.DecideAll (pkg/leaky). Lua numbers are
-- doubles; every value stays at or below 2^53, where doubles are exact
-- integers, as in the Go code. Written for speed: Redis runs it for every
-- request, so it creates no table per bucket and calls Redis only for TIME,
-- a GET and a SET per bucket. (Not MGET: Redis reuses the argument objects
-- of a script's calls, and a SET's value would then keep the larger
-- allocation of MGET's second key, 32 bytes more per bucket.)
--
-- KEYS[i]  the bucket keys, all in one hash slot
-- ARGV[1]  the time in Unix microseconds, or "" to read the server's TIME
-- ARGV[2]  "1" to also return each bucket as it was before being charged
--          (dripped to now), so that the charge can be undone
-- ARGV[3+5*(i-1) ...] per bucket: size, drip rate (microseconds), drip size,
--          hits, shadow (1 or 0)
-- A bucket is stored in 12 bytes with an expiry (state.lua, state.go).
-- Returns, per bucket: admitted (1/0), counter, timestamp, remaining,
-- clear, reset, ttl (times in microseconds), and if asked the counter and
-- timestamp before the charge; then the time decided at.

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

local now = time_now(ARGV[1])
local want_before = ARGV[2] == '1'

-- The arguments, parsed once: each bucket's limit, hits and shadow flag.
local n = #KEYS
local sizes, rates, drip_sizes, hits, shadow = {}, {}, {}, {}, {}
for i = 1, n do
  local a = 3 + 5 * (i - 1)
  sizes[i], rates[i], drip_sizes[i], hits[i] =
    tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  shadow[i] = ARGV[a + 4] == '1'
end

-- leaky.DecideAll. First read and decide every bucket; the request is
-- admitted if every bucket not in shadow mode admits it.
local stored, counters, stamps = {}, {}, {} -- as read
local admitted, counter, ts, remaining, clear, reset, ttl = {}, {}, {}, {}, {}, {}, {}
local all_admitted = true
for i = 1, n do
  stored[i] = redis.call('GET', KEYS[i])
  counters[i], stamps[i] = load_state(stored[i])
  admitted[i], counter[i], ts[i], remaining[i], clear[i], reset[i], ttl[i] =
    decide(counters[i], stamps[i], sizes[i], rates[i], drip_sizes[i], hits[i], now)
  if admitted[i] == 0 and not shadow[i] then
    all_admitted = false
  end
end

-- Then charge them all, or, if rejected, show each bucket as it stays.
local out, k = {}, 0
for i = 1, n do
  if all_admitted then
    if ttl[i] > 0 then
      -- Keep the bucket until it has drained, plus one drip (ms, rounded up).
      store_state(KEYS[i], counter[i], ts[i], 'PX', ceil(ttl[i] / 1000))
    elseif stored[i] then
      redis.call('DEL', KEYS[i]) -- empty: nothing to keep
    end
  elseif admitted[i] == 1 and hits[i] ~= 0 then
    admitted[i], counter[i], ts[i], remaining[i], clear[i], reset[i], ttl[i] =
      decide(counters[i], stamps[i], sizes[i], rates[i], drip_sizes[i], 0, now)
  end
  out[k + 1], out[k + 2], out[k + 3], out[k + 4], out[k + 5], out[k + 6], out[k + 7] =
    admitted[i], counter[i], ts[i], remaining[i], clear[i], reset[i], ttl[i]
  k = k + 7
  if want_before then
    -- The bucket before the charge, dripped to now, for an undo.
    local _, c, t = decide(counters[i], stamps[i], sizes[i], rates[i], drip_sizes[i], 0, now)
    out[k + 1], out[k + 2] = c, t
    k = k + 2
  end
end
out[k + 1] = now
return out

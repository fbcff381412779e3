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

-- Read every bucket, then decide them all (leaky.DecideAll). res holds 7
-- values per bucket; counters and stamps the states as read. The arguments
-- are read by offset into flat tables, not into a table per field: each
-- table a call makes costs Redis time on every request (a version with
-- named per-field arrays took 1 us more per call, about 9%).
local n = #KEYS
local stored, counters, stamps, res = {}, {}, {}, {}
local allowed = true
for i = 1, n do
  stored[i] = redis.call('GET', KEYS[i])
  local c, t = load_state(stored[i])
  counters[i], stamps[i] = c, t
  local a = 5 * i - 2
  local j = 7 * i - 7
  local admitted
  admitted, res[j + 2], res[j + 3], res[j + 4], res[j + 5], res[j + 6], res[j + 7] =
    decide(c, t, tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), now)
  res[j + 1] = admitted
  if admitted == 0 and ARGV[a + 4] ~= '1' then
    allowed = false
  end
end

local before = ARGV[2] == '1'
local out, k = {}, 0
for i = 1, n do
  local a = 5 * i - 2
  local j = 7 * i - 7
  if allowed then
    if res[j + 7] > 0 then
      -- Keep the bucket until it has drained, plus one drip (ms, rounded up).
      store_state(KEYS[i], res[j + 2], res[j + 3], 'PX', ceil(res[j + 7] / 1000))
    elseif stored[i] then
      redis.call('DEL', KEYS[i]) -- empty: nothing to keep
    end
  elseif res[j + 1] == 1 and tonumber(ARGV[a + 3]) ~= 0 then
    -- Rejected: show the bucket as it stays, uncharged.
    res[j + 1], res[j + 2], res[j + 3], res[j + 4], res[j + 5], res[j + 6], res[j + 7] =
      decide(counters[i], stamps[i], tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), 0, now)
  end
  for m = 1, 7 do
    out[k + m] = res[j + m]
  end
  k = k + 7
  if before then
    local _, c, t = decide(counters[i], stamps[i], tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), 0, now)
    out[k + 1], out[k + 2] = c, t
    k = k + 2
  end
end
out[k + 1] = now
return out

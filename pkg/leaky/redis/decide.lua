-- envoy-rls: decide the buckets of one request, all or nothing.
--
-- A line-by-line port of leaky.decide and leaky.DecideAll (pkg/leaky). Lua
-- numbers are doubles; every value stays at or below 2^53, where doubles
-- are exact integers, as in the Go code.
--
-- KEYS[i]  the bucket keys, all in one hash slot
-- ARGV[1]  the time in Unix microseconds, or "" to read the server's TIME
-- ARGV[2]  "1" to also return each bucket as it was before being charged
--          (dripped to now), so that the charge can be undone
-- ARGV[3+5*(i-1) ...] per bucket: size, drip rate (microseconds), drip size,
--          hits, shadow (1 or 0)
-- A bucket is stored in 12 bytes with an expiry (layout in state.go).
-- Returns, per bucket: admitted (1/0), counter, timestamp, remaining,
-- clear, reset, ttl (times in microseconds), and if asked the counter and
-- timestamp before the charge; then the time decided at.

local MAX = 9007199254740992 -- 2^53

-- idiv is floor(a / b) for integers 0 <= a <= MAX, 1 <= b <= MAX. The
-- double quotient is rounded, but within this range never up to the next
-- integer, so its floor is exact.
local function idiv(a, b)
  return math.floor(a / b)
end

local function ceildiv(a, b)
  local q = idiv(a, b)
  if q * b < a then
    q = q + 1
  end
  return q
end

local function sat(x)
  if x > MAX then
    return MAX
  end
  return x
end

local function elapsed(ts, now)
  local d = now - ts
  if d > MAX then return MAX end
  if d < -MAX then return -MAX end
  return d
end

local function drain_time(n, drip_size, rate, since)
  if n <= 0 then
    return 0
  end
  return sat(sat(ceildiv(n, drip_size) * rate) - since)
end

local function decide(counter, ts, size, rate, drip_size, hits, now)
  -- Out-of-range limits read as their nearest valid value (Limit.clamped).
  if size < 0 then size = 0 end
  if size > 1099511627776 then size = 1099511627776 end -- leaky.MaxSize, 2^40
  if rate < 1 then rate = 1 end
  if rate > MAX then rate = MAX end
  if drip_size < 1 then drip_size = 1 end
  if drip_size > 1099511627776 then drip_size = 1099511627776 end
  if counter < 0 then counter = 0 end
  if counter > MAX then counter = MAX end
  if ts > MAX then ts = MAX end
  if ts < -MAX then ts = -MAX end
  if hits > MAX then hits = MAX end
  if hits < -MAX then hits = -MAX end
  local since = elapsed(ts, now)

  -- 1. Drip: whole drips since the last one leave the bucket. If time went
  -- backwards (since < 0), nothing leaks until it has caught up.
  if counter > 0 and since > 0 then
    local drips = idiv(since, rate)
    if drips >= ceildiv(counter, drip_size) then
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
    reset = sat(clear + rate)
    if hits <= size then
      reset = drain_time(hits - (size - counter), drip_size, rate, since)
    end
  end
  local ttl = 0
  if counter > 0 then
    ttl = sat(clear + rate)
  end
  return {admitted, counter, ts, remaining, clear, reset, ttl}
end

local now
if ARGV[1] == '' then
  -- Redis before 5 must be told to replicate effects to write after TIME.
  if redis.replicate_commands then redis.replicate_commands() end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end

-- Read every bucket, then decide them all (leaky.DecideAll).
local n = #KEYS
local counters, stamps, stored, results = {}, {}, {}, {}
local allowed = true
for i = 1, n do
  local v = redis.call('GET', KEYS[i])
  stored[i] = v
  local c, t = load(v)
  counters[i], stamps[i] = c, t
  local a = 3 + 5 * (i - 1)
  results[i] = decide(c, t, tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), now)
  if results[i][1] == 0 and ARGV[a + 4] ~= '1' then
    allowed = false
  end
end

local out = {}
for i = 1, n do
  local a = 3 + 5 * (i - 1)
  local r = results[i]
  local before = nil
  if ARGV[2] == '1' then
    before = decide(counters[i], stamps[i], tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), 0, now)
  end
  if allowed then
    if r[7] > 0 then
      -- Keep the bucket until it has drained, plus one drip (ms, rounded up).
      store(KEYS[i], r[2], r[3], 'PX', math.ceil(r[7] / 1000))
    elseif stored[i] then
      redis.call('DEL', KEYS[i]) -- empty: nothing to keep
    end
  elseif r[1] == 1 and tonumber(ARGV[a + 3]) ~= 0 then
    -- Rejected: show the bucket as it stays, uncharged.
    r = decide(counters[i], stamps[i], tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), 0, now)
  end
  for j = 1, 7 do
    out[#out + 1] = r[j]
  end
  if before then
    out[#out + 1] = before[2]
    out[#out + 1] = before[3]
  end
end
out[#out + 1] = now
return out

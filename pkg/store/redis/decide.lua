-- envoy-rls: decide the buckets of one request, or of several in turn,
-- each all or nothing.
--
-- A port of limit.DecideAll (pkg/limit), on the decisions of
-- algorithms.lua, which is prepended to it with state.lua. Written for
-- speed: Redis runs it for every request, so it creates no table per leaky
-- bucket or fixed window and calls Redis only for TIME, a GET of every
-- bucket (or one MGET for several requests, and a SET that changes
-- nothing, below) and a SET per bucket charged.
--
-- One call decides one request or several, in order, each all or nothing
-- on its own.
--
-- KEYS     the bucket keys of every request in turn, all in one hash slot
-- ARGV[1]  the time in Unix microseconds, or "" to read the server's TIME
-- ARGV[2]  the number of requests
-- ARGV[3]  flags: 1 if each request has its own time, plus 2 if a key is
--          there twice (or may be), in different requests
-- ARGV[4]  the number of limits; then per limit its kind (algorithm*2 +
--          shadow, plus 8 for a bucket that charges always) and its
--          parameters: of a leaky bucket (algorithm 0) size, drip rate
--          (microseconds) and drip size; of a sliding window (1) limit,
--          resolution (microseconds) and the number of sub-windows; of a
--          fixed window (2) limit, window (microseconds) and 0; of a
--          calendar window (3) limit and 4 bounds (Unix microseconds): the
--          starts of the period before the service's, of the service's
--          and of the one after, and the end of that one (calendar.go).
-- then     the number of shapes of request; then per shape its number of
--          buckets and per bucket the index of its limit (from 1) and its
--          hits
-- then     per request, its time if ARGV[3] has 1 ("" for ARGV[1]'s), and
--          the index of its shape (from 1)
-- A call's requests are most often of a few shapes: each limit and shape
-- is sent and parsed once per call, and a request is one argument, looked
-- up as a string, where it was 2 plus 5 per bucket, each parsed by
-- tonumber (parsing numbers is much of what arguments cost).
--
-- A leaky bucket or a fixed window is stored in 12 bytes, a sliding window
-- in 7 plus 6 per sub-window, with an expiry (state.lua, state.go).
--
-- Returns, per request in turn: whether it was admitted (1/0), then per
-- bucket its state as read, which the request was decided on: a leaky
-- bucket's or fixed window's counter and timestamp, a sliding window's
-- newest start, its number of counts and its counts (0, 0 for none); then
-- the time decided at. The caller decides the same states with
-- limit.DecideAll for the figures (remaining, clear, reset, TTL, the state
-- after), so the script computes only what it stores (returning 7 figures
-- per bucket cost Redis 5% more CPU per request).

local now = time_now(ARGV[1])
local timed = ARGV[3] == '1' or ARGV[3] == '3'
local repeats = ARGV[3] == '2' or ARGV[3] == '3'

-- LIM holds each limit's algorithm, shadow and always flags and its
-- parameters (3, or a calendar window's 5), from offset 8*(index-1); SH
-- each shape's number of buckets, then per bucket its limit's offset in
-- LIM and its hits, from offset SHAPE[its index, as requests name it].
local LIM, SH, SHAPE = {}, {}, {}
local a = 5 -- the next argument
for s = 1, tonumber(ARGV[4]) do
  local o = 8 * s - 8
  local kind = tonumber(ARGV[a])
  LIM[o + 1], LIM[o + 2], LIM[o + 3] = floor(kind / 2) % 4, kind % 2 == 1, kind >= 8
  LIM[o + 4], LIM[o + 5], LIM[o + 6] = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  a = a + 4
  if LIM[o + 1] == CALENDAR then
    LIM[o + 7], LIM[o + 8] = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
    a = a + 2
    -- Redis's clock must be within the periods sent, or no period is
    -- known to hold it: refused before anything is written.
    if not timed and (now < LIM[o + 5] or now >= LIM[o + 8]) then
      return redis.error_reply(calendar_skew(now, LIM[o + 5], LIM[o + 8]))
    end
  end
end
local q = 0
for s = 1, tonumber(ARGV[a]) do
  local n = tonumber(ARGV[a + 1])
  SHAPE[tostring(s)] = q
  SH[q + 1] = n
  for i = 1, n do
    local h = ARGV[a + 2 * i + 1]
    SH[q + 2 * i], SH[q + 2 * i + 1] = 8 * tonumber(ARGV[a + 2 * i]) - 8, h == '1' and 1 or tonumber(h)
  end
  q, a = q + 1 + 2 * n, a + 1 + 2 * n
end
a = a + 1

-- A call of several requests reads every bucket by one MGET (per 1000
-- keys), not a GET each (5% less Redis CPU per request at 32 requests a
-- call; none at one): got[p] is KEYS[p]'s value. When a key repeats in
-- the call, a later request must see what an earlier one wrote: fresh[key]
-- holds it (false once deleted), read first.
local got
local nkeys = #KEYS
if tonumber(ARGV[2]) > 1 then
  if nkeys <= 1000 then
    got = rcall('MGET', unpack(KEYS))
  else
    got = {}
    for first = 1, nkeys, 1000 do
      local last = first + 999
      if last > nkeys then last = nkeys end
      local vs = rcall('MGET', unpack(KEYS, first, last))
      for m = 1, last - first + 1 do
        got[first + m - 1] = vs[m]
      end
    end
  end
  -- Redis reuses the objects of a script's command arguments, by
  -- position: a SET's value would be the object of MGET's second key, and
  -- keep its larger allocation (24 to 32 bytes more per bucket). A SET
  -- that changes nothing (NX of a key that is there, XX of one that is
  -- not) with a 64-byte value leaves an object that SET copies a value
  -- out of instead.
  rcall('SET', KEYS[1], '----------------------------------------------------------------', got[1] and 'NX' or 'XX')
end
local fresh = repeats and {} or nil

-- Each request: read every bucket and decide it, then, once the request's
-- answer is known (limit.DecideAll's all-or-nothing rule), charge them,
-- before the next request reads: a bucket two requests of the call share
-- is decided for the second as the first left it. B holds 4 values per
-- bucket: admitted (1/0), the counter (a sliding window's newest start as
-- read, its counts in counts), timestamp and TTL the decision leaves;
-- stored the values read. They are reused by each request in turn. Flat
-- tables, not a table per bucket or per field: each table a call makes
-- costs Redis time on every request. A bucket that charges always is
-- charged whatever the request's answer, past its limit if the hits do not
-- fit (limit.DecideAll's force).
local B, stored, counts = {}, {}, {}
local windows = false
-- out is made at its size for buckets and fixed windows (a table grown
-- one value at a time is copied each time it doubles).
local out, k = {}, 0
do
  local size = tonumber(ARGV[2]) + 2 * #KEYS + 1
  if size <= 4000 then out = {unpack(KEYS, 1, size)} end -- filled below
end
local _ -- the values a call returns that are not needed
local call_now = now
local key0 = 0 -- the keys of the requests before
for _ = 1, tonumber(ARGV[2]) do
  now = call_now
  if timed then
    if ARGV[a] ~= '' then now = tonumber(ARGV[a]) end
    a = a + 1
  end
  local q = SHAPE[ARGV[a]]
  a = a + 1
  local n = SH[q + 1]
  local flag = k + 1 -- where the request's answer goes
  k = k + 1
  local allowed = true
  for i = 1, n do
    local v
    if got then
      v = got[key0 + i]
      if fresh then
        local f = fresh[KEYS[key0 + i]]
        if f ~= nil then v = f end
      end
    else
      v = rcall('GET', KEYS[key0 + i])
    end
    stored[i] = v
    local o, hits = SH[q + 2 * i], SH[q + 2 * i + 1]
    local j = 4 * i - 4
    local algo = LIM[o + 1]
    local admitted
    if algo == 0 then
      -- load_state's and, below, store_state's work, written out: a Lua
      -- function call per bucket costs Redis 3% more per request.
      local c, t = 0, 0
      if v and #v == 12 then
        local hi, lo = sunpack('>I6I6', v)
        local top = hi % 128
        c, t = (hi - top) / 128, (top - 32) * LOW + lo
      end
      out[k + 1], out[k + 2] = c, t
      k = k + 2
      admitted, B[j + 2], B[j + 3], _, B[j + 4] = leak(c, t, LIM[o + 4], LIM[o + 5], LIM[o + 6], hits, now)
    else
      if not windows then
        windows = true
        define_windows()
      end
      if algo == SLIDING then
        local start, cs = load_window(v)
        B[j + 2], counts[i] = start, cs
        out[k + 1], out[k + 2] = start, #cs
        k = k + 2
        for m = 1, #cs do
          out[k + m] = cs[m]
        end
        k = k + #cs
        admitted, _, _, _, _, _, B[j + 4] = decide_sliding(start, cs, LIM[o + 4], LIM[o + 5], LIM[o + 6], hits, now)
      else
        local c, t = load_state(v)
        out[k + 1], out[k + 2] = c, t
        k = k + 2
        admitted, B[j + 2], B[j + 3], _, _, _, B[j + 4] = decide_count(algo, c, t, LIM, o + 4, hits, now)
      end
    end
    B[j + 1] = admitted
    if admitted == 0 and not LIM[o + 2] then
      allowed = false
    end
  end
  out[flag] = allowed and 1 or 0

  for i = 1, n do
    local key = KEYS[key0 + i]
    local j = 4 * i - 4
    local o, hits = SH[q + 2 * i], SH[q + 2 * i + 1]
    local algo, always, p1, p2, p3 = LIM[o + 1], LIM[o + 3], LIM[o + 4], LIM[o + 5], LIM[o + 6]
    if algo == 0 then
      -- Charged if admitted, or left dripped to now, when the request is;
      -- charged whatever the answer if it charges always.
      if allowed or (always and hits ~= 0) then
        local c, t, ttl = B[j + 2], B[j + 3], B[j + 4]
        if B[j + 1] == 0 and always and hits > 0 then
          -- Past the limit: the hits are recorded all the same, on the
          -- bucket as the decision dripped it.
          c = c + hits
          if c > MAXSIZE then c = MAXSIZE end
          _, c, t, _, ttl = leak(c, t, p1, p2, p3, 0, now)
        end
        if ttl > 0 then
          -- Keep the bucket until it has drained, plus one drip (ms, rounded
          -- up, as px makes it). The counter is at most MAXSIZE and at least
          -- 1 here, the timestamp within MAX of 0.
          if c > MAXSIZE then c = MAXSIZE end
          local top = t / LOW
          top = top - top % 1
          local ms = -ttl / 1000
          local v = spack('>I6I6', c * 128 + top + 32, t - top * LOW)
          rcall('SET', key, v, 'PX', format('%d', ms % 1 - ms))
          if fresh then fresh[key] = v end
        elseif stored[i] then
          rcall('DEL', key) -- empty: nothing to keep
          if fresh then fresh[key] = false end
        end
      end
    elseif hits ~= 0 and (always or (allowed and B[j + 1] == 1)) then
      -- A window is charged only by hits, if admitted and the request is,
      -- or if it charges always.
      if algo == SLIDING then
        local start, cs = charge_sliding(B[j + 2], counts[i], p2, p3, hits, now)
        local ttl = B[j + 4]
        if B[j + 1] == 0 then
          -- Past the limit: the hits are recorded all the same.
          _, _, _, _, _, _, ttl = decide_sliding(start, cs, p1, p2, p3, 0, now)
        end
        -- Kept until the newest hits have left the window (ms, rounded up).
        local v = store_window(key, stored[i], start, cs, 'PX', px(ttl))
        if fresh then fresh[key] = v end
      else
        local c, t, ttl = B[j + 2], B[j + 3], B[j + 4]
        if B[j + 1] == 0 then
          -- Past the limit: the hits are recorded all the same.
          c = c + hits
          if c > MAXSIZE then c = MAXSIZE end
          _, c, t, _, _, _, ttl = decide_count(algo, c, t, LIM, o + 4, 0, now)
        end
        local v = false
        if ttl > 0 then
          -- Kept until the window (a calendar window's period) ends (ms,
          -- rounded up).
          v = store_state(key, c, t, 'PX', px(ttl))
        elseif stored[i] then
          rcall('DEL', key) -- a refund emptied it
        end
        if fresh then fresh[key] = v end
      end
    end
  end
  key0 = key0 + n
end
out[k + 1] = call_now
return out

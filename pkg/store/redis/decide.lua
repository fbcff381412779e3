-- envoy-rls: decide the buckets of one request, or of several in turn,
-- each all or nothing.
--
-- A port of limit.DecideAll (pkg/limit), on the decisions of
-- algorithms.lua, which is prepended to it with state.lua. Written for
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
--          ARGV[1]'s), its number of buckets and per bucket 2 arguments:
--          the index of its limit (from 1) and its hits
-- then the limits, 4 arguments each: kind (algorithm*2 + shadow, plus 6
--          for a bucket that charges always) and three parameters; and
--          last their number. The parameters of a leaky bucket (algorithm
--          0) are size, drip rate (microseconds) and drip size; of a
--          sliding window (1) limit, resolution (microseconds) and the
--          number of sub-windows; of a fixed window (2) limit, window
--          (microseconds) and 0.
-- Each distinct limit is sent and parsed once per call, and a bucket's
-- arguments are strings compared or looked up, not parsed (hits of "1"
-- need no tonumber): parsing numbers is much of what the arguments cost
-- (5 numbers per bucket took 9% more Redis CPU per request).
-- A leaky bucket or a fixed window is stored in 12 bytes, a sliding window
-- in 7 plus 6 per sub-window, with an expiry (state.lua, state.go).
-- Returns, per bucket of each request in turn: admitted (1/0), counter, timestamp, remaining,
-- clear, reset, ttl (times in microseconds), and if asked the counter and
-- timestamp before the charge (0, 0 for a window); then the time decided
-- at. A window's counter is its count after the decision, its timestamp
-- the start of its current (sub-)window.

local now = time_now(ARGV[1])
local before = ARGV[2] == '1'

-- The limits, at the end of ARGV: LIM holds each one's algorithm, shadow
-- and always flags and three parameters from offset OFF[its index, as the
-- buckets name it].
local LIM, OFF = {}, {}
do
  local last = #ARGV
  local nl = tonumber(ARGV[last])
  local a = last - 4 * nl
  for s = 1, nl do
    local o = 6 * s - 6
    local kind = tonumber(ARGV[a])
    LIM[o + 1], LIM[o + 2], LIM[o + 3] = floor(kind / 2) % 3, kind % 2 == 1, kind >= 6
    LIM[o + 4], LIM[o + 5], LIM[o + 6] = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    OFF[tostring(s)] = o
    a = a + 4
  end
end

-- Each request: read every bucket, then decide them all (limit.DecideAll),
-- then charge them, before the next request reads: a bucket two requests
-- of the call share is decided for the second as the first left it. res
-- holds 7 values per bucket; counters, stamps and (sliding windows) counts
-- the states as read, offs and hitss the offsets of their limits and
-- their hits; they are reused by each request in turn. The arguments are
-- read by offset into flat tables, not into a table per field: each table
-- a call makes costs Redis time on every request (a version with named
-- per-field arrays took 1 us more per call, about 9%). A bucket that
-- charges always is charged whatever the request's answer, past its limit
-- if the hits do not fit (limit.DecideAll's force): then reported as it
-- stands, not admitted.
local stored, counters, stamps, counts, res, offs, hitss = {}, {}, {}, {}, {}, {}, {}
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
    local a = arg0 + 2 * (i - 1)
    local o = OFF[ARGV[a]]
    local h = ARGV[a + 1]
    local hits = h == '1' and 1 or tonumber(h) -- the usual hits without parsing
    offs[i], hitss[i] = o, hits
    local j = 7 * i - 7
    local algo, p1, p2, p3 = LIM[o + 1], LIM[o + 4], LIM[o + 5], LIM[o + 6]
    local admitted
    if algo == 0 then
      local c, t = load_state(stored[i])
      counters[i], stamps[i] = c, t
      admitted, res[j + 2], res[j + 3], res[j + 4], res[j + 5], res[j + 6], res[j + 7] =
        decide(c, t, p1, p2, p3, hits, now)
    else
      if not windows then
        windows = true
        define_windows()
      end
      if algo == SLIDING then
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
    if admitted == 0 and not LIM[o + 2] then
      allowed = false
    end
  end

  for i = 1, n do
    local key = KEYS[key0 + i]
    local j = 7 * i - 7
    local o, hits = offs[i], hitss[i]
    local algo, always, p1, p2, p3 = LIM[o + 1], LIM[o + 3], LIM[o + 4], LIM[o + 5], LIM[o + 6]
    if algo == 0 then
      if always and res[j + 1] == 0 and hits > 0 then
        -- Past the limit: the hits are recorded all the same.
        local _, c, t = decide(counters[i], stamps[i], p1, p2, p3, 0, now)
        c = c + hits
        if c > MAXSIZE then c = MAXSIZE end
        _, res[j + 2], res[j + 3], res[j + 4], res[j + 5], res[j + 6], res[j + 7] =
          decide(c, t, p1, p2, p3, 0, now)
        res[j + 1], res[j + 4] = 0, 0
      end
      if allowed or (always and hits ~= 0) then
        if res[j + 7] > 0 then
          -- Keep the bucket until it has drained, plus one drip (ms, rounded up).
          store_state(key, res[j + 2], res[j + 3], 'PX', ceil(res[j + 7] / 1000))
        elseif stored[i] then
          redis.call('DEL', key) -- empty: nothing to keep
        end
      elseif res[j + 1] == 1 and hits ~= 0 then
        -- Rejected: show the bucket as it stays, uncharged.
        res[j + 1], res[j + 2], res[j + 3], res[j + 4], res[j + 5], res[j + 6], res[j + 7] =
          decide(counters[i], stamps[i], p1, p2, p3, 0, now)
      end
    else
      local sliding = algo == SLIDING
      local charged = allowed or always
      if hits == 0 or (res[j + 1] == 0 and not always) then
        -- Not charged: a window is left as it was.
      elseif res[j + 1] == 0 and sliding then
        -- Past the limit: the hits are recorded all the same.
        local start, cs = charge_sliding(stamps[i], counts[i], p2, p3, hits, now)
        _, res[j + 2], res[j + 3], res[j + 4], res[j + 5], res[j + 6], res[j + 7] =
          decide_sliding(start, cs, p1, p2, p3, 0, now)
        res[j + 1], res[j + 4] = 0, 0
        store_window(key, stored[i], start, cs, 'PX', ceil(res[j + 7] / 1000))
      elseif res[j + 1] == 0 then
        local c = res[j + 2] + hits
        if c > MAXSIZE then c = MAXSIZE end
        _, res[j + 2], res[j + 3], res[j + 4], res[j + 5], res[j + 6], res[j + 7] =
          decide_fixed(c, res[j + 3], p1, p2, 0, now)
        res[j + 1], res[j + 4] = 0, 0
        store_state(key, res[j + 2], res[j + 3], 'PX', ceil(res[j + 7] / 1000))
      elseif charged and sliding then
        local start, cs = charge_sliding(stamps[i], counts[i], p2, p3, hits, now)
        -- Kept until the newest hits have left the window (ms, rounded up).
        store_window(key, stored[i], start, cs, 'PX', ceil(res[j + 7] / 1000))
      elseif charged then
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
      if algo == 0 then
        _, c, t = decide(counters[i], stamps[i], p1, p2, p3, 0, now)
      end
      out[k + 1], out[k + 2] = c, t
      k = k + 2
    end
  end
  key0, arg = key0 + n, arg0 + 2 * n
end
out[k + 1] = call_now
return out

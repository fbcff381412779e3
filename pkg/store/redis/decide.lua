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
--          ARGV[1]'s), its number of buckets and its buckets' arguments, as
--          follows
-- per bucket, 5 arguments: kind (algorithm*2 + shadow, plus 6 for a
--          bucket that charges always), three parameters, hits. The
--          parameters of a leaky bucket (algorithm 0) are size, drip rate
--          (microseconds) and drip size; of a sliding window (1) limit,
--          resolution (microseconds) and the number of sub-windows; of a
--          fixed window (2) limit, window (microseconds) and 0.
-- A leaky bucket or a fixed window is stored in 12 bytes, a sliding window
-- in 7 plus 6 per sub-window, with an expiry (state.lua, state.go).
-- Returns, per bucket of each request in turn: admitted (1/0), counter, timestamp, remaining,
-- clear, reset, ttl (times in microseconds), and if asked the counter and
-- timestamp before the charge (0, 0 for a window); then the time decided
-- at. A window's counter is its count after the decision, its timestamp
-- the start of its current (sub-)window.

local now = time_now(ARGV[1])
local before = ARGV[2] == '1'

-- Each request: read every bucket, then decide them all (limit.DecideAll),
-- then charge them, before the next request reads: a bucket two requests
-- of the call share is decided for the second as the first left it. res
-- holds 7 values per bucket; counters, stamps and (sliding windows) counts
-- the states as read; they are reused by each request in turn. The
-- arguments are read by offset into flat tables, not into a table per
-- field: each table a call makes costs Redis time on every request (a
-- version with named per-field arrays took 1 us more per call, about 9%).
-- A kind of "0" or "1" is a leaky bucket that charges only admitted
-- requests, the hot path. A bucket that charges always (kind 6 and up) is
-- charged whatever the request's answer, past its limit if the hits do not
-- fit (limit.DecideAll's force): then reported as it stands, not admitted.
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
    if kind == '0' or kind == '1' or floor(tonumber(kind) / 2) % 3 == 0 then
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
      if floor(tonumber(kind) / 2) % 3 == SLIDING then
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
    local always = kind ~= '0' and kind ~= '1' and tonumber(kind) >= 6
    if kind == '0' or kind == '1' or floor(tonumber(kind) / 2) % 3 == 0 then
      local hits = always and tonumber(ARGV[a + 4]) or 0 -- read only where it matters
      if always and res[j + 1] == 0 and hits > 0 then
        -- Past the limit: the hits are recorded all the same.
        local _, c, t = decide(counters[i], stamps[i], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), 0, now)
        c = c + hits
        if c > MAXSIZE then c = MAXSIZE end
        _, res[j + 2], res[j + 3], res[j + 4], res[j + 5], res[j + 6], res[j + 7] =
          decide(c, t, tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), 0, now)
        res[j + 1], res[j + 4] = 0, 0
      end
      if allowed or (always and hits ~= 0) then
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
      local sliding = floor(tonumber(kind) / 2) % 3 == SLIDING
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
      if kind == '0' or kind == '1' or floor(tonumber(kind) / 2) % 3 == 0 then
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

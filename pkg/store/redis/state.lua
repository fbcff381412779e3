-- envoy-rls: what decide.lua and undo.lua share (prepended to each): how a
-- bucket is stored, and the time decided at.

local floor, tonumber, format = math.floor, tonumber, string.format
-- Redis's and struct's functions, looked up once per call, not per bucket.
local rcall, spack, sunpack = redis.call, struct.pack, struct.unpack
local MAX = 9007199254740992 -- 2^53: every value stays within it, exact in a double
local MAXSIZE = 1099511627776 -- leaky.MaxSize, 2^40
local LOW = 281474976710656 -- 2^48

-- load_state returns the counter and timestamp stored in v, or 0, 0 for
-- none. The 12 bytes (layout in state.go) are two big-endian 48-bit words:
-- hi = counter*128 + (timestamp's top bits + 32), lo = its low 48 bits.
local function load_state(v)
  if not v or #v ~= 12 then
    return 0, 0
  end
  local hi, lo = sunpack('>I6I6', v)
  local top = hi % 128
  return (hi - top) / 128, (top - 32) * LOW + lo
end

-- px returns a TTL in microseconds as SET's PX takes it, in whole
-- milliseconds rounded up: a string from string.format, which costs Redis
-- less than a Lua number, which it prints with %.17g. ceil(x) is -floor(-x),
-- and floor(q) q - q % 1 (the same double, without calling a function).
local function px(us)
  local ms = -us / 1000
  return format('%d', ms % 1 - ms)
end

-- store_state sets key to a state, and returns the value stored; the rest
-- of the arguments go to SET (the expiry).
local function store_state(key, counter, ts, ...)
  if counter > MAXSIZE then counter = MAXSIZE elseif counter < 0 then counter = 0 end
  if ts > MAX then ts = MAX elseif ts < -MAX then ts = -MAX end
  local top = ts / LOW
  top = top - top % 1
  local v = spack('>I6I6', counter * 128 + top + 32, ts - top * LOW)
  rcall('SET', key, v, ...)
  return v
end

-- A sliding window is stored as the start of its newest sub-window (Unix
-- microseconds, 7 bytes) and its counts, newest first, 6 bytes each, the
-- empty oldest ones left out (layout in state.go). Its functions are made
-- by define_window_state, only in calls that have a sliding window: Redis
-- makes a script's functions anew on every call.
local load_window, store_window
local function define_window_state()
  -- load_window returns a sliding window's newest start and counts stored
  -- in v, or 0 and no counts for none.
  load_window = function(v)
    if not v or #v < 7 or (#v - 7) % 6 ~= 0 then
      return 0, {}
    end
    local m = (#v - 7) / 6
    local start, pos = sunpack('>I7', v)
    if m == 0 then
      return start, {}
    end
    local cs = {sunpack('>' .. string.rep('I6', m), v, pos)}
    cs[m + 1] = nil -- the position after the last count
    return start, cs
  end

  -- store_window sets key to a sliding window's newest start and counts,
  -- the empty oldest ones left out, or deletes it when every count is 0
  -- (and stored says it exists); the rest of the arguments go to SET. It
  -- returns the value stored, or false for none.
  store_window = function(key, stored, start, cs, ...)
    local m = #cs
    while m > 0 and cs[m] == 0 do
      m = m - 1
    end
    if m == 0 then
      if stored then
        rcall('DEL', key)
      end
      return false
    end
    local v = spack('>I7' .. string.rep('I6', m), start, unpack(cs, 1, m))
    rcall('SET', key, v, ...)
    return v
  end
end

-- time_now returns the time given, in Unix microseconds, or for "" the
-- server's own (TIME): read once per call.
local function time_now(given)
  if given ~= '' then
    return tonumber(given)
  end
  -- Redis before 5 must be told to replicate effects to write after TIME.
  if redis.replicate_commands then redis.replicate_commands() end
  local t = rcall('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

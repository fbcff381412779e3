-- envoy-rls: what decide.lua and undo.lua share (prepended to each): how a
-- bucket is stored, and the time decided at.

local floor, ceil, tonumber = math.floor, math.ceil, tonumber
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
  local hi, lo = struct.unpack('>I6I6', v)
  return floor(hi / 128), ((hi % 128) - 32) * LOW + lo
end

-- store_state sets key to a state; the rest of the arguments go to SET (the
-- expiry).
local function store_state(key, counter, ts, ...)
  if counter > MAXSIZE then counter = MAXSIZE elseif counter < 0 then counter = 0 end
  if ts > MAX then ts = MAX elseif ts < -MAX then ts = -MAX end
  local top = floor(ts / LOW)
  redis.call('SET', key, struct.pack('>I6I6', counter * 128 + top + 32, ts - top * LOW), ...)
end

-- time_now returns the time given, in Unix microseconds, or for "" the
-- server's own (TIME): read once per call.
local function time_now(given)
  if given ~= '' then
    return tonumber(given)
  end
  -- Redis before 5 must be told to replicate effects to write after TIME.
  if redis.replicate_commands then redis.replicate_commands() end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

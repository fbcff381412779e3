-- envoy-rls: how a bucket is stored, shared by decide.lua and undo.lua
-- (prepended to each).
--
-- load and store read and write a bucket's 12 bytes (layout in state.go):
-- two big-endian 48-bit words, hi = counter*128 + (timestamp's top bits +
-- 32), lo = its low 48 bits. Each step stays an exact integer in a double.

local function load(v)
  if not v or #v ~= 12 then
    return 0, 0
  end
  local hi, lo = struct.unpack('>I6I6', v)
  return math.floor(hi / 128), ((hi % 128) - 32) * 281474976710656 + lo
end

-- store sets key to the state; the rest of the arguments go to SET (expiry).
local function store(key, counter, ts, ...)
  if counter > 1099511627776 then counter = 1099511627776 end -- leaky.MaxSize
  if counter < 0 then counter = 0 end
  if ts > 9007199254740992 then ts = 9007199254740992 end
  if ts < -9007199254740992 then ts = -9007199254740992 end
  local top = math.floor(ts / 281474976710656)
  redis.call('SET', key, struct.pack('>I6I6', counter * 128 + top + 32, ts - top * 281474976710656), ...)
end


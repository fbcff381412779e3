-- envoy-rls: a region's report's head (package region), on a region's
-- Redis: the regions' hash has a field for each replica of every region
-- ("region/replica"), whose value is 7 bytes of expiry (Unix microseconds,
-- big-endian) then the replica's report, as demands.lua keeps a level's
-- records (replicas of the version before write and read the same hash
-- with it). Beside it, the heads' hash has for each field its head: the
-- same expiry, then the report's first bytes, which tell one report of a
-- replica from another (its epoch: regions.go). The caller writes its
-- value with a plain HSET just before this call, in the same pipeline,
-- and this call writes its head; a reading call returns the other fields'
-- heads, and the caller reads with a plain HMGET the values it does not
-- hold yet. Redis spends many times as much moving a report of a few MiB
-- through a script as through HSET or HMGET.
--
-- KEYS[1]  the regions' hash
-- KEYS[2]  the heads' hash
-- ARGV[1]  the time in Unix microseconds, or "" to read the server's TIME
-- ARGV[2]  the calling replica: its field
-- ARGV[3]  its value's expiry, Unix microseconds; "" removes its field
-- ARGV[4]  its report's first bytes
-- ARGV[5]  the most fields the hash keeps
-- ARGV[6]  "read" (return the heads) or "post" (return none: a report to
--          another region's Redis)
-- then     fields without a head (a replica of the version before wrote
--          them) the caller found past their expiry when it last read
--          them: each is deleted if it still is
-- Returns the time it ran at; reading, then each other live field and its
-- head, "" for a field without one.
--
-- A field whose head is past its expiry is deleted as it is met, with its
-- head; so is a head without its field. A post checks one other field
-- every eighth second (in turn). Past the most fields the hash keeps,
-- those expiring soonest are deleted (ties: the first by their bytes).
-- The hashes live a little past their latest field.

local now = time_now(ARGV[1])
local key, heads = KEYS[1], KEYS[2]
local me, expiry, tag = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local most, post = tonumber(ARGV[5]), ARGV[6] == 'post'

local HEAD = 7 -- the bytes of a value's expiry
local GRACE = 1000000 -- how long a hash outlives its latest field, µs
local CHUNK = 200 -- the most fields of one HDEL

-- expired reports whether a value or head is past its expiry, or
-- unreadable.
local function expired(v)
  return not v or #v < HEAD or sunpack('>I7', v) < now
end

-- drop deletes fields and their heads.
local function drop(fields)
  for c = 1, #fields, CHUNK do
    local part = {unpack(fields, c, math.min(c + CHUNK - 1, #fields))}
    rcall('HDEL', key, unpack(part))
    rcall('HDEL', heads, unpack(part))
  end
end

if not expiry then
  rcall('HDEL', key, me)
  rcall('HDEL', heads, me)
else
  if expiry < 0 then expiry = 0 elseif expiry > MAX then expiry = MAX end
  rcall('HSET', heads, me, spack('>I7', expiry) .. tag)
  -- The hashes live at least a little past this field.
  local want = expiry - now + GRACE
  for _, k in ipairs({key, heads}) do
    local left = rcall('PTTL', k) -- ms; below 0 for no expiry
    if left < 0 or left * 1000 < want then rcall('PEXPIRE', k, px(want)) end
  end
end

local gone = {}
for i = 7, #ARGV do
  local f = ARGV[i]
  if f ~= me and not rcall('HGET', heads, f) and expired(rcall('HGET', key, f)) then gone[#gone + 1] = f end
end

-- head returns a field's head: its own if it has one; of a field without,
-- read whole, its expiry and nothing more.
local function head(f)
  local h = rcall('HGET', heads, f)
  if h then return h end
  local v = rcall('HGET', key, f)
  if v then return string.sub(v, 1, HEAD) end
  return nil
end

local out = {now}
if post then
  if floor(now / 1000000) % 8 == 0 then
    local fields = rcall('HKEYS', key)
    if #fields > 1 then
      local f = fields[floor(now / 8000000) % #fields + 1]
      if f ~= me and expired(head(f)) then gone[#gone + 1] = f end
    end
  end
else
  local all = rcall('HGETALL', heads)
  local hs = {}
  for j = 1, #all, 2 do hs[all[j]] = all[j + 1] end
  for _, f in ipairs(rcall('HKEYS', key)) do
    local h = hs[f]
    hs[f] = nil
    if h and expired(h) then
      gone[#gone + 1] = f
    elseif f ~= me then
      out[#out + 1] = f
      out[#out + 1] = h or ''
    end
  end
  -- Heads whose fields are gone.
  for f in pairs(hs) do rcall('HDEL', heads, f) end
end
drop(gone)

-- Past the most fields, those expiring soonest go.
if rcall('HLEN', key) > most then
  local fields = rcall('HKEYS', key)
  local exp = {}
  for _, f in ipairs(fields) do
    local h = head(f)
    exp[f] = -1
    if h and #h >= HEAD then exp[f] = sunpack('>I7', h) end
  end
  table.sort(fields, function(x, y)
    if exp[x] ~= exp[y] then return exp[x] < exp[y] end
    return x < y
  end)
  drop({unpack(fields, 1, #fields - most)})
end

return out

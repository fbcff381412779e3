-- envoy-rls: publish RLQS demands and read back every live one (package
-- rlqs's Registry, shared by the replicas): each level of a limit is a
-- hash whose fields are its subscribers (instances, unique across
-- replicas) and whose values are 7 bytes of expiry (Unix microseconds,
-- big-endian) then 16 bytes of demand and activity, which only the service
-- reads (demands.go).
--
-- KEYS     the levels' hashes, all in one hash slot
-- ARGV[1]  the time in Unix microseconds, or "" to read the server's TIME
-- ARGV[2]  how long the entries published live, microseconds
-- ARGV[3]  the most entries a level keeps
-- ARGV[4]  the most entries a call reads: once it has, it starts no other
--          level
-- then     per level, the number of entries published on it, then per
--          entry its instance and its 16 bytes
-- Returns, per level done: the number of its live entries, then each
-- one's instance and value; then the number of levels done, the first
-- ones, one at least (the caller sends the others again).
--
-- An entry past its expiry, or unreadable, is deleted as it is met; past
-- the most a level keeps, the entries expiring soonest are (ties: the
-- first instances by their bytes). Each hash expires a little after its
-- latest entry, so that a level no one publishes on again goes away.

local now = time_now(ARGV[1])
local ttl = tonumber(ARGV[2])
local most = tonumber(ARGV[3])
local budget = tonumber(ARGV[4])

local VALUE = 23 -- the bytes of a value: expiry, then demand and activity
local GRACE = 1000000 -- how long a hash outlives its latest entry, µs
local CHUNK = 200 -- the most arguments of one HSET or HDEL (even: pairs stay whole)

local expiry = now + ttl
if expiry < 0 then expiry = 0 elseif expiry > MAX then expiry = MAX end
local stamp = spack('>I7', expiry)

-- send calls cmd on key with the first n of args, CHUNK at a time: unpack
-- puts them all on Lua's stack, which is bounded.
local function send(cmd, key, args, n)
  for i = 1, n, CHUNK do
    local last = i + CHUNK - 1
    if last > n then last = n end
    rcall(cmd, key, unpack(args, i, last))
  end
end

local out, k = {}, 0
local a = 5 -- the next argument
local read, done = 0, 0 -- the entries read, the levels done
for i = 1, #KEYS do
  if read >= budget then break end
  local key = KEYS[i]
  local n = tonumber(ARGV[a])
  a = a + 1
  local set = {}
  for j = 1, n do
    set[2 * j - 1], set[2 * j] = ARGV[a], stamp .. ARGV[a + 1]
    a = a + 2
  end
  if n > 0 then send('HSET', key, set, 2 * n) end

  -- all holds fields and values in turn; live the positions of the live
  -- ones' fields, exp their expiries by position.
  local all = rcall('HGETALL', key)
  read = read + #all / 2
  local live, m, exp = {}, 0, {}
  local gone, g = {}, 0
  local latest = 0
  for j = 1, #all, 2 do
    local v = all[j + 1]
    local e = -1
    if #v == VALUE then e = sunpack('>I7', v) end
    if e < now then
      g = g + 1
      gone[g] = all[j]
    else
      m = m + 1
      live[m], exp[j] = j, e
      if e > latest then latest = e end
    end
  end

  local first = 1
  if m > most then
    table.sort(live, function(x, y)
      if exp[x] ~= exp[y] then return exp[x] < exp[y] end
      return all[x] < all[y]
    end)
    first = m - most + 1
    for d = 1, first - 1 do
      g = g + 1
      gone[g] = all[live[d]]
    end
  end
  if g > 0 then send('HDEL', key, gone, g) end

  out[k + 1] = m - first + 1
  k = k + 1
  for d = first, m do
    local j = live[d]
    out[k + 1], out[k + 2] = all[j], all[j + 1]
    k = k + 2
  end
  -- The entries dropped expire soonest: the latest is among those kept.
  if m >= first then rcall('PEXPIRE', key, px(latest - now + GRACE)) end
  done = i
end
out[k + 1] = done
return out

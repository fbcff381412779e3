-- envoy-rls: exchange RLQS demands among replicas (package rlqs's Board):
-- each level of a limit is a hash with one field per replica, whose value
-- is 7 bytes of expiry (Unix microseconds, big-endian) then the replica's
-- record: its subscribers there as a few groups, which only the service
-- reads (demands.go). A call replaces the caller's field on each level and
-- reads back the other replicas' live ones.
--
-- KEYS     the levels' hashes, all in one hash slot
-- ARGV[1]  the time in Unix microseconds, or "" to read the server's TIME
-- ARGV[2]  the calling replica: its field on every level
-- ARGV[3]  the most fields a level keeps
-- ARGV[4]  the most bytes of values a call reads: once it has, it starts
--          no other level
-- then     per level, how long the replica's shelf lives (microseconds)
--          and the record; an empty record removes the replica's field
-- Returns, per level done: the number of other replicas' live fields,
-- then each one's name and value; then the number of levels done, the
-- first ones, one at least (the caller sends the others again).
--
-- A field past its expiry, or unreadable, is deleted as it is met; past
-- the most a level keeps, the fields expiring soonest are (ties: the first
-- by their bytes). Each hash expires a little after its latest field, so
-- that a level no one publishes on again goes away.

local now = time_now(ARGV[1])
local me = ARGV[2]
local most = tonumber(ARGV[3])
local budget = tonumber(ARGV[4])

local HEAD = 7 -- the bytes of a value's expiry
local GRACE = 1000000 -- how long a hash outlives its latest field, µs
local CHUNK = 200 -- the most fields of one HDEL

local out, k = {}, 0
local read, done = 0, 0 -- the bytes read, the levels done
for i = 1, #KEYS do
  if read >= budget then break end
  local key = KEYS[i]
  local ttl, shelf = tonumber(ARGV[3 + 2 * i]), ARGV[4 + 2 * i]
  if shelf == '' then
    rcall('HDEL', key, me)
  else
    local expiry = now + ttl
    if expiry < 0 then expiry = 0 elseif expiry > MAX then expiry = MAX end
    rcall('HSET', key, me, spack('>I7', expiry) .. shelf)
  end

  -- all holds fields and values in turn; live the positions of the live
  -- ones' fields, exp their expiries by position.
  local all = rcall('HGETALL', key)
  local live, m, exp = {}, 0, {}
  local gone, g = {}, 0
  for j = 1, #all, 2 do
    local v = all[j + 1]
    read = read + #v
    local e = -1
    if #v >= HEAD then e = sunpack('>I7', v) end
    if e < now then
      g = g + 1
      gone[g] = all[j]
    else
      m = m + 1
      live[m], exp[j] = j, e
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
  for c = 1, g, CHUNK do
    local last = c + CHUNK - 1
    if last > g then last = g end
    rcall('HDEL', key, unpack(gone, c, last))
  end

  local at = k + 1 -- where the count of the level's others goes
  k = k + 1
  local others, latest = 0, -1
  for d = first, m do
    local j = live[d]
    if exp[j] > latest then latest = exp[j] end
    if all[j] ~= me then
      others = others + 1
      out[k + 1], out[k + 2] = all[j], all[j + 1]
      k = k + 2
    end
  end
  out[at] = others
  if latest >= 0 then rcall('PEXPIRE', key, px(latest - now + GRACE)) end
  done = i
end
out[k + 1] = done
return out

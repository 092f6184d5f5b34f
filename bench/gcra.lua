-- gcra.lua: redis-cell's CL.THROTTLE as a Redis Lua script, the baseline
-- that bench/compare.sh and bench/memory.sh measure cellserver against.
--
--   EVALSHA <sha> 1 <key> <max_burst> <count> <period> [<quantity>]
--
-- returns the same five integers as CL.THROTTLE:
--   {limited, limit, remaining, retry_after, reset_after}
--
-- It follows redis-cell 0.5.0 step by step (see gcra/gcra.go, Decide):
--   emission interval ei = period*10^9 / count ns (truncated)
--   limit = max_burst + 1, dvt = ei * limit, increment = ei * quantity
--   tat = stored TAT, or now when the key is absent
--   new_tat = max(tat, now) + increment; allow_at = new_tat - dvt
--   limited when now < allow_at: nothing is written, retry_after = allow_at - now
--   allowed: store new_tat with a TTL of new_tat - now (ms, truncated)
--   remaining = (dvt - ttl) / ei in whole microseconds, 0 when <= -ei
--   retry_after/reset_after in seconds by redis-cell's secs() rule
--
-- The TAT is stored as a decimal string of nanoseconds since the Unix
-- epoch, as the module stores it, so GET/PTTL look the same on both
-- servers. "now" comes from redis.call('TIME'). Lua 5.1 numbers are
-- doubles, exact only to 2^53, so the arithmetic runs in microseconds
-- (~1.8e15 today, exact); TIME has microsecond resolution anyway. The one
-- visible difference to the module: sub-microsecond parts of the emission
-- interval are dropped (none for whole-second periods and counts that
-- divide 10^6*period, such as 30 per 60 s). Zero, negative and
-- overflowing arguments are not reproduced: this is a benchmark workload
-- (the module's wrapping arithmetic is in gcra/).
--
-- The TTL is set in the same write as the value (SET ... PX), which is
-- what production GCRA scripts do (go-redis/redis_rate: SET ... EX) and
-- costs Redis one call less than SET followed by PEXPIRE.

local key = KEYS[1]
local max_burst = tonumber(ARGV[1])
local count = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local quantity = tonumber(ARGV[4] or '1')
if not (max_burst and count and period and quantity) then
  return redis.error_reply('Cell error: invalid argument')
end

local ei_ns = math.floor(period * 1e9 / count)
if ei_ns < 1 then
  return redis.error_reply('Cell error: Store error: zero rates are not supported')
end
local ei = ei_ns / 1000                   -- emission interval, us
local ei_us = math.floor(ei)              -- whole us, for remaining
local limit = max_burst + 1
local dvt = ei * limit                    -- delay variation tolerance, us
local inc = ei * quantity                 -- TAT increment, us

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) -- us since the epoch

local stored = redis.call('GET', key)
local tat = now
if stored then
  -- nanoseconds -> microseconds: drop the last three digits
  tat = tonumber(string.sub(stored, 1, -4)) or 0
end

local new_tat = math.max(tat, now) + inc
local allow_at = new_tat - dvt
local diff = now - allow_at

-- redis-cell's secs(): whole seconds toward zero, plus one when the
-- fraction holds at least one whole millisecond.
local function secs(us)
  local s
  if us >= 0 then s = math.floor(us / 1000000) else s = -math.floor(-us / 1000000) end
  local frac = us - s * 1000000
  if frac >= 1000 then s = s + 1 end
  return s
end

local limited = 0
local retry_after = -1
local ttl
if diff < 0 then
  limited = 1
  if inc <= dvt then retry_after = secs(-diff) end
  ttl = tat - now
else
  ttl = new_tat - now
  local ttl_ms = math.floor(ttl / 1000)
  if ttl_ms > 0 then
    redis.call('SET', key, string.format('%.0f', new_tat) .. '000', 'PX', ttl_ms)
  else
    redis.call('DEL', key) -- a TAT not in the future expires at once
  end
end

local remaining = 0
local next = dvt - ttl
if next > -ei and ei_us > 0 then
  local nm
  if next >= 0 then nm = math.floor(next) else nm = -math.floor(-next) end
  local r = nm / ei_us
  if r >= 0 then remaining = math.floor(r) else remaining = -math.floor(-r) end
end

return {limited, limit, remaining, retry_after, secs(ttl)}

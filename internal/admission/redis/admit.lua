-- Sluice's admission in Redis: one script, one call per phase (count,
-- admit, settle, budgets), all-or-nothing because Redis runs a script
-- alone. It counts as internal/limits and internal/admission's Local do;
-- see internal/admission/redis/doc.go for the keys and the arguments.
--
-- Numbers: Lua 5.1 has only doubles, exact to 2^53. Every amount (tokens,
-- pico-dollars, up to a money.Sum's 9.2e24) is a pair {h, l}, h*1e12 + l,
-- 0 <= l < 1e12, h signed: exact here, a decimal string in Redis and in
-- the arguments and replies.

local E = 1000000000000
local ZERO = {0, 0}
local MAX64 = {9223372, 36854775807} -- math.MaxInt64, where sat saturates
local MAXSUM = {9223372036854, 775807999999} -- money.Max in pico-dollars
local B = 60 -- buckets per window, as limits.DefaultBuckets
-- nowStr is the call's time (Unix milliseconds): when a counter or a
-- budget state it makes was made ('c').
local nowStr

local function num(s)
  if not s or s == '' then return {0, 0} end
  local n = #s
  if n <= 12 then return {0, tonumber(s)} end
  return {tonumber(string.sub(s, 1, n - 12)), tonumber(string.sub(s, n - 11))}
end
local function str(a)
  if a[1] < 0 then return '0' end -- never stored or told negative
  if a[1] == 0 then return string.format('%d', a[2]) end
  return string.format('%d%012d', a[1], a[2])
end
local function add(a, b)
  local h, l = a[1] + b[1], a[2] + b[2]
  if l >= E then h, l = h + 1, l - E end
  return {h, l}
end
local function sub(a, b)
  local h, l = a[1] - b[1], a[2] - b[2]
  if l < 0 then h, l = h - 1, l + E end
  return {h, l}
end
local function cmp(a, b)
  if a[1] ~= b[1] then if a[1] < b[1] then return -1 end return 1 end
  if a[2] ~= b[2] then if a[2] < b[2] then return -1 end return 1 end
  return 0
end
local function satadd(a, b) -- sat.Add, for amounts >= 0
  local r = add(a, b)
  if cmp(r, MAX64) > 0 then return MAX64 end
  return r
end
local function sumadd(a, b) -- money.Sum.Add
  local r = add(a, b)
  if cmp(r, MAXSUM) > 0 then return MAXSUM end
  return r
end
local function floor0(a) -- max(a, 0)
  if a[1] < 0 then return ZERO end
  return a
end
local function iszero(a) return a[1] == 0 and a[2] == 0 end

-- The time: the server's (TIME) or the caller's, as seconds and
-- nanoseconds.
local function clock(mode, s, n)
  if mode == 's' then
    local t = redis.call('TIME')
    return tonumber(t[1]), tonumber(t[2]) * 1000
  end
  return tonumber(s), tonumber(n)
end

-- Windows. A counter is a hash: 'h', the newest bucket index it has seen,
-- 't', the sum of its buckets in the window (saturating, as
-- limits.Counters keeps it), 'c', when it was made (Redis's clock), and
-- per bucket index j (whose width is ws
-- seconds) its amount. A call reads the head and the total, and a bucket
-- only when it needs it: those leaving as the window moves, the one it
-- counts in; all of them only for a refusal's retry-after, a reset
-- behind an empty newest bucket, or a saturated total (recounted, as
-- limits does).
local counters = {}

-- full reads every bucket of c not read yet.
local function full(c)
  if c.all then return end
  local raw = redis.call('HGETALL', c.key)
  for i = 1, #raw, 2 do
    local f = raw[i]
    if f ~= 'h' and f ~= 't' and f ~= 'c' then
      local j = tonumber(f)
      if c.b[j] == nil and not c.gone[j] then c.b[j] = num(raw[i + 1]) end
    end
  end
  c.all = true
end

-- recount sets c's total from its buckets in the window.
local function recount(c)
  full(c)
  local t = ZERO
  for j, a in pairs(c.b) do
    if j >= c.head - B and j <= c.head then t = satadd(t, a) end
  end
  c.t, c.tdirty = t, true
end

local function load(key, ws, idx)
  local c = counters[key]
  if c then return c end
  -- The head, the total, and the bucket this call counts in (at idx,
  -- the newest unless the window is ahead of this clock).
  local v = redis.call('HMGET', key, 'h', 't', string.format('%d', idx))
  c = {key = key, ws = ws, b = {}, dirty = {}, gone = {}, pend = ZERO}
  counters[key] = c
  if v[1] then
    c.head = tonumber(v[1])
    if idx >= c.head - B then
      c.b[idx] = ZERO
      if v[3] then c.b[idx] = num(v[3]) end
    end
    if v[2] then c.t = num(v[2]) else recount(c) end
  else
    -- new: as limits' newCounter
    c.head, c.new, c.t, c.all = idx, true, ZERO, true
  end
  return c
end

-- bucket is the amount in c's bucket j.
local function bucket(c, j)
  local a = c.b[j]
  if a then return a end
  if c.all or c.gone[j] then return ZERO end
  local v = redis.call('HGET', c.key, string.format('%d', j))
  a = ZERO
  if v then a = num(v) end
  c.b[j] = a
  return a
end

-- advance moves c so that idx is its newest bucket (never backwards),
-- taking the buckets that left — those before idx - B — out of its total.
local function advance(c, idx)
  if idx <= c.head then return c.head end
  local saturated = cmp(c.t, MAX64) == 0
  local from, to = c.head - B, math.min(c.head, idx - B - 1)
  if to >= from then
    if not c.all then
      local fs = {}
      for j = from, to do
        if c.b[j] == nil and not c.gone[j] then fs[#fs + 1] = string.format('%d', j) end
      end
      if #fs > 0 then
        local vs = redis.call('HMGET', c.key, unpack(fs))
        for i, f in ipairs(fs) do
          if vs[i] then c.b[tonumber(f)] = num(vs[i]) end
        end
      end
    end
    for j = from, to do
      local a = c.b[j]
      if a and not iszero(a) then
        c.t = sub(c.t, a)
        c.gone[j] = true
      end
      c.b[j] = nil
      c.dirty[j] = nil
    end
    c.tdirty = true
  end
  c.head = idx
  c.moved = true
  if saturated then recount(c) end
  return idx
end

local function total(c) return c.t end

-- addAt counts amt in c's bucket j, both saturating (limits' add).
local function addAt(c, j, amt)
  if iszero(amt) then return end
  c.b[j] = satadd(bucket(c, j), amt)
  c.dirty[j] = true
  c.gone[j] = nil
  c.t, c.tdirty = satadd(c.t, amt), true
end

-- takeAt takes up to amt back from c's bucket j, never below zero
-- (limits' Adjust), recounting a saturated total.
local function takeAt(c, j, amt)
  local a = bucket(c, j)
  local take = amt
  if cmp(take, a) > 0 then take = a end
  if iszero(take) then return end
  local saturated = cmp(c.t, MAX64) == 0
  c.b[j] = sub(a, take)
  c.dirty[j] = true
  c.t, c.tdirty = sub(c.t, take), true
  if saturated then recount(c) end
end

-- ns is how long from (s, n) until bucket j has left the window of c.
local function leaves(c, j, s, n)
  return ((j + B + 1) * c.ws - s) * 1000000000 - n
end

local function retryAfter(c, excess, s, n)
  full(c)
  local freed = ZERO
  for j = c.head - B, c.head do
    local a = c.b[j]
    if a then
      freed = satadd(freed, a)
      if cmp(freed, excess) >= 0 then return leaves(c, j, s, n) end
    end
  end
  return leaves(c, c.head, s, n)
end

local function resetAfter(c, s, n)
  if iszero(c.t) then return 0 end
  if iszero(bucket(c, c.head)) then full(c) end
  for j = c.head, c.head - B, -1 do
    local a = c.b[j]
    if a and not iszero(a) then
      local d = leaves(c, j, s, n)
      if d < 0 then return 0 end
      return d
    end
  end
  return 0
end

-- save writes back every counter changed: its head, its changed buckets,
-- and an expiry a bucket after all it holds has left.
local function save()
  for key, c in pairs(counters) do
    local changed = c.moved or c.tdirty
    local args = {}
    for j, _ in pairs(c.dirty) do
      local a = c.b[j]
      if a and not iszero(a) then
        args[#args + 1] = string.format('%d', j); args[#args + 1] = str(a)
      else
        c.gone[j] = true
      end
      changed = true
    end
    if changed then
      local del = {}
      for j, _ in pairs(c.gone) do del[#del + 1] = string.format('%d', j) end
      if #del > 0 then redis.call('HDEL', key, unpack(del)) end
      -- The head and the expiry change only when the window moves (or is
      -- new): a key expires a bucket after its newest bucket leaves.
      if c.moved or c.new then
        args[#args + 1] = 'h'; args[#args + 1] = string.format('%d', c.head)
      end
      if c.tdirty or c.new then
        args[#args + 1] = 't'; args[#args + 1] = str(c.t)
      end
      if c.new then
        args[#args + 1] = 'c'; args[#args + 1] = nowStr
      end
      if #args > 0 then redis.call('HSET', key, unpack(args)) end
      if c.moved or c.new then redis.call('PEXPIRE', key, (B + 2) * c.ws * 1000) end
      -- Written: a later save writes only what changes after this one.
      c.dirty, c.gone, c.moved, c.tdirty, c.new = {}, {}, false, false, false
    end
  end
end

-- adjust is limits.Counters.Adjust: a use above the reservation counted
-- now, a refund taken from the bucket it went to while that is in the
-- window, never below zero.
local function adjust(key, ws, atIdx, nowIdx, delta, negative)
  if iszero(delta) then return end
  local c = load(key, ws, nowIdx)
  local head = advance(c, nowIdx)
  if not negative then
    addAt(c, head, delta)
  elseif atIdx >= head - B and atIdx <= head then
    takeAt(c, atIdx, delta)
  end
end

-- Holds: a reservation's record, a hash beside the org's hold set (a
-- sorted set scored by when the hold is next due: released at its
-- admission plus the ttl, dropped a day after that). Fields: at_s, at_n,
-- cost, a0..a3 (amounts by kind), nt, then tk<i>/tw<i>/tq<i> (a token
-- window's key, bucket width and kind), nb, then bk<i> (a budget state
-- reserved against) and bs<i> (the start of its period then), x
-- (released).
local DAY_MS = 86400000

-- unreserve takes cost back from what the budget state key reserves, if
-- it still holds the period that began at start (a period that has ended
-- was replaced by the next one, which never held this reservation).
local function unreserve(key, start, cost)
  local st = redis.call('HMGET', key, 's', 'rs')
  if st[1] and st[1] == start then
    redis.call('HSET', key, 'rs', str(floor0(sub(num(st[2]), cost))))
  end
end

local function release(hkey, nowS, nowN)
  local f = redis.call('HGETALL', hkey)
  local h = {}
  for i = 1, #f, 2 do h[f[i]] = f[i + 1] end
  if h.x == '1' or not h.at_s then return h end
  local amounts = {num(h.a0), num(h.a1), num(h.a2), num(h.a3)}
  for i = 1, tonumber(h.nt or '0') do
    local ws = tonumber(h['tw' .. i])
    local q = tonumber(h['tq' .. i])
    adjust(h['tk' .. i], ws, math.floor(tonumber(h.at_s) / ws), math.floor(nowS / ws), amounts[q + 1], true)
  end
  local cost = num(h.cost)
  for i = 1, tonumber(h.nb or '0') do
    unreserve(h['bk' .. i], h['bs' .. i], cost)
  end
  return h
end

-- sweep releases the holds of the org due by nowMs (at most 32 a call),
-- keeping each released one, empty, for a day; and drops those due
-- again.
local function sweep(holds, nowS, nowN)
  local nowMs = nowS * 1000 + math.floor(nowN / 1000000)
  local due = redis.call('ZRANGEBYSCORE', holds, '-inf', string.format('%d', nowMs), 'LIMIT', 0, 32)
  for _, id in ipairs(due) do
    local hkey = holds .. ':' .. id
    local x = redis.call('HGET', hkey, 'x')
    if x == '1' or not x then
      redis.call('DEL', hkey)
      redis.call('ZREM', holds, id)
    else
      release(hkey, nowS, nowN)
      redis.call('HSET', hkey, 'x', '1')
      redis.call('ZADD', holds, nowMs + DAY_MS, id)
      redis.call('PEXPIRE', hkey, 2 * DAY_MS)
    end
  end
  -- The refunds are written now: the call may end early (asking for a
  -- seed, say), and a released hold is never released again.
  if #due > 0 then save() end
end

-- Window demands in ARGV from position p: per demand its bucket width
-- (seconds), limit, amount and kind ('r' a request limit, 0..3 a token
-- kind or the cost). evaluate is limits.Counters.admit.
local function demands(p, n, keyAt)
  local ds = {}
  for i = 1, n do
    local q = p + (i - 1) * 4
    ds[i] = {key = KEYS[keyAt + i - 1], ws = tonumber(ARGV[q]), limit = num(ARGV[q + 1]), amount = num(ARGV[q + 2]), kind = ARGV[q + 3]}
  end
  return ds
end

local function evaluate(ds, s, n)
  for _, d in ipairs(ds) do
    d.idx = math.floor(s / d.ws)
    d.c = load(d.key, d.ws, d.idx)
  end
  for _, d in ipairs(ds) do
    advance(d.c, d.idx)
    d.c.pend = ZERO
  end
  local admitted, denied, ra, impossible = true, 0, 0, false
  for i, d in ipairs(ds) do
    local c = d.c
    local room = sub(d.limit, c.t)
    local fits = cmp(c.pend, room) <= 0 and cmp(d.amount, sub(room, c.pend)) <= 0
    c.pend = satadd(c.pend, d.amount)
    if not fits then
      local first = admitted
      admitted = false
      if cmp(c.pend, d.limit) > 0 then
        if not impossible then impossible, denied, ra = true, i, 0 end
      elseif not impossible then
        -- total + pend - limit, exact (pend <= limit here): a
        -- saturated sum would understate it.
        local r = retryAfter(c, sub(c.t, sub(d.limit, c.pend)), s, n)
        if first or r > ra then denied, ra = i, r end
      end
    end
  end
  if admitted then
    for _, d in ipairs(ds) do
      local c = d.c
      if not iszero(c.pend) then
        addAt(c, c.head, c.pend)
        c.pend = ZERO
      end
    end
  end
  return admitted, denied, ra, impossible
end

local function windowReply(ds, s, n, out)
  for _, d in ipairs(ds) do
    out[#out + 1] = str(floor0(sub(d.limit, total(d.c))))
    out[#out + 1] = string.format('%d', resetAfter(d.c, s, n))
  end
  return out
end

-- existing is the budget states among KEYS[from .. from+n-1] that exist,
-- by the org's registry of them (one call, not one per key).
local function existing(from, n)
  if n == 0 then return {} end
  local ks = {}
  for i = 1, n do ks[i] = KEYS[from + i - 1] end
  local have = redis.call('HMGET', KEYS[1] .. ':states', unpack(ks))
  local out = {}
  for i = 1, n do
    if have[i] then out[#out + 1] = ks[i] end
  end
  return out
end

-- covers reports whether a budget state's period (st: s, e) holds the
-- time at (seconds).
local function covers(st, at)
  return at >= tonumber(st[1]) and (st[2] == '' or at < tonumber(st[2]))
end

-- charge adds cost to what each budget state among KEYS[from ..
-- from+n-1] spent, where the state exists and takes(key, st) — st its
-- s, e, sp and c — says it counts the cost.
local function charge(from, n, cost, takes)
  for _, key in ipairs(existing(from, n)) do
    local st = redis.call('HMGET', key, 's', 'e', 'sp', 'c')
    if st[1] and takes(key, st) then
      redis.call('HSET', key, 'sp', str(sumadd(num(st[3]), cost)))
    end
  end
end

local mode = ARGV[1]
local s, n = clock(ARGV[2], ARGV[3], ARGV[4])
local holds = KEYS[1]
local now = {string.format('%d', s), string.format('%d', n)}
nowStr = string.format('%d', s * 1000 + math.floor(n / 1000000))

if mode == 'count' then
  -- ARGV[5]: the number of windows, then the windows (amount 1 each).
  local ds = demands(6, tonumber(ARGV[5]), 2)
  local admitted, denied, ra, impossible = evaluate(ds, s, n)
  save()
  if not admitted then
    return {'window', now[1], now[2], tostring(denied), string.format('%d', ra), impossible and '1' or '0'}
  end
  return {'ok', now[1], now[2]}
end

if mode == 'admit' then
  -- ARGV: 5 count-request flag, 6 hold id, 7 ttl ms, 8 cost (pico-dollars,
  -- a money.Sum), 9..12 amounts by kind, 13 windows (nw), 14 budgets
  -- (nb), 15 the principal's request windows among the first windows
  -- (np); then 4 per window, then 4 per budget: the budget in
  -- pico-dollars, its period's start and end (seconds; end '' for
  -- lifetime), the seed ('' if the caller has none); then per window its
  -- seed from the ledger ('?' if the caller has none: rolling budgets).
  local nw, nb, np = tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15])
  sweep(holds, s, n)
  local cost = num(ARGV[8])
  local bp = 16 + nw * 4
  -- A rolling budget's window Redis lacks (never used, idle past its
  -- window, or lost) starts from the ledger: the caller sends its
  -- buckets ("j:amount;…", '?' not read yet) after the budgets. A window
  -- that is simply empty costs a read of the ledger once.
  local wseeds, wneed = {}, {}
  for i = 1, nw do
    local q = 16 + (i - 1) * 4
    if ARGV[q + 3] == '3' then
      local key = KEYS[1 + i]
      if redis.call('EXISTS', key) == 0 then
        local seed = ARGV[bp + nb * 4 + i - 1]
        if seed == '?' then wneed[#wneed + 1] = tostring(i) else wseeds[i] = seed end
      end
    end
  end
  if #wneed > 0 then
    local out = {'wseed', now[1], now[2]}
    for _, i in ipairs(wneed) do out[#out + 1] = i end
    return out
  end
  for i, seed in pairs(wseeds) do
    local ws = tonumber(ARGV[16 + (i - 1) * 4])
    local idx = math.floor(s / ws)
    local c = load(KEYS[1 + i], ws, idx)
    for j, a in string.gmatch(seed, '(-?%d+):(%d+)') do
      j = tonumber(j)
      if j >= idx - B and j <= idx then addAt(c, j, num(a)) end
    end
  end
  local states, need = {}, {}
  for i = 1, nb do
    local q = bp + (i - 1) * 4
    local key = KEYS[1 + nw + i]
    local st = redis.call('HMGET', key, 's', 'e', 'sp', 'rs')
    local start, stop, seed = tonumber(ARGV[q + 1]), ARGV[q + 2], ARGV[q + 3]
    if st[1] and (st[2] == '' or s < tonumber(st[2])) then
      states[i] = {key = key, s = st[1], e = st[2], sp = num(st[3]), rs = num(st[4])}
    elseif s < start or (stop ~= '' and s >= tonumber(stop)) then
      return {'clock', now[1], now[2]}
    elseif seed == '' then
      need[#need + 1] = tostring(i)
    else
      states[i] = {key = key, s = ARGV[q + 1], e = stop, sp = num(seed), rs = ZERO, new = true}
    end
  end
  if #need > 0 then
    local out = {'seed', now[1], now[2]}
    for _, i in ipairs(need) do out[#out + 1] = i end
    return out
  end
  local lefts = {}
  for i = 1, nb do
    local st = states[i]
    if st.new then
      redis.call('HSET', st.key, 's', st.s, 'e', st.e, 'sp', str(st.sp), 'rs', '0', 'c', nowStr)
    end
    -- Registered on every use, not only when made: a settle charges the
    -- states the registry lists.
    redis.call('HSETNX', holds .. ':states', st.key, '1')
    local budget = num(ARGV[bp + (i - 1) * 4])
    local left = floor0(sub(floor0(sub(budget, st.sp)), st.rs))
    if not iszero(cost) and (iszero(left) or cmp(cost, left) > 0) then
      -- Refused: give back what ext_authz counted.
      if ARGV[5] == '0' then
        for k = 1, np do
          local ws = tonumber(ARGV[16 + (k - 1) * 4])
          local idx = math.floor(s / ws)
          adjust(KEYS[1 + k], ws, idx, idx, {0, 1}, true)
        end
      end
      save()
      return {'budget', now[1], now[2], tostring(i), str(left), st.s, st.e}
    end
    lefts[i] = left
  end
  local ds = demands(16, nw, 2)
  local admitted, denied, ra, impossible = evaluate(ds, s, n)
  if not admitted then
    if ARGV[5] == '0' then
      for k = 1, np do
        local d = ds[k]
        adjust(d.key, d.ws, d.idx, d.idx, {0, 1}, true)
      end
    end
    save()
    return {'window', now[1], now[2], tostring(denied), string.format('%d', ra), impossible and '1' or '0'}
  end
  -- Reserve, and record the hold.
  local id = ARGV[6]
  local hkey = holds .. ':' .. id
  local f = {'at_s', now[1], 'at_n', now[2], 'cost', str(cost), 'a0', ARGV[9], 'a1', ARGV[10], 'a2', ARGV[11], 'a3', ARGV[12]}
  local nt = 0
  for _, d in ipairs(ds) do
    if d.kind ~= 'r' then
      nt = nt + 1
      f[#f + 1] = 'tk' .. nt; f[#f + 1] = d.key
      f[#f + 1] = 'tw' .. nt; f[#f + 1] = tostring(d.ws)
      f[#f + 1] = 'tq' .. nt; f[#f + 1] = d.kind
    end
  end
  f[#f + 1] = 'nt'; f[#f + 1] = tostring(nt)
  f[#f + 1] = 'nb'; f[#f + 1] = tostring(nb)
  for i = 1, nb do
    local st = states[i]
    st.rs = sumadd(st.rs, cost)
    redis.call('HSET', st.key, 'rs', str(st.rs))
    f[#f + 1] = 'bk' .. i; f[#f + 1] = st.key
    f[#f + 1] = 'bs' .. i; f[#f + 1] = st.s
  end
  f[#f + 1] = 'x'; f[#f + 1] = '0'
  save()
  redis.call('HSET', hkey, unpack(f))
  local ttl = tonumber(ARGV[7])
  redis.call('ZADD', holds, s * 1000 + math.floor(n / 1000000) + ttl, id)
  redis.call('PEXPIRE', hkey, ttl + 2 * DAY_MS)
  local out = {'ok', now[1], now[2]}
  windowReply(ds, s, n, out)
  for i = 1, nb do out[#out + 1] = str(lefts[i]) end
  return out
end

if mode == 'settle' then
  -- ARGV: 5 hold id, 6..9 used by kind, 10 the number of budget states
  -- that may count the cost (KEYS from 2): every period kind of every
  -- scope. The cost counts in the periods that hold the admission's
  -- time, and in those the hold reserved against.
  sweep(holds, s, n)
  local hkey = holds .. ':' .. ARGV[5]
  local f = redis.call('HGETALL', hkey)
  if #f == 0 then return {'gone', now[1], now[2]} end
  local h = {}
  for i = 1, #f, 2 do h[f[i]] = f[i + 1] end
  redis.call('DEL', hkey)
  redis.call('ZREM', holds, ARGV[5])
  local used = {num(ARGV[6]), num(ARGV[7]), num(ARGV[8]), num(ARGV[9])}
  local reserved = {num(h.a0), num(h.a1), num(h.a2), num(h.a3)}
  local expired = h.x == '1'
  local atS = tonumber(h.at_s)
  for i = 1, tonumber(h.nt or '0') do
    local ws = tonumber(h['tw' .. i])
    local q = tonumber(h['tq' .. i]) + 1
    local r = reserved[q]
    if expired then r = ZERO end
    local delta = sub(used[q], r)
    local negative = delta[1] < 0
    if negative then delta = sub(r, used[q]) end
    adjust(h['tk' .. i], ws, math.floor(atS / ws), math.floor(s / ws), delta, negative)
  end
  local mine = {}
  local hcost = num(h.cost)
  for i = 1, tonumber(h.nb or '0') do
    local bk, bs = h['bk' .. i], h['bs' .. i]
    mine[bk] = bs
    if not expired then unreserve(bk, bs, hcost) end
  end
  local cost = used[4]
  if not iszero(cost) then
    charge(2, tonumber(ARGV[10]), cost, function(key, st)
      return covers(st, atS) or mine[key] == st[1]
    end)
  end
  save()
  return {'ok', now[1], now[2]}
end

if mode == 'budgets' then
  -- ARGV: 5 rolling windows (nr), 6 budget states (nb); then 4 per
  -- window (KEYS from 2), then the states (KEYS after them).
  sweep(holds, s, n)
  local nr, nb = tonumber(ARGV[5]), tonumber(ARGV[6])
  local ds = demands(7, nr, 2)
  for _, d in ipairs(ds) do
    d.idx = math.floor(s / d.ws)
    d.c = load(d.key, d.ws, d.idx)
    advance(d.c, d.idx)
  end
  local out = {'ok', now[1], now[2]}
  for _, d in ipairs(ds) do
    out[#out + 1] = str(total(d.c))
  end
  for i = 1, nb do
    local st = redis.call('HMGET', KEYS[1 + nr + i], 's', 'e', 'sp', 'rs')
    if st[1] and (st[2] == '' or s < tonumber(st[2])) then
      out[#out + 1] = st[1]; out[#out + 1] = st[2]; out[#out + 1] = st[3]; out[#out + 1] = st[4]
    else
      out[#out + 1] = ''; out[#out + 1] = ''; out[#out + 1] = ''; out[#out + 1] = ''
    end
  end
  save()
  return out
end

if mode == 'reconcile' then
  -- What a request a replica admitted on its own (Redis not answering)
  -- used, counted once by id. ARGV: 5 id, 6 the request's start
  -- (seconds; the replica's clock), 7 how long ago it settled
  -- (milliseconds, the replica's monotonic clock: before, when it
  -- settled, is now less that, by Redis's clock), 8 cost
  -- (pico-dollars), 9 windows (nw), 10 budget states (nb); then 4 per
  -- window (KEYS from 2; amount what it used, 'r' a request window, '3'
  -- a rolling budget), then the states (KEYS after them). A request or
  -- token window counts the use in the bucket of its start while that is
  -- in the window; a rolling budget and a budget period count it only if
  -- Redis made them before it settled (one made since started from the
  -- ledger, which holds the request), the period only if it holds the
  -- start.
  local applied = holds .. ':applied:' .. ARGV[5]
  if not redis.call('SET', applied, '1', 'NX', 'PX', 2 * DAY_MS) then
    return {'dup', now[1], now[2]}
  end
  local atS, cost = tonumber(ARGV[6]), num(ARGV[8])
  local before = tonumber(nowStr) - tonumber(ARGV[7])
  local nw, nb = tonumber(ARGV[9]), tonumber(ARGV[10])
  local ds = demands(11, nw, 2)
  for _, d in ipairs(ds) do
    local made = true
    if d.kind == '3' then
      local v = redis.call('HMGET', d.key, 'h', 'c')
      made = v[1] and (not v[2] or tonumber(v[2]) <= before)
    end
    if made then
      local c = load(d.key, d.ws, math.floor(s / d.ws))
      local head = advance(c, math.floor(s / d.ws))
      local j = math.min(math.floor(atS / d.ws), head)
      if j >= head - B then addAt(c, j, d.amount) end
    end
  end
  if not iszero(cost) then
    charge(2 + nw, nb, cost, function(_, st)
      return covers(st, atS) and (not st[4] or tonumber(st[4]) <= before)
    end)
  end
  save()
  return {'ok', now[1], now[2]}
end

if mode == 'ping' then
  return {'ok', now[1], now[2]}
end

return redis.error_reply('sluice admission: unknown mode ' .. tostring(mode))

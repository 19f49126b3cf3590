"""The Lua scripts of the Redis message and topic logs (``push_logs``). Each runs on ONE
slot: users' ``mlog:{uid}`` + ``mstream:{uid}`` pairs (on a cluster, users whose tags share a slot:
Pipelines.slot_groups), or ``{topics}:meta`` + ``{topics}:log`` (the counters hash, then the
stream), so they work alike on a single Redis and a cluster. Numbers in ARGV are decimal
strings; times are ms since the epoch.

Incarnations: every stream records the ``run_id`` of the Redis process it was last used on (INFO
server, read once per script run, inside it, so no command can slip between a restart and its
detection; a restart or a failover changes it) and the highest generation a caller passed
(``{push}:generation``, raised when appends were lost while Redis was unreachable; it only grows).
A stream used on another process, or by a caller of a higher generation, may have lost entries (a
restart from an older dump, a replica that lagged, appends that failed): it starts a new epoch, so
its client is told (``reset``) instead of having new messages taken for old offsets. A caller of a
lower generation (one not yet synced) changes nothing. A stream that records no run (written
before incarnations) adopts the current one.

Trimming reads a user stream's oldest entry only when the stream is longer than its bound or its
``t0`` (a time no later than the oldest entry's, kept in ``mlog:{uid}``: set when a trim reads the
oldest entry; an ack's XTRIM leaves it, still a bound) is older than the age bound.
"""

from __future__ import annotations

from hongbao.core.adapters.redis.client import LuaScript

# run_id() -> the run_id of this Redis process.
# ensure(meta, prefix, new_epoch, gen, run) -> seq, epoch, fresh, held: fresh 0 kept, 1 new stream, 2 new
# epoch over a bad seq, 3 new epoch: used on another Redis process or by a higher generation; held: the
# stream's nonce, t0 and x fields (false when absent; none when fresh).
# claim(...) -> 1 write the batch [start, start + count), 2 already written (a retry), 0 offsets taken.
_COMMON = """
local function run_id()
  return string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
end
local function ensure(meta, p, new_epoch, gen, run)
  local v = redis.call('HMGET', meta, p .. 'run', p .. 'gen', p .. 'epoch', p .. 'seq',
    p .. 'nonce', p .. 't0', p .. 'x')
  local was_run, epoch = v[1], v[3]
  local g = tonumber(gen) or 0
  local was_gen = tonumber(v[2] or '0') or 0
  local moved = (was_run and was_run ~= run) or g > was_gen
  if was_run ~= run or g > was_gen then
    redis.call('HSET', meta, p .. 'run', run, p .. 'gen', math.max(g, was_gen))
  end
  local seq = tonumber(v[4] or '0')
  if epoch and seq and not moved then
    return seq, epoch, 0, {nonce = v[5], t0 = tonumber(v[6] or ''), x = tonumber(v[7] or '')}
  end
  local fresh = 1
  if epoch and not seq then fresh = 2 elseif epoch then fresh = 3 end
  redis.call('HSET', meta, p .. 'epoch', new_epoch, p .. 'seq', 0)
  return 0, new_epoch, fresh, {}
end
local function user_ensure(meta, stream, new_epoch, gen, run)
  local seq, epoch, fresh, held = ensure(meta, '', new_epoch, gen, run)
  if fresh ~= 0 then
    redis.call('DEL', stream)
    redis.call('HDEL', meta, 'acked', 't0', 'x')
  end
  return seq, epoch, fresh, held
end
local function claim(p, seq, epoch, start, count, want_epoch, nonce)
  local last = start + count - 1
  if epoch == want_epoch and seq == last and redis.call('HGET', KEYS[1], p .. 'nonce') == nonce then return 2 end
  if epoch ~= want_epoch or seq + 1 ~= start then return 0 end
  redis.call('HSET', KEYS[1], p .. 'seq', last, p .. 'nonce', nonce)
  return 1
end
"""
# Drop the oldest entries of a user's stream while it is longer than maxlen or older than cutoff
# (ms); reads nothing when the length is within maxlen and t0 (meta's) within cutoff.
_TRIM = """
local function trim(meta, stream, maxlen, cutoff, t0)
  local len = redis.call('XLEN', stream)
  if len <= maxlen and t0 and t0 >= cutoff then return end
  local kept = nil
  while len > 0 do
    local first = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)[1]
    local t = nil
    for i = 1, #first[2], 2 do
      if first[2][i] == 't' then t = tonumber(first[2][i + 1]) end
    end
    if len <= maxlen and t and t >= cutoff then
      kept = t
      break
    end
    redis.call('XDEL', stream, first[1])
    len = len - 1
  end
  if kept then redis.call('HSET', meta, 't0', kept) else redis.call('HDEL', meta, 't0') end
end
"""
#: KEYS mlog, mstream of each user. ARGV nonce, now_ms, maxlen, cutoff_ms, ttl_ms, new_epoch,
#: generation, then per user (in KEYS' order) its message count n and n heads
#: -> per user {first offset, epoch, fresh}. A user's message i (1-based) takes offset seq + i and
#: the body ``head .. ',"offset":N,"epoch":"E"}'`` (hongbao.core.push_ports.place: epochs are
#: URL-safe, so quoting them is their JSON). The same nonce again on an unchanged stream is a retry
#: of a write already done: nothing is written to it, and the offsets it took are answered. A
#: user's keys are set to expire 1.1 x ttl_ms later when ttl_ms / 10 has passed since meta's ``x``.
USER_APPEND = LuaScript(
    _COMMON
    + _TRIM
    + """
local run = run_id()
local now, maxlen, cutoff, ttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local lasting = ttl + math.floor(ttl / 10)
local placed = {}
local at = 8
for u = 1, #KEYS / 2 do
  local meta, stream = KEYS[2 * u - 1], KEYS[2 * u]
  local count = tonumber(ARGV[at])
  local seq, epoch, fresh, held = user_ensure(meta, stream, ARGV[6], ARGV[7], run)
  if fresh == 0 and seq >= count and held.nonce == ARGV[1] then
    placed[u] = {seq - count + 1, epoch, fresh}
  else
    local tail = ',"epoch":"' .. epoch .. '"}'
    for i = 1, count do
      local offset = string.format('%d', seq + i)
      redis.call('XADD', stream, offset .. '-0', 't', ARGV[2], 'b', ARGV[at + i] .. ',"offset":' .. offset .. tail)
    end
    if held.x and now - held.x <= ttl / 10 then
      redis.call('HSET', meta, 'seq', seq + count, 'nonce', ARGV[1])
    else
      redis.call('HSET', meta, 'seq', seq + count, 'nonce', ARGV[1], 'x', ARGV[2])
      redis.call('PEXPIRE', meta, lasting)
      redis.call('PEXPIRE', stream, lasting)
    end
    trim(meta, stream, maxlen, cutoff, held.t0)
    placed[u] = {seq + 1, epoch, fresh}
  end
  at = at + count + 1
end
return placed
"""
)
#: KEYS mlog, mstream. ARGV offset, epoch: while the stream is of that epoch, acked = max(acked,
#: min(offset, seq)) and drop what it covers; an ack of another epoch (the stream renewed since) names
#: offsets of messages that are gone, and changes nothing.
USER_ACK = LuaScript("""
local v = redis.call('HMGET', KEYS[1], 'seq', 'epoch', 'acked')
local seq = tonumber(v[1] or '')
if not seq or v[2] ~= ARGV[2] then return 0 end
local acked = math.max(tonumber(v[3] or '0') or 0, math.min(tonumber(ARGV[1]), seq))
redis.call('HSET', KEYS[1], 'acked', acked)
redis.call('XTRIM', KEYS[2], 'MINID', (acked + 1) .. '-0')
return 1
""")
#: KEYS mlog, mstream. ARGV new_epoch, cutoff_ms, maxlen, client epoch ('' none), after ('' none), generation
#: -> {epoch, complete 0/1, XRANGE entries, last offset}
USER_REPLAY = LuaScript(
    _COMMON
    + _TRIM
    + """
local seq, epoch, _, held = user_ensure(KEYS[1], KEYS[2], ARGV[1], ARGV[6], run_id())
trim(KEYS[1], KEYS[2], tonumber(ARGV[3]), tonumber(ARGV[2]), held.t0)
local base = tonumber(ARGV[5]) or tonumber(redis.call('HGET', KEYS[1], 'acked') or '0') or 0
local same = (ARGV[4] == '' or ARGV[4] == epoch) and base <= seq
local start = '-'
if same then start = (base + 1) .. '-0' end
local entries = redis.call('XRANGE', KEYS[2], start, '+')
local complete = 0
if same and #entries == seq - base then complete = 1 end
return {epoch, complete, entries, seq}
"""
)
#: KEYS meta, stream. ARGV prefix, new_epoch, generation -> {next offset, epoch, fresh}
TOPIC_PEEK = LuaScript(
    _COMMON
    + """
local seq, epoch, fresh = ensure(KEYS[1], ARGV[1], ARGV[2], ARGV[3], run_id())
return {seq + 1, epoch, fresh}
"""
)
#: KEYS meta, stream. ARGV offset, epoch, nonce, body, prefix, maxlen, new_epoch, topic, generation
#: -> {1} written, or {0, next offset, epoch} when the offset was taken.
TOPIC_PUT = LuaScript(
    _COMMON
    + """
local seq, epoch = ensure(KEYS[1], ARGV[5], ARGV[7], ARGV[9], run_id())
local offset = tonumber(ARGV[1])
local verdict = claim(ARGV[5], seq, epoch, offset, 1, ARGV[2], ARGV[3])
if verdict == 0 then return {0, seq + 1, epoch} end
if verdict == 1 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[6], '*', 'topic', ARGV[8], 'o', offset, 'e', epoch, 'b', ARGV[4])
end
return {1}
"""
)
#: KEYS generation, the lost stream (one entry per renewed stream, field u: its uid). ARGV the caller's
#: generation, raise (1 or 0), the caller's cursor in the lost stream ("": none yet), the most uids to
#: read -> {the generation now: never lower than either (a Redis restored from an older dump is
#: healed), one higher when raising; run_id; the cursor now (the stream's last id on a first call);
#: the uids of the entries after the old cursor}.
GENERATION = LuaScript("""
local g = math.max(tonumber(redis.call('GET', KEYS[1]) or '0') or 0, tonumber(ARGV[1]))
if ARGV[2] == '1' then g = g + 1 end
redis.call('SET', KEYS[1], g)
local cursor, uids = ARGV[3], {}
if cursor == '' then
  local tail = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
  cursor = tail[1] and tail[1][1] or '0-0'
else
  for _, entry in ipairs(redis.call('XRANGE', KEYS[2], '(' .. cursor, '+', 'COUNT', ARGV[4])) do
    cursor = entry[1]
    uids[#uids + 1] = entry[2][2]
  end
end
return {g, string.match(redis.call('INFO', 'server'), 'run_id:(%w+)'), cursor, uids}
""")
#: KEYS the lost stream. ARGV its approximate length cap, then uids: one entry each.
LOST = LuaScript("""
for i = 2, #ARGV do redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'u', ARGV[i]) end
return #ARGV - 1
""")

"""The Lua scripts of the Redis message and topic logs (``push_logs``). Each runs on ONE
slot: a user's ``mlog:{uid}`` + ``mstream:{uid}``, or ``{topics}:meta`` + ``{topics}:log`` (KEYS[1]
the counters hash, KEYS[2] the stream), so they work alike on a single Redis and a cluster.
Numbers in ARGV are decimal strings; times are ms since the epoch.

Incarnations: every stream records the ``run_id`` of the Redis process it was last used on (INFO
server, read inside the script, so no command can slip between a restart and its detection; a
restart or a failover changes it) and the highest generation a caller passed (``{push}:generation``,
raised when appends were lost while Redis was unreachable; it only grows). A stream used on
another process, or by a caller of a higher generation, may have lost entries (a restart from an
older dump, a replica that lagged, appends that failed): it starts a new epoch, so its client is
told (``reset``) instead of having new messages taken for old offsets. A caller of a lower
generation (one not yet synced) changes nothing. A stream that records no run (written before
incarnations) adopts the current one.
"""

from __future__ import annotations

from hongbao.core.adapters.redis.client import LuaScript

# ensure(meta, prefix, new_epoch, gen) -> seq, epoch, fresh: 0 kept, 1 new stream, 2 new epoch over a bad
# seq, 3 new epoch: used on another Redis process or by a higher generation.
# claim(...) -> 1 write the batch [start, start + count), 2 already written (a retry), 0 offsets taken.
_COMMON = """
local function ensure(meta, p, new_epoch, gen)
  local run = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
  local g = tonumber(gen) or 0
  local was_run = redis.call('HGET', meta, p .. 'run')
  local was_gen = tonumber(redis.call('HGET', meta, p .. 'gen') or '0') or 0
  local moved = (was_run and was_run ~= run) or g > was_gen
  if was_run ~= run or g > was_gen then
    redis.call('HSET', meta, p .. 'run', run, p .. 'gen', math.max(g, was_gen))
  end
  local epoch = redis.call('HGET', meta, p .. 'epoch')
  local seq = tonumber(redis.call('HGET', meta, p .. 'seq') or '0')
  if epoch and seq and not moved then return seq, epoch, 0 end
  local fresh = 1
  if epoch and not seq then fresh = 2 elseif epoch then fresh = 3 end
  redis.call('HSET', meta, p .. 'epoch', new_epoch, p .. 'seq', 0)
  return 0, new_epoch, fresh
end
local function user_ensure(new_epoch, gen)
  local seq, epoch, fresh = ensure(KEYS[1], '', new_epoch, gen)
  if fresh ~= 0 then
    redis.call('DEL', KEYS[2])
    redis.call('HDEL', KEYS[1], 'acked')
  end
  return seq, epoch, fresh
end
local function claim(p, seq, epoch, start, count, want_epoch, nonce)
  local last = start + count - 1
  if epoch == want_epoch and seq == last and redis.call('HGET', KEYS[1], p .. 'nonce') == nonce then return 2 end
  if epoch ~= want_epoch or seq + 1 ~= start then return 0 end
  redis.call('HSET', KEYS[1], p .. 'seq', last, p .. 'nonce', nonce)
  return 1
end
"""
# Drop the oldest entries while the stream is longer than maxlen or older than cutoff (ms).
_TRIM = """
local function trim(maxlen, cutoff)
  local len = redis.call('XLEN', KEYS[2])
  while len > 0 do
    local first = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)[1]
    local t = nil
    for i = 1, #first[2], 2 do
      if first[2][i] == 't' then t = tonumber(first[2][i + 1]) end
    end
    if len <= maxlen and t and t >= cutoff then break end
    redis.call('XDEL', KEYS[2], first[1])
    len = len - 1
  end
end
"""
#: KEYS mlog, mstream. ARGV nonce, now_ms, maxlen, cutoff_ms, ttl_ms, new_epoch, generation, head...
#: -> {first offset, epoch, fresh}. Message i (1-based) takes offset seq + i and the body
#: ``head .. ',"offset":N,"epoch":"E"}'`` (hongbao.core.push_ports.place: epochs are URL-safe, so
#: quoting them is their JSON). The same nonce again on an unchanged stream is a retry of a write
#: already done: nothing is written, and the offsets it took are answered.
USER_APPEND = LuaScript(
    _COMMON
    + _TRIM
    + """
local seq, epoch, fresh = user_ensure(ARGV[6], ARGV[7])
local count = #ARGV - 7
if fresh == 0 and seq >= count and redis.call('HGET', KEYS[1], 'nonce') == ARGV[1] then
  return {seq - count + 1, epoch, fresh}
end
local tail = ',"epoch":"' .. epoch .. '"}'
for i = 1, count do
  local offset = string.format('%d', seq + i)
  redis.call('XADD', KEYS[2], offset .. '-0', 't', ARGV[2], 'b', ARGV[7 + i] .. ',"offset":' .. offset .. tail)
end
redis.call('HSET', KEYS[1], 'seq', seq + count, 'nonce', ARGV[1])
trim(tonumber(ARGV[3]), tonumber(ARGV[4]))
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return {seq + 1, epoch, fresh}
"""
)
#: KEYS mlog, mstream. ARGV offset: acked = max(acked, min(offset, seq)); drop what it covers.
USER_ACK = LuaScript("""
local seq = tonumber(redis.call('HGET', KEYS[1], 'seq') or '')
if not seq then return 0 end
local acked = math.max(tonumber(redis.call('HGET', KEYS[1], 'acked') or '0') or 0, math.min(tonumber(ARGV[1]), seq))
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
local seq, epoch = user_ensure(ARGV[1], ARGV[6])
trim(tonumber(ARGV[3]), tonumber(ARGV[2]))
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
local seq, epoch, fresh = ensure(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
return {seq + 1, epoch, fresh}
"""
)
#: KEYS meta, stream. ARGV offset, epoch, nonce, body, prefix, maxlen, new_epoch, topic, generation
#: -> {1} written, or {0, next offset, epoch} when the offset was taken.
TOPIC_PUT = LuaScript(
    _COMMON
    + """
local seq, epoch = ensure(KEYS[1], ARGV[5], ARGV[7], ARGV[9])
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

"""The Lua scripts of the shared routing tables (gateway.routing.shared_tables has the keys).

Each is one round trip and runs atomically on the server. Times are the server's clock in
milliseconds (TIME), so gateways need not agree on theirs. Keys are built from the prefix in
ARGV: one server, as deploy/k8s runs it, not a cluster.
"""

from __future__ import annotations

_NOW = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
"""

# A sorted set member added with a score, trimmed to `cap` members by rank, expiring with pins.
_ADD = """
local function add(set, score, member)
  redis.call('ZADD', set, score, member)
  redis.call('ZREMRANGEBYRANK', set, 0, -(cap + 1))
  redis.call('PEXPIRE', set, pin_ttl)
end
"""

# Each usable replica's live lineages and charged checkpoints (gateway.routing.pins, charged),
# trimming as it goes. ARGV[first .. last]: the replicas.
_COUNTS = """
local function counts(first, last)
  local out = {}
  for i = first, last do
    local live, left = prefix .. 'live:' .. ARGV[i], prefix .. 'left:' .. ARGV[i]
    redis.call('ZREMRANGEBYSCORE', live, '-inf', now - pin_ttl)
    local oldest = redis.call('ZRANGE', live, 0, 0, 'WITHSCORES')
    local n, m = redis.call('ZCARD', live), 0
    if oldest[2] then
      redis.call('ZREMRANGEBYSCORE', left, '-inf', '(' .. oldest[2])
      m = redis.call('ZCARD', left)
    else
      redis.call('DEL', left)
    end
    out[#out + 1] = n
    out[#out + 1] = n + m
  end
  return out
end
"""

# Turns that ended: ARGV from `first`, 5 each: lineage ('' none), replica, prompt tokens,
# images, head ('' none). A turn whose pin is still on its replica leaves its tokens there and
# touches the pin (its idle TTL, its last use, its place in the budget sets): the fetch before
# the turn only reads, so a pinned turn's one round trip before its first token is as short as
# it can be. Its head's checkpoint is where it ran (the engine saved it there, or restored and
# so touched it), charged there like a left-behind checkpoint.
_REPORTS = """
local function report(first)
  for i = first, #ARGV, 5 do
    local turn, replica, tokens = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    local images, turn_head = ARGV[i + 3], ARGV[i + 4]
    if turn ~= '' then
      local turn_key = prefix .. 'pin:' .. turn
      local pinned = redis.call('HMGET', turn_key, 'r', 'k')
      if pinned[1] == replica then
        redis.call('HSET', turn_key, 't', tokens, 'i', images, 'u', now)
        redis.call('PEXPIRE', turn_key, pin_ttl)
        add(prefix .. ((pinned[2] == 'side') and 'left:' or 'live:') .. replica, now, turn)
      end
    end
    if turn_head ~= '' then
      local head_key = prefix .. 'head:' .. turn_head
      redis.call('ZADD', head_key, now, replica)
      redis.call('ZREMRANGEBYSCORE', head_key, '-inf', now - head_ttl)
      redis.call('PEXPIRE', head_key, head_ttl)
      add(prefix .. 'left:' .. replica, now, 'head:' .. turn_head)
    end
  end
end
"""

# ARGV: prefix, lineage, pin TTL ms, session ('' none), head ('' none), head TTL ms, count ('1':
# always; else only for a lineage without a pin, or pinned to a replica not listed: what a pick
# that places needs), cap, replica count, replicas to count (_COUNTS), then turns to report
# (_REPORTS): the reports waiting ride along, written before the pin is read. A pinned turn
# where its pin is, the usual one, skips the counting: most of the script's work.
FETCH_LUA = (
    """
local prefix, key, pin_ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local session, head, head_ttl = ARGV[4], ARGV[5], tonumber(ARGV[6])
local cap, replicas = tonumber(ARGV[8]), tonumber(ARGV[9])
"""
    + _NOW
    + _ADD
    + _COUNTS
    + _REPORTS
    + """
report(10 + replicas)
local pin_key = prefix .. 'pin:' .. key
local pin = redis.call('HMGET', pin_key, 'r', 'k', 't', 'i', 'u')
local out = {now, {}, {}, {}, {}, {}}
if pin[1] then
  -- Read only: the turn's report touches it (_REPORTS).
  out[2] = {pin[1], pin[2] or 'main', pin[3] or '0', pin[4] or '', pin[5] or '0'}
else
  -- Only a new lineage needs its session (and the session's main lineage) and its head.
  if session ~= '' then
    local s = redis.call('HMGET', prefix .. 'session:' .. session, 'm', 'h', 'tl', 'r')
    if s[1] or s[4] then
      out[3] = {s[1] or '', s[2] or '', s[3] or '0', s[4] or ''}
      if s[1] and s[1] ~= '' and s[1] ~= key then
        local main_key = prefix .. 'pin:' .. s[1]
        local main = redis.call('HMGET', main_key, 'r', 'k', 't', 'i', 'u')
        if main[1] then
          out[4] = {main[1], main[2] or 'main', main[3] or '0', main[4] or '', main[5] or '0'}
        end
      end
    end
  end
  if head ~= '' then
    local head_key = prefix .. 'head:' .. head
    redis.call('ZREMRANGEBYSCORE', head_key, '-inf', now - head_ttl)
    out[5] = redis.call('ZRANGE', head_key, 0, -1, 'WITHSCORES')
  end
end
local listed = false
for i = 10, 9 + replicas do
  if pin[1] and ARGV[i] == pin[1] then
    listed = true
    break
  end
end
if ARGV[7] == '1' or not listed then
  out[6] = counts(10, 9 + replicas)
end
return out

"""
)

# ARGV: prefix, lineage, pin TTL ms, cap, replica, kind, tokens, images, mode, expected replica,
# leave ('1': a spill leaves its checkpoint charged where it was), turn time (ms, store clock),
# session ('' none), main, main head, main tools, retired count, retired lineages..., replicas
# to count (_COUNTS), after the claim.
# mode: nx (a new pin, or one written through: only if there is none); move (failover, spill:
# only if it is still where this gateway last saw it); newer (a pin made or moved while the
# store was away: only if no turn used the store's pin since this gateway's turn).
CLAIM_LUA = (
    """
local prefix, key, pin_ttl, cap = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local replica, kind, tokens, images = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local mode, expected, leave, turn = ARGV[9], ARGV[10], ARGV[11], tonumber(ARGV[12])
"""
    + _NOW
    + _ADD
    + _COUNTS
    + """
local pin_key = prefix .. 'pin:' .. key
local cur = redis.call('HMGET', pin_key, 'r', 'k', 't', 'i', 'u')
local used = tonumber(cur[5] or '0')
local out
if cur[1] and cur[1] == replica then
  redis.call('PEXPIRE', pin_key, pin_ttl)
  out = {cur[1], 'same', cur[2] or kind, cur[3] or '0', cur[4] or '', used}
elseif cur[1] and (mode == 'nx' or (mode == 'move' and cur[1] ~= expected)
    or (mode == 'newer' and used >= turn)) then
  redis.call('PEXPIRE', pin_key, pin_ttl)
  out = {cur[1], 'adopted', cur[2] or kind, cur[3] or '0', cur[4] or '', used}
else
  if cur[1] then
    if cur[2] ~= 'side' then
      redis.call('ZREM', prefix .. 'live:' .. cur[1], key)
    end
    if leave == '1' and cur[1] ~= replica then
      add(prefix .. 'left:' .. cur[1], now, key)
    end
  end
  local last = (mode == 'newer') and turn or now
  redis.call('HSET', pin_key, 'r', replica, 'k', kind, 't', tokens, 'i', images, 'u', last)
  redis.call('PEXPIRE', pin_key, pin_ttl)
  -- Back where its checkpoint was left: a live pin again.
  redis.call('ZREM', prefix .. 'left:' .. replica, key)
  if kind == 'side' then
    add(prefix .. 'left:' .. replica, now, key)
  else
    add(prefix .. 'live:' .. replica, now, key)
  end
  out = {replica, 'won', kind, tokens, images, last}
  if cur[1] ~= replica then
    -- Heard by every gateway's gateway.routing.moves: its pinned turns of this lineage wait.
    redis.call('PUBLISH', prefix .. 'moves', key .. ' ' .. replica)
  end
end
local retired = tonumber(ARGV[17])
for i = 18, 17 + retired do
  local old = ARGV[i]
  local old_key = prefix .. 'pin:' .. old
  local where = redis.call('HGET', old_key, 'r')
  if where then
    -- Its pin goes; its checkpoint stays charged, from its last use.
    redis.call('DEL', old_key)
    redis.call('PUBLISH', prefix .. 'moves', old .. ' ')
    local live = prefix .. 'live:' .. where
    local used = redis.call('ZSCORE', live, old) or now
    redis.call('ZREM', live, old)
    add(prefix .. 'left:' .. where, used, old)
  end
end
if ARGV[13] ~= '' then
  local session_key = prefix .. 'session:' .. ARGV[13]
  redis.call('HSET', session_key, 'm', ARGV[14], 'h', ARGV[15], 'tl', ARGV[16], 'r', out[1])
  redis.call('PEXPIRE', session_key, pin_ttl)
end
out[7] = now
out[8] = counts(18 + retired, #ARGV)
return out
"""
)

# ARGV: prefix, pin TTL ms, cap, head TTL ms, then turns (_REPORTS): those no fetch carried.
REPORT_LUA = (
    """
local prefix, pin_ttl, cap = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local head_ttl = tonumber(ARGV[4])
"""
    + _NOW
    + _ADD
    + _REPORTS
    + """
report(5)
return 1
"""
)

"""Rate-limit buckets in the fleet's shared store, so a key's limits hold across every gateway.

Each bucket is one key holding the instant (milliseconds, the store's own clock, so gateways
with skewed clocks agree) at which it is full again, expiring at that instant: a key's state
costs nothing once it has refilled. A check is one round trip (a Lua script: read both
buckets, judge as gateway.ratelimit.buckets.judge does, count the request when it fits); a
finished request's tokens are another, after its response is sent. Both go through
SharedStore.run: bounded by state.timeout_s, None when the store failed or is skipped.
"""

from __future__ import annotations

from gateway.ratelimit.buckets import WINDOW_S, Limits, Verdict, judge
from gateway.shared_state import SharedStore

# KEYS: requests bucket, tokens bucket. ARGV: requests per minute, tokens per minute (0: none).
# Returns {allowed, requests backlog ms, tokens backlog ms}, the backlogs as they were before
# this request (strings: Lua numbers come back as integers).
_CHECK = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + tonumber(clock[2]) / 1000
local window = tonumber(ARGV[3])
local rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])
local requests = math.max((tonumber(redis.call('GET', KEYS[1])) or now) - now, 0)
local tokens = math.max((tonumber(redis.call('GET', KEYS[2])) or now) - now, 0)
local allowed = 1
if tpm > 0 and tokens >= window then allowed = 0 end
if rpm > 0 then
  local after = requests + window / rpm
  if after > window + 0.001 then
    allowed = 0
  elseif allowed == 1 then
    redis.call('SET', KEYS[1], string.format('%.3f', now + after), 'PX', math.ceil(after))
  end
end
return {allowed, string.format('%.3f', requests), string.format('%.3f', tokens)}
"""

# KEYS: tokens bucket. ARGV: tokens, tokens per minute.
_CHARGE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + tonumber(clock[2]) / 1000
local full_at = math.max(tonumber(redis.call('GET', KEYS[1])) or now, now)
full_at = full_at + tonumber(ARGV[1]) * tonumber(ARGV[3]) / tonumber(ARGV[2])
redis.call('SET', KEYS[1], string.format('%.3f', full_at), 'PX', math.ceil(full_at - now))
return 1
"""

_WINDOW_MS = str(int(WINDOW_S * 1000))


class SharedBuckets:
    def __init__(self, store: SharedStore) -> None:
        self._store = store
        self._check = store.client.register_script(_CHECK)
        self._charge = store.client.register_script(_CHARGE)

    def _keys(self, key: str) -> list[str]:
        return [
            self._store.key("ratelimit", key, "requests"),
            self._store.key("ratelimit", key, "tokens"),
        ]

    async def check(self, key: str, limits: Limits) -> Verdict | None:
        """The shared verdict (the request counted when it fits); None: the store failed."""
        args: list[int | str] = [limits.requests_per_minute, limits.tokens_per_minute, _WINDOW_MS]
        keys = self._keys(key)
        found = await self._store.run(
            "ratelimit_check", lambda client: self._check(keys=keys, args=args, client=client)
        )
        if found is None:
            return None
        allowed, requests_ms, tokens_ms = found
        verdict = judge(limits, float(requests_ms) / 1000, float(tokens_ms) / 1000)
        if bool(int(allowed)) == verdict.allowed:
            return verdict
        # Float rounding at the very edge: the store counted (or not) the request; say so.
        if int(allowed):
            return Verdict(True, None, WINDOW_S, verdict.tokens_backlog_s, 0.0)
        return Verdict(False, "requests", verdict.requests_backlog_s, verdict.tokens_backlog_s, 0.0)

    async def charge(self, key: str, limits: Limits, tokens: int) -> bool:
        """Adds a finished request's tokens; False when the store failed."""
        args: list[int | str] = [tokens, limits.tokens_per_minute, _WINDOW_MS]
        keys = self._keys(key)[1:]
        done = await self._store.run(
            "ratelimit_charge", lambda client: self._charge(keys=keys, args=args, client=client)
        )
        return done is not None

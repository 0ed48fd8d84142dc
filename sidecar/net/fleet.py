"""Where the runaway memory and the adaptive budgets live: in process, or shared in Redis.

A fleet sits behind a load balancer, so a retried prompt often lands on another node.
With ``policy.redis_url`` set, every node reads and writes the same Redis:

- ``{prefix}:runaway:{fingerprint}``: a key with a TTL (``memory.ttl_seconds``) per prompt
  fingerprint that ran away; only the digest is stored, never the prompt;
- ``{prefix}:runaway:cut:{mark}``: the same, per piece of reasoning a cut left with a
  client (a thinking block's signature, a reasoning item's id, a digest of the text), so
  that it is cleaned out of a later request's history on any node;
- ``{prefix}:thinking:{key}``: a list of the last ``window`` healthy thinking lengths per
  model and rule, trimmed on every push and expiring after ``policy.redis_ttl_seconds``.

Every Redis call has a short timeout. When Redis cannot be reached the node falls back to
its local memory (which it always keeps up to date too), logs a warning at most once per
``_WARN_EVERY`` seconds and counts the error; a request never fails because Redis is down.
"""

from __future__ import annotations

import time
from typing import Any

import structlog

from sidecar.config import Config
from sidecar.errors import ConfigError
from sidecar.obs.metrics import Metrics
from sidecar.policy.adaptive import AdaptiveBudgets, quantile_budget
from sidecar.policy.memory import RunawayMemory

log = structlog.get_logger("runaway_sidecar")

_WARN_EVERY = 30.0
_TIMEOUT = 0.25  # seconds per Redis call: a slow Redis must not slow the data path


class Fleet:
    """Runaway memory and adaptive budgets, local with an optional Redis behind them."""

    def __init__(self, config: Config, metrics: Metrics) -> None:
        policy = config.policy
        self.memory = RunawayMemory(config.memory.ttl_seconds, config.memory.max_entries)
        self.budgets = AdaptiveBudgets(window=policy.adaptive_window,
                                       quantile=policy.adaptive_quantile,
                                       multiple=policy.adaptive_multiple,
                                       min_samples=policy.adaptive_min_samples)
        self._ttl = config.memory.ttl_seconds
        self._budget_ttl = policy.redis_ttl_seconds
        self._window = policy.adaptive_window
        self._prefix = policy.redis_prefix
        self._metrics = metrics
        self._warned_at = -_WARN_EVERY
        self._redis: Any = None
        if policy.redis_url:
            try:
                import redis.asyncio as aioredis  # noqa: PLC0415 - optional extra
            except ImportError:
                raise ConfigError("key 'policy.redis_url': needs the redis package "
                                  "(pip install 'runaway-sidecar[fleet]')") from None
            self._redis = aioredis.from_url(
                policy.redis_url, socket_timeout=_TIMEOUT, socket_connect_timeout=_TIMEOUT,
                health_check_interval=0)

    @property
    def shared(self) -> bool:
        """Whether a Redis is configured."""
        return self._redis is not None

    async def close(self) -> None:
        """Close the Redis pool, if any."""
        if self._redis is not None:
            await self._redis.aclose()

    async def recalls(self, fingerprint: str, now: float) -> bool:
        """Whether this prompt ran away recently, on any node."""
        if self.memory.recalls(fingerprint, now):
            return True
        if self._redis is None:
            return False
        try:
            found = bool(await self._redis.exists(f"{self._prefix}:runaway:{fingerprint}"))
        except Exception as exc:  # noqa: BLE001 - any Redis failure means: use local memory
            self._failed("recall", exc)
            return False
        if found:
            self.memory.remember(fingerprint, now)
        return found

    async def recalled(self, keys: list[str], now: float) -> set[str]:
        """Which of ``keys`` ran away (or were cut) recently, on any node: one Redis round
        trip for the ones this node does not know."""
        found = {key for key in keys if self.memory.recalls(key, now)}
        unknown = [key for key in keys if key not in found]
        if not unknown or self._redis is None:
            return found
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for key in unknown:
                    pipe.exists(f"{self._prefix}:runaway:{key}")
                answers = await pipe.execute()
        except Exception as exc:  # noqa: BLE001 - any Redis failure means: use local memory
            self._failed("recall", exc)
            return found
        for key, answer in zip(unknown, answers, strict=True):
            if answer:
                found.add(key)
                self.memory.remember(key, now)
        return found

    async def remember(self, fingerprint: str, now: float) -> None:
        """Record a runaway of this prompt, locally and in Redis."""
        self.memory.remember(fingerprint, now)
        if self._redis is None:
            return
        try:
            await self._redis.set(f"{self._prefix}:runaway:{fingerprint}", b"1",
                                  ex=max(1, int(self._ttl)))
        except Exception as exc:  # noqa: BLE001
            self._failed("remember", exc)

    async def observe_thinking(self, key: str, tokens: int) -> None:
        """Record the thinking length of a healthy request."""
        self.budgets.observe(key, tokens)
        if self._redis is None:
            return
        name = f"{self._prefix}:thinking:{key}"
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.lpush(name, tokens)
                pipe.ltrim(name, 0, self._window - 1)
                pipe.expire(name, max(1, int(self._budget_ttl)))
                await pipe.execute()
        except Exception as exc:  # noqa: BLE001
            self._failed("observe", exc)

    async def budget(self, key: str) -> int | None:
        """The adaptive budget for ``key``: from the fleet's samples when Redis is up."""
        if self._redis is None:
            return self.budgets.budget(key)
        try:
            values = await self._redis.lrange(f"{self._prefix}:thinking:{key}", 0, -1)
        except Exception as exc:  # noqa: BLE001
            self._failed("budget", exc)
            return self.budgets.budget(key)
        return quantile_budget([int(v) for v in values], **self.budgets.params)

    def snapshot(self) -> dict[str, Any]:
        """What ``/debug/policy`` shows: this node's view of the budgets and memory."""
        return {"shared": self.shared, "budgets": self.budgets.snapshot(),
                "runaway_memory_entries": len(self.memory)}

    def _failed(self, op: str, exc: BaseException) -> None:
        self._metrics.fleet_error(op)
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY:
            self._warned_at = now
            log.warning("fleet_memory_unavailable", op=op, error=type(exc).__name__,
                        fallback="local")

"""Per-provider request and token budgets of the API embedders.

Each provider (``openai``, ``voyage``, ``jina``) gets a budget: requests per minute (RPM) and
tokens per minute (TPM). A :class:`ProviderLimiter` enforces it *before* each request, shared by
every worker thread and every embedder of that provider (same base URL, same budget) in the
process; a server's ``Retry-After`` pauses the whole provider, not just the call that got it. The
bounded retries of :func:`embedeval.net.retry.call_with_retries` stay on top: the budget
keeps a long sweep at the provider's rate instead of in retry storms, the retries absorb what
slips through.

Where a budget comes from, first found wins: the embedder's own ``rpm``/``tpm`` arguments, the
process settings (:func:`configure`, which the CLI's ``--rpm``/``--tpm`` set), the environment
(``EMBEDEVAL_<PROVIDER>_RPM`` / ``EMBEDEVAL_<PROVIDER>_TPM``), the provider's default (its
published tier-1 limits, see the provider classes). Budgets are per minute; the window they apply
to is ``EMBEDEVAL_BUDGET_PERIOD`` seconds (default 60; tests scale it down).

The limiter is ``pyrate-limiter`` (v4): it is thread-safe and blocking with a timeout in plain
synchronous code (our workers are threads of a ``ThreadPoolExecutor``; ``aiolimiter`` is
asyncio-only), takes a weight per acquisition (a request's token count), and its default
``InMemoryBucket`` keeps an exact sliding-window log, so no 60-s window ever holds more than the
budget (a token bucket would let a burst of up to twice the budget into one window). A weight
larger than the budget can never fit: it is refused with a clear error instead of waiting forever.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from embedeval.errors import ConfigError
from embedeval.net.settings import env_number

#: Environment variable of the window (seconds) the per-minute budgets apply to.
PERIOD_ENV = "EMBEDEVAL_BUDGET_PERIOD"
#: Environment variable of the default number of concurrent requests per API embedder.
WORKERS_ENV = "EMBEDEVAL_API_WORKERS"
DEFAULT_API_WORKERS = 4
#: Every provider: what ``--rpm 100`` (no ``provider=``) sets.
ALL = "*"


class BudgetError(ConfigError):
    """A request that can never fit its provider's budget (one input over the TPM budget)."""


@dataclass(frozen=True)
class Budget:
    """``rpm`` requests and ``tpm`` tokens per ``period`` seconds (60: per minute)."""

    rpm: int
    tpm: int
    period: float = 60.0

    def __post_init__(self):
        for name in ("rpm", "tpm"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"the {name} budget must be a whole number >= 1, not {value!r}")
        if not self.period > 0:
            raise ConfigError(f"the budget period must be > 0 seconds, not {self.period!r}")


@dataclass
class _Settings:
    """What the command line set for this process (``--rpm``, ``--tpm``, ``--api-workers``)."""

    rpm: dict[str, int]
    tpm: dict[str, int]
    workers: int | None = None


_settings = _Settings({}, {})
_limiters: dict[tuple, ProviderLimiter] = {}
_registry_lock = threading.Lock()


def configure(rpm: Mapping[str, int] | None = None, tpm: Mapping[str, int] | None = None,
              workers: int | None = None) -> None:
    """Set the process's API settings, replacing earlier ones: ``rpm``/``tpm`` map a provider
    (or ``"*"``, every provider) to its budget; ``workers`` is the number of concurrent requests
    per API embedder. ``None`` or empty: back to the environment and the defaults. Applies to
    embedders built afterwards."""
    for name, given in (("rpm", rpm), ("tpm", tpm)):
        for value in (given or {}).values():
            Budget(**{"rpm": 1, "tpm": 1, name: value})  # validates
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ConfigError(f"`api_workers` must be >= 1 (a whole number), not {workers!r}", "api_workers")
    _settings.rpm, _settings.tpm, _settings.workers = dict(rpm or {}), dict(tpm or {}), workers


def positive_int(raw: str) -> int | None:
    """``raw`` as a whole number >= 1 (``_`` allowed between digits), or None when it is not one."""
    try:
        value = int(raw.strip().replace("_", ""))
    except ValueError:
        return None
    return value if value >= 1 else None


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    value = positive_int(raw)
    if value is None:
        raise ConfigError(f"{name} must be a whole number >= 1, not {raw!r}")
    return value


def budget_period() -> float:
    """Seconds the per-minute budgets apply to: ``EMBEDEVAL_BUDGET_PERIOD`` or 60."""
    value = env_number(PERIOD_ENV, 60.0)
    if not math.isfinite(value):
        raise ConfigError(f"{PERIOD_ENV} must be a finite number of seconds, not {value!r}")
    return value


def resolve_budget(provider: str, default: Budget, rpm: int | None = None, tpm: int | None = None) -> Budget:
    """The budget of ``provider``: ``rpm``/``tpm`` if given, else the process settings, else
    ``EMBEDEVAL_<PROVIDER>_RPM``/``_TPM``, else ``default``; over :func:`budget_period` seconds."""

    def pick(name: str, given: int | None, fallback: int) -> int:
        if given is not None:
            return given
        configured = getattr(_settings, name)
        for key in (provider, ALL):
            if key in configured:
                return configured[key]
        from_env = _env_int(f"EMBEDEVAL_{provider.upper()}_{name.upper()}")
        return fallback if from_env is None else from_env

    return Budget(pick("rpm", rpm, default.rpm), pick("tpm", tpm, default.tpm), budget_period())


def resolve_workers(given: int | None = None) -> int:
    """Concurrent requests per API embedder: ``given``, else ``--api-workers``, else
    ``EMBEDEVAL_API_WORKERS``, else 4."""
    if given is not None:
        if given < 1:
            raise ConfigError(f"an API embedder needs at least 1 worker, not {given}")
        return given
    if _settings.workers is not None:
        return _settings.workers
    return _env_int(WORKERS_ENV) or DEFAULT_API_WORKERS


class ProviderLimiter:
    """The budget of one provider, shared by all its workers in the process.

    :meth:`acquire` blocks (up to a deadline) until one request of ``tokens`` tokens fits both
    the request and the token budget and no ``Retry-After`` pause is running; :meth:`pause`
    starts such a pause. :meth:`tokens_last_period` is the recent sending rate (for progress bars).
    """

    def __init__(self, provider: str, budget: Budget):
        from pyrate_limiter import Limiter, Rate  # here, not at the top: the command line imports this module

        self.provider = provider
        self.budget = budget
        window_ms = max(1, round(budget.period * 1000))
        self._requests = Limiter(Rate(budget.rpm, window_ms))
        self._tokens = Limiter(Rate(budget.tpm, window_ms))
        self._paused_until = 0.0
        self._lock = threading.Lock()
        self._sent: deque[tuple[float, int]] = deque()

    def __repr__(self) -> str:
        return f"ProviderLimiter({self.provider!r}, {self.budget})"

    @property
    def paused_until(self) -> float:
        """``time.monotonic()`` until which no request may start (0 when none is paused)."""
        with self._lock:
            return self._paused_until

    def pause(self, seconds: float) -> float:
        """No request of this provider starts in the next ``seconds`` (a server's Retry-After);
        returns when this pause ends (``time.monotonic()``)."""
        end = time.monotonic() + max(0.0, seconds)
        with self._lock:
            self._paused_until = max(self._paused_until, end)
        return end

    def check(self, tokens: int, what: str) -> None:
        """Raise :class:`BudgetError` when one request of ``tokens`` tokens can never fit."""
        if tokens > self.budget.tpm:
            raise BudgetError(
                f"{what}: one request of {tokens:,} tokens is over the {self.provider} budget of "
                f"{self.budget.tpm:,} tokens per {self.period_label()}; raise it (`tpm` {self.provider}=N or "
                f"EMBEDEVAL_{self.provider.upper()}_TPM) or send shorter inputs", "tpm")

    def period_label(self) -> str:
        """"minute", or the scaled-down period ("2 s") the budgets apply to."""
        return "minute" if self.budget.period == 60 else f"{self.budget.period:g} s"

    def acquire(self, tokens: int, timeout: float, what: str = "request", own_pause: float = 0.0) -> bool:
        """Wait until a request of ``tokens`` tokens may be sent, and count it; ``False`` when
        ``timeout`` seconds pass first (a request that fits at once is admitted even at timeout 0). ``own_pause``: the
        end of a pause the caller set itself and has waited for as its retry policy says (it
        waits only for a pause that ends later)."""
        self.check(tokens, what)
        deadline = time.monotonic() + max(0.0, timeout)
        if not self._wait_pause(deadline, own_pause):
            return False
        for limiter, weight in ((self._requests, 1), (self._tokens, tokens)):
            left = max(0.0, deadline - time.monotonic())  # 0: admitted only if it fits now
            if weight and not limiter.try_acquire(self.provider, weight, blocking=True, timeout=left):
                return False
        if not self._wait_pause(deadline, own_pause):  # a Retry-After that came in while we waited
            return False
        now = time.monotonic()
        with self._lock:
            self._sent.append((now, tokens))
            while self._sent and self._sent[0][0] < now - self.budget.period:
                self._sent.popleft()
        return True

    def _wait_pause(self, deadline: float, own_pause: float = 0.0) -> bool:
        """Sleep out a running pause (other than the caller's own); ``False`` when it outlasts
        ``deadline``. Bounded: each round sleeps until the pause ends or the deadline, whichever
        is first, and a pause only ever moves by another Retry-After."""
        for _ in range(1000):
            until = self.paused_until
            wait = until - time.monotonic()
            if wait <= 0 or until <= own_pause:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(wait, left))
        return self.paused_until <= max(time.monotonic(), own_pause)

    def tokens_last_period(self) -> int:
        """Tokens admitted in the last budget period (a minute unless scaled down): the sending
        rate on the scale of the token budget (progress bars)."""
        now = time.monotonic()
        with self._lock:
            return sum(n for t, n in self._sent if t >= now - self.budget.period)

    def close(self) -> None:
        """Stop the limiter's background threads (pyrate-limiter's leakers)."""
        self._requests.close()
        self._tokens.close()


def limiter_for(provider: str, base_url: str, budget: Budget) -> ProviderLimiter:
    """The process's one limiter of ``provider`` at ``base_url`` with ``budget`` (made on first use)."""
    key = (provider, base_url, budget)
    with _registry_lock:
        if key not in _limiters:
            _limiters[key] = ProviderLimiter(provider, budget)
        return _limiters[key]


def reset() -> None:
    """Forget the process settings and every limiter (tests; a fresh process has neither)."""
    configure()
    with _registry_lock:
        for limiter in _limiters.values():
            limiter.close()
        _limiters.clear()

"""Retries of a request (:func:`call_with_retries`, with ``tenacity``) as a :class:`RetryPolicy`
says: bounded attempts and bounded total time, and between attempts a wait of

    U(0, min(max_delay, base_delay * 2**(n - 1)))   after the n-th failure (full jitter),

or the server's ``Retry-After`` capped at ``max_delay``. A malformed answer is tried at most twice
and a server that does not answer for at most ``connect_seconds`` (30 s): neither is a fault that
waiting mends. Running out, or a fatal error, is one :class:`~embedeval.errors.APIError` saying how
long it took."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception_type
from tenacity.stop import stop_base
from tenacity.wait import wait_base, wait_random_exponential

from embedeval.defaults import DEFAULT_REQUEST_DEADLINE
from embedeval.errors import APIError
from embedeval.net.deadlines import AnswerClock
from embedeval.net.errors import ConnectionFailedError, FatalAPIError, MalformedResponseError, PayloadTooLargeError, RetryableError, one_line
from embedeval.net.settings import REQUEST_DEADLINE_ENV, env_number, env_whole, request_timeout_from_env

_T = TypeVar("_T")


@dataclass(frozen=True)
class RetryPolicy:
    """Retry :class:`RetryableError` at most ``max_attempts`` times and for at most
    ``max_seconds`` in all (429s and 5xx ride out minutes of a busy server); a
    :class:`MalformedResponseError` at most ``malformed_attempts`` times in all (counted on their
    own), and a :class:`ConnectionFailedError` only while less than ``connect_seconds`` have passed
    since the first of the consecutive ones. Between
    attempts sleep ``U(0, min(max_delay, base_delay * 2**(n-1)))`` after the n-th failure (full
    jitter), or the server's ``Retry-After`` capped at ``max_delay``; never past the budget of the
    last error's kind. One request's attempts wait for answers at most ``request_deadline`` seconds
    in all (:class:`AnswerClock`; the waits between them are not counted)."""

    max_attempts: int = 30
    base_delay: float = 0.5
    max_delay: float = 20.0
    max_seconds: float = 300.0
    malformed_attempts: int = 2
    connect_seconds: float = 30.0
    request_deadline: float = DEFAULT_REQUEST_DEADLINE

    def seconds_for(self, error: BaseException | None) -> float:
        """The time budget of the retries after ``error`` (for messages): ``connect_seconds`` for a
        server that does not answer, else ``max_seconds``."""
        return min(self.connect_seconds, self.max_seconds) if isinstance(error, ConnectionFailedError) else self.max_seconds

    def out_of_attempts(self, retry_state: RetryCallState) -> bool:
        """Whether the attempts are used up: ``max_attempts`` in all, or ``malformed_attempts``
        malformed answers (counted on their own, whatever else failed between them)."""
        return (retry_state.attempt_number >= self.max_attempts
                or _kind_tally(retry_state).malformed >= min(self.malformed_attempts, self.max_attempts))

    def seconds_left(self, retry_state: RetryCallState) -> float:
        """The seconds left to retry after the last error: of ``max_seconds`` since the call began,
        and after a :class:`ConnectionFailedError` also of ``connect_seconds`` since the first of the
        consecutive ones (a reset after minutes of 429s is given its own budget)."""
        since_start = retry_state.seconds_since_start or 0.0
        left = self.max_seconds - since_start
        connect_since = _kind_tally(retry_state).connect_since
        if connect_since is not None:
            left = min(left, self.connect_seconds - (since_start - connect_since))
        return left

    def stop(self, clock: AnswerClock | None = None) -> stop_base:
        return StopForKind(self, clock)

    def wait(self) -> wait_base:
        return RetryAfterWait(self)


def _last_error(retry_state: RetryCallState) -> BaseException | None:
    return retry_state.outcome.exception() if retry_state.outcome else None


@dataclass
class _KindTally:
    """One call's failures by kind, as :class:`RetryPolicy` budgets them: the malformed answers,
    and when the current run of :class:`ConnectionFailedError` began (``seconds_since_start`` of
    its first; None when the last error was of another kind)."""

    attempts: int = 0  # the attempts tallied so far
    malformed: int = 0
    connect_since: float | None = None


def _kind_tally(retry_state: RetryCallState) -> _KindTally:
    """The :class:`_KindTally` of the call ``retry_state`` follows, brought up to its last attempt
    (kept on the retry state: tenacity asks the wait and the stop after each attempt, in either
    order, and each attempt is counted once)."""
    tally = retry_state.__dict__.setdefault("embedeval_kind_tally", _KindTally())
    if tally.attempts < retry_state.attempt_number:
        tally.attempts = retry_state.attempt_number
        error = _last_error(retry_state)
        tally.malformed += isinstance(error, MalformedResponseError)
        if not isinstance(error, ConnectionFailedError):
            tally.connect_since = None
        elif tally.connect_since is None:
            tally.connect_since = retry_state.seconds_since_start or 0.0
    return tally


class StopForKind(stop_base):
    """Stop once the attempts (:meth:`RetryPolicy.out_of_attempts`), the time left to the last
    error's kind (:meth:`RetryPolicy.seconds_left`) or the request deadline (``clock``) are used up."""

    def __init__(self, policy: RetryPolicy, clock: AnswerClock | None = None):
        self.policy = policy
        self.clock = clock

    def __call__(self, retry_state: RetryCallState) -> bool:
        return (self.policy.out_of_attempts(retry_state) or self.policy.seconds_left(retry_state) <= 0
                or (self.clock is not None and self.clock.exhausted))


class RetryAfterWait(wait_base):
    """The wait of a :class:`RetryPolicy`: ``Retry-After`` if the last error carried one, else
    exponential backoff with full jitter; capped at ``max_delay`` and at the time left to the last
    error's kind."""

    def __init__(self, policy: RetryPolicy):
        self.policy = policy
        self.jitter = wait_random_exponential(multiplier=policy.base_delay, max=policy.max_delay)

    def __call__(self, retry_state: RetryCallState) -> float:
        hint = getattr(_last_error(retry_state), "retry_after", None)
        delay = min(hint, self.policy.max_delay) if hint is not None else self.jitter(retry_state)
        return max(0.0, min(delay, self.policy.seconds_left(retry_state)))


def retry_policy_from_env() -> RetryPolicy:
    """``EMBEDEVAL_MAX_ATTEMPTS``, ``EMBEDEVAL_RETRY_BASE_DELAY``, ``EMBEDEVAL_RETRY_MAX_SECONDS``,
    ``EMBEDEVAL_RETRY_CONNECT_SECONDS`` and ``EMBEDEVAL_REQUEST_DEADLINE`` override the defaults of
    :class:`RetryPolicy` (30 attempts, 0.5 s, 300 s: enough to ride out minutes of 429s; 30 s for a
    server that does not answer; 90 s of waiting for one request's answers, and never less than the
    request timeout)."""
    default = RetryPolicy()
    return RetryPolicy(
        max_attempts=env_whole("EMBEDEVAL_MAX_ATTEMPTS", default.max_attempts),
        base_delay=env_number("EMBEDEVAL_RETRY_BASE_DELAY", default.base_delay),
        max_seconds=env_number("EMBEDEVAL_RETRY_MAX_SECONDS", default.max_seconds),
        connect_seconds=env_number("EMBEDEVAL_RETRY_CONNECT_SECONDS", default.connect_seconds),
        request_deadline=env_number(REQUEST_DEADLINE_ENV, max(default.request_deadline, request_timeout_from_env())),
    )


def seconds_text(seconds: float) -> str:
    """Seconds for a message: two significant digits below 10 (``0.012``, ``3.5``), whole above."""
    return f"{seconds:.2g}" if seconds < 10 else f"{seconds:.0f}"


def call_with_retries(call: Callable[[], _T], policy: RetryPolicy, what: str, scrub: Callable[[str], str],
                      clock: AnswerClock | None = None) -> _T:
    """Run ``call()`` until it succeeds, retrying :class:`RetryableError` per ``policy``; the
    attempts wait for answers at most ``policy.request_deadline`` in all: ``clock``, where the
    caller times the part of each attempt that waits for an answer itself
    (:meth:`AnswerClock.timing`), else a clock of this call timing each whole attempt.

    Raises :class:`~embedeval.errors.APIError` (message passed through ``scrub``) when the
    attempts, the time or the deadline run out, saying how long it took, or at once on a
    :class:`FatalAPIError`.
    """
    if clock is None:
        clock, whole = AnswerClock(policy.request_deadline), call

        def call() -> _T:
            with clock.timing():
                return whole()

    def give_up(state: RetryCallState):
        error = _last_error(state)
        if clock.exhausted:
            within = f" within the request deadline of {clock.deadline:g} s ({REQUEST_DEADLINE_ENV})"
        else:
            within = "" if policy.out_of_attempts(state) else f" within {policy.seconds_for(error):g} s"
        took = seconds_text(state.seconds_since_start or 0.0)
        raise APIError(one_line(scrub(f"{what}: gave up after {state.attempt_number} attempts{within} ({error}); "
                                       f"{took} s in all")))

    retrying = Retrying(stop=policy.stop(clock), wait=policy.wait(), retry=retry_if_exception_type(RetryableError),
                        retry_error_callback=give_up)
    try:
        return retrying(call)
    except PayloadTooLargeError:
        raise  # the caller splits the request
    except FatalAPIError as exc:
        raise APIError(one_line(scrub(f"{what}: {exc}"))) from None

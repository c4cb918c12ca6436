"""Embedders behind HTTP APIs: OpenAI, Voyage and Jina.

They share one engine (:class:`APIEmbedder`): the key comes from an environment variable and
is never logged or written; inputs are batched within the API's limits (inputs and tokens per
request) and over-long inputs are cut to the model's window; a few requests run concurrently;
429, 5xx, timeouts and connection errors are retried with exponential backoff and full jitter,
a bounded number of times. A 401/403 or an unknown model is one clear error.

Token counts for API models come from the reference tokenizer (``st:all-MiniLM-L6-v2``'s
WordPiece): the providers' own tokenizers are not available offline, so counts, truncation and
``needle_visible`` for API models are estimates.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from embedeval.embedders.base import Kind, check_texts, l2_normalize
from embedeval.errors import APIError, EmbedderUnavailableError, UnknownEmbedderError


class RetryableError(Exception):
    """A failure worth retrying (429, 5xx, timeout, connection)."""


class FatalAPIError(Exception):
    """A failure that retrying cannot fix (401/403, unknown model, bad request)."""


@dataclass(frozen=True)
class ModelLimits:
    """What one model accepts: ``dim`` of its vectors, tokens per input, per-request caps."""

    dim: int
    max_tokens: int
    max_inputs_per_request: int
    max_tokens_per_request: int


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter: sleep ~ U(0, min(max_delay, base * 2**attempt))."""

    max_attempts: int = 6
    base_delay: float = 0.5
    max_delay: float = 20.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0, min(self.max_delay, self.base_delay * 2**attempt))


def retry_policy_from_env() -> RetryPolicy:
    """``EMBEDEVAL_MAX_ATTEMPTS`` / ``EMBEDEVAL_RETRY_BASE_DELAY`` override the defaults."""
    return RetryPolicy(
        max_attempts=int(os.environ.get("EMBEDEVAL_MAX_ATTEMPTS", 6)),
        base_delay=float(os.environ.get("EMBEDEVAL_RETRY_BASE_DELAY", 0.5)),
    )


def call_with_retries(call, policy: RetryPolicy, what: str, scrub, rng: random.Random | None = None):
    """Run ``call()`` until it succeeds, retrying :class:`RetryableError` per ``policy``.

    Raises :class:`~embedeval.errors.APIError` (message passed through ``scrub``) when the
    attempts run out or on a :class:`FatalAPIError`.
    """
    rng = rng or random.Random()
    for attempt in range(policy.max_attempts):
        try:
            return call()
        except FatalAPIError as exc:
            raise APIError(scrub(f"{what}: {exc}")) from None
        except RetryableError as exc:
            last = exc
            if attempt + 1 < policy.max_attempts:
                time.sleep(policy.delay(attempt, rng))
    raise APIError(scrub(f"{what}: gave up after {policy.max_attempts} attempts ({last})"))


class APIEmbedder:
    """Shared engine of the API embedders; subclasses implement :meth:`_request`."""

    provider = ""
    key_env = ""
    base_url_env = ""
    default_base_url = ""
    models: dict[str, ModelLimits] = {}

    def __init__(self, model: str, max_workers: int = 4, policy: RetryPolicy | None = None, timeout: float = 60.0):
        if model not in self.models:
            raise UnknownEmbedderError(f"unknown {self.provider} model {model!r}; known: {', '.join(self.models)}")
        key = os.environ.get(self.key_env, "").strip()
        if not key:
            raise EmbedderUnavailableError(f"{self.provider}:{model} needs an API key in the environment variable {self.key_env}")
        self._key = key
        self.model = model
        self.name = f"{self.provider}:{model}"
        self.limits = self.models[model]
        self.base_url = (os.environ.get(self.base_url_env) or self.default_base_url).rstrip("/")
        self.max_workers = max_workers
        self.policy = policy or retry_policy_from_env()
        self.timeout = timeout
        self._tokens = None

    def __repr__(self) -> str:  # never show the key
        return f"{type(self).__name__}({self.name!r}, base_url={self.base_url!r})"

    @property
    def dim(self) -> int:
        return self.limits.dim

    @property
    def max_tokens(self) -> int:
        return self.limits.max_tokens

    @property
    def token_counter(self):
        if self._tokens is None:
            from embedeval.tokens import load_token_counter

            self._tokens = load_token_counter()
        return self._tokens

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Estimated with the reference tokenizer (special tokens included)."""
        return self.token_counter.count(list(texts), special_tokens=True)

    def scrub(self, message: str) -> str:
        """Remove the API key from a message."""
        return message.replace(self._key, "***") if self._key else message

    def _fit(self, texts: list[str]) -> tuple[list[str], list[int]]:
        """Cut inputs longer than the window (estimated); return texts and their token estimates."""
        counts = self.token_counter.count(texts)
        limit = self.limits.max_tokens - 16  # margin for the estimate
        fitted = [t if n <= limit else self.token_counter.prefix(t, limit) for t, n in zip(texts, counts)]
        return fitted, [min(n, limit) for n in counts]

    def batches(self, counts: Sequence[int]) -> list[list[int]]:
        """Greedy index batches within the inputs-per-request and tokens-per-request limits."""
        out, current, tokens = [], [], 0
        for i, n in enumerate(counts):
            if current and (len(current) == self.limits.max_inputs_per_request or tokens + n > self.limits.max_tokens_per_request):
                out.append(current)
                current, tokens = [], 0
            current.append(i)
            tokens += n
        if current:
            out.append(current)
        return out

    def embed(self, texts: Sequence[str], kind: Kind = "document") -> np.ndarray:
        texts = check_texts(texts, kind)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        fitted, counts = self._fit(texts)
        batches = self.batches(counts)

        def run(batch: list[int]) -> list[list[float]]:
            payload = [fitted[i] for i in batch]
            vectors = call_with_retries(lambda: self._request(payload, kind), self.policy,
                                        f"{self.name} request failed", self.scrub)
            if len(vectors) != len(payload):
                raise APIError(f"{self.name}: asked for {len(payload)} vectors, got {len(vectors)}")
            return vectors

        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(batches))) as pool:
            results = list(pool.map(run, batches))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for batch, vectors in zip(batches, results):
            out[batch] = np.asarray(vectors, dtype=np.float32)
        return l2_normalize(out)

    def check(self) -> None:
        """One tiny request, so a bad key or model fails before any real work."""
        self.embed(["embedeval connection check"], kind="query")

    def _request(self, texts: list[str], kind: Kind) -> list[list[float]]:  # pragma: no cover - abstract
        raise NotImplementedError


def status_error(status: int | None, message: str, key_env: str) -> Exception:
    """Map an HTTP status to a retryable or fatal error with a readable message."""
    if status in (401, 403):
        return FatalAPIError(f"authentication failed (HTTP {status}); check {key_env}")
    if status == 429 or (status is not None and status >= 500) or status is None:
        return RetryableError(f"HTTP {status}: {message}" if status else message)
    if status == 404:
        return FatalAPIError(f"not found (HTTP 404): unknown model or wrong base URL ({message})")
    return FatalAPIError(f"HTTP {status}: {message}")


@contextlib.contextmanager
def openai_errors(key_env: str):
    """Translate the ``openai`` client's exceptions into retryable or fatal ones."""
    import openai

    try:
        yield
    except openai.APIStatusError as exc:
        raise status_error(exc.status_code, exc.message, key_env) from None
    except (openai.APITimeoutError, openai.APIConnectionError) as exc:
        raise RetryableError(f"{type(exc).__name__}: {exc}") from None


class OpenAIEmbedder(APIEmbedder):
    """``openai:text-embedding-3-small|large`` through the ``openai`` client (``OPENAI_BASE_URL``)."""

    provider, key_env, base_url_env = "openai", "OPENAI_API_KEY", "OPENAI_BASE_URL"
    default_base_url = "https://api.openai.com/v1"
    models = {
        "text-embedding-3-small": ModelLimits(1536, 8191, 2048, 300_000),
        "text-embedding-3-large": ModelLimits(3072, 8191, 2048, 300_000),
    }

    def __init__(self, model: str, **kwargs):
        super().__init__(model, **kwargs)
        import openai

        self._client = openai.OpenAI(api_key=self._key, base_url=self.base_url, max_retries=0, timeout=self.timeout)

    def _request(self, texts, kind):
        with openai_errors(self.key_env):
            response = self._client.embeddings.create(model=self.model, input=texts, encoding_format="float")
        return [item.embedding for item in sorted(response.data, key=lambda d: d.index)]


class VoyageEmbedder(APIEmbedder):
    """``voyage:voyage-3-large`` through the ``voyageai`` client (input_type None by default)."""

    provider, key_env, base_url_env = "voyage", "VOYAGE_API_KEY", "VOYAGE_BASE_URL"
    default_base_url = "https://api.voyageai.com/v1"
    models = {"voyage-3-large": ModelLimits(1024, 32_000, 1000, 120_000)}

    def __init__(self, model: str, input_type: str | None = None, **kwargs):
        super().__init__(model, **kwargs)
        import voyageai

        self._voyage = voyageai
        self.input_type = input_type
        self._client = voyageai.Client(api_key=self._key, base_url=self.base_url, max_retries=0, timeout=self.timeout)

    def _request(self, texts, kind):
        error = self._voyage.error
        try:
            result = self._client.embed(texts, model=self.model, input_type=self.input_type, truncation=True)
        except (error.Timeout, error.APIConnectionError, error.TryAgain) as exc:
            raise RetryableError(f"{type(exc).__name__}: {exc}") from None
        except error.VoyageError as exc:
            raise status_error(exc.http_status, str(exc._message or exc), self.key_env) from None
        return result.embeddings


class JinaEmbedder(APIEmbedder):
    """``jina:jina-embeddings-v3`` over HTTP (``{base}/embeddings``, task text-matching, no late chunking)."""

    provider, key_env, base_url_env = "jina", "JINA_API_KEY", "JINA_BASE_URL"
    default_base_url = "https://api.jina.ai/v1"
    models = {"jina-embeddings-v3": ModelLimits(1024, 8192, 512, 250_000)}

    def __init__(self, model: str, task: str = "text-matching", **kwargs):
        super().__init__(model, **kwargs)
        import httpx

        self._httpx = httpx
        self.task = task
        self._client = httpx.Client(timeout=self.timeout, headers={"Authorization": f"Bearer {self._key}"})

    def _request(self, texts, kind):
        httpx = self._httpx
        body = {"model": self.model, "input": texts, "task": self.task, "late_chunking": False, "truncate": True}
        try:
            response = self._client.post(f"{self.base_url}/embeddings", json=body)
        except (httpx.TimeoutException, httpx.TransportError) as exc:
            raise RetryableError(f"{type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            raise status_error(response.status_code, response.text[:200], self.key_env)
        try:
            data = response.json()["data"]
            return [item["embedding"] for item in sorted(data, key=lambda d: d["index"])]
        except (ValueError, KeyError, TypeError) as exc:
            raise FatalAPIError(f"malformed response ({exc})") from None


API_EMBEDDERS: dict[str, type[APIEmbedder]] = {cls.provider: cls for cls in (OpenAIEmbedder, VoyageEmbedder, JinaEmbedder)}

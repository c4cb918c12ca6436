"""``jina:jina-embeddings-v3`` over plain HTTP (``{base}/embeddings``)."""

from __future__ import annotations

from collections.abc import Sequence

import httpx
import numpy as np

from embedeval.embedders.base import Kind, check_texts, l2_normalize
from embedeval.embedders.budget import Budget
from embedeval.embedders.http import APIEmbedder, ModelLimits, RetryableError, status_error
from embedeval.errors import InputError


class JinaEmbedder(APIEmbedder):
    """Jina embeddings (key ``JINA_API_KEY``, base URL ``JINA_BASE_URL``): task text-matching,
    server-side truncation on; ``embed`` without late chunking, :meth:`embed_late_chunks` with the
    API's own (``late_chunking: true``)."""

    provider, key_env, base_url_env = "jina", "JINA_API_KEY", "JINA_BASE_URL"
    default_base_url = "https://api.jina.ai/v1"
    models = {"jina-embeddings-v3": ModelLimits(1024, 8192, 512, 250_000)}
    # A paid API key (Jina's first paid tier): 500 RPM, 2,000,000 TPM for the embeddings API
    # (jina.ai/api-dashboard/rate-limit); a free key gets 100 RPM, 100,000 TPM.
    default_budget = Budget(rpm=500, tpm=2_000_000)

    def __init__(self, model: str, task: str = "text-matching", **kwargs):
        super().__init__(model, **kwargs)
        self.task = task
        self.late_chunking = False
        self.truncate = True
        self._client = httpx.Client(timeout=self.timeout, headers={"Authorization": f"Bearer {self._key.value}"})

    def settings(self) -> dict[str, object]:
        return {**super().settings(), "task": self.task, "late_chunking": self.late_chunking, "truncate": self.truncate}

    def embed_late_chunks(self, windows: Sequence[Sequence[str]], chunks: Sequence[Sequence[tuple[int, int]]],
                          kind: Kind = "document") -> list[np.ndarray]:
        """Late chunking by the API: each window (its chunk texts, in order) is one request with
        ``late_chunking: true``, which embeds the inputs of a request as one text and pools each
        input's tokens; chunk ``(i, i + 1)`` is the vector of the window's i-th input. Vectors are
        L2-normalised."""
        check_texts([text for window in windows for text in window], kind)
        out = []
        for window, spans in zip(windows, chunks):
            if any(end != start + 1 or not 0 <= start < len(window) for start, end in spans):
                raise InputError(f"{self.name} late-chunks whole inputs: chunk spans must be (i, i + 1), not {list(spans)[:3]}")
            texts = list(window)
            tokens = sum(self.count_tokens(texts))
            self.limiter.check(tokens, self.name)
            vectors = l2_normalize(self._send(texts, tokens, kind, late_chunking=True))
            out.append(vectors[[start for start, _ in spans]])
        return out

    def _request(self, texts, kind, late_chunking: bool = False):
        body = {"model": self.model, "input": texts, "task": self.task, "late_chunking": late_chunking or self.late_chunking,
                "truncate": self.truncate}
        try:
            response = self._client.post(f"{self.base_url}/embeddings", json=body)
        except (httpx.TimeoutException, httpx.TransportError) as exc:
            raise RetryableError(f"{type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            body = self.scrub(response.text)[:200]  # scrub the whole body first: a cut key would survive
            raise status_error(response.status_code, body, self.key_env, response.headers)
        try:
            return [(item["index"], item["embedding"]) for item in response.json()["data"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise RetryableError(f"malformed response ({type(exc).__name__}: {exc})") from None

"""``jina:jina-embeddings-v3`` over plain HTTP (``{base}/embeddings``)."""

from __future__ import annotations

import httpx
import numpy as np

from embedeval.embedders.api import APIEmbedder, ModelLimits, Reply
from embedeval.embedders.base import check_texts, l2_normalize
from embedeval.embedders.budget import Budget
from embedeval.embedders.requests import LateChunks, Texts
from embedeval.errors import InputError
from embedeval.net.answers import answer_hooks
from embedeval.net.errors import MalformedResponseError, httpx_errors, status_error
from embedeval.net.redirects import refuse_cross_origin_redirect


class JinaEmbedder(APIEmbedder):
    """Jina embeddings (key ``JINA_API_KEY``, base URL ``JINA_BASE_URL``): task text-matching,
    server-side truncation on; texts without late chunking, :class:`~embedeval.embedders.requests.LateChunks`
    with the API's own (``late_chunking: true``, :meth:`_embed_late_chunks`)."""

    provider, key_env, base_url_env = "jina", "JINA_API_KEY", "JINA_BASE_URL"
    default_base_url = "https://api.jina.ai/v1"
    models = {"jina-embeddings-v3": ModelLimits(1024, 8192, 512, 250_000)}
    # A paid API key (Jina's first paid tier): 500 RPM, 2,000,000 TPM for the embeddings API
    # (jina.ai/api-dashboard/rate-limit); a free key gets 100 RPM, 100,000 TPM.
    default_budget = Budget(rpm=500, tpm=2_000_000)
    request_methods = {Texts: "_embed_texts", LateChunks: "_embed_late_chunks"}

    def __init__(self, model: str, task: str = "text-matching", **kwargs):
        super().__init__(model, **kwargs)
        self.task = task
        self.late_chunking = False
        self.truncate = True
        self._client = httpx.Client(timeout=self.timeout, headers={"Authorization": f"Bearer {self._key.value}"}, follow_redirects=True,
                                    event_hooks=answer_hooks(self.timeout, {"response": [refuse_cross_origin_redirect]}))

    def settings(self) -> dict[str, object]:
        return {**super().settings(), "task": self.task, "late_chunking": self.late_chunking, "truncate": self.truncate}

    def sends(self, request: Texts | LateChunks) -> tuple[int, int]:
        """As :meth:`APIEmbedder.sends`; late chunks: each window read (its chunk texts) is one request."""
        if not isinstance(request, LateChunks):
            return super().sends(request)
        return sum(sum(self.fit(list(window))[1]) for window in request.windows), len(request.windows)

    def _embed_late_chunks(self, request: LateChunks) -> np.ndarray:
        """Late chunking by the API: each window (its chunk texts, in order) is one request with
        ``late_chunking: true``, which embeds the inputs of a request as one text and pools each
        input's tokens; a chunk is one part ``(w, i, i + 1)``, the vector of window ``w``'s i-th
        input (the API returns no token outputs, so chunks cannot span windows). Vectors are
        L2-normalised."""
        windows, chunks, kind = request.windows, request.chunks, request.kind
        check_texts([text for window in windows for text in (window if isinstance(window, tuple) else [window])], kind)
        if any(len(parts) != 1 or parts[0][2] != parts[0][1] + 1 or not 0 <= parts[0][1] < len(windows[parts[0][0]])
               for parts in chunks):
            raise InputError(f"{self.name} late-chunks whole inputs: a chunk must be one part (w, i, i + 1), "
                             f"not {[list(parts) for parts in chunks[:3]]}")
        vectors = {}
        for w in sorted({parts[0][0] for parts in chunks}):
            texts = list(windows[w])
            tokens = sum(self.count_tokens(texts))
            self.limiter.check(tokens, self.name)
            vectors[w] = l2_normalize(self._send(texts, tokens, kind, late_chunking=True))
        return np.stack([vectors[w][i] for (w, i, _), in chunks])

    def _request(self, texts, kind, late_chunking: bool = False):
        body = {"model": self.model, "input": texts, "task": self.task, "late_chunking": late_chunking or self.late_chunking,
                "truncate": self.truncate}
        with httpx_errors():
            response = self._client.post(f"{self.base_url}/embeddings", json=body)
        if response.status_code != 200:
            body = self.scrub(response.text)[:200]  # scrub the whole body first: a cut key would survive
            raise status_error(response.status_code, body, self.key_hint, response.headers)
        try:
            answer = response.json()
            return Reply([(item["index"], item["embedding"]) for item in answer["data"]], answer.get("model"))
        except (AttributeError, ValueError, KeyError, TypeError, RecursionError) as exc:  # RecursionError: JSON nested too deep
            raise MalformedResponseError(f"malformed response ({type(exc).__name__}: {exc})") from None

"""``openai:text-embedding-3-small|large`` through the ``openai`` client, and any model on an
OpenAI-compatible server of one's own (``openai:MODEL?base_url=http://host:port/v1&max_tokens=N``:
text-embeddings-inference, vLLM, Ollama, infinity, llama.cpp)."""

from __future__ import annotations

import json
import threading

from embedeval.embedders.api import APIEmbedder, ModelLimits, Reply
from embedeval.embedders.budget import Budget
from embedeval.net.errors import TRANSIENT_STATUSES, FatalAPIError, MalformedResponseError, openai_errors
from embedeval.net.openai_client import OPENAI, openai_client

#: What a server without a model list answers ``GET /models`` (not found, method not allowed, not
#: implemented): its model is ``unlisted``.
UNLISTED_STATUSES = (404, 405, 501)


def model_list(answer, url: str) -> list[dict]:
    """The entries of an OpenAI-shaped model list (``{"data": [{"id": ...}, ...]}``) in the HTTP
    response ``answer`` from ``url``; anything else is a :class:`FatalAPIError` naming the URL and
    what came back."""
    what = f"GET {url} answered HTTP {answer.status_code} ({answer.headers.get('content-type') or 'no content type'})"
    try:
        payload = answer.json()
    except ValueError:
        raise FatalAPIError(f"{what}, not a JSON model list: {answer.text[:80]!r}") from None
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        raise FatalAPIError(f"{what}, not a model list (no `data` list): {json.dumps(payload)[:80]}")
    if not all(isinstance(entry, dict) and isinstance(entry.get("id"), str) and entry["id"] for entry in data):
        raise FatalAPIError(f"{what}, a model list whose entries are not objects with an `id`: {json.dumps(data)[:80]}")
    return data


class OpenAIEmbedder(APIEmbedder):
    """OpenAI embeddings (key ``OPENAI_API_KEY``, base URL ``OPENAI_BASE_URL``); no dimensions
    requested, so vectors have the model's native size."""

    provider, key_env, base_url_env, default_base_url = OPENAI.name, OPENAI.key_env, OPENAI.base_url_env, OPENAI.default_base_url
    models = {
        "text-embedding-3-small": ModelLimits(1536, 8191, 2048, 300_000),
        "text-embedding-3-large": ModelLimits(3072, 8191, 2048, 300_000),
    }
    # Usage tier 1 of text-embedding-3-small/-large: 3,000 RPM, 1,000,000 TPM (OpenAI's rate-limit
    # tables as quoted on community.openai.com; OpenAI counts them per model, we per provider).
    default_budget = Budget(rpm=3_000, tpm=1_000_000)
    prices = {"text-embedding-3-small": 0.02, "text-embedding-3-large": 0.13}  # USD per million input tokens
    prices_read = "developers.openai.com model pages, read 2026-11-25"
    serves_any_model = True
    provider_tokenizer = "cl100k_base"  # text-embedding-3-small and -large

    def __init__(self, model: str, **kwargs):
        super().__init__(model, **kwargs)
        self._openai = None
        self._openai_lock = threading.Lock()  # not the model's own lock: asking a server its models holds that one

    def _prepare(self) -> None:
        self._client  # noqa: B018  (made before the budget admits the first request)

    @property
    def _client(self):
        """The ``openai`` client (:func:`~embedeval.net.openai_client.openai_client`), made on the first request: importing
        ``openai`` takes a second, and a plan sends nothing."""
        with self._openai_lock:
            if self._openai is None:
                self._openai = openai_client(self._key, self.base_url, self.options.own_server, self.timeout)
            return self._openai

    def served_model(self) -> str:
        """``GET /models``: the listed model of this name (or of this name tagged ``:latest``, as
        Ollama lists an untagged pull), as ``id`` plus ``root`` where the server names what it
        loaded (vLLM does); ``unlisted``, at once, where the server has no model list (an answer of
        :data:`UNLISTED_STATUSES`). Only :data:`~embedeval.net.errors.TRANSIENT_STATUSES` and
        connection errors are retried. A list without this name, or an answer that is no model
        list (HTML, entries without an ``id``), is a :class:`FatalAPIError` naming the URL and
        what came back."""
        import openai

        url = f"{self.base_url}/models"
        with openai_errors(self.key_hint):
            try:
                answer = self._client.models.with_raw_response.list().http_response
            except openai.APIStatusError as exc:
                if exc.status_code in UNLISTED_STATUSES:
                    return "unlisted"
                if exc.status_code not in TRANSIENT_STATUSES:
                    raise FatalAPIError(f"GET {url}: HTTP {exc.status_code}: {exc.message}") from None
                raise
        listed = model_list(answer, url)
        for entry in listed:
            if entry["id"] in (self.model, f"{self.model}:latest"):
                root = entry.get("root")
                return entry["id"] + (f" from {root}" if root and root != entry["id"] else "")
        names = ", ".join(sorted(entry["id"] for entry in listed)) or "nothing"
        raise FatalAPIError(f"the server at {self.base_url} does not serve {self.model!r}; it serves {names}")

    def _request(self, texts, kind):
        """The answer's JSON as it came (the ``openai`` client's objects would read ``true`` or
        ``"0.5"`` as a float)."""
        with openai_errors(self.key_hint):
            answer = self._client.embeddings.with_raw_response.create(model=self.model, input=texts,
                                                                      encoding_format="float").http_response.json()
            try:
                return Reply([(item["index"], item["embedding"]) for item in answer["data"] or ()], answer.get("model"))
            except (AttributeError, KeyError, TypeError) as exc:
                raise MalformedResponseError(f"malformed response (items without index or embedding: {type(exc).__name__}: {exc})") from None

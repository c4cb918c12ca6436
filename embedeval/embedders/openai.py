"""``openai:text-embedding-3-small|large`` through the ``openai`` client, and any model on an
OpenAI-compatible server of one's own (``openai:MODEL?base_url=http://host:port/v1&max_tokens=N``:
text-embeddings-inference, vLLM, Ollama, infinity, llama.cpp)."""

from __future__ import annotations

from embedeval.embedders.budget import Budget
from embedeval.embedders.http import APIEmbedder, FatalAPIError, ModelLimits, openai_errors


class OpenAIEmbedder(APIEmbedder):
    """OpenAI embeddings (key ``OPENAI_API_KEY``, base URL ``OPENAI_BASE_URL``); no dimensions
    requested, so vectors have the model's native size."""

    provider, key_env, base_url_env = "openai", "OPENAI_API_KEY", "OPENAI_BASE_URL"
    default_base_url = "https://api.openai.com/v1"
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
        import openai

        # a server of one's own that wants no key still gets a (meaningless) one: the client needs it
        self._client = openai.OpenAI(api_key=self._key.value or "none", base_url=self.base_url, max_retries=0,
                                     timeout=self.timeout)

    def served_model(self) -> str:
        """``GET /models``: the listed model of this name (or of this name tagged ``:latest``, as
        Ollama lists an untagged pull), as ``id`` plus ``root`` where the server names what it
        loaded (vLLM does); ``unlisted`` where the server has no model list (404). A list without
        this name is a :class:`FatalAPIError` naming what it does serve."""
        try:
            with openai_errors(self.key_hint):
                listed = list(self._client.models.list())
        except FatalAPIError as exc:
            if "404" in str(exc):
                return "unlisted"
            raise
        for entry in listed:
            if entry.id in (self.model, f"{self.model}:latest"):
                root = (entry.model_extra or {}).get("root")
                return entry.id + (f" from {root}" if root and root != entry.id else "")
        names = ", ".join(sorted(entry.id for entry in listed)) or "nothing"
        raise FatalAPIError(f"the server at {self.base_url} does not serve {self.model!r}; it serves {names}")

    def _request(self, texts, kind):
        with openai_errors(self.key_hint):
            response = self._client.embeddings.create(model=self.model, input=texts, encoding_format="float")
            try:
                return [(item.index, item.embedding) for item in response.data or ()]
            except (AttributeError, TypeError) as exc:
                raise ValueError(f"items without index or embedding ({exc})") from None

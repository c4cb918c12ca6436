"""``openai:text-embedding-3-small|large`` through the ``openai`` client."""

from __future__ import annotations

from embedeval.embedders.budget import Budget
from embedeval.embedders.http import APIEmbedder, ModelLimits, openai_errors


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

    def __init__(self, model: str, **kwargs):
        super().__init__(model, **kwargs)
        import openai

        self._client = openai.OpenAI(api_key=self._key.value, base_url=self.base_url, max_retries=0, timeout=self.timeout)

    def _request(self, texts, kind):
        with openai_errors(self.key_env):
            response = self._client.embeddings.create(model=self.model, input=texts, encoding_format="float")
            try:
                return [(item.index, item.embedding) for item in response.data or ()]
            except (AttributeError, TypeError) as exc:
                raise ValueError(f"items without index or embedding ({exc})") from None

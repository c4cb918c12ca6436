"""The chat client of query expansion: any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama).

It shares the API embedders' engine (:mod:`embedeval.embedders.http`): the key from
``OPENAI_API_KEY``, scrubbed from every message; the same error translation and retries
(backoff with jitter, ``Retry-After``, bounded attempts and time).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from embedeval.defaults import DEFAULT_REQUEST_TIMEOUT, DEFAULT_TEMPERATURE
from embedeval.embedders.http import APIKey, call_with_retries, openai_errors, retry_policy_from_env

KEY_ENV = "OPENAI_API_KEY"


@dataclass
class ChatLLM:
    """An OpenAI-compatible chat endpoint (key ``OPENAI_API_KEY``, base URL from the argument or
    ``OPENAI_BASE_URL``), with the same retry policy as the API embedders."""

    model: str
    base_url: str | None = None
    temperature: float = DEFAULT_TEMPERATURE
    timeout: float = DEFAULT_REQUEST_TIMEOUT  # seconds per request; a hung server is retried, then given up

    def __post_init__(self):
        import openai

        self._key = APIKey.from_env(KEY_ENV, f"query expansion needs an API key in {KEY_ENV} (any value for a local server)")
        self._client = openai.OpenAI(api_key=self._key.value, base_url=self.base_url or os.environ.get("OPENAI_BASE_URL") or None,
                                     max_retries=0, timeout=self.timeout)
        self.policy = retry_policy_from_env()

    def complete(self, prompt: str) -> str:
        """The model's answer to one user message."""

        def request() -> str:
            with openai_errors(KEY_ENV):
                response = self._client.chat.completions.create(
                    model=self.model, messages=[{"role": "user", "content": prompt}], temperature=self.temperature)
                try:
                    return response.choices[0].message.content or ""
                except (AttributeError, IndexError, TypeError) as exc:
                    raise ValueError(f"no answer in the response ({exc})") from None

        return call_with_retries(request, self.policy, f"chat model {self.model}", self._key.scrub)

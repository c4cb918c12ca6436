"""The chat client of query expansion (and of anything else that asks a chat model): any
OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama), named the way an API embedder is.

A chat spec (:func:`parse_chat_spec`) is ``openai:MODEL`` (OpenAI's URL, or ``OPENAI_BASE_URL``,
with the key in ``OPENAI_API_KEY``) or ``openai:MODEL?base_url=URL&key_env=VAR`` (a server of one's
own: it gets only the key in ``VAR``, or none; never ``OPENAI_API_KEY`` and never the
``OPENAI_ORG_ID`` / ``OPENAI_PROJECT_ID`` headers). A bare ``MODEL`` is ``openai:MODEL``. The spec's
options are the API embedders' (:class:`~embedeval.embedders.options.ServerOptions`), refused the
same way, and the client follows the same HTTP rules (:func:`~embedeval.embedders.openai.openai_client`:
no redirect to another origin) and shares their engine (:mod:`embedeval.embedders.http`): the key
scrubbed from every message, the same error translation and retries (backoff with jitter,
``Retry-After``, bounded attempts and time).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from embedeval.defaults import DEFAULT_TEMPERATURE
from embedeval.embedders.http import (
    call_with_retries, endpoint, key_hint, openai_errors, refuse_provider_key, request_timeout_from_env, retry_policy_from_env,
)
from embedeval.embedders.openai import OpenAIEmbedder, openai_client
from embedeval.embedders.options import ServerOptions, split_spec
from embedeval.errors import ConfigError

#: The provider a chat spec names, whose key variable, base-URL variable and URL it uses.
CHAT_PROVIDER = OpenAIEmbedder


@dataclass(frozen=True)
class ChatSpec:
    """A parsed chat spec: the ``model`` asked for and where it is reached (``options``)."""

    model: str
    options: ServerOptions

    @property
    def name(self) -> str:
        """The canonical spec: ``openai:MODEL`` and its options sorted."""
        query = self.options.query()
        return f"{CHAT_PROVIDER.provider}:{self.model}" + (f"?{query}" if query else "")


def parse_chat_spec(spec: str, base_url: str | None = None) -> ChatSpec:
    """``openai:MODEL[?base_url=URL&key_env=VAR]``, or a bare ``MODEL`` (``openai:MODEL``), checked
    without any request: one :class:`~embedeval.errors.ConfigError` for options on a bare name, an
    unknown option, a bad ``base_url`` or a ``key_env`` without it or naming ``OPENAI_API_KEY``.
    ``base_url`` (the deprecated ``expand --base-url``) is the spec's ``?base_url=``, not given twice."""
    prefix, sep, rest = spec.partition(":")
    if sep and prefix == CHAT_PROVIDER.provider:
        model, query = split_spec(rest)
    elif "?" in spec:
        raise ConfigError(f"chat model options go with {CHAT_PROVIDER.provider}:MODEL?base_url=...&key_env=..., not {spec!r}", "llm")
    else:
        model, query = spec, ""  # a bare name (Ollama's llama3:8b included)
    if not model.strip():
        raise ConfigError(f"chat model spec {spec!r} names no model", "llm")
    if base_url is not None:
        query = "&".join(filter(None, [query, urlencode({"base_url": base_url})]))
    options = ServerOptions.parse(query)
    refuse_provider_key(options, CHAT_PROVIDER.key_env)
    return ChatSpec(model, options)


def chat_spec_difference(then: str, now: str) -> str:
    """What differs between two canonical chat specs (:attr:`ChatSpec.name`), in words: the model
    name, the ``base_url`` (a server's URL, its port included, is part of a chat model's identity:
    another server may serve another model under the same name) or the ``key_env``."""
    try:
        old, new = parse_chat_spec(then), parse_chat_spec(now)
    except ConfigError:  # a spec written by hand into a file: say the two as they are
        return f"it was {then!r}, now {now!r}"
    parts = [(what, a, b) for what, a, b in (("model", old.model, new.model), ("base_url", old.options.base_url, new.options.base_url),
                                              ("key_env", old.options.key_env, new.options.key_env)) if a != b]
    said = "; ".join(f"its {what} was {a or 'none'}, now {b or 'none'}" for what, a, b in parts) or f"it was {then!r}, now {now!r}"
    if any(what == "base_url" for what, _, _ in parts):
        said += (" (a server's URL, its port included, is part of the model's identity: another server may serve another "
                 "model; a server of your own needs the same fixed port to resume)")
    return said


@dataclass
class ChatLLM:
    """The chat model a chat spec names (:func:`parse_chat_spec`; ``base_url``: the deprecated
    ``--base-url``, the same as ``?base_url=``), with the same retry policy as the API embedders.
    ``model`` is the model name the endpoint is asked for."""

    spec: str
    base_url: str | None = None
    temperature: float = DEFAULT_TEMPERATURE
    #: Seconds per request in all, to the last byte of the answer (None: ``EMBEDEVAL_REQUEST_TIMEOUT`` or
    #: 60); a hung or trickling server is retried, then given up.
    timeout: float | None = None

    def __post_init__(self):
        self.chat = parse_chat_spec(self.spec, self.base_url)
        options, provider = self.chat.options, CHAT_PROVIDER
        missing = (f"chat model {self.chat.name} needs an API key in {provider.key_env} (a server of your own: "
                   f"{provider.provider}:MODEL?base_url=URL, with key_env=VAR if it wants a key)")
        self._key, url = endpoint(options, provider.key_env, provider.base_url_env, provider.default_base_url, missing)
        self._key_hint = key_hint(options, provider.key_env)
        if self.timeout is None:
            self.timeout = request_timeout_from_env()
        self._client = openai_client(self._key, url, options.own_server, self.timeout)
        self.policy = retry_policy_from_env()

    @property
    def model(self) -> str:
        return self.chat.model

    def complete(self, prompt: str) -> str:
        """The model's answer to one user message."""

        def request() -> str:
            with openai_errors(self._key_hint):
                response = self._client.chat.completions.create(
                    model=self.model, messages=[{"role": "user", "content": prompt}], temperature=self.temperature)
                try:
                    return response.choices[0].message.content or ""
                except (AttributeError, IndexError, TypeError) as exc:
                    raise ValueError(f"no answer in the response ({exc})") from None

        return call_with_retries(request, self.policy, f"chat model {self.model}", self._key.scrub)

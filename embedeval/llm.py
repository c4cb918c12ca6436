"""The chat client of query expansion (and of anything else that asks a chat model): any
OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama), named the way an API embedder is.

A chat spec (:func:`parse_chat_spec`) is ``openai:MODEL`` (OpenAI's URL, or ``OPENAI_BASE_URL``,
with the key in ``OPENAI_API_KEY``: :data:`CHAT_PROVIDER`) or ``openai:MODEL?base_url=URL&key_env=VAR``
(a server of one's own: it gets only the key in ``VAR``, or none; never ``OPENAI_API_KEY`` and never
the ``OPENAI_ORG_ID`` / ``OPENAI_PROJECT_ID`` headers). A bare ``MODEL`` is ``openai:MODEL``. The
spec's options are the API embedders' (:class:`~embedeval.embedders.options.ServerOptions`), refused
the same way, and the client follows the same HTTP rules
(:func:`~embedeval.net.openai_client.openai_client`: no redirect to another origin) as the network
(:mod:`embedeval.net`) gives them to the embedders: the key scrubbed from every message, the same
error translation and retries (backoff with jitter, ``Retry-After``, bounded attempts and time).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from urllib.parse import urlencode

from embedeval.bounds import MAX_REPORTED_TOKENS
from embedeval.defaults import DEFAULT_TEMPERATURE
from embedeval.embedders.options import ServerOptions, split_spec
from embedeval.errors import APIError, ConfigError, InputError
from embedeval.jsonread import JsonTooDeep, loads
from embedeval.net.errors import MalformedResponseError, openai_errors
from embedeval.net.keys import endpoint, key_hint, refuse_provider_key, scrub_all
from embedeval.net.openai_client import OPENAI, openai_client
from embedeval.net.retry import call_with_retries, retry_policy_from_env
from embedeval.net.settings import max_chat_answer_from_env, request_timeout_from_env

#: The API a chat spec names: its prefix (``openai``), key variable (``OPENAI_API_KEY``), base-URL
#: variable (``OPENAI_BASE_URL``) and URL (``https://api.openai.com/v1``).
CHAT_PROVIDER = OPENAI


@dataclass(frozen=True)
class ChatSpec:
    """A parsed chat spec: the ``model`` asked for and where it is reached (``options``)."""

    model: str
    options: ServerOptions

    @property
    def name(self) -> str:
        """The canonical spec: ``openai:MODEL`` and its options sorted."""
        query = self.options.query()
        return f"{CHAT_PROVIDER.name}:{self.model}" + (f"?{query}" if query else "")


def parse_chat_spec(spec: str, base_url: str | None = None) -> ChatSpec:
    """``openai:MODEL[?base_url=URL&key_env=VAR]``, or a bare ``MODEL`` (``openai:MODEL``), checked
    without any request: one :class:`~embedeval.errors.ConfigError` for options on a bare name, an
    unknown option, a bad ``base_url`` or a ``key_env`` without it or naming ``OPENAI_API_KEY``.
    ``base_url`` (the deprecated ``expand --base-url``) is the spec's ``?base_url=``, not given twice."""
    prefix, sep, rest = spec.partition(":")
    if sep and prefix == CHAT_PROVIDER.name:
        model, query = split_spec(rest)
    elif "?" in spec:
        raise ConfigError(f"chat model options go with {CHAT_PROVIDER.name}:MODEL?base_url=...&key_env=..., not {spec!r}", "llm")
    else:
        model, query = spec, ""  # a bare name (Ollama's llama3:8b included)
    if not model.strip():
        raise ConfigError(f"chat model spec {spec!r} names no model", "llm")
    if base_url is not None:
        query = "&".join(filter(None, [query, urlencode({"base_url": base_url})]))
    options = ServerOptions.parse(query)
    refuse_provider_key(options, CHAT_PROVIDER.key_env)
    return ChatSpec(model, options)


def check_temperature(temperature) -> None:
    """A sampling temperature is a finite number >= 0; anything else (``nan``, ``inf``, ``-3``) is
    one :class:`~embedeval.errors.ConfigError` before any request (``nan`` cannot even be sent as
    JSON; a negative one the server refuses only after the work before it)."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature < float("inf"):
        raise ConfigError(f"`temperature` must be a number >= 0, not {temperature}", "temperature")


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
        check_temperature(self.temperature)
        options, provider = self.chat.options, CHAT_PROVIDER
        missing = (f"chat model {self.chat.name} needs an API key in {provider.key_env} (a server of your own: "
                   f"{provider.name}:MODEL?base_url=URL, with key_env=VAR if it wants a key)")
        self._key, url = endpoint(options, provider.key_env, provider.base_url_env, provider.default_base_url, missing)
        self._key_hint = key_hint(options, provider.key_env)
        if self.timeout is None:
            self.timeout = request_timeout_from_env()
        self._client = openai_client(self._key, url, options.own_server, self.timeout, max_chat_answer_from_env())
        self.policy = retry_policy_from_env()

    @property
    def model(self) -> str:
        return self.chat.model

    def scrub(self, text: str) -> str:
        """``text`` (anything a server sent) with every key of the run (this model's, a judge's, the
        embedders'), in every encoding, and any bearer token replaced by ``***``
        (:func:`~embedeval.net.keys.scrub_all`): what is written or sent on of a server's words."""
        return scrub_all(text)

    def ask(self, prompt: str, max_tokens: int | None = None, sending: Callable[[int], None] | None = None,
            failed: Callable[[BaseException], None] | None = None, max_attempts: int | None = None) -> ChatReply:
        """The model's answer to one user message (:class:`ChatReply`), at most ``max_tokens``
        tokens long when given (the request's ``max_tokens``). Every attempt sent, a retry
        included, is seen: ``sending(n)`` is called before the n-th is sent (what it raises ends
        the call, that attempt unsent: a cost ceiling, :meth:`~embedeval.plan.ChatMeter.ask`) and
        ``failed(error)`` after each that got no usable answer. ``max_attempts``: at most this many
        attempts (and at most the retry policy's); the ``openai`` client retries nothing itself."""
        limit = {} if max_tokens is None else {"max_tokens": max_tokens}
        attempts = 0

        def request() -> ChatReply:
            nonlocal attempts
            attempts += 1
            if sending is not None:
                sending(attempts)
            try:
                return self._request(prompt, limit)
            except BaseException as exc:
                if failed is not None:
                    failed(exc)
                raise

        policy = self.policy if max_attempts is None else replace(self.policy, max_attempts=min(self.policy.max_attempts, max_attempts))
        return call_with_retries(request, policy, f"chat model {self.model}", self._key.scrub)

    def _request(self, prompt: str, limit: dict) -> ChatReply:
        """One attempt of :meth:`ask`."""
        with openai_errors(self._key_hint):
            response = self._client.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": prompt}], temperature=self.temperature, **limit)
            try:
                choice = response.choices[0]
                content = choice.message.content
            except (AttributeError, IndexError, TypeError) as exc:
                said = _error_said(response) or f"{type(exc).__name__}: {exc}"
                raise MalformedResponseError(f"malformed response (no answer in the response ({said}))") from None
            usage = getattr(response, "usage", None)
            return ChatReply(*self._content(content), _token_count(getattr(usage, "prompt_tokens", None)),
                             _token_count(getattr(usage, "completion_tokens", None)), getattr(choice, "finish_reason", None))

    def complete(self, prompt: str) -> str:
        """The model's answer to one user message, as text; an answer whose content is not text
        (a list, a number, an object) is one :class:`~embedeval.errors.APIError`."""
        reply = self.ask(prompt)
        if reply.kind != "text":
            raise APIError(f"chat model {self.model}: the answer's content is {reply.kind}, not text ({reply.text[:120]!r})")
        return reply.text

    def _content(self, content) -> tuple[str, str]:
        """(the content as scrubbed text, its kind): text as it is (none: empty), anything else
        as its JSON (a list, a number, an object, nested too deep to write: its kind alone)."""
        if content is None or isinstance(content, str):
            return self.scrub(content or ""), "text"
        kind = ("a list" if isinstance(content, list) else "an object" if isinstance(content, dict) else
                "a boolean" if isinstance(content, bool) else "a number" if isinstance(content, (int, float)) else
                f"a {type(content).__name__}")
        try:
            text = json.dumps(content, ensure_ascii=False, default=str)
        except (RecursionError, ValueError):
            text = ""
        return self.scrub(text), kind


@dataclass(frozen=True)
class ChatReply:
    """One answer of a chat model (:meth:`ChatLLM.ask`): its content as ``text`` (the key and any
    bearer token scrubbed; a content that is not text, such as a list, as its JSON), the content's
    ``kind`` (``text``, ``a list``, ``a number``, ``an object``, ...), the tokens the server says it
    read and wrote (None where it says nothing, or nothing usable) and why it stopped
    (``finish_reason``: ``length`` when ``max_tokens`` cut it)."""

    text: str
    kind: str = "text"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None

    @property
    def cut(self) -> bool:
        """Whether the answer stopped at ``max_tokens``."""
        return self.finish_reason == "length"


def _error_said(response) -> str | None:
    """What a server that answered HTTP 200 with an error object instead of choices (some proxies
    do: ``{"error": {"message": "quota exceeded"}}``) said, on one line and cut; None if nothing."""
    extra = getattr(response, "model_extra", None) or {}
    error = extra.get("error") if isinstance(extra, dict) else None
    said = error.get("message") if isinstance(error, dict) else error
    if not isinstance(said, str) or not said.strip():
        return None
    return f"the server said: {_short(said, 300)}"


def _token_count(value) -> int | None:
    """A token count a server reported, if it is one (a whole number >= 0), at most
    :data:`~embedeval.bounds.MAX_REPORTED_TOKENS` (a larger one is taken as that bound)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        return None
    return min(value, MAX_REPORTED_TOKENS)


_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.S)


def answer_json(reply: ChatReply | str, what: str = "JSON"):
    """The JSON value a chat model answered: the whole answer, the text inside a ```json fence, or
    the text from its first ``{`` to its last ``}`` amid prose (to its end when no ``}`` follows:
    an answer cut off is malformed, not empty). Anything else is one
    :class:`~embedeval.errors.InputError` saying what the answer was: a content that is not text
    (a list, a number, an object), empty, no JSON (a refusal), malformed JSON, or JSON nested too
    deep to read; an answer that stopped at ``max_tokens`` says so. ``what``: the JSON asked for,
    as the messages name it."""
    if isinstance(reply, str):
        reply = ChatReply(reply)
    if reply.kind != "text":
        raise InputError(f"the answer's content is {reply.kind}, not text ({_short(reply.text)!r})")
    cut = " (the answer stopped at its max_tokens)" if reply.cut else ""
    text = reply.text.strip()
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    elif "{" in text and not text.startswith("{"):
        start = text.index("{")
        end = text.rfind("}")
        text = text[start: end + 1] if end > start else text[start:]
    if not text:
        raise InputError("the answer is empty" + cut)
    if not text.startswith(("{", "[")):
        raise InputError(f"the answer holds no JSON (a refusal?): {_short(reply.text)!r}" + cut)
    try:
        return loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"the answer is malformed JSON ({exc.msg} at character {exc.pos}){cut}") from None
    except JsonTooDeep:
        raise InputError(f"the answer nests its JSON too deep to read (not the {what} asked for)") from None
    except ValueError as exc:  # a number beyond float range, or of more digits than Python converts (4300)
        raise InputError(f"the answer's JSON cannot be read ({_short(str(exc))}){cut}") from None


def _short(text: str, limit: int = 120) -> str:
    """``text`` on one line, cut at ``limit`` characters (`` ...`` marks a cut)."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit] + " ..."

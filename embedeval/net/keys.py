"""API keys: read from an environment variable (:class:`APIKey`, whose repr never shows it),
scrubbed from every message with any bearer token, and which key goes where (:func:`endpoint`): a
provider's own key to its own URL only, a server of one's own (``base_url``) only the key its spec
names (``key_env``). A provider is described by a :class:`ProviderEndpoint`; the spec's options by
anything with ``base_url``, ``key_env`` and ``own_server``
(:class:`~embedeval.embedders.options.ServerOptions`: :class:`ServerPlace`)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Protocol

from embedeval.errors import ConfigError, EmbedderUnavailableError


class ServerPlace(Protocol):
    """Where a spec says its model is reached: a server of one's own (``base_url``, ``own_server``)
    and the variable holding its key (``key_env``), or neither (the provider's own URL)."""

    base_url: str | None
    key_env: str | None

    @property
    def own_server(self) -> bool: ...


@dataclass(frozen=True)
class ProviderEndpoint:
    """Where a provider's API is reached: its ``name`` (the spec's prefix), the variable holding its
    key (``key_env``), the variable that may point its URL elsewhere (``base_url_env``, a proxy) and
    its own URL (``default_base_url``)."""

    name: str
    key_env: str
    base_url_env: str
    default_base_url: str


#: A bearer token as an ``Authorization`` header carries it: ``Bearer`` and a token of 8 or more
#: token characters holding a digit or a sign (prose such as "Bearer instruments" stays).
_BEARER_TOKEN = re.compile(r"\b[Bb]earer\s+(?=[A-Za-z]*[0-9._~+/=-])[A-Za-z0-9._~+/=-]{8,}")


@dataclass(frozen=True)
class APIKey:
    """An API key read from the environment variable ``env``; its repr never shows it."""

    env: str
    value: str = field(repr=False)

    @classmethod
    def optional(cls, env: str | None) -> APIKey:
        """The key in ``env`` if it names a set variable, else no key (a server that wants none)."""
        return cls(env or "", os.environ.get(env, "").strip() if env else "")

    @classmethod
    def from_env(cls, env: str, missing: str) -> APIKey:
        """Read ``env``; raise :class:`EmbedderUnavailableError` with the message ``missing``
        when it is unset or blank."""
        value = os.environ.get(env, "").strip()
        if not value:
            raise EmbedderUnavailableError(missing)
        return cls(env, value)

    def scrub(self, message: str) -> str:
        """``message`` with the key replaced by ``***``, and any bearer token (``Bearer ...``, the
        ``Authorization`` header a careless server quotes back, whoever's key it holds) too."""
        return _BEARER_TOKEN.sub("Bearer ***", message.replace(self.value, "***") if self.value else message)


def key_is_set(env: str) -> bool:
    """Whether the environment variable ``env`` holds a key (set and not blank)."""
    return bool(APIKey.optional(env).value)


def refuse_provider_key(options: ServerPlace, provider_key_env: str) -> None:
    """A :class:`~embedeval.errors.ConfigError` when ``key_env`` names the provider's own key
    variable: that key goes to the provider's own URL only, never to a server of one's own."""
    if options.key_env == provider_key_env:
        raise ConfigError(f"`key_env` must not be {provider_key_env}: that key goes to the provider's own URL only, never to "
                          "a `base_url`; copy the key into another variable if that server needs it", "key_env")


def request_key_env(options: ServerPlace, provider_key_env: str) -> str | None:
    """The environment variable whose key a provider's requests send: for a server of one's own
    (``base_url``) the one its ``key_env`` names (None without it: no key is sent), never the
    provider's; else ``provider_key_env``."""
    return options.key_env if options.own_server else provider_key_env


def endpoint(options: ServerPlace, provider_key_env: str, base_url_env: str, default_base_url: str,
             missing: str, key_required: bool = True) -> tuple[APIKey, str]:
    """The key and the base URL of a provider's requests: for a server of one's own (``base_url``)
    the key in the variable its ``key_env`` names (none without it), never the provider's; else the
    key in ``provider_key_env`` (unset: :class:`EmbedderUnavailableError` saying ``missing``, unless
    not ``key_required``: a plan, which sends nothing) and the URL in ``base_url_env`` or the
    provider's ``default_base_url``."""
    key_env = request_key_env(options, provider_key_env)
    if options.own_server:
        return APIKey.optional(key_env), options.base_url
    key = APIKey.from_env(key_env, missing) if key_required else APIKey.optional(key_env)
    return key, (os.environ.get(base_url_env) or default_base_url).rstrip("/")


def key_hint(options: ServerPlace, provider_key_env: str) -> str:
    """What an authentication error tells the user to check: the provider's key variable, or for a
    server of one's own the one ``key_env`` names."""
    if not options.own_server:
        return provider_key_env
    return options.key_env or "key_env= (no key was sent)"

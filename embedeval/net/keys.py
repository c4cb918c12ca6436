"""API keys: read from an environment variable (:class:`APIKey`, whose repr never shows it), each
one read kept in the run's keys (:func:`scrub_all`, :func:`scrub_printed` scrub every one of them, in
every encoding a server or a client may write it), and which key goes where (:func:`endpoint`): a
provider's own key to its own URL only, a server of one's own (``base_url``) only the key its spec
names (``key_env``). A provider is described by a :class:`ProviderEndpoint`; the spec's options by
anything with ``base_url``, ``key_env`` and ``own_server``
(:class:`~embedeval.embedders.options.ServerOptions`: :class:`ServerPlace`).

The scrubbing rule: text from one server is scrubbed of every key of the run (the chat model's, the
judge's, the embedders') before it is printed, written or sent to another server. A key is found as
it is, URL-encoded (``quote`` or ``quote_plus``, upper- or lower-case hex, any of its characters,
once or twice), as HTML numeric character references (``&#47;``, ``&#x2f;``),
JSON-escaped (``\\uXXXX`` in either case, ``\\/``, any of its characters) and in base64 (standard or
URL-safe: ``key``, ``:key`` and ``user:key`` as Basic auth sends it), and replaced by ``***``; any
``Bearer``/``Basic`` credentials too. A key too short or too common to tell from a text's words
(:func:`too_plain_to_scrub`: fewer than 6 characters, or letters alone or digits alone under 20,
such as ``local``) is never replaced inside texts (needles, field names, JSON keys): it is masked
only where embedeval prints it (error lines, notes), as a whole token, and one warning line on
stderr says so when it is read."""

from __future__ import annotations

import base64
import os
import re
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol

from embedeval.errors import ConfigError, EmbedderUnavailableError
from embedeval.messages import warn


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


#: A bearer token or Basic credentials as an ``Authorization`` header carries them: ``Bearer`` (or
#: ``Basic``, not inside a word: the lookbehind after its first letter keeps the search fast) and a
#: token of 8 or more token characters holding a digit or one of ``_~+/=``, not ending in a full stop
#: (prose such as "Bearer instruments" or "basic first-aid skills." stays).
_CREDENTIALS = re.compile(r"([Bb](?<![A-Za-z0-9_][Bb])(?:earer|asic))\s+(?=[A-Za-z.-]*[0-9_~+/=])[A-Za-z0-9._~+/=-]{7,}"
                          r"[A-Za-z0-9_~+/=-]")
#: Credentials as only a header writes them, what :func:`scrub_all` replaces inside texts: ``Bearer``
#: or ``Basic`` capitalised, then a token of 16 or more token characters holding a letter and a digit,
#: not ending in a full stop. Prose keeps its words ("basic first-aid skills.", "the standard bearer
#: 1st-class."), which :data:`_CREDENTIALS` would mask wherever embedeval prints them.
_HEADER_CREDENTIALS = re.compile(r"(?<![A-Za-z0-9_])(Bearer|Basic) (?=[A-Za-z._~+/=-]*[0-9])(?=[0-9._~+/=-]*[A-Za-z])"
                                 r"[A-Za-z0-9._~+/=-]{15,}[A-Za-z0-9_~+/=-]")

#: A key shorter than this is too short to scrub from texts (:func:`too_plain_to_scrub`).
MIN_SCRUBBED_KEY = 6
#: A key of letters alone or digits alone shorter than this could be a word or a number.
MIN_PLAIN_KEY = 20

#: What stands for a key (or credentials) that was scrubbed.
MASK = "***"

#: The keys of this run ({key: the variable it was read from}), in the order read: what
#: :func:`scrub_all` and :func:`scrub_printed` scrub. Every :class:`APIKey` read adds its own.
_RUN_KEYS: dict[str, str] = {}
_RUN_KEYS_LOCK = threading.Lock()


def too_plain_to_scrub(key: str) -> str | None:
    """Why ``key`` cannot be told from a text's own words (None: it can, and is scrubbed from
    texts): fewer than :data:`MIN_SCRUBBED_KEY` characters, or letters alone or digits alone and
    fewer than :data:`MIN_PLAIN_KEY` (``local``, ``password``, ``123456``: a word or a number)."""
    if len(key) < MIN_SCRUBBED_KEY:
        return f"too short to scrub from texts safely ({len(key)} character(s), fewer than {MIN_SCRUBBED_KEY})"
    if len(key) < MIN_PLAIN_KEY and (key.isalpha() or key.isdigit()):
        kind = "letters" if key.isalpha() else "digits"
        return (f"too common to scrub from texts safely ({kind} alone and fewer than {MIN_PLAIN_KEY} characters: it could be "
                f"a {'word' if kind == 'letters' else 'number'})")
    return None


def remember_key(env: str, value: str) -> None:
    """Add ``value`` (read from the variable ``env``) to the run's keys; a key too plain to scrub
    from texts (:func:`too_plain_to_scrub`) is said once, with one warning line on stderr."""
    if not value:
        return
    with _RUN_KEYS_LOCK:
        if value in _RUN_KEYS:
            return
    why = too_plain_to_scrub(value)
    if why:  # said before the key is kept: a caller whose warnings raise is told again on the next read
        warn(f"the key in {env or 'a variable'} is {why}; it is masked where embedeval prints it, never replaced "
             "inside texts")
    with _RUN_KEYS_LOCK:
        _RUN_KEYS[value] = env


def forget_run_keys() -> None:
    """Start a new run: no key is the run's until read again (a command of the CLI starts so)."""
    with _RUN_KEYS_LOCK:
        _RUN_KEYS.clear()


def _hex(number: int, digits: int = 2) -> str:
    """A pattern of ``number`` in hex digits of either case, at least ``digits`` of them (a byte:
    two; 1: no leading zeros)."""
    return "".join(f"[{d.upper()}{d.lower()}]" if d.isalpha() else d for d in f"{number:0{digits}x}")


def _char_forms(char: str) -> str:
    """A pattern of ``char`` as any encoding may write it: itself, URL-encoded (each UTF-8 byte
    ``%XX``, or twice, ``%25XX``; a space as ``+``), an HTML numeric reference (``&#47;``,
    ``&#x2F;``), JSON-escaped (``\\uXXXX``, a surrogate pair beyond the BMP; ``\\/``,
    ``\\"``, ``\\\\``)."""
    forms = [re.escape(char), "".join(f"%{_hex(b)}" for b in char.encode("utf-8")),
             "".join(f"%25{_hex(b)}" for b in char.encode("utf-8")),  # URL-encoded twice (a URL in a URL)
             f"&#0*{ord(char)};", f"&#[xX]0*{_hex(ord(char), digits=1)};"]  # an HTML page's numeric character references
    units = char.encode("utf-16-be")
    forms.append("".join(rf"\\u{_hex(units[i])}{_hex(units[i + 1])}" for i in range(0, len(units), 2)))
    forms += {" ": [r"\+"], "/": [r"\\/"], '"': [r'\\"'], "\\": [r"\\\\"]}.get(char, [])
    return "(?:" + "|".join(forms) + ")"


def _base64_forms(key: str) -> list[str]:
    """Patterns of ``key`` in base64 (standard and URL-safe) wherever it stands in what was encoded
    (``key``, ``:key``, ``user:key``: each of the three byte alignments): the characters ``key``
    alone decides, the one its last bits share with what follows (any it can be) and the padding.
    The character its first bits share with what precedes stays (two or four bits of its first
    character: a pattern that may start with any of several characters makes every search slow)."""
    data, forms = key.encode("utf-8"), []
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + data)
        first, end = -(-8 * offset // 6), 8 * (offset + len(data)) // 6  # the characters of the key's bits alone
        trail = set()
        if 8 * (offset + len(data)) % 6:  # the key's last bits share a character with what follows, or with none
            trail = {chr(shape[end]) for shape in [encoded, *(base64.b64encode(b"\0" * offset + data + bytes([byte]))
                                                               for byte in range(256))]}
        for alphabet in ("+/", "-_"):
            swap = str.maketrans("+/", alphabet)
            shared = f"[{re.escape(''.join(sorted(c.translate(swap) for c in trail)))}]?" if trail else ""
            forms.append(f"{re.escape(encoded.decode('ascii')[first:end].translate(swap))}{shared}={{0,2}}")
    return forms


@lru_cache(maxsize=64)
def key_patterns(key: str, whole_token: bool = False) -> tuple[re.Pattern, ...]:
    """Every form of ``key`` the module docstring names, built once per key: its spellings, and its
    base64 forms (each a search of its own: one pattern of both would make every search slow). With
    ``whole_token`` (a key too plain to scrub from texts, as :func:`scrub_printed` masks it) its
    spellings alone, none followed by a letter or digit (:func:`_masked` checks what precedes)."""
    spelled = "".join(_char_forms(char) for char in key)
    if whole_token:
        return (re.compile(f"{spelled}(?![A-Za-z0-9])"),)
    return re.compile(spelled), re.compile("|".join(dict.fromkeys(_base64_forms(key))))


def _masked(match: re.Match, whole_token: bool) -> str:
    """``***`` for a key found, or the text as it was where ``whole_token`` and a letter or digit
    precedes it (inside a longer word: ``local`` in ``nonlocal``)."""
    before = match.string[match.start() - 1:match.start()]
    return match.group() if whole_token and before and (before.isascii() and before.isalnum()) else MASK


def _scrub(text: str, printed: bool) -> str:
    """``text`` scrubbed of credentials and the run's keys: those too plain to scrub from texts only
    where ``printed``."""
    credentials = _CREDENTIALS if printed else _HEADER_CREDENTIALS
    text = credentials.sub(lambda m: f"{m.group(1)} {MASK}", text)  # whole, before a key inside leaves a part of it
    with _RUN_KEYS_LOCK:
        keys = sorted(_RUN_KEYS, key=len, reverse=True)  # a key holding another is replaced first
    for key in keys:
        plain = too_plain_to_scrub(key) is not None
        if not plain or printed:
            for pattern in key_patterns(key, whole_token=plain):
                text = pattern.sub(lambda m, alone=plain: _masked(m, alone), text)
    return text


def scrub_all(text: str) -> str:
    """``text`` (anything a server sent: a chat answer, a judge's reason) with every key of the run
    that can be told from words replaced by ``***`` in every encoding, and any bearer token or Basic
    credentials written as a header writes them (:data:`_HEADER_CREDENTIALS`: prose such as "basic
    first-aid skills." keeps its words): what is written, sent to another server or used as content. A key too plain to
    scrub (:func:`too_plain_to_scrub`) is left alone here: a needle's words are never mangled."""
    return _scrub(text, printed=False)


def scrub_printed(message: str) -> str:
    """``message`` as :func:`scrub_all` scrubs it, and a key too plain to scrub from texts masked
    too where it stands alone: what embedeval prints (an ``error:`` line, a note)."""
    return _scrub(message, printed=True)


def _key_in(env: str) -> str:
    """The key the environment variable ``env`` holds, blanks stripped ("" when unset); one
    :class:`~embedeval.errors.ConfigError`, which does not show it, for a key an HTTP header cannot
    carry (a character that is not printable ASCII: it was a ``UnicodeEncodeError`` traceback at
    the first request)."""
    value = os.environ.get(env, "").strip()
    if value and not (value.isascii() and value.isprintable()):
        raise ConfigError(f"the key in {env} holds a character an HTTP header cannot carry (keys are printable ASCII); "
                          "check what the variable holds")
    return value


@dataclass(frozen=True)
class APIKey:
    """An API key read from the environment variable ``env``; its repr never shows it. Every one
    made is one of the run's keys (:func:`remember_key`)."""

    env: str
    value: str = field(repr=False)

    def __post_init__(self):
        remember_key(self.env, self.value)

    @classmethod
    def optional(cls, env: str | None) -> APIKey:
        """The key in ``env`` if it names a set variable, else no key (a server that wants none)."""
        return cls(env or "", _key_in(env) if env else "")

    @classmethod
    def from_env(cls, env: str, missing: str) -> APIKey:
        """Read ``env``; raise :class:`EmbedderUnavailableError` with the message ``missing``
        when it is unset or blank."""
        value = _key_in(env)
        if not value:
            raise EmbedderUnavailableError(missing)
        return cls(env, value)

    def scrub(self, message: str) -> str:
        """``message`` (a server's words in a message to print) with this key, every other key of
        the run and any bearer token replaced by ``***``, in every encoding (:func:`scrub_printed`)."""
        return scrub_printed(message)


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

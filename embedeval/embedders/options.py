"""Options of an embedder, written in its spec as a query string: one spec is one model
configuration. :class:`LocalOptions` are an ``st:`` model's, :class:`APISpecOptions` an API model's,
:class:`ServerOptions` (where a model is reached: ``base_url``, ``key_env``) a chat model's.

    st:NAME_OR_DIR?device=cuda&dtype=float16&max_seq_length=8192&trust_remote_code=true&max_batch_tokens=65536

``device``            ``cpu``, ``cuda``, ``cuda:N``, ``mps`` or ``auto`` (the default: cuda when
                      available, else cpu); a device that is not there is refused before any work
``dtype``             ``float32`` (the default), ``float16`` or ``bfloat16`` (half precision: GPU only)
``max_seq_length``    the model's window in tokens, leaving at least
                      :data:`~embedeval.defaults.MIN_CONTENT_TOKENS` content tokens, up to its
                      position limit (:func:`~embedeval.embedders.local_folder.position_limit`);
                      default: the model's own ``max_seq_length``
``trust_remote_code`` ``true`` to run the model folder's own code (off unless asked)
``backend``           ``torch`` (the default), ``onnx`` or ``onnx-int8``: the transformer in ONNX
                      Runtime on the CPU, float32 or with int8 weights (:mod:`embedeval.embedders.onnx`)
``max_batch_tokens``  padded tokens per batch (texts sorted by length, then cut by this budget);
                      default: :data:`~embedeval.defaults.DEFAULT_BATCH_SIZE` texts per batch on
                      the CPU, a budget of :data:`~embedeval.defaults.DEFAULT_GPU_BATCH_TOKENS`
                      tokens on a GPU

Every option that changes a vector (``backend``, ``dtype``, ``max_seq_length``, ``trust_remote_code``) is part
of the model's fingerprint, so the cache keeps such vectors apart; ``device`` and
``max_batch_tokens`` change where and how fast, not what (up to float rounding).

    openai:MODEL?base_url=http://127.0.0.1:8080/v1&max_tokens=8192&tokenizer=st:/models/bge-m3

``base_url``          an OpenAI-compatible server (text-embeddings-inference, vLLM, Ollama,
                      infinity, llama.cpp); it may serve any model name. Its key, if it wants one,
                      comes from the environment variable named by ``key_env`` (never the
                      provider's own key: that goes to the provider's own URL only). No user,
                      password, query, ``;parameters`` or fragment (a secret there would reach
                      names and cache keys), no port outside 1..65535, no space or CR/LF
``max_tokens``        the served model's window in tokens (required with ``base_url`` for a model
                      the provider does not list): texts are cut below it, leaving at least
                      :data:`~embedeval.defaults.MIN_CONTENT_TOKENS` content tokens
``tokenizer``         ``st:DIR`` or a Hugging Face tokenizer folder: lengths, cuts and
                      ``needle_visible`` counted with the served model's own tokenizer (default:
                      the reference tokenizer, an estimate)
``key_env``           the environment variable holding the server's key (with ``base_url``)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from urllib.parse import parse_qsl, urlencode, urlsplit

from embedeval.defaults import DEFAULT_GPU_BATCH_TOKENS, MIN_CONTENT_TOKENS
from embedeval.embedders.onnx import BACKENDS, GRAPH_FORMAT
from embedeval.errors import ConfigError

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("float32", "float16", "bfloat16")
TRUE, FALSE = ("true", "1", "yes"), ("false", "0", "no")
#: Each option and what it takes (``embedeval embedders`` lists them).
LOCAL_OPTION_CHOICES = {"device": "auto, cpu, cuda, cuda:N, mps", "dtype": ", ".join(DTYPES),
                        "max_seq_length": f"{MIN_CONTENT_TOKENS} content tokens up to the model's position limit", "trust_remote_code": "true or false",
                        "max_batch_tokens": "padded tokens per batch", "backend": ", ".join(BACKENDS) + " (onnx: CPU only)"}
#: The options that change what a vector is (the others change where and how fast it is made).
VECTOR_OPTIONS = ("backend", "dtype", "max_seq_length", "trust_remote_code")


class SpecOptions:
    """What both kinds of options share: parsed from a spec's query string, written back as the
    canonical one. A subclass is a frozen dataclass whose fields are its options; ``described`` names
    the specs they belong to (for messages)."""

    described = ""
    #: Options whose value is a whole number >= 1.
    whole_numbers: tuple[str, ...] = ()

    @classmethod
    def parse(cls, query: str):
        """The options of a spec's query string (``device=cuda&dtype=float16``): one
        :class:`~embedeval.errors.ConfigError` for an unknown option, a repeated one or a bad value."""
        known = {f.name for f in fields(cls)}
        given: dict[str, object] = {}
        for key, value in parse_qsl(query, keep_blank_values=True, strict_parsing=False):
            if key not in known:
                raise ConfigError(f"unknown option {key!r} of {cls.described} model; use {', '.join(sorted(known))}", "embedders")
            if key in given:
                raise ConfigError(f"option {key!r} is given twice", "embedders")
            given[key] = cls._value(key, value)
        return cls(**given)

    @classmethod
    def _value(cls, key: str, text: str):
        """An option's value from its query-string text (a whole number in ASCII digits only:
        ``str.isdigit`` also takes ``²`` and ``١٢٨``)."""
        if key in cls.whole_numbers:
            if not (text.isascii() and text.isdigit()):
                raise ConfigError(f"`{key}` must be a whole number >= 1 in the digits 0-9, not {text!r}", key)
            return int(text)
        return text

    def _check_whole_numbers(self) -> None:
        for name in self.whole_numbers:
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(f"`{name}` must be a whole number >= 1, not {value!r}", name)

    def check_least_window(self, name: str, reserved: int = 0, what: str = "") -> None:
        """One :class:`~embedeval.errors.ConfigError` when the window option ``name`` leaves fewer
        than :data:`~embedeval.defaults.MIN_CONTENT_TOKENS` content tokens after ``reserved``
        tokens (``what`` says which)."""
        value, least = getattr(self, name), MIN_CONTENT_TOKENS + reserved
        if value is not None and value < least:
            raise ConfigError(f"`{name}` must be at least {least}, not {value}: a window must leave at least "
                              f"{MIN_CONTENT_TOKENS} content tokens{what}", name)

    def query(self, names: tuple[str, ...] | None = None) -> str:
        """The options (of ``names``, default all) that differ from the defaults, as the canonical
        query string (sorted); '' when none do."""
        default = type(self)()
        changed = {f.name: getattr(self, f.name) for f in fields(self)
                   if (names is None or f.name in names) and getattr(self, f.name) != getattr(default, f.name)}
        return urlencode({k: str(v).lower() if isinstance(v, bool) else v for k, v in sorted(changed.items())}, safe=":/")


@dataclass(frozen=True)
class LocalOptions(SpecOptions):
    """The options of an ``st:`` spec (see the module docstring); validated when made."""

    described = "a st:"
    whole_numbers = ("max_seq_length", "max_batch_tokens")

    device: str = "auto"
    dtype: str = "float32"
    max_seq_length: int | None = None
    trust_remote_code: bool = False
    max_batch_tokens: int | None = None
    backend: str = "torch"

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"`backend` must be one of {', '.join(BACKENDS)}, not {self.backend!r}", "backend")
        base = self.device.split(":")[0]
        if base not in DEVICES or (":" in self.device and (base != "cuda" or not self.device.split(":", 1)[1].isdigit())):
            raise ConfigError(f"`device` must be one of {', '.join(DEVICES)} or cuda:N, not {self.device!r}", "device")
        if self.dtype not in DTYPES:
            raise ConfigError(f"`dtype` must be one of {', '.join(DTYPES)}, not {self.dtype!r}", "dtype")
        self._check_whole_numbers()
        self.check_least_window("max_seq_length", what=" besides the model's special tokens and prompt")

    def name_query(self) -> str:
        """The options that change a vector (:data:`VECTOR_OPTIONS`) and differ from the defaults:
        what the embedder's name carries, so tables and the cache keep such vectors apart."""
        return self.query(VECTOR_OPTIONS)

    def vector_settings(self) -> dict:
        """The vector-changing options beside the window (part of the model's fingerprint when
        they differ from the defaults; ``max_seq_length`` is there as the model's live window)."""
        settings = {"dtype": self.dtype, "trust_remote_code": self.trust_remote_code}
        return settings if self.backend == "torch" else {**settings, "backend": self.backend, "graph": GRAPH_FORMAT}

    def check_device(self) -> None:
        """The refusals of :meth:`resolved_device`, without importing torch (seconds) where none
        can apply: the CPU or ``auto`` in float32 on the torch backend, or the CPU on another."""
        if self.device in ("auto", "cpu") and self.dtype == "float32" and (self.backend == "torch" or self.device == "cpu"):
            return
        self.resolved_device()

    def resolved_device(self) -> str:
        """The device to load on: ``auto`` -> cuda when available, else cpu; a device that is not
        there, or half precision on a CPU, is one :class:`~embedeval.errors.ConfigError`."""
        import torch

        device = self.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device.startswith("cuda"):
            index = int(device.split(":")[1]) if ":" in device else 0
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if index >= count:
                raise ConfigError(f"`device` {device} is not there: this machine has {count} CUDA device(s)", "device")
        if device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ConfigError("`device` mps is not there: this machine has no Apple GPU", "device")
        if device == "cpu" and self.dtype != "float32":
            raise ConfigError(f"`dtype` {self.dtype} runs on a GPU only; on the CPU use float32", "dtype")
        if self.backend != "torch" and device != "cpu":
            raise ConfigError(f"`backend` {self.backend} runs on the CPU only; on {device} use the torch backend", "backend")
        return device

    @classmethod
    def _value(cls, key: str, text: str):
        if key == "trust_remote_code":
            if text.lower() not in TRUE + FALSE:
                raise ConfigError(f"`trust_remote_code` must be true or false, not {text!r}", "trust_remote_code")
            return text.lower() in TRUE
        return super()._value(key, text)

    def batch_tokens(self, device: str) -> int | None:
        """The padded-token budget of a batch: the one given, else none on a CPU (batches of a
        fixed count, as before) and :data:`~embedeval.defaults.DEFAULT_GPU_BATCH_TOKENS` on a GPU."""
        if self.max_batch_tokens is not None:
            return self.max_batch_tokens
        return None if device == "cpu" else DEFAULT_GPU_BATCH_TOKENS


#: A tokenizer folder holds one of these (a fast tokenizer's file, or a tokenizer's config).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
#: Each option of an API spec and what it takes (``embedeval embedders`` lists them).
API_OPTION_CHOICES = {"base_url": "an OpenAI-compatible server, http(s)://HOST:PORT/v1 (openai: any model)",
                      "max_tokens": "the served model's window", "tokenizer": "st:DIR or a tokenizer folder (exact counts)",
                      "key_env": "the variable holding the server's key"}


@dataclass(frozen=True)
class ServerOptions(SpecOptions):
    """Where a model behind an HTTP API is reached: ``base_url`` (a server of one's own) and
    ``key_env`` (the variable holding its key). The options of a chat spec, and the part of an API
    embedder's (:class:`APISpecOptions`) that they share; validated when made: a base URL must be
    ``http(s)://HOST[:PORT]/...`` with a port in 1..65535, and hold no user, password, query,
    ``;parameters``, fragment, space or control character (a secret there would reach names, tables
    and cache keys; a CR/LF would split a request)."""

    described = "a chat"

    base_url: str | None = None
    key_env: str | None = None

    def __post_init__(self) -> None:
        if self.base_url is not None:
            object.__setattr__(self, "base_url", checked_base_url(self.base_url))
        if self.key_env is not None and (self.base_url is None or not self.key_env.isidentifier()):
            raise ConfigError("`key_env` names an environment variable (letters, digits, _) and goes with `base_url`", "key_env")

    @property
    def own_server(self) -> bool:
        """Whether the spec names its own server (``base_url``) rather than the provider's."""
        return self.base_url is not None


def checked_base_url(url: str) -> str:
    """``url`` without its trailing slashes, once it is a URL requests may go to (see
    :class:`ServerOptions`); else one :class:`~embedeval.errors.ConfigError` naming what is wrong."""
    if any(char.isspace() or ord(char) < 32 or ord(char) == 127 for char in url):
        raise ConfigError(f"`base_url` must not hold spaces or control characters (CR, LF, ...), not {url!r}", "base_url")
    try:
        parts = urlsplit(url)
    except ValueError:  # an unclosed IPv6 bracket
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or not url.isascii():
        raise ConfigError(f"`base_url` must be an http:// or https:// URL in ASCII (a host name as IDNA), not {url!r}", "base_url")
    if "@" in parts.netloc or "?" in url or "#" in url or ";" in parts.path:
        raise ConfigError("`base_url` must not hold a user, password, query, ;parameters or fragment: name the variable "
                          "holding the key with `key_env`", "base_url")
    try:
        port = parts.port
    except ValueError:  # not a number, or over 65535
        port = 0
    if port == 0 or parts.netloc.endswith(":"):
        raise ConfigError(f"`base_url` must have a port from 1 to 65535, not {parts.netloc.rpartition(':')[2]!r}", "base_url")
    return url.rstrip("/")


@dataclass(frozen=True)
class APISpecOptions(ServerOptions):
    """The options of an API embedder's spec (see the module docstring): a :class:`ServerOptions`
    with the served model's window and tokenizer; validated when made: a tokenizer folder must exist
    (named by its absolute path)."""

    described = "an API"
    whole_numbers = ("max_tokens",)

    max_tokens: int | None = None
    tokenizer: str | None = None

    def __post_init__(self) -> None:
        self._check_whole_numbers()
        super().__post_init__()
        if self.tokenizer is not None:
            prefix, sep, folder = self.tokenizer.partition(":")
            folder = folder if sep and prefix == "st" else self.tokenizer
            path = os.path.abspath(os.path.expanduser(folder))
            if not os.path.isdir(path):
                raise ConfigError(f"`tokenizer` must be st:DIR or a tokenizer folder; {folder!r} is not a folder", "tokenizer")
            if not any(os.path.isfile(os.path.join(path, name)) for name in TOKENIZER_FILES):
                raise ConfigError(f"`tokenizer` folder {folder!r} holds no tokenizer ({' or '.join(TOKENIZER_FILES)})", "tokenizer")
            object.__setattr__(self, "tokenizer", f"st:{path}")


def split_spec(spec: str) -> tuple[str, str]:
    """``st:NAME?a=1&b=2`` -> (``st:NAME``, ``a=1&b=2``); a spec without options -> (spec, '')."""
    base, _, query = spec.partition("?")
    return base, query

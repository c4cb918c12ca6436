"""The network's settings from the environment: the request timeout, the request deadline and the
answer cap (their defaults in :mod:`embedeval.defaults`), and how a positive number is read from an
environment variable (:func:`env_number`, shared by the embedders' budgets)."""

from __future__ import annotations

import os

from embedeval.defaults import DEFAULT_MAX_ANSWER_MB, DEFAULT_MAX_CHAT_ANSWER_MB, DEFAULT_REQUEST_TIMEOUT
from embedeval.errors import ConfigError

#: The environment variables of the request deadline (seconds) and of the answer size caps
#: (megabytes: every answer's, and a chat model's).
REQUEST_DEADLINE_ENV = "EMBEDEVAL_REQUEST_DEADLINE"
MAX_ANSWER_ENV = "EMBEDEVAL_MAX_ANSWER_MB"
MAX_CHAT_ANSWER_ENV = "EMBEDEVAL_MAX_CHAT_ANSWER_MB"


def env_number(name: str, default: float) -> float:
    """A positive number from the environment variable ``name``, or ``default`` when unset."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(f"{name} must be a positive number, not {raw!r}")
    return value


def env_whole(name: str, default: int) -> int:
    """A whole number >= 1 from the environment variable ``name``, or ``default`` when unset (2.5
    and 1e3 are refused, not cut; inf was ``int()``'s OverflowError)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not (raw.isascii() and raw.isdigit() and int(raw) >= 1):
        raise ConfigError(f"{name} must be a whole number >= 1, not {raw!r}")
    return int(raw)


def request_timeout_from_env() -> float:
    """Seconds one request (embeddings or chat) may take in all, from sending it to the last byte of
    its answer: ``EMBEDEVAL_REQUEST_TIMEOUT`` or :data:`~embedeval.defaults.DEFAULT_REQUEST_TIMEOUT`
    (60 s; the tests make it short). A request that takes longer is a timeout, retried by the policy."""
    return env_number("EMBEDEVAL_REQUEST_TIMEOUT", DEFAULT_REQUEST_TIMEOUT)


def max_answer_bytes_from_env() -> int:
    """Bytes an answer may hold once decompressed: ``EMBEDEVAL_MAX_ANSWER_MB`` (megabytes, decimals
    allowed) or :data:`~embedeval.defaults.DEFAULT_MAX_ANSWER_MB` (256)."""
    return _megabytes(MAX_ANSWER_ENV, DEFAULT_MAX_ANSWER_MB)


def max_chat_answer_from_env() -> tuple[int, str]:
    """(bytes a chat model's answer may hold once decompressed, the variable that says so): the
    smaller of :func:`max_answer_bytes_from_env` and ``EMBEDEVAL_MAX_CHAT_ANSWER_MB`` (megabytes,
    decimals allowed; default :data:`~embedeval.defaults.DEFAULT_MAX_CHAT_ANSWER_MB`, 16)."""
    chat = _megabytes(MAX_CHAT_ANSWER_ENV, DEFAULT_MAX_CHAT_ANSWER_MB)
    every = max_answer_bytes_from_env()
    return (chat, MAX_CHAT_ANSWER_ENV) if chat <= every else (every, MAX_ANSWER_ENV)


def _megabytes(name: str, default: float) -> int:
    """Bytes from the environment variable ``name`` in megabytes (a finite positive number), or ``default``."""
    megabytes = env_number(name, default)
    if megabytes == float("inf"):
        raise ConfigError(f"{name} must be a finite number of megabytes, not {os.environ[name]!r}")
    return int(megabytes * 2**20)

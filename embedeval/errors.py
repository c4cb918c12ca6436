"""Typed errors raised by the library.

The CLI turns any :class:`EmbedevalError` into one readable line and a non-zero exit; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations


class EmbedevalError(Exception):
    """Base class of every error a user can cause (bad input, missing key, unknown model).

    A message that names the library's parameters writes them in backquotes (`` `umap.min_dist`
    must be in [0, 1], not 2.0``, as scikit-learn's errors name theirs) and lists them in
    ``parameters``; the command line says the same in the words of its flags
    (:func:`embedeval.cli.options.in_flag_words`: ``--umap-min-dist must be ...``)."""

    def __init__(self, message: str = "", *parameters: str):
        super().__init__(message)
        self.parameters = parameters


class UnknownEmbedderError(EmbedevalError, ValueError):
    """An embedder spec with an unknown prefix or model."""


class EmbedderUnavailableError(EmbedevalError):
    """A known embedder that cannot run here (missing package, missing API key)."""


class InputError(EmbedevalError, ValueError):
    """A malformed or empty input file or text."""


class CacheError(EmbedevalError):
    """The embedding cache file is corrupt or unreadable."""


class InvalidVectorsError(EmbedevalError):
    """A model returned vectors that cannot be right: wrong count or dimension, NaN, or zero norm."""


class NeedleSetError(EmbedevalError, ValueError):
    """A needle set that fails validation; ``problems`` lists every (group id, reason)."""

    def __init__(self, path: str, problems: list[tuple[str, str]]):
        self.path = path
        self.problems = problems
        first = "; ".join(f"group {gid}: {reason}" for gid, reason in problems[:3])
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        super().__init__(f"needle set {path} is invalid: {first}{more}")


class CorpusError(EmbedevalError):
    """A corpus that cannot be read or is too small for the requested haystacks."""


class OutputError(EmbedevalError):
    """An output that cannot be written (disk full, read-only file system, no permission)."""


class ConfigError(EmbedevalError, ValueError):
    """An invalid experiment configuration (unknown variant, bad length, ...)."""


class APIError(EmbedevalError):
    """An embedding or chat API that refused the request (401, exhausted retries, ...)."""

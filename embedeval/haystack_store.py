"""Built haystacks kept in the cache, so a sweep into a new folder reads them instead of building.

Building the default grid's haystacks (and their negatives) takes seconds of every run; a rerun
of the same grid into a new ``--out``, or a plan of it, would build the same rows again. So a
build is stored in ``<cache>/haystacks/`` as one Parquet file keyed by

    blake2b(the haystack settings as JSON (grid, needle and distractor files' hashes, sentence
    splitter, build format; :meth:`NolimaConfig.haystack_settings`) + the token counter's
    fingerprint + embedeval's version + every book's id and text),

so a changed setting, needle file, book, tokenizer or build format builds again. The notes the
build said (merged depths, distractors inside a zone) are kept with the rows and said again when
they are read back. A file that does not read back is built again, never an error; a cache that
cannot be written only costs the next run the build.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd

from embedeval import messages
from embedeval.corpus import Corpus
from embedeval.embedders.tokens import TokenCounter
from embedeval.errors import InputError, OutputError
from embedeval.haystacks import BUILD_NOTES
from embedeval.io import write_table
from embedeval.paths import default_cache_dir
from embedeval.schema import HAYSTACK_COLUMNS
from embedeval.versions import package_version

#: The cache's sub-folder that holds built haystacks.
HAYSTACKS_FOLDER = "haystacks"


def haystacks_key(settings: dict, corpus: Corpus, tokenizer: TokenCounter) -> str:
    """blake2b of the settings, the token counter's fingerprint, embedeval's version (a release that
    builds otherwise without a new build format is not served an older release's rows) and the
    corpus's books (hex, 32 characters)."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (json.dumps(settings, sort_keys=True), tokenizer.fingerprint, corpus.source, package_version("embedeval")):
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    for book in corpus.books:
        for part in (book.id, book.text):
            digest.update(part.encode("utf-8", "surrogatepass"))
            digest.update(b"\0")
    return digest.hexdigest()


def haystacks_path(key: str, cache_dir: str | Path | None = None) -> Path:
    """``<cache_dir>/haystacks/<key>.parquet`` (default: the user cache, ``$EMBEDEVAL_CACHE``)."""
    return (Path(cache_dir) if cache_dir else default_cache_dir()) / HAYSTACKS_FOLDER / f"{key}.parquet"


def stored_haystacks(key: str, cache_dir: str | Path | None = None, say: bool = True) -> pd.DataFrame | None:
    """The haystacks stored under ``key``, their build's notes said again on stderr (``say``); None
    when there are none or they do not read back."""
    path = haystacks_path(key, cache_dir)
    if not path.is_file():
        return None
    try:
        frame = pd.read_parquet(path)
    except Exception:  # damaged or foreign: built again (and stored over it)
        return None
    if list(frame.columns) != list(HAYSTACK_COLUMNS):  # Parquet, but not a build's rows: built again
        return None
    if say:
        for line in frame.attrs.get(BUILD_NOTES, []):
            messages.say(line)
    return frame


def store_haystacks(frame: pd.DataFrame, key: str, cache_dir: str | Path | None = None) -> None:
    """Keep ``frame`` (with its ``attrs`` notes) under ``key``, atomically."""
    try:
        write_table(frame, haystacks_path(key, cache_dir))
    except (OutputError, InputError):  # a cache that cannot be written (or a folder in the file's place) only costs the next run the build
        pass

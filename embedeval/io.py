"""Atomic file output: a reader never sees a half-written file."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from embedeval.errors import InputError

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it over ``path``.

    On any exception the temporary file is removed and ``path`` is left untouched.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the file normal permissions
        os.replace(tmp_path, target)
    finally:
        tmp_path.unlink(missing_ok=True)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def read_texts(path: str | os.PathLike) -> list[str]:
    """Texts from a file: ``.jsonl`` (a ``"text"`` field per line) or one text per line.

    Raises :class:`~embedeval.errors.InputError` naming the file and line for a missing file,
    undecodable bytes, malformed JSON, an empty text, or a file with no texts at all.
    """
    source = Path(path)
    try:
        raw = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"input file {source} does not exist") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"input file {source} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    lines = raw.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    texts: list[str] = []
    for number, line in enumerate(lines, start=1):
        if source.suffix == ".jsonl":
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{source}:{number}: not valid JSON ({exc.msg})") from None
            text = record.get("text") if isinstance(record, dict) else None
            if not isinstance(text, str):
                raise InputError(f'{source}:{number}: expected an object with a "text" string')
        else:
            text = line
        if not text.strip():
            raise InputError(f"{source}:{number}: empty text")
        texts.append(text)
    if not texts:
        raise InputError(f"input file {source} has no texts")
    return texts


def write_embeddings(path: str | os.PathLike, texts: list[str], vectors) -> None:
    """Write vectors atomically: ``.npy`` (the array) or ``.parquet`` (text, embedding columns)."""
    target = Path(path)
    if target.suffix == ".npy":
        with atomic_path(target) as tmp:
            with open(tmp, "wb") as handle:
                np.save(handle, np.asarray(vectors, dtype=np.float32))
    elif target.suffix == ".parquet":
        write_table(pd.DataFrame({"text": texts, "embedding": [np.asarray(v, dtype=np.float32) for v in vectors]}), target)
    else:
        raise InputError(f"output {target} must end in .npy or .parquet")


def write_table(frame, path: str | os.PathLike) -> None:
    """Write a DataFrame atomically: ``.csv`` as CSV, anything else as Parquet."""
    target = Path(path)
    with atomic_path(target) as tmp:
        if target.suffix == ".csv":
            frame.to_csv(tmp, index=False)
        else:
            frame.to_parquet(tmp, index=False)

"""Which output files embedeval wrote, recorded in its cache folder, never beside them.

A command that writes one output file (``themes membership --out membership.csv``, ``similarity
needle-haystack --out nh.csv``, ``export --format prompts``, ``needles convert``, ``embed``, ...)
replaces an existing file only when embedeval wrote it as it is now: a file of the user's is never
replaced on a guess, whatever its name, keys or header (:func:`~embedeval.io.check_output_file`).
The proof is a record per output file in ``outputs/`` of the cache folder
(:func:`~embedeval.paths.default_cache_dir`: ``$EMBEDEVAL_CACHE`` if set, else the platform's user
cache folder; not ``--cache-dir``, which chooses where vectors are kept for one command): a small
JSON file named by the sha256 of the output's absolute path (:func:`output_key`), holding that
path and the sha256 of the bytes embedeval wrote there (:func:`record_written`). A file is
embedeval's while its bytes still have that sha256 (:func:`written_by_embedeval`): a file the user
edited, moved there or copied from elsewhere is not. The folder the user asked embedeval to write
into gets the file asked for and nothing else, so ``git status`` shows only it.

Run folders (a NoLiMa run's, a themes run's, an MTEB export's, a report's) keep their own records
inside them instead (``config.json``, ``themes.json``, ``derived.json``: :mod:`embedeval.run_folder`).

Earlier versions kept the record beside the file, as a hidden ``.NAME.embedeval`` holding the same
sha256 (:func:`legacy_marker`): such a marker still proves that embedeval wrote the file, and is
removed the next time embedeval writes it (the record then moves to the cache folder).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

from embedeval.jsonread import loads, plain_file_bytes
from embedeval.messages import warn
from embedeval.paths import default_cache_dir

#: The folder of the cache folder that holds the records.
RECORDS = "outputs"
_SHA256 = re.compile(r"[0-9a-f]{64}")
#: The most bytes of a record (or an earlier version's marker) that are read: a record is ~200
#: bytes; a longer file is not one embedeval wrote.
_MOST = 64 * 1024


def output_key(target: str | os.PathLike) -> str:
    """The name a record knows an output file by: its absolute path (the folder's links resolved,
    the file's own name kept)."""
    target = Path(target)
    return str(target.absolute().parent.resolve() / target.name)


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes (hex), read a MiB at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def record_path(target: str | os.PathLike) -> Path:
    """Where the record of the output file ``target`` is kept: ``outputs/SHA256.json`` in the cache
    folder, named by the sha256 of :func:`output_key`."""
    name = hashlib.sha256(output_key(target).encode("utf-8", "surrogateescape")).hexdigest()
    return default_cache_dir() / RECORDS / f"{name}.json"


def legacy_marker(target: str | os.PathLike) -> Path:
    """The marker earlier versions wrote beside an output file: ``.NAME.embedeval``."""
    target = Path(target)
    return target.with_name(f".{target.name}.embedeval")


def _small_file_text(path: Path) -> str | None:
    """The UTF-8 text of ``path`` if it is a plain file (not a link, a pipe, a device or a folder:
    opened without following a link or waiting for a writer) of at most :data:`_MOST` bytes; else None."""
    try:
        return plain_file_bytes(path, _MOST).decode("utf-8")
    except (OSError, ValueError):  # missing, unreadable, no plain file, too long, not UTF-8
        return None


def _recorded_sha256(target: Path) -> str | None:
    """The sha256 that the record of ``target`` holds, or None (no record, or one that names another path)."""
    text = _small_file_text(record_path(target))
    if text is None:
        return None
    try:
        record = loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("path") != output_key(target):
        return None
    return record.get("sha256") if isinstance(record.get("sha256"), str) else None


def _legacy_sha256(target: Path) -> str | None:
    """The sha256 in the :func:`legacy_marker` beside ``target`` (a plain file, not a link), or None."""
    text = _small_file_text(legacy_marker(target))  # a name too long for the marker's is no marker either
    return text.strip() if text is not None and _SHA256.fullmatch(text.strip()) else None


def written_by_embedeval(path: str | os.PathLike) -> bool:
    """Whether embedeval wrote the file ``path`` as it is now: its record (or an earlier version's
    marker beside it) holds the file's sha256. A file changed since (by the user) is not embedeval's."""
    target = Path(path)
    if not target.is_file() or target.is_symlink():
        return False
    held = {sha for sha in (_recorded_sha256(target), _legacy_sha256(target)) if sha}
    if not held:
        return False
    try:
        return file_sha256(target) in held
    except OSError:
        return False


def record_written(target: str | os.PathLike) -> None:
    """Record that embedeval has just written ``target`` (its sha256, in its record, written
    atomically), and remove an earlier version's marker beside it. A cache folder that takes no
    file is one warning line on stderr, not an error: the output is written; a later run then
    replaces it only with ``force``."""
    target = Path(target)
    record = record_path(target)
    text = json.dumps({"path": output_key(target), "sha256": file_sha256(target)}) + "\n"
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{record.name}-", suffix=".tmp", dir=record.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(tmp, record)
        finally:
            Path(tmp).unlink(missing_ok=True)
    except OSError as exc:
        warn(f"cannot keep the record that embedeval wrote {target} in {record.parent} ({exc.strerror or exc}); "
             "a later run replaces it only with --force")
        return
    if _legacy_sha256(target) is not None:
        legacy_marker(target).unlink(missing_ok=True)

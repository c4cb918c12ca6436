"""Outputs derived from a run's tables (``metrics.csv``, ``report.md``, ``report.html``, ``figures/``), reused when
the tables and settings they come from are unchanged.

``derived.json`` in the run directory records what they were derived from, as one digest
(:func:`inputs_digest`: sha256 over the run's settings, the bytes of the tables as written and
the source of the embedeval package, so an edited metric or figure counts even without a new
version number),
and the sha256 of each derived file. A rerun whose digest matches, and whose recorded files are
all present and unaltered, reads them instead of recomputing the bootstrap and redrawing the
figures (:func:`fresh_outputs`). Any other run removes the record before it rewrites an output
(:func:`forget_outputs`) and writes it after the last one (:func:`record_outputs`), so an
interrupted run never leaves outputs marked as derived from tables they do not describe. A
recorded file changed since embedeval wrote it (a ``report.md`` edited by hand) is copied aside
before it is written again (:func:`keep_edited`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from embedeval.io import json_text, write_text_atomic
from embedeval.jsonread import load_file
from embedeval.messages import note
from embedeval.ownership import file_sha256

RECORD = "derived.json"
#: What the copy of an edited output is named after: ``report.md.edited-20261129T072600``
#: (:func:`keep_edited`).
EDITED = ".edited-"


def source_digest() -> str:
    """sha256 over the path and bytes of every module of the embedeval package."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(f"{path.relative_to(package)}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()


def inputs_digest(out: Path, tables: Iterable[str], settings: dict) -> str:
    """sha256 over ``settings`` (as canonical JSON), the name and bytes of each table file in
    ``out`` and :func:`source_digest`."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode("utf-8"))
    for name in tables:
        digest.update(f"\0{name}\0{file_sha256(Path(out) / name)}".encode())
    digest.update(f"\0source\0{source_digest()}".encode())
    return digest.hexdigest()


def fresh_outputs(out: Path, digest: str) -> bool:
    """Whether ``out``'s derived files were made from inputs with ``digest`` and are all still as
    they were written (a missing, altered or unreadable file or record means no)."""
    out = Path(out)
    try:
        record = load_file(out / RECORD)
        files = record["files"]
        return (record["inputs"] == digest and bool(files)
                and all(file_sha256(out / name) == sha for name, sha in files.items()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def recorded_files(out: Path) -> dict[str, str]:
    """The files ``out``'s record lists (name -> sha256): what embedeval wrote there; empty
    without a readable record."""
    try:
        files = load_file(Path(out) / RECORD)["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return files if isinstance(files, dict) and all(isinstance(v, str) for v in files.values()) else {}


def keep_edited(out: Path, names: Iterable[str]) -> list[Path]:
    """Before a run or a report rewrites the files ``names`` (relative to ``out``): each that the
    record lists and that is no longer what embedeval wrote (its sha256 differs: edited by hand, or
    by another program) is copied to ``NAME.edited-TIME`` beside it (:data:`EDITED`), said in one
    ``note:`` line on stderr, so the rewrite loses nothing of the user's. Returns the copies. A file
    the record does not list (or a folder without a record: a run interrupted while it rewrote
    them) is not compared: nothing says what embedeval wrote there."""
    out = Path(out)
    recorded = recorded_files(out)
    kept = []
    stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S")
    for name in names:
        path = out / name
        if name not in recorded or not path.is_file() or path.is_symlink() or file_sha256(path) == recorded[name]:
            continue
        copy = _copy_aside(path, f"{path.name}{EDITED}{stamp}")
        note(f"{path} was changed since embedeval wrote it; that version is kept as {copy.name} before it is "
             "written again")
        kept.append(copy)
    return kept


def _copy_aside(path: Path, name: str) -> Path:
    """Copy ``path`` to a new file beside it named ``name`` (``name-2``, ``-3``, ... where a name is
    taken by anything, a link to nothing included); the copy is created, never opened through a
    link (``O_EXCL``, ``O_NOFOLLOW``), so nothing is written outside the folder."""
    number = 1
    while True:
        copy = path.with_name(name if number == 1 else f"{name}-{number}")
        try:
            handle = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            number += 1
            continue
        with os.fdopen(handle, "wb") as target, open(path, "rb") as source:
            shutil.copyfileobj(source, target)
        shutil.copystat(path, copy)
        return copy


def record_rewritten(out: Path, names: Iterable[str]) -> None:
    """After a report rewrote ``names`` in a folder whose record lists them (a run's report made
    again by ``embedeval report``): their new sha256 in the record, the rest as it was, so it still
    says what embedeval last wrote there (:func:`keep_edited`)."""
    out = Path(out)
    try:
        record = load_file(out / RECORD)
    except (OSError, ValueError):
        return
    files = recorded_files(out)
    written = {name: file_sha256(out / name) for name in names if name in files and (out / name).is_file()}
    if isinstance(record, dict) and any(files[name] != sha for name, sha in written.items()):  # else the record stands as it is
        write_text_atomic(out / RECORD, json_text({**record, "files": {**files, **written}}))


def forget_outputs(out: Path) -> None:
    """Remove the record: from here on ``out``'s derived files count as stale."""
    (Path(out) / RECORD).unlink(missing_ok=True)


def record_outputs(out: Path, digest: str, names: Iterable[str]) -> None:
    """Record that the files ``names`` (relative to ``out``) were derived from inputs with ``digest``."""
    out = Path(out)
    files = {name: file_sha256(out / name) for name in sorted(names)}
    write_text_atomic(out / RECORD, json_text({"inputs": digest, "files": files}))

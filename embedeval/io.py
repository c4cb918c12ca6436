"""File output: atomic writes (a reader never sees a half-written file), the checks of an output
file before any work (never replacing a file of the user's: whether embedeval wrote it is
:mod:`embedeval.ownership`'s record), its lock (one writer at a time) and reading input files. Run
folders are :mod:`embedeval.run_folder`'s."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from embedeval.bounds import MAX_LINE_BYTES, MIB
from embedeval.errors import InputError, OutputError
from embedeval.jsonread import JsonLimitError, load_file, loads
from embedeval.locks import LOCK_NAME, OUTPUT_WAIT, hold, release_lock, remove_if_empty, write_holder
from embedeval.messages import note
from embedeval.ownership import output_key, record_written, written_by_embedeval

if TYPE_CHECKING:  # numpy and pandas are imported where used: the command line imports this module
    import pandas as pd

_UMASK = os.umask(0)
os.umask(_UMASK)
#: The name of an :func:`atomic_path` temporary file: ``.TARGET.embedeval-PID-RANDOM.tmp``, a name
#: only embedeval makes, so the sweep of a killed run's leftovers never takes a user's file.
_TEMP_MARK = ".embedeval-"
_TEMP_SUFFIX = ".tmp"
_TEMP_NAME = re.compile(rf"\..+{re.escape(_TEMP_MARK)}(?P<pid>\d+)-[a-z0-9_]{{8}}{re.escape(_TEMP_SUFFIX)}")  # mkstemp's 8 random characters
#: errno values that mean "the file system will not take this file" (not a bug in the caller).
_WRITE_FAILURES = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG}


#: The columns of a ``.parquet`` file of vectors (:func:`write_embeddings`).
EMBEDDING_COLUMNS = ("text", "embedding")


#: The file outputs that :func:`check_output_file` let through in this process: the targets whose
#: writes (:func:`atomic_path`) are recorded as embedeval's (:func:`~embedeval.ownership.record_written`)
#: and sweep their stale temporary files.
_OUTPUT_TARGETS: set[str] = set()


@dataclass
class Force:
    """``embedeval --force`` for one command: whether an existing output file that embedeval did not
    write may be replaced (``on``; the object is as true as it), and the files already named in the
    note that says so (``noted``: each file is named once however often its writers check it).
    Made once per command and given to every writer of that command as its ``force``."""

    on: bool = False
    noted: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return self.on

    def note(self, target: Path, key: str, what: str = "which embedeval did not write") -> None:
        """Note once per file (:func:`~embedeval.messages.note`) that ``target`` (``key``: its :func:`output_key`) is replaced."""
        if key not in self.noted:
            self.noted.add(key)
            note(f"replacing {target}, {what} (--force)")


def as_force(force: Force | bool) -> Force:
    """A writer's ``force`` as a :class:`Force` (``True``: a note per call, nothing shared)."""
    return force if isinstance(force, Force) else Force(bool(force))


def check_output_file(path: str | os.PathLike, suffixes: Sequence[str], force: Force | bool = False) -> Path:
    """Refuse, before any work, an output that cannot become a file of one of ``suffixes``: a
    wrong suffix, an existing folder, a parent that is a file, a link, or an existing file that
    embedeval did not write (:func:`~embedeval.ownership.written_by_embedeval`: never judged by its
    content, so a file of the user's is never replaced on a guess), unless ``force``
    (``embedeval --force``, a :class:`Force`) allows it, said in one note. The target is registered, so that its
    write is recorded as embedeval's (:func:`atomic_path`). Returns the path."""
    target = Path(path)
    if target.suffix not in suffixes:
        raise InputError(f"output {target} must end in {' or '.join(suffixes)}")
    if target.is_symlink():
        raise InputError(f"output {target} is a link; embedeval writes no file through or over a link: choose another path")
    if target.is_dir():
        raise InputError(f"output {target} is a folder, not a file")
    dangling = next((p for p in target.parents if p.is_symlink() and not p.exists()), None)
    if dangling is not None:  # the folders could not be made there (it was "File exists" after the work)
        raise InputError(f"output {target} cannot be created: {dangling} is a link to nothing")
    parent = next((p for p in target.parents if p.exists()), Path("."))
    if not parent.is_dir():
        raise InputError(f"output {target} cannot be created: {parent} is a file")
    key = output_key(target)
    if target.exists() and not written_by_embedeval(target):
        if not force:
            raise InputError(f"output {target} exists and is not a file embedeval wrote (or was changed since); it is "
                             "never replaced: choose another path, remove it, or give `force` to replace it anyway", "force")
        as_force(force).note(target, key)
    check_writable(target, parent)
    _OUTPUT_TARGETS.add(key)
    return target


def _stale_temps(place: Path, pattern: re.Pattern = _TEMP_NAME) -> list[Path]:
    """The :func:`atomic_path` temporary files in ``place`` named as ``pattern`` names them whose
    writing process no longer runs (links and folders never)."""
    try:
        candidates = sorted(place.glob(f".*{_TEMP_SUFFIX}"))
    except OSError:
        return []
    return [path for path in candidates if (match := pattern.fullmatch(path.name)) and path.is_file()
            and not path.is_symlink() and not _process_alive(int(match["pid"]))]


def _sweep_stale_temps(target: Path) -> None:
    """Delete the temporary files that a killed process left beside the file output ``target``
    (``.NAME.embedeval-PID-RANDOM.tmp`` of that name and a pid that no longer runs)."""
    name = re.compile(rf"\.{re.escape(target.name)}{re.escape(_TEMP_MARK)}(?P<pid>\d+)-[a-z0-9_]{{8}}{re.escape(_TEMP_SUFFIX)}")
    for path in _stale_temps(target.parent, name):
        path.unlink(missing_ok=True)


def check_writable(target: Path, parent: Path) -> None:
    """Refuse, with one :class:`OutputError` naming ``target``, an output whose folder takes no
    file (no permission, a read-only file system): found before any work, not after it. ``parent``:
    the nearest existing folder above ``target``; a temporary file (or, when folders are still to
    be made, a temporary folder) is made there and removed at once."""
    try:
        if parent == target.parent:
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}{_TEMP_MARK}{os.getpid()}-", suffix=_TEMP_SUFFIX, dir=parent)
            os.close(fd)
            os.unlink(tmp)
        else:
            os.rmdir(tempfile.mkdtemp(prefix=f".{target.name}{_TEMP_MARK}{os.getpid()}-", dir=parent))
    except OSError as exc:
        raise OutputError(f"cannot write {target} ({exc.strerror or exc}); nothing was done: choose another path") from None


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it over ``path``.

    On any exception the temporary file is removed and ``path`` is left untouched; a file-system
    failure (no space, read-only, no permission) is one :class:`OutputError` naming ``path``. A
    file output that :func:`check_output_file` let through is recorded as embedeval's after the
    rename (:func:`~embedeval.ownership.record_written`; run folders keep their own records), and
    the temporary files that killed processes left for it are swept first.
    """
    target = Path(path)
    if target.is_dir():
        raise InputError(f"output {target} is a folder, not a file")
    registered = output_key(target) in _OUTPUT_TARGETS
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if registered:
            _sweep_stale_temps(target)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}{_TEMP_MARK}{os.getpid()}-", suffix=_TEMP_SUFFIX,
                                    dir=target.parent)
    except OSError as exc:
        raise OutputError(f"cannot write {target} ({exc.strerror or exc})") from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the file normal permissions
        os.replace(tmp_path, target)
        if registered:
            record_written(target)
    except OSError as exc:
        if exc.errno not in _WRITE_FAILURES:
            raise
        raise OutputError(f"cannot write {target} ({exc.strerror or exc})") from None
    finally:
        tmp_path.unlink(missing_ok=True)


def _process_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # PermissionError: it runs, as someone else; no such pid can be: not ours
        return True
    return True


def is_temp_file_name(name: str) -> bool:
    """Whether ``name`` is the name of an :func:`atomic_path` temporary file (a name only embedeval makes)."""
    return _TEMP_NAME.fullmatch(name) is not None


def remove_stale_temp_files(folder: Path) -> list[Path]:
    """Delete the temporary files that :func:`atomic_path` left in a folder (its top level and
    ``figures/``) when a process was killed mid-write: a run directory, or a folder of exported
    ONNX graphs. Only files named as atomic_path names them whose process no longer runs go; any
    other file stays. Call it only while holding the folder
    (:func:`~embedeval.run_folder.run_directory`, or the graphs' lock)."""
    stale = [path for place in (folder, folder / "figures") for path in _stale_temps(place)]
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def lock_path_of(path: str | os.PathLike) -> Path:
    """The lock file of the output file ``path`` (:func:`output_file_lock`): ``.NAME.embedeval.lock`` beside it."""
    target = Path(path)
    return target.with_name(f".{target.name}{LOCK_NAME}")


@contextlib.contextmanager
def output_file_lock(path: str | os.PathLike) -> Iterator[Path]:
    """Hold the output file ``path`` for one writer, as :func:`~embedeval.run_folder.run_directory`
    holds a run folder (the same lock, :mod:`embedeval.locks`, refusing at once: :func:`lock_path_of`,
    flock, the holder written in it): a second writer, in
    this process or another, is refused at once with one :class:`InputError` naming the holder
    (``pid N on HOST since TIME``), before it reads or sends anything. The lock file goes when the
    writer ends; a killed writer's lock file is taken over by the next one."""
    target = Path(path)
    lock = lock_path_of(target)
    created, fd = hold(target.parent, lock, f"output {target}", "command",
                       lambda exc: OutputError(f"cannot write {target} ({exc.strerror or exc})"), OUTPUT_WAIT)
    try:
        try:
            write_holder(fd)
        except OSError as exc:
            raise OutputError(f"cannot write {target} ({exc.strerror or exc})") from None
        yield target
    finally:
        release_lock(fd, lock)
        remove_if_empty(created)


def absolute_path(path: str) -> str:
    """``path`` made absolute (``~`` expanded; a relative path resolved against the working
    directory): what a run records, so that it is found again from any folder."""
    target = Path(path).expanduser()
    return str(target if target.is_absolute() else target.resolve())


def text_sha256(text: str) -> str:
    """sha256 of a text's UTF-8 bytes (hex)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def json_text(value, indent: int | None = 2, ensure_ascii: bool = True) -> str:
    """``value`` as the JSON text embedeval writes to a file or prints for scripts: strict JSON,
    where a NaN or infinity is a ValueError (a bug to fix where the value is made: write null
    there), never the ``NaN`` or ``Infinity`` that Python's json writes and no other JSON reader
    takes."""
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, allow_nan=False)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def jsonl_lines(text: str) -> Iterator[tuple[int, str]]:
    """The non-blank lines of a JSON Lines text with their numbers (from 1). Lines end at ``\n``
    (or ``\r\n``) only, as in :func:`read_texts`: a U+2028 or form feed, which JSON allows
    unescaped inside a string, does not split a record."""
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if line.strip():
            yield number, line


def read_text_file(path: str | os.PathLike, what: str, error: type[Exception] = InputError, encoding: str = "utf-8",
                   lines: bool = False) -> str:
    """The text of a file, or one ``error`` naming ``what`` and the file: missing, not UTF-8
    (``encoding``), or unreadable (a folder, no permission). ``lines``: a file read line by line
    (JSON Lines, a text per line), whose line (ending at ``\n``) over
    :data:`~embedeval.bounds.MAX_LINE_BYTES` is one ``error`` naming the file and line, found as it
    is read (a 2 GB line was a MemoryError, or a tokenizer's abort)."""
    source = Path(path)
    try:
        if lines:  # newlines as read_text gives them (\r\n and \r read as \n)
            return _bounded_bytes(source, what, error).decode(encoding).replace("\r\n", "\n").replace("\r", "\n")
        return source.read_text(encoding=encoding)
    except FileNotFoundError:
        raise error(f"{what} {source} does not exist") from None
    except UnicodeDecodeError as exc:
        raise error(f"{what} {source} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise error(f"{what} {source} cannot be read ({exc.strerror or exc})") from None


#: Bytes :func:`_bounded_bytes` reads at a time, and where it looks for line breaks.
_LINE_BLOCK = 1 << 20
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")


def _bounded_bytes(source: Path, what: str, error: type[Exception]) -> bytes:
    """The bytes of ``source``, read a block at a time: a line longer than
    :data:`~embedeval.bounds.MAX_LINE_BYTES` is one ``error``, read no further than a block past
    the bound. Lines end at ``\n``, ``\r\n`` or ``\r`` (an old Mac's file), as they are then read."""
    parts, number, current, after_cr = [], 1, 0, False
    with source.open("rb") as handle:
        for block in iter(lambda: handle.read(_LINE_BLOCK), b""):
            parts.append(block)
            start = 0
            for end in _LINE_BREAK.finditer(block):
                if end.start() == 0 and after_cr and end.group() == b"\n":  # the \n of a \r\n cut between blocks
                    start = 1
                    after_cr = False
                    continue
                current += end.start() - start
                if current > MAX_LINE_BYTES:
                    break
                number, current, start = number + 1, 0, end.end()
            else:
                current += len(block) - start
            after_cr = block.endswith(b"\r")
            if current > MAX_LINE_BYTES:
                raise error(f"{what} {source}: line {number} is longer than the {MAX_LINE_BYTES // MIB} MiB a line may hold "
                            "(docs/scale.md)")
    return b"".join(parts)


def jsonl_objects(text: str, where: Callable[[int], str], not_an_object: str,
                  error: type[Exception] = InputError) -> Iterator[tuple[int, dict]]:
    """Each non-blank line of a JSON Lines text (:func:`jsonl_lines`) parsed, with its number; a
    line that is not JSON, or not a JSON object, is one ``error``: ``where(number)`` then what
    is wrong (``not_an_object`` for the latter)."""
    for number, line in jsonl_lines(text):
        try:
            record = loads(line)
        except JsonLimitError as exc:
            raise error(f"{where(number)}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise error(f"{where(number)}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise error(f"{where(number)}: {not_an_object}")
        yield number, record


def read_json(path: str | os.PathLike):
    """The JSON value in a file, or one :class:`InputError` naming the file when it cannot be read
    or parsed."""
    try:
        return load_file(Path(path))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path} is not valid JSON ({exc})") from None


def read_texts(path: str | os.PathLike) -> list[str]:
    """Texts from a file: ``.jsonl`` (a ``"text"`` field per line) or one text per line. Lines end
    at ``\n`` (or ``\r\n``) only: a form feed or U+2028 inside a text does not split it.

    Raises :class:`~embedeval.errors.InputError` naming the file and line for a missing file,
    undecodable bytes, malformed JSON, an empty text, or a file with no texts at all.
    """
    source = Path(path)
    raw = read_text_file(source, "input file", lines=True)
    if source.suffix == ".jsonl":
        records = list(jsonl_objects(raw, lambda number: f"{source}:{number}", 'expected an object with a "text" string'))
        lines = [(number, record.get("text")) for number, record in records]
        for number, text in lines:
            if not isinstance(text, str):
                raise InputError(f'{source}:{number}: expected an object with a "text" string')
    else:
        lines = list(enumerate((line.removesuffix("\r") for line in raw.split("\n")), start=1))  # not splitlines(): U+2028, \f stay inside a text
        while lines and not lines[-1][1].strip():
            lines.pop()
    texts: list[str] = []
    for number, text in lines:
        if not text.strip():
            raise InputError(f"{source}:{number}: empty text")
        texts.append(text)
    if not texts:
        raise InputError(f"input file {source} has no texts")
    return texts


def write_embeddings(path: str | os.PathLike, texts: list[str], vectors, force: Force | bool = False) -> None:
    """Write vectors atomically: ``.npy`` (the array) or ``.parquet`` (text, embedding columns);
    ``force``: replace a file embedeval did not write (:func:`check_output_file`)."""
    import numpy as np
    import pandas as pd

    target = Path(path)
    check_output_file(target, (".npy", ".parquet"), force)
    if target.suffix == ".npy":
        with atomic_path(target) as tmp:
            with open(tmp, "wb") as handle:
                np.save(handle, np.asarray(vectors, dtype=np.float32))
    elif target.suffix == ".parquet":
        text, embedding = EMBEDDING_COLUMNS
        write_table(pd.DataFrame({text: texts, embedding: [np.asarray(v, dtype=np.float32) for v in vectors]}), target)


def check_column_kinds(frame: pd.DataFrame, source, numbers: Sequence[str] = (), integers: Sequence[str] = (),
                       flags: Sequence[str] = (), texts: Sequence[str] = ()) -> None:
    """One :class:`InputError` naming ``source``, the column and the first offending value with its
    line (a CSV's header is line 1) or row (Parquet) where a column of ``numbers`` holds anything but numbers, or one
    of ``integers`` anything but whole numbers (an empty cell, a missing value, passes: columns
    that may be empty are written so), one of ``flags`` anything but true or false (or missing), or
    one of ``texts`` anything but text (a missing value included). Booleans are not numbers.
    Columns the frame lacks are not checked."""
    import numpy as np
    import pandas as pd
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    for column in [*numbers, *integers]:
        if column not in frame.columns:
            continue
        values = frame[column]
        if is_numeric_dtype(values) and not is_bool_dtype(values):
            parsed = values
        else:  # text where numbers go; a boolean is no number
            parsed = pd.to_numeric(values.mask(values.map(lambda v: isinstance(v, bool))), errors="coerce")
        bad = values.notna() & parsed.isna()
        if column in integers:
            bad |= parsed.notna() & (parsed % 1 != 0)
        refuse_first(values, bad, source, column, "a whole number" if column in integers else "a number")
    for column in flags:
        if column in frame.columns and not is_bool_dtype(frame[column]):
            values = frame[column]
            named = values.map(lambda v: v in ("True", "False"))  # a CSV column of words besides true and false
            bad = values.notna() & ~values.map(lambda v: isinstance(v, (bool, np.bool_)))
            refuse_first(values, bad & ~named if (bad & ~named).any() else bad, source, column, "true or false")
    for column in texts:
        if column in frame.columns:
            values = frame[column]
            refuse_first(values, ~values.map(lambda v: isinstance(v, str)), source, column, "a text")


#: How far past a range's end a number a table holds may lie (float arithmetic: a correlation of
#: 1.0000000000000002) and still be in it.
ROUNDING = 1e-9


@dataclass(frozen=True)
class RowRule:
    """A rule every row of a table keeps besides its cells' kinds and ranges: ``broken(frame)``
    marks the rows that break it (a boolean Series; the frame's cells already hold their kinds),
    named at ``column`` as not ``words``; checked where the table has ``column`` and the columns
    the rule also reads (``needs``)."""

    column: str
    words: str
    broken: Callable[[pd.DataFrame], pd.Series]
    needs: tuple[str, ...] = ()


@dataclass(frozen=True)
class TableSchema:
    """What a table's columns hold, declared once per table and checked when it is read
    (:meth:`check`): the kinds of :func:`check_column_kinds` (``numbers``, ``integers``, ``flags``,
    ``texts``); the columns with no empty cell (``required``); each number column's range (``ranges``:
    ``(low, high)``, both inclusive, None for no bound; a number in a range is finite, so ``inf`` is
    out of every one); the values a text column may hold (``values``: its words, the allowed values);
    the columns whose values together name a row once (``unique``: the key
    columns, the first duplicate's last key column named as not ``unique_words``); and the rules
    across cells and rows (``rules``, :class:`RowRule`). Columns the frame lacks are not checked."""

    numbers: tuple[str, ...] = ()
    integers: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    texts: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    ranges: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)
    values: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    unique: tuple[str, ...] = ()
    unique_words: str = "a row once (the row is there twice)"
    rules: tuple[RowRule, ...] = ()

    def kind_words(self, column: str) -> str:
        """What a cell of ``column`` holds, in the words of an error line."""
        return ("a whole number" if column in self.integers else "a number" if column in self.numbers
                else "true or false" if column in self.flags else "a text")

    def check(self, frame: pd.DataFrame, source) -> None:
        """One :class:`InputError` naming ``source``, the first offending line (a CSV's header is
        line 1) or row (Parquet) and the column, for the first cell or row of ``frame`` that breaks
        this schema: kinds, then empty cells, values, ranges, duplicates and rules, in that order."""
        import numpy as np
        import pandas as pd

        check_column_kinds(frame, source, self.numbers, self.integers, self.flags, self.texts)
        for column in self.required:
            if column in frame.columns:
                refuse_first(frame[column], frame[column].isna(), source, column, self.kind_words(column))
        for column, (words, allowed) in self.values.items():
            if column in frame.columns:
                refuse_first(frame[column], frame[column].notna() & ~frame[column].isin(allowed), source, column, words)
        for column, (low, high) in self.ranges.items():
            if column in frame.columns:
                values = pd.to_numeric(frame[column], errors="coerce").astype(float)
                bad = values.notna() & ~(np.isfinite(values) & (values >= (-np.inf if low is None else low - ROUNDING))
                                         & (values <= (np.inf if high is None else high + ROUNDING)))
                refuse_first(frame[column], bad, source, column, range_words(self.kind_words(column), low, high))
        keys = [column for column in self.unique if column in frame.columns]
        if keys and len(keys) == len(self.unique):
            refuse_first(frame[keys[-1]], frame[keys].astype(str).duplicated(), source, keys[-1], self.unique_words)
        for rule in self.rules:
            if {rule.column, *rule.needs} <= set(frame.columns):
                refuse_first(frame[rule.column], rule.broken(frame), source, rule.column, rule.words)


def range_words(kind: str, low: float | None, high: float | None) -> str:
    """``a number from 0 to 1``, ``a whole number >= 1``, ``a number <= 1``, ``a finite number``."""
    shown = [f"{bound:,}" if float(bound).is_integer() else f"{bound:g}" for bound in (low, high) if bound is not None]
    if low is not None and high is not None:
        return f"{kind} from {shown[0]} to {shown[1]}"
    if low is None and high is None:
        return kind.replace("a number", "a finite number")
    return f"{kind} {'>=' if low is not None else '<='} {shown[0]}"


def csv_line(source, row: int) -> int:
    """The line of the CSV file ``source`` on which its data row ``row`` (from 0, as pandas reads
    it) starts: the header is line 1, and blank lines (which pandas skips) and cells holding line
    breaks count as the lines they are; ``row + 2`` when the file cannot be read again."""
    import csv

    try:
        with open(source, newline="", encoding="utf-8") as handle:
            reader, start, seen = csv.reader(handle), 1, -1
            for record in reader:
                if record:  # a blank line is [] to csv and skipped by pandas
                    if seen == row:
                        return start
                    seen += 1
                start = reader.line_num + 1
    except (OSError, UnicodeDecodeError, csv.Error):
        pass
    return row + 2


#: Why a run's table holds a value its run would not write, as a refusal says it.
EDITED = "the file was edited or damaged; run again to rewrite it"


def refuse_first(values, bad, source, column: str, what: str, cause: Callable[[object], str] | None = None) -> None:
    """One :class:`InputError` naming the first row of ``bad`` (see :func:`check_column_kinds`),
    ending with why such a value is there (``cause`` of the value: :data:`EDITED` by default)."""
    if not bad.any():
        return
    row = int(bad.to_numpy().nonzero()[0][0])
    value = values.iloc[row]
    missing = value is None or (isinstance(value, float) and value != value)  # None or NaN
    shown = "an empty cell" if missing else repr(value) if isinstance(value, str) else str(value)
    where = f"line {csv_line(source, row)}" if Path(source).suffix == ".csv" else f"row {row + 1}"
    raise InputError(f"{source}, {where}, column {column}: {shown} is not {what} ({cause(value) if cause else EDITED})")


def read_table(path: str | os.PathLike, columns: Sequence[str] = (), numbers: Sequence[str] = (),
               integers: Sequence[str] = (), empty: bool = False, flags: Sequence[str] = (),
               texts: Sequence[str] = ()) -> pd.DataFrame:
    """A ``.csv`` or Parquet table that must exist, parse, have rows (unless ``empty``: a table
    that may have none) and hold ``columns``, whose ``numbers``, ``integers``, ``flags`` and
    ``texts`` columns hold what they say (:func:`check_column_kinds`); anything else is one
    :class:`InputError` naming the file and what is wrong."""
    import pandas as pd

    source = Path(path)
    if not source.is_file():
        raise InputError(f"{source} does not exist or is not a file")
    kind = "CSV" if source.suffix == ".csv" else "Parquet"
    try:
        frame = pd.read_csv(source) if kind == "CSV" else pd.read_parquet(source)
    except Exception as exc:  # pandas and pyarrow raise many types for a file that is not a table
        raise InputError(f"{source} is not a readable {kind} table ({type(exc).__name__}: {str(exc)[:120]})") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(f"{source} lacks the column(s) {', '.join(missing)}")
    if frame.empty and not empty:
        raise InputError(f"{source} has no rows")
    check_column_kinds(frame, source, numbers, integers, flags, texts)
    return frame


def write_table(frame, path: str | os.PathLike) -> None:
    """Write a DataFrame atomically: ``.csv`` as CSV, anything else as Parquet."""
    target = Path(path)
    with atomic_path(target) as tmp:
        if target.suffix == ".csv":
            frame.to_csv(tmp, index=False)
        else:
            frame.to_parquet(tmp, index=False)

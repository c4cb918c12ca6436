"""The output folders of a run, held one run at a time: a NoLiMa run's folder (whose files
:mod:`embedeval.run` names), a themes run's, an MTEB export's and a report's.

Before any work a folder that holds files is refused unless embedeval wrote it
(:func:`check_run_folder`); while the run works it holds the folder's lock file
(:data:`~embedeval.locks.LOCK_NAME`, taken as :mod:`embedeval.locks` takes every lock: a second run
is refused at once, naming the holder) and, in a folder that was new or empty, a claim
(:data:`CLAIM_NAME`), so that a run killed before it wrote its record leaves a folder the next run
of its kind may write into (:func:`run_directory`). A folder inside it that embedeval writes into
(``figures/``) is never a link (:func:`check_subfolder`), and every file a run writes there (its
``outputs``) is a plain file or nothing yet, checked before any work (:func:`check_outputs`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from embedeval.errors import InputError, OutputError
from embedeval.io import is_temp_file_name, remove_stale_temp_files, write_text_atomic
from embedeval.locks import LOCK_NAME, OUTPUT_WAIT, hold, let_go, remove_if_empty, write_holder

#: The file that marks a new or empty folder as embedeval's output folder from the moment a run
#: takes it until the run has written the record that marks it for good (a run's config.json, a
#: report's or export's derived.json, a themes manifest): a run killed or crashed in between (with
#: half its figures drawn) leaves a folder the next run may still write into.
CLAIM_NAME = ".embedeval-claim"


def _is_leftover(path: Path) -> bool:
    """Whether ``path`` is what a killed embedeval run leaves in a run directory before it writes
    anything else: its lock file, its claim (:data:`CLAIM_NAME`) or an :func:`~embedeval.io.atomic_path`
    temporary file (plain files only)."""
    return ((path.name in (LOCK_NAME, CLAIM_NAME) or is_temp_file_name(path.name))
            and path.is_file() and not path.is_symlink())


def _claim_text(record: str) -> str:
    """What a claim file says: the kind of output (its ``record``) the folder was taken for."""
    return (f"embedeval writes its output into this folder (record: {record}); this file stays only when a run "
            "stopped before it finished, and lets the next run of the same kind write here again\n")


def _is_claimed(folder: Path, record: str) -> bool:
    """Whether a run of the kind that writes ``record`` took ``folder`` when it was new or empty and
    stopped (killed, crashed) before it wrote that record: the folder holds embedeval's claim file,
    naming the same record (a folder another command claimed is not this command's to take)."""
    claim = folder / CLAIM_NAME
    if not _is_leftover(claim):
        return False
    try:
        return claim.read_text(encoding="utf-8") == _claim_text(record)
    except (OSError, UnicodeDecodeError):
        return False


def check_outputs(folder: Path, outputs: Iterable[str]) -> None:
    """Refuse, with one :class:`InputError` naming ``out`` and the first such path, an output of a
    run (``outputs``: paths relative to ``folder``, ``/``-separated) whose place is taken by
    something embedeval does not write over: the output itself a link (to anything, or to nothing)
    or anything but a regular file, or a folder on its way inside ``folder`` a link or not a folder.
    Missing paths are fine: the run creates them. Called before any work, so that a run refused
    for it has rewritten nothing (a finished run stays finished)."""
    for name in outputs:
        path = folder
        for part in Path(name).parts:
            if path != folder and (path.is_symlink() or (path.exists() and not path.is_dir())):
                raise InputError(f"output {folder / name} cannot be written: {path} is a link or not a folder; embedeval "
                                 "writes into folders of its own only: remove it (nothing was written)", "out")
            path = path / part
        if path.is_symlink() or (path.exists() and not path.is_file()):
            kind = "a link" if path.is_symlink() else "a folder" if path.is_dir() else "not a regular file"
            raise InputError(f"output {path} is {kind}; embedeval writes no file over or through it: remove it "
                             "(nothing was written)", "out")


def check_run_folder(folder: Path, is_run: Callable[[Path], bool], record: str, outputs: Iterable[str] = ()) -> None:
    """Refuse, with one :class:`InputError` naming ``out``, a ``folder`` that embedeval may not
    write a run into: a file, or a folder holding anything but a run embedeval wrote
    (``is_run(folder)``: its ``record`` says so) or what a killed run leaves (its lock and
    temporary files, or anything beside the claim a run made on the folder when it took it new or
    empty: :data:`CLAIM_NAME`), or one where a file the run writes (``outputs``, relative to
    ``folder``) is a link, a folder or anything but a regular file (:func:`check_outputs`). A
    missing or empty folder is fine."""
    if not folder.exists():
        return
    if not folder.is_dir():
        raise InputError(f"`out` {folder} exists and is not a folder", "out")
    try:
        entries = list(folder.iterdir())
    except OSError as exc:
        raise InputError(f"cannot read run directory {folder} ({exc.strerror or exc})") from None
    if all(_is_leftover(path) for path in entries) or _is_claimed(folder, record) or is_run(folder):
        check_outputs(folder, outputs)
        return
    raise InputError(f"`out` {folder} holds files and is not a run folder embedeval wrote (no {record} of an embedeval run in it); "
                     "choose a new or empty folder, so that no file of yours is overwritten or deleted", "out")


def _holds_only_leftovers(folder: Path) -> bool:
    """Whether ``folder`` holds nothing but what :func:`_is_leftover` names (an empty folder too)."""
    return all(_is_leftover(path) for path in folder.iterdir())


def check_subfolder(folder: Path) -> None:
    """Refuse, with one :class:`InputError` naming ``out``, a folder inside an output folder that
    embedeval writes into (a run's ``figures/``) when it is a link or not a folder: nothing is
    ever written through a link into a folder of the user's."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise InputError(f"{folder} is a link or not a folder; embedeval writes into a folder of its own only: remove it "
                         "(no file is written through it)", "out")


@contextlib.contextmanager
def run_directory(path: str | os.PathLike, is_run: Callable[[Path], bool], record: str,
                  outputs: Iterable[str] = ()) -> Iterator[Path]:
    """Hold ``path`` for one run, creating it (and its parents) if needed.

    Before anything is created, a folder that holds files is refused unless embedeval wrote it
    (:func:`check_run_folder` with ``is_run`` and its ``record``), and so is one where a file the
    run writes (``outputs``) is taken by a link or a folder (:func:`check_outputs`). A second run into the same
    folder fails at once with an :class:`InputError` naming the holder
    (:data:`~embedeval.locks.OUTPUT_WAIT`). Temporary files of a
    killed run are removed first (:func:`remove_stale_temp_files`). A folder that holds nothing
    else is claimed (:data:`CLAIM_NAME`) before the run writes into it, so that a run killed or
    crashed before it wrote its ``record`` leaves a folder the next run accepts; the claim goes
    once ``is_run(folder)`` holds, or when nothing else was written. When the run ends, its lock
    file goes; the folders this call created are removed again while they are empty (a run that
    failed before writing anything leaves no folder behind)."""
    folder = Path(path)
    check_run_folder(folder, is_run, record, outputs)
    created, fd = hold(folder, folder / LOCK_NAME, f"run directory {folder}", "run",
                       lambda exc: InputError(f"cannot write to run directory {folder} ({exc.strerror or exc})"), OUTPUT_WAIT)
    try:
        try:
            write_holder(fd)
            remove_stale_temp_files(folder)
            if _holds_only_leftovers(folder) and not _is_claimed(folder, record):
                write_text_atomic(folder / CLAIM_NAME, _claim_text(record))
        except OSError as exc:
            raise OutputError(f"cannot write to run directory {folder} ({exc.strerror or exc})") from None
        yield folder
    finally:
        # Clean up while still holding the lock, so no other run can slip in between.
        with contextlib.suppress(OSError):  # the folder gone or unreadable: nothing to clean up
            if _holds_only_leftovers(folder) or is_run(folder):
                (folder / CLAIM_NAME).unlink(missing_ok=True)
        (folder / LOCK_NAME).unlink(missing_ok=True)
        remove_if_empty(created)
        let_go(fd)

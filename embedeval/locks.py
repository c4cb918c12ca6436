"""Locks between processes, taken one way, with one waiting policy.

A lock is a file held with ``flock`` (:func:`take_lock`): the process that takes it creates it
(``O_EXCL``, never through a link), writes who holds it in it (:func:`write_holder`: ``pid N on
HOST since TIME``) and removes it when it lets go (:func:`release_lock`). A lock file that a killed
process left (``flock`` ends with the process) is removed once held and a new one taken; a file of
the lock's name that does not hold that line is the user's, refused and never deleted; a lock file
that is a link or not a plain file is refused, as is one that changes :data:`LOCK_ATTEMPTS` times
while it is taken.

How long a process waits for another holder is its :class:`LockWait`: it looks again every
``poll`` seconds (:data:`POLL_SECONDS`) until ``seconds`` have passed (0: it refuses at once), and
then refuses with one line naming the holder and what to do::

    {what} is in use by {holder}[ (waited {seconds} s)]; {advice}

The waits, each defined here once:

- a run folder or an output file (:data:`OUTPUT_WAIT`, 0 s): a second run into the same folder, or
  a second writer of the same file, is refused at once: two runs writing one folder are a mistake,
  not a queue (:mod:`embedeval.run_folder`, :func:`embedeval.io.output_file_lock`);
- a folder of exported ONNX graphs (:data:`ONNX_GRAPHS_WAIT`, 600 s): another process's export of
  the same graphs is waited for, then used (:mod:`embedeval.embedders.onnx`);
- the embedding cache's SQLite file (:data:`CACHE_BUSY_SECONDS`, 60 s): SQLite's own busy timeout,
  SQLite waiting and looking itself (:mod:`embedeval.embedders.cache`).
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import os
import re
import socket
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from embedeval.errors import CacheError, EmbedevalError, InputError

#: The name of the lock file a run holds in its run folder (and the end of an output file's lock's name).
LOCK_NAME = ".embedeval.lock"
#: How often :func:`take_lock` takes a lock file again when it is replaced under it.
LOCK_ATTEMPTS = 5
#: Seconds between two looks at a lock another process holds.
POLL_SECONDS = 0.2
#: What :func:`write_holder` writes in a lock file: ``pid N on HOST since TIME`` (ISO 8601, to the second).
HOLDER_LINE = re.compile(r"pid [0-9]+ on [^\n]+ since [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\n")
#: Seconds the embedding cache's SQLite file waits for another process's write (its busy timeout).
CACHE_BUSY_SECONDS = 60.0


@dataclass(frozen=True)
class LockWait:
    """How long a process waits for a lock another one holds: ``seconds`` (0: refuses at once),
    looking every ``poll`` seconds; then one ``error`` (with its ``parameter``, if any) saying who
    holds it and the ``advice``."""

    seconds: float
    advice: str
    error: type[EmbedevalError] = InputError
    parameter: str | None = None
    poll: float = POLL_SECONDS

    def refusal(self, message: str) -> EmbedevalError:
        """The error of this lock saying ``message`` (naming its parameter, if any)."""
        return self.error(message, *([self.parameter] if self.parameter else []))

    def busy(self, what: str, holder: str) -> EmbedevalError:
        """The error of giving up on ``what``, held by ``holder``, after :attr:`seconds`."""
        waited = f" (waited {self.seconds:g} s)" if self.seconds else ""
        return self.refusal(f"{what} is in use by {holder}{waited}; {self.advice}")


#: A run folder or an output file: a second run or writer is refused at once.
OUTPUT_WAIT = LockWait(0.0, "wait for it or choose another `out`", InputError, "out")
#: A folder of exported ONNX graphs: another process's export is waited for.
ONNX_GRAPHS_WAIT = LockWait(600.0, "try again when it has finished", CacheError)


def _open_lock(lock: Path, refused: EmbedevalError) -> tuple[int, bool] | None:
    """The descriptor of ``lock``, created by this call (True) or found (False); None when it went
    away in between. A link or a folder is ``refused``."""
    try:
        return os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666), True
    except FileExistsError:
        try:
            return os.open(lock, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC), False
        except FileNotFoundError:  # removed in between
            return None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
                raise refused from None
            raise


def take_lock(lock: Path, what: str, user: str = "run", wait: LockWait = OUTPUT_WAIT) -> int:
    """Create the lock file ``lock`` and hold it (flock); returns its descriptor. ``what``: what
    it guards, as messages name it (``run directory runs/x``); ``user``: who else may hold it;
    ``wait``: how long another holder is waited for (see the module docstring).

    The lock file is always one this call creates (``O_EXCL``, never through a link): a lock file a
    killed process left is removed once it is held (nobody else holds it then) and a new one taken,
    if it holds :func:`write_holder`'s line (:func:`is_holder_line`; an empty one is looked at again,
    as a taker's that has not written it yet); any other file is the user's: refused, never deleted,
    and the path must still name the file held once it is locked (else another process replaced it:
    again, at most :data:`LOCK_ATTEMPTS` times). A lock that is a link or not a plain file is
    refused; another holder is waited for as ``wait`` says, then refused naming the holder. A file
    system that refuses the lock file is its ``OSError``."""
    place = "the folder" if user == "run" else "it"
    refused = wait.refusal(f"{what}: {lock.name} is not a lock file embedeval made (a link or not a plain "
                           f"file); remove it if no {user} is using {place}")
    deadline = time.monotonic() + wait.seconds
    changes = 0
    while changes < LOCK_ATTEMPTS:
        opened = _open_lock(lock, refused)
        if opened is None:
            changes += time.monotonic() >= deadline  # removed by its holder in between: a hand-over, counted once the wait is over
            continue
        fd, created = opened
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_nlink == 0:  # its holder let go and removed it since it was opened
            os.close(fd)
            changes += time.monotonic() >= deadline
            continue
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            os.close(fd)
            raise refused
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 1000, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            if not isinstance(exc, BlockingIOError):
                raise wait.error(f"cannot lock {what} ({exc.strerror or exc})") from None
            if time.monotonic() >= deadline:
                raise wait.busy(what, holder) from None
            time.sleep(wait.poll)
            continue
        try:
            now = os.stat(lock, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        if now is not None and (now.st_dev, now.st_ino) == (info.st_dev, info.st_ino):
            if created:
                return fd
            said = os.pread(fd, 1000, 0)
            if not said and changes + 1 < LOCK_ATTEMPTS:  # just created by another taker, its holder not yet written: look again
                os.close(fd)
                changes += 1
                time.sleep(wait.poll)
                continue
            if not is_holder_line(said):
                os.close(fd)
                raise wait.refusal(f"{what}: {lock} is not a lock file embedeval made (it holds no `pid N on HOST since "
                                   "TIME` line), so it is not deleted: move it out of the way and run again")
            os.unlink(lock)  # a killed process's lock, held now: removed, never rewritten
        os.close(fd)
        changes += now is not None or time.monotonic() >= deadline  # removed by its holder: a hand-over, as above
    raise wait.error(f"cannot lock {what}: its {lock.name} changed {LOCK_ATTEMPTS} times while taking it; try again")


def write_holder(fd: int) -> None:
    """Say in a lock file who holds it (what a refusal quotes): :data:`HOLDER_LINE`."""
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {dt.datetime.now().isoformat(timespec='seconds')}\n".encode())


def is_holder_line(content: bytes) -> bool:
    """Whether a lock file's ``content`` is what :func:`write_holder` writes (:data:`HOLDER_LINE`):
    only such a file is embedeval's to delete once nobody holds it; any other file of the lock's
    name is the user's."""
    return HOLDER_LINE.fullmatch(content.decode("utf-8", "replace")) is not None


def let_go(fd: int) -> None:
    """Let go of a lock this process holds (its file already removed, see :func:`release_lock`)."""
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def release_lock(fd: int, lock: Path) -> None:
    """Remove a lock file this process holds, then let it go."""
    lock.unlink(missing_ok=True)
    let_go(fd)


def create_folders(folder: Path) -> list[Path]:
    """Make ``folder`` and its missing parents; returns those this call created, outermost first."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()][::-1]
    created = []
    for path in missing:
        try:
            path.mkdir()
        except FileExistsError:  # made by someone else meanwhile: not ours to remove
            continue
        created.append(path)
    if not folder.is_dir():
        raise FileExistsError(errno.EEXIST, "exists and is not a folder")
    return created


def remove_if_empty(created: list[Path]) -> None:
    """Remove the folders of ``created`` (outermost first), innermost first, while they are empty."""
    for path in reversed(created):
        try:
            path.rmdir()  # refuses a folder that is not empty: nothing in it is removed
        except OSError:
            return


def hold(folder: Path, lock: Path, what: str, user: str, failed: Callable[[OSError], Exception],
         wait: LockWait = OUTPUT_WAIT) -> tuple[list[Path], int]:
    """Make ``folder`` (and its missing parents) and take the lock file ``lock`` (:func:`take_lock`
    with ``what``, ``user`` and ``wait``): (the folders this call created, the lock's descriptor). A
    file system that refuses either is ``failed(exc)``; on any failure the folders made are removed
    again while empty."""
    try:
        created = create_folders(folder)
    except OSError as exc:
        raise failed(exc) from None
    try:
        try:
            return created, take_lock(lock, what, user, wait)
        except OSError as exc:
            raise failed(exc) from None
    except BaseException:
        remove_if_empty(created)
        raise

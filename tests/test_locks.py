"""One lock helper, one waiting policy (embedeval.locks): refused at once, or waited for and then
refused naming the holder; a lock let go in time is taken."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from embedeval.errors import CacheError, InputError
from embedeval.locks import LOCK_NAME, ONNX_GRAPHS_WAIT, OUTPUT_WAIT, LockWait, release_lock, take_lock, write_holder

HOLD = """
import sys, time
from pathlib import Path
from embedeval.locks import release_lock, take_lock, write_holder
lock = Path(sys.argv[1])
fd = take_lock(lock, "test", "run")
write_holder(fd)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
release_lock(fd, lock)
"""


def hold_in_another_process(lock, seconds: float) -> subprocess.Popen:
    """A process that holds ``lock`` for ``seconds``, started once it holds it."""
    held = subprocess.Popen([sys.executable, "-c", HOLD, str(lock), str(seconds)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert held.stdout.readline().strip() == "held"
    return held


def test_the_waits_are_defined_once_and_a_run_folder_refuses_at_once():
    assert OUTPUT_WAIT.seconds == 0 and OUTPUT_WAIT.error is InputError and OUTPUT_WAIT.parameter == "out"
    assert ONNX_GRAPHS_WAIT.seconds == 600 and ONNX_GRAPHS_WAIT.error is CacheError
    error = OUTPUT_WAIT.busy("run directory x", "pid 1 on h since t")
    assert str(error) == "run directory x is in use by pid 1 on h since t; wait for it or choose another `out`"
    assert error.parameters == ("out",)
    assert str(ONNX_GRAPHS_WAIT.busy("ONNX graph folder y", "pid 2")) == (
        "ONNX graph folder y is in use by pid 2 (waited 600 s); try again when it has finished")


def test_a_lock_held_elsewhere_is_waited_for_then_refused_naming_its_holder(tmp_path):
    lock = tmp_path / LOCK_NAME
    held = hold_in_another_process(lock, 5)
    try:
        start = time.monotonic()
        with pytest.raises(CacheError, match=rf"^test is in use by pid {held.pid} on .* \(waited 0.3 s\); later$"):
            take_lock(lock, "test", "run", LockWait(0.3, "later", CacheError, poll=0.05))
        assert 0.3 <= time.monotonic() - start < 3
        with pytest.raises(InputError, match=rf"^test is in use by pid {held.pid} on .*; wait for it or choose another `out`$"):
            take_lock(lock, "test", "run", OUTPUT_WAIT)
    finally:
        held.kill()
        held.wait()


def test_a_lock_let_go_within_the_wait_is_taken_and_removed_when_released(tmp_path):
    lock = tmp_path / LOCK_NAME
    held = hold_in_another_process(lock, 0.3)
    try:
        fd = take_lock(lock, "test", "run", LockWait(10, "later", poll=0.05))
        write_holder(fd)
        assert lock.read_text().startswith(f"pid {os.getpid()} on ")
        release_lock(fd, lock)
        assert not lock.exists()
    finally:
        held.wait()


def test_a_killed_holders_lock_file_is_taken_over(tmp_path):
    lock = tmp_path / LOCK_NAME
    held = hold_in_another_process(lock, 30)
    held.kill()
    held.wait()
    assert lock.exists()  # left behind, no longer held
    fd = take_lock(lock, "test", "run")
    release_lock(fd, lock)


@pytest.mark.parametrize("wait", [OUTPUT_WAIT, ONNX_GRAPHS_WAIT], ids=["refuses-at-once", "waits"])
def test_a_lock_its_holder_removes_while_another_opens_it_is_taken_not_refused_as_foreign(tmp_path, monkeypatch, wait):
    """The holder removes its lock file when it lets go, so a taker may open the file just
    before it goes; its link count is then 0, and take_lock refused it as 'not a lock file embedeval made (a link
    or not a plain file); remove it' (six processes taking one lock: ~2% of takes). It is a hand-over: taken."""
    from embedeval import locks

    lock = tmp_path / LOCK_NAME
    held = take_lock(lock, "the folder")
    write_holder(held)
    real, handed = locks._open_lock, []

    def opened_as_its_holder_lets_go(path, refused):
        opened = real(path, refused)
        if opened is not None and not opened[1] and not handed:
            release_lock(held, lock)  # between this open and the taker's look at the file
            handed.append(True)
        return opened
    monkeypatch.setattr(locks, "_open_lock", opened_as_its_holder_lets_go)
    fd = take_lock(lock, "the folder", wait=wait)
    assert handed and lock.is_file() and os.fstat(fd).st_ino == lock.stat().st_ino
    release_lock(fd, lock)
    assert not lock.exists()


def test_hand_overs_between_other_takers_do_not_use_up_a_waiters_attempts(tmp_path, monkeypatch):
    """Each lock file removed by its holder was one of LOCK_ATTEMPTS 'changes': a process waiting for ONNX graphs
    behind five others handing the lock on gave up with 'changed 5 times while taking it' long before its 600 s."""
    from embedeval import locks

    lock = tmp_path / LOCK_NAME
    real, handed = locks._open_lock, []

    def gone_as_opened(path, refused):
        if len(handed) < 2 * locks.LOCK_ATTEMPTS:  # another taker's lock, let go just as this one looks
            handed.append(True)
            return None
        return real(path, refused)
    monkeypatch.setattr(locks, "_open_lock", gone_as_opened)
    fd = take_lock(lock, "graphs", "export", ONNX_GRAPHS_WAIT)
    release_lock(fd, lock)
    with pytest.raises(CacheError, match="changed 5 times"):  # past the wait, a file that keeps changing is still refused
        handed.clear()
        take_lock(lock, "graphs", "export", LockWait(0.0, "x", CacheError))

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

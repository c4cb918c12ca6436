"""Run embedeval's command line many times, fast, each run in a fresh process under a memory limit.

The fuzz tier (``tests/test_fuzz.py``) runs the command line hundreds of times. A new interpreter
per run spends most of its second importing; this worker imports ``embedeval.cli`` once and forks
for every run, so each run is a process of its own (its own state, exit status, stdout and
stderr, killed on a deadline) that starts in milliseconds. It may import the modules the commands
under test need (``preload``) first, with every thread pool set to one thread, and checks that no
Python thread runs when it forks. (pyarrow starts native threads on import, jemalloc's background
thread and Arrow's pool; both are fork-safe: jemalloc takes its locks around ``fork``, and Arrow's
pool starts afresh in a child.)

Protocol, one JSON object per line: the test writes ``{"argv": [...], "cwd": DIR, "env": {...},
"memory_bytes": N, "timeout": SECONDS}`` to the worker's stdin; the worker answers ``{"rc": N,
"stdout": "...", "stderr": "...", "seconds": S, "timed_out": bool, "peak_rss_kb": N}``. A child
that ends by a signal has ``rc`` -SIGNAL. Use it through :class:`CLIWorker`.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

#: Thread pools the worker's imports would otherwise start (BLAS, OpenMP): one thread each, so the
#: worker stays single-threaded and forking it is safe.
SINGLE_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
#: What a child that raised past the command line's own handling exits with (a traceback on stderr).
UNCAUGHT_EXIT = 70


def _child(request: dict, stdout_path: str, stderr_path: str) -> None:
    """The forked child: limits, redirections, then ``embedeval ARGV``; never returns."""
    code = UNCAUGHT_EXIT
    try:
        limit = int(request["memory_bytes"])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        os.chdir(request["cwd"])
        os.environ.update(request.get("env", {}))
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, stdout_path), (2, stderr_path)):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        sys.argv = ["embedeval", *request["argv"]]
        from embedeval.cli import main

        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # what the command line let through: the fuzz tier's finding
            traceback.print_exc()
            code = UNCAUGHT_EXIT
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _run(request: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="embedeval-fuzz-io-") as io_dir:
        stdout_path, stderr_path = os.path.join(io_dir, "out"), os.path.join(io_dir, "err")
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(request, stdout_path, stderr_path)
        deadline, timed_out = started + float(request["timeout"]), False
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                _, status, usage = os.wait4(pid, 0)
                timed_out = True
                break
            time.sleep(0.01)
        rc = os.waitstatus_to_exitcode(status)
        read = lambda path: Path(path).read_text(errors="replace") if os.path.exists(path) else ""  # noqa: E731
        return {"rc": rc, "stdout": read(stdout_path), "stderr": read(stderr_path), "timed_out": timed_out,
                "seconds": time.monotonic() - started, "peak_rss_kb": usage.ru_maxrss}


def serve(preload: list[str]) -> None:
    """Import ``embedeval.cli`` and the modules ``preload`` names, once; then answer requests from
    stdin until it closes. Forking is safe only while this process has one thread, which is checked."""
    import importlib

    for module in ["embedeval.cli", *preload]:
        importlib.import_module(module)
    if threading.active_count() != 1:
        raise SystemExit(f"cli_worker: importing {preload} started Python threads {threading.enumerate()}; forking "
                         "would not be safe")
    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(json.dumps(_run(json.loads(line))) + "\n")
            sys.stdout.flush()


class CLIWorker:
    """The worker process, started once; :meth:`run` runs ``embedeval ARGV`` in a fork of it."""

    def __init__(self, preload: tuple[str, ...] = ()):
        root = Path(__file__).resolve().parent.parent  # this checkout's embedeval, whatever is installed
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
               **{name: "1" for name in SINGLE_THREAD_VARIABLES}}
        self.process = subprocess.Popen([sys.executable, __file__, *preload], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, cwd=root, env=env)

    def run(self, argv: list[str], cwd: Path, env: dict[str, str] | None = None, memory_bytes: int = 4 << 30,
            timeout: float = 60.0) -> dict:
        """Run ``embedeval ARGV`` in ``cwd`` with ``env`` added to the environment, at most
        ``memory_bytes`` of address space and ``timeout`` seconds; the worker's answer."""
        request = {"argv": argv, "cwd": str(cwd), "env": env or {}, "memory_bytes": memory_bytes, "timeout": timeout}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError("the CLI worker ended")
        return json.loads(answer)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


if __name__ == "__main__":
    serve(sys.argv[1:])

"""A local model timed on a sample of its inputs, for a plan (``--plan``), in this process or in a
process of its own started while the plan counts.

A plan says how long a local model would take: a random sample of the inputs it recorded is
embedded for real (after two to warm up) and timed (:func:`~embedeval.plan.plan_of`). Loading the
model for that (importing PyTorch and sentence-transformers, reading the weights) takes seconds the
plan's counting does not need, and a plan of the bundled model counts without its weights
(:func:`~embedeval.embedders.local_folder.folder_facts`). :class:`SampleTimer` starts ``python -m
embedeval.embedders.timing SPEC`` as the plan starts: that process loads the model while the plan
counts (on another core, where there is one), then embeds the sample it is sent and answers the
seconds it took. Nothing is stored: the model is loaded without the cache.

Between the two processes, one JSON line each way: in ``{"warm": [...], "timed": [...]}``, each
input a request as its ``to_json()`` writes it (:func:`~embedeval.embedders.requests.request_from_json`
reads it back); out ``{"seconds": s}`` for the timed inputs, or ``{"error": message, "type": the
error's class}``.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from embedeval import errors
from embedeval.embedders.cache import EmbeddingCache
from embedeval.embedders.models import bundled_name
from embedeval.embedders.options import LocalOptions, split_spec
from embedeval.embedders.registry import LEXICAL_SPECS, embedder_name, load_embedder, parse_spec
from embedeval.embedders.requests import Request, joined, request_from_json
from embedeval.embedders.speed import known_speed
from embedeval.embedders.tokens import quiet_transformers


def embed_sample(model, batch: Sequence[Request]) -> None:
    """Embed ``batch`` (inputs as a plan records them, each a request of one input) with ``model``,
    as the run would: a call per type and kind of request (:func:`~embedeval.embedders.requests.joined`)."""
    for request in joined(batch):
        model.embed_request(request)


def time_sample(model, warm: Sequence[Request], timed: Sequence[Request]) -> float:
    """Seconds ``model`` takes to embed ``timed`` (:func:`embed_sample`), after ``warm``."""
    embed_sample(model, warm)
    start = time.perf_counter()
    embed_sample(model, timed)
    return time.perf_counter() - start


class SampleTimer:
    """The local model of ``spec`` loading in a process of its own from the moment this is made,
    to time a sample later (:meth:`seconds`); :meth:`close` ends the process (a timer that was
    never asked ends it too: the process stops when its input closes)."""

    def __init__(self, spec: str):
        package_root = str(Path(__file__).resolve().parents[2])  # this embedeval, whichever is installed
        path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
        self.spec = spec
        self._problems = tempfile.TemporaryFile(mode="w+")  # what it says on stderr (a crash), never a full pipe
        self._process = subprocess.Popen([sys.executable, "-m", "embedeval.embedders.timing", spec],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._problems, text=True,
                                         env={**os.environ, "PYTHONPATH": path})

    def seconds(self, warm: Sequence[Request], timed: Sequence[Request]) -> float:
        """The seconds the model took for ``timed`` after ``warm`` (:func:`time_sample`), in its
        process; an error there is raised here as the same :mod:`~embedeval.errors` class, with
        its message."""
        request = json.dumps({"warm": [r.to_json() for r in warm], "timed": [r.to_json() for r in timed]})
        answer, _ = self._process.communicate(request + "\n")
        try:
            reply = json.loads(answer.strip().splitlines()[-1])
        except (IndexError, ValueError):  # it died (killed for memory, a crash in native code): one error line, no traceback
            self._problems.seek(0)
            last = (self._problems.read().strip().splitlines() or [f"exit status {self._process.returncode}"])[-1]
            raise errors.EmbedderUnavailableError(f"timing {self.spec} in a process of its own failed ({last})") from None
        if "error" in reply:
            kind = getattr(errors, reply["type"], None)
            raise (kind if isinstance(kind, type) and issubclass(kind, errors.EmbedevalError) else RuntimeError)(reply["error"])
        return float(reply["seconds"])

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.communicate()
        self._problems.close()


#: What the timing process embeds once its weights are loaded, before the sample comes: the first
#: pass through a model sets up its kernels (about a second on a CPU), a cost the run pays once and
#: the sample's time should not carry.
WARM_UP_TEXT = "A short text that runs the model once before it is timed."

#: Timers started ahead of the plan (:func:`start_early`), by spec, until :func:`timer_for` takes them.
_EARLY: dict[str, SampleTimer] = {}


def speed_remembered(spec: str, cache_dir=None) -> bool:
    """Whether the cache in ``cache_dir`` remembers the pace of ``spec``'s local model on this
    machine (:mod:`embedeval.embedders.speed`), so a plan needs no timing process for it; a cache
    that does not open says no (the plan then times the model, and the run reports the cache)."""
    try:
        model = split_spec(parse_spec(spec)[1])
        device = LocalOptions.parse(model[1]).device or "auto"
        cache = EmbeddingCache(cache_dir, create=False)
    except Exception:
        return False
    try:
        return known_speed(cache, embedder_name(spec), device) is not None
    except Exception:
        return False
    finally:
        cache.close()


def start_early(specs: Sequence[str], cache_dir=None) -> None:
    """Start the timing process of each local model of ``specs`` now, as a command reads its
    options, so that PyTorch and the weights load while the command imports its libraries and
    builds the haystacks; :func:`timer_for` hands it to the plan, :func:`close_early` ends those no
    plan took. Only a bundled model's: the plan counts without its weights
    (:func:`~embedeval.embedders.local_folder.folder_facts`), while a folder's model is loaded by the plan
    itself, which then times it there, so an early process would load a second copy of the weights
    (on a GPU, twice the memory) only to be ended unused (the audit); :func:`timer_for` still
    starts one for a folder whose facts the cache remembers. None for a model whose pace the cache
    in ``cache_dir`` remembers on this machine (:func:`speed_remembered`): the plan reads it."""
    for spec in specs:
        if spec not in _EARLY and spec not in LEXICAL_SPECS and parse_spec(spec)[0].prefix == "st" \
                and bundled_name(split_spec(parse_spec(spec)[1])[0]) is not None and not speed_remembered(spec, cache_dir):
            _EARLY[spec] = SampleTimer(spec)


def timer_for(spec: str) -> SampleTimer:
    """The timer :func:`start_early` started for ``spec``, else a new one."""
    return _EARLY.pop(spec, None) or SampleTimer(spec)


def close_early() -> None:
    """End every timer :func:`start_early` started that no plan took."""
    while _EARLY:
        _EARLY.popitem()[1].close()


atexit.register(close_early)


def _read_request(lines: queue.Queue) -> None:
    """Read the request line while the model loads; its input closing first (the plan ended
    without asking, or was killed: SIGTERM or SIGKILL runs no atexit there) ends this process at
    once, instead of loading the weights for no one."""
    line = sys.stdin.readline()
    if not line:
        os._exit(0)
    lines.put(line)


def main(spec: str) -> None:
    """The timing process: load ``spec``'s model (no cache), read the sample, write the seconds."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_read_request, args=(lines,), daemon=True).start()
    try:
        quiet_transformers()
        model = load_embedder(spec, cache=False, verify=False)
        _ = model.model  # the weights, while the plan counts
        model.embed([WARM_UP_TEXT], kind="document")  # the first pass's one-time set-up, while the plan counts
        request = json.loads(lines.get())
        reply = {"seconds": time_sample(model, [request_from_json(row) for row in request["warm"]],
                                        [request_from_json(row) for row in request["timed"]])}
    except Exception as exc:  # sent back whole: the plan raises it as the run would
        reply = {"error": " ".join(str(exc).split()), "type": type(exc).__name__}
    print(json.dumps(reply), flush=True)
    os._exit(0)  # the answer is out: no interpreter teardown (PyTorch's takes about a second) for the plan to wait on


if __name__ == "__main__":
    main(sys.argv[1])

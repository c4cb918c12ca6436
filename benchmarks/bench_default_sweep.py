"""The default sweep's wall time, cold: README's first command as a user types it.

For the default needle set's 48 question groups and then the earlier 24 (the first 24 groups of the
same file, ``--groups``), back to back, ``embedeval nolima --out DIR`` runs in a process of its own
with ``EMBEDEVAL_CACHE`` a new empty folder, so the Shakespeare texts are downloaded, cut and
embedded afresh (the model's weights come from Hugging Face's cache, as on a user's machine after
its first run). Per run it prints the wall seconds, the distinct texts the run's last line counts
and the haystack windows its progress bar embedded, with the machine's cores and load average
before and after. ``--write FILE`` writes the same as JSON: docs/make_default_run_docs.py quotes
``docs/assets/benchmarks/bench_default_sweep.json`` wherever the docs say how long the default
sweep takes.

    PYTHONPATH=. python benchmarks/bench_default_sweep.py      # about 9 minutes on 2 idle cores
    PYTHONPATH=. python benchmarks/bench_default_sweep.py --write docs/assets/benchmarks/bench_default_sweep.json
    PYTHONPATH=. python benchmarks/bench_default_sweep.py --extra "--lengths 128 --depths 2 --negatives 4"   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from embedeval.defaults import DEFAULT_NEEDLES
from embedeval.needles import load_needle_set

#: The question groups of the set before the default one: the default set's first 24.
EARLIER_GROUPS = 24
#: The run's last line that counts what it embedded, and its progress bars of documents (the first: the haystack windows).
TEXTS = re.compile(r": ([\d,]+) texts newly embedded, ([\d,]+) found in the cache")
WINDOWS = re.compile(r"embedding documents \([^)]*\): ([\d,]+) texts \.\.\. done in")  # a step line, without a terminal
COMMAND = "embedeval nolima --out runs/nolima"


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def timed_sweep(folder: Path, groups: int | None, extra: list[str]) -> dict:
    """README's first command into ``folder`` with an empty cache of its own (the first ``groups``
    question groups of the default set; None: all): wall seconds, texts and windows."""
    ids = [group.id for group in load_needle_set(DEFAULT_NEEDLES).groups]
    chosen = [] if groups is None else ["--groups", ",".join(ids[:groups])]
    groups = len(ids[:groups])
    args = ["nolima", "--out", str(folder / f"run-{groups}"), *chosen, *extra]
    env = {**os.environ, "EMBEDEVAL_CACHE": str(folder / f"cache-{groups}")}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "from embedeval.cli import main; main()", *args], env=env,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"embedeval {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    texts = TEXTS.search(done.stdout)
    windows = WINDOWS.findall(done.stderr.replace("\r", "\n"))
    if texts is None or not windows or texts[2] != "0":
        raise SystemExit(f"embedeval {' '.join(args)} did not embed everything afresh:\n{done.stdout[-2000:]}")
    return {"groups": groups, "command": f"{COMMAND} --groups <the first {groups}>" if chosen else COMMAND,
            "seconds": round(seconds, 1), "texts": int(texts[1].replace(",", "")), "windows": int(windows[0].replace(",", ""))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", type=Path, help="write the measurement as JSON into this file too")
    parser.add_argument("--extra", default="", help="more options for every run (a smoke run's small grid), quoted as one")
    args = parser.parse_args()
    extra = shlex.split(args.extra)
    before = load_average()
    with tempfile.TemporaryDirectory(prefix="bench-default-sweep-") as tmp:
        runs = [timed_sweep(Path(tmp), groups, extra) for groups in (None, EARLIER_GROUPS)]
    machine = f"{os.cpu_count()} cores, load average {before} before and {load_average()} after"
    for run in runs:
        print(f"{run['groups']} groups: {run['seconds']:.1f} s cold, {run['texts']:,} texts ({run['windows']:,} haystack windows): "
              f"{run['command']}")
    print(f"{runs[0]['groups']}/{runs[1]['groups']} groups: {runs[0]['seconds'] / runs[1]['seconds']:.2f}x the time; {machine}")
    if args.write:
        measured = {"date": time.strftime("%Y-%m-%d"), "machine": machine, "cache": "a fresh cache each, corpus download included",
                    "measured_by": f"timed by `python benchmarks/bench_default_sweep.py{' --extra ' + shlex.quote(args.extra) if extra else ''}`",
                    "runs": runs}
        args.write.write_text(json.dumps(measured, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

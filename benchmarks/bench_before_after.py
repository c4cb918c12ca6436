"""The warm default sweep by the code of an earlier commit and by this checkout, in turns, in one
run, and the tables they write compared: what a change to the tool's own work bought, and that it
changed no number.

Every vector must already be in the cache (run ``embedeval nolima`` once first): both codes then
embed nothing, and what is timed is the tool. The earlier commit is checked out into a temporary
git worktree (removed after); each sweep runs in a process of its own with that code first on
``PYTHONPATH``, into a new ``--out``. Prints each run's wall seconds and their median per code,
then per table whether the two first runs wrote it identically, and where not, how many numeric
cells differ and by at most how much.

    PYTHONPATH=. python benchmarks/bench_before_after.py --before 59f2afe
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

TABLES = ("similarities.parquet", "retrieval.parquet", "metrics.csv", "breaks.csv", "decision.csv", "timings.csv")
HERE = Path(__file__).resolve().parent.parent


def warm_sweep(root: Path, out: Path) -> float:
    """Seconds of ``embedeval nolima --out OUT -q`` with the code in ``root``; it must embed nothing."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "from embedeval.cli import main; main()", "nolima", "--out", str(out), "-q"],
                          env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, cwd=root)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the sweep with {root} failed:\n{done.stderr[-2000:]}")
    if " 0 texts newly embedded" not in done.stdout:
        raise SystemExit("the sweep embedded texts: fill the cache first (embedeval nolima --out runs/nolima)")
    return seconds


def compared(a: pd.DataFrame, b: pd.DataFrame) -> str:
    if a.equals(b):
        return "identical"
    if a.shape != b.shape or list(a.columns) != list(b.columns):
        return f"not identical: shapes {a.shape} and {b.shape}"
    numeric = a.select_dtypes("number").columns
    x, y = a[numeric].to_numpy(float), b[numeric].to_numpy(float)
    differ = ~((x == y) | (np.isnan(x) & np.isnan(y)))
    text = "identical" if a.drop(columns=numeric).equals(b.drop(columns=numeric)) else "not identical"
    return (f"not identical: other columns {text}, {int(differ.sum())} of {differ.size:,} numeric cells differ, "
            f"by at most {np.nanmax(np.abs(x - y)):.1e}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="the earlier commit (any git revision)")
    parser.add_argument("--turns", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-before-after-") as tmp:
        folder = Path(tmp)
        earlier = folder / "code"
        subprocess.run(["git", "-C", str(HERE), "worktree", "add", "--detach", "-q", str(earlier), args.before], check=True)
        try:
            codes = {f"before ({args.before})": earlier, "after (this checkout)": HERE}
            seconds = {label: [] for label in codes}
            for turn in range(args.turns):
                for i, (label, root) in enumerate(codes.items()):
                    seconds[label].append(warm_sweep(root, folder / f"{i}-{turn}"))
            print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; the warm default sweep, in turns:")
            for label, runs in seconds.items():
                print(f"  {label:24s} {'  '.join(f'{s:.1f} s' for s in runs)}  (median {np.median(runs):.1f} s)")
            for name in TABLES:
                read = pd.read_parquet if name.endswith(".parquet") else pd.read_csv
                print(f"  {name:22s} {compared(read(folder / '0-0' / name), read(folder / '1-0' / name))}")
        finally:
            subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(earlier)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

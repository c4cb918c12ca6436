"""``--plan`` against the sweep it plans: a plan counts texts and tokens, so it should
cost a small fraction of the sweep.

On one grid (the default grid, 4,098 haystacks, unless ``--lengths/--depths/--negatives/--groups``),
in one run, each command as a user types it, each in its own process (imports, model loads and
haystack building included), into one fresh embedding cache:

  plan        ``embedeval nolima --plan``: the plan of the sweep below (all-MiniLM-L6-v2), every
              haystack cut into the windows the model reads, the model timed on a sample,
  plan -e     ``embedeval nolima -e context-rot-5 --plan`` (no API keys needed): the four API models
              and all-MiniLM-L6-v2, every haystack cut and counted with each provider's tokenizer;
              plans send and store nothing, so the sweep after them is cold,
  sweep       ``embedeval nolima`` (all-MiniLM-L6-v2, the local sweep of the same grid): haystacks,
              embedding, metrics with bootstrap intervals, report.

Before them, the corpus is downloaded and split into the cache once, in this process, with the cache
the commands use (none of them pays it: the first command of a fresh cache would, the others reuse
it). Prints each command's wall time and CPU time (its own and its children's: a plan times the
local model in a process of its own), its step lines (where its time went), whether each plan's
texts, cached and to embed of the local model are the sweep's own counts (its last line), and
``plan/sweep`` for both plans, in wall time and in CPU time. Target: plan/sweep < 0.1 in wall time.
Prints the machine and its load average: other work on the cores inflates every time, the sweep's
(two threads) more than a plan's, so a busy machine flatters the wall ratio; the CPU ratio moves less.

A plan pays some of the sweep's fixed cost (Python, embedeval's imports, building the haystacks) and
none of the model's: a plan of the bundled model counts without its weights, which load, to time
it, in a process of their own while the plan counts.

    PYTHONPATH=. python benchmarks/bench_plan.py                       # the default grid (~2 min on 2 idle cores)
    PYTHONPATH=. python benchmarks/bench_plan.py --lengths 128,1024,8192   # fewer lengths
    PYTHONPATH=. python benchmarks/bench_plan.py --plan-only           # time the plans alone
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from embedeval.defaults import DEFAULT_CORPUS, DEFAULT_DEPTHS, DEFAULT_EMBEDDER, DEFAULT_LENGTHS, DEFAULT_NEEDLES, DEFAULT_NEGATIVES
from embedeval.grid import HaystackGrid
from embedeval.haystacks import build_haystacks
from embedeval.needles import grid_needle_set

CEILING = 0.1
PRESET = "context-rot-5"


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def grid_args(args) -> list[str]:
    grid = ["--lengths", args.lengths, "--depths", str(args.depths), "--negatives", str(args.negatives), "--corpus", args.corpus]
    return grid + (["--groups", args.groups] if args.groups else [])


def children_cpu() -> float:
    """CPU seconds (user and system) of this process's children that ended, theirs included."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """The command's wall seconds, CPU seconds and result (a failure ends the benchmark)."""
    cpu, start = children_cpu(), time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds, cpu = time.perf_counter() - start, children_cpu() - cpu
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return seconds, cpu, done


def steps(stderr: str) -> list[str]:
    """The step lines of a command's stderr (``... done in 3.2 s``), the last form of each."""
    return [line.split("...", 1)[0].strip() + " " + line.rsplit("...", 1)[1].strip()
            for line in stderr.replace("\r", "\n").splitlines() if re.search(r"\.\.\. done in [\d.]+ s$", line)]


def same_texts(plan: str, sweep: str) -> str:
    """Whether the plan's texts, cached and to embed of the local model are the counts of the
    sweep's last line (``N texts newly embedded, M found in the cache: the T distinct texts``)."""
    row = next(line.split() for line in plan.splitlines() if line.startswith(f"{DEFAULT_EMBEDDER} "))
    planned = [int(x.replace(",", "")) for x in row[1:4]]  # texts, cached, to embed
    found = re.search(r"([\d,]+) texts newly embedded, ([\d,]+) found in the cache: the ([\d,]+) distinct texts", sweep)
    if not found:
        return "the sweep's last line was not found"
    embedded, hits, texts = (int(x.replace(",", "")) for x in found.groups())
    same = planned == [texts, hits, embedded]
    return (f"plan: {planned[0]:,} texts, {planned[1]:,} cached, {planned[2]:,} to embed; sweep: the {texts:,} distinct texts, "
            f"{hits:,} found in the cache, {embedded:,} newly embedded: {'the same' if same else 'DIFFERENT'}")


def show(name: str, seconds: float, cpu: float, what: str, done: subprocess.CompletedProcess, table: bool) -> None:
    print(f"\n{name:<9} {seconds:6.1f} s  (CPU {cpu:6.1f} s)  {what}")
    for line in steps(done.stderr):
        print(f"         {line}")
    if table:
        print("\n".join(f"         | {line}" for line in done.stdout.splitlines() if line and not line.startswith(" ")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default=",".join(map(str, DEFAULT_LENGTHS)), help="comma-separated haystack lengths")
    parser.add_argument("--depths", type=int, default=DEFAULT_DEPTHS)
    parser.add_argument("--negatives", type=int, default=DEFAULT_NEGATIVES)
    parser.add_argument("--groups", default=None, help="comma-separated group ids (default: every group)")
    parser.add_argument("--corpus", default=DEFAULT_CORPUS)
    parser.add_argument("--embedders", default=PRESET, help="what the second plan plans (default: context-rot-5)")
    parser.add_argument("--plan-only", action="store_true", help="time the plans alone (no sweep, no ratio)")
    args = parser.parse_args()
    embedeval = [sys.executable, "-c", "from embedeval.cli import main; main()"]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"load average {load_average()}")
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as folder:
        cache = Path(folder) / "cache"
        env = {**os.environ, "EMBEDEVAL_CACHE": str(cache)}
        for name in [k for k in env if k.endswith("_API_KEY")]:
            del env[name]  # a plan needs no key, and none is sent
        os.environ["EMBEDEVAL_CACHE"] = str(cache)  # this process's download and split go where the commands find them
        grid = HaystackGrid(corpus=args.corpus, lengths=[int(x) for x in args.lengths.split(",")], depths=args.depths,
                            negatives=args.negatives)
        groups = args.groups.split(",") if args.groups else None
        start = time.perf_counter()
        haystacks = build_haystacks(grid_needle_set(str(DEFAULT_NEEDLES), groups, grid.variants, grid.n_distractors), grid)
        print(f"grid: lengths {args.lengths}, depths {args.depths}, negatives {args.negatives}, groups {args.groups or 'all'}, "
              f"corpus {args.corpus}: {len(haystacks):,} haystacks ({haystacks['n_tokens'].sum() / 1e6:.2f} M tokens); "
              f"corpus downloaded and split into the cache first in {time.perf_counter() - start:.1f} s (timed in none)")
        plans = {}
        for name, extra in (("plan", []), ("plan -e", ["-e", args.embedders])):
            seconds, cpu, done = timed([*embedeval, "nolima", *extra, *grid_args(args), "--out", f"{folder}/plan", "--plan"], env)
            show(name, seconds, cpu, f"embedeval nolima {' '.join(extra)} --plan".replace("  ", " "), done, table=bool(extra))
            plans[name] = (seconds, cpu, done)
        if args.plan_only:
            print(f"\nload average after: {load_average()}")
            return
        sweep_s, sweep_cpu, sweep = timed([*embedeval, "nolima", *grid_args(args), "--out", f"{folder}/sweep"], env)
        show("sweep", sweep_s, sweep_cpu, f"embedeval nolima ({DEFAULT_EMBEDDER}, cold cache)", sweep, table=False)
        print()
        for name, (seconds, cpu, done) in plans.items():
            ratio = seconds / sweep_s
            print(f"{name:<9} | {same_texts(done.stdout, sweep.stdout)}")
            print(f"{name:<9} | {name}/sweep = {seconds:.1f} / {sweep_s:.1f} = {ratio:.3f}  {'PASS' if ratio < CEILING else 'FAIL'} "
                  f"(target < {CEILING:g}); CPU {cpu:.1f} / {sweep_cpu:.1f} = {cpu / sweep_cpu:.3f}")
        print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()

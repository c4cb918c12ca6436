"""``--plan`` against the sweep it plans (issue 47): a plan counts texts and tokens, so it should
cost a small fraction of the sweep.

On one grid (the default grid, 4,098 haystacks, unless ``--lengths/--depths/--negatives/--groups``),
in one run, both as a user types them, each in its own process (imports, model loads and haystack
building included), into one fresh embedding cache:

  plan   ``embedeval nolima -e context-rot-5 --plan`` (no API keys needed): the four API models and
         all-MiniLM-L6-v2, every haystack cut and counted with each provider's tokenizer, the local
         model timed on a sample; nothing is sent or stored, so the sweep after it is cold,
  sweep  ``embedeval nolima`` (all-MiniLM-L6-v2, the local sweep of the same grid): haystacks,
         embedding, metrics with bootstrap intervals, report.

Before both, the corpus is downloaded and split into the cache once (neither pays it: the first
command of a fresh cache would). Prints both times, the plan's own step lines (where its time went),
whether the plan's texts, cached and to embed of the local model are the sweep's own counts (its
last line), and ``plan/sweep``. Target: plan/sweep < 0.1. Prints the machine and its load average
(other work on the cores inflates both; the ratio, measured side by side, much less).

Both commands pay about the same fixed cost (imports, loading all-MiniLM-L6-v2, building the
haystacks; the plan also loads OpenAI's tokenizer and times the local model): the plan cannot fall
below it however little else it does, and on a small grid the ratio is mostly that cost.

    PYTHONPATH=. python benchmarks/bench_plan.py                       # the default grid (~2 min on 2 idle cores)
    PYTHONPATH=. python benchmarks/bench_plan.py --lengths 128,1024,8192   # fewer lengths (~2-4 min)
    PYTHONPATH=. python benchmarks/bench_plan.py --plan-only           # time the plan alone
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from embedeval.defaults import DEFAULT_CORPUS, DEFAULT_DEPTHS, DEFAULT_EMBEDDER, DEFAULT_LENGTHS, DEFAULT_NEEDLES, DEFAULT_NEGATIVES
from embedeval.haystacks import HaystackGrid, build_haystacks
from embedeval.needles import grid_needle_set

CEILING = 0.1
PRESET = "context-rot-5"


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def grid_args(args) -> list[str]:
    grid = ["--lengths", args.lengths, "--depths", str(args.depths), "--negatives", str(args.negatives), "--corpus", args.corpus]
    return grid + (["--groups", args.groups] if args.groups else [])


def timed(command: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return seconds, done


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default=",".join(map(str, DEFAULT_LENGTHS)), help="comma-separated haystack lengths")
    parser.add_argument("--depths", type=int, default=DEFAULT_DEPTHS)
    parser.add_argument("--negatives", type=int, default=DEFAULT_NEGATIVES)
    parser.add_argument("--groups", default=None, help="comma-separated group ids (default: every group)")
    parser.add_argument("--corpus", default=DEFAULT_CORPUS)
    parser.add_argument("--embedders", default=PRESET, help="what the plan plans (default: context-rot-5)")
    parser.add_argument("--plan-only", action="store_true", help="time the plan alone (no sweep, no ratio)")
    args = parser.parse_args()
    embedeval = [sys.executable, "-c", "from embedeval.cli import main; main()"]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"load average {load_average()}")
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as folder:
        cache = Path(folder) / "cache"
        env = {**os.environ, "EMBEDEVAL_CACHE": str(cache)}
        for name in [k for k in env if k.endswith("_API_KEY")]:
            del env[name]  # a plan needs no key, and none is sent
        grid = HaystackGrid(corpus=args.corpus, lengths=[int(x) for x in args.lengths.split(",")], depths=args.depths,
                            negatives=args.negatives)
        groups = args.groups.split(",") if args.groups else None
        start = time.perf_counter()
        haystacks = build_haystacks(grid_needle_set(str(DEFAULT_NEEDLES), groups, grid.variants, grid.n_distractors), grid,
                                    cache_dir=cache)  # the corpus downloaded and split once, into the cache both use
        print(f"grid: lengths {args.lengths}, depths {args.depths}, negatives {args.negatives}, groups {args.groups or 'all'}, "
              f"corpus {args.corpus}: {len(haystacks):,} haystacks ({haystacks['n_tokens'].sum() / 1e6:.2f} M tokens); "
              f"corpus split into the cache first in {time.perf_counter() - start:.1f} s (timed in neither)")
        plan_s, plan = timed([*embedeval, "nolima", "-e", args.embedders, *grid_args(args), "--out", f"{folder}/plan", "--plan"], env)
        print(f"\nplan   {plan_s:7.1f} s  embedeval nolima -e {args.embedders} --plan")
        for line in steps(plan.stderr):
            print(f"         {line}")
        print("\n".join(f"         | {line}" for line in plan.stdout.splitlines() if line and not line.startswith(" ")))
        if args.plan_only:
            print(f"\nload average after: {load_average()}")
            return
        sweep_s, sweep = timed([*embedeval, "nolima", *grid_args(args), "--out", f"{folder}/sweep"], env)
        print(f"sweep  {sweep_s:7.1f} s  embedeval nolima ({DEFAULT_EMBEDDER}, cold cache)")
        for line in steps(sweep.stderr):
            print(f"         {line}")
        print(f"         | {same_texts(plan.stdout, sweep.stdout)}")
        ratio = plan_s / sweep_s
        print(f"\nplan/sweep = {plan_s:.1f} / {sweep_s:.1f} = {ratio:.3f}  {'PASS' if ratio < CEILING else 'FAIL'} (target < {CEILING:g})")
        print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()

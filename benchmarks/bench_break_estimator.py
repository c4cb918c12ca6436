"""How often a break-point estimator finds the true break: a simulation with known breaks.

Recall curves with a known break length over a grid (the default 64...8,192), question groups
drawn with the spread of real data, and every candidate estimator read on the same simulated
groups and the same cluster-bootstrap resamples. Per estimator and number of question groups it
prints the share of simulations whose headline is the true break (``exact``), within one grid step
of it (``±1 step``), says "none" where there is a break (``none``), and how often the 5-95%
interval of the resampled break points holds the true break (``covered``).

The model of a run: question group g finds its needle at haystack length l and depth d with
probability

    p(g, l, d) = sigmoid(logit(chance + (1 - chance) c(l)) + u_g + v_{g,l}),
    u_g ~ N(0, sd_group^2) (a question easy or hard at every length), v_{g,l} ~ N(0, sd_cell^2)

(``chance`` = k/n = 5/125); a group's value at a length is its chance-corrected recall@5 averaged
over the depths it has there. ``sd_group`` and ``sd_cell`` are fitted to a real run's rank table
(``--run``: the spread of the group means at a length, and how much of it a group carries across
lengths); without one, the values fitted to the default run (printed with the fit). The true break
is the relative rule read on the population mean curve (the expectation over u and v, by
Gauss-Hermite quadrature): L* = max {L : E c(l) >= 0.85 x base for every l <= L}, base the mean
of the three shortest lengths. Curves (``c(l)`` over the grid, the break at position i):

  sharp     the mean falls from base to 0.97 x base at the break, then to 0.73 x base and by 0.75 per step
  gradual   the mean falls from base to 0.92 x base at the break, then to 0.78 x base and by 0.8 per step

(the latent curve c is solved for, so the population mean has that shape).

Candidates: ``point`` (the rule on the group means: the estimator before this benchmark);
``monotone`` (the rule on the means' non-increasing fit, :func:`embedeval.metrics.break_estimators.monotone_fit`);
``mode`` (the break length most resamples give); ``median`` / ``60% support`` (the longest
length that 50% / 60% of the resamples reach, :func:`embedeval.metrics.break_estimators.supported_break`); each
over the plain or the monotone rule. ``library`` is what embedeval reports
(:func:`embedeval.breaks.break_resamples` and :func:`~embedeval.breaks.headline_break`), so the
table measures the code, not a copy of it.

    PYTHONPATH=. python benchmarks/bench_break_estimator.py                  # the default grid, 24/48/96 groups
    PYTHONPATH=. python benchmarks/bench_break_estimator.py --run runs/nolima   # fit the spread to a run first
    PYTHONPATH=. python benchmarks/bench_break_estimator.py --groups 24,48,96,192 --out docs/assets/benchmarks/bench_break_estimator.txt

``--out FILE`` writes what it printed into FILE too, after two lines: ``$ `` and the command line, and
``# `` with the date, the cores and the load average; docs/metrics.md's table and README's share of
runs within one grid step are written from that file by ``docs/make_default_run_docs.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from embedeval.breaks import break_resamples, headline_break
from embedeval.defaults import DEFAULT_LENGTHS, DEFAULT_SEED, RELATIVE_BREAK_FRACTION
from embedeval.group_means import group_table
from embedeval.metrics.bootstrap import cluster_resamples
from embedeval.metrics.break_estimators import base_length_count, relative_break_lengths, supported_break

K, CANDIDATES = 5, 125  # recall@5 among a needle haystack and its 124 needle-free candidates (the default pool)
CHANCE = K / CANDIDATES
#: The spread fitted to the default run (``--run`` on ``embedeval nolima --out runs/nolima``, 2026-11-28):
#: per group at every length, and per group and length.
SD_GROUP, SD_CELL = 1.4, 2.3
#: Depths a group has per length in the default run (byte-identical needle haystacks of a short
#: haystack count once; fitted with the spread).
DEPTHS = (5, 8, 8, 9, 10, 10, 10, 10, 10, 10)
#: (ratio of the base at the break, ratio just after it, decay per step after): see the module docstring.
CURVES = {"sharp": (0.97, 0.73, 0.75), "gradual": (0.92, 0.78, 0.8)}
BASE = 0.536  # the default run's base: chance-corrected recall@5 of the three shortest lengths
INTERVAL = (0.05, 0.95)


def logit(p):
    return np.log(p) - np.log1p(-p)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


@dataclass(frozen=True)
class Spread:
    group: float = SD_GROUP
    cell: float = SD_CELL


def curve(n_lengths: int, at: int, shape: str, base: float = BASE, spread: Spread = Spread()) -> np.ndarray:
    """The chance-corrected recall per length whose population mean (:func:`population_mean`, over
    the groups' spread) has the break at position ``at`` (the last length kept; ``n_lengths - 1``:
    never falls): the mean is ``base`` x the shape's ratios."""
    before, after, decay = CURVES[shape]
    ratio = np.empty(n_lengths)
    ratio[: at + 1] = np.linspace(1.0, before, at + 1) if at else 1.0
    ratio[at + 1:] = after * decay ** np.arange(n_lengths - at - 1)
    latent = np.linspace(-CHANCE / (1 - CHANCE) + 1e-6, 1 - 1e-6, 4001)
    return np.interp(base * ratio, population_mean(latent, spread), latent)  # the mean rises with the latent curve


def population_mean(corrected: np.ndarray, spread: Spread) -> np.ndarray:
    """E over u, v of a group's chance-corrected recall, by Gauss-Hermite quadrature."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(60)
    sd = np.hypot(spread.group, spread.cell)
    raw = sigmoid(logit(CHANCE + (1 - CHANCE) * corrected)[:, None] + sd * nodes[None, :]) @ weights / weights.sum()
    return (raw - CHANCE) / (1 - CHANCE)


def true_break(lengths: np.ndarray, mean: np.ndarray) -> int:
    return int(relative_break_lengths(lengths, mean[None, :], RELATIVE_BREAK_FRACTION)[0])


def simulate_groups(rng, corrected: np.ndarray, n_groups: int, spread: Spread, depths=DEPTHS) -> tuple[np.ndarray, np.ndarray]:
    """One simulated run's group table: (sums, counts) of chance-corrected recall@5, (G, L)."""
    depths = np.asarray(depths[: corrected.size])
    shift = rng.normal(0, spread.group, (n_groups, 1)) + rng.normal(0, spread.cell, (n_groups, corrected.size))
    p = sigmoid(logit(CHANCE + (1 - CHANCE) * corrected)[None, :] + shift)
    found = rng.binomial(depths[None, :], p)
    return (found - depths * CHANCE) / (1 - CHANCE), np.broadcast_to(depths, found.shape).astype(float)


def base_of(sums, counts, n_base, weights=None) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        if weights is None:
            return np.atleast_1d((sums.sum(0) / counts.sum(0))[:n_base].mean())
        return ((weights @ sums) / (weights @ counts))[:, :n_base].mean(axis=1)


def estimates(lengths, sums, counts, n_resamples: int, seed: int) -> dict[str, tuple[int, tuple[int, int]]]:
    """Every candidate's headline and its interval on one simulated run."""
    n_base = base_length_count(lengths.size)
    _, weights = cluster_resamples(sums.shape[0], n_resamples, seed)
    bases = base_of(sums, counts, n_base, weights)
    base = base_of(sums, counts, n_base)
    means = (sums.sum(0) / counts.sum(0))[None, :]
    found = {}
    for rule, monotone in (("plain", False), ("monotone", True)):
        points = break_resamples(lengths, sums, counts, bases, RELATIVE_BREAK_FRACTION, n_resamples, seed, monotone=monotone)
        interval = tuple(int(np.quantile(points, q, method="inverted_cdf")) for q in INTERVAL)
        point = int(relative_break_lengths(lengths, means, RELATIVE_BREAK_FRACTION, base=base, monotone=monotone,
                                           weights=counts.sum(0))[0])
        values, shares = np.unique(points, return_counts=True)
        found[f"{rule} point"] = (point, interval)
        found[f"{rule} mode"] = (int(values[np.argmax(shares)]), interval)
        found[f"{rule} median"] = (supported_break(points, 0.5), interval)
        found[f"{rule} 60% support"] = (supported_break(points, 0.6), interval)
        if monotone:
            found["library"] = (headline_break(points) or 0, interval)
    return found


def run(n_groups_list, shapes, repeats: int, n_resamples: int, spread: Spread, lengths=DEFAULT_LENGTHS, seed: int = DEFAULT_SEED,
        base: float = BASE, depths=DEPTHS) -> dict:
    """{(estimator, n_groups): counts of exact, within one step, wrong none, covered, total}."""
    lengths = np.asarray(lengths, dtype=np.int64)
    rng = np.random.default_rng(seed)
    tally: dict = {}
    for shape in shapes:
        for at in range(1, lengths.size):
            corrected = curve(lengths.size, at, shape, base, spread)
            truth = true_break(lengths, population_mean(corrected, spread))
            if truth != lengths[at]:
                continue  # the population curve does not put the break where it was drawn: not a fair test
            step = {int(length): i for i, length in enumerate(lengths)}
            for n_groups in n_groups_list:
                for _ in range(repeats):
                    sums, counts = simulate_groups(rng, corrected, n_groups, spread, depths)
                    for name, (said, (lo, hi)) in estimates(lengths, sums, counts, n_resamples, int(rng.integers(2**31))).items():
                        row = tally.setdefault((name, n_groups), np.zeros(5))
                        row += (said == truth, said in step and abs(step[said] - step[truth]) <= 1, said == 0,
                                lo <= truth <= hi, 1)
    return tally


def fit_spread(run_dir: Path, variant: str = "onehop") -> tuple[Spread, np.ndarray, float]:
    """The spread (sd_group, sd_cell) whose simulated group means match a run's: the variance of the
    group means at each length (averaged over the lengths) and their covariance across lengths,
    by a grid search; also the run's depths per group and length and its base."""
    import pandas as pd

    ranks = pd.read_parquet(run_dir / "retrieval.parquet")
    ranks = ranks[(ranks["variant"] == variant) & (ranks["query_form"] == "question") & (ranks["strategy"] == "truncate")]
    corrected = (ranks["recall@5"].to_numpy(float) - K / ranks["n_candidates"].to_numpy(float)) / (1 - K / ranks["n_candidates"].to_numpy(float))
    lengths, sums, counts = group_table(ranks, corrected)
    means = sums / counts
    observed = moments(means)
    depths = np.round(counts.mean(axis=0)).astype(int)
    curve_ = np.nanmean(means, axis=0)
    rng = np.random.default_rng(0)
    best = None
    for group in np.arange(0.0, 3.01, 0.1):
        for cell in np.arange(0.0, 3.01, 0.1):
            spread = Spread(float(group), float(cell))
            simulated = np.mean([moments(np.divide(*simulate_groups(rng, np.clip(curve_, 0.01, 0.99), means.shape[0], spread, depths)))
                                 for _ in range(40)], axis=0)
            error = float(np.sum((simulated - observed) ** 2))
            if best is None or error < best[0]:
                best = (error, spread, simulated)
    print(f"fitted to {run_dir}: {means.shape[0]} groups, lengths {', '.join(map(str, lengths))}, depths per group {tuple(int(d) for d in depths)}")
    print(f"  variance of group means at a length (mean over lengths): run {observed[0]:.4f}, simulated {best[2][0]:.4f}")
    print(f"  covariance of group means across lengths (mean over pairs): run {observed[1]:.4f}, simulated {best[2][1]:.4f}")
    print(f"  sd_group {best[1].group:.1f}, sd_cell {best[1].cell:.1f}; base over the three shortest lengths {np.nanmean(curve_[:3]):.3f}")
    return best[1], depths, float(np.nanmean(curve_[:3]))


def moments(means: np.ndarray) -> np.ndarray:
    """The variance of group means per length (mean over lengths) and their covariance across lengths (mean over pairs)."""
    cov = np.ma.cov(np.ma.masked_invalid(means), rowvar=False).filled(np.nan)
    off = ~np.eye(cov.shape[0], dtype=bool)
    return np.array([np.nanmean(np.diag(cov)), np.nanmean(cov[off])])


def table(tally: dict) -> list[str]:
    groups = sorted({g for _, g in tally})
    names = list(dict.fromkeys(name for name, _ in tally))
    lines = ["| estimator | " + " | ".join(f"{g} groups: exact / ±1 step / none / covered" for g in groups) + " |",
             "|---|" + "---|" * len(groups)]
    for name in names:
        cells = []
        for g in groups:
            exact, near, none, covered, total = tally[(name, g)]
            cells.append(f"{exact / total:.0%} / {near / total:.0%} / {none / total:.0%} / {covered / total:.0%}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", default="24,48,96")
    parser.add_argument("--shapes", default="sharp,gradual")
    parser.add_argument("--repeats", type=int, default=100, help="simulated runs per break length, shape and group count")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--run", type=Path, help="a run directory whose spread to fit first")
    parser.add_argument("--out", type=Path, help="write the printed lines into this file too, after the command line and the date")
    args = parser.parse_args(argv)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        spread, base, depths = Spread(), BASE, DEPTHS
        if args.run:
            spread, depths, base = fit_spread(args.run)
        started = time.perf_counter()
        tally = run([int(g) for g in args.groups.split(",")], args.shapes.split(","), args.repeats, args.resamples, spread, base=base,
                    depths=depths)
        print(f"{args.repeats} simulated runs per break length x shape ({args.shapes}) x group count, {args.resamples} resamples "
              f"each, grid {', '.join(map(str, DEFAULT_LENGTHS))}, sd_group {spread.group:.1f}, sd_cell {spread.cell:.1f}, "
              f"base {base:.2f} ({time.perf_counter() - started:.0f} s)")
        print("\n".join(table(tally)))
    print(printed.getvalue(), end="")
    if args.out:
        given = sys.argv[1:] if argv is None else list(argv)
        kept = [a for i, a in enumerate(given) if a != "--out" and (i == 0 or given[i - 1] != "--out") and not a.startswith("--out=")]
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        args.out.write_text(f"$ PYTHONPATH=. python benchmarks/bench_break_estimator.py {' '.join(kept)}".rstrip() + "\n"
                            f"# {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, load average {load} at the end\n"
                            + printed.getvalue(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

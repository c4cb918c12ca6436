"""The figure of docs/strategies.md: recall@k against haystack length per strategy, each length's
chance level k/n of the run's needle-free pool drawn beside. One row of two panels per run: the
readings that need no stretching (truncate, windows, chunks, late chunking, BM25) on the left, the
context extension methods on the right with `truncate`, `windows-mean` and `chunks-max` repeated faintly for
reference. A method has one colour; its `+logscale` twin is dashed with hollow markers.

    PYTHONPATH=. python benchmarks/plot_strategies.py runs/extend4k runs/extend8k docs/assets/strategies_extend.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from embedeval.labels import ALL, QUESTION  # noqa: E402
from embedeval.run import METRICS, RETRIEVAL, read_run_table  # noqa: E402

#: Colour per reading; a strategy's colour is that of the first prefix its name starts with.
COLOURS = {"truncate": "black", "windows-mean": "tab:blue", "chunks-max": "tab:green", "late-chunking": "tab:olive",
           "extend-gp": "tab:red", "extend-rp": "tab:purple", "extend-pi-dynamic": "tab:orange", "extend-pi": "teal", "rope-ntk": "tab:brown",
           "rope-linear": "tab:pink", "bm25": "grey"}
#: Strategies repeated faintly in the context extension panel, as the readings to beat.
REFERENCES = ("truncate", "windows-mean", "chunks-max")
EXTENSIONS = ("extend-", "rope-")


def colour(label: str) -> str:
    return next((c for prefix, c in COLOURS.items() if label.startswith(prefix)), "tab:cyan")


def draw(ax, series, label: str, faint: bool = False) -> None:
    """One strategy's line: dashed with hollow markers for a ``+logscale`` twin, thin and pale for a reference."""
    scaled = label.endswith("+logscale")
    ax.plot(series["length"], series["value"], color=colour(label), linestyle="--" if scaled else "-",
            marker="o", markersize=4, markerfacecolor="white" if scaled else colour(label),
            linewidth=1 if faint else 1.6, alpha=0.35 if faint else 1.0, label=label if not faint else f"{label} (reference)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", help="run directories, then the PNG to write")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--variant", default="onehop")
    args = parser.parse_args()
    if len(args.paths) < 2:
        parser.error("give at least one run directory and the PNG to write")
    runs, out = args.paths[:-1], args.paths[-1]
    fig, axes = plt.subplots(len(runs), 2, figsize=(13, 4.6 * len(runs)), squeeze=False, sharey=True)
    for row, path in zip(axes, runs, strict=True):
        # the two tables alone (a run's tables copied back from another machine will do)
        metrics = read_run_table(Path(path) / METRICS)
        rows = metrics[(metrics["metric"] == f"recall@{args.k}") & (metrics["category"] == ALL)
                       & (metrics["depth_bucket"] == ALL) & (metrics["query_form"] == QUESTION)
                       & (metrics["variant"] == args.variant)]
        ranks = read_run_table(Path(path) / RETRIEVAL)
        pool = ranks[ranks["variant"] == args.variant].groupby("length")["n_candidates"].median()
        lengths = sorted(rows["length"].unique())
        for (embedder, strategy), series in rows.groupby(["embedder", "strategy"], sort=True):
            series = series.sort_values("length")
            label = strategy if embedder.startswith("st:") else embedder
            extension = label.startswith(EXTENSIONS)
            draw(row[1] if extension else row[0], series, label)
            if label.startswith(REFERENCES):
                draw(row[1], series, label, faint=True)
        groups = ranks.loc[ranks["variant"] == args.variant, "group_id"].nunique()
        for ax, title in zip(row, ("readings without stretching", "context extension (one pass over L tokens)"), strict=True):
            ax.plot(pool.index, args.k / pool.to_numpy(), color="grey", linewidth=3, alpha=0.3, label=f"chance ({args.k}/n)")
            ax.set_xscale("log", base=2)
            ax.set_xticks(lengths, [str(x) for x in lengths])
            ax.minorticks_off()
            ax.grid(alpha=0.3)
            ax.set_xlabel("haystack length (tokens)")
            ax.set_ylim(0, 1.02)
            ax.set_title(f"{title}\n{args.variant} needles, {groups} groups, {int(rows['n'].max())} needle haystacks "
                         f"per length", fontsize=9)
            ax.legend(fontsize=7.5, loc="best")
        row[0].set_ylabel(f"recall@{args.k} among same-length candidates")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()

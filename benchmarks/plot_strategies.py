"""One figure of recall@k against haystack length, one line per strategy of a run (the figure of
docs/strategies.md), with each length's chance level k/n of the run's needle-free pool.

    PYTHONPATH=. python benchmarks/plot_strategies.py runs/extend docs/assets/strategies_extend.png
"""

from __future__ import annotations

import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from embedeval.labels import ALL, QUESTION  # noqa: E402
from embedeval.run import NolimaRun  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run")
    parser.add_argument("out")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--variant", default="onehop")
    args = parser.parse_args()
    run = NolimaRun.open(args.run, needs=["retrieval.parquet"])
    metrics = run.metrics()
    rows = metrics[(metrics["metric"] == f"recall@{args.k}") & (metrics["category"] == ALL) & (metrics["depth_bucket"] == ALL)
                   & (metrics["query_form"] == QUESTION) & (metrics["variant"] == args.variant)]
    ranks = run.retrieval()
    pool = ranks[ranks["variant"] == args.variant].groupby("length")["n_candidates"].median()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    styles = ["-", "--", ":", "-."]
    for i, ((embedder, strategy), series) in enumerate(rows.groupby(["embedder", "strategy"], sort=True)):
        series = series.sort_values("length")
        label = strategy if embedder.startswith("st:") else f"{embedder} ({strategy})"
        ax.plot(series["length"], series["value"], marker="o", linestyle=styles[i % len(styles)], label=label)
    ax.plot(pool.index, args.k / pool.to_numpy(), color="grey", linewidth=3, alpha=0.4, label=f"chance ({args.k}/n)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(rows["length"].unique()), [str(x) for x in sorted(rows["length"].unique())])
    ax.set_xlabel("haystack length (tokens)")
    ax.set_ylabel(f"recall@{args.k} among same-length candidates")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7.5, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title(f"{args.variant} needles, {rows['n'].max()} needle haystacks per length", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()

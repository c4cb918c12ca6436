"""The tables of docs/strategies.md's full default grid, printed from a run folder: recall@5 among
same-length candidates and the pooled AUC (needle haystacks against their needle-free controls)
per strategy and length, and each series' break point with its interval, base and resample shares
(``breaks.csv``). It reads ``metrics.csv`` and ``breaks.csv`` only, so a run's tables copied back
from another machine will do.

    PYTHONPATH=. python benchmarks/strategy_tables.py runs/extend-full
"""

from __future__ import annotations

import argparse
from pathlib import Path

from embedeval.labels import ALL, QUESTION
from embedeval.report.break_words import interval_text, shares_words
from embedeval.run import BREAKS, METRICS, read_breaks, read_run_table


def table(metrics, metric: str, digits: int = 3) -> str:
    """One row per series (embedder · strategy), one column per length: ``metric`` over all
    categories and depths, one-needle haystacks asked by their question."""
    cells = metrics[(metrics["metric"] == metric) & (metrics["category"] == ALL) & (metrics["depth_bucket"] == ALL)
                    & (metrics["query_form"] == QUESTION) & (metrics["n_needles"] <= 1) & (metrics["n_distractors"] == 0)]
    grid = cells.pivot_table(index=["embedder", "strategy"], columns="length", values="value")
    lines = ["| strategy | " + " | ".join(f"{length:,}" for length in grid.columns) + " |",
             "|---|" + "---|" * len(grid.columns)]
    for (embedder, strategy), row in grid.iterrows():
        lines.append(f"| `{strategy}` ({embedder}) | " + " | ".join(f"{v:.{digits}f}" for v in row) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help="a run folder (metrics.csv and breaks.csv)")
    run = parser.parse_args().run
    metrics = read_run_table(run / METRICS)
    print("recall@5 among same-length candidates:\n")
    print(table(metrics, "recall@5"))
    print("\npooled ROC AUC, needle haystacks against their needle-free controls:\n")
    print(table(metrics, "auc"))
    print("\nbreak points (relative rule), with the base every strategy of an embedder is held to:\n")
    for row in read_breaks(run / BREAKS).itertuples():
        base = "" if row.base_value != row.base_value else f"; base {row.base_value:.3f} over {row.base_lengths} ({row.base_strategy})"
        spread = shares_words(row)
        print(f"- `{row.strategy}` ({row.embedder}): {interval_text(row)}{base}"
              + (f"; resamples: {spread}" if spread else f"; {row.relative_status}"))


if __name__ == "__main__":
    main()

"""Reading run directories back (:class:`~embedeval.run.NolimaRun`), and the report of one run
again or of several side by side (:func:`compare_runs`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from embedeval.run import NolimaRun
from embedeval.report.tables import recall_chance_table
from embedeval.report.write import REPORT_MD, write_report


def pool_size(retrieval: pd.DataFrame) -> int:
    """Candidates per ranking (pool + 1) at the run's fewest distractors, the most of any row
    (without distractors and with the needle-free pool: every group's control and the negatives;
    with the ``all`` pool, the other questions' needle haystacks at the depth too); the chance
    level of recall@k is k / this."""
    return int(retrieval.loc[retrieval["n_distractors"] == retrieval["n_distractors"].min(), "n_candidates"].max())


def compare_runs(run_dirs: list[Path], out: Path | None = None) -> Path:
    """Rebuild the report of one run, or a combined report of several into ``out``; returns the
    path of its report.md."""
    runs = [NolimaRun.open(d) for d in run_dirs]
    if len(runs) == 1:
        run = runs[0]
        retrieval = run.retrieval()
        target = Path(out or run.path)
        write_report(target, run.metrics(), run.similarities(), run.breaks(), run.rule(), config=run.config,
                     candidates=None if retrieval is None else pool_size(retrieval),
                     chance=None if retrieval is None else recall_chance_table(retrieval))
        return target / REPORT_MD
    tables = [(run.metrics(), run.similarities(), run.breaks()) for run in runs]
    all_embedders = [e for metrics, _, _ in tables for e in metrics["embedder"].unique()]
    relabel = len(all_embedders) != len(set(all_embedders))
    frames: list[list[pd.DataFrame]] = [[], [], []]
    for run, run_tables in zip(runs, tables):
        for kept, table in zip(frames, run_tables):
            kept.append(table.assign(embedder=f"{run.path.name}/" + table["embedder"]) if relabel else table)
    target = Path(out or "runs/compare")
    target.mkdir(parents=True, exist_ok=True)
    write_report(target, *(pd.concat(f, ignore_index=True) for f in frames), runs[0].rule(),
                 title="NoLiMa sweep: " + " vs ".join(run.path.name for run in runs))
    return target / REPORT_MD

"""Reading run directories back (:class:`~embedeval.run.NolimaRun`), and the report of one run
again or of several side by side (:func:`compare_runs`)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd

from embedeval.derived import RECORD, record_outputs, record_rewritten, recorded_files
from embedeval.report.tables import recall_chance_table
from embedeval.report.write import REPORT_FILES, REPORT_MD, write_report
from embedeval.run import CONFIG, NolimaRun, is_run_directory
from embedeval.run_folder import run_directory
from embedeval.schema import N_DISTRACTORS

#: Where a combined report goes without ``out``.
DEFAULT_COMPARE_OUT = Path("runs/compare")
#: What marks a folder a report may be written into (besides a new, empty or run folder).
REPORT_FOLDER_RECORD = f"{CONFIG}, or {RECORD} listing its {REPORT_MD},"


def is_report_folder(folder: Path) -> bool:
    """Whether embedeval wrote ``folder``: a run directory, or a report written elsewhere
    (:func:`compare_runs` with ``out``: its ``derived.json`` lists the report's files)."""
    return is_run_directory(folder) or REPORT_MD in recorded_files(folder)


def pool_size(retrieval: pd.DataFrame) -> int:
    """Candidates per ranking (pool + 1) at the run's fewest distractors, the most of any row
    (without distractors and with the needle-free pool: every group's control and the negatives;
    with the ``all`` pool, the other questions' needle haystacks at the depth too); the chance
    level of recall@k is k / this."""
    return int(retrieval.loc[retrieval[N_DISTRACTORS] == retrieval[N_DISTRACTORS].min(), "n_candidates"].max())


def compare_runs(run_dirs: list[Path], out: Path | None = None) -> Path:
    """Rebuild the report of one run, or a combined report of several into ``out``; returns the
    path of its report.md.

    ``out`` (default: the run itself, or ``runs/compare``) follows the rules of a run directory
    (:func:`~embedeval.run_folder.run_directory`): a new or empty folder, a run folder, or one a report
    was written into before (:func:`is_report_folder`); any other folder is one
    :class:`~embedeval.errors.InputError` before a table is read, and so is a ``report.md``,
    ``report.html`` or ``derived.json`` there that is a link or a folder. A report written outside a run
    folder lists its files in ``derived.json``, so the next report may replace them."""
    runs = [NolimaRun.open(d) for d in run_dirs]  # reads each config.json only: what is wrong with a run is said first
    target = Path(out) if out is not None else runs[0].path if len(runs) == 1 else DEFAULT_COMPARE_OUT
    with run_directory(target, is_report_folder, REPORT_FOLDER_RECORD, (*REPORT_FILES, RECORD)):  # none a link or a folder
        names = _write_report(runs, target)
        if is_run_directory(target):  # a run's own derived.json says what its tables made, and now what was written
            record_rewritten(target, names)
        else:
            sources = "\0".join(str(run.path.resolve()) for run in runs)
            record_outputs(target, hashlib.sha256(sources.encode()).hexdigest(), names)
    return target / REPORT_MD


def _write_report(runs: list[NolimaRun], target: Path) -> list[str]:
    """Write the report of one run, or the combined report of several, into ``target``; returns
    the files written (relative to it)."""
    if len(runs) == 1:
        run = runs[0]
        retrieval = run.retrieval()
        return write_report(target, run.metrics(), run.similarities(), run.breaks(), run.rule(), config=run.config,
                            candidates=None if retrieval is None else pool_size(retrieval),
                            chance=None if retrieval is None else recall_chance_table(retrieval), decision=run.decision())
    tables = [(run.metrics(), run.similarities(), run.breaks()) for run in runs]
    all_embedders = [e for metrics, _, _ in tables for e in metrics["embedder"].unique()]
    relabel = len(all_embedders) != len(set(all_embedders))
    frames: list[list[pd.DataFrame]] = [[], [], []]
    for run, run_tables in zip(runs, tables, strict=True):
        for kept, table in zip(frames, run_tables, strict=True):
            kept.append(table.assign(embedder=f"{run.path.name}/" + table["embedder"]) if relabel else table)
    return write_report(target, *(pd.concat(f, ignore_index=True) for f in frames), runs[0].rule(),
                        title="NoLiMa sweep: " + " vs ".join(run.path.name for run in runs))

"""Reading run directories back: a run's tables and config (:func:`load_run`), and the report of
one run again or of several side by side (:func:`compare_runs`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from embedeval.aggregate import METRIC_COLUMNS, with_later_columns
from embedeval.breaks import BREAKS_FILE, BreakRule, break_points, read_breaks
from embedeval.defaults import DEFAULT_BREAK_K, DEFAULT_BREAK_METRIC, DEFAULT_BREAK_THRESHOLD, DEFAULT_N_BOOTSTRAP, DEFAULT_SEED
from embedeval.errors import InputError
from embedeval.io import read_json, read_table
from embedeval.labels import SIMILARITY_COLUMNS
from embedeval.report.sections import HEADER_KEYS
from embedeval.report.write import write_report

#: Columns that came with long-text strategies and with distractors (runs of older versions lack them).
LATER_COLUMNS = ("strategy", "windows_exact", "best_chunk", "chunk_has_needle", "n_distractors", "control_id", "distractors_in_zone",
                 "n_needles", "own_question")


def load_run(run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict]:
    """metrics.csv, similarities.parquet, the break points and config.json of a run directory.
    The break points are its breaks.csv; a run from before it has them recomputed from its
    metrics and retrieval.parquet with the run's break rule, resamples and seed."""
    run_dir = Path(run_dir)
    needed = [run_dir / "metrics.csv", run_dir / "similarities.parquet", run_dir / "config.json"]
    missing = [p.name for p in needed if not p.is_file()]
    if missing:
        raise InputError(f"{run_dir} is not a finished run directory (missing {', '.join(missing)})")
    metrics = read_table(needed[0], [c for c in METRIC_COLUMNS if c not in LATER_COLUMNS])
    similarities = read_table(needed[1], [c for c in SIMILARITY_COLUMNS if c not in LATER_COLUMNS])
    metrics, similarities = with_later_columns(metrics), with_later_columns(similarities)
    config = read_json(needed[2])
    if not isinstance(config, dict) or not all(key in config for key in HEADER_KEYS):
        raise InputError(f"{needed[2]} is not a run's config (it needs {', '.join(HEADER_KEYS)})")
    if (run_dir / BREAKS_FILE).is_file():
        breaks = read_breaks(run_dir / BREAKS_FILE)
    else:
        retrieval = run_dir / "retrieval.parquet"
        breaks = break_points(metrics, read_table(retrieval) if retrieval.is_file() else None, break_rule_of(config),
                              config.get("n_bootstrap", DEFAULT_N_BOOTSTRAP), config.get("seed", DEFAULT_SEED))
    return metrics, similarities, breaks, config


def pool_size(retrieval: pd.DataFrame) -> int:
    """Candidates per ranking (pool + 1) at the run's fewest distractors (without them: every
    group's control and the negatives); the chance level of recall@k is k / this."""
    retrieval = with_later_columns(retrieval)
    return int(retrieval.loc[retrieval["n_distractors"] == retrieval["n_distractors"].min(), "n_candidates"].max())


def _pool_size(run_dir: Path) -> int | None:
    """:func:`pool_size` of a run's ``retrieval.parquet``, if it has one."""
    path = run_dir / "retrieval.parquet"
    return pool_size(read_table(path, ["n_candidates"])) if path.is_file() else None


def break_rule_of(config: dict) -> BreakRule:
    """The break rule a run was made with: runs before the relative rule read an absolute one
    (and runs before 0.2 the pooled AUC)."""
    if "break_rule" in config:
        return BreakRule(config["break_rule"], config.get("break_k", DEFAULT_BREAK_K), config.get("break_metric", DEFAULT_BREAK_METRIC),
                         config.get("break_threshold", DEFAULT_BREAK_THRESHOLD))
    if "break_metric" in config:
        return BreakRule("absolute", metric=config["break_metric"], threshold=config.get("break_threshold", DEFAULT_BREAK_THRESHOLD))
    return BreakRule("absolute", metric="auc", threshold=config.get("auc_threshold", DEFAULT_BREAK_THRESHOLD))


def compare_runs(run_dirs: list[Path], out: Path | None = None) -> Path:
    """Rebuild the report of one run, or a combined report of several into ``out``."""
    loaded = [load_run(Path(d)) for d in run_dirs]
    if len(loaded) == 1:
        metrics, sims, breaks, config = loaded[0]
        return write_report(Path(out or run_dirs[0]), metrics, sims, breaks, break_rule_of(config), config=config,
                            candidates=_pool_size(Path(run_dirs[0])))
    all_embedders = [e for m, _, _, _ in loaded for e in m["embedder"].unique()]
    relabel = len(all_embedders) != len(set(all_embedders))
    frames: list[list[pd.DataFrame]] = [[], [], []]
    for run_dir, tables in zip(run_dirs, loaded):
        for kept, table in zip(frames, tables[:3]):
            kept.append(table.assign(embedder=f"{Path(run_dir).name}/" + table["embedder"]) if relabel else table)
    target = Path(out or "runs/compare")
    target.mkdir(parents=True, exist_ok=True)
    return write_report(target, *(pd.concat(f, ignore_index=True) for f in frames), break_rule_of(loaded[0][3]),
                        title="NoLiMa sweep: " + " vs ".join(Path(d).name for d in run_dirs))

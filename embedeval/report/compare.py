"""Reading run directories back: a run's tables and config (:func:`load_run`), and the report of
one run again or of several side by side (:func:`compare_runs`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from embedeval.aggregate import METRIC_COLUMNS, with_later_columns
from embedeval.breaks import BreakRule
from embedeval.defaults import DEFAULT_BREAK_K, DEFAULT_BREAK_METRIC, DEFAULT_BREAK_THRESHOLD
from embedeval.errors import InputError
from embedeval.io import read_json, read_table
from embedeval.labels import SIMILARITY_COLUMNS
from embedeval.report.sections import HEADER_KEYS
from embedeval.report.write import write_report

#: Columns that came with long-text strategies and with distractors (runs of older versions lack them).
LATER_COLUMNS = ("strategy", "windows_exact", "best_chunk", "chunk_has_needle", "n_distractors", "control_id", "distractors_in_zone",
                 "n_needles", "own_question")


def load_run(run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """metrics.csv, similarities.parquet and config.json of a run directory."""
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
    return metrics, similarities, config


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
        metrics, sims, config = loaded[0]
        return write_report(Path(out or run_dirs[0]), metrics, sims, break_rule_of(config), config=config,
                            candidates=_pool_size(Path(run_dirs[0])))
    all_embedders = [e for m, _, _ in loaded for e in m["embedder"].unique()]
    relabel = len(all_embedders) != len(set(all_embedders))
    metrics_frames, sim_frames = [], []
    for run_dir, (metrics, sims, _) in zip(run_dirs, loaded):
        if relabel:
            metrics = metrics.assign(embedder=f"{Path(run_dir).name}/" + metrics["embedder"])
            sims = sims.assign(embedder=f"{Path(run_dir).name}/" + sims["embedder"])
        metrics_frames.append(metrics)
        sim_frames.append(sims)
    target = Path(out or "runs/compare")
    target.mkdir(parents=True, exist_ok=True)
    return write_report(target, pd.concat(metrics_frames), pd.concat(sim_frames), break_rule_of(loaded[0][2]),
                        title="NoLiMa sweep: " + " vs ".join(Path(d).name for d in run_dirs))

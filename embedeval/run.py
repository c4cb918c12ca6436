"""A NoLiMa run directory, owned here and nowhere else: the names of its files, the order they are
written in, whether a directory holds a finished run, and the upgrade of tables written by older
versions (the columns they lack, filled in once, at read time, as mteb's ``TaskResult.from_disk``
upgrades old result files in one place).

Files, in the order a run writes them (each atomically):

``haystacks.parquet`` + ``haystacks.json``   the haystacks and the settings they were built with
``similarities.parquet``, ``retrieval.parquet``   the similarity and rank tables
``timings.csv``                               what each reading read and the model's time on it
                                               (:func:`~embedeval.decision.timing_table`)
``metrics.csv``, ``breaks.csv``, ``decision.csv``   the metrics, the break points and the decision
                                               table (with the report, ``derived.json`` records
                                               what they were made from)
``config.json``                               last: the run's settings; without it the directory
                                               reads as unfinished

:class:`NolimaRun` opens a finished directory (the report, ``compare``, ``export`` and the
notebooks read runs through it); :class:`RunWriter` writes one (``run_nolima`` does).
The folder itself (refused unless embedeval wrote it, held by one run at a time, claimed while
new) is :mod:`embedeval.run_folder`'s: ``run_nolima`` holds it with
:func:`~embedeval.run_folder.run_directory` (:func:`is_run_directory`, :data:`CONFIG`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import pandas as pd

from embedeval.breaks import ESTIMATOR, OK, BreakRule, break_points, parse_shares, share_reaching
from embedeval.corpus import source_path
from embedeval.decision import decision_table, with_earlier_speeds
from embedeval.defaults import BREAK_SUPPORT, DEFAULT_BREAK_K, DEFAULT_BREAK_METRIC, DEFAULT_BREAK_THRESHOLD, DEFAULT_N_BOOTSTRAP, DEFAULT_SEED
from embedeval.errors import ConfigError, InputError
from embedeval.grid import HaystackGrid
from embedeval.io import EDITED, TableSchema, json_text, read_json, read_table, refuse_first, write_table, write_text_atomic
from embedeval.jsonread import load_file
from embedeval.labels import NEEDLE_FREE_POOL
from embedeval.needles import NeedleSet, grid_needle_set
from embedeval.options import (
    BREAK_K,
    BREAK_METRIC,
    BREAK_RULE,
    BREAK_THRESHOLD,
    CORPUS,
    DISTRACTORS_FILE,
    EMBEDDERS,
    EXPANSIONS,
    GROUPS,
    N_BOOTSTRAP,
    NEEDLES,
    POOL,
    PRICES,
    SEED,
    Constraint,
    Option,
    is_number,
    is_text,
    is_whole,
)
from embedeval.schema import (
    ADDED_BREAK_COLUMNS,
    ADDED_DECISION_COLUMNS,
    BREAK_COLUMNS,
    BREAK_SCHEMA,
    DECISION_COLUMNS,
    DECISION_SCHEMA,
    HAYSTACK_COLUMNS,
    HAYSTACK_SCHEMA,
    LATER_COLUMNS,
    METRIC_COLUMNS,
    METRIC_SCHEMA,
    N_DISTRACTORS,
    N_NEEDLES,
    OWN_QUESTION,
    RETRIEVAL_COLUMNS,
    RETRIEVAL_SCHEMA,
    SERIES_KEYS,
    SIMILARITY_COLUMNS,
    SIMILARITY_SCHEMA,
    TIMING_COLUMNS,
    TIMING_SCHEMA,
)
from embedeval.strategies import family_of_label, is_written_label, model_reading_rank
from embedeval.strategies.parameters import NAME
from embedeval.strategies.truncate import TRUNCATE

HAYSTACKS = "haystacks.parquet"
HAYSTACK_SETTINGS = "haystacks.json"
SIMILARITIES = "similarities.parquet"
RETRIEVAL = "retrieval.parquet"
METRICS = "metrics.csv"
BREAKS = "breaks.csv"
TIMINGS = "timings.csv"
DECISION = "decision.csv"
CONFIG = "config.json"
#: Every file of a run directory, in the order a run writes them (the module docstring).
RUN_FILES = (HAYSTACKS, HAYSTACK_SETTINGS, SIMILARITIES, RETRIEVAL, TIMINGS, METRICS, BREAKS, DECISION, CONFIG)
#: Each table a run writes, by its file: the kinds, ranges and rules of its columns
#: (:mod:`embedeval.schema`), checked when the table is opened (:func:`read_run_table`).
TABLE_SCHEMAS: dict[str, TableSchema] = {
    HAYSTACKS: HAYSTACK_SCHEMA, SIMILARITIES: SIMILARITY_SCHEMA, RETRIEVAL: RETRIEVAL_SCHEMA, METRICS: METRIC_SCHEMA,
    BREAKS: BREAK_SCHEMA, TIMINGS: TIMING_SCHEMA, DECISION: DECISION_SCHEMA,
}
#: The tables a run's metrics, decision table and report are derived from (their digest decides
#: whether these stand).
SCORED_TABLES = (SIMILARITIES, RETRIEVAL, TIMINGS)
#: What a run's config.json must hold to be read as one (after :func:`upgraded_config`), and what
#: its ``grid`` must hold.
CONFIG_KEYS = ("embedders", "needles", "tokenizer", "grid")
GRID_KEYS = ("corpus", "lengths", "depths", "seed")


def recorded(*options: Option) -> dict[str, Constraint]:
    """What each option's value must hold where config.json records it (its
    :attr:`~embedeval.options.Option.recorded`), by its parameter: the one place it is declared."""
    return {option.parameter: option.recorded for option in options}


#: What each of :data:`CONFIG_KEYS` must hold (a :class:`~embedeval.options.Constraint`: a check,
#: and its words for the message): an option's as it declares it, the others' here.
CONFIG_VALUES = {
    **recorded(EMBEDDERS, NEEDLES),
    "tokenizer": Constraint(is_text, "a tokenizer spec"),
    "grid": Constraint(lambda v: isinstance(v, dict), "an object of the grid's settings"),
}
#: What each field of config.json that only some runs have must hold where it is there (the
#: report, ``compare`` and ``export`` read them; the break rule's values are checked by
#: :meth:`~embedeval.breaks.BreakRule.check` besides): an option's as it declares it (the pool holds
#: what its option does; the resamples of an older run may be fewer than a new run takes), the
#: fields no option sets here.
OPTIONAL_CONFIG_VALUES = {
    **recorded(POOL, GROUPS, DISTRACTORS_FILE, EXPANSIONS, N_BOOTSTRAP, BREAK_RULE, BREAK_K, BREAK_METRIC, BREAK_THRESHOLD),
    "auc_threshold": Constraint(is_number, "a number"),
    **recorded(PRICES),
    "frame_tokens": Constraint(lambda v: isinstance(v, dict) and all(isinstance(k, str) and is_whole(n) and n >= 0 for k, n in v.items()),
                               "an object of embedder: its special tokens per input (a whole number >= 0)"),
    "break_estimator": Constraint(lambda v: isinstance(v, str), "the break-point estimator's name"),
    "model_windows": Constraint(lambda v: isinstance(v, dict) and all(isinstance(k, str) and is_whole(n) and n >= 1 for k, n in v.items()),
                                "an object of embedder: the content tokens it reads whole (a whole number >= 1)"),
    "corpus_lengths": Constraint(lambda v: isinstance(v, dict) and all(is_whole(v.get(k)) and v[k] >= 0 for k in ("documents", "median", "p90")),
                                 "an object of the corpus's documents and their median and 90th percentile token counts"),
}
#: What the grid's fields that :class:`~embedeval.grid.HaystackGrid` does not check must hold (as their options declare it).
GRID_VALUES = recorded(CORPUS, SEED)
#: The settings a config.json of a version before ``HaystackGrid`` keeps at its top level.
FLAT_GRID_KEYS = ("corpus", "lengths", "depths", "variants", "negatives", N_DISTRACTORS, "needles_per_haystack", "filler",
                  "min_books", "seed")



#: Columns that tables of older versions lack, with the value they stand for there: every haystack
#: read through the model's own window, no distractors, one needle asked its own question.
LATER_DEFAULTS = {"strategy": TRUNCATE, N_DISTRACTORS: 0, "distractors_in_zone": 0, N_NEEDLES: 1, OWN_QUESTION: True}


def upgraded(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the columns of :data:`LATER_DEFAULTS` it lacks filled in (a table of an
    older version, or one made by hand)."""
    return frame.assign(**{column: value for column, value in LATER_DEFAULTS.items() if column not in frame.columns})


def upgraded_config(config: dict) -> dict:
    """A run's config.json in today's shape: the grid's settings nested under ``grid`` (a config
    of a version before :class:`~embedeval.grid.HaystackGrid` keeps them at its top level),
    and the retrieval ``pool`` (runs before the choice ranked among the needle-free pool)."""
    config = {"pool": NEEDLE_FREE_POOL, **config}
    if "grid" in config:
        return config
    return {**{k: v for k, v in config.items() if k not in FLAT_GRID_KEYS},
            "grid": {k: config[k] for k in FLAT_GRID_KEYS if k in config}}


def absent_config_keys(config: dict) -> list[str]:
    """What an (upgraded) config.json lacks of :data:`CONFIG_KEYS` and its grid's :data:`GRID_KEYS`:
    nothing for the config of a NoLiMa run of any version."""
    absent = [key for key in CONFIG_KEYS if key not in config]
    if "grid" in config:
        grid = config["grid"] if isinstance(config["grid"], dict) else {}
        absent += [f"grid.{key}" for key in GRID_KEYS if key not in grid]
    return absent


def _json_object(path: Path) -> dict | None:
    """The JSON object in ``path``; None for a missing or unreadable file or another JSON value."""
    try:
        value = read_json(path)
    except InputError:
        return None
    return value if isinstance(value, dict) else None


def is_run_directory(folder: Path) -> bool:
    """Whether embedeval wrote a NoLiMa run into ``folder``: a finished one (its config.json, of
    this version or an older one :func:`upgraded_config` reads, a run's config) or one under way or
    interrupted (its haystacks.json, the first file a run writes and kept until the next run,
    holds the grid's settings)."""
    config = _json_object(folder / CONFIG)
    if config is not None and not absent_config_keys(upgraded_config(config)):
        return True
    settings = _json_object(folder / HAYSTACK_SETTINGS)
    return settings is not None and all(key in settings for key in GRID_KEYS)


def check_config_values(config: dict, path: Path) -> None:
    """One :class:`~embedeval.errors.InputError` naming the field and ``path`` for a value of an
    (upgraded) config.json that a command could not read: an optional field of the wrong type
    (:data:`OPTIONAL_CONFIG_VALUES`), a grid setting :class:`~embedeval.grid.HaystackGrid` (or
    :data:`GRID_VALUES`) refuses, or a break rule that cannot work. Called when a run is opened,
    before anything is read or written."""
    grid = config["grid"]
    broken = [f"{key} must be {rule.words}, not {json.dumps(config[key])}" for key, rule in OPTIONAL_CONFIG_VALUES.items()
              if key in config and not rule.holds(config[key])]
    broken += [f"grid.{key} must be {rule.words}, not {json.dumps(grid[key])}" for key, rule in GRID_VALUES.items()
               if not rule.holds(grid[key])]
    if broken:
        raise InputError(f"{path} is broken: {'; '.join(broken)}")
    try:
        HaystackGrid(**{f.name: grid[f.name] for f in fields(HaystackGrid) if f.name in grid})
    except (ConfigError, TypeError) as exc:  # TypeError: a value no check expected (a list where a number goes)
        where = f"grid.{exc.parameters[0]}: " if isinstance(exc, ConfigError) and exc.parameters else "grid: "
        raise InputError(f"{path} is broken: {where}{exc}") from None
    try:
        break_rule_of(config).check()
    except ConfigError as exc:
        raise InputError(f"{path} is broken: {exc}") from None


def read_run_table(path: str | Path, columns: Sequence[str] = (), empty: bool = False, table: str | None = None) -> pd.DataFrame:
    """A run's table holding ``columns`` (and rows, unless ``empty``), checked against its schema
    (:data:`TABLE_SCHEMAS`: the one of ``table``, a file name, else of the file's own name) and its
    strategy labels."""
    frame = read_table(path, columns, empty=empty)
    TABLE_SCHEMAS.get(table or Path(path).name, TableSchema()).check(frame, path)
    if "strategy" in frame.columns:
        check_strategy_labels(frame["strategy"], path)
    return frame


#: A label of a family registered when the run was made, not now (a user's module not imported): its
#: name as :func:`~embedeval.strategies.base.register` takes names, a size and ``+logscale``, as families write.
UNREGISTERED_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*(@[1-9][0-9]*)?(\+logscale)?")


def unregistered_label(label) -> bool:
    """Whether ``label`` is written as a family's label but owned by no family registered now (read as
    a label no family writes, as before the check)."""
    return isinstance(label, str) and family_of_label(label) is None and UNREGISTERED_LABEL.fullmatch(label) is not None


def check_strategy_labels(values: pd.Series, source) -> None:
    """One :class:`InputError` naming ``source``, the line (row) and the label where a ``strategy``
    cell holds no label a registered family writes (:func:`~embedeval.strategies.is_written_label`:
    ``chunks-max@0``, ``truncate `` with a space, an empty cell), as :func:`~embedeval.io.check_column_kinds`
    says a damaged number; a label of a family not registered now (:func:`unregistered_label`) is read."""
    known = {label: is_written_label(label) or unregistered_label(label) for label in values.drop_duplicates()}
    bad = ~values.map(known)
    refuse_first(values, bad, source, "strategy", "a strategy label as a run writes it (e.g. truncate, chunks-max@128)", label_cause)


def label_cause(label) -> str:
    """Why a table holds a label no installed family reads: edited or damaged, or, for one a plugin
    could have written (a name no built-in family reads it by), a strategy plugin's that is not
    installed now or has changed since the run."""
    family = family_of_label(label) if isinstance(label, str) else None
    plugin = (isinstance(label, str) and NAME.fullmatch(re.split(r"[@+]", label, maxsplit=1)[0]) is not None
              and (family is None or not type(family).__module__.startswith("embedeval.")))
    if not plugin:
        return EDITED
    return ("the file was edited or damaged, or the label is a strategy plugin's that is not installed now or has changed "
            "since the run: install the plugin the run used, or run again to rewrite it")


def _read(path: Path, columns: Sequence[str], strategies: Sequence[str] = ()) -> pd.DataFrame:
    """A run's table holding ``columns`` less those of later versions, upgraded. A run of several
    ``strategies`` (its config.json's) wrote a ``strategy`` column: a table of it without one was
    edited, and would read as one strategy's (its rows averaged together), so it is refused."""
    frame = read_run_table(path, [c for c in columns if c not in LATER_COLUMNS])
    if "strategy" in columns and "strategy" not in frame.columns and len(strategies) > 1:
        raise InputError(f"{path} lacks the column strategy, which a run of {len(strategies)} strategies writes "
                         "(the file was edited or damaged; run again to rewrite it)")
    return upgraded(frame)


def break_rule_of(config: dict) -> BreakRule:
    """The break rule a run was made with: runs before the relative rule read an absolute one
    (and runs before 0.2 the pooled AUC)."""
    if "break_rule" in config:
        return BreakRule(config["break_rule"], config.get("break_k", DEFAULT_BREAK_K), config.get("break_metric", DEFAULT_BREAK_METRIC),
                         config.get("break_threshold", DEFAULT_BREAK_THRESHOLD))
    if "break_metric" in config:
        return BreakRule("absolute", metric=config["break_metric"], threshold=config.get("break_threshold", DEFAULT_BREAK_THRESHOLD))
    return BreakRule("absolute", metric="auc", threshold=config.get("auc_threshold", DEFAULT_BREAK_THRESHOLD))


@dataclass(frozen=True)
class NolimaRun:
    """A finished run directory (:meth:`open`), its tables read on demand and upgraded."""

    path: Path
    config: dict

    @classmethod
    def open(cls, path: str | Path, needs: Sequence[str] = ()) -> NolimaRun:
        """The run at ``path``: one :class:`~embedeval.errors.InputError` line unless it is a
        finished run directory (``config.json``, written last, with a run's settings, and the
        metrics and similarity tables) holding the files ``needs`` too."""
        folder = Path(path)
        if not folder.is_dir():
            raise InputError(f"run directory {folder} does not exist")
        missing = [name for name in dict.fromkeys((CONFIG, METRICS, SIMILARITIES, *needs)) if not (folder / name).is_file()]
        if missing:
            raise InputError(f"{folder} is not a finished run directory (missing {', '.join(missing)})")
        config = read_json(folder / CONFIG)
        config = upgraded_config(config) if isinstance(config, dict) else {}
        absent = [key for key in CONFIG_KEYS if key not in config]
        if absent:
            raise InputError(f"{folder / CONFIG} is not a NoLiMa run's config (it lacks {', '.join(absent)})")
        broken = [f"{key} must be {rule.words}, not {json.dumps(config[key])}" for key, rule in CONFIG_VALUES.items()
                  if not rule.holds(config[key])]
        if broken:
            raise InputError(f"{folder / CONFIG} is broken: {'; '.join(broken)}")
        absent = absent_config_keys(config)
        if absent:
            raise InputError(f"{folder / CONFIG} is not a NoLiMa run's config (it lacks {', '.join(absent)})")
        check_config_values(config, folder / CONFIG)
        return cls(folder, config)

    def file(self, name: str) -> Path:
        return self.path / name

    def has(self, name: str) -> bool:
        return self.file(name).is_file()

    def metrics(self) -> pd.DataFrame:
        return _read(self.file(METRICS), METRIC_COLUMNS, self.config.get("strategies", ()))

    def similarities(self) -> pd.DataFrame:
        return _read(self.file(SIMILARITIES), SIMILARITY_COLUMNS, self.config.get("strategies", ()))

    def retrieval(self) -> pd.DataFrame | None:
        """The rank table (None for a run from before it)."""
        return _read(self.file(RETRIEVAL), RETRIEVAL_COLUMNS, self.config.get("strategies", ())) if self.has(RETRIEVAL) else None

    def haystacks(self) -> pd.DataFrame:
        return _read(self.file(HAYSTACKS), HAYSTACK_COLUMNS, self.config.get("strategies", ()))

    def haystack_settings_bytes(self) -> bytes:
        return self.file(HAYSTACK_SETTINGS).read_bytes()

    def rule(self) -> BreakRule:
        return break_rule_of(self.config)

    def recorded_path(self, path: str, what: str) -> str:
        """A path the run's config.json records, as it is: absolute (this version records every path
        so), or relative (an older run's) and found from the working directory. A relative path
        that is not found here is one :class:`~embedeval.errors.InputError` naming it: such a run
        did not record the folder it was started in."""
        if Path(path).expanduser().is_absolute() or Path(path).exists():
            return path
        raise InputError(f"{self.file(CONFIG)} records the {what} {path} relative to the folder that run was started in "
                         f"(not recorded), and {Path(path).resolve()} does not exist; run this from that folder, or write "
                         f"the absolute path into {CONFIG}")

    def corpus(self) -> str:
        """The run's corpus spec (a relative ``dir:``/``jsonl:``/``parquet:`` path of an older run
        checked by :meth:`recorded_path`)."""
        source = self.config["grid"]["corpus"]
        folder = source_path(source)
        if folder is not None:
            self.recorded_path(str(folder), f"corpus {source} at")
        return source

    def needle_set(self) -> NeedleSet:
        """The needle set the run's haystacks were built from (its groups, variants and distractors)."""
        config, grid = self.config, self.config["grid"]
        distractors = config.get("distractors_file")
        return grid_needle_set(self.recorded_path(config["needles"], "needle file"), config.get("groups"), grid.get("variants", ()),
                               grid.get(N_DISTRACTORS, (0,)), distractors and self.recorded_path(distractors, "distractors file"))

    def timings(self) -> pd.DataFrame | None:
        """What each reading read and the model's time on it (None for a run from before it)."""
        return read_timings(self.file(TIMINGS)) if self.has(TIMINGS) else None

    def decision(self) -> pd.DataFrame | None:
        """The run's decision table: its ``decision.csv``, or for a run from before it, made from its
        rank table (None without one) with its rule, resamples, seed, timings and prices."""
        if self.has(DECISION):
            return read_decision(self.file(DECISION), self.config["grid"].get("lengths"))
        retrieval = self.retrieval()
        if retrieval is None or self.rule().recall_metric not in retrieval.columns:
            return None
        return decision_table(retrieval, self.rule(), self.config.get("n_bootstrap", DEFAULT_N_BOOTSTRAP),
                              self.config["grid"].get("seed", DEFAULT_SEED), self.timings(), self.config.get("prices"),
                              self.similarities(), self.config.get("frame_tokens"))

    def breaks(self) -> pd.DataFrame:
        """The run's break points: its ``breaks.csv``; for a run from before it, or whose break points
        an earlier estimator read (its config.json records no ``break_estimator``, or another than
        :data:`~embedeval.breaks.ESTIMATOR`), read again from its metrics and rank table with its
        rule, resamples and seed, each model's window and each one-window strategy's window as the
        run recorded them (``model_windows`` in config.json, else the ``window`` of the file's
        rows), so every place that says the answer says the one this version gives. The file is
        left as it is (and its break points are not checked against this estimator's answer)."""
        current = self.config.get("break_estimator") == ESTIMATOR
        written = (read_breaks(self.file(BREAKS), self.config["grid"].get("lengths"), self.rule(), answers=current)
                   if self.has(BREAKS) else None)
        retrieval = None if written is not None and current else self.retrieval()
        if written is not None and (current or retrieval is None):
            return written
        windows = {} if written is None else {(r.embedder, r.strategy): int(r.window) for r in written.itertuples() if not pd.isna(r.window)}
        model_windows = self.config.get("model_windows")
        if model_windows is None:  # an older run: the window the model's own reading (rank 0: truncate) recorded
            model_windows = {embedder: window for (embedder, strategy), window in windows.items() if model_reading_rank(strategy) == 0}
        return break_points(self.metrics(), retrieval, self.rule(), self.config.get("n_bootstrap", DEFAULT_N_BOOTSTRAP),
                            self.config["grid"].get("seed", DEFAULT_SEED), windows, model_windows)


def read_breaks(path: str | Path, lengths: Sequence[int] | None = None, rule: BreakRule | None = None,
                answers: bool = True) -> pd.DataFrame:
    """A ``breaks.csv`` written by a run (one :class:`~embedeval.errors.InputError` line when it is
    missing, unreadable or lacks a column, holds a series twice, or a row's ``break_point`` is not
    the longest length :data:`~embedeval.defaults.BREAK_SUPPORT` of its ``break_shares`` reach, the
    one answer every place says; ``lengths``: the run's grid, which the shares' lengths must be of;
    ``rule``: the run's break rule, under which a relative rule's break point needs its status ``ok``;
    ``answers``: False for a file an earlier estimator wrote, whose break points are not this one's
    answers, so neither of the last two is asked of it)."""
    frame = read_run_table(Path(path), [c for c in BREAK_COLUMNS if c not in ADDED_BREAK_COLUMNS], table=BREAKS)
    frame = frame.reindex(columns=BREAK_COLUMNS)  # a file from before the added columns: they read as missing
    twice = frame.duplicated(SERIES_KEYS) & frame[SERIES_KEYS].notna().all(axis=1)  # a series named twice
    if twice.any():
        row = int(twice.to_numpy().nonzero()[0][0])
        raise InputError(f"{path}, line {row + 2}: the same series as an earlier line (the file was edited or "
                         "damaged; run again to rewrite it)")
    if answers and rule is not None and rule.rule == "relative":  # no headline where the base was not read: the box says why
        unread = frame["break_point"].notna() & frame["relative_status"].notna() & (frame["relative_status"] != OK)
        refuse_first(frame["relative_status"], unread, path, "relative_status",
                     "the status of a relative break point (ok), beside the break_point of its line")
    for row, (value, point) in enumerate(zip(frame["break_shares"], frame["break_point"], strict=True), start=2):
        try:
            shares = parse_shares(value if isinstance(value, str) or pd.isna(value) else f"{value}")
        except ValueError as exc:
            raise InputError(f"{path}, line {row}, column break_shares: {exc}") from None
        off_grid = sorted(length for length in shares if length is not None and lengths is not None and length not in lengths)
        if off_grid:
            raise InputError(f"{path}, line {row}, column break_shares: {off_grid[0]} tokens is not a length of the run "
                             "(the file was edited or damaged; run again to rewrite it)")
        expected = _supported_length(shares) if answers else None
        if expected is not None and not expected[0] <= (0 if pd.isna(point) else int(point)) <= expected[1]:
            said = "an empty cell" if pd.isna(point) else str(int(point))
            answer = "none" if expected[1] == 0 else f"{expected[1]}"
            raise InputError(f"{path}, line {row}, column break_point: {said} is not the longest length "
                             f"{BREAK_SUPPORT:.0%} of the resamples in break_shares reach ({answer}) (the file was edited or "
                             "damaged; run again to rewrite it)")
    # "128" reads back as a number, and as 128.0 beside an empty cell
    lengths = [value if isinstance(value, str) else "" if pd.isna(value) else str(int(value)) for value in frame["base_lengths"]]
    return frame.assign(base_lengths=lengths, relative_status=frame["relative_status"].astype(str),
                        at_chance=frame["at_chance"].astype("boolean"))


def _supported_length(shares: dict) -> tuple[int, int] | None:
    """The headline break point ``shares`` (:func:`~embedeval.breaks.parse_shares`) give, 0 for
    none (:func:`~embedeval.metrics.break_estimators.supported_break`), as the lowest and highest it can be with
    each share written to 3 decimals; None without shares."""
    if not shares:
        return None
    slack = 0.0005 * len(shares) + 1e-9
    lengths = sorted({0, *(length for length in shares if length is not None)})
    return (max(length for length in lengths if share_reaching(shares, length) >= BREAK_SUPPORT + slack)
            if share_reaching(shares, 0) >= BREAK_SUPPORT + slack else 0,
            max(length for length in lengths if share_reaching(shares, length) >= BREAK_SUPPORT - slack))


def _same_table(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Whether two timings tables hold the same rows (numbers to 1e-9: a CSV read back)."""
    try:
        pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_dtype=False, rtol=1e-9)
    except AssertionError:
        return False
    return True


def read_timings(path: str | Path) -> pd.DataFrame:
    """A ``timings.csv`` written by a run (one :class:`~embedeval.errors.InputError` line when it is
    missing, unreadable or lacks a column)."""
    frame = read_run_table(path, TIMING_COLUMNS, table=TIMINGS)[TIMING_COLUMNS]
    return frame.assign(model_seconds=frame["model_seconds"].astype(float), model_tokens=frame["model_tokens"].astype("Int64"))


def read_decision(path: str | Path, lengths: Sequence[int] | None = None) -> pd.DataFrame:
    """A ``decision.csv`` written by a run (one :class:`~embedeval.errors.InputError` line when it is
    missing, unreadable or lacks a column, or a row breaks its schema, :data:`TABLE_SCHEMAS`: a
    value out of its range, a reading twice at a length, a length naming no best reading or several;
    without rows where the run had nothing to decide: recall@k cannot be corrected for chance in
    pools of k or fewer candidates). ``lengths``: the run's grid, which its lengths must be of."""
    frame = read_run_table(path, [c for c in DECISION_COLUMNS if c not in ADDED_DECISION_COLUMNS], empty=True, table=DECISION)
    frame = frame.reindex(columns=DECISION_COLUMNS)  # a file from before the added columns: they read as missing
    if lengths is not None:
        refuse_first(frame["length"], ~frame["length"].isin(list(lengths)), path, "length", "a length of the run")
    same_as = [strategy if pd.isna(same) else str(same) for strategy, same in zip(frame["strategy"].astype(str), frame["same_as"], strict=True)]
    return frame.assign(same_as=same_as, share_read=frame["share_read"].astype(float), needle_visible=frame["needle_visible"].astype(float),
                        embedder=frame["embedder"].astype(str), strategy=frame["strategy"].astype(str),
                        tied_with_best=frame["tied_with_best"].astype(bool), best=frame["best"].astype(bool))


class RunWriter:
    """Writes a run directory in :mod:`this module's <embedeval.run>` order; the caller holds the
    directory (:func:`~embedeval.run_folder.run_directory`)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def unfinish(self) -> None:
        """From here until :meth:`finish`, the directory reads as unfinished."""
        (self.path / CONFIG).unlink(missing_ok=True)

    def reusable_haystacks(self, settings: dict) -> pd.DataFrame | None:
        """The haystacks written with exactly these ``settings``, if they read back, else None."""
        try:
            if load_file(self.path / HAYSTACK_SETTINGS) == settings:
                return pd.read_parquet(self.path / HAYSTACKS)
        except Exception:  # missing, or damaged by hand: build them again
            return None
        return None

    def write_haystacks(self, frame: pd.DataFrame, settings: dict) -> None:
        self.unfinish()
        write_table(frame, self.path / HAYSTACKS)
        write_text_atomic(self.path / HAYSTACK_SETTINGS, json_text(settings))

    def write_scored(self, similarities: pd.DataFrame, retrieval: pd.DataFrame, timings: pd.DataFrame) -> pd.DataFrame:
        """Write the similarity and rank tables and the timings; returns the timings as written: a
        reading whose inputs all came from the cache keeps the speed the folder's earlier
        ``timings.csv`` measured (:func:`~embedeval.decision.with_earlier_speeds`), and a table equal
        to that file leaves it as it is."""
        self.unfinish()
        write_table(similarities, self.path / SIMILARITIES)
        write_table(retrieval, self.path / RETRIEVAL)
        try:
            earlier = read_timings(self.path / TIMINGS) if (self.path / TIMINGS).is_file() else None
        except InputError:  # damaged by hand: measured again
            earlier = None
        timings = with_earlier_speeds(timings, earlier)
        if earlier is not None and _same_table(timings, earlier):
            return earlier
        write_table(timings, self.path / TIMINGS)
        return timings

    def read_derived(self) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """The metrics, break points and decision table written before (kept when what they came
        from is unchanged)."""
        return read_run_table(self.path / METRICS), read_breaks(self.path / BREAKS), read_decision(self.path / DECISION)

    def write_derived(self, metrics: pd.DataFrame, breaks: pd.DataFrame, decision: pd.DataFrame) -> list[str]:
        """Write the metrics, break points and decision table; returns their file names."""
        write_table(metrics, self.path / METRICS)
        write_table(breaks, self.path / BREAKS)
        write_table(decision, self.path / DECISION)
        return [METRICS, BREAKS, DECISION]

    def finish(self, settings: dict) -> None:
        """Last: config.json, so it always describes the tables beside it."""
        write_text_atomic(self.path / CONFIG, json_text(settings))

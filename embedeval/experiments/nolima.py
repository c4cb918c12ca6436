"""The NoLiMa sweep for embedding models: haystacks -> embeddings -> similarities -> metrics.

This module only orchestrates: haystacks come from :mod:`embedeval.haystacks`, the similarity
table from :mod:`embedeval.similarity`, metrics from :mod:`embedeval.aggregate`, the report from
:mod:`embedeval.report`.

``run_nolima(config)`` writes ``haystacks.parquet``, ``similarities.parquet``, ``retrieval.parquet``, ``metrics.csv``,
``breaks.csv``, ``report.md``, ``report.html``, ``figures/`` and, last, ``config.json`` into ``config.out`` (each file atomically),
holding the folder so that no second run writes into it at the same time.
Every embedding goes through the persistent cache, so an interrupted run resumes where it
stopped and a rerun of the same config embeds nothing and yields the same tables. When those
tables and the settings are the ones ``metrics.csv``, the reports and ``figures/`` were made
from (:mod:`embedeval.derived`, recorded in ``derived.json``), these are kept as they are.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pandas as pd

from embedeval.aggregate import nolima_metrics
from embedeval.corpus import load_corpus
from embedeval.defaults import (
    DEFAULT_BREAK_K, DEFAULT_BREAK_METRIC, DEFAULT_BREAK_RULE, DEFAULT_BREAK_THRESHOLD, DEFAULT_CHUNK_TOKENS, DEFAULT_COMMIT_EVERY, DEFAULT_CORPUS, DEFAULT_DEPTHS,
    DEFAULT_EMBEDDER, DEFAULT_EXECUTOR, DEFAULT_FILLER, DEFAULT_LENGTHS, DEFAULT_MIN_BOOKS, DEFAULT_N_BOOTSTRAP, DEFAULT_N_DISTRACTORS, DEFAULT_NEEDLES, DEFAULT_NEEDLES_PER_HAYSTACK,
    DEFAULT_NEGATIVES,
    DEFAULT_NORMALIZE_BY, DEFAULT_SEED, DEFAULT_STRATEGIES, DEFAULT_VARIANTS, DEFAULT_WINDOW_OVERLAP, DEFAULT_WORKERS,
    DEFAULT_LATE_CHUNKING_OVERLAP,
)
from embedeval.executors import Executor
from embedeval.embedders.registry import select_embedders
from embedeval.errors import ConfigError
from embedeval.haystacks import HAYSTACK_FORMAT, build_haystacks, check_build_args
from embedeval.derived import file_sha256, forget_outputs, fresh_outputs, inputs_digest, record_outputs
from embedeval.io import run_directory
from embedeval.breaks import BreakRule, break_points
from embedeval.needles import NeedleSet, check_normalize_by, grid_needle_set
from embedeval.report import REPORT_FILES, pool_size, write_report
from embedeval.run import SCORED_TABLES, RunWriter
from embedeval.expansion import query_forms
from embedeval.similarity import retrieval_rows, score_haystacks, similarity_rows
from embedeval.strategies import EmbeddingScorer, check_strategy_support, load_scorers, parse_strategies
from embedeval.text import SENTENCE_SPLITTER
from embedeval.tokens import DEFAULT_REFERENCE, load_token_counter

#: Settings that determine the haystacks; a run directory's haystacks are reused when they match
#: (together with the needle file's hash and the sentence splitter, see ``haystack_settings``).
HAYSTACK_KEYS = ("needles", "groups", "corpus", "min_books", "filler", "lengths", "depths", "variants", "seed", "negatives",
                 "n_distractors", "needles_per_haystack", "distractors_file", "tokenizer")
#: Settings that change where or how a run works but nothing it writes (the tables are the same
#: for every executor): a rerun differing only in them reuses the metrics and the report.
NOT_IN_OUTPUTS = ("out", "executor", "workers", "ray_address")
VERSIONED_PACKAGES = ("embedeval", "numpy", "pandas", "scipy", "scikit-learn", "torch",
                      "sentence-transformers", "transformers", "tokenizers")


@dataclass
class NolimaConfig:
    """Everything a sweep depends on (written to ``config.json``)."""

    embedders: list[str] = field(default_factory=lambda: [DEFAULT_EMBEDDER])
    needles: str = str(DEFAULT_NEEDLES)
    groups: list[str] | None = None  # group ids to run (None: every group of the needle set)
    corpus: str = DEFAULT_CORPUS
    min_books: int = DEFAULT_MIN_BOOKS  # fewest books the corpus must hold
    filler: str = DEFAULT_FILLER  # "random" snippets or "sequential" passages in book order
    lengths: list[int] = field(default_factory=lambda: list(DEFAULT_LENGTHS))
    depths: int = DEFAULT_DEPTHS
    variants: list[str] = field(default_factory=lambda: list(DEFAULT_VARIANTS))
    seed: int = DEFAULT_SEED
    negatives: int = DEFAULT_NEGATIVES  # needle-free haystacks per length in the retrieval pool
    n_distractors: list[int] = field(default_factory=lambda: list(DEFAULT_N_DISTRACTORS))  # K values: distractors per haystack
    needles_per_haystack: list[int] = field(default_factory=lambda: list(DEFAULT_NEEDLES_PER_HAYSTACK))  # K values: needles per haystack
    distractors_file: str | None = None  # distractors by group, replacing the needle file's (load_distractors)
    out: str = "runs/nolima"
    tokenizer: str = DEFAULT_REFERENCE
    break_rule: str = DEFAULT_BREAK_RULE  # the headline break point: "relative" (recall@k vs the shortest length) or "absolute"
    break_k: int = DEFAULT_BREAK_K  # relative rule: recall@k
    break_metric: str = DEFAULT_BREAK_METRIC  # absolute rule: the metric ...
    break_threshold: float = DEFAULT_BREAK_THRESHOLD  # ... and the value it must keep
    normalize_by: str = DEFAULT_NORMALIZE_BY  # "standard" (the study's divisor) or "own"
    strategies: list[str] = field(default_factory=lambda: list(DEFAULT_STRATEGIES))  # how long haystacks are read
    chunk_tokens: list[int] = field(default_factory=lambda: list(DEFAULT_CHUNK_TOKENS))  # chunks-max and late-chunking sizes
    window_overlap: int = DEFAULT_WINDOW_OVERLAP  # windows-mean: tokens shared by neighbouring windows
    late_overlap: int = DEFAULT_LATE_CHUNKING_OVERLAP  # late-chunking: tokens shared by neighbouring macro windows
    dedupe: bool = True  # embed each distinct token-id sequence once (False: every text whole; same tables)
    executor: str = DEFAULT_EXECUTOR  # where cache misses are embedded: "local" or "ray" (same tables)
    workers: int = DEFAULT_WORKERS  # Ray actors
    ray_address: str | None = None  # "auto", "ray://HOST:PORT"; None: EMBEDEVAL_RAY_ADDRESS, else a local Ray
    n_bootstrap: int = DEFAULT_N_BOOTSTRAP
    skip_unavailable: bool = False
    expansions: list[str] = field(default_factory=list)  # expansion files -> query forms expanded-N
    skipped: list = field(default_factory=list)  # filled by validate(): [(spec, why)]

    def validate(self) -> NeedleSet:
        """Check everything that can be checked without work; returns the loaded needle set."""
        check_build_args(self.lengths, self.depths, self.variants, self.negatives, self.min_books, self.filler, self.n_distractors,
                         self.needles_per_haystack)
        if not self.variants:
            raise ConfigError("no variants given")
        check_normalize_by(self.normalize_by)
        self.rule().check()
        if self.n_bootstrap < 10:
            raise ConfigError(f"n_bootstrap must be at least 10 resamples, not {self.n_bootstrap}")
        strategies = self.strategy_list()
        self.executor_settings().check()
        if not self.embedders:
            raise ConfigError("no embedders given")
        self.embedders, self.skipped = select_embedders(self.embedders, self.skip_unavailable, lexical=True)
        check_strategy_support(self.embedders, strategies, self.executor)
        return grid_needle_set(self.needles, self.groups, self.variants, self.n_distractors, self.distractors_file)

    def strategy_list(self) -> list:
        """The strategies the run reads haystacks with (:func:`~embedeval.strategies.parse_strategies`)."""
        return parse_strategies(self.strategies, self.chunk_tokens, self.window_overlap, self.late_overlap)

    def rule(self) -> BreakRule:
        """How the report reads the break point."""
        return BreakRule(self.break_rule, self.break_k, self.break_metric, self.break_threshold)

    def executor_settings(self) -> Executor:
        """Where the run's cache misses are embedded."""
        return Executor(self.executor, self.workers, self.ray_address)

    def haystack_settings(self) -> dict:
        """The settings the haystacks depend on, with a hash of the needle file's content, the
        sentence splitter and the build format (haystacks cut by another splitter or built by
        another format are rebuilt, not reused)."""
        data = asdict(self)
        settings = {k: data[k] for k in HAYSTACK_KEYS}
        settings["needles_sha256"] = file_sha256(Path(self.needles))
        if self.distractors_file:
            settings["distractors_sha256"] = file_sha256(Path(self.distractors_file))
        settings["splitter"] = SENTENCE_SPLITTER
        settings["format"] = HAYSTACK_FORMAT
        return settings


@dataclass
class NolimaResult:
    """The tables of a sweep, as written to ``out``."""

    config: NolimaConfig
    haystacks: pd.DataFrame
    similarities: pd.DataFrame
    retrieval: pd.DataFrame
    metrics: pd.DataFrame
    breaks: pd.DataFrame  # the break points per series (embedeval.breaks), as in breaks.csv
    out: Path
    newly_embedded: dict[str, int]


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            pass
    return versions


def load_or_build_haystacks(config: NolimaConfig, needle_set: NeedleSet, progress: bool, tokenizer=None,
                            cache_dir=None) -> pd.DataFrame:
    """Reuse the run directory's haystacks when they were built with the same settings
    (:meth:`NolimaConfig.haystack_settings`), else build and write them; books are split once into
    ``cache_dir``."""
    writer = RunWriter(config.out)
    frame = writer.reusable_haystacks(config.haystack_settings())
    if frame is not None:
        return frame
    frame = build_haystacks(
        needle_set, load_corpus(config.corpus), config.lengths, config.depths, config.variants,
        tokenizer=tokenizer or load_token_counter(config.tokenizer), seed=config.seed, progress=progress, negatives=config.negatives,
        min_books=config.min_books, filler=config.filler, n_distractors=config.n_distractors, cache_dir=cache_dir,
        needles_per_haystack=config.needles_per_haystack,
    )
    writer.write_haystacks(frame, config.haystack_settings())
    return frame


def run_nolima(config: NolimaConfig | None = None, progress: bool = True, cache_dir=None, commit_every: int = DEFAULT_COMMIT_EVERY) -> NolimaResult:
    """Run the sweep end to end and write the run directory; see the module docstring."""
    config = config or NolimaConfig()
    needle_set = config.validate()
    forms = query_forms(needle_set, config.expansions)
    settings = {**asdict(config), "versions": package_versions()}
    strategies = config.strategy_list()
    with run_directory(config.out) as out:
        reference = load_token_counter(config.tokenizer)
        scorers = [scorer for spec in config.embedders
                   for scorer in load_scorers(spec, strategies, reference, cache_dir=cache_dir, progress=progress,
                                              commit_every=commit_every, dedupe=config.dedupe,
                                              executor=config.executor_settings())]
        haystacks = load_or_build_haystacks(config, needle_set, progress, reference, cache_dir)
        scored = [score_haystacks(scorer, haystacks, forms) for scorer in scorers]
        similarities = pd.concat([similarity_rows(s, needle_set, config.normalize_by) for s in scored], ignore_index=True)
        retrieval = pd.concat([retrieval_rows(s, needle_set) for s in scored], ignore_index=True)
        writer = RunWriter(out)
        writer.write_scored(similarities, retrieval)
        derived_from = {k: v for k, v in settings.items() if k not in NOT_IN_OUTPUTS}
        digest = inputs_digest(out, SCORED_TABLES, derived_from)
        if fresh_outputs(out, digest):  # the same tables and settings made them: the bootstrap and figures stand
            metrics, breaks = writer.read_derived()
        else:
            forget_outputs(out)
            metrics = nolima_metrics(similarities, n_resamples=config.n_bootstrap, seed=config.seed, retrieval=retrieval)
            breaks = break_points(metrics, retrieval, config.rule(), config.n_bootstrap, config.seed)
            derived = writer.write_derived(metrics, breaks)
            write_report(out, metrics, similarities, breaks, config.rule(), config=settings,
                         candidates=pool_size(retrieval))
            figures = [str(p.relative_to(out)) for p in sorted((out / "figures").glob("*.png"))]
            record_outputs(out, digest, [*derived, *REPORT_FILES, *figures])
        writer.finish(settings)  # last, so config.json always describes the tables beside it
    embedded = {s.name: s.embedder.stats.embedded for s in scorers if isinstance(s, EmbeddingScorer)}
    return NolimaResult(config, haystacks, similarities, retrieval, metrics, breaks, out, embedded)

"""The NoLiMa sweep for embedding models: haystacks -> embeddings -> similarities -> metrics.

This module only orchestrates: haystacks come from :mod:`embedeval.haystacks`, the similarity
table from :mod:`embedeval.similarity`, metrics from :mod:`embedeval.aggregate`, the report from
:mod:`embedeval.report`.

``run_nolima(config)`` writes ``haystacks.parquet``, ``similarities.parquet``, ``retrieval.parquet``, ``timings.csv``,
``metrics.csv``, ``breaks.csv``, ``decision.csv``, ``report.md``, ``report.html``, ``figures/`` and, last, ``config.json``
into ``config.out`` (each file atomically),
holding the folder so that no second run writes into it at the same time.
Every embedding goes through the persistent cache, so an interrupted run resumes where it
stopped and a rerun of the same config embeds nothing and yields the same tables. When those
tables and the settings are the ones ``metrics.csv``, the reports and ``figures/`` were made
from (:mod:`embedeval.derived`, recorded in ``derived.json``), these are kept as they are.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from embedeval.aggregate import nolima_metrics
from embedeval.defaults import (
    DEFAULT_BREAK_K, DEFAULT_BREAK_METRIC, DEFAULT_BREAK_RULE, DEFAULT_BREAK_THRESHOLD, DEFAULT_CHUNK_TOKENS, DEFAULT_COMMIT_EVERY,
    DEFAULT_EMBEDDER, DEFAULT_EXECUTOR, DEFAULT_LATE_CHUNKING_OVERLAP, DEFAULT_N_BOOTSTRAP, DEFAULT_NEEDLES, DEFAULT_NORMALIZE_BY, DEFAULT_POOL,
    DEFAULT_STRATEGIES, DEFAULT_WINDOW_OVERLAP, DEFAULT_WORKERS,
)
from embedeval.embedders.base import Reading
from embedeval.embedders.executors import Executor
from embedeval.embedders.registry import LEXICAL_SPECS, embedder_name, select_embedders
from embedeval.errors import ConfigError
from embedeval.haystacks import HAYSTACK_FORMAT, HaystackGrid, build_haystacks
from embedeval.derived import forget_outputs, fresh_outputs, inputs_digest, record_outputs
from embedeval.corpus import absolute_source, load_corpus, source_path
from embedeval.decision import decision_table, length_summary, timing_table
from embedeval.io import absolute_path, check_subfolder, file_sha256, run_directory
from embedeval.breaks import BreakRule, break_points
from embedeval.needles import NeedleSet, check_normalize_by, grid_needle_set
from embedeval.plan import EmbedderPlan, check_prices_used, plan_of
from embedeval.report import pool_size, recall_chance_table, write_report
from embedeval.report.write import FIGURES
from embedeval.sentences import book_token_counts
from embedeval.progress import step
from embedeval.run import CONFIG, SCORED_TABLES, RunWriter, is_run_directory
from embedeval.versions import package_versions
from embedeval.expansion import query_forms
from embedeval.similarity import HaystackScores, check_pool, retrieval_rows, score_haystacks, similarity_rows
from embedeval.strategies import EmbeddingScorer, check_strategy_support, load_scorers, parse_strategies, stretch_shortfalls
from embedeval.text import SENTENCE_SPLITTER
from embedeval.embedders.tokens import DEFAULT_REFERENCE, load_token_counter

#: Settings beside the grid that determine the haystacks; a run directory's haystacks are reused
#: when they and the grid match (with the needle file's hash and the sentence splitter, see
#: ``haystack_settings``).
HAYSTACK_KEYS = ("needles", "groups", "distractors_file", "tokenizer")
#: Settings that change where or how a run works but nothing it writes (the tables are the same
#: for every executor): a rerun differing only in them reuses the metrics and the report.
NOT_IN_OUTPUTS = ("out", "executor", "workers", "ray_address")
#: Packages whose versions a run records in config.json.
VERSIONED_PACKAGES = ("embedeval", "numpy", "pandas", "scipy", "scikit-learn", "torch",
                      "sentence-transformers", "transformers", "tokenizers")


@dataclass(frozen=True)
class NolimaConfig:
    """Everything a sweep depends on (written to ``config.json``, the grid nested under
    ``grid``). Frozen: a copy with changes is ``dataclasses.replace(config, ...)``."""

    embedders: tuple[str, ...] = (DEFAULT_EMBEDDER,)
    needles: str = str(DEFAULT_NEEDLES)
    groups: tuple[str, ...] | None = None  # group ids to run (None: every group of the needle set)
    grid: HaystackGrid = field(default_factory=HaystackGrid)  # the haystack grid, validated when made
    distractors_file: str | None = None  # distractors by group, replacing the needle file's (load_distractors)
    out: str = "runs/nolima"
    tokenizer: str = DEFAULT_REFERENCE
    break_rule: str = DEFAULT_BREAK_RULE  # the headline break point: "relative" (recall@k vs the shortest lengths) or "absolute"
    break_k: int = DEFAULT_BREAK_K  # relative rule: recall@k
    break_metric: str = DEFAULT_BREAK_METRIC  # absolute rule: the metric ...
    break_threshold: float = DEFAULT_BREAK_THRESHOLD  # ... and the value it must keep
    normalize_by: str = DEFAULT_NORMALIZE_BY  # "standard" (the study's divisor) or "own"
    pool: str = DEFAULT_POOL  # what a needle haystack is ranked among: "needle-free" or "all" (similarity.retrieval_rows)
    strategies: tuple[str, ...] = DEFAULT_STRATEGIES  # how long haystacks are read
    chunk_tokens: tuple[int, ...] = DEFAULT_CHUNK_TOKENS  # chunks-max and late-chunking sizes
    window_overlap: int = DEFAULT_WINDOW_OVERLAP  # windows-mean: tokens shared by neighbouring windows
    late_overlap: int = DEFAULT_LATE_CHUNKING_OVERLAP  # late-chunking: tokens a window repeats from the one before
    dedupe: bool = True  # embed each distinct token-id sequence once (False: every text whole; same tables)
    executor: str = DEFAULT_EXECUTOR  # where cache misses are embedded: "local" or "ray" (same tables)
    workers: int = DEFAULT_WORKERS  # Ray actors
    ray_address: str | None = None  # "auto", "ray://HOST:PORT"; None: EMBEDEVAL_RAY_ADDRESS, else a local Ray
    n_bootstrap: int = DEFAULT_N_BOOTSTRAP
    skip_unavailable: bool = False
    expansions: tuple[str, ...] = ()  # expansion files -> query forms expanded-N
    #: USD per million tokens sent, per embedder name (``--price``): the decision table's
    #: ``usd_per_million_tokens``; none by default (prices change: only what the user gives)
    prices: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("embedders", "groups", "strategies", "chunk_tokens", "expansions"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, (value,) if isinstance(value, str) else tuple(value))

    def validate(self, keys: bool = True) -> NeedleSet:
        """Check everything that can be checked without work (the grid checked itself when it was
        made); returns the loaded needle set. ``keys``: whether API keys must be set
        (:meth:`usable_embedders`)."""
        check_normalize_by(self.normalize_by)
        check_pool(self.pool)
        self.rule().check()
        if self.n_bootstrap < 10:
            raise ConfigError(f"`n_bootstrap` must be at least 10 resamples, not {self.n_bootstrap}", "n_bootstrap")
        strategies = self.strategy_list()
        self.executor_settings().check()
        embedders, _ = self.usable_embedders(keys)
        self.check_prices(embedders)
        check_strategy_support(embedders, strategies, self.executor)
        return grid_needle_set(self.needles, self.groups, self.grid.variants, self.grid.n_distractors, self.distractors_file)

    def usable_embedders(self, keys: bool = True) -> tuple[list[str], list[tuple[str, str]]]:
        """(the embedders that can run here, [(skipped spec, why)]): presets expanded, and an
        unusable one refused unless ``skip_unavailable`` (:func:`~embedeval.embedders.registry.select_embedders`;
        ``keys=False``, for a plan alone: an API model whose key is not set counts as usable)."""
        if not self.embedders:
            raise ConfigError("no `embedders` given", "embedders")
        return select_embedders(list(self.embedders), self.skip_unavailable, lexical=True, keys=keys)

    def check_prices(self, embedders: list[str]) -> None:
        """One :class:`~embedeval.errors.ConfigError` for a price that is not a number of USD >= 0, or
        one for an embedder the run does not have (:func:`~embedeval.plan.check_prices_used`)."""
        for name, price in self.prices.items():
            if isinstance(price, bool) or not isinstance(price, (int, float)) or not 0 <= price < math.inf:
                raise ConfigError(f"`prices` takes USD per million tokens >= 0, not {price!r} for {name}", "prices")
        check_prices_used([embedder_name(spec) for spec in embedders if spec not in LEXICAL_SPECS], self.prices)

    def strategy_list(self) -> list:
        """The strategies the run reads haystacks with (:func:`~embedeval.strategies.parse_strategies`)."""
        return parse_strategies(list(self.strategies), list(self.chunk_tokens), self.window_overlap, self.late_overlap)

    def rule(self) -> BreakRule:
        """How the report reads the break point."""
        return BreakRule(self.break_rule, self.break_k, self.break_metric, self.break_threshold)

    def executor_settings(self) -> Executor:
        """Where the run's cache misses are embedded."""
        return Executor(self.executor, self.workers, self.ray_address)

    def recorded(self) -> dict:
        """The settings as config.json records them (:func:`~dataclasses.asdict`, the grid nested),
        with the corpus folder or file and the needle, distractors and expansion files as absolute
        paths: ``export`` and ``report`` may read the run from another folder."""
        settings = asdict(self)
        settings["grid"]["corpus"] = absolute_source(self.grid.corpus)
        settings["needles"] = absolute_path(self.needles)
        if self.distractors_file is not None:
            settings["distractors_file"] = absolute_path(self.distractors_file)
        settings["expansions"] = tuple(absolute_path(path) for path in self.expansions)
        return settings

    def haystack_settings(self) -> dict:
        """The settings the haystacks depend on (the grid's and :data:`HAYSTACK_KEYS`), with a
        hash of the needle file's content, the sentence splitter and the build format (haystacks
        cut by another splitter or built by another format are rebuilt, not reused)."""
        # as JSON gives them back from haystacks.json (lists, not tuples)
        settings = json.loads(json.dumps({**self.grid.haystack_settings(), **{k: getattr(self, k) for k in HAYSTACK_KEYS}}))
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
    embedders: list[str]  # the embedders that ran (presets expanded)
    skipped: list[tuple[str, str]]  # [(spec, why)] left out by skip_unavailable
    haystacks: pd.DataFrame
    similarities: pd.DataFrame
    retrieval: pd.DataFrame
    metrics: pd.DataFrame
    breaks: pd.DataFrame  # the break points per series (embedeval.breaks), as in breaks.csv
    out: Path
    newly_embedded: dict[str, int]  # per embedder, the texts this run sent to the model
    #: per embedder, the distinct texts (vectors) the run needs, found in the cache or newly
    #: embedded: the plan's ``texts`` (:attr:`~embedeval.embedders.cache.CachedEmbedder.distinct_texts`)
    texts: dict[str, int] = field(default_factory=dict)
    #: which reading to use at every length (embedeval.decision), as in decision.csv
    decision: pd.DataFrame | None = None
    #: what each reading read and the model's time on it, as in timings.csv
    timings: pd.DataFrame | None = None


def load_or_build_haystacks(config: NolimaConfig, needle_set: NeedleSet, progress: bool, tokenizer=None,
                            cache_dir=None) -> pd.DataFrame:
    """Reuse the run directory's haystacks when they were built with the same settings
    (:meth:`NolimaConfig.haystack_settings`), else build and write them; books are split once into
    ``cache_dir``."""
    writer = RunWriter(config.out)
    frame = writer.reusable_haystacks(config.haystack_settings())
    if frame is not None:
        return frame
    frame = build_haystacks(needle_set, config.grid, tokenizer=tokenizer or load_token_counter(config.tokenizer),
                            progress=progress, cache_dir=cache_dir)
    writer.write_haystacks(frame, config.haystack_settings())
    return frame


def plan_nolima(config: NolimaConfig, cache_dir=None, prices: dict[str, float] | None = None, calibrate: bool = True,
                progress: bool = False, commit_every: int = DEFAULT_COMMIT_EVERY, keys: bool = False) -> list[EmbedderPlan]:
    """What :func:`run_nolima` would embed, send, cost and take (:mod:`embedeval.plan`): the grid
    built (or the run directory's reused; nothing written), every scorer's steps run through
    models that record instead of embedding, with the run's ``commit_every`` (the chunks misses are
    sent in). ``calibrate``: time local models on a sample. A price for an embedder the run does not
    have is refused first (:func:`~embedeval.plan.check_prices_used`). A plan sends nothing, so it
    needs no API key (each plan names the key the run will need); ``keys``: refuse a model whose
    key is not set, as the run would, when the run follows the plan (a cost ceiling)."""
    needle_set = config.validate(keys)
    embedders, _ = config.usable_embedders(keys)
    check_prices_used([embedder_name(spec) for spec in embedders if spec not in LEXICAL_SPECS], prices or {})
    forms = query_forms(needle_set, list(config.expansions))
    strategies = config.strategy_list()
    reference = load_token_counter(config.tokenizer)
    scorers = [scorer for spec in embedders
               for scorer in load_scorers(spec, strategies, reference, cache_dir=cache_dir, dedupe=config.dedupe, plan=True,
                                          commit_every=commit_every)]
    _warn_of_short_reads(scorers, config)
    haystacks = RunWriter(config.out).reusable_haystacks(config.haystack_settings())
    if haystacks is None:
        haystacks = build_haystacks(needle_set, config.grid, tokenizer=reference, progress=progress, cache_dir=cache_dir)
    models = {}
    for scorer in scorers:
        with step(f"{scorer.name} [{scorer.strategy}]: what it would embed, recorded (nothing sent)", progress):
            similarity_rows(score_haystacks(scorer, haystacks, forms), needle_set, config.normalize_by)  # the needles embed here
        if isinstance(scorer, EmbeddingScorer):
            models[id(scorer.embedder)] = scorer.embedder
    return [plan_of(model, prices, calibrate, config.grid.seed, progress) for model in models.values()]


def _warn_of_short_reads(scorers: list, config: NolimaConfig) -> None:
    """A warning line on stderr, before any work, per context extension that cannot read the
    longest haystacks whole (:func:`~embedeval.strategies.stretch_shortfalls`)."""
    for line in stretch_shortfalls(scorers, max(config.grid.lengths)):
        print(f"warning: {line}", file=sys.stderr)


def readings(scored: list[HaystackScores], haystacks: pd.DataFrame) -> list[dict]:
    """What each scorer read of the haystacks, and the model's time on what it embedded
    (:class:`~embedeval.embedders.base.Reading`), as :func:`~embedeval.decision.timing_table` takes
    them; a haystack's tokens are its ``n_tokens`` (the reference tokenizer's, as its length)."""
    lengths, tokens = haystacks["length"].to_numpy(), haystacks["n_tokens"].to_numpy()
    found = []
    for scores in scored:
        scorer, reading = scores.scorer, scores.reading or Reading(None, None)
        read = tokens if reading.tokens_read is None else reading.tokens_read
        timed = reading.tokens if reading.tokens is not None or reading.seconds is None else int(read.sum())
        found.append({"embedder": scorer.name, "strategy": scorer.strategy, "length": lengths, "document_tokens": tokens,
                      "tokens_read": read, "seconds": reading.seconds, "tokens": timed})
    return found


def corpus_lengths(config: NolimaConfig, reference, cache_dir=None) -> dict | None:
    """For a corpus of the user's (``dir:``, ``jsonl:``, ``parquet:``), how long its documents are
    in the reference tokenizer's tokens, the tokens the grid's lengths count
    (:func:`~embedeval.decision.length_summary`; the books' sentences were counted when the
    haystacks were built); None for a corpus embedeval ships or downloads."""
    if source_path(config.grid.corpus) is None:
        return None
    return length_summary(book_token_counts(load_corpus(config.grid.corpus).books, reference, cache_dir))


def run_nolima(config: NolimaConfig | None = None, progress: bool = True, cache_dir=None, commit_every: int = DEFAULT_COMMIT_EVERY) -> NolimaResult:
    """Run the sweep end to end and write the run directory; see the module docstring."""
    config = config or NolimaConfig()
    needle_set = config.validate()
    embedders, skipped = config.usable_embedders()
    forms = query_forms(needle_set, list(config.expansions))
    settings = {**config.recorded(), "embedders": embedders, "skipped": skipped, "versions": package_versions(VERSIONED_PACKAGES)}
    strategies = config.strategy_list()
    with run_directory(config.out, is_run_directory, CONFIG) as out:
        check_subfolder(out / FIGURES)  # before any work: the report would refuse it at the end
        reference = load_token_counter(config.tokenizer)
        scorers = [scorer for spec in embedders
                   for scorer in load_scorers(spec, strategies, reference, cache_dir=cache_dir, progress=progress,
                                              commit_every=commit_every, dedupe=config.dedupe,
                                              executor=config.executor_settings())]
        _warn_of_short_reads(scorers, config)
        haystacks = load_or_build_haystacks(config, needle_set, progress, reference, cache_dir)
        scored = [score_haystacks(scorer, haystacks, forms) for scorer in scorers]
        similarities = pd.concat([similarity_rows(s, needle_set, config.normalize_by) for s in scored], ignore_index=True)
        retrieval = pd.concat([retrieval_rows(s, needle_set, config.pool) for s in scored], ignore_index=True)
        writer = RunWriter(out)
        timings = writer.write_scored(similarities, retrieval, timing_table(readings(scored, haystacks)))
        lengths = corpus_lengths(config, reference, cache_dir)
        if lengths is not None:
            settings["corpus_lengths"] = lengths
        derived_from = {k: v for k, v in settings.items() if k not in NOT_IN_OUTPUTS}
        digest = inputs_digest(out, SCORED_TABLES, derived_from)
        if fresh_outputs(out, digest):  # the same tables and settings made them: the bootstrap and figures stand
            metrics, breaks, decision = writer.read_derived()
        else:
            forget_outputs(out)
            with step(f"metrics and break points with bootstrap intervals ({config.n_bootstrap:,} resamples)", progress):
                metrics = nolima_metrics(similarities, n_resamples=config.n_bootstrap, seed=config.grid.seed, retrieval=retrieval)
                windows = {(s.name, s.strategy): s.window_tokens for s in scorers
                           if isinstance(s, EmbeddingScorer) and s.window_tokens is not None}
                model_windows = {s.name: s.model_window for s in scorers if isinstance(s, EmbeddingScorer)}
                breaks = break_points(metrics, retrieval, config.rule(), config.n_bootstrap, config.grid.seed, windows, model_windows)
                decision = decision_table(retrieval, config.rule(), config.n_bootstrap, config.grid.seed, timings, config.prices)
            derived = writer.write_derived(metrics, breaks, decision)
            with step("figures, report.md and report.html", progress):
                reported = write_report(out, metrics, similarities, breaks, config.rule(), config=settings,
                                        candidates=pool_size(retrieval), chance=recall_chance_table(retrieval), decision=decision)
            record_outputs(out, digest, [*derived, *reported])  # only what this run wrote
        writer.finish(settings)  # last, so config.json always describes the tables beside it
    models = {s.name: s.embedder for s in scorers if isinstance(s, EmbeddingScorer)}  # one per embedder, its strategies share it
    return NolimaResult(config, embedders, skipped, haystacks, similarities, retrieval, metrics, breaks, out,
                        {name: model.stats.embedded for name, model in models.items()},
                        {name: model.distinct_texts for name, model in models.items()}, decision, timings)

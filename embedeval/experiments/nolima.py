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

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from embedeval.aggregate import nolima_metrics
from embedeval.breaks import ESTIMATOR, break_points
from embedeval.corpus import load_corpus, source_path
from embedeval.decision import decision_table, length_summary, timing_table
from embedeval.defaults import DEFAULT_COMMIT_EVERY
from embedeval.derived import RECORD, forget_outputs, fresh_outputs, inputs_digest, keep_edited, record_outputs, recorded_files
from embedeval.embedders.registry import LEXICAL_SPECS, embedder_name
from embedeval.embedders.tokens import load_token_counter
from embedeval.expansion import query_texts
from embedeval.experiments.nolima_config import NolimaConfig
from embedeval.haystack_store import haystacks_key, store_haystacks, stored_haystacks
from embedeval.haystacks import build_haystacks
from embedeval.messages import warn
from embedeval.needles import NeedleSet
from embedeval.options import COMMIT_EVERY
from embedeval.plan import EmbedderPlan, check_prices_used, plan_of, timed_apart
from embedeval.progress import step
from embedeval.report import pool_size, recall_chance_table, write_report
from embedeval.report.write import FIGURES, REPORT_FILES
from embedeval.run import CONFIG, RUN_FILES, SCORED_TABLES, RunWriter, is_run_directory
from embedeval.run_folder import check_subfolder, run_directory
from embedeval.sentences import book_token_counts
from embedeval.similarity import HaystackScores, retrieval_rows, score_haystacks, similarity_rows
from embedeval.strategies.scorers import EmbeddingScorer, load_scorers, shortfalls
from embedeval.strategies.scoring import Reading
from embedeval.versions import package_versions

#: Settings that change where or how a run works but nothing it writes (the tables are the same
#: for every executor): a rerun differing only in them reuses the metrics and the report.
NOT_IN_OUTPUTS = ("out", "executor", "workers", "ray_address")
#: Packages whose versions a run records in config.json.
VERSIONED_PACKAGES = ("embedeval", "numpy", "pandas", "scipy", "scikit-learn", "torch",
                      "sentence-transformers", "transformers", "tokenizers")


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
    #: embedded: the plan's ``texts`` (:attr:`~embedeval.embedders.cached.CachedEmbedder.distinct_texts`)
    texts: dict[str, int] = field(default_factory=dict)
    #: which reading to use at every length (embedeval.decision), as in decision.csv
    decision: pd.DataFrame | None = None
    #: what each reading read and the model's time on it, as in timings.csv
    timings: pd.DataFrame | None = None


def load_or_build_haystacks(config: NolimaConfig, needle_set: NeedleSet, progress: bool, tokenizer=None,
                            cache_dir=None) -> pd.DataFrame:
    """Reuse the run directory's haystacks when they were built with the same settings
    (:meth:`NolimaConfig.haystack_settings`), else read or build and write them
    (:func:`cached_build`)."""
    writer = RunWriter(config.out)
    frame = writer.reusable_haystacks(config.haystack_settings())
    if frame is not None:
        return frame
    frame = cached_build(config, needle_set, progress, tokenizer, cache_dir)
    writer.write_haystacks(frame, config.haystack_settings())
    return frame


def cached_build(config: NolimaConfig, needle_set: NeedleSet, progress: bool, tokenizer=None, cache_dir=None) -> pd.DataFrame:
    """The haystacks of ``config`` as the cache keeps them from an earlier build of the same
    settings, corpus and tokenizer (:mod:`embedeval.haystack_store`), else built and kept there;
    books are split once into ``cache_dir``."""
    tokenizer = tokenizer or load_token_counter(config.tokenizer)
    corpus = load_corpus(config.grid.corpus, progress=progress)  # a first download says so
    # controls too: haystack_settings leaves them out (a run directory's are always built), a stored build may lack them
    key = haystacks_key({**config.haystack_settings(), "controls": config.grid.controls}, corpus, tokenizer)
    frame = stored_haystacks(key, cache_dir)
    if frame is None:
        frame = build_haystacks(needle_set, config.grid, corpus, tokenizer=tokenizer, progress=progress, cache_dir=cache_dir)
        store_haystacks(frame, key, cache_dir)
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
    COMMIT_EVERY.check(commit_every)
    needle_set, embedders, _ = config.validated(keys)
    if (prices or {}) != config.prices:  # the config's own were checked with it
        check_prices_used([embedder_name(spec) for spec in embedders if spec not in LEXICAL_SPECS], prices or {})
    forms = query_texts(needle_set, list(config.expansions))
    strategies = config.strategy_list()
    reference = load_token_counter(config.tokenizer)
    by_spec = {spec: load_scorers(spec, strategies, reference, cache_dir=cache_dir, dedupe=config.dedupe, plan=True,
                                  commit_every=commit_every) for spec in embedders}
    scorers = [scorer for loaded in by_spec.values() for scorer in loaded]
    _warn_of_short_reads(scorers, config)
    models = {id(s.embedder): s.embedder for s in scorers if isinstance(s, EmbeddingScorer)}  # one per embedder
    with timed_apart({spec: loaded[0].embedder for spec, loaded in by_spec.items() if isinstance(loaded[0], EmbeddingScorer)},
                     calibrate):
        haystacks = RunWriter(config.out).reusable_haystacks(config.haystack_settings())
        if haystacks is None:
            haystacks = cached_build(config, needle_set, progress, reference, cache_dir)
        for scorer in scorers:
            with step(f"{scorer.name} [{scorer.strategy}]: what it would embed, recorded (nothing sent)", progress):
                similarity_rows(score_haystacks(scorer, haystacks, forms), needle_set, config.normalize_by)  # the needles embed here
        return [plan_of(model, prices, calibrate, config.grid.seed, progress) for model in models.values()]


def _warn_of_short_reads(scorers: list, config: NolimaConfig) -> None:
    """A warning line on stderr, before any work, per context extension that cannot read the
    longest haystacks whole (:func:`~embedeval.strategies.scorers.shortfalls`)."""
    for line in shortfalls(scorers, max(config.grid.lengths)):
        warn(line)


def readings(scored: list[HaystackScores], haystacks: pd.DataFrame) -> list[dict]:
    """What each scorer read of the haystacks, and the model's time on what it embedded
    (:class:`~embedeval.strategies.scoring.Reading`), as :func:`~embedeval.decision.timing_table` takes
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
    COMMIT_EVERY.check(commit_every)
    needle_set, embedders, skipped = config.validated()
    forms = query_texts(needle_set, list(config.expansions))
    settings = {**config.recorded(), "embedders": embedders, "skipped": skipped, "versions": package_versions(VERSIONED_PACKAGES)}
    strategies = config.strategy_list()
    # every file the run writes is a plain file or none yet, before any work (a finished run stays finished)
    with run_directory(config.out, is_run_directory, CONFIG, (*RUN_FILES, RECORD, *REPORT_FILES)) as out:
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
        # what a chunks-max@C chunk leaves to content: its vectors per document (decision.csv)
        settings["frame_tokens"] = {s.name: s.frame_tokens for s in scorers if isinstance(s, EmbeddingScorer)}
        # what the break points were read with and against: a report of the folder reads them again if they change
        settings["break_estimator"] = ESTIMATOR
        settings["model_windows"] = {s.name: s.model_window for s in scorers if isinstance(s, EmbeddingScorer)}
        lengths = corpus_lengths(config, reference, cache_dir)
        if lengths is not None:
            settings["corpus_lengths"] = lengths
        derived_from = {k: v for k, v in settings.items() if k not in NOT_IN_OUTPUTS}
        digest = inputs_digest(out, SCORED_TABLES, derived_from)
        if fresh_outputs(out, digest):  # the same tables and settings made them: the bootstrap and figures stand
            metrics, breaks, decision = writer.read_derived()
        else:
            keep_edited(out, recorded_files(out))  # a report.md edited by hand: kept aside, said in a note
            forget_outputs(out)
            with step(f"metrics and break points with bootstrap intervals ({config.n_bootstrap:,} resamples)", progress):
                metrics = nolima_metrics(similarities, n_resamples=config.n_bootstrap, seed=config.grid.seed, retrieval=retrieval)
                windows = {(s.name, s.strategy): s.window_tokens for s in scorers
                           if isinstance(s, EmbeddingScorer) and s.window_tokens is not None}
                breaks = break_points(metrics, retrieval, config.rule(), config.n_bootstrap, config.grid.seed, windows,
                                      settings["model_windows"])
                decision = decision_table(retrieval, config.rule(), config.n_bootstrap, config.grid.seed, timings, config.prices,
                                          similarities, settings["frame_tokens"])
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

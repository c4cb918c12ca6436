"""What a run's report says, format-free: a :class:`Document` of sections made of text, bullet
lists, tables and figures. :mod:`embedeval.report.markdown` and :mod:`embedeval.report.html`
render the same document, so ``report.md`` and ``report.html`` hold the same sections.

Text may use two inline marks, as Markdown writes them: ```code``` and ``**bold**``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from embedeval.breaks import BASE_CONFIDENCE, BREAK_INTERVAL, BreakRule, chance_test_groups
from embedeval.corpus import source_path
from embedeval.decision import SAME_SCORE, TIMING_NOISE
from embedeval.defaults import BREAK_SUPPORT, CHUNK_FACTOR, DEFAULT_N_BOOTSTRAP
from embedeval.labels import ALL_POOL, NEEDLE_FREE_POOL, QUESTION
from embedeval.report.break_words import break_sentence
from embedeval.report.figures import LINE_FIGURES, expansion_figure, heatmap_figure, line_figure, recall_figure
from embedeval.report.tables import (
    answers,
    best_form_table,
    break_table,
    category_tables,
    chunk_size_lines,
    chunk_size_table,
    control_tie_table,
    depth_tables,
    distractor_note,
    distractor_table,
    fewest_distractors,
    headline_breaks,
    main_variant,
    one_needle,
    position_table,
    scorer_view,
    series_label,
    several_needles_table,
    summary_table,
    truncation_lines,
)
from embedeval.report.which import corpus_sentence, cost_note, no_decision_sentence, standing_words, summary_sentences, which_sentences, which_table
from embedeval.schema import N_DISTRACTORS, QUERY_FORM
from embedeval.strategies import glossary

POSITIONS_TEXT = (
    "A needle goes in at the sentence boundary nearest its target depth. In short haystacks of long sentences two depths "
    "can meet at one boundary; such a haystack is built once and counted once, so per length the distinct positions "
    "reached (depths to 0.01) can be fewer than the depths asked for (mean, min and max over questions and variants). "
    "Where no boundary lies outside the ±0.2 zone around the needle, its distractors go to the farthest boundaries "
    "inside it (`haystacks with distractors in zone`).")
DISTRACTORS_TEXT = (
    "A haystack with K distractors holds the first K distractors of its question (texts that share the question's "
    "keyword) more than 0.2 of its tokens away from the needle; it is compared with its own control (the same filler "
    "and distractors, no needle) and ranked among the negatives that hold its question's K distractors plus that "
    "control, so every candidate holds the decoys and only the needle tells it apart (without distractors, every "
    "group's control and the plain negatives).")
#: The run settings the report's first line names (from the run's config).
#: What the report's first line names from a run's config (:mod:`embedeval.run`'s shape: the grid nested).
HEADER_KEYS = ("needles", "tokenizer")


def pool_words(pool: str | None) -> str:
    """What a needle haystack is ranked among, in words, for a run's ``pool`` (None: runs compared,
    each with its own), up to an open parenthesis the caller closes."""
    if pool == NEEDLE_FREE_POOL:
        return "every needle-free haystack of its length (the controls and the negative pool"
    if pool == ALL_POOL:
        return ("every haystack of its length and depth that does not answer its question (pool `all`: the controls, "
                "the negative pool and the other questions' needle haystacks of its variant and depth, as LongEmbed ranks "
                "among all documents of a split")
    return "the pool of its run (`pool` in each run's config.json"
HEADER_GRID_KEYS = ("corpus", "lengths", "depths", "seed")


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    frame: pd.DataFrame
    digits: int = 3


@dataclass(frozen=True)
class Figure:
    path: str  # relative to the run directory: figures/NAME.png
    alt: str


@dataclass(frozen=True)
class Callout:
    """A boxed answer: a headline in plain words and its supporting points."""

    headline: str
    items: tuple[str, ...]


Block = Text | Bullets | Table | Figure | Callout


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)


@dataclass
class Document:
    title: str
    intro: list[Block]
    sections: list[Section]

    def figures(self) -> list[str]:
        """Every figure the document shows, in order."""
        return [b.path for s in self.sections for b in s.blocks if isinstance(b, Figure)]


def format_cell(value, digits: int = 3) -> str:
    """A table cell as both renderers write it: floats to ``digits`` places, a missing value as "–"."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "–"
    return f"{value:.{digits}f}" if isinstance(value, (float, np.floating)) else str(value)


def which_section(decision: pd.DataFrame, rule: BreakRule, variant: str, config: dict | None,
                  breaks: pd.DataFrame | None = None) -> Section:
    """The report's first section, "Which to use": for a corpus of the user's, how long its
    documents are; the summary across lengths (:func:`~embedeval.report.which.summary_sentences`,
    from ``breaks``' headline break points and the decision table), one sentence per length
    (:func:`~embedeval.report.which.which_sentences`), what the numbers are and how the costs were
    measured, and every reading's recall per length."""
    config = config or {}
    corpus, lengths = config.get("grid", {}).get("corpus"), config.get("corpus_lengths")
    blocks: list[Block] = []
    if lengths and corpus and source_path(corpus) is not None:
        blocks.append(Text(corpus_sentence(corpus, lengths, config.get("tokenizer", "the reference tokenizer"))))
    else:
        lengths = None
    resamples = config.get("n_bootstrap", DEFAULT_N_BOOTSTRAP)
    groups, enough = int(decision["n_groups"].max()), chance_test_groups()
    rough = (f" With {groups} question group{'' if groups == 1 else 's'} these intervals are rough (a percentile bootstrap of "
             f"few groups runs narrow): a decision wants at least {enough}." if groups < enough else "")
    blocks.append(Bullets(tuple(summary_sentences(decision, breaks, variant))))
    per_length = which_sentences(decision, lengths)
    if per_length:
        blocks.append(Text("Length by length:"))
        blocks.append(Bullets(tuple(per_length)))
    blocks += [
        Text(f"Recall is chance-corrected {rule.recall_metric} ((r - k/n) / (1 - k/n)) of the {variant} needles asked by their "
             f"question (one needle per haystack, the run's fewest distractors), with its {BASE_CONFIDENCE:.0%} interval over "
             f"{resamples:,} resamples of the question groups. Each change is paired: both readings on the same resampled "
             f"questions and haystacks; where its interval reaches 0 the two cannot be told apart.{rough} Up to which length to "
             "embed documents whole, and the chunk size past it, are the base reading's headline break point and recommended "
             "chunk size (`breaks.csv`). Readings whose scores of every haystack at a length agree within "
             f"{SAME_SCORE:g} with equal ranks compute the same vectors there: they are one reading, named by the simplest "
             "(the model's own reading first), at its cost. The reading named at a length has the highest recall there (of "
             "equal ones, one no other reading matches at every length and beats at one, then the simplest, then the "
             "cheaper). Cost: seconds per million document tokens, the model's wall seconds on what it embedded in this run "
             "(cache misses only), summed over every length per embedder and reading mode (inputs of at most its window, as "
             "`truncate`, `windows-mean` and `chunks-max` read them, share one speed; each late-chunking and context-extension "
             "strategy has its own), times the tokens each strategy has it read per document token (a rerun whose vectors "
             "all come from the cache keeps the speed its folder's `timings.csv` measured; empty where none was); two "
             f"readings whose seconds are within {TIMING_NOISE:g} x of each other take \"about the same time\" (one pass per "
             "mode on a busy machine: identical computations have measured 1.3 x apart), and that never decides which "
             "reading is named; USD where `--price` gives both embedders' prices. Every number, with the vectors a retriever "
             "stores per document, the share of each document a reading reads and how often the needle is in it, is in "
             "`decision.csv`:"),
        Table(which_table(decision))]
    note = cost_note(decision)
    return Section("Which to use", blocks + ([Text(note)] if note else []))


def answer_callouts(breaks: pd.DataFrame, metrics: pd.DataFrame, rule: BreakRule,
                    decision: pd.DataFrame | None = None) -> list[Callout]:
    """The report's answer, one :class:`Callout` per embedder and strategy: the headline and its
    points (:func:`~embedeval.report.tables.answers`, on the main variant of the one-needle rows
    of ``metrics``), each ending with where its reading stands in ``decision`` (``decision.csv``)
    where there is one."""
    metrics = one_needle(metrics)
    variant = main_variant(metrics)
    standings = [standing_words(decision, row.embedder, row.strategy) for row in headline_breaks(breaks, variant).itertuples()]
    return [Callout(headline, items + ((standing,) if standing else ()))
            for (headline, items), standing in zip(answers(breaks, metrics, rule, variant), standings, strict=True)]


def run_recall_figure(metrics: pd.DataFrame, breaks: pd.DataFrame, chance: pd.DataFrame | None, path: Path) -> None:
    """The report's recall figure (:func:`~embedeval.report.figures.recall_figure`) of a run's
    tables as it wrote them (``metrics.csv``, ``breaks.csv`` and the chance levels of
    :func:`~embedeval.report.tables.recall_chance_table`, or None): the one-needle rows asked
    their own question, one series per embedder and strategy (:func:`scorer_view`), each break
    point marked."""
    def shown(frame: pd.DataFrame) -> pd.DataFrame:
        return scorer_view(one_needle(frame))

    own_chance = None if chance is None else shown(chance)
    shown_breaks = shown(breaks)
    recall_figure(shown(metrics), path, None if own_chance is None else own_chance[own_chance[QUERY_FORM] == QUESTION],
                  shown_breaks[shown_breaks[QUERY_FORM] == QUESTION])


def report_document(out: Path, metrics: pd.DataFrame, similarities: pd.DataFrame, breaks: pd.DataFrame,
                    rule: BreakRule | None = None, title: str = "NoLiMa sweep", config: dict | None = None,
                    candidates: int | None = None, chance: pd.DataFrame | None = None,
                    decision: pd.DataFrame | None = None) -> Document:
    """The report of a run's tables, its figures drawn into ``out/figures``. ``breaks``: the break
    points of the run (:func:`~embedeval.breaks.break_points`, ``breaks.csv``); ``config``: the
    settings of the run the tables come from (named in the first line), if there is one run;
    ``candidates``: the size of the retrieval pool plus one, for the chance level of recall@k
    (the pool itself is the config's ``pool``); ``chance``: each series' chance level of recall@k
    (:func:`~embedeval.report.tables.recall_chance_table`), drawn beside it; ``decision``: the
    run's decision table (:func:`~embedeval.decision.decision_table`, ``decision.csv``).

    The report leads with "Which to use" (:func:`which_section`: one sentence per length), where
    there is a decision table (one without rows says so:
    :func:`~embedeval.report.which.no_decision_sentence`); then the answer, one :class:`Callout` per embedder and strategy
    (:func:`~embedeval.report.tables.answers`, each with where it stands in the decision table),
    and the run's settings; then the rules with the narrow break-point table
    (:func:`~embedeval.report.tables.break_table`)."""
    figures = Path(out) / "figures"
    pool = (config or {}).get("pool")
    bps = breaks
    rule = rule or BreakRule()
    break_metric = rule.headline_metric
    several = several_needles_table(metrics)
    tables = metrics  # as the run wrote them: the recall figure picks its own rows
    metrics, similarities = one_needle(metrics), one_needle(similarities)  # the sections below: one needle, its own question
    variant = main_variant(metrics)
    callouts = answer_callouts(bps, metrics, rule, decision)
    fewest = fewest_distractors(metrics)
    chunk_lines = chunk_size_lines(fewest, one_needle(bps), rule, variant)
    chunk_table = chunk_size_table(fewest, break_metric, variant)
    decoy_table = distractor_table(metrics, break_metric, variant)
    metrics, similarities = scorer_view(metrics), scorer_view(similarities)  # one series per embedder and strategy
    shown = [f for f in LINE_FIGURES if f[0] in set(metrics["metric"])]  # runs of older versions lack some
    for metric, name, ylabel, hline in shown:
        line_figure(metrics, metric, ylabel, figures / name, hline=rule.threshold if metric == rule.metric else hline)
    heatmap_figure(category_tables(metrics, variant), f"comparative ratio by category ({variant})", figures / "category_heatmap.png", cmap="RdYlGn")
    depth = depth_tables(similarities, variant)
    if depth:
        heatmap_figure(depth, f"normalized similarity by needle depth ({variant})", figures / "depth_heatmap.png")

    answered: list[Block] = list(callouts)
    grid = (config or {}).get("grid", {})
    if config and all(key in config for key in HEADER_KEYS) and all(key in grid for key in HEADER_GRID_KEYS):
        answered.append(Text(f"Needles `{Path(config['needles']).name}`, corpus `{grid['corpus']}`, lengths "
                             f"{', '.join(map(str, grid['lengths']))}, {grid['depths']} depths, seed {grid['seed']}, "
                             f"token counts by `{config['tokenizer']}`."))
    other = "absolute" if rule.rule == "relative" else "relative"
    sections = ([] if decision is None else [Section("Which to use", [Text(no_decision_sentence(rule))])] if decision.empty
                else [which_section(decision, rule, variant, config, bps)])
    sections.append(Section("The answer per embedder and strategy", answered))
    sections += [Section(f"Break point and recommended chunk size ({rule.condition()})", [
        Text(f"The headline break point, the {rule.rule} rule's (the answer above): the rule is read on every bootstrap "
             "resample of the question groups, through the non-increasing fit of its per-length means, and the headline is "
             f"the longest length at least {BREAK_SUPPORT:.0%} of the resamples reach (the length a clear majority gives, "
             "else the safer one; see docs/metrics.md), with its interval (the "
             f"{BREAK_INTERVAL[0]:.0%} and {BREAK_INTERVAL[1]:.0%} percentiles of the same resamples); the recommended "
             f"chunk size is {CHUNK_FACTOR} x it. The {other} rule and the study's break point "
             "from the AUC pooled over questions are beside it for comparison with other studies. Where no length keeps "
             "the rule, the best length is named. Every column is in `breaks.csv`:"),
        Bullets(tuple(rule.meanings())),
        Table(break_table(bps, rule)),
        Bullets(tuple(f"{series_label(r)}: {break_sentence(r, rule)}" for r in bps.itertuples()))])]
    if not several.empty:
        sections.append(Section("Several needles", [
            Text("A haystack with K needles holds its own group's needle at the grid's depth and K - 1 needles of other "
                 f"groups (other characters) away from it; it is ranked among {pool_words(pool)}) by every "
                 "question whose needle it holds: its own (`own`) and the others' (`other`); `own control (needle-blind)` ranks "
                 "the haystack's control (the other needles, not its own) in its place: what a scorer blind to the own "
                 "needle reaches, the level the own question's relative break point is corrected against (`chance_level` "
                 f"in `breaks.csv`). Recall@1 and query_auc per length ({variant} needles, question form):"),
            Table(several)]))
    positions = position_table(similarities, grid.get("depths"))
    if not positions.empty:
        sections.append(Section("Needle positions", [
            Text(POSITIONS_TEXT),
            Table(positions, digits=1)]))
    if decoy_table[N_DISTRACTORS].nunique() > 1:
        sections.append(Section("Distractors", [
            Text(f"{break_metric} ({variant} needles, question form) per distractor count and haystack length. {DISTRACTORS_TEXT}"),
            Table(decoy_table)]))
    if chunk_table["strategy"].nunique() > 1:
        sections.append(Section("Chunk size", [
            Text(f"{break_metric} ({variant} needles, question form{distractor_note(decoy_table[N_DISTRACTORS].min())}) "
                 f"per strategy and haystack length: {glossary()}."),
            Bullets(tuple(line.removeprefix("- ") for line in chunk_lines)),
            Table(chunk_table)]))
    if "recall@5" in set(metrics["metric"]):
        run_recall_figure(tables, bps, chance, figures / "recall_vs_length.png")
        in_all = f"; {candidates} candidates in all" if candidates else ""
        decoys = decoy_table[N_DISTRACTORS].nunique() > 1 and pool == NEEDLE_FREE_POOL
        sections.append(Section("Retrieval among same-length candidates", [
            Text(f"Each needle haystack ranked by its question's score among {pool_words(pool)}{in_all}"
                 f"{'; with distractors, the pool of the Distractors section' if decoys else ''}; "
                 "ties counted against it). Recall@5 per length; the figure draws recall@1, @5 and @10 and marks each "
                 "break point, its interval shaded:"),
            Table(summary_table(metrics, "recall@5")),
            Figure("figures/recall_vs_length.png", "recall@k")]))
    sections.append(Section("Truncation", [
        Bullets(tuple(line.removeprefix("- ") for line in truncation_lines(metrics))),
        Text("Share of needle haystacks tied with their control (the same score: the needle past the window, so the "
             "haystack reads as its control; a tie counts against the needle in every rank, here and in MTEB's evaluator "
             "of the exported task):"),
        Table(control_tie_table(similarities))]))
    for metric, name, ylabel, _ in shown:
        sections.append(Section(ylabel, [Figure(f"figures/{name}", metric), Table(summary_table(metrics, metric))]))
    if metrics[QUERY_FORM].nunique() > 1:
        expansion_figure(metrics, variant, figures / "query_expansion.png")
        sections.append(Section("Query expansion", [
            Text("Expanded query = question + N terms. Comparative ratio above 0.5 means the haystack with the needle "
                 f"wins more often than its needle-free control ({variant} needles)."),
            Figure("figures/query_expansion.png", "query expansion"),
            Table(best_form_table(metrics, variant))]))
    sections.append(Section("By category and by needle depth", [
        Figure("figures/category_heatmap.png", "category"),
        *([Figure("figures/depth_heatmap.png", "depth")] if depth else []),
        Text("Every value in `metrics.csv` carries n and a bootstrap 95% CI.")]))
    return Document(title, [], sections)

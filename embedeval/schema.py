"""The schema of the tables a run writes, declared once, as mteb's ``TaskResult`` declares its
result files: each table's columns in order, the kinds, ranges and rules of its cells
(:class:`~embedeval.io.TableSchema`, checked when a table is read back), the columns later versions
added with what they stand for in an older table, and the keys that name a series or a cell.

A **series** (:data:`SERIES_KEYS`) is one scorer (embedder x strategy) asked in one query form
about one needle variant, at one distractor count and needle count, by the haystack's own question
or another's; a **cell** (:data:`CELL`) is a series at one length. The writers, the readers'
checks, the metrics, the break points, the decision table and the report take the column names
from here; the files' names are :mod:`embedeval.run`'s.
"""

from __future__ import annotations

import math

from embedeval.bounds import MAX_TABLE_LENGTH
from embedeval.io import ROUNDING, RowRule, TableSchema
from embedeval.labels import METRIC_NAMES, METRIC_RANGES, RETRIEVAL_MEASURES

# --- the key columns: what names a condition ---------------------------------------------------------------------------
#: The query form a row's question was asked in (``question``, or ``expanded-N``).
QUERY_FORM = "query_form"
#: The distractors in a haystack (0: none).
N_DISTRACTORS = "n_distractors"
#: The needles in a haystack (1: one).
N_NEEDLES = "n_needles"
#: Whether a row's question is its haystack's own needle's.
OWN_QUESTION = "own_question"
#: A reading: an embedder and the strategy it reads a long text by.
READING = ["embedder", "strategy"]
#: What names a row of the decision table's inputs (costs, shares read, needles seen): a reading at a length.
READING_AT_LENGTH = [*READING, "length"]
#: The scorer of a row: a reading, and the query form it is asked in.
SCORER = [*READING, QUERY_FORM]
#: The columns that name one series (one row of ``breaks.csv``).
SERIES_KEYS = [*SCORER, "variant", N_DISTRACTORS, N_NEEDLES, OWN_QUESTION]
#: The columns that name one cell of the metrics table: a series at one length.
CELL = [*SCORER, "variant", "length", N_DISTRACTORS, N_NEEDLES, OWN_QUESTION]
#: The columns of a cell (:data:`CELL`) that name it in words: never empty in a table a run wrote
#: (a figure sorts and labels by them).
CELL_NAMES = (*SCORER, "variant")
#: The columns that pair a needle haystack with its control in a table without control ids (one
#: question group at one length and distractor count, for one scorer).
CONDITION = (*SCORER, "group_id", "length", N_DISTRACTORS)
#: The counts of a haystack: its length in tokens, its distractors and its needles.
COUNTS = ["length", N_DISTRACTORS, N_NEEDLES]

# --- each table's columns, in order ------------------------------------------------------------------------------------
#: ``haystacks.parquet``: one row per haystack.
HAYSTACK_COLUMNS = [
    "id", "group_id", "category", "variant", "length", "n_tokens", "depth", "target_depth",
    "text", "needle_start", "needle_end", "character", "sources", "seed",
    N_DISTRACTORS, "distractors_of", "distractor_starts", "distractors_in_zone", "control_id",
    N_NEEDLES, "needle_groups", "needle_characters", "needle_starts", "needle_depths",
]
#: Columns that haystack files of older versions lack (``character``, then the distractors').
LATER_HAYSTACK_COLUMNS = ("character", N_DISTRACTORS, "distractors_of", "distractor_starts", "control_id", "distractors_in_zone",
                          N_NEEDLES, "needle_groups", "needle_characters", "needle_starts", "needle_depths")
#: ``similarities.parquet``: one row per embedder x strategy x haystack x query form.
SIMILARITY_COLUMNS = [
    "embedder", "strategy", "haystack_id", "control_id", "group_id", "category", "variant", "length", N_DISTRACTORS,
    "distractors_in_zone", N_NEEDLES, OWN_QUESTION, "depth", "target_depth",
    QUERY_FORM, "sim_qh", "sim_qn", "normalized", "normalized_by", "n_tokens", "truncated", "needle_visible",
    "windows_exact", "best_chunk", "chunk_has_needle",
]
#: ``retrieval.parquet``, the rank table (one row per embedder x strategy x query form x needle
#: haystack), then the per-query measures of :func:`embedeval.metrics.ranking.retrieval_measures`.
RETRIEVAL_COLUMNS = [
    *SCORER, "group_id", "category", "variant", "length", N_DISTRACTORS, N_NEEDLES,
    OWN_QUESTION, "depth", "haystack_id", "score", "rank", "n_candidates", "ties",
]
#: ``metrics.csv``: one row per cell, category, depth bucket and metric (long).
METRIC_COLUMNS = CELL + ["category", "depth_bucket", "metric", "value", "n", "ci_lo", "ci_hi"]
#: Columns added after breaks.csv was first written (an older file reads them as missing):
#: whether the break point is censored (the series kept its bar to the grid's longest length: "≥ L"),
#: the question groups, the window the model reads when the strategy reads one (``truncate``) and
#: whether the recommended chunk was capped at it,
#: and the chance level the relative rule corrects for (``chance_level``: a random ranking's k/n, or
#: the needle-blind control's recall@k),
#: and how the resamples of the question groups spread the break point: the share of resamples per
#: break length (``break_shares``, "128:0.524;256:0.471;none:0.005") and the share that gives the
#: reported one (``break_point_share``),
#: and the strategy whose readings gave the base (``base_strategy``: one base per embedder).
ADDED_BREAK_COLUMNS = ["break_censored", "n_groups", "window", "chunk_capped", "chance_level", "break_shares", "break_point_share",
                       "base_strategy"]
#: ``breaks.csv``: one row per series.
BREAK_COLUMNS = [*SERIES_KEYS, "break_point", "break_point_lo", "break_point_hi", "recommended_chunk_tokens",
                 "relative_break_point", "absolute_break_point", "relative_status", "base_value", "base_ci_lo", "base_ci_hi",
                 "base_p", "base_lengths", "at_chance", "best_length", "best_value", "auc_break_point", *ADDED_BREAK_COLUMNS]
#: ``decision.csv``: per length and reading, its recall and distance to the best with their intervals
#: and its costs, then whether it is the best and the groups, then
#: (:data:`ADDED_DECISION_COLUMNS`) which reading it is the same as, what it reads of a document and
#: how often the needle is in what it reads.
DECISION_COLUMNS = ["length", "embedder", "strategy", "recall", "recall_lo", "recall_hi", "diff_to_best", "diff_lo", "diff_hi",
                    "tied_with_best", "vectors_per_document", "seconds_per_million_tokens", "usd_per_million_tokens",
                    "best", "n_groups", "same_as", "share_read", "needle_visible"]
#: The columns an older ``decision.csv`` lacks (read back as missing).
ADDED_DECISION_COLUMNS = ["same_as", "share_read", "needle_visible"]
#: ``timings.csv`` (:func:`~embedeval.decision.timing_table`).
TIMING_COLUMNS = ["embedder", "strategy", "length", "documents", "document_tokens", "tokens_read", "model_seconds", "model_tokens"]

# --- what older versions lack ------------------------------------------------------------------------------------------
#: Columns that came with later versions (long-text strategies, distractors, several needles):
#: a table read back may lack them.
LATER_COLUMNS = (*LATER_HAYSTACK_COLUMNS, "strategy", "windows_exact", "best_chunk", "chunk_has_needle", OWN_QUESTION)


# --- what each table's cells hold ----------------------------------------------------------------------------------------
#: A length or a count of tokens: a whole number from 1 to :data:`MAX_TABLE_LENGTH`; a count that may be 0.
TOKENS, SOME = (1, MAX_TABLE_LENGTH), (0, None)
#: The ranges of a haystack's counts (a needle-free control holds no needle).
COUNT_RANGES = {N_DISTRACTORS: (0, MAX_TABLE_LENGTH), N_NEEDLES: (0, MAX_TABLE_LENGTH)}
SHARE = (0, 1)


def _one_best_per_length(frame):
    """The rows of a decision table at a length that names no reading best (all of them) or several
    (the ones named): a decision names exactly one reading per length."""
    best = frame["best"].astype(bool)
    named = best.groupby(frame["length"]).transform("sum")
    return (named != 1) & (best | (named == 0))


def _unknown_same_as(frame):
    """The rows of a decision table whose ``same_as`` names no reading of the same embedder measured
    at that length (an empty cell: the row's own reading)."""
    keys = frame[["length", "embedder", "strategy"]].astype(str)
    same = frame["same_as"].where(frame["same_as"].notna(), frame["strategy"]).astype(str)
    measured = set(zip(keys["length"], keys["embedder"], keys["strategy"], strict=True))
    import pandas as pd

    return pd.Series([key not in measured for key in zip(keys["length"], keys["embedder"], same, strict=True)], index=frame.index)


def _needle_outside_text(frame):
    """The rows of a haystack table whose needle does not lie in its text: an end before its start,
    or past the text's last character (a haystack without a needle has neither)."""
    start, end = frame["needle_start"].astype(float), frame["needle_end"].astype(float)
    length = frame["text"].map(lambda text: len(text) if isinstance(text, str) else math.nan) if "text" in frame else math.inf
    return (start.notna() | end.notna()) & ~((start <= end) & (end <= length))


def _outside_metric_range(column: str) -> RowRule:
    """The rows of a metrics table whose ``column`` lies outside its metric's range (:data:`METRIC_RANGES`)."""
    def broken(frame):
        values = frame[column].astype(float)
        low = frame["metric"].map(lambda m: METRIC_RANGES.get(m, (-math.inf, math.inf))[0]).astype(float)
        high = frame["metric"].map(lambda m: METRIC_RANGES.get(m, (-math.inf, math.inf))[1]).astype(float)
        return values.notna() & ((values < low - ROUNDING) | (values > high + ROUNDING))
    return RowRule(column, "in the range of its metric (from 0 to 1 for a share, a rate or an AUC; from -1 to 1 for a "
                           "correlation)", broken, needs=("metric",))


#: Each table's cells (:class:`~embedeval.io.TableSchema`), checked when the table is opened
#: (:func:`~embedeval.run.read_run_table`), so a hand-edited or damaged cell is one line naming the
#: file, line and column, not a traceback or a wrong sentence where it is first used.
HAYSTACK_SCHEMA = TableSchema(numbers=("depth", "target_depth"),
                              integers=(*COUNTS, "n_tokens", "needle_start", "needle_end", "seed", "distractors_in_zone"),
                              texts=("id", "text"), required=("length",),
                              ranges={**COUNT_RANGES, "length": TOKENS, "n_tokens": SOME, "depth": SHARE, "target_depth": SHARE,
                                      "needle_start": SOME, "needle_end": SOME},
                              rules=(RowRule("needle_end", "an end of the needle from needle_start to the end of the text",
                                             _needle_outside_text),))
SIMILARITY_SCHEMA = TableSchema(numbers=("depth", "target_depth", "sim_qh", "sim_qn", "normalized"),
                                integers=(*COUNTS, "n_tokens", "distractors_in_zone", "best_chunk"),
                                flags=(OWN_QUESTION, "truncated", "needle_visible", "windows_exact", "chunk_has_needle"),
                                ranges={**COUNT_RANGES, "length": TOKENS})
RETRIEVAL_SCHEMA = TableSchema(numbers=("depth", "score", *RETRIEVAL_MEASURES), integers=(*COUNTS, "rank", "n_candidates", "ties"),
                               flags=(OWN_QUESTION,),
                               ranges={**COUNT_RANGES, "length": TOKENS, "rank": (1, None), "n_candidates": (1, None), "ties": SOME,
                                       "score": (None, None), **{measure: SHARE for measure in RETRIEVAL_MEASURES}})
METRIC_SCHEMA = TableSchema(numbers=("value", "ci_lo", "ci_hi"), integers=(*COUNTS, "n"), flags=(OWN_QUESTION,),
                            texts=(*CELL_NAMES, "category", "depth_bucket", "metric"),
                            required=(*CELL, "category", "depth_bucket", "metric", "n"),
                            ranges={**COUNT_RANGES, "length": TOKENS, "n": (1, None), "value": (None, None), "ci_lo": (None, None),
                                    "ci_hi": (None, None)},
                            unique=(*CELL, "category", "depth_bucket", "metric"),
                            unique_words="a metric once per cell (the row is there twice)",
                            values={"metric": (f"a metric a run writes ({', '.join(METRIC_NAMES)})", METRIC_NAMES)},
                            rules=(*(_outside_metric_range(column) for column in ("value", "ci_lo", "ci_hi")),
                                   RowRule("ci_hi", "at least its ci_lo (an interval's upper end)",
                                           lambda frame: frame["ci_hi"].astype(float) < frame["ci_lo"].astype(float) - ROUNDING,
                                           needs=("ci_lo",))))
BREAK_SCHEMA = TableSchema(numbers=("base_value", "base_ci_lo", "base_ci_hi", "base_p", "best_value", "break_point_share"),
                           integers=(N_DISTRACTORS, N_NEEDLES, "break_point", "break_point_lo", "break_point_hi",
                                     "recommended_chunk_tokens", "relative_break_point", "absolute_break_point", "best_length",
                                     "auc_break_point", "n_groups", "window"),
                           flags=(OWN_QUESTION, "at_chance", "break_censored", "chunk_capped"),
                           texts=CELL_NAMES, required=tuple(column for column in CELL if column != "length"),
                           ranges={**COUNT_RANGES, **{c: (0, MAX_TABLE_LENGTH) for c in ("break_point", "break_point_lo", "break_point_hi",
                                                                     "recommended_chunk_tokens", "relative_break_point",
                                                                     "absolute_break_point", "auc_break_point")},
                                   "best_length": TOKENS, "window": TOKENS, "n_groups": SOME, "base_p": SHARE,
                                   "break_point_share": SHARE})
TIMING_SCHEMA = TableSchema(numbers=("model_seconds",), integers=("length", "documents", "document_tokens", "tokens_read", "model_tokens"),
                            ranges={"length": TOKENS, "documents": SOME, "document_tokens": SOME, "tokens_read": SOME,
                                    "model_tokens": SOME, "model_seconds": SOME})
#: Recall in ``decision.csv`` is chance-corrected (``(r - k/n) / (1 - k/n)``): at most 1, below 0
#: where a reading finds the needle less often than chance.
DECISION_SCHEMA = TableSchema(numbers=("recall", "recall_lo", "recall_hi", "diff_to_best", "diff_lo", "diff_hi",
                                       "seconds_per_million_tokens", "usd_per_million_tokens", "share_read", "needle_visible"),
                              integers=("length", "vectors_per_document", "n_groups"), flags=("tied_with_best", "best"),
                              texts=("embedder", "strategy"),
                              required=("length", "embedder", "strategy", "recall", "tied_with_best", "vectors_per_document",
                                        "best", "n_groups"),
                              ranges={"length": TOKENS, "vectors_per_document": TOKENS, "n_groups": (1, None),
                                      **{c: (None, 1) for c in ("recall", "recall_lo", "recall_hi")},
                                      **{c: (None, None) for c in ("diff_to_best", "diff_lo", "diff_hi")},
                                      "seconds_per_million_tokens": SOME, "usd_per_million_tokens": SOME,
                                      "share_read": SHARE, "needle_visible": SHARE},
                              unique=("length", "embedder", "strategy"),
                              unique_words="a reading once per length (the row is there twice)",
                              rules=(RowRule("best", "the one reading named best at its length (a length names none, or several)",
                                             _one_best_per_length),
                                     RowRule("same_as", "a reading of the same embedder measured at that length", _unknown_same_as)))

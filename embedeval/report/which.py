"""The report's first section, "Which to use": one sentence per haystack length from the decision
table (:mod:`embedeval.decision`, ``decision.csv``), a table of every reading's recall per length,
and the line each answer box gets from it (:func:`standing_words`). Sentences claim no more than
the table: a difference whose paired interval reaches 0 "cannot be told apart"."""

from __future__ import annotations

import math

import pandas as pd

from embedeval.decision import bracketing_lengths
from embedeval import strategies


def _number(value: float) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:.2f}"


def _signed(value: float) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:+.2f}"


def reading_words(embedder: str, strategy: str) -> str:
    """A series as the sentences name it: ``st:all-MiniLM-L6-v2 as `chunks-max@128```."""
    return f"{embedder} as `{strategy}`"


def move_words(strategy: str) -> str:
    """What reading a document by ``strategy`` instead does, in words ("taking the best of its
    128-token chunks (`chunks-max@128`)"; :func:`embedeval.strategies.move_words`)."""
    return strategies.move_words(strategy)


def cost_words(row, best) -> str:
    """The cost of ``row`` against the ``best`` row's: " at 0.13 x the price" where both have a
    price (USD per million tokens), else " at 8.1 x the time" where both have measured seconds,
    else nothing (:func:`cost_note` says why)."""
    for column, what in (("usd_per_million_tokens", "price"), ("seconds_per_million_tokens", "time")):
        mine, theirs = getattr(row, column), getattr(best, column)
        if not (pd.isna(mine) or pd.isna(theirs)) and theirs > 0:
            ratio = mine / theirs
            return f" at {ratio:.1f} x the {what}" if ratio >= 1 else f" at {ratio:.2g} x the {what}"
    return ""


def change_words(row) -> str:
    """A row's paired difference to the best with its interval, and "cannot be told apart" where
    the interval reaches 0."""
    if row.diff_to_best == 0 and row.diff_lo == 0 and row.diff_hi == 0:
        return "gives the same recall (on every resample)"
    if pd.isna(row.diff_lo):
        return f"changes it by {_signed(row.diff_to_best)} (too few question groups for an interval: cannot be told apart)"
    tied = ", cannot be told apart" if row.tied_with_best else ""
    return f"changes it by {_signed(row.diff_to_best)} [{_signed(row.diff_lo)}, {_signed(row.diff_hi)}]{tied}"


def band_sentence(rows: pd.DataFrame) -> str:
    """The sentence of one length (``rows``: the decision table's rows of it): read with the best
    series, its recall and interval (nothing is recommended where that interval reaches 0: no
    reading is shown above chance); then what each other strategy of its embedder and switching to
    each other embedder (its best series at that length) change, with intervals and costs."""
    best = next(rows[rows["best"]].itertuples())
    length = int(best.length)
    interval = "" if pd.isna(best.recall_lo) else f" [{_number(best.recall_lo)}, {_number(best.recall_hi)}]"
    if not pd.isna(best.recall_lo) and best.recall_lo <= 0:  # the best is not shown above chance: recommend nothing
        return (f"For documents of about {length:,} tokens: no reading is shown to find these needles above chance (the best, "
                f"{reading_words(best.embedder, best.strategy)}, has recall {_number(best.recall)}{interval}, an interval "
                "that reaches 0): nothing to recommend at this length.")
    said = f"For documents of about {length:,} tokens: read them with {reading_words(best.embedder, best.strategy)} " \
           f"(recall {_number(best.recall)}{interval})"
    others = []
    for row in rows[(rows["embedder"] == best.embedder) & ~rows["best"]].itertuples():
        others.append(f"{move_words(row.strategy)} {change_words(row)}{cost_words(row, best)}")
    for embedder, theirs in rows[rows["embedder"] != best.embedder].groupby("embedder", sort=True):
        row = next(theirs.sort_values(["recall", "strategy"], ascending=[False, True]).itertuples())
        others.append(f"switching to {reading_words(embedder, row.strategy)} {change_words(row)}{cost_words(row, best)}")
    return said + ("; " + "; ".join(others) if others else "; no other reading was measured") + "."


def band_order(lengths: list[int], corpus_lengths: dict | None) -> list[int]:
    """The order of the length bands: with a corpus of the user's, first the lengths that bracket
    its documents' median and 90th percentile (:func:`~embedeval.decision.bracketing_lengths`),
    then the others; else shortest first."""
    ordered = sorted(lengths)
    if not corpus_lengths:
        return ordered
    first = bracketing_lengths(ordered, [corpus_lengths["median"], corpus_lengths["p90"]])
    return first + [length for length in ordered if length not in first]


def corpus_sentence(corpus: str, corpus_lengths: dict, tokenizer: str) -> str:
    """How long the user's documents are, and which bands come first."""
    count = corpus_lengths["documents"]
    return (f"Your corpus `{corpus}`: its {count:,} document{'' if count == 1 else 's'} are about "
            f"{corpus_lengths['median']:,} tokens long at the median and {corpus_lengths['p90']:,} at the 90th percentile "
            f"(in `{tokenizer}`'s tokens, as the lengths below count them), so the lengths that bracket them come first.")


def which_sentences(decision: pd.DataFrame, corpus_lengths: dict | None = None) -> list[str]:
    """:func:`band_sentence` for every length of the decision table, in :func:`band_order`."""
    if decision is None or decision.empty:
        return []
    by_length = {int(length): rows for length, rows in decision.groupby("length")}
    return [band_sentence(by_length[length]) for length in band_order(list(by_length), corpus_lengths)]


def which_table(decision: pd.DataFrame) -> pd.DataFrame:
    """Every reading's recall per length (columns), "(best)" and "(tied)" marking the best and those
    that cannot be told apart from it."""
    cells = decision.assign(reading=decision["embedder"] + " · " + decision["strategy"],
                            cell=[f"{_number(r.recall)}{' (best)' if r.best else ' (tied)' if r.tied_with_best else ''}"
                                  for r in decision.itertuples()])
    wide = cells.pivot(index="reading", columns="length", values="cell").fillna("–")
    wide.columns = [f"{int(length):,}" for length in wide.columns]
    return wide.reset_index()


def _lengths_words(lengths: list[int]) -> str:
    words = [f"{length:,}" for length in lengths]
    return (words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]) + " tokens"


def standing_words(decision: pd.DataFrame | None, embedder: str, strategy: str) -> str | None:
    """Where one series stands in the decision table, for its answer box: the lengths where it is
    the best reading, where it cannot be told apart from the best, and where it is below it (None
    where the table has no row of it)."""
    if decision is None or decision.empty:
        return None
    rows = decision[(decision["embedder"] == embedder) & (decision["strategy"] == strategy)].sort_values("length")
    if rows.empty:
        return None
    best = [int(r.length) for r in rows.itertuples() if r.best]
    tied = [int(r.length) for r in rows.itertuples() if not r.best and r.tied_with_best]
    below = [int(r.length) for r in rows.itertuples() if not r.tied_with_best]
    parts = ([f"the best reading at {_lengths_words(best)}"] if best else []) + \
            ([f"cannot be told apart from the best at {_lengths_words(tied)}"] if tied else []) + \
            ([f"below the best at {_lengths_words(below)}"] if below else [])
    return "Which to use: " + "; ".join(parts) + "."


def cost_note(decision: pd.DataFrame) -> str | None:
    """Why some changes name no cost: the readings whose speed was not measured (None where every
    one was)."""
    unmeasured = decision[decision["seconds_per_million_tokens"].isna()]
    if unmeasured.empty:
        return None
    names = ", ".join(sorted({reading_words(r.embedder, r.strategy) for r in unmeasured.itertuples()}))
    return (f"No speed was measured for {names}: every vector came from the cache, and the folder held no `timings.csv` "
            "from the run that embedded them (a run into a new `--cache-dir` measures it); changes against it name no cost.")

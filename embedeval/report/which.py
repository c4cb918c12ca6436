"""The report's first section, "Which to use": one summary across lengths in the user's terms
(:func:`summary_sentences`: up to which length to embed documents whole, and past it the chunk
size ``breaks.csv`` recommends or the reading the decision table names), then one sentence per
haystack length from the decision table (:mod:`embedeval.decision`, ``decision.csv``; a run of one
reading says so in one line instead), a table of every reading's recall per length, and the line
each answer box gets from it (:func:`standing_words`). Sentences claim no more than the table: a
difference whose paired interval reaches 0 "cannot be told apart"; readings that compute the same
vectors at a length are one reading there; costs inside the timing noise are "about the same"."""

from __future__ import annotations

import math

import pandas as pd

from embedeval import strategies
from embedeval.breaks import BreakRule
from embedeval.decision import about_the_same_time, bracketing_lengths
from embedeval.defaults import BASE_VISIBLE_SHARE
from embedeval.labels import QUESTION
from embedeval.report.break_words import break_sentence
from embedeval.report.tables import headline_breaks, main_variant, one_needle, series_note
from embedeval.schema import QUERY_FORM

#: A needle visible in fewer of the haystacks than this is said beside the reading that reads them:
#: the share a length needs to be read whole (the base's).
VISIBLE_ENOUGH = BASE_VISIBLE_SHARE


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
    price (USD per million tokens), else " at 8.1 x the time" where both have measured seconds and
    differ beyond the timing noise (" in about the same time" inside it,
    :func:`~embedeval.decision.about_the_same_time`), else nothing (:func:`cost_note` says why)."""
    for column, what in (("usd_per_million_tokens", "price"), ("seconds_per_million_tokens", "time")):
        mine, theirs = getattr(row, column), getattr(best, column)
        if not (pd.isna(mine) or pd.isna(theirs)) and theirs > 0:
            ratio = mine / theirs
            if what == "time" and about_the_same_time(mine, theirs):
                return " in about the same time"
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


def reading_note(row) -> str:
    """What a reading sees of a document, where it is not all of it and the needle: "reads 12% of
    each document, the needle in 20% of haystacks" (``share_read``, ``needle_visible`` under
    :data:`VISIBLE_ENOUGH`); "" where it reads every token (or nothing was measured)."""
    parts = []
    if not pd.isna(row.share_read) and row.share_read < 1:
        parts.append(f"reads {_share(row.share_read)} of each document")
    if not pd.isna(row.needle_visible) and row.needle_visible < VISIBLE_ENOUGH:
        parts.append(f"the needle in {_share(row.needle_visible)} of haystacks")
    return ", ".join(parts)


def _share(value: float) -> str:
    return "<1%" if 0 < value < 0.005 else f"{value:.0%}"


def _same_readings(rows: pd.DataFrame, row) -> list[str]:
    """The other strategies of ``row``'s embedder that are the same reading as it at its length."""
    same = rows[(rows["embedder"] == row.embedder) & (rows["same_as"] == row.strategy) & (rows["strategy"] != row.strategy)]
    return sorted(same["strategy"])


def _and(words: list[str]) -> str:
    """Words read out as a list: "a", "a and b", "a, b and c"."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _ticked(labels: list[str]) -> str:
    return _and([f"`{label}`" for label in labels])


def band_sentence(rows: pd.DataFrame) -> str:
    """The sentence of one length (``rows``: the decision table's rows of it): read with the best
    series, its recall and interval, what it reads of a document (:func:`reading_note`) and the
    readings that are the same as it there (nothing is recommended where its interval reaches 0: no
    reading is shown above chance); then what each other reading of its embedder and switching to
    each other embedder (its best series at that length) change, with intervals and costs."""
    best = next(rows[rows["best"]].itertuples())
    length = int(best.length)
    interval = "" if pd.isna(best.recall_lo) else f" [{_number(best.recall_lo)}, {_number(best.recall_hi)}]"
    if not pd.isna(best.recall_lo) and best.recall_lo <= 0:  # the best is not shown above chance: recommend nothing
        return (f"For documents of about {length:,} tokens: no reading is shown to find these needles above chance (the best, "
                f"{reading_words(best.embedder, best.strategy)}, has recall {_number(best.recall)}{interval}, an interval "
                "that reaches 0): nothing to recommend at this length.")
    notes = [note for note in (reading_note(best),) if note]
    same = _same_readings(rows, best)
    if same:
        notes.append(f"{_ticked(same)} {'reads' if len(same) == 1 else 'read'} the same vectors here")
    said = f"For documents of about {length:,} tokens: read them with {reading_words(best.embedder, best.strategy)} " \
           f"(recall {_number(best.recall)}{interval}{'; ' if notes else ''}{'; '.join(notes)})"
    others = []
    for row in rows[(rows["embedder"] == best.embedder) & ~rows["best"] & (rows["same_as"] == rows["strategy"])].itertuples():
        others.append(f"{move_words(row.strategy)} {change_words(row)}{cost_words(row, best)}")
    for embedder, theirs in rows[rows["embedder"] != best.embedder].groupby("embedder", sort=True):
        row = next(theirs.sort_values(["recall", "strategy"], ascending=[False, True]).itertuples())
        others.append(f"switching to {reading_words(embedder, row.strategy)} {change_words(row)}{cost_words(row, best)}")
    return said + ("; " + "; ".join(others) if others else "" if same else "; no other reading was measured") + "."


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


def one_reading(decision: pd.DataFrame) -> bool:
    """Whether a decision table measured one reading only (one embedder, one strategy)."""
    return decision[["embedder", "strategy"]].drop_duplicates().shape[0] == 1


def which_sentences(decision: pd.DataFrame, corpus_lengths: dict | None = None) -> list[str]:
    """:func:`band_sentence` for every length of the decision table, in :func:`band_order`; none
    for a run of one reading (nothing to choose between: :func:`summary_sentences` says it)."""
    if decision is None or decision.empty or one_reading(decision):
        return []
    by_length = {int(length): rows for length, rows in decision.groupby("length")}
    return [band_sentence(by_length[length]) for length in band_order(list(by_length), corpus_lengths)]


def _recommended_words(row) -> str:
    """A recommended reading with its recall at its length and what a retriever keeps and reads of
    a document: "`chunks-max@128` (recall 0.62 [0.48, 0.74] at 512 tokens, 5 vectors per document)"."""
    notes = [_recall_words(row)]
    if row.vectors_per_document > 1:
        notes.append(f"{int(row.vectors_per_document):,} vectors per document")
    notes += [note for note in (reading_note(row),) if note]
    return f"`{row.strategy}` ({', '.join(notes)})"


def _recall_words(row) -> str:
    """"recall 0.62 [0.48, 0.74] at 512 tokens"."""
    interval = "" if pd.isna(row.recall_lo) else f" [{_number(row.recall_lo)}, {_number(row.recall_hi)}]"
    return f"recall {_number(row.recall)}{interval} at {int(row.length):,} tokens"


def _base_break(breaks: pd.DataFrame | None, embedder: str, variant: str | None):
    """The headline ``breaks.csv`` row of ``embedder``'s base reading (its ``base_strategy``, the
    model's own reading its other strategies are held to), None without one."""
    if breaks is None or breaks.empty or variant is None:
        return None
    rows = headline_breaks(breaks, variant)
    rows = rows[rows["embedder"] == embedder]
    if rows.empty:
        return None
    base = rows["base_strategy"].dropna() if "base_strategy" in rows.columns else pd.Series(dtype=str)
    chosen = rows[rows["strategy"] == base.iloc[0]] if not base.empty else rows.iloc[0:0]
    return next((chosen if not chosen.empty else rows.sort_values("strategy")).itertuples())


def embedder_summary(decision: pd.DataFrame, breaks: pd.DataFrame | None, embedder: str, variant: str | None) -> str:
    """The summary of one embedder across lengths, in the user's terms: up to the headline break
    point of its base reading (``breaks.csv``'s ``break_point``, :func:`_base_break`), embed
    documents whole; longer, split them into chunks of ``recommended_chunk_tokens`` or read them
    with each reading the decision table names at a longer length above chance (its recall at the
    longest such length, vectors per document, what it reads: :func:`_recommended_words`); the
    longer lengths where nothing is shown above chance. Numbers are read, not recomputed."""
    mine = decision[(decision["embedder"] == embedder)]
    longest = int(decision["length"].max())
    best = mine[mine["best"]].sort_values("length")
    found = _base_break(breaks, embedder, variant)
    point = None if found is None or pd.isna(found.break_point) else int(found.break_point)
    censored = found is not None and not pd.isna(getattr(found, "break_censored", None)) and bool(found.break_censored)
    parts = []
    if point is not None:
        upto = f"up to {point:,} tokens (the longest measured)" if censored or point >= longest else f"up to about {point:,} tokens"
        base_rows = mine[(mine["strategy"] == found.strategy) & (mine["length"] == point)]
        note = reading_note(next(base_rows.itertuples())) if not base_rows.empty else ""
        if strategies.scores_chunks(found.strategy):  # its break point is the document's length: it does not embed them whole
            parts.append(f"Documents {upto}: read them by {move_words(found.strategy)}{'; it ' + note if note else ''}.")
        else:
            parts.append(f"Documents {upto}: embed them whole (`{found.strategy}`{'; it ' + note if note else ''}).")
    later = best[best["length"] > point] if point is not None else best
    if point is not None and point >= longest:
        return " ".join(parts)
    found_above = later[later["recall_lo"].fillna(1) > 0]
    options = []
    chunk = None if found is None or pd.isna(found.recommended_chunk_tokens) else int(found.recommended_chunk_tokens)
    if chunk is not None and point is not None:
        options.append(f"split them into chunks of <= {chunk:,} tokens")
    whole = ""
    for strategy, rows in found_above.groupby("strategy", sort=False):
        row = next(rows.sort_values("length").tail(1).itertuples())
        if found is not None and strategy == found.strategy:  # nothing better measured: what embedding whole still gives
            note = reading_note(row)
            how = "read that way" if strategies.scores_chunks(strategy) else "embedded whole"
            whole = f"; {how}, `{strategy}` has {_recall_words(row)}{f' ({note})' if note else ''}"
        else:
            options.append(f"read them with {_recommended_words(row)}")
    lead = "Longer" if point is not None else "Documents of every length measured"
    said = f"{lead}: {', or '.join(options)}{whole}." if options else ""
    nothing = sorted(set(later["length"]) - set(found_above["length"]))
    if nothing:
        said += (f" At {_lengths_words(nothing)} no reading of {embedder} is shown to find the needle above chance "
                 "(recall intervals that reach 0).")
    if not parts and not said.strip() and found is not None:  # only the base reading, and no headline: say so, not ""
        said = (f"This run recommends no length to embed documents whole and no chunk size: `{found.strategy}` has no headline "
                "break point (its answer says why).")
    return " ".join(parts + ([said.strip()] if said.strip() else []))


def summary_sentences(decision: pd.DataFrame, breaks: pd.DataFrame | None = None, variant: str | None = None) -> list[str]:
    """The summary "Which to use" opens with: per embedder the decision table recommends at some
    length (:func:`embedder_summary`; named where there are several), then, for a run of one
    reading, the one line saying so with the flag that adds others."""
    if decision is None or decision.empty:
        return []
    named = list(dict.fromkeys(decision.sort_values("length").loc[decision["best"], "embedder"]))
    several = decision["embedder"].nunique() > 1
    lines = [(f"**{embedder}**: " if several else "") + embedder_summary(decision, breaks, embedder, variant) for embedder in named]
    if one_reading(decision):
        strategy = decision["strategy"].iloc[0]
        more = [strategy] + [c for c in strategies.strategy_choices()
                             if "@" not in c and not c.startswith("...") and c not in (strategy, strategy.partition("@")[0])]
        lines.append(f"This run read documents one way (`{strategy}`), so there is nothing to choose between: add other "
                     f"readings to compare them, e.g. `--strategy {','.join(more)}`.")
    return lines


def no_decision_sentence(rule: BreakRule) -> str:
    """What "Which to use" says for a decision table without rows (a ``decision.csv`` of its header
    only): that no reading is named, and when a run has nothing to decide."""
    k = rule.k
    return (f"No reading is named at any length: `decision.csv` has no rows. A run decides only at lengths whose pools "
            f"hold more than {k} candidates (chance-corrected {rule.recall_metric} reads nothing in smaller ones: raise "
            "`--negatives`), from the headline rows (the main variant's needles asked by their own question, one needle per "
            "haystack); run again to write it anew if the file was edited.")


def closing_lines(breaks: pd.DataFrame, decision: pd.DataFrame | None, rule: BreakRule) -> list[str]:
    """What ``embedeval nolima`` prints last, after what it embedded: one line per break-point row of
    the question form (:func:`~embedeval.report.break_words.break_sentence`), then the summary "Which to use"
    opens with (:func:`summary_sentences`), in the report's words without its bold: the answer last."""
    lines = [f"{row.embedder} [{row.strategy}, {row.variant}{series_note(row)}]: {break_sentence(row, rule)}"
             for row in breaks.itertuples() if getattr(row, QUERY_FORM) == QUESTION]
    if decision is not None and decision.empty:
        lines.append(f"which to use: {no_decision_sentence(rule)}")
    elif decision is not None and not breaks.empty:
        summary = summary_sentences(decision, breaks, main_variant(one_needle(breaks)))
        lines += [f"which to use: {line.replace('**', '')}" for line in summary]
    return lines


def which_table(decision: pd.DataFrame) -> pd.DataFrame:
    """Every reading's recall per length (columns), "(best)" and "(tied)" marking the best and those
    that cannot be told apart from it where a length has more than one reading, "(same as `X`)"
    a reading that is the simplest one ``X`` there."""
    def mark(row, readings: int) -> str:
        if row.same_as != row.strategy:
            return f" (same as {row.same_as})"
        if readings < 2:
            return ""
        return " (best)" if row.best else " (tied)" if row.tied_with_best else ""

    distinct = decision[decision["same_as"] == decision["strategy"]].groupby("length").size()
    cells = decision.assign(reading=decision["embedder"] + " · " + decision["strategy"],
                            cell=[f"{_number(r.recall)}{mark(r, int(distinct.get(r.length, 0)))}" for r in decision.itertuples()])
    wide = cells.pivot(index="reading", columns="length", values="cell").fillna("–")
    wide.columns = [f"{int(length):,}" for length in wide.columns]
    return wide.reset_index()


def _lengths_words(lengths: list[int]) -> str:
    return _and([f"{length:,}" for length in lengths]) + " tokens"


def standing_words(decision: pd.DataFrame | None, embedder: str, strategy: str) -> str | None:
    """Where one series stands in the decision table, for its answer box: the lengths where it is
    the best reading, where it cannot be told apart from the best, and where it is below it (None
    where the table has no row of it)."""
    if decision is None or decision.empty or one_reading(decision):  # one reading: the best at every length says nothing
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

"""The break point in words, as every place that says it reads it (report.md, report.html, the
figures, the benchmarks): a length with its interval, the recommended chunk, why a series has no
break point, how the resamples of the question groups back it, and the one line per series
(:func:`break_sentence`). The numbers are :mod:`embedeval.breaks`' (:func:`~embedeval.breaks.break_points`,
:func:`~embedeval.breaks.break_answer`); this module only words them."""

from __future__ import annotations

import math

import pandas as pd

from embedeval.break_rule import BreakRule
from embedeval.breaks import (
    AT_CHANCE,
    CANNOT_TELL,
    NO_RANKS,
    NOT_VISIBLE,
    TOO_FEW_GROUPS,
    UNCORRECTABLE,
    BreakAnswer,
    break_answer,
    chance_test_groups,
    parse_shares,
)
from embedeval.defaults import BASE_VISIBLE_SHARE, BREAK_SUPPORT


def _missing(value) -> bool:
    return value is None or pd.isna(value)


def tokens_text(value) -> str:
    """A length in words: "256 tokens", or "none"."""
    return "none" if _missing(value) else f"{int(value)} tokens"


def _censored(row) -> bool:
    """Whether a row's break point is only a lower bound (older breaks.csv files do not say: no)."""
    flag = getattr(row, "break_censored", None)
    return not _missing(flag) and bool(flag)


def interval_text(row) -> str:
    """A break point with its interval, as the report's table shows it: "256 tokens (128-512)";
    "≥ 2048 tokens (1024-2048)" when the series kept its bar to the longest length measured (censored,
    as RULER writes ">128K"); "(no interval)" when none was computed, and "none" for an end of the
    interval that fell on no break point."""
    if _missing(row.break_point):
        return "none"
    point = f"{'≥ ' if _censored(row) else ''}{int(row.break_point)} tokens"
    if _missing(row.break_point_lo) and _missing(row.break_point_hi):
        return f"{point} (no interval)"
    def end(value) -> str:
        return "none" if _missing(value) else str(int(value))
    return f"{point} ({end(row.break_point_lo)}-{end(row.break_point_hi)})"


def chunk_text(row) -> str:
    """The recommended chunk of a row in words, saying when it was capped at the model's window."""
    chunk = row.recommended_chunk_tokens
    if _missing(chunk):
        return ""
    capped = getattr(row, "chunk_capped", None)
    if not _missing(capped) and bool(capped):
        return f", recommended chunk {int(chunk)} tokens (capped at the {int(row.window)}-token window the model reads)"
    return f", recommended chunk {'at least ' if _censored(row) else ''}{int(chunk)} tokens"


def _base_text(row, rule: BreakRule) -> str:
    """The relative rule's base of a row in words ("" when it has none)."""
    if _missing(row.base_value):
        return ""
    test = "every group's base alike (no t-test)" if _missing(row.base_p) else f"groups' t-test p = {row.base_p:.3g}"
    return (f"chance-corrected {rule.recall_metric} {row.base_value:.3f} [{row.base_ci_lo:.3f}, {row.base_ci_hi:.3f}] "
            f"over {row.base_lengths} tokens, {test}")


def why_no_break(row, rule: BreakRule | None = None) -> str | None:
    """Why a row of :func:`~embedeval.breaks.break_points` has no headline break point, in words (None when it has
    one): under the relative rule, what kept the rule from being read (at chance, too few question
    groups, the needle not visible, a pool too small to correct for chance, no rank table); when
    no length keeps the rule, the best length."""
    rule = rule or BreakRule()
    text = _base_text(row, rule)
    base = f" ({text})" if text else ""  # an edited breaks.csv may have lost the base: no empty brackets
    if rule.rule == "relative":
        status = row.relative_status
        if status == AT_CHANCE:
            return f"at chance from the shortest length: this scorer does not find these needles{base}"
        if status == CANNOT_TELL:
            groups = getattr(row, "n_groups", None)
            count = "these" if _missing(groups) else str(int(groups))
            return (f"not shown above chance with {count} question groups{base}: the base's interval or its t-test "
                    "reaches chance")
        if status == NOT_VISIBLE:
            return (f"no break point: the model reads none of the shortest haystacks whole (they are longer than its window, or "
                    f"the needle is past it in more than {1 - BASE_VISIBLE_SHARE:.0%} of them), so there is no base to hold it to; "
                    "add lengths inside the window")
        if status == TOO_FEW_GROUPS:
            groups = getattr(row, "n_groups", None)
            count = "" if _missing(groups) else f" ({int(groups)})"
            return (f"too few question groups{count}{base}: a headline needs at least {chance_test_groups()}, whatever the "
                    "p-value (add questions, or read the per-length table)")
        if status == UNCORRECTABLE:
            return (f"{rule.recall_metric} cannot be corrected for chance: no pool has more than {rule.k} candidates "
                    "(add negatives)")
        if status == NO_RANKS:
            return "no rank table: the relative rule reads each question's ranks"
    if _missing(row.break_point):
        shares = parse_shares(getattr(row, "break_shares", None))
        if any(length is not None for length in shares):
            return (f"no length is reached by {BREAK_SUPPORT:.0%} of the resamples of the question groups (they give "
                    f"{shares_words(row)})")
        if _missing(row.best_length):
            return f"no {rule.headline_metric} measured"
        return f"no length keeps {rule.condition()} (best: {int(row.best_length)} tokens at {row.best_value:.3f})"
    return None


def _length_words(length: int | None) -> str:
    return "none" if length is None else f"{length} tokens"


def percent(share: float) -> str:
    """A share of resamples in whole percent, "<1%" for a share that rounds to 0 but is not, and to
    a tenth, rounded down, where whole percent would round it up to :data:`~embedeval.defaults.BREAK_SUPPORT` (0.595:
    "59.5%", not "60%", which a headline needs)."""
    if share > 0 and f"{share:.0%}" == "0%":
        return "<1%"
    whole = f"{share:.0%}"
    return f"{math.floor(share * 1000) / 10:.1f}%" if share < BREAK_SUPPORT <= float(whole[:-1]) / 100 else whole


def shares_words(row) -> str | None:
    """How the resamples of the question groups spread a row's break point (``break_shares``), in
    words, shortest first: "128 tokens in 50%, 256 tokens in 50%, 512 tokens in <1%"; None where
    the row has none (no break point, or a breaks.csv from before the column)."""
    shares = parse_shares(getattr(row, "break_shares", None))
    if not shares:
        return None
    ordered = sorted(shares.items(), key=lambda item: item[0] or 0)
    return ", ".join(f"{_length_words(length)} in {percent(share)}" for length, share in ordered)


def lengths_or(lengths) -> str:
    """Lengths (None: none) as one reads them out: "128 or 512 tokens", "none or 128 tokens"."""
    names = ["none" if length is None else f"{length:,}" for length in lengths]
    words = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
    return words if names[-1] == "none" else f"{words} tokens"


def support_words(row) -> str:
    """How the resamples of the question groups back a row's break point, in the words every place
    uses: "given by 66% of resamples of the question groups"; where they split, the likely lengths
    with their shares and how often the headline, the safer answer, is reached ("split between 128
    or 512 tokens (40% / 38% of resamples of the question groups); 128 tokens is the longest that
    78% of them reach"); "" for a row without shares."""
    said = break_answer(row)
    if said.share is None:
        return ""
    if said.settled:
        return f"given by {percent(said.share)} of resamples of the question groups"
    if said.length is None:
        return f"no clear majority: {likely_words(said)}; no length is reached by {BREAK_SUPPORT:.0%} of them"
    return f"split between {likely_words(said)}; {said.length:,} tokens is the longest that {percent(said.reach)} of them reach"


def likely_words(said: BreakAnswer) -> str:
    """The likely lengths of an answer with no clear majority, with their shares: "128 or 512
    tokens (40% / 38% of resamples of the question groups)"."""
    split = " / ".join(percent(share) for _, share in said.likely)
    return f"{lengths_or([length for length, _ in said.likely])} ({split} of resamples of the question groups)"


def break_sentence(row, rule: BreakRule | None = None) -> str:
    """One line about a row of :func:`~embedeval.breaks.break_points`: the headline break point with its interval,
    or why there is none (:func:`why_no_break`); then the other rule's break point and the
    pooled-AUC one."""
    rule = rule or BreakRule()
    other = (f"absolute rule ({rule.absolute_condition()}): {tokens_text(row.absolute_break_point)}" if rule.rule == "relative"
             else f"relative rule: {tokens_text(row.relative_break_point)}")
    tail = f"; {other}; pooled-AUC break point {tokens_text(row.auc_break_point)}"
    why = why_no_break(row, rule)
    if why is not None:
        return f"{why}{tail}"
    base = _base_text(row, rule)
    reading = f" ({base})" if rule.rule == "relative" and base else ""
    support = support_words(row)
    support = f", {support}," if support else ""
    return f"break point {interval_text(row)}{support} by {rule.condition()}{reading}{chunk_text(row)}{tail}"

"""The break point: the headline answer of a sweep ("up to which length does this embedder still
find the needle?") and the chunk size it recommends.

Two rules, both computed for every series (embedder x strategy x query form x variant x
distractor count) and shown side by side:

``relative`` (default)  the largest length whose recall@k (``k``, default 5) stays >= 0.85 x its
                        value at the shortest length (:func:`~embedeval.metrics.relative_break_point`):
                        up to there a top-k retriever finds the needle's haystack at least 85% as
                        often as with the shortest haystacks. It reads an *effective length* as
                        RULER and NoLiMa do, against the model's own short-context score.
``absolute``            the largest length whose ``metric`` (default ``query_auc``) stays >= a fixed
                        ``threshold`` (default 0.8; :func:`~embedeval.metrics.break_point`): on average
                        the needle's haystack outscores that share of its same-length candidates,
                        which says nothing about whether it makes the top k.

Recommended chunk size = CHUNK_FACTOR x the headline break point (not for ``chunks-max@C`` and
``late-chunking@C``, whose length is the document's, not a chunk's).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from embedeval.aggregate import metric_series, with_later_columns
from embedeval.defaults import (
    DEFAULT_BREAK_K, DEFAULT_BREAK_METRIC, DEFAULT_BREAK_RULE, DEFAULT_BREAK_THRESHOLD, RELATIVE_BREAK_FRACTION,
)
from embedeval.errors import ConfigError
from embedeval.labels import scores_chunks
from embedeval.metrics import BREAK_METRICS, RETRIEVAL_MEASURES, break_point, recommended_chunk_tokens, relative_break_point

BREAK_RULES = ("relative", "absolute")
#: The recall@k a relative break point may be read from.
BREAK_KS = tuple(int(m.removeprefix("recall@")) for m in RETRIEVAL_MEASURES if m.startswith("recall@"))
SERIES_KEYS = ["embedder", "strategy", "query_form", "variant", "n_distractors", "n_needles", "own_question"]
BREAK_COLUMNS = [*SERIES_KEYS, "break_point", "relative_break_point", "absolute_break_point", "recommended_chunk_tokens",
                 "base_value", "best_length", "best_value", "auc_break_point"]


@dataclass(frozen=True)
class BreakRule:
    """How the headline break point is read (see the module docstring)."""

    rule: str = DEFAULT_BREAK_RULE
    k: int = DEFAULT_BREAK_K  # relative: recall@k
    metric: str = DEFAULT_BREAK_METRIC  # absolute: the metric ...
    threshold: float = DEFAULT_BREAK_THRESHOLD  # ... and the value it must keep
    fraction: float = RELATIVE_BREAK_FRACTION  # relative: share of the shortest length's value to keep

    def check(self) -> BreakRule:
        """One-line :class:`~embedeval.errors.ConfigError` for settings that cannot work."""
        if self.rule not in BREAK_RULES:
            raise ConfigError(f"unknown break rule {self.rule!r}; use one of {', '.join(BREAK_RULES)}")
        if self.k not in BREAK_KS:
            raise ConfigError(f"--break-k must be one of {', '.join(map(str, BREAK_KS))} (the recall@k measured), not {self.k}")
        if self.metric not in BREAK_METRICS:
            raise ConfigError(f"unknown break metric {self.metric!r}; use one of {', '.join(BREAK_METRICS)}")
        if not 0 < self.threshold <= 1:
            raise ConfigError(f"break threshold must be in (0, 1], not {self.threshold}")
        return self

    @property
    def recall_metric(self) -> str:
        return f"recall@{self.k}"

    @property
    def headline_metric(self) -> str:
        """The metric the headline rule reads."""
        return self.recall_metric if self.rule == "relative" else self.metric

    def relative_condition(self) -> str:
        return f"{self.recall_metric} >= {self.fraction} x its value at the shortest length"

    def absolute_condition(self) -> str:
        return f"{self.metric} >= {self.threshold}"

    def condition(self) -> str:
        """The headline rule in a few words."""
        return self.relative_condition() if self.rule == "relative" else self.absolute_condition()

    def meanings(self) -> list[str]:
        """One sentence per rule on what it means for a top-k retriever."""
        k = self.k
        return [f"**Relative** ({self.relative_condition()}): up to this length a top-{k} retriever finds the needle's "
                f"haystack among its {k} best candidates at least {self.fraction:.0%} as often as it does at the shortest "
                "length: the embedder's effective length, read against its own short-context score.",
                f"**Absolute** ({self.absolute_condition()}): up to this length {self.metric} stays at or above "
                f"{self.threshold}; for query_auc that means the needle's haystack outscores {self.threshold:.0%} of its "
                f"candidates on average, which a top-{k} retriever only notices when it also lands in the top {k}."]

    def holds_everywhere(self, lengths, values) -> bool:
        """Whether the headline rule holds at every length given (``values``: the headline
        metric per length)."""
        point = (relative_break_point(lengths, values, self.fraction) if self.rule == "relative"
                 else break_point(lengths, values, self.threshold))
        return point is not None and point == max(lengths)


def break_points(metrics: pd.DataFrame, rule: BreakRule | None = None) -> pd.DataFrame:
    """Per series (:data:`SERIES_KEYS`): the relative and the absolute break point, the headline
    one (``break_point``, by ``rule.rule``), the recommended chunk size, the headline metric at the
    shortest length (``base_value``), the best length and its value (the answer when no length
    keeps the rule), and the study's pooled-AUC break point (with the absolute threshold)."""
    rule = rule or BreakRule()
    metrics = with_later_columns(metrics)
    series = {name: {key: s for key, s in metric_series(metrics, name).groupby(SERIES_KEYS)}
              for name in {rule.recall_metric, rule.metric, "auc"}}
    rows = []
    for key in sorted(set(series[rule.recall_metric]) | set(series[rule.metric]), key=str):
        def point(name: str, read) -> int | None:
            found = series[name].get(key)
            return None if found is None or found.empty else read(found.sort_values("length"))

        relative = point(rule.recall_metric, lambda s: relative_break_point(s["length"], s["value"], rule.fraction))
        absolute = point(rule.metric, lambda s: break_point(s["length"], s["value"], rule.threshold))
        headline = series[rule.headline_metric].get(key)
        headline_point = relative if rule.rule == "relative" else absolute
        best = None if headline is None else headline.iloc[int(np.argmax(headline["value"].to_numpy()))]
        chunked = scores_chunks(key[1])  # its length is the document's, not a chunk's
        rows.append({**dict(zip(SERIES_KEYS, key)), "break_point": headline_point, "relative_break_point": relative,
                     "absolute_break_point": absolute,
                     "recommended_chunk_tokens": None if chunked else recommended_chunk_tokens(headline_point),
                     "base_value": None if headline is None else float(headline.sort_values("length")["value"].iloc[0]),
                     "best_length": None if best is None else int(best["length"]),
                     "best_value": None if best is None else float(best["value"]),
                     "auc_break_point": point("auc", lambda s: break_point(s["length"], s["value"], rule.threshold))})
    return pd.DataFrame(rows, columns=BREAK_COLUMNS)


def break_sentence(row, rule: BreakRule | None = None) -> str:
    """One line about a row of :func:`break_points`: the headline break point (or, when no
    length keeps the rule, the best length), the other rule's beside it, the pooled-AUC one."""
    rule = rule or BreakRule()

    def tokens(value) -> str:
        return "none" if value is None or pd.isna(value) else f"{int(value)} tokens"

    other = (f"absolute rule ({rule.absolute_condition()}): {tokens(row.absolute_break_point)}" if rule.rule == "relative"
             else f"relative rule ({rule.relative_condition()}): {tokens(row.relative_break_point)}")
    tail = f"; {other}; pooled-AUC break point {tokens(row.auc_break_point)}"
    if row.break_point is None or pd.isna(row.break_point):
        if row.best_length is None or pd.isna(row.best_length):
            return f"no {rule.headline_metric} measured{tail}"
        return (f"no length keeps {rule.condition()} (best: {int(row.best_length)} tokens at {row.best_value:.3f})"
                f"{tail}")
    chunk = row.recommended_chunk_tokens
    advice = "" if chunk is None or pd.isna(chunk) else f", recommended chunk {int(chunk)} tokens"
    base = "" if rule.rule != "relative" or pd.isna(row.base_value) else f" ({rule.recall_metric} {row.base_value:.3f} at the shortest)"
    return f"break point {int(row.break_point)} tokens by {rule.condition()}{base}{advice}{tail}"

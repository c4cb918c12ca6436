"""How a run reads its headline break point (:class:`BreakRule`: the relative or the absolute
rule, its recall@k, metric and threshold; :mod:`embedeval.breaks` reads the break points with it),
checked when a run's settings are, before any of the libraries the tables need is imported."""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Real

from embedeval.defaults import BASE_VISIBLE_SHARE, DEFAULT_BREAK_K, DEFAULT_BREAK_METRIC, DEFAULT_BREAK_RULE, DEFAULT_BREAK_THRESHOLD, RELATIVE_BREAK_FRACTION
from embedeval.errors import ConfigError
from embedeval.labels import BREAK_METRICS, RETRIEVAL_MEASURES

BREAK_RULES = ("relative", "absolute")
#: The recall@k a relative break point may be read from.
BREAK_KS = tuple(int(m.removeprefix("recall@")) for m in RETRIEVAL_MEASURES if m.startswith("recall@"))


@dataclass(frozen=True)
class BreakRule:
    """How the headline break point is read (see :mod:`embedeval.breaks`)."""

    rule: str = DEFAULT_BREAK_RULE
    k: int = DEFAULT_BREAK_K  # relative: recall@k
    metric: str = DEFAULT_BREAK_METRIC  # absolute: the metric ...
    threshold: float = DEFAULT_BREAK_THRESHOLD  # ... and the value it must keep
    fraction: float = RELATIVE_BREAK_FRACTION  # relative: share of the base to keep

    def check(self) -> BreakRule:
        """One-line :class:`~embedeval.errors.ConfigError` for settings that cannot work."""
        if self.rule not in BREAK_RULES:
            raise ConfigError(f"unknown break rule {self.rule!r}; use one of {', '.join(BREAK_RULES)}")
        if isinstance(self.k, bool) or self.k not in BREAK_KS:  # True == 1 would read recall@True
            raise ConfigError(f"`break_k` must be one of {', '.join(map(str, BREAK_KS))} (the recall@k measured), not {self.k}", "break_k")
        if self.metric not in BREAK_METRICS:
            raise ConfigError(f"unknown break metric {self.metric!r}; use one of {', '.join(BREAK_METRICS)}")
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, Real) or not 0 < self.threshold <= 1:  # "0.8", None: a TypeError
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
        return f"chance-corrected {self.recall_metric} >= {self.fraction} x the model's own mean over the shortest lengths"

    def absolute_condition(self) -> str:
        return f"{self.metric} >= {self.threshold}"

    def condition(self) -> str:
        """The headline rule in a few words."""
        return self.relative_condition() if self.rule == "relative" else self.absolute_condition()

    def meanings(self) -> list[str]:
        """One sentence per rule on what it means for a top-k retriever."""
        k = self.k
        return [f"**Relative** ({self.relative_condition()}): up to this length a top-{k} retriever finds the needle's "
                f"haystack among its {k} best candidates, above what a random ranking would, at least {self.fraction:.0%} as "
                "often as the model reading them itself does in the shortest haystacks (up to three lengths, each inside its "
                f"window, the needle visible in at least {BASE_VISIBLE_SHARE:.0%} of the haystacks): the embedder's effective "
                "length, read as NoLiMa reads it, against the model's own short-context score, one base for every strategy of "
                "an embedder, so their break points compare. No break point where that score is not shown above chance; \"≥ L\" "
                "where the rule holds to the longest length L measured.",
                f"**Absolute** ({self.absolute_condition()}): up to this length {self.metric} stays at or above "
                f"{self.threshold}, a fixed bar as RULER's effective length uses; for query_auc that means the needle's "
                f"haystack outscores {self.threshold:.0%} of its candidates on average, which a top-{k} retriever only "
                f"notices when it also lands in the top {k}."]

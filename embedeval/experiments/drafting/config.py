"""The settings of a needle draft (recorded in its output's provenance), checked with one line
each before anything is read or sent (:meth:`DraftConfig.validate`)."""

from __future__ import annotations

from dataclasses import dataclass

from embedeval.defaults import DEFAULT_ABSENCE_TOP_K, DEFAULT_DRAFT_PROMPT_CHUNKS, DEFAULT_DUPLICATE_COSINE
from embedeval.errors import ConfigError
from embedeval.llm import check_temperature, parse_chat_spec
from embedeval.options import ATTEMPTS, MIN_OUTSIDE_PERCENTILE, PER_THEME, TEMPERATURE, THRESHOLD, check_options, number_in, whole_at_least


@dataclass(frozen=True)
class DraftConfig:
    """Everything a draft depends on (recorded in the output's provenance)."""

    themes: str
    llm: str
    out: str
    per_theme: int = PER_THEME.field()
    theme_ids: tuple[int | str, ...] | None = None  # by number or by a top term (``writing``); None: every theme of the run
    attempts: int = ATTEMPTS.field()
    embedder: str | None = None  # needle-question similarity; None: the themes run's embedder
    nq_band: tuple[float, float] | None = None
    threshold: float = THRESHOLD.field()
    min_outside_percentile: float = MIN_OUTSIDE_PERCENTILE.field()
    absence_top_k: int = DEFAULT_ABSENCE_TOP_K
    duplicate_cosine: float = DEFAULT_DUPLICATE_COSINE
    prompt_chunks: int = DEFAULT_DRAFT_PROMPT_CHUNKS
    temperature: float = TEMPERATURE.field()
    judge: str | None = None  # a chat spec, as ``llm``: asks whether each one-hop and inverted needle answers; None: no judge

    def validate(self) -> None:
        """One-line :class:`~embedeval.errors.ConfigError` for settings that cannot work."""
        if self.judge is not None:
            try:
                parse_chat_spec(self.judge)  # a bad spec: one line, before anything is read
            except ConfigError as exc:
                raise ConfigError(f"`judge`: {exc}", "judge", *(p for p in exc.parameters if p != "llm")) from None
        check_temperature(self.temperature)
        check_options(self)  # per_theme, attempts, threshold, min_outside_percentile
        for parameter in ("absence_top_k", "prompt_chunks"):  # no flags of their own
            whole_at_least(1).check(getattr(self, parameter), parameter)
        if self.nq_band is not None:
            lo, hi = self.nq_band
            if not -1 <= lo <= hi <= 1:
                raise ConfigError(f"`nq_band` must be LO,HI with -1 <= LO <= HI <= 1, not {lo},{hi}", "nq_band")
        number_in(0, 1, low_open=True).check(self.duplicate_cosine, "duplicate_cosine")
        if self.theme_ids is not None and not self.theme_ids:
            raise ConfigError("`theme_ids` names no theme (leave it unset for every theme)", "theme_ids")
        names = [str(theme).strip().lower() for theme in self.theme_ids or ()]
        if len(set(names)) != len(names):
            repeated = next(theme for theme in names if names.count(theme) > 1)
            raise ConfigError(f"`theme_ids` names theme {repeated} twice in {','.join(map(str, self.theme_ids))}: each theme "
                              "is drafted once (`per_theme` sets how many groups)", "theme_ids", "per_theme")

    def check_rules(self) -> dict:
        """The settings of the checks, as the provenance records them."""
        return {"threshold": self.threshold, "min_outside_percentile": self.min_outside_percentile,
                "absence_top_k": self.absence_top_k, "duplicate_cosine": self.duplicate_cosine,
                "nq_band": list(self.nq_band) if self.nq_band else None}

"""The break point: the headline answer of a sweep ("up to which length does this embedder still
find the needle?") and the chunk size it recommends.

Two rules, both computed for every series (embedder x strategy x query form x variant x
distractor count x needle count x own question) and shown side by side:

``relative`` (default)  the largest length whose **chance-corrected** recall@k (``k``, default 5;
                        (r - k/n) / (1 - k/n), n the candidates per query) stays >= 0.85 x the
                        embedder's base: the mean over the shortest lengths the model reads whole
                        (inside its window, the needle visible in >= 95% of the needle haystacks; up
                        to three, never more than the shorter half of the grid;
                        :func:`~embedeval.metrics.break_estimators.visible_base_count`), read from the model's own
                        reading of them (``truncate``, or a strategy that reads such a haystack as
                        it does). **Every strategy of an embedder is held to that one base**
                        (:func:`break_points`), so their break points compare; none where the
                        shortest length is already past the window.
                        This is NoLiMa's reading (a model's effective length against a base score
                        from three short lengths), not RULER's (a fixed threshold: a reference
                        model's score), because an embedder's short-context recall differs from one
                        needle set and pool to the next. A series whose base is not above chance
                        (the lower end of its 95% cluster-bootstrap interval is <= 0) gets **no**
                        break point: the scorer does not find these needles even in short haystacks,
                        so a flat curve cannot pass for a long effective length. "At chance" is said
                        only where the interval reaches 0 with enough question groups (10, a t-test
                        that could have told); else the series "cannot be told from chance".
``absolute``            the largest length whose ``metric`` (default ``query_auc``) stays >= a fixed
                        ``threshold`` (default 0.8; :func:`~embedeval.metrics.break_estimators.break_point`): on average
                        the needle's haystack outscores that share of its same-length candidates,
                        which says nothing about whether it makes the top k.

The estimator (chosen by simulation, ``benchmarks/bench_break_estimator.py``): the rule is read on
every cluster-bootstrap resample of the question groups (every length of a resample draws the same
groups), through the non-increasing fit of the resample's means (:func:`break_resamples`), and the
headline is the longest length at least ``BREAK_SUPPORT`` (60%) of the resamples reach
(:func:`headline_break`): the length a clear majority gives, else the safer one. Its interval
(``break_point_lo``, ``break_point_hi``) is the 5th and 95th percentile of the same resamples, their
spread ``break_shares``; :func:`break_answer` is what every place that says the answer reads (in
the words of :mod:`embedeval.report.break_words`). Below 10 question groups there is no headline. :func:`break_points` writes
one row per series; a run keeps them in ``breaks.csv``.

A break point at the longest length of the grid is censored (``break_censored``): the series never
fell below its bar, so the effective length is at least that ("≥ 2048 tokens").

Recommended chunk size = CHUNK_FACTOR x the headline break point (not for a strategy that scores a
text by its best chunk, :func:`~embedeval.strategies.scores_chunks`, such as ``chunks-max@C``, whose
length is the document's, not a chunk's), capped for a strategy that reads
one window of a text (``truncate``, ``extend-*``) at the content tokens of that window (``chunk_capped``).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np
import pandas as pd

from embedeval.aggregate import metric_series
from embedeval.break_rule import BreakRule
from embedeval.defaults import BREAK_SUPPORT, DEFAULT_N_BOOTSTRAP, DEFAULT_SEED
from embedeval.group_means import group_means, group_table, resampled_means
from embedeval.labels import BLIND_PREFIX, RETRIEVAL_MEASURES, is_blind
from embedeval.metrics.break_estimators import (
    break_lengths,
    break_point,
    groups_for_chance_test,
    monotone_fit,
    recommended_chunk_tokens,
    relative_break_lengths,
    supported_break,
    t_test_greater,
    visible_base_count,
)
from embedeval.metrics.ranking import chance_corrected, chance_corrected_recall
from embedeval.schema import BREAK_COLUMNS, SERIES_KEYS
from embedeval.strategies import model_reading_rank, scores_chunks

#: What a series' relative rule could read (``relative_status``; see :func:`relative_break`).
OK, AT_CHANCE, TOO_FEW_GROUPS, UNCORRECTABLE, NO_RANKS = ("ok", "at chance", "too few groups", "cannot correct for chance",
                                                         "no rank table")
CANNOT_TELL, NOT_VISIBLE = "cannot tell from chance", "needle not visible"
#: What the relative rule's recall@k is corrected against: a random ranking's k/n, or, for a
#: several-needle haystack's own question, its own control's recall@k (the needle-blind level: the
#: other needles alone pull that control up, 17-22% in a top 5 where k/n is 8%).
RANDOM_RANKING, NEEDLE_BLIND = "k/n", "needle-blind control"
#: The percentiles of the bootstrapped break points that bound a break point's interval.
BREAK_INTERVAL = (0.05, 0.95)
#: The estimator a run's break points were read with, recorded in its config.json
#: (``break_estimator``): a ``breaks.csv`` of a run without it, or with another, was read by an earlier
#: one, and :meth:`embedeval.run.NolimaRun.breaks` reads the break points again from the rank table.
ESTIMATOR = "monotone fit, the length 60% of the resamples reach"
#: The share of resamples at which another break length than the reported one is named beside it
#: in the answer ("128 or 256 tokens (52% / 47% of resamples)").
RIVAL_SHARE = 0.2
#: The confidence of the base's interval (the at-chance test), as every other interval of a run.
BASE_CONFIDENCE = 0.95


@functools.cache
def chance_test_groups() -> int:
    """The question groups a base must have before "at chance" is said of it
    (:func:`~embedeval.metrics.break_estimators.groups_for_chance_test`: 10), worked out once, when first needed
    (scipy's t distributions take a second to import)."""
    return groups_for_chance_test()


def break_resamples(lengths: np.ndarray, sums: np.ndarray, counts: np.ndarray, bases, fraction: float,
                    n_resamples: int = DEFAULT_N_BOOTSTRAP, seed: int = DEFAULT_SEED, monotone: bool = True) -> np.ndarray:
    """The relative break point on every cluster-bootstrap resample b of the question groups, from
    a series' group table (sorted ``lengths``; ``sums``, ``counts``: (G, L) per group and length,
    :func:`~embedeval.group_means.group_table`) held to ``bases`` (the base on the same resamples,
    one per resample, or one for all): the rule of :func:`~embedeval.metrics.break_estimators.relative_break_lengths` on the resampled
    means m_b = w_b . S / w_b . N, read through their non-increasing fit weighted by the values
    behind each mean (``monotone``, :func:`~embedeval.metrics.break_estimators.monotone_fit`; without it, as
    before the estimator was chosen by simulation: the means themselves). 0: no break point."""
    means, drawn = resampled_means(sums, counts, n_resamples, seed)
    return relative_break_lengths(lengths, means, fraction, base=bases, monotone=monotone, weights=drawn)


def headline_break(points: np.ndarray) -> int | None:
    """The headline break point of a series from its resampled break points ``points`` (0: none;
    :func:`break_resamples`): the longest length at least :data:`BREAK_SUPPORT` of them reach
    (:func:`~embedeval.metrics.break_estimators.supported_break`), so the length most resamples give where one has a
    clear majority and the safer, shorter one where they split; None where that is none."""
    return supported_break(points, BREAK_SUPPORT) or None


def shares_text(points: np.ndarray) -> str | None:
    """The share of bootstrapped break points per length, shortest first ("none" for 0, no break
    point, first): "128:0.524;256:0.471;512:0.005". None for no resamples (an empty cell, as the
    CSV reads it back)."""
    points = np.asarray(points, dtype=np.int64)
    if points.size == 0:
        return None
    found, counts = np.unique(points, return_counts=True)
    return ";".join(f"{int(length) or 'none'}:{count / points.size:.3f}" for length, count in zip(found, counts, strict=True))


def parse_shares(text) -> dict[int | None, float]:
    """:func:`shares_text` read back: {length (None for none): share}; {} for "" or a missing value.
    Anything else than ``LENGTH:SHARE`` items (a length a positive whole number or ``none``, a
    share in [0, 1], each length once, the shares summing to 1) is a ValueError naming the item."""
    if not isinstance(text, str) or not text:
        return {}
    shares: dict[int | None, float] = {}
    for item in text.split(";"):
        length, colon, share = item.partition(":")
        try:
            key = None if length == "none" else int(length) if length.isascii() and length.isdigit() and int(length) > 0 else ""
            value = float(share) if colon else -1.0
        except ValueError:
            key, value = "", -1.0
        if key == "" or not 0 <= value <= 1 or key in shares:
            raise ValueError(f"{item!r} is not LENGTH:SHARE (a length in tokens or none, once each, and a share from 0 to 1)")
        shares[key] = value
    if abs(sum(shares.values()) - 1) > 0.01:  # each share is written to 3 decimals
        raise ValueError(f"the shares of {text!r} sum to {sum(shares.values()):.3f}, not 1")
    return shares


def _point_share(points: np.ndarray, point: int | None) -> float | None:
    """The share of bootstrapped break points equal to ``point`` (None: no resamples)."""
    return float(np.mean(np.asarray(points) == (point or 0))) if len(points) else None


def _interval(points: np.ndarray) -> tuple[int | None, int | None]:
    """The :data:`BREAK_INTERVAL` percentiles of bootstrapped break points (0 = none, the lowest),
    each an observed length, or None where it falls on "none"."""
    lo, hi = (int(np.quantile(points, q, method="inverted_cdf")) for q in BREAK_INTERVAL)
    return lo or None, hi or None


def _corrected_recall(rows: pd.DataFrame, rule: BreakRule, blind: pd.Series | None) -> np.ndarray:
    """Chance-corrected recall@k of each rank row: against k/n
    (:func:`~embedeval.metrics.ranking.chance_corrected_recall`), or against ``blind``, the needle-blind
    level per length (NaN where a length has none)."""
    recall = rows[rule.recall_metric].to_numpy(float)
    if blind is None:
        return chance_corrected_recall(recall, rule.k, rows["n_candidates"].to_numpy(float))
    return chance_corrected(recall, rows["length"].map(blind).to_numpy(float, na_value=np.nan))


#: What :func:`reading_base` gives every series held to it.
BASE_FIELDS = ("base_value", "base_ci_lo", "base_ci_hi", "base_p", "base_lengths", "at_chance", "relative_status")


def reading_base(rows: pd.DataFrame, rule: BreakRule, n_resamples: int = DEFAULT_N_BOOTSTRAP, seed: int = DEFAULT_SEED,
                 visible: pd.Series | None = None, blind: pd.Series | None = None, window: int | None = None,
                 groups: np.ndarray | None = None) -> dict:
    """The relative rule's base read from one series' rank rows (``length``, ``group_id``,
    ``recall@k``, ``n_candidates``): chance-corrected recall@k (:func:`_corrected_recall`) averaged
    over the base lengths, the shortest lengths of the rows (at most
    :func:`~embedeval.metrics.break_estimators.base_length_count`) where the scorer sees the needle in at least 95%
    of the needle haystacks (``visible``: the share per length; None: every length) and that fit
    ``window`` (the content tokens the model reads whole; None: any length),

        base = (1 / b) sum_{i <= b} mean_g c(g, l_i)      (c: a group's mean chance-corrected recall@k)

    with its 95% cluster-bootstrap interval (``groups``: the sorted group ids the resamples draw,
    shared with the series held to it), the p-value of a one-sided t-test of the groups' own bases
    against 0 and the base on every resample (``bases``). ``relative_status``:

    ``ok``                      a base above chance
    ``at chance``               shown at chance: the base's 95% cluster-bootstrap interval reaches 0
                                and the series has at least :func:`chance_test_groups` question groups
    ``cannot tell from chance`` not shown above chance (the t-test has p >= 0.025 while the
                                interval is above 0), nor at chance
    ``too few groups``          fewer question groups than :func:`chance_test_groups` (10): no
                                headline, whatever the p-value (with 2 groups alike it was 0)
    ``needle not visible``      no base length: the shortest length is past the window, or the
                                scorer misses the needle in more than 5% of its haystacks
    ``cannot correct for chance``  every pool has k or fewer candidates
    ``no rank table``           no rows
    """
    found = {"base_value": None, "base_ci_lo": None, "base_ci_hi": None, "base_p": None, "base_lengths": "",
             "at_chance": pd.NA, "relative_status": NO_RANKS, "bases": None}
    if rows.empty:
        return found
    lengths, sums, counts = group_table(rows, _corrected_recall(rows, rule, blind), groups)
    means = group_means(sums, counts)
    if not np.isfinite(means).any():
        return {**found, "relative_status": UNCORRECTABLE}
    shares = np.ones(lengths.size) if visible is None else visible.reindex(lengths).fillna(0.0).to_numpy(float)
    if window is not None:
        shares = np.where(lengths <= window, shares, 0.0)
    n_base = visible_base_count(shares)
    found["base_lengths"] = ",".join(map(str, lengths[:n_base]))
    if n_base == 0:
        return {**found, "relative_status": NOT_VISIBLE}
    with np.errstate(divide="ignore", invalid="ignore"):
        group_bases = np.nanmean(sums[:, :n_base] / counts[:, :n_base], axis=1) if (counts[:, :n_base] > 0).any() else np.zeros(0)
    group_bases = group_bases[np.isfinite(group_bases)]
    if group_bases.size < 2:
        return {**found, "relative_status": TOO_FEW_GROUPS}
    bases = resampled_means(sums, counts, n_resamples, seed)[0][:, :n_base].mean(axis=1)  # NaN: a resample drew no value there
    tail = (1 - BASE_CONFIDENCE) / 2
    base_lo, base_hi = (float(np.nanquantile(bases, q)) if np.isfinite(bases).any() else np.nan for q in (tail, 1 - tail))
    base = float(means[:n_base].mean())
    alike = np.ptp(group_bases) <= 1e-12 * max(1.0, float(np.abs(group_bases).max()))

    # every group alike: no spread to test against, so no p-value (not 0), and above chance where that one value is
    p = t_test_greater(group_bases) if not alike else math.nan
    above = np.isfinite(base) and base > 0 and base_lo > 0 and (p < tail if not alike else group_bases[0] > 0)
    enough = group_bases.size >= chance_test_groups()  # fewer: no headline, whatever a t-test of so few groups says
    shown_at_chance = not above and not base_lo > 0 and enough
    return {**found, "base_value": base, "base_ci_lo": base_lo, "base_ci_hi": base_hi, "base_p": p,
            "at_chance": True if shown_at_chance else False if above else pd.NA,
            "relative_status": TOO_FEW_GROUPS if not enough else OK if above else AT_CHANCE if shown_at_chance else CANNOT_TELL,
            "bases": bases if above and enough else None}


def relative_break(rows: pd.DataFrame, rule: BreakRule, n_resamples: int = DEFAULT_N_BOOTSTRAP,
                   seed: int = DEFAULT_SEED, visible: pd.Series | None = None, blind: pd.Series | None = None,
                   base: dict | None = None, groups: np.ndarray | None = None) -> dict:
    """The relative break point of one series from its rank rows (``length``, ``group_id``,
    ``recall@k``, ``n_candidates``), read on chance-corrected recall@k (:func:`_corrected_recall`;
    a length where no pool has more than k candidates has no value, and ends the run there): the
    largest length L with mean chance-corrected recall@k >= ``rule.fraction`` x the base at every
    length up to L, and the same on every cluster-bootstrap resample of the question groups (its
    interval, :data:`BREAK_INTERVAL`).

    ``base``: what :func:`reading_base` read from the embedder's own reading of short haystacks,
    with the same ``groups`` (so each resample holds the series to the base of the same groups);
    None: the series' own base, read from ``rows`` with ``visible``. ``blind``: per length, the
    needle-blind level of recall@k to correct against instead of k/n (a several-needle haystack's
    own control, :func:`break_points`). ``relative_status`` is the base's
    (:func:`reading_base`): a break point is read only where it is ``ok``.
    """
    empty = {"relative_break_point": None, "relative_lo": None, "relative_hi": None,
             **{field: None for field in BASE_FIELDS}, "base_lengths": "", "at_chance": pd.NA, "relative_status": NO_RANKS,
             "relative_best": None, "n_groups": 0, "relative_points": np.zeros(0, dtype=np.int64)}
    if rows.empty:
        return empty
    lengths, sums, counts = group_table(rows, _corrected_recall(rows, rule, blind), groups)
    means = group_means(sums, counts)
    found = {**empty, "n_groups": int(rows["group_id"].astype(str).nunique())}
    if not np.isfinite(means).any():
        return {**found, "relative_status": UNCORRECTABLE}
    best = int(np.nanargmax(means))
    found["relative_best"] = (int(lengths[best]), float(means[best]))
    base = reading_base(rows, rule, n_resamples, seed, visible, blind, groups=groups) if base is None else base
    found.update({field: base[field] for field in BASE_FIELDS})
    if base["relative_status"] != OK:
        return found
    points = break_resamples(lengths, sums, counts, base["bases"], rule.fraction, n_resamples, seed)
    point = headline_break(points)
    lo, hi = _interval(points) if point else (None, None)
    return {**found, "relative_break_point": point, "relative_lo": lo, "relative_hi": hi, "relative_points": points}


def absolute_resamples(rows: pd.DataFrame, rule: BreakRule, n_resamples: int = DEFAULT_N_BOOTSTRAP,
                       seed: int = DEFAULT_SEED) -> np.ndarray:
    """One series' absolute break point on every cluster-bootstrap resample of its question groups
    (0: none), from its rank rows, when the rule reads a per-query retrieval measure (else no
    resamples: an empty array), read as the relative rule is: on the non-increasing fit of each
    resample's means (:func:`~embedeval.metrics.break_estimators.monotone_fit`), so :func:`headline_break` gives its
    headline the same way."""
    if rule.metric not in RETRIEVAL_MEASURES or rows.empty:
        return np.zeros(0, dtype=np.int64)
    lengths, sums, counts = group_table(rows, rows[rule.metric].to_numpy(float))
    means, drawn = resampled_means(sums, counts, n_resamples, seed)
    return break_lengths(lengths, monotone_fit(means, drawn), rule.threshold)


def _visible_shares(metrics: pd.DataFrame) -> dict:
    """Per series key (:data:`~embedeval.schema.SERIES_KEYS`), the share of needle haystacks whose needle the scorer
    read, per length (``needle_visible_share`` of ``metrics``)."""
    return {key: s.set_index("length")["value"] for key, s in metric_series(metrics, "needle_visible_share").groupby(SERIES_KEYS)}


def _family(key: tuple) -> tuple:
    """A series key (:data:`~embedeval.schema.SERIES_KEYS`) less its strategy: the series one base serves."""
    return (key[0], *key[2:])


def base_series(keys) -> dict[tuple, tuple]:
    """Per family of series (:func:`_family`: one embedder, query form, variant, distractor and
    needle count, own question or not), the series whose readings give its base: the first
    strategy of :func:`~embedeval.strategies.model_reading_rank` in it (``truncate``, else ``windows-mean``,
    ...), which reads a haystack that fits the model's window as the model reads it. A family
    without one is not a key: each of its series keeps its own base."""
    chosen: dict[tuple, tuple] = {}
    for key in keys:
        rank = model_reading_rank(key[1])
        held = chosen.get(_family(key))
        if rank is not None and (held is None or (rank, str(key[1])) < (model_reading_rank(held[1]), str(held[1]))):
            chosen[_family(key)] = key
    return chosen


def break_points(metrics: pd.DataFrame, retrieval: pd.DataFrame | None, rule: BreakRule | None = None,
                 n_resamples: int = DEFAULT_N_BOOTSTRAP, seed: int = DEFAULT_SEED,
                 windows: dict[tuple[str, str], int] | None = None, model_windows: dict[str, int] | None = None) -> pd.DataFrame:
    """Per series (:data:`~embedeval.schema.SERIES_KEYS`, columns
    :data:`~embedeval.schema.BREAK_COLUMNS`): the relative break point (from the rank table
    ``retrieval``: without one, none) and the absolute one (from ``metrics``),
    the headline one (``break_point``, by ``rule.rule``) with its interval, the recommended chunk
    size, the relative rule's base (chance-corrected recall@k over ``base_lengths``, with its 95%
    interval, the p-value of the groups' t-test and ``at_chance``; ``relative_status``: what the
    rule could read, :func:`relative_break`), the best length of what the headline rule reads
    and its value (chance-corrected recall@k for the relative rule, the metric for the absolute
    one: the answer when no length keeps the rule), and the study's pooled-AUC break point (with
    the absolute threshold).

    **One base per embedder** (one yardstick): every strategy of an embedder (with the same query
    form, variant, distractor and needle count) is held to the base read from the model's own
    reading of short haystacks (:func:`base_series`: ``truncate``, else another strategy that
    reads a text inside the window as the model does; ``base_strategy``), over the shortest lengths
    that fit the model's window (``model_windows``: per embedder, the content tokens it reads whole,
    254 for all-MiniLM-L6-v2; none given: any length) where the needle is visible to the scorer
    (``needle_visible_share`` >= 0.95 in ``metrics``; a series without it, as other questions' rows,
    reads its own-question series'; without either, every length). Its value, lengths and interval
    are the same on every row of the embedder, and each resample holds every strategy to the base
    of the same question groups, so a strategy whose chance-corrected recall@k is at least
    another's at every length never gets the shorter break point. A family of series with no such
    reading (only chunks, say), or whose model reads no length of the grid whole (no base length
    inside its window), holds each series to its own base. A several-needle haystack's own
    question reads its recall@k against its own control's (the rank table's ``blind:`` rows,
    ``chance_level`` "needle-blind control"), every other series against k/n. ``break_censored``: the series
    kept its bar up to its longest length, so the break point is a lower bound ("≥ 2048 tokens").
    ``windows``: per embedder and strategy (the ``embedder`` and ``strategy`` columns) that read one
    window of a text (``truncate``, ``extend-*``), the content tokens of it the model reads (254 of
    all-MiniLM-L6-v2's 256: lengths count content tokens); the series' recommended chunk is capped
    there (``chunk_capped``), since the model reads nothing past it."""
    rule = rule or BreakRule()
    series = {name: {key: s for key, s in metric_series(metrics, name).groupby(SERIES_KEYS)}
              for name in {rule.recall_metric, rule.metric, "auc"}}
    ranks = {} if retrieval is None else dict(iter(retrieval.groupby(SERIES_KEYS)))
    blind_ranks = {key: r for key, r in ranks.items() if is_blind(key[3])}  # levels, not series
    ranks = {key: r for key, r in ranks.items() if key not in blind_ranks}
    visible = _visible_shares(metrics)
    windows, model_windows = windows or {}, model_windows or {}

    def shares_of(key: tuple) -> pd.Series | None:
        return visible.get(key, visible.get((*key[:-1], True)))  # other questions: their haystacks' own series

    def blind_of(key: tuple) -> pd.Series | None:
        blind_rows = blind_ranks.get((*key[:3], BLIND_PREFIX + str(key[3]), *key[4:]))
        return None if blind_rows is None else blind_rows.groupby("length")[rule.recall_metric].mean()

    readers = base_series(ranks)
    family_groups: dict[tuple, list] = {}
    for key, ranked in ranks.items():
        family_groups.setdefault(_family(key), []).extend(ranked["group_id"].astype(str).unique())
    family_groups = {family: np.unique(np.asarray(names, dtype=str)) for family, names in family_groups.items()}
    bases: dict[tuple, dict] = {}
    rows = []
    keys = (set(series[rule.recall_metric]) | set(series[rule.metric]) | set(ranks)) - set(blind_ranks)
    for key in sorted((key for key in keys if not is_blind(key[3])), key=str):
        def point(name: str, threshold: float, *, key=key) -> int | None:
            found = series[name].get(key)
            return None if found is None or found.empty else break_point(found["length"], found["value"], threshold)

        ranked = ranks.get(key, pd.DataFrame())
        family, blind = _family(key), blind_of(key)
        reader = readers.get(family)
        if reader is not None and family not in bases:
            bases[family] = reading_base(ranks[reader], rule, n_resamples, seed, shares_of(reader), blind_of(reader),
                                         model_windows.get(key[0]), family_groups[family])
        if reader is not None and bases[family]["relative_status"] == NOT_VISIBLE:
            reader = None  # the model reads no length of the grid whole: no yardstick, each series its own base
        relative = relative_break(ranked, rule, n_resamples, seed, shares_of(key), blind,
                                  None if reader is None else bases[family], None if reader is None else family_groups[family])
        absolute_points = absolute_resamples(ranked, rule, n_resamples, seed)
        # read as the relative rule where there are resamples (a per-query measure); the pooled AUC has none
        absolute = headline_break(absolute_points) if absolute_points.size else point(rule.metric, rule.threshold)
        if rule.rule == "relative":
            headline, (lo, hi) = relative["relative_break_point"], (relative["relative_lo"], relative["relative_hi"])
            points = relative["relative_points"]  # also where they give no headline: how they spread says why
        else:
            points = absolute_points
            headline, (lo, hi) = absolute, (_interval(points) if points.size and absolute else (None, None))
        if rule.rule == "relative":  # the best length of what the rule reads: chance-corrected recall@k
            best = relative["relative_best"]
        else:
            shown = series[rule.metric].get(key)
            top = None if shown is None or shown.empty else shown.iloc[int(np.argmax(shown["value"].to_numpy()))]
            best = None if top is None else (int(top["length"]), float(top["value"]))
        chunked = scores_chunks(key[1])  # its length is the document's, not a chunk's
        window = windows.get((key[0], key[1]))  # the content tokens of the one window the model reads of a text
        chunk = None if chunked else recommended_chunk_tokens(headline)
        capped = None if chunk is None else recommended_chunk_tokens(headline, window)
        read = ranked if rule.rule == "relative" else series[rule.metric].get(key)
        longest = None if read is None or read.empty else int(read["length"].max())
        rows.append({**dict(zip(SERIES_KEYS, key, strict=True)), "break_point": headline, "break_point_lo": lo, "break_point_hi": hi,
                     "break_censored": headline is not None and headline == longest,
                     "n_groups": relative["n_groups"], "window": window,
                     "chance_level": RANDOM_RANKING if blind is None else NEEDLE_BLIND,
                     "chunk_capped": chunk is not None and capped < chunk,
                     "recommended_chunk_tokens": capped,
                     "relative_break_point": relative["relative_break_point"], "absolute_break_point": absolute,
                     **{c: relative[c] for c in ("relative_status", "base_value", "base_ci_lo", "base_ci_hi", "base_p",
                                                 "base_lengths", "at_chance")},
                     "best_length": None if best is None else best[0], "best_value": None if best is None else best[1],
                     "auc_break_point": point("auc", rule.threshold),
                     "break_shares": shares_text(points), "break_point_share": _point_share(points, headline),
                     "base_strategy": key[1] if reader is None else reader[1]})
    table = pd.DataFrame(rows, columns=BREAK_COLUMNS)
    return table.assign(at_chance=table["at_chance"].astype("boolean"))  # true, false or unknown (cannot tell)


class BreakAnswer(NamedTuple):
    """What a row of :func:`break_points` answers, as every place that says it reads it
    (:func:`break_answer`): the headline ``length`` (None: none), the share of resamples of the
    question groups that give it (``share``) and that reach it or a longer length (``reach``),
    and, where no length has a clear majority (``share`` < :data:`BREAK_SUPPORT`), the ``likely``
    lengths (each given by at least :data:`RIVAL_SHARE` of the resamples; None: no break point),
    shortest first. ``settled``: one length has the majority (or the row predates the shares)."""

    length: int | None
    share: float | None
    reach: float | None
    likely: tuple[tuple[int | None, float], ...]

    @property
    def settled(self) -> bool:
        return not self.likely


def share_reaching(shares: dict, length: int | None) -> float:
    """The share of resamples whose break point is ``length`` or longer, from :func:`parse_shares`'
    {length (None: none): share}: sum_{L' >= L} share(L'), none counted as 0."""
    return sum(value for found, value in shares.items() if (found or 0) >= (length or 0))


def break_answer(row) -> BreakAnswer:
    """A row's answer (:class:`BreakAnswer`), from its ``break_point`` and ``break_shares``."""
    length = None if pd.isna(row.break_point) else int(row.break_point)
    shares = parse_shares(getattr(row, "break_shares", None))
    if not shares:
        return BreakAnswer(length, None, None, ())
    share = shares.get(length, 0.0)
    reach = share_reaching(shares, length)
    likely = tuple(sorted(((found, value) for found, value in shares.items() if value >= RIVAL_SHARE), key=lambda item: item[0] or 0))
    return BreakAnswer(length, share, reach, likely if share < BREAK_SUPPORT - 1e-9 and len(likely) > 1 else ())

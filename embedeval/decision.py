"""Which to use, at every length: the decision table a run keeps in
``decision.csv``, and what it costs to read documents each way (``timings.csv``).

For every haystack length ``L`` of a run and every reading of its documents, an (embedder,
strategy) series of the headline rows (:func:`headline_ranks`: the main variant's needles asked by
their own question, one needle per haystack, the run's fewest distractors: the rows the report's
answers read), :func:`decision_table` gives one row:

``recall``, ``recall_lo``, ``recall_hi``
    chance-corrected recall@k (k: the break rule's, default 5) of the series' rows at ``L`` and
    its 95% cluster-bootstrap percentile interval::

        r_cc = (1[rank <= k] - k/n) / (1 - k/n)        (:func:`~embedeval.metrics.ranking.chance_corrected_recall`)
        recall = sum_g S_g / sum_g N_g                    S_g, N_g: sum and count of r_cc in question group g
        recall_b = w_b . S / w_b . N                      w_b: how often resample b drew each group

    the mean breaks.csv reads (its ``best_value`` is this at its ``best_length``; the group table
    and resampled means are :mod:`embedeval.breaks`'), over resamples drawn once for every series
    and length (:func:`~embedeval.metrics.bootstrap.cluster_resamples`: the run's resamples and seed); the
    interval is the 2.5th and 97.5th percentile of ``recall_b``;
``diff_to_best``, ``diff_lo``, ``diff_hi``
    ``recall - recall(best)`` and the percentile interval of ``recall_b - recall_b(best)``: paired,
    both read on the same resampled questions and haystacks;
``tied_with_best``
    the difference's interval reaches 0 (``diff_lo <= 0 <= diff_hi``): the two cannot be told
    apart; also where there is no interval to tell by (fewer than two question groups); the best
    itself: difference 0, tied;
``best``
    the series recommended at ``L``: the highest recall; of equal ones (a 128-token document
    reads the same by ``truncate`` and ``windows-mean``) one that no other series beats at one
    length while matching it at every other (:func:`dominates`), then the cheaper, then by name;
    so no series is recommended over another at least as good at every length;
``vectors_per_document``
    what a retriever stores for one document of ``L`` tokens (:func:`vectors_per_document`);
``seconds_per_million_tokens``, ``usd_per_million_tokens``
    what reading a million tokens of ``L``-token documents costs (:func:`reading_costs`);
``n_groups``
    the question groups with a value at ``L``.

A length where recall@k cannot be corrected for chance (no pool holds more than k candidates)
has no rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from embedeval import strategies
from embedeval.aggregate import fewest_distractors, main_variant, one_needle
from embedeval.breaks import BASE_CONFIDENCE, BreakRule
from embedeval.defaults import DEFAULT_N_BOOTSTRAP, DEFAULT_SEED
from embedeval.group_means import group_means, group_table, resampled_means
from embedeval.labels import QUESTION, is_blind
from embedeval.metrics.ranking import chance_corrected_recall
from embedeval.schema import DECISION_COLUMNS, N_DISTRACTORS, N_NEEDLES, OWN_QUESTION, QUERY_FORM, READING, READING_AT_LENGTH, SCORER, TIMING_COLUMNS
from embedeval.strategies import model_reading_count, model_reading_rank

#: What a decision reads of the rank table, besides recall@k.
RANK_COLUMNS = (*SCORER, "variant", "length", "group_id", N_DISTRACTORS, N_NEEDLES, OWN_QUESTION, "n_candidates", "haystack_id",
                "score", "rank")
#: Recall values this close are equal (the same rows summed in another order).
EQUAL = 1e-12
#: Two readings of one embedder whose scores of every needle haystack at a length differ by at most
#: this (cosine similarity), with equal ranks, read the same vectors there (:func:`same_readings`):
#: ``extend-gp@1026`` and ``truncate`` of a 128-token haystack differ by 2.1e-7, the float rounding
#: of another computation path, while two readings that see other tokens differ by 1e-3 and more.
SAME_SCORE = 1e-5
#: Two measured speeds whose larger is under this many times the smaller are "about the same time"
#: (:func:`about_the_same_time`): the timings are wall seconds of one pass per reading mode on a
#: machine that does other work; identical computations measured at different moments came out
#: 1.3 x apart.
TIMING_NOISE = 1.5


def vectors_per_document(strategy: str, length: int, frame_tokens: int = 0) -> int:
    """The vectors a retriever stores for one document of ``length`` content tokens read by
    ``strategy`` (:func:`embedeval.strategies.vectors_per_document`: one, or one per chunk, counted
    in content tokens: ``ceil(length / (C - frame_tokens))`` for ``chunks-max@C``, whose ``C``
    counts the model's ``frame_tokens`` special tokens: 9 for ``chunks-max@128`` of
    all-MiniLM-L6-v2 (126 content tokens a chunk) and a 1,024-token document)."""
    for name, value, least in (("a document length", length, 1), ("a model's frame", frame_tokens, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
            raise ValueError(f"{name} is a whole number of tokens >= {least}, not {value!r}")
    return strategies.vectors_per_document(strategy, int(length), int(frame_tokens))


def reading_mode(strategy: str) -> str:
    """Which of a model's speeds a strategy's cost reads (:func:`embedeval.strategies.reading_mode`):
    :data:`~embedeval.strategies.PLAIN` for inputs of at most the model's window, measured together,
    so a strategy whose inputs another one embedded first still has one; the strategy itself for a
    model pass of another kind."""
    return strategies.reading_mode(strategy)


def headline_ranks(retrieval: pd.DataFrame) -> pd.DataFrame:
    """The rows of a rank (or similarity) table the decision reads: one needle per haystack asked
    its own question in the question form, of the main variant (one-hop where the run has it), at
    the run's fewest distractors: the series of the report's answers
    (:func:`~embedeval.report.tables.headline_breaks`)."""
    rows = one_needle(retrieval)
    rows = rows[(rows[QUERY_FORM] == QUESTION) & ~rows["variant"].map(is_blind)]
    return rows if rows.empty else fewest_distractors(rows[rows["variant"] == main_variant(rows)])


def simplicity(label) -> tuple[int, str]:
    """How simple a reading is, simplest first: the model's own readings by
    :func:`~embedeval.strategies.model_reading_rank` (``truncate`` first, then ``windows-mean``,
    ``full-text``, the context extensions), then every other reading (chunks, late chunking); of
    equal rank, by label."""
    rank = model_reading_rank(label)
    return (model_reading_count() if rank is None else rank, str(label))


#: What identifies a row of a rank table within one series (its haystack, question and form).
ROW_KEYS = (QUERY_FORM, "variant", "group_id", "haystack_id", OWN_QUESTION, N_DISTRACTORS, N_NEEDLES, "depth")


def same_readings(retrieval: pd.DataFrame, tolerance: float = SAME_SCORE) -> pd.DataFrame:
    """Which readings of one embedder read the same vectors at a length: per (embedder, length),
    two series are the same reading there when their rows of the rank table, matched by haystack,
    question and form (:data:`ROW_KEYS`), hold the same rows with equal ranks and scores within
    ``tolerance``::

        same(a, b)  <=>  rank_a = rank_b  and  |score_a - score_b| <= tolerance   on every row

    Series are taken simplest first (:func:`simplicity`); each is the same as the first simpler one
    it matches, else its own. Returns ``embedder``, ``strategy``, ``length`` and ``same_as``: the
    simplest reading it is the same as (its own strategy where none is simpler)."""
    keys = [c for c in ROW_KEYS if c in retrieval.columns]
    out = []
    for (embedder, length), rows in retrieval.groupby(["embedder", "length"], sort=True):
        seen: list[tuple[str, pd.DataFrame]] = []
        for strategy in sorted(rows["strategy"].astype(str).unique(), key=simplicity):
            mine = rows[rows["strategy"] == strategy].sort_values(keys, kind="stable")
            found = next((label for label, theirs in seen if _same_rows(mine, theirs, keys, tolerance)), None)
            if found is None:
                seen.append((strategy, mine))
            out.append({"embedder": embedder, "strategy": strategy, "length": int(length), "same_as": found or strategy})
    return pd.DataFrame(out, columns=[*READING_AT_LENGTH, "same_as"])


def _same_rows(a: pd.DataFrame, b: pd.DataFrame, keys: list[str], tolerance: float) -> bool:
    """Whether two series' rows (sorted by ``keys``) are the same rows, ranked alike, scored within ``tolerance``."""
    if len(a) != len(b) or not a[keys].reset_index(drop=True).equals(b[keys].reset_index(drop=True)):
        return False
    sa, sb = a["score"].to_numpy(float), b["score"].to_numpy(float)
    close = (np.abs(sa - sb) <= tolerance) | (np.isnan(sa) & np.isnan(sb))
    return bool(close.all() and np.array_equal(a["rank"].to_numpy(), b["rank"].to_numpy()))


def about_the_same_time(a: float, b: float) -> bool:
    """Whether two measured costs in seconds are inside the timing noise: the larger under
    :data:`TIMING_NOISE` x the smaller (both > 0)."""
    return bool(a > 0 and b > 0 and max(a, b) < TIMING_NOISE * min(a, b))


def dominates(a, b) -> bool:
    """Whether the recalls ``a`` (one per length) are at least ``b``'s at every length both have
    (finite in both) and above at one: ``b`` is never the better choice."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"recalls of different lengths ({a.shape} vs {b.shape})")
    both = np.isfinite(a) & np.isfinite(b)
    return bool(both.any() and np.all(a[both] >= b[both] - EQUAL) and np.any(a[both] > b[both] + EQUAL))


def cheapest(costs: np.ndarray, pool: list[int]) -> list[int]:
    """The series of ``pool`` whose cost is the lowest (``costs``: (series, 2) seconds and USD): by
    USD where all of ``pool`` have a price (a price times the tokens read: no noise), else by
    seconds where all have them, those :func:`about_the_same_time` as the fastest counting as
    fastest too (the timings' noise decides nothing), else all of ``pool``."""
    usd, seconds = costs[pool, 1], costs[pool, 0]
    if np.isfinite(usd).all():
        return [i for i, cost in zip(pool, usd, strict=True) if cost <= usd.min() + EQUAL]
    if np.isfinite(seconds).all():
        return [i for i, cost in zip(pool, seconds, strict=True) if cost <= seconds.min() or about_the_same_time(cost, seconds.min())]
    return list(pool)


def pick_best(means: np.ndarray, j: int, costs: np.ndarray, names: Sequence, same: Sequence[int] | None = None) -> int | None:
    """The best series at length ``j`` of ``means`` ((series, lengths) recalls): of the series that
    are their own reading there (``same``: per series, the index of the simplest series it is the
    same reading as at ``j``, :func:`same_readings`; None: each its own), the highest; of equal
    ones, one no other reading dominates (:func:`dominates`; a series the same as it at ``j`` is no
    other reading), then the simplest (:func:`simplicity`: the model's own reading before the others,
    ``truncate`` first), then the cheapest beyond the timing noise (:func:`cheapest`, ``costs``:
    (series, 2) seconds and USD at ``j``), then the first by ``names`` ((embedder, strategy)
    pairs). None where no series has a value there."""
    same = list(range(len(means))) if same is None else [int(k) for k in same]
    column = means[:, j]
    own = np.isfinite(column) & (np.array(same) == np.arange(len(means)))
    if not own.any():
        return None
    top = column[own].max()
    equal = [int(i) for i in np.flatnonzero(own & (column >= top - EQUAL))]
    undominated = [i for i in equal if not any(dominates(means[o], means[i]) for o in range(len(means)) if o != i and same[o] != i)]
    pool = undominated or equal
    rank = {i: simplicity(names[i][1] if isinstance(names[i], tuple) else None)[0] for i in pool}
    pool = [i for i in pool if rank[i] == min(rank.values())]
    return min(cheapest(costs, pool), key=lambda i: str(names[i]))


def _interval(values: np.ndarray, enough: bool) -> tuple[float, float]:
    """The :data:`~embedeval.breaks.BASE_CONFIDENCE` percentile interval of the finite resampled
    ``values``; NaN where there are none or not ``enough`` groups to resample."""
    values = values[np.isfinite(values)]
    if not enough or not values.size:
        return math.nan, math.nan
    tail = (1 - BASE_CONFIDENCE) / 2
    lo, hi = np.quantile(values, [tail, 1 - tail])
    return float(lo), float(hi)


def decision_table(retrieval: pd.DataFrame, rule: BreakRule | None = None, n_resamples: int = DEFAULT_N_BOOTSTRAP,
                   seed: int = DEFAULT_SEED, timings: pd.DataFrame | None = None,
                   prices: Mapping[str, float] | None = None, similarities: pd.DataFrame | None = None,
                   frame_tokens: Mapping[str, int] | None = None) -> pd.DataFrame:
    """The decision table of a rank table (see the module docstring): one row per length and
    (embedder, strategy) series of :func:`headline_ranks`, columns :data:`~embedeval.schema.DECISION_COLUMNS`, by
    length, embedder and strategy. ``rule``: the break rule whose k recall@k reads; ``n_resamples``
    and ``seed``: the cluster bootstrap's (a run's); ``timings``: the run's ``timings.csv``
    (:func:`timing_table`) and ``prices``: USD per million tokens per embedder (``--price``), for
    the cost columns (:func:`reading_costs`; empty without them) and ``share_read``;
    ``similarities``: the run's similarity table, for ``needle_visible`` (empty without it);
    ``frame_tokens``: per embedder, the special tokens and prompt of its inputs, which a
    ``chunks-max@C`` chunk leaves to content less (:func:`vectors_per_document`; 0 where not given).
    A rank table lacking a column, fewer than one resample or a price below 0 is a ValueError."""
    rule = (rule or BreakRule()).check()
    if not isinstance(retrieval, pd.DataFrame):
        raise ValueError(f"the rank table must be a DataFrame, not {type(retrieval).__name__}")
    missing = [c for c in (*RANK_COLUMNS, rule.recall_metric) if c not in retrieval.columns]
    if missing:
        raise ValueError(f"the rank table lacks the column(s) {', '.join(missing)}")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a whole number >= 1, not {n_resamples!r}")
    rows = headline_ranks(retrieval)
    rows = rows[np.isfinite(rows["n_candidates"].to_numpy(float))]
    if rows.empty:
        return pd.DataFrame(columns=DECISION_COLUMNS)
    corrected = chance_corrected_recall(rows[rule.recall_metric].to_numpy(float), rule.k, rows["n_candidates"].to_numpy(float))
    embedders, strategies = rows["embedder"].astype(str).to_numpy(), rows["strategy"].astype(str).to_numpy()
    names = sorted(set(zip(embedders, strategies, strict=True)))
    means, resampled, groups = [], [], []
    for embedder, strategy in names:  # every series on every group and length of the rows: one draw of groups for all
        lengths, sums, counts = group_table(rows, np.where((embedders == embedder) & (strategies == strategy), corrected, np.nan))
        means.append(group_means(sums, counts))
        resampled.append(resampled_means(sums, counts, int(n_resamples), seed)[0])
        groups.append((counts > 0).sum(axis=0))
    means, resampled, groups = np.array(means), np.array(resampled), np.array(groups)
    costs = reading_costs(timings, prices).set_index(READING_AT_LENGTH)
    shares = read_shares(timings).set_index(READING_AT_LENGTH)["share_read"]
    visible = visible_shares(similarities).set_index(READING_AT_LENGTH)["needle_visible"]
    same_as = same_readings(retrieval[retrieval["length"].isin(lengths)]).set_index(READING_AT_LENGTH)["same_as"]
    frames = dict(frame_tokens or {})
    out = []
    for j, length in enumerate(lengths):
        length = int(length)
        simplest = [same_as.get((e, s, length), s) for e, s in names]
        same = [names.index((e, label)) if (e, label) in names else i for i, ((e, _), label) in enumerate(zip(names, simplest, strict=True))]
        cost = np.array([[costs[c].get((e, s, length), math.nan) for c in ("seconds_per_million_tokens", "usd_per_million_tokens")]
                         for e, s in names], dtype=float)[same]  # one reading, one cost: the simplest's
        best = pick_best(means, j, cost, names, same)
        if best is None:
            continue
        for i, (embedder, strategy) in enumerate(names):
            if not groups[i, j]:
                continue
            lo, hi = _interval(resampled[i, :, j], groups[i, j] >= 2)
            if i == best:
                diff, diff_lo, diff_hi, tied = 0.0, 0.0, 0.0, True
            else:
                diff = float(means[i, j] - means[best, j])
                diff_lo, diff_hi = _interval(resampled[i, :, j] - resampled[best, :, j], min(groups[i, j], groups[best, j]) >= 2)
                tied = bool(np.isnan(diff_lo) or diff_lo <= 0 <= diff_hi)
            out.append({"length": length, "embedder": embedder, "strategy": strategy, "recall": float(means[i, j]),
                        "recall_lo": lo, "recall_hi": hi, "diff_to_best": diff, "diff_lo": diff_lo, "diff_hi": diff_hi,
                        "tied_with_best": tied, "vectors_per_document": vectors_per_document(strategy, length, frames.get(embedder, 0)),
                        "seconds_per_million_tokens": cost[i, 0], "usd_per_million_tokens": cost[i, 1],
                        "best": i == best, "n_groups": int(groups[i, j]), "same_as": simplest[i],
                        "share_read": shares.get((embedder, strategy, length), math.nan),
                        "needle_visible": visible.get((embedder, strategy, length), math.nan)})
    return pd.DataFrame(out, columns=DECISION_COLUMNS)


def read_shares(timings: pd.DataFrame | None) -> pd.DataFrame:
    """Per (embedder, strategy, length) of ``timings`` (:func:`timing_table`), the share of each
    document's tokens the reading sees::

        share_read = min(1, tokens_read / document_tokens)

    ``truncate`` 254 / 2,048 = 0.12 of 2,048-token documents; 1 for a reading that reads every token
    (``windows-mean``, ``chunks-max``; late chunking's overlapping windows read some twice, still
    every token once). Empty without timings."""
    columns = [*READING_AT_LENGTH, "share_read"]
    if timings is None or timings.empty:
        return pd.DataFrame(columns=columns)
    share = np.minimum(1.0, timings["tokens_read"].to_numpy(float) / timings["document_tokens"].to_numpy(float))
    return timings.assign(length=timings["length"].astype(int), share_read=share)[columns]


def visible_shares(similarities: pd.DataFrame | None) -> pd.DataFrame:
    """Per (embedder, strategy, length) of a similarity table, the share of its headline needle
    haystacks (:func:`headline_ranks`: the rows the decision reads) whose needle the reading saw
    (``needle_visible``): 0.20 for ``truncate``'s 254 tokens of 2,048-token haystacks. Empty without
    a similarity table."""
    columns = [*READING_AT_LENGTH, "needle_visible"]
    if similarities is None or similarities.empty or "needle_visible" not in similarities.columns:
        return pd.DataFrame(columns=columns)
    rows = headline_ranks(similarities)
    rows = rows.assign(seen=rows["needle_visible"].astype(float), length=rows["length"].astype(int))
    return rows.groupby(READING_AT_LENGTH, as_index=False)["seen"].mean().rename(columns={"seen": "needle_visible"})


def timing_table(readings: Sequence[Mapping]) -> pd.DataFrame:
    """A run's ``timings.csv`` (:data:`~embedeval.schema.TIMING_COLUMNS`) from what its scorers read: one mapping per
    scorer with its ``embedder`` and ``strategy``, arrays over the texts it read (``length``,
    ``document_tokens``: each document's tokens, ``tokens_read``: the tokens the model read of it),
    and ``seconds`` and ``tokens``: the model's wall seconds on the inputs it embedded in the run
    (cache misses) and their tokens (None: not measured). One row per (embedder, strategy, length):
    the documents, their tokens and the tokens read of them, and the speed of the embedder's
    :func:`reading_mode`: ``model_seconds`` and ``model_tokens`` summed over its scorers of that
    mode (empty where none of them embedded anything in the run: every vector came from the cache)."""
    rows, speeds = [], {}
    for reading in readings:
        lengths = np.asarray(reading["length"], dtype=np.int64)
        document, read = (np.asarray(reading[k], dtype=np.int64) for k in ("document_tokens", "tokens_read"))
        if not lengths.shape == document.shape == read.shape:
            raise ValueError(f"{reading['embedder']} [{reading['strategy']}]: length, document_tokens and tokens_read "
                             "need one value per text")
        mode = (reading["embedder"], reading_mode(reading["strategy"]))
        seconds, tokens = reading.get("seconds"), reading.get("tokens")
        if seconds is not None and tokens:
            total = speeds.get(mode, (0.0, 0))
            speeds[mode] = (total[0] + float(seconds), total[1] + int(tokens))
        for length in np.unique(lengths):
            at = lengths == length
            rows.append({"embedder": reading["embedder"], "strategy": reading["strategy"], "length": int(length),
                         "documents": int(at.sum()), "document_tokens": int(document[at].sum()), "tokens_read": int(read[at].sum()),
                         "mode": mode})
    table = pd.DataFrame(rows, columns=[*TIMING_COLUMNS[:-2], "mode"])
    speed = [speeds.get(mode, (math.nan, math.nan)) for mode in table["mode"]]
    return table.drop(columns="mode").assign(model_seconds=[round(s, 6) for s, _ in speed],
                                             model_tokens=pd.array([None if math.isnan(t) else int(t) for _, t in speed],
                                                                   dtype="Int64"))[TIMING_COLUMNS]


def with_earlier_speeds(timings: pd.DataFrame, earlier: pd.DataFrame | None) -> pd.DataFrame:
    """``timings`` whose (embedder, strategy) rows have no speed take the one an earlier run into the
    same folder measured for them (its ``timings.csv``, ``earlier``): a rerun whose vectors all came
    from the cache keeps the speed measured when they were embedded."""
    if earlier is None or earlier.empty or not timings["model_tokens"].isna().any():
        return timings
    measured = earlier.dropna(subset=["model_seconds", "model_tokens"])
    found = measured.drop_duplicates(READING).set_index(READING)
    out = timings.copy()
    for i, row in out[out["model_tokens"].isna()].iterrows():
        if (row["embedder"], row["strategy"]) in found.index:
            then = found.loc[(row["embedder"], row["strategy"])]
            out.loc[i, "model_seconds"], out.loc[i, "model_tokens"] = float(then["model_seconds"]), int(then["model_tokens"])
    return out


def reading_costs(timings: pd.DataFrame | None, prices: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Per (embedder, strategy, length) of ``timings`` (:func:`timing_table`), what reading a
    million tokens of documents of that length costs::

        seconds_per_million_tokens = model_seconds / model_tokens x tokens_read / document_tokens x 1e6
        usd_per_million_tokens     = price x tokens_read / document_tokens

    the model's seconds per token measured on what it embedded in the run, times the tokens the
    strategy has it read per document token (``truncate`` reads its window of a longer document,
    254 of 2,048 tokens; ``windows-mean`` and ``chunks-max`` every token; a strategy whose windows
    overlap, the overlaps again), and the embedder's ``price``, USD per million tokens it is sent
    (``--price``). Empty where there is no measured speed, or no price."""
    columns = [*READING_AT_LENGTH, "seconds_per_million_tokens", "usd_per_million_tokens"]
    prices = dict(prices or {})
    for name, price in prices.items():
        if isinstance(price, bool) or not isinstance(price, (int, float)) or not 0 <= price < math.inf:
            raise ValueError(f"the price of {name} must be a number of USD >= 0, not {price!r}")
    if timings is None or timings.empty:
        return pd.DataFrame(columns=columns)
    share = timings["tokens_read"].to_numpy(float) / timings["document_tokens"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        speed = timings["model_seconds"].to_numpy(float) / timings["model_tokens"].to_numpy(float, na_value=np.nan)
    price = timings["embedder"].map(prices).to_numpy(float, na_value=np.nan)
    return pd.DataFrame({"embedder": timings["embedder"], "strategy": timings["strategy"], "length": timings["length"].astype(int),
                         "seconds_per_million_tokens": np.where(np.isfinite(speed), speed * share * 1e6, np.nan),
                         "usd_per_million_tokens": price * share})[columns]


def length_summary(token_counts) -> dict[str, int]:
    """How long a corpus's documents are: ``documents``, the ``median`` and the 90th percentile
    (``p90``) of their token counts (numpy's linear percentiles, rounded to whole tokens)."""
    counts = np.asarray(token_counts, dtype=float).ravel()
    if not counts.size or not np.isfinite(counts).all() or (counts < 0).any():
        raise ValueError("token counts must be one or more finite numbers >= 0")
    return {"documents": int(counts.size), "median": int(round(float(np.median(counts)))),
            "p90": int(round(float(np.percentile(counts, 90))))}


def bracketing_lengths(lengths: Sequence[int], values: Sequence[float]) -> list[int]:
    """The grid ``lengths`` that bracket each of ``values`` (the longest length at or below it and
    the shortest at or above it: one where it lies on the grid or outside it), in the order of
    ``values``, each once: ``[1024, 2048, 4096, 8192]`` for a median of 1,830 and a 90th percentile of
    5,200 on the default grid."""
    grid = sorted(int(length) for length in lengths)
    found: list[int] = []
    for value in values:
        below = [length for length in grid if length <= value]
        above = [length for length in grid if length >= value]
        for length in ([below[-1]] if below else []) + ([above[0]] if above else []):
            if length not in found:
                found.append(length)
    return found

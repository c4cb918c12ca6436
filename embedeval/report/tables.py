"""The report's tables and sentences, computed from the metrics and similarity tables (no
rendering: :mod:`embedeval.report.markdown` and :mod:`embedeval.report.html` render them)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from embedeval.aggregate import fewest_distractors, main_variant, metric_series, one_needle, pair_with_controls
from embedeval.breaks import BreakAnswer, BreakRule, break_answer, parse_shares
from embedeval.defaults import BREAK_SUPPORT, CHUNK_FACTOR
from embedeval.labels import ALL, BLIND_PREFIX, CONTROL, NEGATIVE, QUESTION, is_blind
from embedeval.metrics.ranking import recall_chance
from embedeval.report.break_words import interval_text, likely_words, percent, shares_words, support_words, tokens_text, why_no_break
from embedeval.schema import N_DISTRACTORS, N_NEEDLES, OWN_QUESTION, QUERY_FORM, SERIES_KEYS
from embedeval.strategies import scores_chunks
from embedeval.strategies.chunks import chunk_size

#: The column of :func:`best_form_table` naming each embedder's best query form at a length.
BEST_FORM = f"best_{QUERY_FORM}"


def best_form_table(metrics: pd.DataFrame, variant: str) -> pd.DataFrame:
    """Per embedder and length: the query form with the highest comparative ratio (AUC breaks ties)."""
    ratio = metric_series(metrics, "comparative_ratio")
    auc = metric_series(metrics, "auc")[["embedder", QUERY_FORM, "variant", "length", "value"]]
    data = ratio[ratio["variant"] == variant].merge(auc, on=["embedder", QUERY_FORM, "variant", "length"], suffixes=("", "_auc"))
    data = data.sort_values(["embedder", "length", "value", "value_auc"], ascending=[True, True, False, False])
    best = data.groupby(["embedder", "length"], as_index=False).first()
    return best.rename(columns={QUERY_FORM: BEST_FORM, "value": "comparative_ratio", "value_auc": "auc"})[
        ["embedder", "length", BEST_FORM, "comparative_ratio", "auc"]]


def category_tables(metrics: pd.DataFrame, variant: str) -> dict[str, pd.DataFrame]:
    """Comparative ratio, category x length, per embedder (question form)."""
    data = metrics[(metrics["metric"] == "comparative_ratio") & (metrics["category"] != ALL)
                   & (metrics["variant"] == variant) & (metrics[QUERY_FORM] == QUESTION)]
    return {e: g.pivot_table(index="category", columns="length", values="value") for e, g in data.groupby("embedder")}


def depth_tables(similarities: pd.DataFrame, variant: str) -> dict[str, pd.DataFrame]:
    """Mean normalized similarity, target depth x length, per embedder (question form)."""
    data = similarities[(similarities["variant"] == variant) & (similarities[QUERY_FORM] == QUESTION)
                        & similarities["normalized"].notna()]  # a lexical scorer has no normalized similarity
    data = data.assign(depth_label=data["target_depth"].round(2))
    return {e: g.pivot_table(index="depth_label", columns="length", values="normalized") for e, g in data.groupby("embedder")}


def scorer_view(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with ``embedder`` naming what one figure series shows: the embedder, followed by
    its strategy when the tables hold more than one strategy (``st:all-MiniLM-L6-v2 · windows-mean``)
    and by the distractor count when they hold more than one (``· 4 distractors``)."""
    label = frame["embedder"]
    if "strategy" in frame.columns and frame["strategy"].nunique() > 1:
        label = label + " · " + frame["strategy"]
    if N_DISTRACTORS in frame.columns and frame[N_DISTRACTORS].nunique() > 1:
        label = label + " · " + frame[N_DISTRACTORS].astype(str) + " distractors"
    return frame.assign(embedder=label)


SEVERAL_METRICS = ("recall@1", "query_auc")


def several_needles_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """Recall@1 and query_auc (question form, main variant) per embedder, strategy, needle count
    and question (own or other, and the own question's needle-blind level: its haystack's control,
    which holds the other needles alone, ranked in its place) and haystack length; empty for a run
    with one needle per haystack."""
    if metrics[N_NEEDLES].max() <= 1:
        return pd.DataFrame()
    variant = main_variant(one_needle(metrics))
    data = metrics[metrics["metric"].isin(SEVERAL_METRICS) & (metrics["category"] == ALL) & (metrics["depth_bucket"] == ALL)
                   & metrics["variant"].isin([variant, BLIND_PREFIX + variant]) & (metrics[QUERY_FORM] == QUESTION)
                   & (metrics[N_DISTRACTORS] == 0)]
    data = data.assign(question=np.where(data["variant"].map(is_blind), "own control (needle-blind)",
                                         np.where(data[OWN_QUESTION].astype(bool), "own", "other")))
    return data.pivot_table(index=["embedder", "strategy", N_NEEDLES, "question", "metric"], columns="length",
                            values="value").reset_index()


def distractor_table(metrics: pd.DataFrame, metric: str, variant: str) -> pd.DataFrame:
    """``metric`` (question form, ``variant``) per embedder, strategy and distractor count (rows)
    and haystack length (columns)."""
    return chunk_size_table(metrics, metric, variant, rows=("embedder", "strategy", N_DISTRACTORS))


def chunk_size_table(metrics: pd.DataFrame, metric: str, variant: str,
                     rows: tuple[str, ...] = ("embedder", "strategy")) -> pd.DataFrame:
    """``metric`` (question form, ``variant``) per ``rows`` (embedder and strategy) and haystack
    length (columns): whole documents of each length (truncate, windows-mean, bm25), and for
    chunks-max each chunk size's row."""
    data = metric_series(metrics, metric)
    data = data[(data["variant"] == variant) & (data[QUERY_FORM] == QUESTION)]
    return data.pivot_table(index=list(rows), columns="length", values="value").reset_index()


def chunk_size_lines(metrics: pd.DataFrame, breaks: pd.DataFrame, rule: BreakRule, variant: str) -> list[str]:
    """Per embedder with chunked scoring: the largest chunk size whose headline break point
    (``breaks``, :func:`~embedeval.breaks.break_points`) is the longest length, and whether the
    best chunk size beats the best whole-document strategy at the longest length (with both 95% CIs)."""
    metric = rule.headline_metric
    data = metric_series(metrics, metric)
    data = data[(data["variant"] == variant) & (data[QUERY_FORM] == QUESTION) & data["value"].notna()]
    lines = []
    for embedder, rows in data.groupby("embedder"):
        is_chunked = rows["strategy"].map(chunk_size).notna()
        if not is_chunked.any():
            continue
        longest = int(rows["length"].max())
        sizes = {chunk_size(s): s for s in rows.loc[is_chunked, "strategy"].unique()}
        kept = breaks[(breaks["embedder"] == embedder) & (breaks["variant"] == variant) & (breaks[QUERY_FORM] == QUESTION)
                      & (breaks[N_DISTRACTORS] == rows[N_DISTRACTORS].min()) & (breaks["break_point"] == longest)]
        holding = [c for c, label in sizes.items() if label in set(kept["strategy"])]
        tried = ", ".join(map(str, sorted(sizes)))
        if holding:
            first = (f"of the chunk sizes tried ({tried}), the largest that keeps {rule.condition()} at every "
                     f"length up to {longest} is {max(holding)} tokens")
        else:
            first = f"none of the chunk sizes tried ({tried}) keeps {rule.condition()} at every length up to {longest}"
        at_longest = rows[rows["length"] == longest]
        chunked_there = at_longest["strategy"].map(chunk_size).notna()
        best_chunk = at_longest[chunked_there].sort_values("value").iloc[-1]
        whole = at_longest[~at_longest["strategy"].map(scores_chunks)]  # neither chunks-max nor another chunk scorer
        if whole.empty:
            lines.append(f"- **{embedder}**: {first}.")
            continue
        best_whole = whole.sort_values("value").iloc[-1]
        gap = best_chunk["value"] - best_whole["value"]
        separated = best_chunk["ci_lo"] > best_whole["ci_hi"] or best_whole["ci_lo"] > best_chunk["ci_hi"]
        verdict = ("chunked retrieval beats embedding the document whole" if gap > 0 else
                   "embedding the document whole does at least as well as chunked retrieval")
        lines.append(f"- **{embedder}**: {first}. At {longest} tokens, {best_chunk['strategy']} reaches {best_chunk['value']:.3f} "
                     f"[{best_chunk['ci_lo']:.3f}, {best_chunk['ci_hi']:.3f}] against {best_whole['value']:.3f} "
                     f"[{best_whole['ci_lo']:.3f}, {best_whole['ci_hi']:.3f}] for {best_whole['strategy']}: {verdict}"
                     f"{'' if separated else ' (the 95% CIs overlap)'}.")
    return lines


RECALL_CHANCE_KEYS = [*SERIES_KEYS, "length"]


def recall_chance_table(retrieval: pd.DataFrame, ks=(1, 5, 10)) -> pd.DataFrame:
    """Per series and length of a rank table, the recall@k of a random ranking for each k: the mean
    over its rows of min(k / n_candidates, 1) (:func:`~embedeval.metrics.ranking.recall_chance`). Columns:
    :data:`RECALL_CHANCE_KEYS`, ``k``, ``chance``. A pool of 17 candidates gives 10/17 = 0.59 at k = 10,
    one of 12 (one distractor: its negatives and its control) 10/12 = 0.83."""
    frames = [retrieval[RECALL_CHANCE_KEYS].assign(k=k, chance=recall_chance(k, retrieval["n_candidates"])) for k in ks]
    return pd.concat(frames, ignore_index=True).groupby(RECALL_CHANCE_KEYS + ["k"], as_index=False)["chance"].mean()


def truncation_lines(metrics: pd.DataFrame) -> list[str]:
    """One sentence per embedder (and strategy) on where its window hides the needle."""
    lines = []
    visible = metric_series(metrics, "needle_visible_share")
    for embedder, series in visible[visible[QUERY_FORM] == QUESTION].groupby("embedder"):
        per_length = series.groupby("length")["value"].mean()
        hidden = [f"{length}: {share:.0%}" for length, share in per_length.items() if share < 1]
        if hidden:
            lines.append(f"- **{embedder}** truncates long haystacks; share of haystacks whose needle it can see, "
                         f"by length: {', '.join(hidden)}. Scores at those lengths partly measure truncation.")
        else:
            lines.append(f"- **{embedder}** sees the needle in every haystack (no truncation before the needle).")
    return lines


def control_tie_table(similarities: pd.DataFrame) -> pd.DataFrame:
    """Per length (rows) and series (columns: embedder, variant): the share of needle haystacks
    (question form) whose score equals their own control's. Past a model's window the needle is cut
    off and the haystack reads exactly as its control; such ties count against the needle in every
    rank (and 1/2 in the comparative ratio). Rows repeated (a run compared with itself) count once."""
    rows = similarities[similarities[QUERY_FORM] == QUESTION]
    pairs = pair_with_controls(rows.drop_duplicates(["embedder", "strategy", QUERY_FORM, "haystack_id", "group_id"]))
    pairs = pairs.assign(tied=(pairs["sim_qh"] == pairs["neg"]).astype(float),
                         series=pairs["embedder"] + " " + pairs["variant"])
    return pairs.pivot_table(index="length", columns="series", values="tied").reset_index()


def position_table(similarities: pd.DataFrame, depths: int | None = None) -> pd.DataFrame:
    """Per length and distractor count: the distinct needle positions (depths to 0.01) each
    (question, variant) reached (mean, min, max; of ``depths`` asked for, if given) and how many
    needle haystacks hold distractors inside the needle's zone, from one scorer's question-form
    rows."""
    first = similarities[["embedder", "strategy"]].drop_duplicates().iloc[:1]
    rows = similarities.merge(first, on=["embedder", "strategy"])
    rows = rows[(rows[QUERY_FORM] == QUESTION) & ~rows["variant"].isin([CONTROL, NEGATIVE])]
    if rows.empty:
        return pd.DataFrame()
    rows = rows.assign(position=rows["depth"].round(2))
    per_question = rows.groupby(["length", N_DISTRACTORS, "group_id", "variant"]).agg(
        positions=("position", "nunique"), in_zone=("distractors_in_zone", lambda v: int((v > 0).sum())))
    table = per_question.groupby(["length", N_DISTRACTORS]).agg(
        positions_mean=("positions", "mean"), positions_min=("positions", "min"), positions_max=("positions", "max"),
        in_zone=("in_zone", "sum")).reset_index()
    table = table.rename(columns={"positions_mean": "distinct positions (mean)", "positions_min": "min", "positions_max": "max",
                                  "in_zone": "haystacks with distractors in zone"})
    if depths:
        table.insert(2, "depths asked", int(depths))
    return table


def summary_table(metrics: pd.DataFrame, metric: str) -> pd.DataFrame:
    """``metric`` per length (rows) for each embedder/form/variant (columns)."""
    data = metric_series(metrics, metric)
    data = data.assign(series=data["embedder"] + " " + data[QUERY_FORM] + " " + data["variant"])
    return data.pivot_table(index="length", columns="series", values="value").reset_index()


def distractor_note(count) -> str:
    """", K distractors" for a count above 0, else nothing (for labels of break-point rows)."""
    return f", {int(count)} distractors" if count else ""


def series_note(row) -> str:
    """What sets a break-point row apart besides embedder, strategy and variant: its distractors,
    and with several needles their number and whose question ranks the haystack."""
    n_needles, own = getattr(row, N_NEEDLES), getattr(row, OWN_QUESTION)
    needles = "" if n_needles <= 1 else f", {int(n_needles)} needles, {'own' if own else 'other'} questions"
    return distractor_note(getattr(row, N_DISTRACTORS)) + needles


def series_label(row) -> str:
    """A break-point row's series in words: ``st:all-MiniLM-L6-v2 [truncate, onehop, question]``,
    with its distractors and needles (:func:`series_note`)."""
    return f"{row.embedder} [{row.strategy}, {row.variant}, {getattr(row, QUERY_FORM)}{series_note(row)}]"


def _flag(row, name: str) -> bool:
    """A boolean column of a break-point row (older breaks.csv files lack some: false)."""
    value = getattr(row, name, None)
    return value is not None and not pd.isna(value) and bool(value)


def _count(row, name: str) -> int | None:
    """A count column of a break-point row (None where an older breaks.csv lacks it)."""
    value = getattr(row, name, None)
    return None if value is None or pd.isna(value) else int(value)


def headline_breaks(breaks: pd.DataFrame, variant: str) -> pd.DataFrame:
    """The rows of ``breaks`` the report's answer gives, one per embedder and strategy: the
    ``variant`` needles (:func:`main_variant`) asked in the question form, one needle per haystack,
    at the run's fewest distractors."""
    rows = one_needle(breaks)
    return fewest_distractors(rows[(rows[QUERY_FORM] == QUESTION) & (rows["variant"] == variant)])


def rule_in_words(rule: BreakRule, variant: str) -> str:
    """What the headline rule asks of a length, in plain words."""
    if rule.rule == "relative":
        return (f"a top-{rule.k} retriever finds the {variant} needle's haystack (above chance) at least {rule.fraction:.0%} as "
                "often as in the shortest haystacks")
    return f"{rule.metric} stays at or above {rule.threshold}"


def _visible_words(shares: pd.Series) -> str:
    """The share of needle haystacks whose needle the model read, per length, in words."""
    if shares.empty:
        return "not measured"
    if (shares >= 1).all():
        return "100% at every length (nothing cut off before the needle)"
    return ", ".join(f"{int(length)}: {share:.0%}" for length, share in shares.items())


def _divided_headline(row, who: str, said: BreakAnswer, chunked: bool) -> str:
    """The headline when no length has a clear majority of the resamples (:func:`~embedeval.breaks.break_answer`):
    the likely lengths with their shares, then the one answer, the safer length (the longest that
    :data:`~embedeval.defaults.BREAK_SUPPORT` of the resamples reach) and its chunk."""
    likely = f"the break point is {likely_words(said)}"
    if said.length is None:
        return (f"With {who}, this run recommends no chunk size: {likely}, and no length is reached by "
                f"{BREAK_SUPPORT:.0%} of them.")
    reached = f"{percent(said.reach)} of the resamples reach {said.length:,} tokens"
    if chunked:
        return (f"With {who}, reading each document as {row.strategy.split('@')[-1]}-token chunks, {likely}: count on "
                f"documents up to {said.length:,} tokens, the safer answer ({reached}).")
    chunk = _count(row, "recommended_chunk_tokens")
    if chunk is None:
        return f"With {who}, {likely}: count on haystacks up to {said.length:,} tokens, the safer answer ({reached})."
    return f"With {who}, {likely}: keep chunks ≤ {chunk} tokens, the safer answer ({reached})."


def answer(row, rule: BreakRule, shares: pd.Series) -> tuple[str, tuple[str, ...]]:
    """The report's answer for one embedder and strategy (a row of :func:`headline_breaks`):
    ``(headline, items)``: the headline in plain words ("with this model, keep chunks <= 102
    tokens: ..."), then the break point with its interval (or "≥ L" where censored, or why there
    is none), the recommended chunk and any cap, the question groups, and ``shares`` (per length,
    the share of needle haystacks whose needle the model could see)."""
    who = f"{row.embedder} ({row.strategy})"
    lengths = [int(length) for length in shares.index]
    meaning = rule_in_words(rule, row.variant)
    why = why_no_break(row, rule)
    censored = _flag(row, "break_censored")
    chunked = scores_chunks(row.strategy)
    if why is not None:
        said = break_answer(row)
        headline = (f"With {who}, this run recommends no chunk size: it has no break point." if said.settled
                    else _divided_headline(row, who, said, chunked))
        items = [f"No break point: {why}."]
    else:
        point = int(row.break_point)
        later = [length for length in lengths if length > point]
        chunk = row.strategy.split("@")[-1]
        if censored:
            reach = f"up to {point}-token haystacks, the longest measured, {meaning}, so longer ones may work too"
        else:
            reach = f"up to {point}-token haystacks, {meaning}" + (f"; at {later[0]} tokens it does not" if later else "")
        if chunked:
            headline = f"With {who}, reading each document as {chunk}-token chunks: {reach}."
        elif _count(row, "recommended_chunk_tokens") is None:  # a strategy of a family not registered now: no chunk to say
            headline = f"With {who}: {reach}."
        elif censored and _flag(row, "chunk_capped"):  # nothing longer is read: no "longer ones may be"
            headline = (f"With {who}, chunks of {int(row.recommended_chunk_tokens)} tokens, the whole window the model reads, "
                        f"are safe: {reach}.")
        elif censored:
            headline = f"With {who}, chunks of {int(row.recommended_chunk_tokens)} tokens are safe, and longer ones may be: {reach}."
        else:
            headline = f"With {who}, keep chunks ≤ {int(row.recommended_chunk_tokens)} tokens: {reach}."
        said = break_answer(row)
        if not said.settled:
            headline = _divided_headline(row, who, said, chunked)
        bound = '; "≥": it never fell below the bar, so the effective length is at least this' if censored else ""
        support = support_words(row)
        items = [f"Break point **{interval_text(row)}** by the {rule.rule} rule{', ' + support if support else ''} (in brackets "
                 f"its 5-95% interval over resampled question groups{bound})."]
        if chunked:
            items.append(f"Chunk size {chunk} tokens, set by the strategy: its break point is the document's length, so it "
                         "recommends no chunk.")
        elif _count(row, "recommended_chunk_tokens") is not None:
            tokens = _count(row, "recommended_chunk_tokens")
            items.append(f"Recommended chunk **{tokens} tokens**: {CHUNK_FACTOR} x the break point, capped at the "
                         f"{_count(row, 'window')}-token window the model reads (it reads nothing past it)." if _flag(row, "chunk_capped")
                         else f"Recommended chunk **at least {tokens} tokens**: {CHUNK_FACTOR} x the break point, a lower bound as "
                         "the break point is." if censored else f"Recommended chunk **{tokens} tokens**: {CHUNK_FACTOR} x the break point.")
    spread = shares_words(row)
    if spread is not None and len(parse_shares(row.break_shares)) > 1:
        items.append(f"Over resamples of the question groups the break point is {spread}.")
    groups = _count(row, "n_groups")
    if groups is not None:
        items.append(f"{groups} question group{'' if groups == 1 else 's'}.")
    items.append(f"Needle visible to the model in its needle haystacks, by length: {_visible_words(shares)}.")
    return headline, tuple(items)


def answers(breaks: pd.DataFrame, metrics: pd.DataFrame, rule: BreakRule, variant: str) -> list[tuple[str, tuple[str, ...]]]:
    """:func:`answer` for every row of :func:`headline_breaks`, with the visible shares of the
    row's own series (``needle_visible_share`` in ``metrics``)."""
    visible = metric_series(metrics, "needle_visible_share")
    found = []
    for row in headline_breaks(breaks, variant).itertuples():
        mask = np.ones(len(visible), dtype=bool)
        for key in SERIES_KEYS:
            if key in visible.columns:
                mask &= (visible[key] == getattr(row, key)).to_numpy()
        found.append(answer(row, rule, visible[mask].groupby("length")["value"].mean().sort_index()))
    return found


def break_table(breaks: pd.DataFrame, rule: BreakRule) -> pd.DataFrame:
    """The report's first table, narrow enough to read without scrolling: a row per series of
    ``breaks`` (:func:`~embedeval.breaks.break_points`): the headline break point with its interval
    ("256 tokens (128-512)", "≥ 8192 tokens (...)", or "none" with the reason in a word), the
    recommended chunk (with its cap), the question groups, the other rule's and the pooled-AUC
    break points. Every column of ``breaks.csv`` stays in the file."""
    other = "absolute" if rule.rule == "relative" else "relative"
    rows = []
    for row in breaks.itertuples():
        status = getattr(row, "relative_status", None) if rule.rule == "relative" else None
        none = f"none ({status})" if isinstance(status, str) and status != "ok" else "none (no length keeps the rule)"
        chunk = _count(row, "recommended_chunk_tokens")
        capped = _flag(row, "chunk_capped")
        rows.append({"series": series_label(row),
                     f"break point ({rule.rule} rule)": none if pd.isna(row.break_point) else interval_text(row),
                     "recommended chunk": "–" if chunk is None else
                     f"{chunk} (capped at the {_count(row, 'window')}-token window)" if capped else
                     f"≥ {chunk}" if _flag(row, "break_censored") else str(chunk),
                     "question groups": _count(row, "n_groups"),
                     f"{other} rule": tokens_text(getattr(row, f"{other}_break_point")),
                     "pooled-AUC rule": tokens_text(row.auc_break_point)})
    return pd.DataFrame(rows)

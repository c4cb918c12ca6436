"""The similarity table: what is compared with what (docs/metrics.md).

Each scorer (an embedder read through a long-text strategy, or BM25; :mod:`embedeval.strategies`)
reads every haystack once (:func:`score_haystacks`); from those scores come the similarity table
(one row per scorer x haystack x query form: ``sim_qh``, ``sim_qn``, ``normalized``, what the
scorer read) and the rank table (each needle haystack ranked among a pool of its length's haystacks
that do not answer its question: the needle-free ones, or all of them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from embedeval.defaults import DEFAULT_NORMALIZE_BY, DEFAULT_POOL
from embedeval.haystacks import distractor_columns
from embedeval.labels import ALL_POOL, BLIND_PREFIX, CONTROL, NEGATIVE, RETRIEVAL_MEASURES
from embedeval.messages import warn
from embedeval.metrics.ranking import retrieval_measures
from embedeval.metrics.separation import normalized_similarity
from embedeval.needles import STANDARD_NEEDLE, NeedleSet, check_normalize_by
from embedeval.options import POOL
from embedeval.schema import N_DISTRACTORS, N_NEEDLES, OWN_QUESTION, QUERY_FORM, RETRIEVAL_COLUMNS, SIMILARITY_COLUMNS
from embedeval.strategies.scoring import Reading, ScoredTexts, Scorer, Scores


@dataclass
class HaystackScores:
    """Every query form's scores against every haystack of a run (negatives included), by one
    scorer: ``scores[form]`` has one row per needle-set group and one column per haystack."""

    scorer: Scorer
    haystacks: pd.DataFrame
    queries: dict[str, list[str]]
    scores: dict[str, Scores]
    seen_chars: np.ndarray
    #: what the scorer read of the haystacks and the model's time on it (None: a scorer that does not say)
    reading: Reading | None = None


def score_haystacks(scorer: Scorer, haystacks: pd.DataFrame, forms: dict[str, list[str]]) -> HaystackScores:
    """Read every haystack once and score each query form's questions against all of them.

    The texts of one length form the lexical scorer's corpus: every haystack of that length, the
    needle haystacks with the needle-free pool, as one index holding them all would (so a
    needle's words weigh less as more haystacks of the run hold them)."""
    indexed = scorer.index(haystacks["text"].tolist(), partition=haystacks["length"].to_numpy())
    reading = getattr(scorer, "reading", None)  # before the scorer reads anything else (the needles alone)
    return HaystackScores(scorer, haystacks, forms, {form: scores_of(indexed, queries) for form, queries in forms.items()},
                          np.asarray(indexed.seen_chars), reading)


def scores_of(indexed: ScoredTexts, queries: list[str | None]) -> Scores:
    """``indexed.scores(queries)`` where a query may be None (a group without that query form):
    its row of values is NaN."""
    present = [i for i, q in enumerate(queries) if q is not None]
    if len(present) == len(queries):
        return indexed.scores(queries)
    found = indexed.scores([queries[i] for i in present])
    full = Scores(np.full((len(queries), found.values.shape[1]), np.nan),
                  *(np.zeros((len(queries), found.values.shape[1]), dtype=np.int64) for _ in range(3)))
    for name in ("values", "best_piece", "best_start", "best_end"):
        getattr(full, name)[present] = getattr(found, name)
    return full


@dataclass
class Asks:
    """Which question is asked of which haystack: one entry per (haystack, question whose needle it
    holds), the haystack's own question first; a needle-free haystack is asked its own group's
    question (a negative none). Arrays aligned: ``haystack`` (row position in the haystack table),
    ``group`` (index in the needle set), ``own``, ``character``, ``needle_start``/``needle_end``
    (that question's needle in the text; NaN without one) and ``depth`` (that needle's depth;
    NaN without one)."""

    haystack: np.ndarray
    group: np.ndarray
    own: np.ndarray
    character: np.ndarray
    needle_start: np.ndarray
    needle_end: np.ndarray
    depth: np.ndarray


def asks_of(haystacks: pd.DataFrame, needle_set: NeedleSet) -> Asks:
    """:class:`Asks` of a haystack table (tables of older versions, without ``needle_groups``: one
    ask per haystack, its own group's question)."""
    group_index = {g.id: i for i, g in enumerate(needle_set.groups)}
    several = "needle_groups" in haystacks.columns
    columns = [haystacks[c].to_numpy() if c in haystacks.columns else np.full(len(haystacks), None)
               for c in ("variant", "group_id", "character", "needle_start", "depth")]
    lists = ([haystacks[c].to_numpy() for c in ("needle_groups", "needle_characters", "needle_starts")] if several
             else [None] * 3)
    depths = haystacks["needle_depths"].to_numpy() if "needle_depths" in haystacks.columns else None
    entries = []
    for row, (variant, group_id, character, start, depth) in enumerate(zip(*columns, strict=True)):
        if variant == NEGATIVE:
            continue
        if variant == CONTROL or not several or len(lists[0][row]) == 0:
            own_character = character if isinstance(character, str) else needle_set.groups[group_index[group_id]].character
            entries.append((row, group_index[group_id], True, own_character, np.nan if pd.isna(start) else float(start),
                            np.nan if pd.isna(depth) else float(depth)))
            continue
        for k, (asked, name, at) in enumerate(zip(lists[0][row], lists[1][row], lists[2][row], strict=True)):
            # the depth of the needle that answers this question (tables before needle_depths: the own one's)
            entries.append((row, group_index[asked], k == 0, name, float(at), float(depths[row][k] if depths is not None else depth)))
    haystack, group, own, character, start, depth = (np.array(x) for x in zip(*entries, strict=True)) if entries else [np.array([])] * 6
    variants = haystacks["variant"].to_numpy()
    length = np.array([np.nan if variants[h] == CONTROL else len(needle_set.groups[g].needle(variants[h], c))
                       for h, g, c in zip(haystack, group, character, strict=True)], dtype=float)
    return Asks(haystack.astype(np.int64), group.astype(np.int64), own.astype(bool), character.astype(object),
                start.astype(float), start.astype(float) + length, depth.astype(float))


def similarity_rows(scored: HaystackScores, needle_set: NeedleSet, normalize_by: str = DEFAULT_NORMALIZE_BY) -> pd.DataFrame:
    """The similarity table of one scorer (docs/metrics.md), negatives left out (they are the rank
    table's pool): one row per haystack and question asked of it (:func:`asks_of`: a haystack
    with several needles gets one row per question whose needle it holds, ``own_question`` true
    for its own group's).

    ``sim_qh`` = the query's score for the haystack (for embedders the cosine of query and text as
    the strategy reads it). ``sim_qn`` = the same scorer's score for the normalising needle alone:
    with ``normalize_by="standard"`` (the Jina study) the asked group's standard needle of the
    variant's family (:data:`~embedeval.needles.STANDARD_NEEDLE`: one-hop for one-hop and inverted,
    literal for the literal variants), with ``"own"`` the haystack's needle of that group.
    ``normalized = sim_qh / sim_qn`` (NaN for controls, where sim_qn is 0 — a warning names the
    groups — and for scorers whose scores are not comparable across texts, such as BM25: then
    ``sim_qn`` is empty too). ``n_tokens``: the haystack's length in reference tokens;
    ``truncated``: the scorer read less than the whole haystack; ``needle_visible``: it read the
    asked question's needle (NA for controls); ``best_chunk``: the chunk that gave the score
    (chunks-max; 0 where the text is scored as one piece); ``chunk_has_needle``: that piece holds
    the whole needle (NA for controls); :data:`~embedeval.schema.N_DISTRACTORS`: distractors in the haystack
    (``distractors_in_zone`` of them inside the needle's ±0.2 zone, where no boundary lay outside
    it); ``n_needles``: needles in a needle haystack (its control's row carries the same K when K >
    1: that control holds the K - 1 other needles; other controls 0); ``depth``: the depth of the
    needle that answers the row's question; ``control_id``: the needle haystack's control (the
    same filler, distractors and other needles without its own needle; empty for controls and for
    other questions' rows, which have no control of their own).
    """
    check_normalize_by(normalize_by)
    scorer = scored.scorer
    asks = asks_of(scored.haystacks, needle_set)
    haystacks = scored.haystacks.iloc[asks.haystack]
    seen = scored.seen_chars[asks.haystack]
    variants = haystacks["variant"].to_numpy()
    positive = variants != CONTROL
    positive_idx = np.flatnonzero(positive)
    visible = pd.array([pd.NA] * len(haystacks), dtype="boolean")
    visible[positive_idx] = asks.needle_end[positive_idx] <= seen[positive_idx]

    needle_scores = None
    if scorer.normalizable:
        divisors = [STANDARD_NEEDLE[variants[i]] if normalize_by == "standard" else variants[i] for i in positive_idx]
        needle_texts = [needle_set.groups[asks.group[i]].needle(v, asks.character[i]) for i, v in zip(positive_idx, divisors, strict=True)]
        unique_needles = sorted(set(needle_texts))
        column_of = {text: c for c, text in enumerate(unique_needles)}
        needle_column = np.array([column_of[t] for t in needle_texts], dtype=np.int64)
        needle_scores = scorer.index(unique_needles)

    distractors, _, control_ids = distractor_columns(haystacks)
    control_ids = np.where(asks.own, control_ids, None)
    in_zone = (haystacks["distractors_in_zone"].fillna(0).to_numpy(dtype=np.int64) if "distractors_in_zone" in haystacks.columns
               else np.zeros(len(haystacks), dtype=np.int64))
    n_needles = (haystacks[N_NEEDLES].to_numpy(dtype=np.int64) if N_NEEDLES in haystacks.columns
                 else positive.astype(np.int64))
    group_ids = np.array([g.id for g in needle_set.groups], dtype=object)[asks.group]
    categories = np.array([g.category for g in needle_set.groups], dtype=object)[asks.group]
    frames = []
    for form, scores in scored.scores.items():
        sim_qh = scores.values[asks.group, asks.haystack]
        sim_qn = np.full(len(haystacks), np.nan)
        normalized = np.full(len(haystacks), np.nan)
        if needle_scores is not None:
            sim_qn[positive_idx] = scores_of(needle_scores, scored.queries[form]).values[asks.group[positive_idx], needle_column]
            defined = positive & (sim_qn != 0) & np.isfinite(sim_qh)
            if defined.any():
                normalized[defined] = normalized_similarity(sim_qh[defined], sim_qn[defined])
            undefined = sorted(set(group_ids[positive & ~defined & np.isfinite(sim_qh)]))
            if undefined:
                warn(f"{scorer.name} [{form}]: sim(query, needle) is 0 for {', '.join(undefined)}; "
                     "their normalized similarity is left empty")
        best_start, best_end = scores.best_start[asks.group, asks.haystack], scores.best_end[asks.group, asks.haystack]
        has_needle = pd.array([pd.NA] * len(haystacks), dtype="boolean")
        has_needle[positive_idx] = ((best_start[positive_idx] <= asks.needle_start[positive_idx])
                                    & (asks.needle_end[positive_idx] <= best_end[positive_idx]))
        frames.append(pd.DataFrame({
            "embedder": scorer.name, "strategy": scorer.strategy, "haystack_id": haystacks["id"].to_numpy(),
            "group_id": group_ids, "category": categories,
            "variant": variants, "length": haystacks["length"].to_numpy(), N_DISTRACTORS: distractors,
            "distractors_in_zone": in_zone, N_NEEDLES: n_needles, OWN_QUESTION: asks.own, "control_id": control_ids,
            "depth": asks.depth,
            "target_depth": haystacks["target_depth"].to_numpy(dtype=float, na_value=np.nan),
            QUERY_FORM: form, "sim_qh": sim_qh.astype(float), "sim_qn": sim_qn, "normalized": normalized,
            "normalized_by": normalize_by if scorer.normalizable else "", "n_tokens": haystacks["n_tokens"].to_numpy(),
            "truncated": seen < haystacks["text"].str.len().to_numpy(), "needle_visible": visible, "windows_exact": scorer.windows_exact,
            "best_chunk": scores.best_piece[asks.group, asks.haystack], "chunk_has_needle": has_needle,
        }))
    table = pd.concat(frames, ignore_index=True)[SIMILARITY_COLUMNS]
    return table[table["sim_qh"].notna()].reset_index(drop=True)  # a group without a query form has no rows for it


def retrieval_rows(scored: HaystackScores, needle_set: NeedleSet, pool: str = DEFAULT_POOL) -> pd.DataFrame:
    """The rank table of one scorer (docs/metrics.md): every needle haystack p ranked, by the score of
    each question q whose needle it holds (:func:`asks_of`: one row per question, ``own_question``
    true for its own group's), among a pool of haystacks that do not answer q, with the per-query
    measures of :func:`~embedeval.metrics.ranking.retrieval_measures`. Columns:
    :data:`~embedeval.schema.RETRIEVAL_COLUMNS` and then the measures.

    ``pool="needle-free"`` (the default): p's pool is needle-free haystacks of its length: without
    distractors, every group's control and the ``negative`` pool; with K distractors, the
    negatives that hold q's K distractors and p's own control (``control_id``). So the decoys are
    in every candidate and only the needle tells the haystack apart, and in both pools one
    candidate (its control) shares its filler.

    ``pool="all"``: p's pool is every haystack of its length and depth that does not answer q,
    as LongEmbed's needle and passkey tasks rank among all documents of a split: the needle-free
    haystacks of its length and distractor count (every group's control and every negative,
    whichever group's distractors they hold) and the needle haystacks of the other questions at
    its length, distractor count, variant, needle count and target depth, less those that hold
    q's needle (with K > 1 needles per haystack another group's haystack may). Without several
    needles each pool is the same corpus less p itself, so a question's rankings at one (length,
    variant, depth) are one retrieval over one corpus (:mod:`embedeval.mteb_task` hands exactly
    that to MTEB's evaluator). ``n_candidates`` (pool + 1) is each row's own.

    With K > 1 needles per haystack, each own-question row also gets a needle-blind row: the
    haystack's own control (its K - 1 other needles, not its own) ranked by the same question among
    the same pool, ``variant`` ``blind:<variant>`` (:data:`~embedeval.labels.BLIND_PREFIX`), the
    ``haystack_id`` the control's. Its recall@k is what a scorer blind to the own needle reaches, above
    k/n when the other needles pull the haystack up (:mod:`embedeval.breaks` corrects those rows for it).
    """
    POOL.check(pool)
    haystacks = scored.haystacks
    variants = haystacks["variant"].to_numpy()
    positive = (variants != CONTROL) & (variants != NEGATIVE)
    lengths = haystacks["length"].to_numpy()
    distractors, distractors_of, control_ids = distractor_columns(haystacks)
    n_needles = haystacks[N_NEEDLES].to_numpy(dtype=np.int64) if N_NEEDLES in haystacks.columns else positive.astype(np.int64)
    free = ~positive & (n_needles == 0)  # a control of a K-needle haystack holds K - 1 needles: no candidate
    everything = pool == ALL_POOL
    if everything:  # needle haystacks pooled by condition and target depth, needle-free ones by length and distractor count
        depth_column = "target_depth" if "target_depth" in haystacks.columns else "depth"
        target = haystacks[depth_column].to_numpy(dtype=float, na_value=np.nan)
        pool_keys = [(length, count, variant if hit else "", needles if hit else 0, depth if hit else -1.0)
                     for length, count, variant, needles, depth, hit in
                     zip(lengths.tolist(), distractors.tolist(), variants.tolist(), n_needles.tolist(), target.tolist(), positive.tolist(), strict=True)]
    else:
        pool_keys = list(zip(lengths.tolist(), distractors.tolist(), distractors_of.tolist(), strict=True))
    keys = sorted(set(pool_keys))
    code_of = {key: code for code, key in enumerate(keys)}
    codes = np.array([code_of[key] for key in pool_keys], dtype=np.int64)
    position = {haystack_id: i for i, haystack_id in enumerate(haystacks["id"])}
    asks = asks_of(haystacks, needle_set)
    asked = positive[asks.haystack]
    ask_rows, ask_groups, ask_own, ask_depths = asks.haystack[asked], asks.group[asked], asks.own[asked], asks.depth[asked]
    answers = np.zeros((len(needle_set.groups), len(haystacks)), dtype=bool)  # answers[q, h]: h holds q's needle
    answers[ask_groups, ask_rows] = True
    group_ids = np.array([g.id for g in needle_set.groups], dtype=object)
    categories = np.array([g.category for g in needle_set.groups], dtype=object)
    frames = []
    for form, scores in scored.scores.items():
        for code in np.unique(codes[ask_rows]):
            length, count = keys[code][:2]
            chosen = (codes[ask_rows] == code) & np.array([scored.queries[form][q] is not None for q in ask_groups], dtype=bool)
            rows, query_rows, own, depths = ask_rows[chosen], ask_groups[chosen], ask_own[chosen], ask_depths[chosen]
            in_pool = None
            if everything:
                candidates = np.flatnonzero((free & (lengths == length) & (distractors == count)) | (codes == code))
                candidate_scores = scores.values[query_rows][:, candidates]
                in_pool = ~answers[query_rows][:, candidates]
                kept = in_pool.any(axis=1)  # a row with nothing to rank against (one group, no needle-free haystacks) has no rank
                rows, query_rows, own, depths, candidate_scores, in_pool = (rows[kept], query_rows[kept], own[kept], depths[kept],
                                                                            candidate_scores[kept], in_pool[kept])
            else:
                candidates = np.flatnonzero(free & (codes == code) & (variants == NEGATIVE) if count else free & (codes == code))
                candidate_scores = scores.values[query_rows][:, candidates]
                if count:  # and each haystack's own control
                    mine = np.array([position.get(c, -1) for c in control_ids[rows]], dtype=np.int64)
                    kept = mine >= 0
                    rows, query_rows, own, depths, candidate_scores, mine = (rows[kept], query_rows[kept], own[kept], depths[kept],
                                                                              candidate_scores[kept], mine[kept])
                    candidate_scores = np.concatenate([candidate_scores, scores.values[query_rows, mine][:, None]], axis=1)
            if not rows.size or not candidate_scores.shape[1]:
                continue
            def ranked(rows, query_rows, own, depths, candidate_scores, in_pool, variants, *, scores=scores, form=form, length=length,
                       count=count) -> pd.DataFrame:
                measures = retrieval_measures(scores.values[query_rows, rows], candidate_scores, in_pool)
                frame = pd.DataFrame({
                    "embedder": scored.scorer.name, "strategy": scored.scorer.strategy, QUERY_FORM: form,
                    "group_id": group_ids[query_rows], "category": categories[query_rows], "variant": variants,
                    "length": length, N_DISTRACTORS: count, N_NEEDLES: n_needles[rows], OWN_QUESTION: own,
                    "depth": depths, "haystack_id": haystacks["id"].to_numpy()[rows], "score": scores.values[query_rows, rows].astype(float),
                })
                return pd.concat([frame, pd.DataFrame(measures)], axis=1)

            frames.append(ranked(rows, query_rows, own, depths, candidate_scores, in_pool, variants[rows]))
            controls = np.array([position.get(c, -1) for c in control_ids[rows]], dtype=np.int64)
            blind = own & (n_needles[rows] > 1) & (controls >= 0)
            if blind.any():  # each K-needle haystack's own control, ranked in its pool: the needle-blind level
                frame = ranked(controls[blind], query_rows[blind], own[blind], depths[blind], candidate_scores[blind],
                               None if in_pool is None else in_pool[blind], BLIND_PREFIX + variants[rows[blind]].astype(object))
                frames.append(frame.assign(**{N_NEEDLES: n_needles[rows[blind]]}))
    return pd.concat(frames, ignore_index=True)[RETRIEVAL_COLUMNS + list(RETRIEVAL_MEASURES)]

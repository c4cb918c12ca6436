"""The similarity table: what is compared with what (DESIGN §3).

Each scorer (an embedder read through a long-text strategy, or BM25; :mod:`embedeval.strategies`)
reads every haystack once (:func:`score_haystacks`); from those scores come the similarity table
(one row per scorer x haystack x query form: ``sim_qh``, ``sim_qn``, ``normalized``, what the
scorer read) and the rank table (each needle haystack ranked among its length's needle-free pool).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import pandas as pd

from embedeval.defaults import DEFAULT_NORMALIZE_BY
from embedeval.embedders.base import ScoredTexts, Scorer, Scores
from embedeval.haystacks import distractor_columns
from embedeval.labels import CONTROL, NEGATIVE, RETRIEVAL_COLUMNS, SIMILARITY_COLUMNS
from embedeval.metrics import RETRIEVAL_MEASURES, normalized_similarity, retrieval_measures
from embedeval.needles import STANDARD_NEEDLE, NeedleSet, check_normalize_by

@dataclass
class HaystackScores:
    """Every query form's scores against every haystack of a run (negatives included), by one
    scorer: ``scores[form]`` has one row per needle-set group and one column per haystack."""

    scorer: Scorer
    haystacks: pd.DataFrame
    queries: dict[str, list[str]]
    scores: dict[str, Scores]
    seen_chars: np.ndarray


def score_haystacks(scorer: Scorer, haystacks: pd.DataFrame, forms: dict[str, list[str]]) -> HaystackScores:
    """Read every haystack once and score each query form's questions against all of them.

    The texts of one length form the lexical scorer's corpus: every haystack of that length, the
    needle haystacks with the needle-free pool, as one index holding them all would (so a
    needle's words weigh less as more haystacks of the run hold them)."""
    indexed = scorer.index(haystacks["text"].tolist(), partition=haystacks["length"].to_numpy())
    return HaystackScores(scorer, haystacks, forms, {form: scores_of(indexed, queries) for form, queries in forms.items()},
                          np.asarray(indexed.seen_chars))


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


def similarity_rows(scored: HaystackScores, needle_set: NeedleSet, normalize_by: str = DEFAULT_NORMALIZE_BY) -> pd.DataFrame:
    """The similarity table of one scorer (DESIGN §3), negatives left out (they are the rank
    table's pool).

    ``sim_qh`` = the query's score for the haystack (for embedders the cosine of query and text as
    the strategy reads it). ``sim_qn`` = the same scorer's score for the normalising needle alone:
    with ``normalize_by="standard"`` (the Jina study) the group's standard needle of the variant's
    family (:data:`~embedeval.needles.STANDARD_NEEDLE`: one-hop for one-hop and inverted, literal
    for the literal variants), with ``"own"`` the haystack's own needle. ``normalized = sim_qh /
    sim_qn`` (NaN for controls, where sim_qn is 0 — a warning names the groups — and for scorers
    whose scores are not comparable across texts, such as BM25: then ``sim_qn`` is empty too).
    ``n_tokens``: the haystack's length in reference tokens; ``truncated``: the scorer read less
    than the whole haystack; ``needle_visible``: it read the needle (NA for controls);
    ``best_chunk``: the chunk that gave the score (chunks-max; 0 where the text is scored as one
    piece); ``chunk_has_needle``: that piece holds the whole needle (NA for controls);
    ``n_distractors``: distractors in the haystack (``distractors_in_zone`` of them inside the
    needle's ±0.2 zone, where no boundary lay outside it); ``control_id``: the needle haystack's control
    (the same filler and distractors without the needle; empty for controls).
    """
    check_normalize_by(normalize_by)
    scorer = scored.scorer
    keep = np.flatnonzero((scored.haystacks["variant"] != NEGATIVE).to_numpy())
    haystacks = scored.haystacks.iloc[keep]
    seen = scored.seen_chars[keep]
    group_index = {g.id: i for i, g in enumerate(needle_set.groups)}
    rows_group = haystacks["group_id"].map(group_index).to_numpy()
    variants = haystacks["variant"].to_numpy()
    positive = variants != CONTROL
    positive_idx = np.flatnonzero(positive)
    needle_start = haystacks["needle_start"].to_numpy(dtype=float, na_value=np.nan)
    needle_end = haystacks["needle_end"].to_numpy(dtype=float, na_value=np.nan)
    lengths = haystacks["text"].str.len().to_numpy()
    visible = pd.array([pd.NA] * len(haystacks), dtype="boolean")
    visible[positive_idx] = needle_end[positive_idx] <= seen[positive_idx]

    needle_scores = None
    if scorer.normalizable:
        divisors = [STANDARD_NEEDLE[variants[i]] if normalize_by == "standard" else variants[i] for i in positive_idx]
        characters = (haystacks["character"].to_numpy() if "character" in haystacks.columns
                      else [g.character for g in (needle_set.groups[r] for r in rows_group)])
        needle_texts = [needle_set.groups[rows_group[i]].needle(v, characters[i]) for i, v in zip(positive_idx, divisors)]
        unique_needles = sorted(set(needle_texts))
        column_of = {text: c for c, text in enumerate(unique_needles)}
        needle_column = np.array([column_of[t] for t in needle_texts], dtype=np.int64)
        needle_scores = scorer.index(unique_needles)

    n_distractors, _, control_ids = distractor_columns(haystacks)
    in_zone = (haystacks["distractors_in_zone"].fillna(0).to_numpy(dtype=np.int64) if "distractors_in_zone" in haystacks.columns
               else np.zeros(len(haystacks), dtype=np.int64))
    frames = []
    for form, scores in scored.scores.items():
        sim_qh = scores.values[rows_group, keep]
        sim_qn = np.full(len(haystacks), np.nan)
        normalized = np.full(len(haystacks), np.nan)
        if needle_scores is not None:
            sim_qn[positive_idx] = scores_of(needle_scores, scored.queries[form]).values[rows_group[positive_idx], needle_column]
            defined = positive & (sim_qn != 0) & np.isfinite(sim_qh)
            if defined.any():
                normalized[defined] = normalized_similarity(sim_qh[defined], sim_qn[defined])
            undefined = sorted(set(haystacks["group_id"].to_numpy()[positive & ~defined & np.isfinite(sim_qh)]))
            if undefined:
                print(f"warning: {scorer.name} [{form}]: sim(query, needle) is 0 for {', '.join(undefined)}; "
                      "their normalized similarity is left empty", file=sys.stderr)
        best_start, best_end = scores.best_start[rows_group, keep], scores.best_end[rows_group, keep]
        has_needle = pd.array([pd.NA] * len(haystacks), dtype="boolean")
        has_needle[positive_idx] = (best_start[positive_idx] <= needle_start[positive_idx]) & (needle_end[positive_idx] <= best_end[positive_idx])
        frames.append(pd.DataFrame({
            "embedder": scorer.name, "strategy": scorer.strategy, "haystack_id": haystacks["id"].to_numpy(),
            "group_id": haystacks["group_id"].to_numpy(), "category": haystacks["category"].to_numpy(),
            "variant": variants, "length": haystacks["length"].to_numpy(), "n_distractors": n_distractors,
            "distractors_in_zone": in_zone, "control_id": control_ids,
            "depth": haystacks["depth"].to_numpy(dtype=float, na_value=np.nan),
            "target_depth": haystacks["target_depth"].to_numpy(dtype=float, na_value=np.nan),
            "query_form": form, "sim_qh": sim_qh.astype(float), "sim_qn": sim_qn, "normalized": normalized,
            "normalized_by": normalize_by if scorer.normalizable else "", "n_tokens": haystacks["n_tokens"].to_numpy(),
            "truncated": seen < lengths, "needle_visible": visible, "windows_exact": scorer.windows_exact,
            "best_chunk": scores.best_piece[rows_group, keep], "chunk_has_needle": has_needle,
        }))
    table = pd.concat(frames, ignore_index=True)[SIMILARITY_COLUMNS]
    return table[table["sim_qh"].notna()].reset_index(drop=True)  # a group without a query form has no rows for it


def retrieval_rows(scored: HaystackScores, needle_set: NeedleSet) -> pd.DataFrame:
    """The rank table of one scorer (DESIGN §3): every needle haystack p ranked, by its
    question's score, among the needle-free haystacks of its pool, with the per-query measures of
    :func:`~embedeval.metrics.retrieval_measures`. A needle haystack's pool, at its length:
    without distractors, every group's control and the ``negative`` pool; with K distractors, the
    negatives that hold its question's K distractors and its own control (``control_id``). So
    the decoys are in every candidate and only the needle tells the haystack apart, and in both
    pools one candidate (its control) shares its filler. Columns:
    :data:`~embedeval.labels.RETRIEVAL_COLUMNS` and then the measures.
    """
    haystacks = scored.haystacks
    variants = haystacks["variant"].to_numpy()
    positive = (variants != CONTROL) & (variants != NEGATIVE)
    lengths = haystacks["length"].to_numpy()
    n_distractors, distractors_of, control_ids = distractor_columns(haystacks)
    pool_keys = list(zip(lengths.tolist(), n_distractors.tolist(), distractors_of.tolist()))
    keys = sorted(set(pool_keys))
    code_of = {key: code for code, key in enumerate(keys)}
    codes = np.array([code_of[key] for key in pool_keys], dtype=np.int64)
    group_index = {g.id: i for i, g in enumerate(needle_set.groups)}
    position = {haystack_id: i for i, haystack_id in enumerate(haystacks["id"])}
    frames = []
    for form, scores in scored.scores.items():
        for code in np.unique(codes[positive]):
            length, count, _ = keys[code]
            same = codes == code
            rows = np.flatnonzero(positive & same)
            query_rows = np.array([group_index[g] for g in haystacks["group_id"].to_numpy()[rows]], dtype=np.int64)
            asked = np.array([scored.queries[form][q] is not None for q in query_rows], dtype=bool)
            rows, query_rows = rows[asked], query_rows[asked]  # groups without this query form are not ranked
            free = ~positive & same
            pool = np.flatnonzero(free & (variants == NEGATIVE) if count else free)
            candidate_scores = scores.values[query_rows][:, pool]
            if count:  # and each haystack's own control
                own = np.array([position.get(c, -1) for c in control_ids[rows]], dtype=np.int64)
                rows, query_rows, candidate_scores = rows[own >= 0], query_rows[own >= 0], candidate_scores[own >= 0]
                own = own[own >= 0]
                candidate_scores = np.concatenate([candidate_scores, scores.values[query_rows, own][:, None]], axis=1)
            if not rows.size or not candidate_scores.shape[1]:
                continue
            groups = haystacks["group_id"].to_numpy()[rows]
            measures = retrieval_measures(scores.values[query_rows, rows], candidate_scores)
            picked = haystacks.iloc[rows]
            frame = pd.DataFrame({
                "embedder": scored.scorer.name, "strategy": scored.scorer.strategy, "query_form": form, "group_id": groups,
                "category": picked["category"].to_numpy(), "variant": picked["variant"].to_numpy(), "length": length,
                "n_distractors": count, "depth": picked["depth"].to_numpy(dtype=float, na_value=np.nan),
                "haystack_id": picked["id"].to_numpy(), "score": scores.values[query_rows, rows].astype(float),
            })
            frames.append(pd.concat([frame, pd.DataFrame(measures)], axis=1))
    return pd.concat(frames, ignore_index=True)[RETRIEVAL_COLUMNS + list(RETRIEVAL_MEASURES)]

"""The similarity table: what is compared with what (DESIGN §3).

One row per embedder x haystack x query form: ``sim_qh`` = cos(query, haystack), ``sim_qn`` =
cos(query, the haystack's bare needle), ``normalized`` = sim_qh / sim_qn, and whether the model
truncated the haystack or saw its needle.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from embedeval.defaults import DEFAULT_NORMALIZE_BY
from embedeval.embedders.base import Embedder
from embedeval.labels import CONTROL, NEGATIVE, RETRIEVAL_COLUMNS, SIMILARITY_COLUMNS
from embedeval.metrics import RETRIEVAL_MEASURES, normalized_similarity, retrieval_measures
from embedeval.needles import STANDARD_NEEDLE, NeedleSet, check_normalize_by
from embedeval.tokens import count_up_to

def similarity_rows(embedder: Embedder, haystacks: pd.DataFrame, needle_set: NeedleSet, forms: dict[str, list[str]],
                    normalize_by: str = DEFAULT_NORMALIZE_BY) -> pd.DataFrame:
    """The similarity table of one embedder (DESIGN §3).

    Haystacks and bare needles are embedded as documents, queries as queries; sim = dot product
    of unit vectors. ``sim_qn`` = sim(query, the normalising needle): with ``normalize_by=
    "standard"`` (the Jina study) the group's standard needle of the variant's family
    (:data:`~embedeval.needles.STANDARD_NEEDLE`: one-hop for one-hop and inverted, literal for
    the literal variants), with ``"own"`` the haystack's own needle. ``normalized = sim_qh /
    sim_qn`` (NaN for controls, and where sim_qn is 0: then it is undefined, and a warning names
    the groups). ``n_tokens`` is the haystack's length in reference tokens; ``truncated``: the
    haystack has more of the embedder's own tokens than it reads (``max_tokens``);
    ``needle_visible``: the text up to the needle's end fits in that window (NA for controls).
    """
    haystacks = haystacks[haystacks["variant"] != NEGATIVE]  # the retrieval pool: see retrieval_rows
    group_index = {g.id: i for i, g in enumerate(needle_set.groups)}
    rows_group = haystacks["group_id"].map(group_index).to_numpy()
    texts = haystacks["text"].tolist()
    doc_vectors = embedder.embed(texts, kind="document")
    positive = (haystacks["variant"] != CONTROL).to_numpy()
    positive_idx = np.flatnonzero(positive)
    check_normalize_by(normalize_by)
    variants = haystacks["variant"].to_numpy()
    divisors = [STANDARD_NEEDLE[variants[i]] if normalize_by == "standard" else variants[i] for i in positive_idx]
    needle_texts = [needle_set.groups[rows_group[i]].needles[v] for i, v in zip(positive_idx, divisors)]
    unique_needles = sorted(set(needle_texts))
    needle_vectors = dict(zip(unique_needles, embedder.embed(unique_needles, kind="document")))
    needle_matrix = np.stack([needle_vectors[t] for t in needle_texts])

    window = embedder.max_tokens
    truncated = count_up_to(embedder.count_tokens, texts, window) > window
    through_needle = [texts[i][: int(haystacks["needle_end"].iloc[i])] for i in positive_idx]
    visible = pd.array([pd.NA] * len(texts), dtype="boolean")
    visible[positive_idx] = count_up_to(embedder.count_tokens, through_needle, window) <= window

    frames = []
    for form, queries in forms.items():
        query_vectors = embedder.embed(queries, kind="query")[rows_group]
        sim_qh = np.einsum("ij,ij->i", query_vectors, doc_vectors)
        sim_qn = np.full(len(texts), np.nan)
        sim_qn[positive_idx] = np.einsum("ij,ij->i", query_vectors[positive_idx], needle_matrix)
        normalized = np.full(len(texts), np.nan)
        defined = positive & (sim_qn != 0)
        if defined.any():
            normalized[defined] = normalized_similarity(sim_qh[defined], sim_qn[defined])
        undefined = sorted(set(haystacks["group_id"].to_numpy()[positive & ~defined]))
        if undefined:
            print(f"warning: {embedder.name} [{form}]: sim(query, needle) is 0 for {', '.join(undefined)}; "
                  "their normalized similarity is left empty", file=sys.stderr)
        frames.append(pd.DataFrame({
            "embedder": embedder.name, "haystack_id": haystacks["id"].to_numpy(),
            "group_id": haystacks["group_id"].to_numpy(), "category": haystacks["category"].to_numpy(),
            "variant": haystacks["variant"].to_numpy(), "length": haystacks["length"].to_numpy(),
            "depth": haystacks["depth"].to_numpy(dtype=float, na_value=np.nan),
            "target_depth": haystacks["target_depth"].to_numpy(dtype=float, na_value=np.nan),
            "query_form": form, "sim_qh": sim_qh.astype(float), "sim_qn": sim_qn.astype(float),
            "normalized": normalized, "normalized_by": normalize_by, "n_tokens": haystacks["n_tokens"].to_numpy(), "truncated": truncated,
            "needle_visible": visible,
        }))
    return pd.concat(frames, ignore_index=True)[SIMILARITY_COLUMNS]


def retrieval_rows(embedder: Embedder, haystacks: pd.DataFrame, needle_set: NeedleSet, forms: dict[str, list[str]]) -> pd.DataFrame:
    """The rank table of one embedder (DESIGN §3): every needle haystack p ranked, by its
    question's score, among the needle-free haystacks of its length (every group's control and
    the ``negative`` pool), with the per-query measures of
    :func:`~embedeval.metrics.retrieval_measures`. Columns: :data:`~embedeval.labels.RETRIEVAL_COLUMNS`
    and then the measures. The pool costs one embedding per haystack, shared by all questions.
    """
    variants = haystacks["variant"].to_numpy()
    positive = (variants != CONTROL) & (variants != NEGATIVE)
    doc_vectors = embedder.embed(haystacks["text"].tolist(), kind="document")
    lengths = haystacks["length"].to_numpy()
    group_index = {g.id: i for i, g in enumerate(needle_set.groups)}
    frames = []
    for form, queries in forms.items():
        query_vectors = embedder.embed(queries, kind="query")
        for length in np.unique(lengths):
            pool = np.flatnonzero(~positive & (lengths == length))
            rows = np.flatnonzero(positive & (lengths == length))
            if not rows.size or not pool.size:
                continue
            groups = haystacks["group_id"].to_numpy()[rows]
            q = query_vectors[[group_index[g] for g in groups]]
            scores = np.einsum("ij,ij->i", q, doc_vectors[rows])
            measures = retrieval_measures(scores, q @ doc_vectors[pool].T)
            picked = haystacks.iloc[rows]
            frame = pd.DataFrame({
                "embedder": embedder.name, "query_form": form, "group_id": groups,
                "category": picked["category"].to_numpy(), "variant": picked["variant"].to_numpy(), "length": length,
                "depth": picked["depth"].to_numpy(dtype=float, na_value=np.nan), "haystack_id": picked["id"].to_numpy(),
                "score": scores.astype(float),
            })
            frames.append(pd.concat([frame, pd.DataFrame(measures)], axis=1))
    return pd.concat(frames, ignore_index=True)[RETRIEVAL_COLUMNS + list(RETRIEVAL_MEASURES)]

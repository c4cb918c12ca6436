"""Similarity inputs for LLM long-context studies (after Chroma's Context Rot study).

``needle_question_similarity``: cosine of each question with each of its needles.
``needle_haystack_similarity``: for each needle, the mean cosine of its top-k corpus chunks.
``answer_absence``: each question's top-k corpus chunks, flagged where a chunk contains the
question's keyword or a character name, for a human to confirm the haystack does not already
answer the question.

The first two are computed per embedder, then combined into one wide table with a column per
embedder plus ``mean`` and ``std`` (sample std, ddof=1) across embedders.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from embedeval.chunking import Chunk
from embedeval.defaults import DEFAULT_ABSENCE_INDEX, DEFAULT_ABSENCE_TOP_K, DEFAULT_INDEX, DEFAULT_TOP_K
from embedeval.index import top_k
from embedeval.needles import NEEDLE_VARIANTS, NeedleSet

KEYS = ["group_id", "category", "variant"]


def _needle_rows(needle_set: NeedleSet, variants: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame([
        {"group_id": g.id, "category": g.category, "variant": v, "question": g.question, "needle": g.needles[v]}
        for g in needle_set.groups for v in variants
    ])


def across_embedders(per_embedder: dict[str, pd.Series], base: pd.DataFrame) -> pd.DataFrame:
    """``base`` plus one column per embedder and the ``mean``/``std`` (ddof=1) across them."""
    table = base.copy()
    for name, values in per_embedder.items():
        table[name] = np.asarray(values, dtype=float)
    matrix = table[list(per_embedder)].to_numpy(float)
    table["mean"] = matrix.mean(axis=1)
    table["std"] = matrix.std(axis=1, ddof=1) if matrix.shape[1] > 1 else np.nan
    return table


def needle_question_similarity(needle_set: NeedleSet, embedders: Sequence, variants: Sequence[str] = NEEDLE_VARIANTS) -> pd.DataFrame:
    """cos(question as query, needle as document) for every group x variant, per embedder."""
    base = _needle_rows(needle_set, variants)
    per_embedder = {}
    for embedder in embedders:
        questions = embedder.embed(base["question"].tolist(), kind="query")
        needles = embedder.embed(base["needle"].tolist(), kind="document")
        per_embedder[embedder.name] = np.einsum("ij,ij->i", questions, needles)
    return across_embedders(per_embedder, base)


def needle_haystack_similarity(
    needle_set: NeedleSet, chunks: list[Chunk], embedders: Sequence, top: int = DEFAULT_TOP_K, index: str = DEFAULT_INDEX,
    variants: Sequence[str] = NEEDLE_VARIANTS,
) -> pd.DataFrame:
    """Mean cosine of each needle (as query) with its ``top`` most similar corpus chunks."""
    base = _needle_rows(needle_set, variants).drop(columns="question")
    texts = [c.text for c in chunks]
    per_embedder = {}
    for embedder in embedders:
        chunk_vectors = embedder.embed(texts, kind="document")
        needle_vectors = embedder.embed(base["needle"].tolist(), kind="query")
        scores, _ = top_k(chunk_vectors, needle_vectors, top, index=index)
        per_embedder[embedder.name] = scores.mean(axis=1)
    return across_embedders(per_embedder, base)


def answer_absence(needle_set: NeedleSet, chunks: list[Chunk], embedder, top: int = DEFAULT_ABSENCE_TOP_K, index: str = DEFAULT_ABSENCE_INDEX,
                   path=None) -> pd.DataFrame:
    """Each question's ``top`` nearest chunks (``index``, chromadb by default), flagged for review."""
    texts = [c.text for c in chunks]
    vectors = embedder.embed(texts, kind="document")
    questions = embedder.embed([g.question for g in needle_set.groups], kind="query")
    scores, ids = top_k(vectors, questions, top, index=index, path=path, documents=texts)
    names = needle_set.character_pattern()
    rows = []
    for g, group in enumerate(needle_set.groups):
        keyword = re.compile(rf"\b{re.escape(group.keyword)}\b", re.I)
        for rank, (score, i) in enumerate(zip(scores[g], ids[g]), start=1):
            chunk = chunks[int(i)]
            rows.append({"group_id": group.id, "question": group.question, "keyword": group.keyword, "rank": rank,
                         "similarity": float(score), "chunk_id": chunk.id, "book": chunk.book, "chunk": chunk.text,
                         "contains_keyword": bool(keyword.search(chunk.text)),
                         "contains_character": bool(names.search(chunk.text))})
    return pd.DataFrame(rows)

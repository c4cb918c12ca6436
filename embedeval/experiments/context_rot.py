"""Similarity inputs for LLM long-context studies (after Chroma's Context Rot study).

``needle_question_similarity``: cosine of each question with each of its needles.
``needle_haystack_similarity``: for each needle, the mean cosine of its top-k corpus chunks.
``answer_absence``: each distinct question's top-k corpus chunks, flagged where a chunk contains
the question's keyword or a character name, for a human to confirm the haystack does not already
answer the question.

Each takes its questions and needles from a needle set (one row per group x variant, keyed by
``group_id``, ``category``, ``variant``) or from question-needle pairs of a pair file (one row per
pair, keyed by ``id``, ``topic``); :func:`pair_rows` turns either into the same table, so both go
through one code path. Rows carry ``shared_words``: the lemmas the question and needle share
(";"-joined, empty when none), reported here, never refused.

The first two are computed per embedder, then combined into one wide table with a column per
embedder plus ``mean`` and ``std`` (sample std, ddof=1) across embedders.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from embedeval.chunking import Chunk
from embedeval.defaults import DEFAULT_ABSENCE_INDEX, DEFAULT_ABSENCE_TOP_K, DEFAULT_INDEX, DEFAULT_TOP_K
from embedeval.errors import InputError
from embedeval.index import collection_identity, top_k
from embedeval.needles import NEEDLE_VARIANTS, NeedleSet, Pair
from embedeval.schema import QUERY_FORM
from embedeval.text import holds_words, lexical_overlap, words

KEYS = ["group_id", "category", "variant"]
#: The key columns of rows from a pair file.
PAIR_KEYS = ["id", "topic"]
#: Where questions and needles come from: a needle set, or the pairs of a pair file.
Source = NeedleSet | Sequence[Pair]


def pair_rows(source: Source, variants: Sequence[str] = NEEDLE_VARIANTS) -> pd.DataFrame:
    """One row per question-needle pair of ``source``: the key columns (``group_id``, ``category``,
    ``variant`` for each group x variant of a needle set that the group has, its character filled
    in with the group's first name; ``id``, ``topic`` for pairs, whose ``variants`` are not used),
    then ``question``, ``needle`` and ``shared_words`` (the shared
    lemmas of :func:`~embedeval.text.lexical_overlap`, ";"-joined; empty when none)."""
    if isinstance(source, NeedleSet):
        rows = [{"group_id": g.id, "category": g.category, "variant": v, "question": g.question, "needle": g.needle(v)}
                for g in source.groups for v in variants if v in g.needles]
        columns = KEYS
    else:
        rows = [{"id": p.id, "topic": p.topic, "question": p.question, "needle": p.needle} for p in source]
        columns = PAIR_KEYS
    table = pd.DataFrame(rows, columns=[*columns, "question", "needle"])
    table["shared_words"] = [";".join(lexical_overlap(q, n)) for q, n in zip(table["question"], table["needle"], strict=True)]
    return table


def question_key(question: str) -> str:
    """What makes two spellings one question for the search (:func:`distinct_questions`): the
    text with its whitespace collapsed."""
    return " ".join(question.split())


def distinct_questions(source: Source) -> pd.DataFrame:
    """One row per distinct question of ``source`` (whitespace-normalised, first spelling kept), in
    order of first appearance: ``question``, ``needles`` (the group ids or pair ids that ask it,
    ";"-joined), ``n_needles`` and ``keyword`` (the groups' distinct keywords, ";"-joined; empty
    for pairs, which name none)."""
    items = ([(g.question, g.id, g.keyword) for g in source.groups] if isinstance(source, NeedleSet)
             else [(p.question, p.id, "") for p in source])
    questions: dict[str, dict] = {}
    for question, item_id, keyword in items:
        entry = questions.setdefault(question_key(question), {"question": question, "ids": [], "keywords": []})
        entry["ids"].append(item_id)
        if keyword and keyword not in entry["keywords"]:
            entry["keywords"].append(keyword)
    return pd.DataFrame(
        [{"question": e["question"], "needles": ";".join(e["ids"]), "n_needles": len(e["ids"]), "keyword": ";".join(e["keywords"])}
         for e in questions.values()],
        columns=["question", "needles", "n_needles", "keyword"],
    )


def across_embedders(per_embedder: dict[str, pd.Series], base: pd.DataFrame) -> pd.DataFrame:
    """``base`` plus one column per embedder and the ``mean``/``std`` (ddof=1) across them. With one
    embedder there is no spread: ``std`` is empty (missing, ``pd.NA``; an empty cell in CSV, null
    in Parquet), not a number."""
    table = base.copy()
    for name, values in per_embedder.items():
        table[name] = np.asarray(values, dtype=float)
    matrix = table[list(per_embedder)].to_numpy(float)
    table["mean"] = matrix.mean(axis=1)
    table["std"] = matrix.std(axis=1, ddof=1) if matrix.shape[1] > 1 else pd.array([pd.NA] * len(table), dtype="Float64")
    return table


def means_by_topic(table: pd.DataFrame, embedders: Sequence[str]) -> pd.DataFrame:
    """The mean of each embedder's column (and of ``mean``, with several embedders) per topic of a
    similarity table: ``topic`` for rows of a pair file (empty topics as ``-``), ``category`` for
    rows of a needle set; ``n`` the rows of each, topics in order of first appearance."""
    key = "topic" if "topic" in table.columns else "category"
    columns = [*embedders, "mean"] if len(embedders) > 1 else list(embedders)
    topics = table[key].fillna("").astype(str).replace("", "-")
    grouped = table.assign(**{key: topics}).groupby(key, sort=False)
    summary = grouped[columns].mean()
    summary.insert(0, "n", grouped.size())
    return summary


def needle_question_similarity(source: Source, embedders: Sequence, variants: Sequence[str] = NEEDLE_VARIANTS) -> pd.DataFrame:
    """cos(question as query, needle as document) for every row of :func:`pair_rows`, per embedder."""
    return _question_text_cosines(pair_rows(source, variants), "needle", embedders)


def distractor_question_similarity(needle_set: NeedleSet, embedders: Sequence) -> pd.DataFrame:
    """cos(question as query, distractor as document) for every distractor of the set (the
    Context Rot analysis: how close a keyword-sharing distractor comes to its question), per
    embedder. A distractor is paired with the question of its query form."""
    rows = [{"group_id": g.id, "category": g.category, QUERY_FORM: form, "distractor_id": k,
             "question": g.query(form) or g.question, "distractor": text}
            for g in needle_set.groups for k, (form, text) in enumerate(g.distractors)]
    if not rows:
        raise InputError(f"needle set {needle_set.name!r} has no distractors")
    return _question_text_cosines(pd.DataFrame(rows), "distractor", embedders)


def _question_text_cosines(base: pd.DataFrame, column: str, embedders: Sequence) -> pd.DataFrame:
    """cos(``question`` as query, ``column`` as document) per row of ``base``, per embedder, with
    mean and std across embedders (:func:`across_embedders`)."""
    per_embedder = {}
    for embedder in embedders:
        questions = embedder.embed(base["question"].tolist(), kind="query")
        texts = embedder.embed(base[column].tolist(), kind="document")
        per_embedder[embedder.name] = np.einsum("ij,ij->i", questions, texts)
    return across_embedders(per_embedder, base)


def _chunk_search(embedder, chunks: list[Chunk], queries: list[str], top: int, index: str, path=None,
                  url: str | None = None, origin: Mapping[str, object] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Top-``top`` chunks per query text (embedded as queries). With chromadb the chunk vectors go
    into a collection named after the embedder and the chunks (``origin``: corpus, chunker, seed,
    recorded with it); one already complete is reused, and the chunks are then not embedded."""
    texts = [c.text for c in chunks]
    if index != "chroma":
        vectors = embedder.embed(texts, kind="document")
        return top_k(vectors, embedder.embed(queries, kind="query"), top, index=index, path=path, url=url)
    identity = collection_identity(embedder.name, embedder.fingerprint, embedder.dim, [c.id for c in chunks], texts, origin)
    return top_k(lambda: embedder.embed(texts, kind="document"), embedder.embed(queries, kind="query"), top,
                 index=index, path=path, documents=texts, url=url, identity=identity)


def needle_haystack_similarity(
    source: Source, chunks: list[Chunk], embedders: Sequence, top: int = DEFAULT_TOP_K, index: str = DEFAULT_INDEX,
    variants: Sequence[str] = NEEDLE_VARIANTS, path=None, chroma_url: str | None = None,
    chunk_origin: Mapping[str, object] | None = None,
) -> pd.DataFrame:
    """Mean cosine of each needle (as query) with its ``top`` most similar corpus chunks, for every
    row of :func:`pair_rows` (without its question column). ``index="chroma"`` keeps the chunk
    vectors in chromadb (a temporary folder, the folder ``path`` or the server ``chroma_url``),
    one collection per embedder and chunk set, reused by later runs."""
    base = pair_rows(source, variants).drop(columns="question")
    per_embedder = {}
    for embedder in embedders:
        scores, _ = _chunk_search(embedder, chunks, base["needle"].tolist(), top, index, path, chroma_url, chunk_origin)
        per_embedder[embedder.name] = scores.mean(axis=1)
    return across_embedders(per_embedder, base)


def answer_absence(source: Source, chunks: list[Chunk], embedder, top: int = DEFAULT_ABSENCE_TOP_K, index: str = DEFAULT_ABSENCE_INDEX,
                   path=None, chroma_url: str | None = None, chunk_origin: Mapping[str, object] | None = None) -> pd.DataFrame:
    """Each distinct question's ``top`` nearest chunks (``index``, chromadb by default), flagged for review.

    A question asked by several groups or pairs is searched once; its rows list them all
    (``needles``, ``n_needles``; see :func:`distinct_questions`). ``contains_keyword``: the chunk
    holds one of the question's keywords as whole words; ``contains_character``: it holds a
    character name of the set (both compared as every needle check compares words,
    :func:`~embedeval.text.words`). Pairs name neither, so for them both flags are empty (NA).
    """
    questions = distinct_questions(source)
    scores, ids = _chunk_search(embedder, chunks, questions["question"].tolist(), top, index, path, chroma_url, chunk_origin)
    names = [words(name) for name in source.characters] if isinstance(source, NeedleSet) else None
    rows = []
    for q, question in enumerate(questions.itertuples(index=False)):
        keywords = [words(k) for k in question.keyword.split(";") if k]
        for rank, (score, i) in enumerate(zip(scores[q], ids[q], strict=True), start=1):
            chunk = chunks[int(i)]
            held = words(chunk.text)
            rows.append({"question": question.question, "needles": question.needles, "n_needles": question.n_needles,
                         "keyword": question.keyword, "rank": rank, "similarity": float(score), "chunk_id": chunk.id,
                         "book": chunk.book, "chunk": chunk.text,
                         "contains_keyword": any(holds_words(held, k) for k in keywords) if keywords else pd.NA,
                         "contains_character": any(holds_words(held, n) for n in names) if names else pd.NA})
    return pd.DataFrame(rows).astype({"contains_keyword": "boolean", "contains_character": "boolean"})

"""What a theme is shown by: its top terms (class-based TF-IDF, :func:`top_terms`) and its
representative chunks (maximal marginal relevance around its mean vector, :func:`representatives`)."""

from __future__ import annotations

import numpy as np

from embedeval.metrics.neighbours import mmr
from embedeval.text import topic_terms

TOP_TERMS = 8


def top_terms(texts: list[str], labels: np.ndarray, clusters: list[int], n: int = TOP_TERMS) -> dict[int, list[str]]:
    """Class-based TF-IDF: each cluster's chunks joined into one document; a term's weight is its
    frequency in the cluster (relative to the cluster's words) x log(1 + mean words per cluster /
    its frequency over all clusters). The ``n`` heaviest terms per cluster; terms are the words of
    :func:`~embedeval.text.topic_terms` (English stop words and contractions out, so no fragment
    such as ``don`` or ``ve`` is a term)."""
    from sklearn.feature_extraction.text import CountVectorizer

    if not clusters:
        return {}
    documents = [" ".join(t for t, label in zip(texts, labels, strict=True) if label == c) for c in clusters]
    vectorizer = CountVectorizer(analyzer=topic_terms)
    counts = vectorizer.fit_transform(documents).toarray().astype(float)
    if not counts.size:
        return {c: [] for c in clusters}
    tf = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    idf = np.log(1 + counts.sum(axis=1).mean() / np.maximum(counts.sum(axis=0), 1))
    weights = tf * idf
    terms = vectorizer.get_feature_names_out()
    return {c: [terms[j] for j in np.argsort(-weights[i], kind="stable")[:n] if weights[i, j] > 0] for i, c in enumerate(clusters)}


def representatives(vectors: np.ndarray, members: np.ndarray, k: int, lam: float) -> list[int]:
    """Indices (into ``vectors``) of ``k`` representatives of a cluster by :func:`~embedeval.metrics.neighbours.mmr`:
    relevance = cosine to the cluster's normalised mean vector, similarity = pairwise cosine."""
    cluster = vectors[members]
    centroid = cluster.mean(axis=0)
    centroid /= np.linalg.norm(centroid) or 1.0
    return [int(members[i]) for i in mmr(cluster @ centroid, cluster @ cluster.T, k, lam)]

"""Where new texts land among a themes run's clusterings: placed in each clustering's UMAP layout
by the first UMAP's neighbour graph (:func:`placement`), predicted by each HDBSCAN and averaged
into a probability per consensus theme (:func:`theme_probabilities`, :func:`predicted_themes`)."""

from __future__ import annotations

import numpy as np

from embedeval.consensus import run_cluster_themes
from embedeval.errors import InputError
from embedeval.labels import NOISE
from embedeval.metrics.neighbours import nearest_cosines

#: Cosines of (float32) embeddings closer than this are equal: a placed vector whose cosine to a corpus
#: chunk is within it of 1 is that chunk (it lands on the chunk's position), and neighbour similarities
#: within it of each other are ties in a percentile.
COSINE_RESOLUTION = 1e-6


def placement(reducer, vectors: np.ndarray, corpus: np.ndarray):
    """How new vectors are placed in a fitted UMAP's space, as a function of the corpus's positions:
    ``positions -> (m, d)`` for any (n, d) layout of the corpus (the first clustering's UMAP
    finds the neighbours and their weights once; every clustering of the consensus places the
    texts on its own layout with them). ``corpus``: the vectors UMAP was fitted on (row i at
    ``reducer.embedding_[i]``). A vector equal to a corpus chunk's (cosine >= 1 - 1e-6) lands
    exactly on that chunk's position (on one of them for a text the corpus holds twice); any
    other at the weighted mean of its nearest corpus chunks' positions, the weights those of UMAP's
    fuzzy neighbour graph (``transform_mode="graph"``, each row normalised to sum 1):

        y_new = sum_j w_j * y_j / sum_j w_j

    (the weighted mean alone moves a corpus chunk by about one or two nearest-neighbour distances:
    its other neighbours pull it). This is where UMAP's own ``transform`` starts; it then runs a few
    noisy optimisation epochs that move every point off it (a corpus chunk placed again drops from
    probability about 1 to 0.6-0.8, and the result depends on the other texts placed with it).
    Here each text is placed on its own. The weights are rescaled per text, so how far the
    neighbours are is lost: a text about none of the corpus's topics still lands amid some
    neighbourhood (:func:`~embedeval.experiments.themes.membership.theme_membership` measures that distance in the embedding space)."""
    from sklearn.preprocessing import normalize

    if len(corpus) != len(reducer.embedding_):
        raise InputError(f"{len(corpus)} corpus vectors for a UMAP fitted on {len(reducer.embedding_)}")
    mode = reducer.transform_mode
    reducer.transform_mode = "graph"
    try:
        graph = normalize(reducer.transform(vectors), norm="l1")
    finally:
        reducer.transform_mode = mode
    best, row = (a[:, 0] for a in nearest_cosines(vectors, corpus, 1))
    same = best >= 1 - COSINE_RESOLUTION

    def positions(layout: np.ndarray) -> np.ndarray:
        placed = np.asarray(graph @ layout)
        placed[same] = layout[row[same]]
        return placed

    return positions


def place(reducer, vectors: np.ndarray, corpus: np.ndarray) -> np.ndarray:
    """Where new vectors sit in a fitted UMAP's own space (:func:`placement` on ``reducer.embedding_``)."""
    return placement(reducer, vectors, corpus)(reducer.embedding_)


def theme_probabilities(positions, clusterers: list, clusterings: dict[str, np.ndarray], themes: int) -> tuple[np.ndarray, np.ndarray]:
    """Each placed text's probability and share of clusterings per consensus theme, (m, T) each.
    Clustering r places the texts on its layout (``positions(clusterings["reduced"][r])``,
    :func:`placement`), HDBSCAN's ``approximate_predict`` gives each a cluster c_r and a strength
    s_r, and c_r's theme is the consensus theme it matches (:func:`~embedeval.consensus.matches`;
    none for noise or an unmatched cluster):

        probability[t] = (1 / R) * sum_r s_r * [theme(c_r) = t]      share[t] = (1 / R) * sum_r [theme(c_r) = t]

    With one clustering these are HDBSCAN's own prediction and strength."""
    import hdbscan

    count = len(clusterers)
    probability = share = None
    for r, clusterer in enumerate(clusterers):
        raw, strengths = hdbscan.approximate_predict(clusterer, positions(clusterings["reduced"][r]))
        theme = run_cluster_themes(clusterings["matches"][r], raw)
        if probability is None:
            probability, share = np.zeros((len(raw), themes)), np.zeros((len(raw), themes))
        hit = np.flatnonzero(theme != NOISE)
        probability[hit, theme[hit]] += strengths[hit] / count
        share[hit, theme[hit]] += 1 / count
    return probability, share


def predicted_themes(probabilities: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """Each text's predicted theme from :func:`theme_probabilities`: the theme of the highest
    probability (of two of one probability, the one more clusterings predict it into, then the
    smaller number), or -1 when no clustering predicts it into a theme (each calls it noise or puts
    it in a cluster of its own that matches no theme; a prediction of strength 0 into a theme still
    names it)."""
    if not probabilities.shape[1]:
        return np.full(len(probabilities), NOISE, dtype=np.int64)
    themes = np.arange(probabilities.shape[1])
    best = np.array([np.lexsort((themes, -share, -probability))[0] for probability, share in zip(probabilities, shares, strict=True)],
                    dtype=np.int64)
    return np.where(shares.max(axis=1) > 0, best, NOISE)

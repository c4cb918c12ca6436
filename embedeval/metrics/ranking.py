"""Ranking measures: each needle haystack ranked among its pool of candidates (recall@k, MRR,
nDCG by trec_eval, the share of the pool it beats), and recall@k corrected for chance."""

from __future__ import annotations

import numpy as np

from embedeval.labels import RETRIEVAL_MEASURES
from embedeval.metrics.arrays import as_array

#: trec_eval's names for the retrieval measures (:data:`~embedeval.labels.RETRIEVAL_MEASURES`,
#: computed by pytrec_eval).
_TREC_MEASURES = {"recall@1": "recall_1", "recall@5": "recall_5", "recall@10": "recall_10", "mrr": "recip_rank",
                  "ndcg@1": "ndcg_cut_1", "ndcg@10": "ndcg_cut_10"}


def retrieval_measures(pos_scores, pool_scores, in_pool=None) -> dict[str, np.ndarray]:
    """Each positive ranked among its pool (LongEmbed-style, one relevant candidate per query):
    ``{"rank", "ties", "n_candidates", *RETRIEVAL_MEASURES}``, an array per key.

    ``pos_scores[i]`` is query i's score for its needle haystack, ``pool_scores[i, j]`` its score
    for the j-th candidate that does not answer it; ``in_pool[i, j]`` (boolean, default all true)
    says whether candidate j is in query i's pool at all, so queries sharing a table of candidates
    may each leave some out (in :func:`~embedeval.similarity.retrieval_rows`' ``all`` pool, the
    haystacks holding the query's own needle); outside the pool a score may be anything, NaN
    included. With m_i = #{j in pool i}, ties are broken against the positive:
    ``rank = 1 + #{j in pool: pool >= pos}``, ``ties = #{j in pool: pool == pos}``, ``n_candidates = m_i + 1``.
    ``recall@k`` = 1[rank <= k], ``mrr`` = 1 / rank, ``ndcg@k`` = 1 / log2(rank + 1) if rank <= k
    (k = 1, 10; the ideal DCG of one relevant item is 1, so ndcg@1 = recall@1) are computed by
    trec_eval (``pytrec_eval``), fed the real scores with the positive's nudged just below any
    equal one, so its tie-breaking agrees; ``mrr@10`` = trec_eval's ``mrr`` where rank <= 10, else 0
    (MTEB's ``mrr_at_10``).
    ``query_auc`` = (#{pool < pos} + 0.5 #{pool == pos}) / m_i: the share of the pool it beats.
    """
    import pytrec_eval

    pos = as_array(pos_scores, "pos_scores").astype(np.float32)
    pool = np.asarray(pool_scores, dtype=np.float32)
    if pool.ndim != 2 or pool.shape[0] != pos.size or pool.shape[1] == 0:
        raise ValueError(f"pool_scores must be a ({pos.size}, m >= 1) array, not shape {pool.shape}")
    mask = np.ones(pool.shape, dtype=bool) if in_pool is None else np.asarray(in_pool, dtype=bool)
    if mask.shape != pool.shape:
        raise ValueError(f"in_pool must have pool_scores' shape {pool.shape}, not {mask.shape}")
    size = mask.sum(axis=1)
    if (size == 0).any() or not np.isfinite(pool[mask]).all():
        raise ValueError("every query needs a pool of at least one candidate, with finite scores")
    above = ((pool > pos[:, None]) & mask).sum(axis=1)
    ties = ((pool == pos[:, None]) & mask).sum(axis=1)
    below = size - above - ties
    nudged = np.nextafter(pos, np.float32(-np.inf))  # below an equal pool score, above any lower one
    qrels = {str(i): {"positive": 1} for i in range(pos.size)}
    run = {str(i): {"positive": float(nudged[i]), **{f"c{j}": float(pool[i, j]) for j in np.flatnonzero(mask[i])}}
           for i in range(pos.size)}
    trec = pytrec_eval.RelevanceEvaluator(qrels, {"recall.1,5,10", "recip_rank", "ndcg_cut.1,10"}).evaluate(run)
    table = {"rank": 1 + above + ties, "ties": ties, "n_candidates": size + 1}
    for name, trec_name in _TREC_MEASURES.items():
        table[name] = np.array([trec[str(i)][trec_name] for i in range(pos.size)])
    table["mrr@10"] = np.where(table["rank"] <= 10, table["mrr"], 0.0)
    table["query_auc"] = (below + 0.5 * ties) / size
    return {name: table[name] for name in ("rank", "ties", "n_candidates", *RETRIEVAL_MEASURES)}


def chance_corrected_recall(recall, k: int, n_candidates):
    """Recall@k corrected for chance, for one relevant candidate among ``n_candidates`` ranked:
    a random ranking puts it in the top k with probability k / n, so

        r_cc = (r - k/n) / (1 - k/n)

    is 0 at chance, 1 for a perfect ranker and negative below chance (the kappa form). NaN where
    k >= n (every ranking finds it: there is nothing to correct against). Elementwise over
    ``recall`` and ``n_candidates``; the mean of per-query values equals the corrected mean
    recall when n is the same for every query."""
    recall = np.asarray(recall, dtype=float)
    n_candidates = np.asarray(n_candidates, dtype=float)
    if k < 1:
        raise ValueError(f"k must be >= 1, not {k}")
    if np.any(n_candidates < 1):
        raise ValueError("n_candidates must be >= 1")
    return chance_corrected(recall, recall_chance(k, n_candidates))


def chance_corrected(value, chance):
    """``value`` corrected for a chance level, (v - c) / (1 - c): 0 at the chance level, 1 at 1,
    NaN where the chance level is 1 (nothing to correct against). Elementwise. The chance level is
    k/n for a random ranking (:func:`chance_corrected_recall`), or a measured needle-blind level
    (a several-needle haystack's own control, which holds the other needles)."""
    value, chance = np.asarray(value, dtype=float), np.asarray(chance, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(chance < 1, (value - chance) / (1 - chance), np.nan)


def recall_chance(k: int, n_candidates):
    """The recall@k of a random ranking of one relevant candidate among ``n_candidates``:
    min(k / n, 1), elementwise (10/17 = 0.59 at recall@10 for a pool of 17; 10/12 = 0.83 for 12)."""
    return np.minimum(k / np.asarray(n_candidates, dtype=float), 1.0)

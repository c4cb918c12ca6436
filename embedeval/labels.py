"""The vocabulary of embedeval's tables, defined once: labels that builders, metrics and the
report all match on (a run's pool is checked against :data:`POOLS` by its option,
:data:`embedeval.options.POOL`)."""

#: ``variant`` of a needle-free haystack paired with a (group, length) condition.
CONTROL = "control"
#: ``variant`` of a needle-free haystack of a length's shared retrieval pool (``--negatives``).
NEGATIVE = "negative"
#: The query form of the plain question (expanded forms are ``expanded-N``).
QUESTION = "question"
#: ``category`` / ``depth_bucket`` of a metric computed over every category or depth.
ALL = "all"
#: The retrieval pools (``pool`` of a run; :func:`embedeval.similarity.retrieval_rows`): each needle
#: haystack ranked among the needle-free haystacks of its length ("needle-free"), or among every
#: haystack of its length and depth that does not answer its question, other questions' needle
#: haystacks included, as LongEmbed ranks among all documents of a split ("all").
NEEDLE_FREE_POOL = "needle-free"
ALL_POOL = "all"
POOLS = (NEEDLE_FREE_POOL, ALL_POOL)
#: The per-query retrieval measures of :func:`embedeval.metrics.ranking.retrieval_measures`, in this order.
RETRIEVAL_MEASURES = ("recall@1", "recall@5", "recall@10", "mrr", "mrr@10", "ndcg@1", "ndcg@10", "query_auc")
#: Metrics a break point may be read from (``--break-metric``): the retrieval measures and the
#: study's pooled AUC and comparative ratio.
BREAK_METRICS = RETRIEVAL_MEASURES + ("auc", "comparative_ratio")
#: The separation metrics of :func:`embedeval.aggregate.nolima_metrics`: needle haystacks against
#: their controls, and where in a haystack the needle sits.
SEPARATION_METRICS = ("normalized_mean", "comparative_ratio", "auc", "mean_diff", "cohens_d", "needle_visible_share",
                      "truncated_share", "chunk_has_needle_share", "pearson_r", "spearman_rho", "slope", "intercept")
#: Every ``metric`` of a run's ``metrics.csv``, of this version and every earlier one.
METRIC_NAMES = SEPARATION_METRICS + RETRIEVAL_MEASURES
#: The range of each metric bounded by what it is (a share, a rate, an AUC, a correlation), both ends
#: inclusive; the others (a mean difference, an effect size, a slope) may be any finite number.
METRIC_RANGES = {**{name: (0.0, 1.0) for name in (*RETRIEVAL_MEASURES, "comparative_ratio", "auc", "needle_visible_share",
                                                   "truncated_share", "chunk_has_needle_share")},
                 "pearson_r": (-1.0, 1.0), "spearman_rho": (-1.0, 1.0)}
#: ``variant`` of a rank-table row that ranks a K-needle haystack's own control (its K - 1 other
#: needles, not its own) by the haystack's question in the haystack's pool: the needle-blind level of
#: that question's rows, ``blind:<variant>`` (only for K > 1; a one-needle control holds no needle).
BLIND_PREFIX = "blind:"


def is_blind(variant) -> bool:
    """Whether a rank-table ``variant`` labels needle-blind control rows (:data:`BLIND_PREFIX`)."""
    return str(variant).startswith(BLIND_PREFIX)


#: ``cluster`` of a corpus chunk HDBSCAN leaves out of every theme (its noise label).
NOISE = -1

"""Metrics of the NoLiMa-for-embeddings study: pure, vectorised functions on arrays, one module per job.

No I/O and no models. Every function validates its input and raises ``ValueError`` saying what
is wrong (empty, mismatched lengths, NaN, zero denominators, a single class).

- :mod:`~embedeval.metrics.arrays`: the input checks they share
- :mod:`~embedeval.metrics.separation`: normalized similarity, comparative ratio, separation (mean difference, AUC, Cohen's d)
- :mod:`~embedeval.metrics.moments`: mean difference, Cohen's d, correlations and regression, with frequency weights
- :mod:`~embedeval.metrics.ranking`: retrieval measures of a ranked pool (pytrec_eval), chance-corrected recall
- :mod:`~embedeval.metrics.neighbours`: maximal marginal relevance, nearest cosines, percentile rank
- :mod:`~embedeval.metrics.position`: position effects and depth buckets
- :mod:`~embedeval.metrics.break_estimators`: break points, the monotone fit, the at-chance test, the chunk size
- :mod:`~embedeval.metrics.bootstrap`: percentile and cluster bootstrap intervals
"""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.metrics import roc_auc_score

from embedeval.metrics.bootstrap import bootstrap_ci
from embedeval.metrics.break_estimators import break_point, recommended_chunk_tokens
from embedeval.metrics.moments import cohens_d
from embedeval.metrics.position import position_effects
from embedeval.metrics.separation import comparative_ratio, normalized_similarity, separation

rng = np.random.default_rng(42)


def test_worked_example_from_the_study():
    assert normalized_similarity([0.2391], [0.3598])[0] == pytest.approx(0.66454, abs=5e-6)
    np.testing.assert_allclose(normalized_similarity([0.5, 0.1], [1.0, 0.4]), [0.5, 0.25])


def test_comparative_ratio_hand_cases_with_ties():
    assert comparative_ratio([0.9, 0.8, 0.7, 0.6], [0.1, 0.1, 0.1, 0.1]) == 1.0
    assert comparative_ratio([0.1, 0.2], [0.3, 0.4]) == 0.0
    # win, loss, tie, tie -> (1 + 0 + 0.5 + 0.5) / 4
    assert comparative_ratio([0.5, 0.2, 0.3, 0.4], [0.4, 0.3, 0.3, 0.4]) == 0.5
    assert comparative_ratio([0.5, 0.5, 0.1], [0.5, 0.4, 0.2]) == pytest.approx((0.5 + 1 + 0) / 3)


def test_comparative_ratio_table_pairs_with_the_condition_control():
    from embedeval.aggregate import comparative_ratio_table

    table = pd.DataFrame({
        "embedder": "e", "query_form": "question",
        "group_id": ["g1", "g1", "g1", "g2", "g2", "g2", "g1", "g1"],
        "length": [128, 128, 128, 128, 128, 128, 256, 256],
        "variant": ["onehop", "onehop", "control", "onehop", "onehop", "control", "onehop", "control"],
        "sim_qh": [0.6, 0.4, 0.5, 0.2, 0.3, 0.3, 0.1, 0.2],
    })
    result = comparative_ratio_table(table, by=["length"])
    assert result.to_dict("records") == [
        {"length": 128, "ratio": (1 + 0 + 0 + 0.5) / 4, "n": 4},
        {"length": 256, "ratio": 0.0, "n": 1},
    ]


def test_auc_equals_roc_auc_score_on_random_data():
    pos, neg = rng.normal(0.3, 0.1, 57), rng.normal(0.25, 0.1, 43)
    result = separation(pos, neg)
    expected = roc_auc_score(np.r_[np.ones(57), np.zeros(43)], np.r_[pos, neg])
    assert result.auc == pytest.approx(expected)
    # and the rank formula: P(pos > neg)
    assert result.auc == pytest.approx(np.mean(pos[:, None] > neg[None, :]))
    assert result.mean_diff == pytest.approx(pos.mean() - neg.mean())
    assert (result.n_pos, result.n_neg) == (57, 43)


def test_cohens_d_by_hand():
    pos, neg = [2.0, 4.0, 6.0], [1.0, 2.0, 3.0, 4.0]
    # means 4 and 2.5; sample variances 4 and 5/3; pooled = sqrt((2*4 + 3*5/3) / 5) = sqrt(13/5)
    assert cohens_d(pos, neg) == pytest.approx(1.5 / math.sqrt(13 / 5))
    assert separation(pos, neg).cohens_d == pytest.approx(1.5 / math.sqrt(13 / 5))


def test_position_effects_match_independent_computations():
    depth = rng.uniform(0, 1, 80)
    score = 0.3 - 0.1 * depth + rng.normal(0, 0.05, 80)
    result = position_effects(depth, score)
    assert result.pearson_r == pytest.approx(np.corrcoef(depth, score)[0, 1])
    assert result.spearman_rho == pytest.approx(np.corrcoef(stats.rankdata(depth), stats.rankdata(score))[0, 1])
    slope, intercept = np.polyfit(depth, score, 1)
    assert (result.slope, result.intercept) == (pytest.approx(slope), pytest.approx(intercept))
    buckets = result.buckets
    assert buckets["bucket"].tolist() == ["beginning", "middle", "end"]
    assert buckets["n"].sum() == 80
    end = score[depth >= 2 / 3]
    assert buckets.iloc[2]["mean"] == pytest.approx(end.mean())
    assert buckets.iloc[2]["std"] == pytest.approx(end.std(ddof=1))


def test_position_buckets_include_both_ends():
    result = position_effects([0.0, 0.5, 1.0, 1.0], [1.0, 2.0, 3.0, 5.0], n_buckets=2)
    assert result.buckets["n"].tolist() == [1, 3]
    assert result.buckets["mean"].tolist() == [1.0, pytest.approx(10 / 3)]


def test_break_point_and_chunk_recommendation():
    assert break_point([128, 256, 512, 1024], [0.95, 0.85, 0.79, 0.9]) == 256  # stops at the first dip
    assert break_point([512, 128, 256], [0.9, 0.9, 0.9]) == 512  # unsorted input
    assert break_point([128, 256], [0.7, 0.9]) is None
    assert break_point([128, 256], [0.7, 0.9], threshold=0.6) == 256
    assert recommended_chunk_tokens(1024) == 819
    assert recommended_chunk_tokens(None) is None


def test_bootstrap_ci_brackets_the_mean_and_is_reproducible():
    values = rng.normal(1.0, 0.5, 200)
    lo, hi = bootstrap_ci(values, seed=3)
    assert lo < values.mean() < hi
    # close to the normal-theory interval
    half = 1.96 * values.std(ddof=1) / math.sqrt(values.size)
    assert hi - lo == pytest.approx(2 * half, rel=0.2)
    assert bootstrap_ci(values, seed=3) == (lo, hi)
    assert bootstrap_ci([0.4]) == (0.4, 0.4)


@pytest.mark.parametrize("call, message", [
    (lambda: normalized_similarity([], []), "sim_qh is empty"),
    (lambda: normalized_similarity([0.1, 0.2], [0.3]), "different lengths"),
    (lambda: normalized_similarity([0.1], [0.0]), "sim_qn contains zeros"),
    (lambda: normalized_similarity([np.nan], [0.3]), "NaN"),
    (lambda: comparative_ratio([0.1], [np.nan]), "sim_neg contains NaN"),
    (lambda: separation([0.1, 0.2], []), "AUC needs both classes"),
    (lambda: separation([], [0.1, 0.2]), "AUC needs both classes"),
    (lambda: position_effects([0.1, 0.2], [1.0, 2.0]), "at least 3 points"),
    (lambda: position_effects([0.5, 0.5, 0.5], [1.0, 2.0, 3.0]), "all depths are equal"),
    (lambda: break_point([128], [0.9, 0.8]), "different lengths"),
    (lambda: bootstrap_ci([]), "values is empty"),
])
def test_bad_input_raises_value_error_saying_what(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_one_implementation_serves_a_sample_and_a_stack_of_resamples():
    from scipy import stats as st

    from embedeval.metrics.moments import cohens_d, mean_difference, pearson_r, regression_intercept, regression_slope, spearman_rho

    rng = np.random.default_rng(3)
    x, y = rng.random((5, 40)), rng.random((5, 40))
    y[:, :10] = np.round(y[:, :10], 1)  # some ties for the ranks
    np.testing.assert_allclose(pearson_r(x, y), [st.pearsonr(a, b)[0] for a, b in zip(x, y, strict=True)])
    np.testing.assert_allclose(spearman_rho(x, y), [st.spearmanr(a, b)[0] for a, b in zip(x, y, strict=True)])
    np.testing.assert_allclose(regression_slope(x, y), [st.linregress(a, b).slope for a, b in zip(x, y, strict=True)])
    np.testing.assert_allclose(regression_intercept(x, y), [st.linregress(a, b).intercept for a, b in zip(x, y, strict=True)])
    np.testing.assert_allclose(cohens_d(x, y), [cohens_d(a, b) for a, b in zip(x, y, strict=True)])
    np.testing.assert_allclose(mean_difference(x.T, y.T, axis=0), x.mean(1) - y.mean(1))
    assert isinstance(pearson_r(x[0], y[0]), float) and isinstance(cohens_d(x[0], y[0]), float)


def test_retrieval_measures_on_hand_worked_ranks_with_ties():
    from embedeval.metrics.ranking import retrieval_measures

    pos = [0.5, 0.9, 0.3, 0.2]
    pool = [[0.6, 0.5, 0.1, 0.0],   # one above, one tie -> rank 3 (ties count against the positive)
            [0.1, 0.2, 0.3, 0.4],   # beats all -> rank 1
            [0.3, 0.3, 0.9, 0.3],   # one above, three ties -> rank 5
            [0.9, 0.8, 0.7, 0.6]]   # last -> rank 5
    table = retrieval_measures(pos, pool)
    assert table["rank"].tolist() == [3, 1, 5, 5] and table["ties"].tolist() == [1, 0, 3, 0]
    assert table["n_candidates"].tolist() == [5] * 4
    ranks = np.array([3, 1, 5, 5])
    np.testing.assert_allclose(table["recall@1"], [0, 1, 0, 0])
    np.testing.assert_allclose(table["recall@5"], [1, 1, 1, 1])
    np.testing.assert_allclose(table["mrr"], 1 / ranks)
    np.testing.assert_allclose(table["ndcg@10"], 1 / np.log2(ranks + 1))
    np.testing.assert_allclose(table["ndcg@1"], [0, 1, 0, 0])
    np.testing.assert_allclose(table["mrr@10"], 1 / ranks)  # every rank within 10 here
    np.testing.assert_allclose(table["query_auc"], [(2 + 0.5) / 4, 1.0, 1.5 / 4, 0.0])
    deep = retrieval_measures([0.1, 0.5], [[0.2] * 11, [0.6] * 9 + [0.1] * 2])  # ranks 12 and 10
    np.testing.assert_allclose(deep["mrr@10"], [0.0, 1 / 10])
    np.testing.assert_allclose(deep["mrr"], [1 / 12, 1 / 10])


def test_retrieval_measures_agree_with_a_direct_ranking():
    from embedeval.metrics.ranking import retrieval_measures

    rng = np.random.default_rng(0)
    pos, pool = rng.random(50).round(2), rng.random((50, 30)).round(2)  # rounding makes ties
    table = retrieval_measures(pos, pool)
    for i in range(50):
        # rank by sorting: the positive goes after every candidate with a score >= its own
        order = sorted([(-s, 0) for s in pool[i]] + [(-pos[i], 1)])
        rank = 1 + [tag for _, tag in order].index(1)
        assert table["rank"][i] == rank
        assert table["recall@10"][i] == (rank <= 10) and table["mrr"][i] == pytest.approx(1 / rank)
    with pytest.raises(ValueError, match="pool_scores must be"):
        retrieval_measures([0.1], np.zeros((2, 3)))


def test_cluster_bootstrap_widens_for_correlated_groups_and_matches_a_direct_loop():
    from embedeval.metrics.bootstrap import bootstrap_ci, cluster_bootstrap_ci
    from embedeval.metrics.separation import auc_score

    rng = np.random.default_rng(7)
    groups = np.repeat(np.arange(24), 10)  # 24 questions x 10 depths, strongly correlated within a question
    values = rng.normal(size=24)[groups] + 0.05 * rng.normal(size=groups.size)
    clustered = cluster_bootstrap_ci(np.mean, (values,), (groups,), n_resamples=4000, seed=1)
    iid = bootstrap_ci(values, np.mean, n_resamples=4000, seed=1)
    assert clustered[1] - clustered[0] > 2 * (iid[1] - iid[0])
    # the same resampling written out directly: draw 24 questions with replacement, keep all their rows
    direct = []
    for _ in range(4000):
        chosen = rng.integers(24, size=24)
        direct.append(np.concatenate([values[groups == g] for g in chosen]).mean())
    np.testing.assert_allclose(clustered, np.quantile(direct, [0.025, 0.975]), atol=0.05)
    # the exact fast paths equal the generic resampling loop draw for draw
    neg, neg_groups = rng.normal(size=24), np.arange(24)
    np.testing.assert_allclose(cluster_bootstrap_ci(np.mean, (values,), (groups,), 300, 5),
                               cluster_bootstrap_ci(lambda v: np.mean(v), (values,), (groups,), 300, 5))
    np.testing.assert_allclose(cluster_bootstrap_ci(auc_score, (values, neg), (groups, neg_groups), 300, 5),
                               cluster_bootstrap_ci(lambda p, n: auc_score(p, n), (values, neg), (groups, neg_groups), 300, 5))
    with pytest.raises(ValueError, match="one cluster label per value"):
        cluster_bootstrap_ci(np.mean, (values,), (groups[:5],))


def test_cluster_bootstrap_stacks_equal_clusters_with_the_same_result_as_the_loop():
    from embedeval.metrics.bootstrap import cluster_bootstrap_ci
    from embedeval.metrics.moments import cohens_d, spearman_rho

    rng = np.random.default_rng(11)
    groups = np.repeat(np.arange(12), 10)
    depth, score = np.tile(np.linspace(0, 1, 10), 12), rng.normal(size=12)[groups] + rng.normal(size=120)
    stacked = cluster_bootstrap_ci(spearman_rho, (depth, score), (groups, groups), 200, 3)
    looped = cluster_bootstrap_ci(lambda x, y: spearman_rho(x, y), (depth, score), (groups, groups), 200, 3)
    np.testing.assert_allclose(stacked, looped)
    neg, neg_groups = rng.normal(size=12), np.arange(12)
    np.testing.assert_allclose(cluster_bootstrap_ci(cohens_d, (score, neg), (groups, neg_groups), 200, 3),
                               cluster_bootstrap_ci(lambda p, n: cohens_d(p, n), (score, neg), (groups, neg_groups), 200, 3))


def test_weighted_statistics_equal_their_value_on_the_sample_that_repeats_each_row():
    """Frequency weights (the weighted bootstrap's resamples) against the same statistic, from
    scipy or numpy, on the sample that holds row i w_i times: ties, zero weights, one row."""
    from scipy import stats

    from embedeval.metrics.moments import cohens_d, mean_difference, pearson_r, regression_intercept, regression_slope, spearman_rho, weighted_ranks

    rng = np.random.default_rng(21)
    for size in (2, 5, 13, 40):
        x = rng.integers(0, 4, size).astype(float)  # few distinct values: ties
        y = rng.normal(size=size).round(1)
        w, w2 = rng.integers(0, 4, size).astype(float), rng.integers(0, 3, size).astype(float)
        w[:2], w2[:2] = 1, 2  # every sample holds at least two values
        ex, ey, ey2 = np.repeat(x, w.astype(int)), np.repeat(y, w.astype(int)), np.repeat(y, w2.astype(int))
        np.testing.assert_allclose(weighted_ranks(x, np.ones(size)), stats.rankdata(x))
        ranks, expanded_ranks = weighted_ranks(x, w), stats.rankdata(ex)
        np.testing.assert_allclose(np.repeat(ranks, w.astype(int)), expanded_ranks)
        with np.errstate(invalid="ignore", divide="ignore"):
            pairs = [(pearson_r, lambda a, b: stats.pearsonr(a, b)[0] if np.ptp(a) and np.ptp(b) else np.nan),
                     (spearman_rho, lambda a, b: stats.spearmanr(a, b)[0] if np.ptp(a) and np.ptp(b) else np.nan),
                     (regression_slope, lambda a, b: stats.linregress(a, b).slope if np.ptp(a) else np.nan),
                     (regression_intercept, lambda a, b: stats.linregress(a, b).intercept if np.ptp(a) else np.nan)]
            for stat, reference in pairs:
                np.testing.assert_allclose(stat(x, y, weights=(w, w)), reference(ex, ey), rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(mean_difference(x, y, weights=(w, w2)), ex.mean() - ey2.mean(), rtol=1e-12)
            np.testing.assert_allclose(cohens_d(x, y, weights=(w, w2)), cohens_d(ex, ey2), rtol=1e-10)
    # a resample stack: one row of values, a row of weights per resample, each its own statistic
    stack = rng.integers(0, 3, (6, 13)).astype(float)
    x, y = rng.normal(size=13), rng.normal(size=13)
    np.testing.assert_allclose(spearman_rho(x[None], y[None], weights=(stack, stack)),
                               [spearman_rho(np.repeat(x, k.astype(int)), np.repeat(y, k.astype(int))) for k in stack])
    with pytest.raises(ValueError, match="same weights"):
        pearson_r(x, y, weights=(stack[0], stack[1]))


def test_cluster_bootstrap_of_unequal_clusters_weighted_equals_the_loop_over_resamples():
    """Clusters of unequal sizes (a dropped NaN, a byte-identical haystack counted once): the
    statistics that take frequency weights give every resample at once; the plain loop (the same
    statistic hidden behind a lambda) recomputes each resample from its rows. Same draws, same interval."""
    from embedeval.metrics.bootstrap import cluster_bootstrap_ci
    from embedeval.metrics.moments import cohens_d, mean_difference, pearson_r, regression_intercept, regression_slope, spearman_rho

    rng = np.random.default_rng(5)
    groups = np.repeat(np.arange(15), rng.integers(1, 9, 15))  # 1 to 8 rows per question
    depth = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], groups.size)
    score = rng.normal(size=15)[groups] + depth * 0.3 + rng.normal(size=groups.size).round(1)
    neg, neg_groups = rng.normal(size=20), rng.integers(0, 15, 20)
    for stat in (pearson_r, spearman_rho, regression_slope, regression_intercept):
        weighted = cluster_bootstrap_ci(stat, (depth, score), (groups, groups), 400, 9)
        looped = cluster_bootstrap_ci(lambda a, b, stat=stat: stat(a, b), (depth, score), (groups, groups), 400, 9)
        np.testing.assert_allclose(weighted, looped, rtol=1e-9)
    for stat in (mean_difference, cohens_d):
        weighted = cluster_bootstrap_ci(stat, (score, neg), (groups, neg_groups), 400, 9)
        looped = cluster_bootstrap_ci(lambda a, b, stat=stat: stat(a, b), (score, neg), (groups, neg_groups), 400, 9)
        np.testing.assert_allclose(weighted, looped, rtol=1e-9)


# --- the break-point estimator chosen by simulation: a monotone fit, and the length 60% of the resamples reach --------
def test_monotone_fit_is_scikit_learns_isotonic_regression_row_by_row():
    from sklearn.isotonic import IsotonicRegression

    from embedeval.metrics.break_estimators import monotone_fit

    rng = np.random.default_rng(11)
    for size in (1, 2, 3, 7, 10, 13):
        scores = rng.normal(size=(40, size)).round(1)  # rounded: ties, and blocks of equal values
        weights = rng.uniform(0.1, 4, size=(40, size))
        fitted = monotone_fit(scores, weights)
        for row, w, f in zip(scores, weights, fitted, strict=True):
            np.testing.assert_allclose(f, IsotonicRegression(increasing=False).fit_transform(np.arange(size), row, sample_weight=w))
    np.testing.assert_allclose(monotone_fit([0.54, 0.52, 0.51, 0.31, 0.43]), [0.54, 0.52, 0.51, 0.37, 0.37])  # the docstring's
    np.testing.assert_allclose(monotone_fit([0.2, 0.4, 0.6]), [0.4, 0.4, 0.4])  # a rising curve is one block
    np.testing.assert_allclose(monotone_fit([0.5, np.nan, 0.6, 0.2]), [0.55, np.nan, 0.55, 0.2])  # NaN weighs nothing, stays NaN
    assert np.isnan(monotone_fit([np.nan, np.nan])).all()
    with pytest.raises(ValueError, match="weights"):
        monotone_fit([0.5, 0.4], [1.0, -1.0])
    with pytest.raises(ValueError, match="scores"):
        monotone_fit(np.zeros((2, 0)))


def test_supported_break_is_the_longest_length_the_share_reaches():
    from embedeval.metrics.break_estimators import supported_break

    split = [128] * 40 + [512] * 38 + [0] * 22  # the 40 / 38: neither alone, 128 is reached by 78%
    assert supported_break(split, 0.6) == 128 and supported_break(split, 0.38) == 512 and supported_break(split, 0.39) == 128
    majority = [0] * 9 + [64] * 14 + [96] * 8 + [128] * 66 + [192] * 3  # the default run's: 128, given by 66%
    assert supported_break(majority, 0.6) == 128
    assert supported_break([0] * 50 + [256] * 50, 0.6) == 0  # none: no length is reached by 60%
    assert supported_break([512], 0.6) == 512 and supported_break([], 0.6) == 0 and supported_break([0, 0], 1.0) == 0
    rng = np.random.default_rng(2)
    for _ in range(200):  # against a count by hand
        points = rng.choice([0, 64, 128, 256], size=rng.integers(1, 30))
        share = rng.uniform(0.05, 1)
        assert supported_break(points, share) == max(p for p in [0, *points] if np.mean(points >= p) >= share)
    for bad in (0, 1.5, -0.1):
        with pytest.raises(ValueError, match="support"):
            supported_break([128], bad)


def test_relative_break_lengths_reads_the_monotone_fit_against_a_bar_from_the_scores():
    from embedeval.metrics.break_estimators import relative_break_lengths

    lengths = [64, 128, 256, 512]
    # 64 alone dips under 0.85 x the base (0.6): the plain rule gives none, the fit pools it with 128
    assert relative_break_lengths(lengths, [[0.45, 0.75, 0.6, 0.2]], base=0.6).tolist() == [0]
    assert relative_break_lengths(lengths, [[0.45, 0.75, 0.6, 0.2]], base=0.6, monotone=True).tolist() == [256]
    # weights: a heavy low length pulls the pooled block down
    assert relative_break_lengths(lengths, [[0.6, 0.4, 0.6, 0.6]], base=0.6, monotone=True, weights=[1, 10, 1, 1]).tolist() == [64]


def test_weighted_forms_refuse_bad_weights_and_keep_nan_and_other_statistics_as_they_were():
    """The review's cases: NaN in a rank correlation is NaN (as scipy); a statistic with a
    ``weights`` of its own (np.average) or none to inspect (max) is resampled as before, not
    weighted; weights of the wrong shape, negative or NaN, or not a pair are one ValueError."""
    from embedeval.metrics.bootstrap import cluster_bootstrap_ci, cluster_resamples
    from embedeval.metrics.moments import pearson_r, spearman_rho

    assert np.isnan(spearman_rho([1, 2, np.nan, 4, 5], [2, 1, 3, 5, 4]))
    groups = np.array([0, 0, 1, 2, 2, 2, 3])
    values = np.array([0.1, 0.4, 0.3, 0.9, 0.2, 0.5, 0.7])
    low, high = cluster_bootstrap_ci(np.average, (values,), (groups,), 200, 1)
    assert low <= values.mean() <= high
    assert cluster_bootstrap_ci(lambda v: max(v), (values,), (groups,), 200, 1)[1] == pytest.approx(0.9)
    x, y = np.arange(5.0), np.array([1.0, 3, 2, 5, 4])
    for weights, says in (((np.ones((5, 1)), np.ones((5, 1))), "one weight per value"),
                          ((-np.ones(5), -np.ones(5)), "not negative"), ((np.full(5, np.nan),) * 2, "finite"),
                          ((np.ones(5),), "a pair")):
        with pytest.raises(ValueError, match=says):
            pearson_r(x, y, weights=weights)
    for seed in (None, 1.7, True):
        with pytest.raises(ValueError, match="whole number"):
            cluster_resamples(4, 10, seed)


def test_the_t_test_and_the_group_count_are_scipy_stats_bit_for_bit():
    """t_test_greater equals scipy.stats.ttest_1samp(..., alternative="greater") exactly on
    random samples of 2 to 60 values (scales 1e-3 to 100), and is NaN for all-zero values; the
    chance test's group count is the one scipy.stats' t and nct distributions give."""
    from scipy import stats

    from embedeval.metrics.break_estimators import groups_for_chance_test, t_test_greater

    rng = np.random.default_rng(4)
    for _ in range(500):
        n = int(rng.integers(2, 60))
        values = rng.normal(loc=rng.normal(), size=n) * rng.choice([1e-3, 1, 100])
        assert t_test_greater(values) == stats.ttest_1samp(values, 0.0, alternative="greater").pvalue
    assert np.isnan(t_test_greater([0.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="at least 2"):
        t_test_greater([1.0])

    def by_stats(effect, power, alpha=0.025):
        return next(g for g in range(2, 1000)
                    if stats.nct.sf(stats.t.ppf(1 - alpha, g - 1), g - 1, effect * np.sqrt(g)) >= power)

    for effect, power in ((1.0, 0.8), (0.5, 0.9), (2.0, 0.5)):
        assert groups_for_chance_test(effect, power) == by_stats(effect, power)

"""embedeval.consensus: the co-association matrix against a dense count, the consensus cut on
hand-worked labellings (majority, ties at exactly half, chaining, relabelled runs, chance), the
stability and member shares of each consensus cluster, and one-labelling and empty edges."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from embedeval.consensus import by_neighbourhood, co_association, consensus_labels, matches, member_shares, stability, theme_shares
from embedeval.errors import InputError


def dense_co_association(labellings: np.ndarray) -> np.ndarray:
    """C[i, j] counted pair by pair."""
    R, n = labellings.shape
    out = np.zeros((n, n))
    for r, i, j in itertools.product(range(R), range(n), range(n)):
        out[i, j] += labellings[r, i] == labellings[r, j] != -1
    return out / R


def test_co_association_is_the_pairwise_share_of_labellings():
    rng = np.random.default_rng(0)
    labellings = rng.integers(-1, 4, size=(7, 30))
    np.testing.assert_allclose(co_association(labellings).toarray(), dense_co_association(labellings))


def test_a_hand_worked_consensus():
    # points 0-3 together in all three runs; 4-5 with them in one run only; 6-8 together in two of three
    labellings = np.array([[0, 0, 0, 0, 0, 0, 1, 1, 1],
                           [2, 2, 2, 2, 5, 5, -1, -1, -1],
                           [1, 1, 1, 1, -1, -1, 0, 0, 0]])
    C = co_association(labellings).toarray()
    assert C[0, 4] == pytest.approx(1 / 3) and C[4, 5] == pytest.approx(2 / 3) and C[6, 7] == pytest.approx(2 / 3)
    # {0..3} (mean 1), {6,7,8} (mean 2/3), {4,5} (mean 2/3: together in runs 0 and 1), but {4, 5}
    # comes back in one run of three: run 0's cluster 0 overlaps it at Jaccard 2/6, run 2 has none
    candidates = np.array([0, 0, 0, 0, 2, 2, 1, 1, 1])
    assert stability(candidates, labellings).tolist() == pytest.approx([1.0, 2 / 3, 1 / 3])
    assert matches(candidates, labellings)[:, 2].tolist() == [-1, 5, -1]
    labels = consensus_labels(labellings, min_size=2)
    assert labels.tolist() == [0, 0, 0, 0, -1, -1, 1, 1, 1]
    assert consensus_labels(labellings, min_size=4).tolist() == [0, 0, 0, 0, -1, -1, -1, -1, -1]
    assert member_shares(labels, labellings).tolist() == pytest.approx([1, 1, 1, 1, 0, 0, 2 / 3, 2 / 3, 2 / 3])


def test_together_in_exactly_half_the_runs_is_not_a_majority():
    labellings = np.array([[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0]])
    assert consensus_labels(labellings, min_size=2).tolist() == [0, 0, 0, 1, 1, 1]
    assert consensus_labels(np.array([[0, 0, -1, -1], [-1, -1, 0, 0]]), min_size=2).tolist() == [-1] * 4


def test_two_themes_that_merge_in_a_minority_of_runs_stay_two_whatever_the_bridge():
    # A = 0..9, B = 10..19; point 20 is with A in 4 runs, with B in 4, with both (merged) in 2
    A, B = list(range(10)), list(range(10, 20))
    runs = []
    for r in range(10):
        labels = np.array([0] * 10 + [1] * 10 + [0])
        if r >= 4:
            labels[20] = 1
        if r >= 8:
            labels[:] = 0
        runs.append(labels)
    labels = consensus_labels(np.array(runs), min_size=5)
    assert len({labels[i] for i in A}) == 1 and len({labels[i] for i in B}) == 1 and labels[0] != labels[10]


def test_relabelling_a_run_changes_nothing():
    rng = np.random.default_rng(1)
    truth = np.repeat(np.arange(4), 15)
    runs = np.array([np.where(rng.random(60) < 0.1, -1, truth) for _ in range(9)])
    shuffled = runs.copy()
    for r in range(len(runs)):
        names = rng.permutation(40)
        shuffled[r] = np.where(runs[r] == -1, -1, names[runs[r]])
    base = consensus_labels(runs, min_size=5)
    np.testing.assert_array_equal(base, consensus_labels(shuffled, min_size=5))
    np.testing.assert_allclose(stability(base, runs), stability(base, shuffled))
    assert sorted(np.bincount(base[base >= 0])) == [15, 15, 15, 15]


def test_labellings_at_chance_give_no_theme():
    rng = np.random.default_rng(2)
    runs = rng.integers(0, 3, size=(15, 90))  # independent random clusterings: C is about 1/3 everywhere
    assert (consensus_labels(runs, min_size=5) == -1).all()


def test_one_labelling_is_its_own_consensus_with_stability_one():
    labels = np.array([3, 3, 3, 7, 7, -1, 7, 7, 9])
    consensus = consensus_labels(labels[None, :], min_size=2)
    assert consensus.tolist() == [1, 1, 1, 0, 0, -1, 0, 0, -1]  # numbered by size; 9 alone is too small
    assert stability(consensus, labels[None, :]).tolist() == [1.0, 1.0]
    assert member_shares(consensus, labels[None, :]).tolist() == [1, 1, 1, 1, 1, 0, 1, 1, 0]


def test_all_noise_and_bad_input():
    assert consensus_labels(np.full((3, 4), -1), min_size=1).tolist() == [-1] * 4
    # a point clustered in one run of three is noise, even alone and with min_size 1
    assert consensus_labels(np.array([[0, -1], [-1, -1], [-1, -1]]), min_size=1).tolist() == [-1, -1]
    assert consensus_labels(np.array([[0, -1], [0, -1], [-1, -1]]), min_size=1).tolist() == [0, -1]
    assert stability(np.full(4, -1), np.full((3, 4), -1)).shape == (0,)
    for bad, match in [(np.zeros((0, 3), int), "shape"), (np.zeros(3, int), "shape"), (np.array([[0, -2]]), ">= -1"),
                       (np.array([[0.5, 1.0]]), "whole numbers")]:
        with pytest.raises(InputError, match=match):
            co_association(bad)
    with pytest.raises(InputError, match="min_size"):
        consensus_labels(np.zeros((1, 3), int), min_size=0)
    with pytest.raises(InputError, match="3 points for labellings of 4"):
        matches(np.zeros(3, int), np.zeros((1, 4), int))


def test_a_point_is_decided_by_its_neighbourhoods_votes():
    # a theme of points 0-5 in every run; point 6 in it in 2 runs of 5 (noise alone), point 7 in 3 of 5 (in it alone)
    runs = np.full((5, 10), -1)
    runs[:, :6] = 0
    runs[:2, 6] = 0
    runs[:3, 7] = 0
    alone = consensus_labels(runs, min_size=3)
    assert alone.tolist() == [0] * 6 + [-1, 0, -1, -1]
    # point 6's neighbours are the theme's points: pooled (1 + 1 + 0.4) / 3 = 0.8 > 0.5, in;
    # point 7's are the noise points 8 and 9: pooled (0.6 + 0 + 0) / 3 = 0.2, out
    neighbours = np.array([[i, (i + 1) % 6, (i + 2) % 6] for i in range(6)] + [[6, 0, 1], [7, 8, 9], [8, 9, 7], [9, 8, 7]])
    assert consensus_labels(runs, min_size=3, neighbours=neighbours).tolist() == [0] * 7 + [-1, -1, -1]
    # a neighbourhood of the point itself only is its own votes
    assert consensus_labels(runs, min_size=3, neighbours=np.arange(10)[:, None]).tolist() == alone.tolist()
    with pytest.raises(InputError, match="neighbours must be an"):
        consensus_labels(runs, min_size=3, neighbours=np.array([[0, 10]] * 10))


def test_neighbourhood_votes_make_two_draws_of_noisy_edges_agree_more():
    """Themes whose edge points are in them in a random share of the runs (their chance drawn once,
    around a half): two independent sets of runs disagree on the edges when each point counts its
    own votes, much less when its neighbours' count too."""
    from sklearn.metrics import adjusted_rand_score

    rng = np.random.default_rng(4)
    themes, size = 6, 60
    truth = np.repeat(np.arange(themes), size)
    position = np.tile(np.arange(size), themes)  # the first 30 of each theme are its core, the rest its edge
    chance = np.where(position < 30, 0.97, rng.uniform(0.3, 0.7, truth.size))
    neighbours = np.array([[i] + [i - i % size + (i % size + d) % size for d in (-2, -1, 1, 2)] for i in range(truth.size)])

    def draw():
        return np.array([np.where(rng.random(truth.size) < chance, truth, -1) for _ in range(9)])

    first, second = draw(), draw()
    own = adjusted_rand_score(consensus_labels(first, 10), consensus_labels(second, 10))
    pooled = adjusted_rand_score(consensus_labels(first, 10, neighbours), consensus_labels(second, 10, neighbours))
    assert own < 0.85 and pooled > own + 0.05, (own, pooled)


def test_labels_are_checked_before_they_are_cast():
    # 2**64 - 1 as uint64 would wrap to -1 (noise): the two points together in every labelling are not noise
    with pytest.raises(InputError, match="below 2\\*\\*63, not 18446744073709551615"):
        co_association(np.array([[2**64 - 1, 2**64 - 1]], dtype=np.uint64))
    with pytest.raises(InputError, match="below 2\\*\\*63, not 1e\\+30"):
        co_association(np.array([[1e30, 0.0]]))
    big = np.array([[2**62, 2**62, 7]], dtype=np.uint64)  # large but whole labels are labels
    assert co_association(big).toarray().tolist() == [[1, 1, 0], [1, 1, 0], [0, 0, 1]]
    with pytest.raises(InputError, match="whole numbers"):
        co_association(np.array([[True, False]]))


@pytest.mark.parametrize("consensus, says", [
    (np.array([0.0, 0.0, 1.0, 1.5]), "whole numbers"),
    (np.array([-2, 0, 1, 1]), ">= -1"),
    (np.array([0, 0, 5, 5]), "number its clusters 0..T-1"),
    (np.array([0, 0, 10**12, 10**12]), "number its clusters 0..T-1"),  # not an array of 10**12 columns
    (np.array([[0, 0, 1, 1]]), "one label per point"),
])
def test_a_consensus_that_is_no_consensus_labelling_is_one_input_error(consensus, says):
    labellings = np.array([[0, 0, 1, 1], [0, 0, 1, 1]])
    for function in (matches, stability, member_shares, theme_shares):
        with pytest.raises(InputError, match=says):
            function(consensus, labellings)
    with pytest.raises(InputError, match=says):
        by_neighbourhood(consensus, labellings, np.arange(4)[:, None], 1)
    # a consensus given as floats of whole numbers is a consensus
    assert stability(np.array([0.0, 0.0, 1.0, 1.0]), labellings).tolist() == [1.0, 1.0]


def test_by_neighbourhood_checks_min_size_and_weights_are_checked():
    labellings = np.array([[0, 0, 1, 1, 1], [0, 0, 1, 1, 1]])
    neighbours = np.array([[2], [3], [2], [3], [4]])  # theme 1 takes every point: theme 0 is left empty
    for bad in (0, True, 2.0):
        with pytest.raises(InputError, match="min_size"):
            by_neighbourhood(np.array([1, 1, 0, 0, 0]), labellings, neighbours, bad)
    assert by_neighbourhood(np.array([1, 1, 0, 0, 0]), labellings, neighbours, 1).tolist() == [0] * 5
    with pytest.raises(InputError, match="weights must be finite"):
        theme_shares(np.array([1, 1, 0, 0, 0]), labellings, np.full(labellings.shape, np.nan))


def test_one_labelling_numbers_clusters_of_one_size_as_a_single_clustering_always_did():
    # HDBSCAN's label 0 and label 1 have two points each: label 0 is theme 0 (the study's by-size
    # order, ties to the smaller label), whichever of them holds the first point
    assert consensus_labels(np.array([[1, 1, 0, 0]]), min_size=1).tolist() == [1, 1, 0, 0]
    assert consensus_labels(np.array([[5, 3, 5, 3, -1, 8, 8, 8]]), min_size=2).tolist() == [2, 1, 2, 1, -1, 0, 0, 0]
    # several labellings: ties to the group whose first point comes first
    assert consensus_labels(np.array([[1, 1, 0, 0], [1, 1, 0, 0]]), min_size=1).tolist() == [0, 0, 1, 1]


def test_a_single_clustering_is_the_studys_run_its_probabilities_unrounded(monkeypatch):
    from types import SimpleNamespace

    from embedeval.experiments.themes import fitting
    from embedeval.experiments.themes.config import HdbscanSettings, ThemesConfig
    from embedeval.experiments.themes.fitting import cluster_runs, consensus_themes

    labels = np.array([1, 1, 0, 0, -1, 0])
    probabilities = np.array([0.123456789012345, 1.0, 0.987654321098765, 1.0, 0.0, 0.31415926535897931])
    fitted = SimpleNamespace(labels_=labels, probabilities_=probabilities)
    monkeypatch.setattr(fitting, "fit_umap", lambda vectors, *a, **k: ("umap", np.zeros((len(vectors), 2), np.float32)))
    monkeypatch.setattr(fitting, "fit_hdbscan", lambda *a, **k: fitted)
    config = ThemesConfig(runs=1, hdbscan=HdbscanSettings(min_cluster_size=2, min_samples=2))
    themed = consensus_themes(cluster_runs(np.eye(6, dtype=np.float32), config), np.eye(6, dtype=np.float32), config)
    assert themed.labels.tolist() == [1, 1, 0, 0, -1, 0]  # by size, the tie to HDBSCAN's smaller label
    assert themed.probability.tolist() == probabilities.tolist()  # exactly HDBSCAN's, not float32's
    assert themed.stability.tolist() == [1, 1, 1, 1, 0, 1]


def test_a_needle_is_predicted_into_a_theme_when_a_clustering_puts_it_there(monkeypatch):
    """theme_probabilities and predicted_themes on three clusterings of two themes (the second
    found in clusterings 2 and 3 only), HDBSCAN's predictions given: a needle in clusters that match
    no theme in every clustering is -1 (no clustering said noise); one predicted into a theme at
    strength 0 is in that theme; the probability is the mean strength, 0 where it is elsewhere."""
    import hdbscan

    from embedeval.experiments.themes.placement import predicted_themes, theme_probabilities

    # per clustering, per needle: (cluster, strength); theme 0 is cluster 5, 2, 0 and theme 1 -, 3, 1 in the three
    said = [[(7, 0.9), (5, 0.0), (5, 1.0), (-1, 0.0), (5, 0.5)],
            [(9, 0.8), (-1, 0.0), (3, 0.9), (-1, 0.0), (3, 0.25)],
            [(8, 1.0), (-1, 0.0), (1, 0.6), (-1, 0.0), (1, 0.25)]]
    clusterings = {"reduced": np.zeros((3, 4, 2)), "matches": np.array([[5, -1], [2, 3], [0, 1]])}
    monkeypatch.setattr(hdbscan, "approximate_predict",
                        lambda clusterer, points: (np.array([c for c, _ in said[clusterer]]), np.array([s for _, s in said[clusterer]])))
    probability, share = theme_probabilities(lambda layout: np.zeros((5, 2)), [0, 1, 2], clusterings, 2)
    np.testing.assert_allclose(probability, [[0, 0], [0, 0], [1 / 3, 0.5], [0, 0], [1 / 6, 1 / 6]])
    np.testing.assert_allclose(share, [[0, 0], [1 / 3, 0], [1 / 3, 2 / 3], [0, 0], [1 / 3, 2 / 3]])
    predicted = predicted_themes(probability, share)
    # needle 0: clusters of their own in all three: -1; needle 1: theme 0 at strength 0; needle 2: theme 1 (0.5 > 1/3);
    # needle 3: noise everywhere; needle 4: a tie in probability, theme 1 predicted by more clusterings
    assert predicted.tolist() == [-1, 0, 1, -1, 1]
    on = np.arange(5)
    assert (probability.max(axis=1) >= probability[on, np.maximum(predicted, 0)]).all()
    assert predicted_themes(np.zeros((2, 0)), np.zeros((2, 0))).tolist() == [-1, -1]

"""Consensus of several clusterings of the same points (evidence accumulation), and how stable each
consensus cluster is: pure functions on label arrays, no models.

A *labelling* is an integer array over the n points, ``-1`` (:data:`~embedeval.labels.NOISE`) for
a point left out of every cluster; ``labellings`` is an (R, n) array of R of them (several UMAP
seeds and float-noise perturbations of one corpus's vectors, :mod:`embedeval.experiments.themes`).

- :func:`co_association`: C[i, j] = the share of the R labellings that put i and j in one cluster.
- :func:`consensus_labels`: the groups whose members are, on average over their pairs, in one
  cluster in more than half of the labellings (average linkage on 1 - C, cut below 0.5), at least
  ``min_size`` points each; the rest is noise.
- :func:`matches` / :func:`stability`: a consensus cluster *appears* in a labelling when one of
  that labelling's clusters overlaps it with a Jaccard index above 0.5 (that cluster is its match:
  two clusters of one labelling cannot both overlap it that much, nor one cluster two consensus
  clusters); its stability is the share of labellings it appears in.
- :func:`member_shares`: per point, the share of labellings in which it sits in its consensus
  cluster's match.

A single labelling (R = 1) is its own consensus: the clusters of at least ``min_size`` points, each
of stability 1."""

from __future__ import annotations

import numpy as np
from scipy import sparse

from embedeval.errors import InputError
from embedeval.labels import NOISE

#: Two points are together in the consensus when they share a cluster in more than this share of
#: the labellings, on average over a group's pairs; a consensus cluster appears in a labelling whose
#: cluster overlaps it with a Jaccard index above this.
MAJORITY = 0.5


def check_labellings(labellings) -> np.ndarray:
    """``labellings`` as an (R, n) integer array: at least one labelling of at least one point,
    labels whole numbers >= -1; anything else is one :class:`~embedeval.errors.InputError`."""
    array = np.asarray(labellings)
    if array.ndim != 2 or 0 in array.shape:
        raise InputError(f"labellings must be an (R, n) array with R, n >= 1, not of shape {array.shape}")
    return _whole_labels(array, "labellings")


def _whole_labels(array: np.ndarray, what: str) -> np.ndarray:
    """``array`` as int64 labels: whole numbers in [-1, 2**63); anything else (a float that is not
    whole, a bool, an unsigned value that int64 would wrap to -1 or below) is one
    :class:`~embedeval.errors.InputError`."""
    if array.dtype == bool or not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        raise InputError(f"{what} must hold whole numbers (cluster labels, -1 for noise)")
    if np.issubdtype(array.dtype, np.floating) and (not np.all(np.isfinite(array)) or np.any(array != np.round(array))):
        raise InputError(f"{what} must hold whole numbers (cluster labels, -1 for noise)")
    if array.size:
        low, high = (int(x) if np.issubdtype(array.dtype, np.integer) else float(x) for x in (array.min(), array.max()))
        if low < NOISE:
            raise InputError(f"{what} must hold labels >= {NOISE} ({NOISE} for noise), not {low}")
        if high >= 2**63:  # compared before the cast: int64 would wrap it round to a negative label (2**64 - 1 to -1, noise)
            raise InputError(f"{what} must hold labels below 2**63, not {high}")
    return array.astype(np.int64)


def check_consensus(consensus, points: int) -> np.ndarray:
    """``consensus`` as the int64 labelling of ``points`` points that the functions below take: its
    clusters numbered 0..T-1 (each of them used), -1 for noise; anything else is one
    :class:`~embedeval.errors.InputError` (a float, a label below -1, a gap in the numbers, which
    would count an empty cluster, or a huge number, which would allocate that many)."""
    array = np.asarray(consensus)
    if array.shape != (points,):
        raise InputError(f"a consensus of {array.size} points for labellings of {points}" if array.ndim == 1 else
                         f"a consensus must be one label per point ({points}), not an array of shape {array.shape}")
    array = _whole_labels(array, "a consensus")
    used = np.unique(array[array != NOISE])
    if used.size and used[-1] != used.size - 1:
        missing = int(np.setdiff1d(np.arange(used.size), used)[0])
        raise InputError(f"a consensus must number its clusters 0..T-1: it has {used.size} clusters, the largest number "
                         f"{used[-1]}, and no cluster {missing}")
    return array


def _check_min_size(min_size) -> None:
    if isinstance(min_size, bool) or not isinstance(min_size, (int, np.integer)) or min_size < 1:
        raise InputError(f"min_size must be a whole number >= 1, not {min_size!r}")


def membership_matrix(labels: np.ndarray) -> sparse.csr_matrix:
    """The (n, k) 0/1 matrix of one labelling: row i has a 1 in the column of i's cluster (columns
    in the order of the sorted labels; noise points have an empty row)."""
    clustered = np.flatnonzero(labels != NOISE)
    _, column = np.unique(labels[clustered], return_inverse=True)
    return sparse.csr_matrix((np.ones(clustered.size), (clustered, column)), shape=(labels.size, int(column.max(initial=-1)) + 1))


def co_association(labellings) -> sparse.csr_matrix:
    """The co-association matrix of R labellings of n points (sparse, n x n):

        C[i, j] = #{r : L_r[i] = L_r[j] != -1} / R

    (C[i, i] is the share of labellings that put i in a cluster; pairs never together are left
    out of the sparse matrix)."""
    array = check_labellings(labellings)
    total = sparse.csr_matrix((array.shape[1], array.shape[1]))
    for labels in array:
        members = membership_matrix(labels)
        total = total + members @ members.T
    return (total / len(array)).tocsr()


def consensus_labels(labellings, min_size: int, neighbours=None) -> np.ndarray:
    """The consensus labelling of R labellings: average linkage (UPGMA) on the distance 1 - C of
    :func:`co_association`, cut so that every group's mean co-association over its pairs is above
    :data:`MAJORITY`:

        a group G is kept whole while  mean_{i < j in G} C[i, j] > 0.5

    over the points that are in a cluster in more than half of the labellings (C[i, i] > 0.5; the
    others are noise). A group is a consensus cluster when it has at least ``min_size`` points and
    comes back: its :func:`stability` is at least :data:`MAJORITY` (labellings at chance with many
    clusters pair a few points by luck, and no cluster of theirs overlaps such a group; coarse ones,
    two or three clusters in a few labellings, can give a group that passes: nothing here tests the
    consensus against chance). Clusters are numbered by
    size, largest first (ties to the one whose first point comes first; with one labelling, to the
    one of the smaller label in it, so a single clustering keeps the order it always had); the
    rest is noise (-1).

    An average-linkage group above the cut is connected in the graph of pairs with C > 0.5 (a merge
    needs one such pair between its halves), so the linkage runs within each connected component of
    that graph: the work grows with the components, not with n^2.

    ``neighbours`` (n, k): each point's k nearest points (itself among them), to decide the points
    by their neighbourhoods (:func:`by_neighbourhood`)."""
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.sparse.csgraph import connected_components

    _check_min_size(min_size)
    array = check_labellings(labellings)
    together = co_association(array)
    majority = together.copy()
    majority.data = np.where(majority.data > MAJORITY, 1.0, 0.0)
    majority.eliminate_zeros()
    count, component = connected_components(majority, directed=False)
    often = together.diagonal() > MAJORITY
    groups: list[np.ndarray] = []
    for c in range(count):
        points = np.flatnonzero((component == c) & often)
        if points.size < max(min_size, 2):
            groups.extend([points] if points.size >= min_size else [])
            continue
        block = together[points][:, points].toarray()
        distance = 1.0 - block[np.triu_indices(points.size, k=1)]
        # fcluster keeps merges of height <= t; t just below 1 - MAJORITY, so a mean of exactly
        # 0.5 (R even) splits, as "more than half" says
        flat = fcluster(linkage(distance, method="average"), t=1.0 - MAJORITY - 1e-9, criterion="distance")
        groups.extend(g for f in np.unique(flat) if (g := points[flat == f]).size >= min_size)
    labels = _kept(groups, array)
    return labels if neighbours is None else by_neighbourhood(labels, array, neighbours, min_size)


def by_neighbourhood(consensus: np.ndarray, labellings, neighbours, min_size: int) -> np.ndarray:
    """The consensus clusters, each point decided by the votes of its neighbourhood: the shares of
    :func:`theme_shares` averaged over the point's row of ``neighbours`` (its k nearest points, itself
    among them), and the point in the cluster of the largest average when that is above half:

        Z[i, t] = mean_{j in N(i)} S[j, t]        label_i = argmax_t Z[i, t]  if  max_t Z[i, t] > 0.5  else  -1

    A point at a cluster's edge is in it in some labellings and noise in others; alone its share is
    a coin's throw near 0.5, and another run's labellings throw it the other way. Its neighbours'
    shares pool k times the evidence. Clusters left with fewer than ``min_size`` points, or that no
    longer come back in half the labellings (:func:`stability`), are noise; numbered by size."""
    _check_min_size(min_size)
    array = check_labellings(labellings)
    consensus = check_consensus(consensus, array.shape[1])
    neighbours = np.asarray(neighbours)
    if neighbours.ndim != 2 or len(neighbours) != array.shape[1] or not np.issubdtype(neighbours.dtype, np.integer) \
            or (neighbours.size and (neighbours.min() < 0 or neighbours.max() >= array.shape[1])):
        raise InputError(f"neighbours must be an (n, k) array of point indices for n = {array.shape[1]} points")
    shares = theme_shares(consensus, array)
    if not shares.shape[1] or not neighbours.shape[1]:
        return consensus
    pooled = shares[neighbours].mean(axis=1)
    labels = np.where(pooled.max(axis=1) > MAJORITY, pooled.argmax(axis=1), NOISE)
    groups = [points for t in range(shares.shape[1]) if (points := np.flatnonzero(labels == t)).size >= min_size]
    return _kept(groups, array)


def _kept(groups: list[np.ndarray], labellings: np.ndarray) -> np.ndarray:
    """The labelling of ``groups`` that come back in at least half of ``labellings``, by size
    (:func:`_size_order`)."""
    n = labellings.shape[1]
    order = _size_order(labellings)
    candidates = _numbered(groups, n, order)
    kept = [g for g, share in zip(sorted(groups, key=order), stability(candidates, labellings), strict=True) if share >= MAJORITY]
    return _numbered(kept, n, order)


def _size_order(labellings: np.ndarray):
    """How groups are numbered: largest first; of two of one size, with one labelling (R = 1, whose
    clusters are the groups) the one of the smaller label in it, as a single HDBSCAN run's clusters
    were always numbered, else the one whose first point comes first."""
    if len(labellings) == 1:
        return lambda group: (-group.size, int(labellings[0, group[0]]), int(group[0]))
    return lambda group: (-group.size, int(group[0]))


def _numbered(groups: list[np.ndarray], n: int, order) -> np.ndarray:
    """A labelling of n points from disjoint groups, numbered in the ``order`` of :func:`_size_order`."""
    labels = np.full(n, NOISE, dtype=np.int64)
    for number, points in enumerate(sorted(groups, key=order)):
        labels[points] = number
    return labels


def matches(consensus: np.ndarray, labellings) -> np.ndarray:
    """For each labelling r and consensus cluster t, the label of r's cluster that overlaps t with
    a Jaccard index above :data:`MAJORITY` (|A & B| / |A | B| > 0.5), or -1 when none does: an (R, T) array,
    T the number of consensus clusters (labels 0..T-1 of ``consensus``)."""
    array = check_labellings(labellings)
    consensus = check_consensus(consensus, array.shape[1])
    themes = int(consensus.max(initial=NOISE)) + 1
    found = np.full((len(array), themes), NOISE, dtype=np.int64)
    theme_sizes = np.bincount(consensus[consensus != NOISE], minlength=themes)
    for r, labels in enumerate(array):
        clusters, sizes = np.unique(labels[labels != NOISE], return_counts=True)
        if not clusters.size:
            continue
        both = (consensus != NOISE) & (labels != NOISE)
        overlap = np.zeros((themes, clusters.size))
        np.add.at(overlap, (consensus[both], np.searchsorted(clusters, labels[both])), 1)
        jaccard = overlap / (theme_sizes[:, None] + sizes[None, :] - overlap)
        best = jaccard.argmax(axis=1)
        good = jaccard[np.arange(themes), best] > MAJORITY
        found[r, good] = clusters[best[good]]
    return found


def stability(consensus: np.ndarray, labellings) -> np.ndarray:
    """Each consensus cluster's stability: the share of the labellings it appears in (has a match,
    :func:`matches`): an array of T values in [0, 1]."""
    return (matches(consensus, labellings) != NOISE).mean(axis=0)


def theme_shares(consensus: np.ndarray, labellings, weights=None, found: np.ndarray | None = None) -> np.ndarray:
    """The (n, T) share of the labellings in which each point sits in each consensus cluster's
    match (:func:`matches`), each labelling counted with the point's weight in it (``weights``,
    (R, n), e.g. HDBSCAN's membership probabilities; default 1):

        S[i, t] = (1 / R) * sum_r w_r[i] * [L_r[i] = match_r(t) != -1]

    ``found``: :func:`matches` of the same consensus and labellings, when the caller has it."""
    array = check_labellings(labellings)
    weights = np.ones(array.shape) if weights is None else np.asarray(weights, dtype=float)
    if weights.shape != array.shape:
        raise InputError(f"weights of shape {weights.shape} for labellings of shape {array.shape}")
    if not np.all(np.isfinite(weights)) or weights.min() < 0:
        raise InputError("weights must be finite and >= 0 (membership probabilities)")
    found = matches(consensus, array) if found is None else found
    shares = np.zeros((array.shape[1], found.shape[1]))
    for labels, row, weight in zip(array, found, weights, strict=True):
        theme = run_cluster_themes(row, labels)
        inside = np.flatnonzero(theme != NOISE)
        shares[inside, theme[inside]] += weight[inside] / len(array)
    return shares


def member_shares(consensus: np.ndarray, labellings, weights=None, found: np.ndarray | None = None) -> np.ndarray:
    """Per point, its :func:`theme_shares` in its own consensus cluster (0 for a noise point)."""
    consensus = check_consensus(consensus, check_labellings(labellings).shape[1])
    shares = theme_shares(consensus, labellings, weights, found)
    clustered = np.flatnonzero(consensus != NOISE)
    out = np.zeros(consensus.size)
    out[clustered] = shares[clustered, consensus[clustered]]
    return out


def run_cluster_themes(found: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The consensus cluster of each of one labelling's clusters: ``found`` is that labelling's row
    of :func:`matches` (its match of each consensus cluster), ``labels`` the cluster labels to look
    up; a label that matches no consensus cluster (noise included) gives -1."""
    lookup = {int(cluster): theme for theme, cluster in enumerate(found) if cluster != NOISE}
    return np.array([lookup.get(int(label), NOISE) for label in np.asarray(labels).ravel()], dtype=np.int64)

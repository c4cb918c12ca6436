"""The clusterings a themes run is the consensus of: each UMAP (cosine metric, a
``random_state``: single-threaded and deterministic) then HDBSCAN (``prediction_data=True``) on the
chunk vectors, the first as they are and the others plus float noise (:func:`cluster_once`), run
in parallel for a large corpus (:func:`cluster_runs`); and their consensus (:func:`consensus_themes`,
the voting itself in :mod:`embedeval.consensus`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from embedeval.consensus import consensus_labels, matches, member_shares
from embedeval.experiments.themes.config import HdbscanSettings, ThemesConfig, UmapSettings
from embedeval.labels import NOISE
from embedeval.metrics.neighbours import nearest_cosines
from embedeval.progress import bar, bar_options, step


def fit_umap(vectors: np.ndarray, settings: UmapSettings, seed: int, what: str = "UMAP", progress: bool = False):
    """UMAP fitted on ``vectors`` (cosine metric, ``random_state=seed``: single-threaded and
    deterministic). Neighbours and components are capped for a small corpus (n - 1 and n - 2).
    ``progress``: a step line (``what``, the points and dimensions, the time) with the bar of
    UMAP's epochs below it (umap-learn's own bar; its ``verbose`` lines on stdout stay off)."""
    import umap

    n = len(vectors)
    components = min(settings.components, n - 2)
    reducer = umap.UMAP(n_neighbors=min(settings.neighbors, n - 1), min_dist=settings.min_dist, n_components=components,
                        metric="cosine", random_state=seed, n_jobs=1, low_memory=True,
                        tqdm_kwds=bar_options(f"{what} epochs", "epoch", progress))
    with step(f"{what}: {n:,} points to {components} dimensions", progress):
        reduced = reducer.fit_transform(vectors)
    reducer.tqdm_kwds = None  # the pickled model shows no bar when it places needles later
    return reducer, reduced


def fit_hdbscan(reduced: np.ndarray, settings: HdbscanSettings, progress: bool = False):
    """HDBSCAN fitted on the UMAP-reduced points (``prediction_data=True``, so needles can be
    placed later); deterministic for the same points. ``progress``: a step line."""
    import hdbscan

    with step(f"HDBSCAN on {len(reduced):,} points", progress):
        return hdbscan.HDBSCAN(min_cluster_size=settings.min_cluster_size, min_samples=settings.min_samples,
                               prediction_data=True).fit(reduced)


#: Standard deviation of the Gaussian noise added to every component of the chunk vectors in the
#: consensus's clusterings after the first: float32's last bits of a unit vector's components (what
#: another CPU's kernels or another batch shape change), so the themes kept do not hang on them.
FLOAT_NOISE = 1e-7
#: Chunks from which the clusterings run in parallel processes: each process compiles numba's UMAP
#: and HDBSCAN kernels afresh (10-25 s on a 2-core machine), more than a few clusterings of a small
#: corpus take in one process (215 chunks: 3 clusterings 48 s in two processes, 28 s in one).
PARALLEL_FROM = 2_000


def run_seeds(seed: int, runs: int) -> list[int]:
    """UMAP seeds (and noise seeds) of the consensus's ``runs`` clusterings: ``seed`` first (the
    study's single run), then ``runs - 1`` drawn by ``numpy.random.default_rng(seed)``, so two
    values of ``seed`` share no clustering."""
    return [int(seed)] + [int(s) for s in np.random.default_rng(seed).integers(0, 2**31, size=runs - 1)]


@dataclass
class Clustering:
    """One clustering of the consensus: the points in UMAP's space (``reduced``), HDBSCAN's labels
    and membership probabilities, the fitted HDBSCAN, and the fitted UMAP (kept for the first
    clustering only: it places needles, :func:`~embedeval.experiments.themes.placement.placement`)."""

    seed: int
    reduced: np.ndarray
    labels: np.ndarray
    probabilities: np.ndarray
    clusterer: object
    reducer: object | None


def cluster_once(vectors: np.ndarray, config: ThemesConfig, run: int, seed: int, progress: bool = False) -> Clustering:
    """The study's recipe once: UMAP with ``random_state=seed`` then HDBSCAN, on ``vectors`` as they
    are for the first clustering (``run`` 0) and plus Gaussian noise of sd :data:`FLOAT_NOISE`
    (drawn with ``seed``) for the others."""
    if run:
        vectors = (vectors + np.random.default_rng(seed).normal(scale=FLOAT_NOISE, size=vectors.shape)).astype(vectors.dtype)
    reducer, reduced = fit_umap(vectors, config.umap, seed, progress=progress)
    clusterer = fit_hdbscan(reduced, config.hdbscan, progress)
    # HDBSCAN's probabilities as it gives them (float64): with --runs 1 they are the table's, as before
    return Clustering(seed, reduced.astype(np.float32), clusterer.labels_.astype(np.int64), np.asarray(clusterer.probabilities_, dtype=float),
                      clusterer, reducer if run == 0 else None)


def cluster_runs(vectors: np.ndarray, config: ThemesConfig, progress: bool = False) -> list[Clustering]:
    """The ``config.runs`` clusterings of :func:`cluster_once` (seeds :func:`run_seeds`), in
    parallel over the CPU's cores when there are several and at least :data:`PARALLEL_FROM`
    vectors (each clustering is deterministic, so the result does not depend on the number of
    processes); a bar counts them."""
    from joblib import Parallel, delayed

    seeds = run_seeds(config.seed, config.runs)
    if len(seeds) == 1:
        return [cluster_once(vectors, config, 0, seeds[0], progress)]
    jobs = min(len(seeds), os.cpu_count() or 1) if len(vectors) >= PARALLEL_FROM else 1
    results = Parallel(n_jobs=jobs, return_as="generator")(delayed(cluster_once)(vectors, config, run, seed)
                                                            for run, seed in enumerate(seeds))
    what = f"UMAP ({config.umap.components} dimensions) + HDBSCAN of {len(vectors):,} points"
    return list(bar(results, desc=what, unit="clustering", total=len(seeds), enabled=progress))


@dataclass
class Consensus:
    """The themes of several clusterings (:mod:`embedeval.consensus`): per chunk its theme
    (``labels``, -1 noise), ``stability`` (the share of clusterings that put it in its theme) and
    ``probability`` (HDBSCAN's membership probability there, averaged over the clusterings, 0 where
    it is elsewhere); per clustering its labels and its match of each theme (``matches``, (R, T));
    per theme its stability (the share of clusterings it comes back in)."""

    labels: np.ndarray
    stability: np.ndarray
    probability: np.ndarray
    labellings: np.ndarray
    matches: np.ndarray

    @property
    def theme_stability(self) -> np.ndarray:
        return (self.matches != NOISE).mean(axis=0)


def consensus_themes(runs: list[Clustering], vectors: np.ndarray, config: ThemesConfig) -> Consensus:
    """The consensus of the clusterings ``runs`` of ``vectors`` (themes of at least
    ``hdbscan.min_cluster_size`` chunks, :func:`~embedeval.consensus.consensus_labels`), each chunk
    decided by the votes of its ``config.neighbourhood`` nearest chunks in the embedding space when
    there are several clusterings (one clustering is the study's run as it is)."""
    labellings = np.array([run.labels for run in runs])
    vote = len(runs) > 1 and config.neighbourhood > 1
    neighbours = nearest_cosines(vectors, vectors, config.neighbourhood)[1] if vote else None
    labels = consensus_labels(labellings, config.hdbscan.min_cluster_size, neighbours)
    weights = np.array([run.probabilities for run in runs])
    found = matches(labels, labellings)
    return Consensus(labels, member_shares(labels, labellings, found=found), member_shares(labels, labellings, weights, found),
                     labellings, found)

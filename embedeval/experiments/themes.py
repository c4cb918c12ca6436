"""A corpus's themes and needles that blend into them (Chroma's Context Rot recipe).

``run_themes(config)``: the corpus cut into 1-3-sentence chunks, each embedded (through the cache),
reduced with UMAP (``umap-learn``: 30 neighbours, min_dist 0.05, 50 dimensions, cosine metric,
random_state 42) and clustered with HDBSCAN (``hdbscan``: min_cluster_size 10, min_samples 15,
``prediction_data=True``). Per cluster: its size and share, its representative chunks by maximal
marginal relevance (:func:`~embedeval.metrics.neighbours.mmr` over the chunk vectors, relevance = cosine to the
cluster's normalised mean vector) and its top terms (class-based TF-IDF: a cluster's chunks as one
document). Writes into ``out``: ``chunks.parquet`` (chunk_id, book, text, cluster (-1 = noise),
probability, x, y of a second, 2-D UMAP for the map), ``clusters.csv``, ``report.md``,
``figures/map.png``, and the fitted models (``umap.joblib``, ``hdbscan.joblib``) with
``themes.json``: the settings, the embedder's spec and fingerprint, the package versions.

The corpus is cut by :func:`~embedeval.chunking.corpus_chunks` with ``chunk_seed`` (default the
similarity commands' seed, 0): the same chunks as ``embedeval similarity needle-haystack`` and
``absence`` cut from that corpus, read from the chunk cache, their vectors from the embedding cache.

``theme_membership(out, texts)``: texts (needles) embedded with the run's embedder, placed in the
fitted UMAP's space (:func:`place`: the weighted mean of their nearest chunks' positions; a corpus
chunk's own vector on its own position) and assigned by HDBSCAN's ``approximate_predict``: predicted
cluster and its probability; then, in the embedding space (:func:`theme_distances`), each text's
mean cosine to its nearest chunks of the target theme and that value's percentile among the corpus
chunks outside the theme (and inside it). A text blends into the target theme when it is predicted
into it with probability > 0.9 and is closer to it than 95% of the corpus outside it. Each text
may name its own target theme (a ``target_cluster`` column; a pair file's ``cluster`` or ``theme``),
and each gets its best theme beside the target's: the cluster it is nearest in the embedding space
(:func:`nearest_theme`), with the same measures. A run
directory whose embedder, settings or packages differ from what is installed now is refused with
one line: the pickled models would not mean the same.

Determinism: UMAP with a ``random_state`` runs single-threaded (umap-learn turns parallelism off
when a seed is given; a parallel run is faster and differs run to run), HDBSCAN is deterministic,
so on one machine the same corpus, embedder, seed and cached vectors give the same clusters and
tables. Vectors that differ in their last bits (another CPU, another batch shape) can give other
clusters, and other numbers for the same subjects (``benchmarks/bench_theme_stability.py``
measures it): :func:`resolve_theme` names a theme by a term of its top terms instead.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from embedeval import options
from embedeval.chunking import Chunk, corpus_chunks, parse_chunker
from embedeval.consensus import consensus_labels, matches, member_shares, run_cluster_themes
from embedeval.corpus import check_min_books, load_corpus, require_books
from embedeval.defaults import DEFAULT_BLEND_THRESHOLD, DEFAULT_MIN_OUTSIDE_PERCENTILE
from embedeval.embedders.registry import load_embedder
from embedeval.errors import ConfigError, CorpusError, InputError
from embedeval.io import atomic_path, json_text, read_json, read_table, text_sha256, write_table, write_text_atomic
from embedeval.labels import NOISE
from embedeval.report.themes import map_figure, themes_report
from embedeval.report.write import FIGURES, REPORT_MD
from embedeval.run_folder import check_run_folder, check_subfolder, run_directory
from embedeval.versions import package_version, package_versions
from embedeval.options import check_options
from embedeval.metrics.neighbours import mmr, nearest_cosines, neighbour_similarity, percentile_rank
from embedeval.plan import EmbedderPlan, plan_documents, plan_work
from embedeval.progress import bar, bar_options, step
from embedeval.text import topic_terms

#: Packages whose versions must match for pickled models to be read back.
MODEL_PACKAGES = ("umap-learn", "hdbscan", "pynndescent", "numba", "numpy", "scikit-learn")
MANIFEST = "themes.json"
#: Each clustering's points in UMAP's space, labels, and match of each theme (embedeval.consensus.matches).
RUNS_FILE = "clusterings.npz"
UMAP_FILE, HDBSCAN_FILE = "umap.joblib", "hdbscan.joblib"  # the fitted UMAP of the first clustering; every clustering's HDBSCAN
CHUNKS_FILE, CLUSTERS_FILE, MAP_FIGURE = "chunks.parquet", "clusters.csv", f"{FIGURES}/map.png"
#: Every file a themes run writes into its folder, :data:`MANIFEST` last.
THEMES_FILES = (UMAP_FILE, HDBSCAN_FILE, RUNS_FILE, CHUNKS_FILE, CLUSTERS_FILE, MAP_FIGURE, REPORT_MD, MANIFEST)
TOP_TERMS = 8
#: Cosines of (float32) embeddings closer than this are equal: a placed vector whose cosine to a corpus
#: chunk is within it of 1 is that chunk (it lands on the chunk's position), and neighbour similarities
#: within it of each other are ties in a percentile.
COSINE_RESOLUTION = 1e-6


@dataclass(frozen=True)
class UmapSettings:
    """UMAP's (umap-learn's ``n_neighbors``, ``min_dist``, ``n_components``)."""

    neighbors: int = options.UMAP_NEIGHBORS.field()
    min_dist: float = options.UMAP_MIN_DIST.field()
    components: int = options.UMAP_COMPONENTS.field()


@dataclass(frozen=True)
class HdbscanSettings:
    """HDBSCAN's (``min_cluster_size``, ``min_samples``)."""

    min_cluster_size: int = options.MIN_CLUSTER_SIZE.field()
    min_samples: int = options.MIN_SAMPLES.field()


@dataclass(frozen=True)
class ThemesConfig:
    """Everything a themes run depends on (written to ``themes.json``)."""

    corpus: str = options.CORPUS.field()
    min_books: int = options.MIN_BOOKS.field()
    chunker: str = options.THEME_CHUNKER.field()
    embedder: str = options.EMBEDDER.field()
    umap: UmapSettings = field(default_factory=UmapSettings)
    hdbscan: HdbscanSettings = field(default_factory=HdbscanSettings)
    representatives: int = options.REPRESENTATIVES.field()  # per cluster, by MMR
    mmr_lambda: float = options.MMR_LAMBDA.field()
    seed: int = options.THEME_SEED.field()  # UMAP's random_state (of the first clustering)
    out: str = "runs/themes"
    chunk_seed: int = options.CHUNK_SEED.field()  # chunk sizes, as the similarity commands draw them
    runs: int = options.THEME_RUNS.field()  # clusterings the themes are the consensus of
    neighbourhood: int = options.THEME_NEIGHBOURHOOD.field()  # chunks whose votes decide a chunk's theme

    def validate(self) -> None:
        """One-line :class:`~embedeval.errors.ConfigError` for settings that cannot work."""
        parse_chunker(self.chunker)
        check_min_books(self.min_books)
        counts = {"umap.neighbors": self.umap.neighbors, "umap.components": self.umap.components,
                  "hdbscan.min_cluster_size": self.hdbscan.min_cluster_size, "hdbscan.min_samples": self.hdbscan.min_samples,
                  "representatives": self.representatives, "runs": self.runs, "neighbourhood": self.neighbourhood}
        for parameter, value in counts.items():
            least = 1 if parameter in ("representatives", "runs", "neighbourhood") else 2
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < least:
                raise ConfigError(f"{parameter} must be a whole number >= {least}, not {value!r}", parameter)
        check_options(self.umap)  # min_dist in [0, 1]
        check_options(self)  # mmr_lambda in [0, 1]

    def model_settings(self) -> dict:
        """What the fitted models depend on (compared at membership time)."""
        data = asdict(self)
        return {k: data[k] for k in ("corpus", "chunker", "chunk_seed", "embedder", "umap", "hdbscan", "seed", "runs", "neighbourhood")}


@dataclass
class ThemesResult:
    """What a themes run produced: the chunk and cluster tables, and the seconds each step took."""

    config: ThemesConfig
    chunks: pd.DataFrame
    clusters: pd.DataFrame
    out: Path
    timings: dict[str, float]


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
    clustering only: it places needles, :func:`placement`)."""

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


def top_terms(texts: list[str], labels: np.ndarray, clusters: list[int], n: int = TOP_TERMS) -> dict[int, list[str]]:
    """Class-based TF-IDF: each cluster's chunks joined into one document; a term's weight is its
    frequency in the cluster (relative to the cluster's words) x log(1 + mean words per cluster /
    its frequency over all clusters). The ``n`` heaviest terms per cluster; terms are the words of
    :func:`~embedeval.text.topic_terms` (English stop words and contractions out, so no fragment
    such as ``don`` or ``ve`` is a term)."""
    from sklearn.feature_extraction.text import CountVectorizer

    if not clusters:
        return {}
    documents = [" ".join(t for t, label in zip(texts, labels) if label == c) for c in clusters]
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


def plan_themes(config: ThemesConfig, cache_dir=None, prices: dict[str, float] | None = None, calibrate: bool = True,
                progress: bool = False, chunks: list[Chunk] | None = None) -> list[EmbedderPlan]:
    """What :func:`run_themes` would embed, send, cost and take (:mod:`embedeval.plan`): the corpus
    cut into chunks (or ``chunks``, cut by :func:`cut_corpus` already), their embedding recorded;
    nothing sent or written."""
    config.validate()
    texts = [c.text for c in (chunks if chunks is not None else cut_corpus(config, progress))]
    return plan_documents(config.embedder, texts, cache_dir, prices, calibrate, config.seed, progress)


def cut_corpus(config: ThemesConfig, progress: bool = False) -> list[Chunk]:
    """The corpus cut into the chunks the themes are found in; too few to cluster is one error."""
    with step(f"corpus {config.corpus} cut into {config.chunker} chunks", progress):
        corpus = load_corpus(config.corpus)
        require_books(corpus, config.min_books, purpose="themes are found in")
        chunks = corpus_chunks(corpus, config.chunker, seed=config.chunk_seed)
    least = max(config.hdbscan.min_cluster_size, config.hdbscan.min_samples) + 2
    if len(chunks) < least:
        raise CorpusError(f"corpus {config.corpus} gives {len(chunks)} chunks; clustering with `hdbscan.min_cluster_size` "
                          f"{config.hdbscan.min_cluster_size} and `hdbscan.min_samples` {config.hdbscan.min_samples} needs at least "
                          f"{least}", "hdbscan.min_cluster_size", "hdbscan.min_samples")
    return chunks


def check_themes_out(config: ThemesConfig) -> None:
    """Refuse, before the corpus is read and embedded, an ``out`` that a themes run may not write
    into (:func:`~embedeval.run_folder.check_run_folder`, and its ``figures/``), or where one of
    its files (:data:`THEMES_FILES`) is taken by a link or a folder."""
    check_run_folder(Path(config.out), is_themes_directory, MANIFEST, THEMES_FILES)
    check_subfolder(Path(config.out) / FIGURES)


def run_themes(config: ThemesConfig | None = None, progress: bool = True, cache_dir=None, chunks: list[Chunk] | None = None) -> ThemesResult:
    """Run the recipe of the module docstring and write ``config.out`` (``chunks``: the corpus cut
    by :func:`cut_corpus` already, as for its plan)."""
    import joblib

    config = config or ThemesConfig()
    config.validate()
    check_themes_out(config)
    clock = time.perf_counter()
    chunks = chunks if chunks is not None else cut_corpus(config, progress)
    model = load_embedder(config.embedder, cache_dir=cache_dir, progress=progress)
    texts = [c.text for c in chunks]
    timings: dict[str, float] = {}
    with run_directory(config.out, is_themes_directory, MANIFEST, THEMES_FILES) as out:
        timings["chunking"] = time.perf_counter() - clock
        clock = time.perf_counter()
        vectors = model.embed(texts, kind="document")
        timings["embedding"] = time.perf_counter() - clock
        clock = time.perf_counter()
        runs = cluster_runs(vectors, config, progress)
        timings["clusterings"] = time.perf_counter() - clock
        clock = time.perf_counter()
        with step(f"consensus of {len(runs)} clustering{'s' if len(runs) > 1 else ''}", progress and len(runs) > 1):
            themed = consensus_themes(runs, vectors, config)
        labels, found, labellings = themed.labels, themed.matches, themed.labellings
        timings["consensus"] = time.perf_counter() - clock
        themes = int(labels.max()) + 1
        if not themes:
            raise InputError(f"no theme found in the {len(chunks)} chunks: every chunk is noise to HDBSCAN"
                             + (f", or no cluster comes back in half of the {len(runs)} clusterings" if len(runs) > 1 else "")
                             + f"; try smaller `hdbscan.min_cluster_size`/`hdbscan.min_samples` (now {config.hdbscan.min_cluster_size}/"
                             f"{config.hdbscan.min_samples}) or fewer `umap.components`",
                             "hdbscan.min_cluster_size", "hdbscan.min_samples", "umap.components")
        clock = time.perf_counter()
        _, flat = fit_umap(runs[0].reduced, UmapSettings(config.umap.neighbors, config.umap.min_dist, 2), config.seed,
                           what="UMAP for the map", progress=progress)  # the 2-D map of the first clustering's space
        timings["map"] = time.perf_counter() - clock
        table = pd.DataFrame({"chunk_id": [c.id for c in chunks], "book": [c.book for c in chunks], "text": texts,
                              "cluster": labels, "probability": themed.probability, "stability": themed.stability,
                              "x": flat[:, 0], "y": flat[:, 1]})
        rows = []
        with step(f"top terms and representatives of {themes} clusters", progress):
            terms = top_terms(texts, labels, list(range(themes)))
            theme_stability = themed.theme_stability
            for c in range(themes):
                members = np.flatnonzero(labels == c)
                picks = representatives(vectors, members, config.representatives, config.mmr_lambda)
                rows.append({"cluster": c, "size": int(members.size), "share": members.size / len(chunks),
                             "representatives": ";".join(chunks[i].id for i in picks), "top_terms": ";".join(terms[c]),
                             "stability": float(theme_stability[c])})
        clusters = pd.DataFrame(rows, columns=["cluster", "size", "share", "representatives", "top_terms", "stability"])
        with atomic_path(out / UMAP_FILE) as tmp:
            joblib.dump(runs[0].reducer, tmp)
        with atomic_path(out / HDBSCAN_FILE) as tmp:
            joblib.dump([run.clusterer for run in runs], tmp)
        with atomic_path(out / RUNS_FILE) as tmp:
            with open(tmp, "wb") as handle:
                np.savez(handle, reduced=np.array([run.reduced for run in runs]), labels=labellings, matches=found)
        write_table(table, out / CHUNKS_FILE)
        write_table(clusters, out / CLUSTERS_FILE)
        with step("the map and report.md", progress):
            check_subfolder(out / FIGURES)  # again, while the folder is held
            map_figure(table, out / MAP_FIGURE, terms=terms,
                       stability=dict(enumerate(theme_stability.tolist())) if len(runs) > 1 else None)
            write_text_atomic(out / REPORT_MD, themes_report(config, table, clusters))
        manifest = {"settings": config.model_settings(), "representatives": config.representatives,
                    "mmr_lambda": config.mmr_lambda, "embedder_fingerprint": model.fingerprint,
                    "packages": package_versions(MODEL_PACKAGES, python=False),
                    "run_seeds": [run.seed for run in runs], "float_noise": FLOAT_NOISE, "timings": timings}
        write_text_atomic(out / MANIFEST, json_text(manifest))  # last: a run without it is unfinished
    return ThemesResult(config, table, clusters, Path(config.out), timings)




def is_themes_directory(folder: Path) -> bool:
    """Whether embedeval wrote a themes run into ``folder``: its themes.json (written last) holds a
    themes run's settings and embedder fingerprint."""
    try:
        manifest = read_json(folder / MANIFEST)
    except InputError:
        return False
    return isinstance(manifest, dict) and "settings" in manifest and "embedder_fingerprint" in manifest


def read_manifest(out: str | Path) -> dict:
    """``themes.json`` of a finished themes run, refused with one line for a missing folder or an
    unfinished run."""
    folder = Path(out)
    if not folder.is_dir():
        raise InputError(f"themes directory {folder} does not exist (find the corpus's themes into it first)")
    if not (folder / MANIFEST).is_file():
        raise InputError(f"{folder} is not a finished themes run (no {MANIFEST})")
    manifest = read_json(folder / MANIFEST)
    wrong = ("it is not a JSON object" if not isinstance(manifest, dict)
             else next((f"its {key!r} is missing or not an object" for key in ("settings", "packages")
                        if not isinstance(manifest.get(key), dict)), None))
    if wrong:
        raise InputError(f"{folder / MANIFEST} is not a themes run's manifest ({wrong}; the file was edited or damaged): "
                         "run embedeval themes again")
    return manifest


def themes_key(out: str | Path) -> str:
    """sha256 of what defines a finished themes run's themes: its settings (``themes.json`` less
    the timings of the run), every chunk's cluster, and each cluster's size, representative chunks
    (ids and texts, in MMR order) and top terms. Running ``themes`` again with the same settings on
    the same machine and cache gives the same key (its ``themes.json`` differs in the timings)."""
    folder = Path(out)
    manifest = read_manifest(folder)
    chunks = read_table(folder / CHUNKS_FILE, ["chunk_id", "text", "cluster"])
    clusters = read_table(folder / CLUSTERS_FILE, ["cluster", "size", "representatives", "top_terms"])
    text_of = dict(zip(chunks["chunk_id"].astype(str), chunks["text"].astype(str)))
    shown = [[str(r.cluster), str(r.size), str(r.representatives), str(r.top_terms),
              [text_of.get(i, "") for i in str(r.representatives).split(";")]] for r in clusters.itertuples(index=False)]
    defining = {"settings": {k: v for k, v in manifest.items() if k != "timings"} if isinstance(manifest, dict) else manifest,
                "assignments": [[i, int(c)] for i, c in zip(chunks["chunk_id"].astype(str), chunks["cluster"])],
                "clusters": shown}
    return text_sha256(json.dumps(defining, sort_keys=True, ensure_ascii=False, default=str))


#: A theme named by its number (``6``; a table of floats writes ``6.0``).
_THEME_NUMBER = re.compile(r"-?[0-9]+(?:\.0*)?")  # ASCII digits only, as every number of a command line


def theme_top_terms(out: str | Path) -> dict[int, tuple[str, ...]]:
    """Each theme's top terms (cluster number -> its terms, heaviest first), as the finished themes
    run ``out`` wrote them in ``clusters.csv``."""
    read_manifest(out)  # a missing folder or an unfinished run: one line
    path = Path(out) / CLUSTERS_FILE
    clusters = read_table(path, ["cluster", "top_terms"])
    found: dict[int, tuple[str, ...]] = {}
    for line, (cluster, terms) in enumerate(zip(clusters["cluster"], clusters["top_terms"]), start=2):
        text = str(cluster).strip()
        if not _THEME_NUMBER.fullmatch(text) or not 0 <= (number := int(float(text))) < 2**31:
            raise InputError(f"{path}, line {line}: cluster {text!r} is not a theme number (a whole number >= 0, "
                             f"below {2**31:,})")
        if number in found:
            raise InputError(f"{path}, line {line}: theme {number} is listed twice")
        found[number] = tuple(t.strip().lower() for t in (terms if isinstance(terms, str) else "").split(";") if t.strip())
    return found


def resolve_theme(name: int | str, top_terms: dict[int, tuple[str, ...]], run: str | Path, parameter: str | None = None,
                  what: str | None = None) -> int:
    """The cluster number of the theme ``name`` names in the run ``run`` (whose themes' top terms
    are ``top_terms``, :func:`theme_top_terms`): a whole number (``6``, ``"6"``) is the theme of that
    number; any other text is a term (``"writing"``, case and surrounding spaces aside), the theme
    that has it among its top terms. A number that is no theme of the run, a term no theme has, and
    a term more than one theme has (the candidates named, with their first top terms) are one
    :class:`~embedeval.errors.InputError`, after ``what: `` (default: `` `parameter` `` when the
    name is that parameter's value; a pair file: the needles that named it).

    Cluster numbers follow the clusters' sizes, and sizes can change between machines (the
    module docstring, Determinism): a term keeps naming the same subject where a number may not."""
    what = what or (f"`{parameter}`" if parameter else "")
    label = f"{what}: " if what else ""
    parameters = (parameter,) if parameter else ()
    known = sorted(top_terms)
    text = str(name).strip() if not isinstance(name, (int, np.integer)) or isinstance(name, bool) else None
    if text is None or _THEME_NUMBER.fullmatch(text):
        number = int(name) if text is None else int(float(text))
        if number not in top_terms:
            raise InputError(f"{label}theme {number} is not a theme of {run} (its themes: {_theme_range(known)}; see its clusters.csv)", *parameters)
        return number
    term = text.lower()
    if not term:
        raise InputError(f"{label}an empty name: name a theme by its number or by one of its top terms (see {run}/clusters.csv)", *parameters)
    matches = [c for c in known if term in top_terms[c]]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        every = sorted({t for terms in top_terms.values() for t in terms})
        close = difflib.get_close_matches(term, every, n=3)
        hint = f"; closest: {', '.join(f'{t} ({_themes_with(t, top_terms)})' for t in close)}" if close else ""
        raise InputError(f"{label}no theme of {run} has {text!r} among its top terms{hint} (see its clusters.csv)", *parameters)
    candidates = "; ".join(f"{c} ({', '.join(top_terms[c][:4])})" for c in matches)
    raise InputError(f"{label}{text!r} is a top term of {len(matches)} themes of {run}: {candidates}; name one by its "
                     "number or by a term only it has", *parameters)


def resolve_themes(run: str | Path, names, parameter: str | None = None) -> list[int]:
    """:func:`resolve_theme` for each of ``names`` against the themes of the finished run ``run``,
    in order; two names of the same theme (``writing`` and ``6``) are one
    :class:`~embedeval.errors.InputError`."""
    top_terms = theme_top_terms(run)
    numbers = [resolve_theme(name, top_terms, run, parameter) for name in names]
    for number in numbers:
        same = [str(n) for n, c in zip(names, numbers) if c == number]
        if len(same) > 1:
            raise InputError(f"{f'`{parameter}`' if parameter else 'the list'} names theme {number} twice ({', '.join(same)}): "
                             "name each theme once", *((parameter,) if parameter else ()))
    return numbers


def _theme_range(known: list[int]) -> str:
    return f"0..{known[-1]}" if known == list(range(len(known))) and known else ", ".join(map(str, known)) or "none"


def _themes_with(term: str, top_terms: dict[int, tuple[str, ...]]) -> str:
    found = [str(c) for c in sorted(top_terms) if term in top_terms[c]]
    return f"theme{'s' if len(found) > 1 else ''} {', '.join(found)}"


def themes_chunks(out: str | Path):
    """The chunks of a finished themes run (as :class:`~embedeval.chunking.Chunk`) and where they
    came from (corpus, chunker, seed: what a chroma collection records), for ``similarity absence``."""
    settings = read_manifest(out)["settings"]
    table = read_table(Path(out) / CHUNKS_FILE, ["chunk_id", "book", "text"])
    chunks = [Chunk(str(i), str(b), str(t)) for i, b, t in zip(table["chunk_id"], table["book"], table["text"])]
    # runs written before chunk_seed was a setting cut their chunks with the one seed
    return chunks, {"corpus": settings["corpus"], "chunker": settings["chunker"], "seed": settings.get("chunk_seed", settings["seed"])}


def load_themes(out: str | Path) -> tuple[dict, object, list, dict[str, np.ndarray]]:
    """(manifest, UMAP, HDBSCANs, clusterings) of a themes run directory: the first clustering's
    fitted UMAP, each clustering's fitted HDBSCAN, and :data:`RUNS_FILE`'s arrays (``reduced``,
    ``labels``, ``matches``). Refused with one line if the folder is missing or unfinished, was
    written before themes were a consensus, if the installed packages differ from those that
    fitted the models, or if its files do not belong together (:func:`check_themes_files`; each
    model is the one its clustering's arrays were saved from)."""
    import hdbscan
    import umap

    folder = Path(out)
    manifest = read_manifest(folder)
    changed = {k: (v, now) for k, v in manifest["packages"].items() if (now := package_version(k)) != v}
    if changed:
        name, (then, now) = next(iter(changed.items()))
        raise InputError(f"{folder} was fitted with {name} {then}, {now} is installed now; run embedeval themes again")
    manifest, arrays = check_themes_files(folder)  # before any model is unpickled
    clusterers = _fitted(folder / HDBSCAN_FILE)
    if not isinstance(clusterers, list):
        raise InputError(f"{folder} was written before themes were a consensus of several clusterings: run embedeval themes again")
    if len(clusterers) != len(arrays["labels"]):
        raise InputError(f"{folder}'s {RUNS_FILE}, hdbscan.joblib and {MANIFEST} disagree on the number of clusterings "
                         "(files of different runs): run embedeval themes again")
    for r, clusterer in enumerate(clusterers):
        fitted_on = getattr(clusterer, "_raw_data", None)  # the points HDBSCAN was fitted on, kept for its predictions
        if not isinstance(clusterer, hdbscan.HDBSCAN) or getattr(clusterer, "prediction_data_", None) is None \
                or not np.array_equal(np.asarray(getattr(clusterer, "labels_", ())), arrays["labels"][r]) \
                or fitted_on is None or not np.array_equal(np.asarray(fitted_on, dtype=arrays["reduced"].dtype), arrays["reduced"][r]):
            raise InputError(f"{folder / HDBSCAN_FILE}: its model {r + 1} is not the HDBSCAN of clustering {r + 1} of its "
                             f"{RUNS_FILE} (files of different runs, or edited): run embedeval themes again")
    reducer = _fitted(folder / UMAP_FILE)
    embedding = getattr(reducer, "embedding_", None)
    if not isinstance(reducer, umap.UMAP) or embedding is None or not np.array_equal(embedding, arrays["reduced"][0]):
        raise InputError(f"{folder / UMAP_FILE} is not the UMAP of the first clustering of its {RUNS_FILE} (files of "
                         "different runs, or edited): run embedeval themes again")
    return manifest, reducer, clusterers, arrays


def check_themes_files(out: str | Path) -> tuple[dict, dict[str, np.ndarray]]:
    """(manifest, :data:`RUNS_FILE`'s arrays) of a finished themes run whose files belong together,
    checked without unpickling a model (so ``needles draft --plan`` refuses what the draft would):
    ``themes.json``'s ``run_seeds`` (R whole numbers; none: written before themes were a consensus),
    ``reduced`` (R, n, d) finite numbers, ``labels`` (R, n) labels, ``matches`` (R, T) each a
    cluster of its clustering or -1, ``chunks.parquet`` n chunks each in a theme 0..T-1 or noise,
    ``clusters.csv`` the themes 0..T-1. Anything else is one :class:`~embedeval.errors.InputError`."""
    folder = Path(out)
    manifest = read_manifest(folder)
    if "run_seeds" not in manifest:
        raise InputError(f"{folder} was written before themes were a consensus of several clusterings: run embedeval themes again")
    seeds = manifest["run_seeds"]
    if not isinstance(seeds, list) or not seeds or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds):
        raise InputError(f"{folder / MANIFEST}: its 'run_seeds' is not a list of whole numbers (the file was edited or damaged): "
                         "run embedeval themes again")
    path = folder / RUNS_FILE
    arrays = _clusterings(path)
    reduced, labels, found = arrays["reduced"], arrays["labels"], arrays["matches"]
    wrong = None
    if reduced.ndim != 3 or 0 in reduced.shape or not np.issubdtype(reduced.dtype, np.floating) or not np.isfinite(reduced).all():
        wrong = f"its reduced points are not an (R, n, d) array of finite numbers (shape {reduced.shape}, {reduced.dtype})"
    elif not np.issubdtype(labels.dtype, np.integer) or labels.shape != reduced.shape[:2] or labels.min() < NOISE:
        wrong = f"its labels are not an (R, n) = {reduced.shape[:2]} array of cluster labels (shape {labels.shape}, {labels.dtype})"
    elif not np.issubdtype(found.dtype, np.integer) or found.ndim != 2 or len(found) != len(labels) or (found.size and found.min() < NOISE):
        wrong = f"its matches are not an (R, T) array of cluster labels for R = {len(labels)} (shape {found.shape})"
    else:
        strays = [r for r in range(len(found)) if not np.isin(found[r][found[r] != NOISE], labels[r]).all()]
        if strays:
            wrong = f"clustering {strays[0] + 1}'s match of a theme is no cluster of that clustering"
    if wrong:
        raise InputError(f"{path}: {wrong} (the file was edited or damaged): run embedeval themes again")
    if len(seeds) != len(labels):
        raise InputError(f"{folder}'s {RUNS_FILE}, hdbscan.joblib and {MANIFEST} disagree on the number of clusterings "
                         "(files of different runs): run embedeval themes again")
    n, themes = labels.shape[1], found.shape[1]
    chunks = read_table(folder / CHUNKS_FILE, ["cluster"], integers=["cluster"])
    clusters = chunks["cluster"].to_numpy()
    if len(chunks) != n or chunks["cluster"].isna().any() or not np.isin(clusters, np.arange(-1, themes)).all():
        raise InputError(f"{folder}'s chunks.parquet ({len(chunks)} chunks) is not of the clusterings of its {RUNS_FILE} ({n} "
                         f"chunks, themes 0..{themes - 1}) (files of different runs, or edited): run embedeval themes again")
    listed = sorted(theme_top_terms(folder))
    if listed != list(range(themes)):
        raise InputError(f"{folder}'s clusters.csv lists the themes {_theme_range(listed)}, its {RUNS_FILE} matches "
                         f"{themes} (0..{themes - 1}) (files of different runs, or edited): run embedeval themes again")
    return manifest, arrays


def _clusterings(path: Path) -> dict[str, np.ndarray]:
    """:data:`RUNS_FILE`'s arrays; a missing or damaged file is one :class:`~embedeval.errors.InputError`."""
    if not path.is_file():
        raise InputError(f"{path} is missing: run embedeval themes again")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: np.asarray(data[name]) for name in ("reduced", "labels", "matches")}
    except Exception as exc:  # a damaged archive raises zipfile, OS or key errors
        raise InputError(f"{path} does not load ({type(exc).__name__}; the file was edited or damaged): "
                         "run embedeval themes again") from None


def _fitted(path: Path):
    """A fitted model a themes run saved with joblib; a missing or unreadable file is one
    :class:`~embedeval.errors.InputError` line."""
    import joblib

    if not path.is_file():
        raise InputError(f"{path} is missing: run embedeval themes again")
    try:
        return joblib.load(path)
    except Exception as exc:  # a damaged pickle raises anything: ValueError, EOFError, UnpicklingError, KeyError
        raise InputError(f"{path} does not load ({type(exc).__name__}; the file was edited or damaged): "
                         "run embedeval themes again") from None


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
    neighbourhood (:func:`theme_membership` measures that distance in the embedding space)."""
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


def theme_distances(vectors: np.ndarray, corpus: np.ndarray, labels: np.ndarray, target: int, k: int) -> pd.DataFrame:
    """How close ``vectors`` (needles) are to theme ``target`` in the embedding space, against the
    corpus (``corpus`` (n, d) with cluster ``labels`` (n,)): per needle

    - ``neighbour_similarity``: s = its mean cosine to its k nearest chunks of the theme
      (:func:`~embedeval.metrics.neighbours.neighbour_similarity`; all of them when the theme has fewer than k);
    - ``outside_percentile``: P(s) among the same statistic of every chunk outside the theme (other
      clusters and noise), ties (within 1e-6) counted half (:func:`~embedeval.metrics.neighbours.percentile_rank`:
      100 * (#{outside < s} + 0.5 * #{outside = s}) / #outside): "closer to this theme than P% of
      the corpus outside it";
    - ``inside_percentile``: P(s) among the theme's own chunks, each leaving itself out of its k
      nearest (k' = min(k, size - 1)): for reading, a hand-written needle is naturally less alike
      the theme than its chunks are to each other.

    Only the theme's chunks are the k-nearest reference set."""
    inside = labels == target
    if inside.sum() < 2 or inside.all():
        raise InputError(f"cluster {target} has {int(inside.sum())} of {len(labels)} chunks: the distance test needs "
                         "at least 2 inside it and 1 outside")
    theme = corpus[inside]
    needle = neighbour_similarity(vectors, theme, k)
    outside = neighbour_similarity(corpus[~inside], theme, k)
    own = neighbour_similarity(theme, theme, k, exclude_self=True)
    return pd.DataFrame({"neighbour_similarity": needle,
                         "outside_percentile": percentile_rank(needle, outside, COSINE_RESOLUTION),
                         "inside_percentile": percentile_rank(needle, own, COSINE_RESOLUTION)})


def nearest_theme(vectors: np.ndarray, corpus: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each vector's nearest theme in the embedding space: the cluster (of ``labels``, noise left
    out) whose k nearest chunks it is most alike on average (the largest
    :func:`~embedeval.metrics.neighbours.neighbour_similarity`; ties to the smaller cluster number), and
    that similarity."""
    clusters = sorted(set(labels.tolist()) - {NOISE})
    similarities = np.column_stack([neighbour_similarity(vectors, corpus[labels == c], k) for c in clusters])
    best = similarities.argmax(axis=1)
    return np.asarray(clusters)[best], similarities[np.arange(len(vectors)), best]


@dataclass
class MembershipCheck:
    """A :func:`theme_membership` with its inputs read and checked before anything is embedded
    (:meth:`read`: the themes run, its fitted models, the rows' target themes), then planned
    (:meth:`plan`) or computed (:meth:`table`)."""

    out: Path
    rows: pd.DataFrame
    targets: np.ndarray
    manifest: dict
    reducer: object
    clusterers: list
    clusterings: dict
    chunks: pd.DataFrame
    threshold: float
    min_outside_percentile: float
    themes: int

    @classmethod
    def read(cls, out: str | Path, rows: pd.DataFrame, cluster: int | str | None = None, threshold: float = DEFAULT_BLEND_THRESHOLD,
             min_outside_percentile: float = DEFAULT_MIN_OUTSIDE_PERCENTILE, embedder: str | None = None) -> MembershipCheck:
        """Everything a user can get wrong refused with one line: the settings, an ``embedder``
        that is not the run's, the run itself, the themes named."""
        options.THRESHOLD.check(threshold)
        options.MIN_OUTSIDE_PERCENTILE.check(min_outside_percentile)
        if embedder is not None and (made_with := read_manifest(out)["settings"]["embedder"]) != embedder:
            raise InputError(f"{out} was made with {made_with}, not {embedder}: its themes live in that model's space")
        manifest, reducer, clusterers, clusterings = load_themes(out)
        top_terms = theme_top_terms(out)
        default = 0 if cluster is None else resolve_theme(cluster, top_terms, out, "cluster")
        targets = _row_targets(rows, default, top_terms, out)
        chunks = read_table(Path(out) / CHUNKS_FILE, ["text", "cluster"])
        return cls(Path(out), rows, targets, manifest, reducer, clusterers, clusterings, chunks, threshold, min_outside_percentile,
                   len(top_terms))

    @property
    def embedder(self) -> str:
        """The run's embedder: its themes live in that model's space."""
        return self.manifest["settings"]["embedder"]

    def embed(self, model) -> tuple[np.ndarray, np.ndarray]:
        """What the check embeds: the run's chunks (from the cache: the vectors UMAP was fitted on)
        and the rows' needles, both as documents."""
        return model.embed(self.chunks["text"].tolist(), kind="document"), model.embed(self.rows["needle"].tolist(), kind="document")

    def plan(self, cache_dir=None, prices: dict[str, float] | None = None, calibrate: bool = True,
             progress: bool = False) -> list[EmbedderPlan]:
        """What :meth:`table` would embed, send, cost and take (:mod:`embedeval.plan`); nothing sent or stored."""
        return plan_work([self.embedder], lambda models: self.embed(models[0]), cache_dir, prices, calibrate, progress=progress)

    def table(self, cache_dir=None, progress: bool = False) -> pd.DataFrame:
        """The rows with their membership columns (:func:`theme_membership`)."""
        model = load_embedder(self.embedder, cache_dir=cache_dir, progress=progress)
        if model.fingerprint != self.manifest["embedder_fingerprint"]:
            raise InputError(f"{self.out} was made with another {self.embedder} (its fingerprint differs); run embedeval themes again")
        corpus, vectors = self.embed(model)
        targets, threshold = self.targets, self.threshold
        probabilities, shares = theme_probabilities(placement(self.reducer, vectors, corpus), self.clusterers, self.clusterings,
                                                    self.themes)
        predicted = predicted_themes(probabilities, shares)
        on = np.arange(len(self.rows))
        labels, k = self.chunks["cluster"].to_numpy(), self.manifest["settings"]["umap"]["neighbors"]
        table = self.rows.copy()
        table["predicted_cluster"] = predicted
        table["probability"] = np.where(predicted != NOISE, probabilities[on, np.maximum(predicted, 0)], 0.0)
        table["target_cluster"] = targets
        table["target_probability"] = probabilities[on, targets]
        table["target_stability"] = shares[on, targets]
        distances = _distances_to(targets, vectors, corpus, labels, k)
        for column in distances:
            table[column] = distances[column].to_numpy()
        table["blends_in"] = (table["target_probability"] > threshold) & (table["outside_percentile"] >= self.min_outside_percentile)
        best, _ = nearest_theme(vectors, corpus, labels, k)
        best_distances = _distances_to(best, vectors, corpus, labels, k)
        table["best_cluster"] = best
        table["best_probability"] = probabilities[on, best]
        table["best_neighbour_similarity"] = best_distances["neighbour_similarity"].to_numpy()
        table["best_outside_percentile"] = best_distances["outside_percentile"].to_numpy()
        return table


def theme_membership(out: str | Path, rows: pd.DataFrame, cluster: int | str | None = None, threshold: float = DEFAULT_BLEND_THRESHOLD,
                     min_outside_percentile: float = DEFAULT_MIN_OUTSIDE_PERCENTILE, cache_dir=None,
                     progress: bool = False, embedder: str | None = None) -> pd.DataFrame:
    """``rows`` (with a ``needle`` column, and optionally ``target_cluster``: each needle's own
    target theme, empty for the default) plus ``predicted_cluster`` (the theme of the highest
    probability, :func:`predicted_themes`; -1 when no clustering predicts the needle into a theme:
    each calls it noise or puts it in a cluster of its own that matches no theme) and its ``probability`` (per
    theme, :func:`theme_probabilities`: HDBSCAN's approximate-prediction strength of the needle
    placed by :func:`placement`, averaged over the consensus's clusterings, 0 in those that put
    it elsewhere), ``target_cluster`` (the row's own, else ``cluster``, default 0: the largest),
    ``target_probability`` (the probability in the target) and ``target_stability`` (the share of
    the clusterings that predict it into the target), the distance test in the embedding space
    (:func:`theme_distances`, k = the run's UMAP n_neighbors): ``neighbour_similarity``,
    ``outside_percentile``, ``inside_percentile``, and ``blends_in``:

        target_probability > threshold  and  outside_percentile >= min_outside_percentile

    Beside the target's, the needle's best theme (:func:`nearest_theme`: the cluster it is most
    alike in the embedding space) with the same measures: ``best_cluster``, ``best_probability``
    (the probability when predicted into it, else 0), ``best_neighbour_similarity``,
    ``best_outside_percentile``. A needle whose best theme is not its target was written for
    another theme than the one it reads like.

    The probability alone cannot tell a needle about none of the corpus's topics: placement keeps
    no distance, and the middle of a neighbourhood scores near 1 wherever it is. ``embedder``, if
    given, must be the run's (its themes live in that model's space); the run's embedder is used.

    ``cluster`` and each row's ``target_cluster`` name a theme by its number or by a term of its top
    terms (:func:`resolve_theme`: ``6`` or ``"writing"``); the table holds the numbers."""
    return MembershipCheck.read(out, rows, cluster, threshold, min_outside_percentile, embedder).table(cache_dir, progress)


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
    best = np.array([np.lexsort((themes, -share, -probability))[0] for probability, share in zip(probabilities, shares)],
                    dtype=np.int64)
    return np.where(shares.max(axis=1) > 0, best, NOISE)


def _row_targets(rows: pd.DataFrame, default: int, top_terms: dict[int, tuple[str, ...]], out) -> np.ndarray:
    """Each row's target cluster: its ``target_cluster`` where given (a number or a term,
    :func:`resolve_theme`), else ``default``. Numbers that are no cluster of the run are one error
    naming the rows; so is a term that names no theme or several (the rows that gave it)."""
    if "target_cluster" not in rows.columns:
        return np.full(len(rows), default, dtype=int)
    given = [None if value is None or (isinstance(value, float) and value != value) or str(value).strip() == "" else value
             for value in rows["target_cluster"]]
    numbers = {i: int(float(value)) for i, value in enumerate(given)
               if value is not None and (isinstance(value, (int, np.integer)) or _THEME_NUMBER.fullmatch(str(value).strip()))}
    wrong = [i for i, number in numbers.items() if number not in top_terms]
    if wrong:
        where = ", ".join(f"needle {i + 1} ({numbers[i]})" for i in wrong[:3]) + (f" and {len(wrong) - 3} more" if len(wrong) > 3 else "")
        raise InputError(f"target cluster of {where} is not a cluster of {out} (0..{len(top_terms) - 1}; see its clusters.csv)")
    by_term: dict[str, list[int]] = {}
    for i, value in enumerate(given):
        if value is not None and i not in numbers:
            by_term.setdefault(str(value).strip().lower(), []).append(i)
    resolved = {}
    for term, where in by_term.items():
        named = ", ".join(f"needle {i + 1}" for i in where[:3]) + (f" and {len(where) - 3} more" if len(where) > 3 else "")
        number = resolve_theme(term, top_terms, out, what=f"target of {named}")
        resolved.update({i: number for i in where})
    return np.array([numbers.get(i, resolved.get(i, default)) for i in range(len(given))], dtype=int)


def _distances_to(targets: np.ndarray, vectors: np.ndarray, corpus: np.ndarray, labels: np.ndarray, k: int) -> pd.DataFrame:
    """:func:`theme_distances` of each vector to its own cluster in ``targets`` (each distinct
    cluster's corpus statistics computed once)."""
    table = pd.DataFrame(index=range(len(vectors)), columns=["neighbour_similarity", "outside_percentile", "inside_percentile"],
                         dtype=float)
    for target in np.unique(targets):
        picked = np.flatnonzero(targets == target)
        table.iloc[picked] = theme_distances(vectors[picked], corpus, labels, int(target), k).to_numpy()
    return table

"""A corpus's themes and needles that blend into them (Chroma's Context Rot recipe).

:func:`~embedeval.experiments.themes.run.run_themes`: the corpus cut into 1-3-sentence chunks
(:mod:`~embedeval.experiments.themes.chunks`), each embedded (through the cache), reduced with
UMAP (``umap-learn``: 30 neighbours, min_dist 0.05, 50 dimensions, cosine metric, random_state 42)
and clustered with HDBSCAN (``hdbscan``: min_cluster_size 10, min_samples 15,
``prediction_data=True``; :mod:`~embedeval.experiments.themes.fitting`). Per cluster: its size and
share, its representative chunks by maximal marginal relevance (:func:`~embedeval.metrics.neighbours.mmr` over
the chunk vectors, relevance = cosine to the cluster's normalised mean vector) and its top terms
(class-based TF-IDF: a cluster's chunks as one document; :mod:`~embedeval.experiments.themes.describing`).
Writes into ``out`` (:mod:`~embedeval.experiments.themes.files`): ``chunks.parquet`` (chunk_id,
book, text, cluster (-1 = noise), probability, x, y of a second, 2-D UMAP for the map),
``clusters.csv``, ``report.md``, ``figures/map.png``, and the fitted models (``umap.joblib``,
``hdbscan.joblib``) with ``themes.json``: the settings (:mod:`~embedeval.experiments.themes.config`),
the embedder's spec and fingerprint, the package versions.

The corpus is cut by :func:`~embedeval.chunking.corpus_chunks` with ``chunk_seed`` (default the
similarity commands' seed, 0): the same chunks as ``embedeval similarity needle-haystack`` and
``absence`` cut from that corpus, read from the chunk cache, their vectors from the embedding cache.

:func:`~embedeval.experiments.themes.membership.theme_membership` ``(out, texts)``: texts (needles)
embedded with the run's embedder, placed in the fitted UMAP's space
(:func:`~embedeval.experiments.themes.placement.place`: the weighted mean of their nearest chunks'
positions; a corpus chunk's own vector on its own position) and assigned by HDBSCAN's
``approximate_predict``: predicted cluster and its probability; then, in the embedding space
(:func:`~embedeval.experiments.themes.membership.theme_distances`), each text's mean cosine to its
nearest chunks of the target theme and that value's percentile among the corpus chunks outside the
theme (and inside it). A text blends into the target theme when it is predicted into it with
probability > 0.9 and is closer to it than 95% of the corpus outside it. Each text may name its own
target theme (a ``target_cluster`` column; a pair file's ``cluster`` or ``theme``), and each gets
its best theme beside the target's: the cluster it is nearest in the embedding space
(:func:`~embedeval.experiments.themes.membership.nearest_theme`), with the same measures. A run
directory whose embedder, settings or packages differ from what is installed now is refused with
one line (:mod:`~embedeval.experiments.themes.loading`): the pickled models would not mean the same.

Determinism: UMAP with a ``random_state`` runs single-threaded (umap-learn turns parallelism off
when a seed is given; a parallel run is faster and differs run to run), HDBSCAN is deterministic,
so on one machine the same corpus, embedder, seed and cached vectors give the same clusters and
tables. Vectors that differ in their last bits (another CPU, another batch shape) can give other
clusters, and other numbers for the same subjects (``benchmarks/bench_theme_stability.py``
measures it): :func:`~embedeval.experiments.themes.names.resolve_theme` names a theme by a term of
its top terms instead.

The package's modules each do one part; import a name from its module.
"""

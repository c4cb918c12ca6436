"""A themes run (:func:`run_themes`, the recipe of :mod:`embedeval.experiments.themes`) and its plan
(:func:`plan_themes`): the corpus cut, embedded, clustered and summarised, its folder written
(tables, fitted models, map, ``report.md``, and ``themes.json`` last)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from embedeval.chunking import Chunk
from embedeval.embedders.registry import load_embedder
from embedeval.errors import InputError
from embedeval.experiments.themes.chunks import cut_corpus
from embedeval.experiments.themes.config import ThemesConfig, UmapSettings
from embedeval.experiments.themes.describing import representatives, top_terms
from embedeval.experiments.themes.files import (
    CHUNKS_FILE,
    CLUSTERS_FILE,
    HDBSCAN_FILE,
    MANIFEST,
    MAP_FIGURE,
    MODEL_PACKAGES,
    RUNS_FILE,
    THEMES_FILES,
    UMAP_FILE,
    is_themes_directory,
)
from embedeval.experiments.themes.fitting import FLOAT_NOISE, cluster_runs, consensus_themes, fit_umap
from embedeval.io import atomic_path, json_text, write_table, write_text_atomic
from embedeval.plan import EmbedderPlan, plan_documents
from embedeval.progress import step
from embedeval.report.themes import map_figure, themes_report
from embedeval.report.write import FIGURES, REPORT_MD
from embedeval.run_folder import check_run_folder, check_subfolder, run_directory
from embedeval.versions import package_versions


@dataclass
class ThemesResult:
    """What a themes run produced: the chunk and cluster tables, and the seconds each step took."""

    config: ThemesConfig
    chunks: pd.DataFrame
    clusters: pd.DataFrame
    out: Path
    timings: dict[str, float]


def plan_themes(config: ThemesConfig, cache_dir=None, prices: dict[str, float] | None = None, calibrate: bool = True,
                progress: bool = False, chunks: list[Chunk] | None = None) -> list[EmbedderPlan]:
    """What :func:`run_themes` would embed, send, cost and take (:mod:`embedeval.plan`): the corpus
    cut into chunks (or ``chunks``, cut by :func:`~embedeval.experiments.themes.chunks.cut_corpus` already), their embedding recorded;
    nothing sent or written."""
    config.validate()
    texts = [c.text for c in (chunks if chunks is not None else cut_corpus(config, progress))]
    return plan_documents(config.embedder, texts, cache_dir, prices, calibrate, config.seed, progress)


def check_themes_out(config: ThemesConfig) -> None:
    """Refuse, before the corpus is read and embedded, an ``out`` that a themes run may not write
    into (:func:`~embedeval.run_folder.check_run_folder`, and its ``figures/``), or where one of
    its files (:data:`~embedeval.experiments.themes.files.THEMES_FILES`) is taken by a link or a folder."""
    check_run_folder(Path(config.out), is_themes_directory, MANIFEST, THEMES_FILES)
    check_subfolder(Path(config.out) / FIGURES)


def run_themes(config: ThemesConfig | None = None, progress: bool = True, cache_dir=None, chunks: list[Chunk] | None = None) -> ThemesResult:
    """Run the recipe of :mod:`embedeval.experiments.themes` and write ``config.out`` (``chunks``: the corpus cut
    by :func:`~embedeval.experiments.themes.chunks.cut_corpus` already, as for its plan)."""
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

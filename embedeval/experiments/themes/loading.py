"""A finished themes run read back: its files checked to belong together (:func:`check_themes_files`,
without unpickling a model), its fitted models loaded (:func:`load_themes`), and the key of what
defines its themes (:func:`themes_key`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from embedeval.errors import InputError
from embedeval.experiments.themes.files import CHUNKS_FILE, CLUSTERS_FILE, HDBSCAN_FILE, MANIFEST, RUNS_FILE, UMAP_FILE, read_manifest
from embedeval.experiments.themes.names import theme_range, theme_top_terms
from embedeval.io import read_table, text_sha256
from embedeval.labels import NOISE
from embedeval.versions import package_version


def themes_key(out: str | Path) -> str:
    """sha256 of what defines a finished themes run's themes: its settings (``themes.json`` less
    the timings of the run), every chunk's cluster, and each cluster's size, representative chunks
    (ids and texts, in MMR order) and top terms. Running ``themes`` again with the same settings on
    the same machine and cache gives the same key (its ``themes.json`` differs in the timings)."""
    folder = Path(out)
    manifest = read_manifest(folder)
    chunks = read_table(folder / CHUNKS_FILE, ["chunk_id", "text", "cluster"])
    clusters = read_table(folder / CLUSTERS_FILE, ["cluster", "size", "representatives", "top_terms"])
    text_of = dict(zip(chunks["chunk_id"].astype(str), chunks["text"].astype(str), strict=True))
    shown = [[str(r.cluster), str(r.size), str(r.representatives), str(r.top_terms),
              [text_of.get(i, "") for i in str(r.representatives).split(";")]] for r in clusters.itertuples(index=False)]
    defining = {"settings": {k: v for k, v in manifest.items() if k != "timings"} if isinstance(manifest, dict) else manifest,
                "assignments": [[i, int(c)] for i, c in zip(chunks["chunk_id"].astype(str), chunks["cluster"], strict=True)],
                "clusters": shown}
    return text_sha256(json.dumps(defining, sort_keys=True, ensure_ascii=False, default=str))


def load_themes(out: str | Path) -> tuple[dict, object, list, dict[str, np.ndarray]]:
    """(manifest, UMAP, HDBSCANs, clusterings) of a themes run directory: the first clustering's
    fitted UMAP, each clustering's fitted HDBSCAN, and :data:`~embedeval.experiments.themes.files.RUNS_FILE`'s arrays (``reduced``,
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
    """(manifest, :data:`~embedeval.experiments.themes.files.RUNS_FILE`'s arrays) of a finished themes run whose files belong together,
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
        raise InputError(f"{folder}'s clusters.csv lists the themes {theme_range(listed)}, its {RUNS_FILE} matches "
                         f"{themes} (0..{themes - 1}) (files of different runs, or edited): run embedeval themes again")
    return manifest, arrays


def _clusterings(path: Path) -> dict[str, np.ndarray]:
    """:data:`~embedeval.experiments.themes.files.RUNS_FILE`'s arrays; a missing or damaged file is one :class:`~embedeval.errors.InputError`."""
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

"""The files of a themes run's folder (:mod:`embedeval.experiments.themes`): their names, the
packages whose versions its pickled models depend on, and its manifest ``themes.json`` (written
last: a folder without it is an unfinished run) read back."""

from __future__ import annotations

from pathlib import Path

from embedeval.errors import InputError
from embedeval.io import read_json
from embedeval.report.write import FIGURES, REPORT_MD

#: Packages whose versions must match for pickled models to be read back.
MODEL_PACKAGES = ("umap-learn", "hdbscan", "pynndescent", "numba", "numpy", "scikit-learn")
MANIFEST = "themes.json"
#: Each clustering's points in UMAP's space, labels, and match of each theme (embedeval.consensus.matches).
RUNS_FILE = "clusterings.npz"
UMAP_FILE, HDBSCAN_FILE = "umap.joblib", "hdbscan.joblib"  # the fitted UMAP of the first clustering; every clustering's HDBSCAN
CHUNKS_FILE, CLUSTERS_FILE, MAP_FIGURE = "chunks.parquet", "clusters.csv", f"{FIGURES}/map.png"
#: Every file a themes run writes into its folder, :data:`MANIFEST` last.
THEMES_FILES = (UMAP_FILE, HDBSCAN_FILE, RUNS_FILE, CHUNKS_FILE, CLUSTERS_FILE, MAP_FIGURE, REPORT_MD, MANIFEST)


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

"""The settings of a themes run (written to its ``themes.json``): UMAP's, HDBSCAN's, and the
run's own (:class:`ThemesConfig`), checked with one line each."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from embedeval import options
from embedeval.chunking import parse_chunker
from embedeval.corpus import check_min_books
from embedeval.errors import ConfigError
from embedeval.options import check_options


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

"""The corpus themes' report: the 2-D map of the chunks (:func:`map_figure`) and ``report.md``
(:func:`themes_report`), from the tables :func:`~embedeval.experiments.themes.run_themes` makes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from embedeval.io import atomic_path
from embedeval.labels import NOISE


def map_figure(table: pd.DataFrame, path: Path, labelled: int = 8) -> None:
    """The 2-D map of the chunks coloured by cluster (noise grey), the ``labelled`` largest named."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 6.5))
    noise = table[table["cluster"] == NOISE]
    ax.scatter(noise["x"], noise["y"], s=3, color="lightgrey", label="noise")
    for c, group in table[table["cluster"] != NOISE].groupby("cluster"):
        ax.scatter(group["x"], group["y"], s=4, color=plt.cm.tab20(c % 20))
        if c < labelled:
            ax.annotate(str(c), (group["x"].median(), group["y"].median()), fontsize=11, weight="bold",
                        ha="center", va="center", bbox={"boxstyle": "round", "fc": "white", "alpha": 0.8})
    ax.set_title("corpus themes: chunks by UMAP, coloured by HDBSCAN cluster (0 = largest)")
    ax.set_xticks([])
    ax.set_yticks([])
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def themes_report(config, table: pd.DataFrame, clusters: pd.DataFrame, shown: int = 5) -> str:
    """report.md of a themes run (``config``: its :class:`~embedeval.experiments.themes.ThemesConfig`):
    settings, noise share, and the largest clusters with their representatives."""
    noise = float((table["cluster"] == NOISE).mean())
    text_of = dict(zip(table["chunk_id"], table["text"]))
    lines = ["# Corpus themes", "",
             f"Corpus `{config.corpus}` cut `{config.chunker}` into {len(table)} chunks, embedded by `{config.embedder}`; "
             f"UMAP (n_neighbors {config.umap.neighbors}, min_dist {config.umap.min_dist}, n_components "
             f"{config.umap.components}, cosine, random_state {config.seed}); HDBSCAN (min_cluster_size "
             f"{config.hdbscan.min_cluster_size}, min_samples {config.hdbscan.min_samples}). {len(clusters)} clusters; "
             f"noise (cluster -1): {noise:.1%} of the chunks.", "",
             "![map](figures/map.png)", ""]
    for row in clusters.head(shown).itertuples():
        lines += [f"## Cluster {row.cluster}: {row.size} chunks ({row.share:.1%})", "",
                  f"Top terms: {row.top_terms.replace(';', ', ') or '–'}", "",
                  f"Representatives (MMR, lambda {config.mmr_lambda}, in pick order):", ""]
        lines += [f"{i}. {text_of[chunk_id]}" for i, chunk_id in enumerate(row.representatives.split(";"), start=1)]
        lines.append("")
    return "\n".join(lines)

"""The corpus themes' report: the 2-D map of the chunks (:func:`map_figure`, coloured by
:func:`cluster_colours`) and ``report.md`` (:func:`themes_report`), from the tables
:func:`~embedeval.experiments.themes.run.run_themes` makes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from embedeval.defaults import DEFAULT_MAP_PALETTE
from embedeval.labels import NOISE
from embedeval.report.figures import save_figure

#: The clusters the map does not colour, and noise (lighter).
OTHER_COLOUR = (0.6, 0.6, 0.6, 1.0)
NOISE_COLOUR = (0.85, 0.85, 0.85, 1.0)
#: Top terms of a coloured cluster named in the map's legend.
LEGEND_TERMS = 3


def palette_colours(palette: str = DEFAULT_MAP_PALETTE) -> list[tuple]:
    """The distinct colours of a listed matplotlib colormap (``tab20``) in its order, greys left out
    (they would read as "not coloured")."""
    import matplotlib

    colours = [tuple(float(v) for v in matplotlib.colors.to_rgba(c)) for c in matplotlib.colormaps[palette].colors]
    return [c for c in dict.fromkeys(colours) if not c[0] == c[1] == c[2]]


def cluster_colours(sizes: Mapping[int, int], palette: str = DEFAULT_MAP_PALETTE) -> dict[int, tuple]:
    """{cluster: RGBA colour}: the largest clusters of ``sizes`` ({cluster: chunks}; by size, ties to
    the smaller cluster number), as many as the palette has colours (:func:`palette_colours`), one
    colour each in the palette's order; every other cluster :data:`OTHER_COLOUR`, noise
    (:data:`~embedeval.labels.NOISE`) :data:`NOISE_COLOUR`."""
    colours = palette_colours(palette)
    order = sorted((c for c in sizes if c != NOISE), key=lambda c: (-sizes[c], c))
    assigned = {c: colours[i] if i < len(colours) else OTHER_COLOUR for i, c in enumerate(order)}
    return {**assigned, **({NOISE: NOISE_COLOUR} if NOISE in sizes else {})}


def legend_label(cluster: int, size: int, terms: Sequence[str] = (), stability: float | None = None) -> str:
    """A coloured cluster's legend entry: its number, its size, its stability (the share of the
    clusterings it comes back in, when there were several) and its first :data:`LEGEND_TERMS` top
    terms (``"6: 89 chunks, in 100% of runs - essay, essays, write"``)."""
    named = ", ".join(terms[:LEGEND_TERMS])
    stable = f", in {stability:.0%} of runs" if stability is not None else ""
    return f"{cluster}: {size:,} chunks{stable}" + (f" - {named}" if named else "")


def draw_map(ax, table: pd.DataFrame, palette: str = DEFAULT_MAP_PALETTE, terms: Mapping[int, Sequence[str]] | None = None,
             stability: Mapping[int, float] | None = None) -> None:
    """The chunks (``x``, ``y``, ``cluster``) on ``ax``: noise and the uncoloured clusters first, in
    their greys, then each coloured cluster (:func:`cluster_colours`), numbered beside its median
    and named in the legend with its size, stability and top terms (``terms``: {cluster: its top
    terms}, ``stability``: {cluster: the share of clusterings it comes back in}, :func:`legend_label`)."""
    sizes = table["cluster"].value_counts().to_dict()
    colours = cluster_colours(sizes, palette)
    coloured = sorted((c for c, colour in colours.items() if colour not in (OTHER_COLOUR, NOISE_COLOUR)),
                      key=lambda c: (-sizes[c], c))
    noise = table[table["cluster"] == NOISE]
    if len(noise):
        ax.scatter(noise["x"], noise["y"], s=3, color=NOISE_COLOUR, label=f"noise ({len(noise):,} chunks)")
    others = table[table["cluster"].isin([c for c, colour in colours.items() if colour == OTHER_COLOUR])]
    if len(others):
        ax.scatter(others["x"], others["y"], s=3, color=OTHER_COLOUR,
                   label=f"{others['cluster'].nunique()} smaller clusters ({len(others):,} chunks)")
    for c in coloured:
        group = table[table["cluster"] == c]
        ax.scatter(group["x"], group["y"], s=8, color=colours[c], label=legend_label(c, sizes[c], (terms or {}).get(c, ()), (stability or {}).get(c)))
        ax.annotate(str(c), (group["x"].median(), group["y"].median()), xytext=(6, 6), textcoords="offset points", fontsize=8,
                    weight="bold", ha="left", va="bottom", bbox={"boxstyle": "round", "fc": "white", "ec": colours[c], "alpha": 0.8})
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, markerscale=3, frameon=False)
    ax.set_title("corpus themes: chunks by UMAP, the largest themes coloured (0 = largest)")
    ax.set_xticks([])
    ax.set_yticks([])


def map_figure(table: pd.DataFrame, path: Path, palette: str = DEFAULT_MAP_PALETTE,
               terms: Mapping[int, Sequence[str]] | None = None, stability: Mapping[int, float] | None = None) -> None:
    """``path``: the PNG of :func:`draw_map`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.5, 6.5))
    draw_map(ax, table, palette, terms, stability)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path)


def consensus_words(runs: int, neighbourhood: int) -> str:
    """How the themes were found, in a sentence: the study's single clustering, or the consensus of
    ``runs`` with each chunk decided by its ``neighbourhood`` (embedeval.consensus)."""
    if runs == 1:
        return "One clustering (the study's recipe, `--runs 1`)."
    voted = f", each chunk decided by the votes of its {neighbourhood} nearest chunks" if neighbourhood > 1 else ""
    return (f"The themes are the consensus of {runs} clusterings (UMAP seeds, the first the one above, and the vectors "
            f"perturbed at float-noise level): the groups of chunks together in most of them{voted}, kept when they come "
            "back in at least half.")


def themes_report(config, table: pd.DataFrame, clusters: pd.DataFrame, shown: int = 5) -> str:
    """report.md of a themes run (``config``: its :class:`~embedeval.experiments.themes.config.ThemesConfig`):
    settings, noise share, and the largest clusters with their stability and representatives."""
    noise = float((table["cluster"] == NOISE).mean())
    text_of = dict(zip(table["chunk_id"], table["text"], strict=True))
    lines = ["# Corpus themes", "",
             f"Corpus `{config.corpus}` cut `{config.chunker}` (chunk seed {config.chunk_seed}) into {len(table)} chunks, "
             f"embedded by `{config.embedder}`; "
             f"UMAP (n_neighbors {config.umap.neighbors}, min_dist {config.umap.min_dist}, n_components "
             f"{config.umap.components}, cosine, random_state {config.seed}); HDBSCAN (min_cluster_size "
             f"{config.hdbscan.min_cluster_size}, min_samples {config.hdbscan.min_samples}). " + consensus_words(config.runs, config.neighbourhood)
             + f" {len(clusters)} clusters; noise (cluster -1): {noise:.1%} of the chunks.", "",
             "![map](figures/map.png)", ""]
    for row in clusters.head(shown).itertuples():
        lines += [f"## Cluster {row.cluster}: {row.size} chunks ({row.share:.1%}), in {row.stability:.0%} of the clusterings", "",
                  f"Top terms: {row.top_terms.replace(';', ', ') or '–'}", "",
                  f"Representatives (MMR, lambda {config.mmr_lambda}, in pick order):", ""]
        lines += [f"{i}. {text_of[chunk_id]}" for i, chunk_id in enumerate(row.representatives.split(";"), start=1)]
        lines.append("")
    return "\n".join(lines)

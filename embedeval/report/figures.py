"""The report's figures (matplotlib, drawn headless): metric vs length, recall@k vs length, heatmaps,
query expansion. Each writes one PNG atomically, its tick labels clear of one another
(:func:`fit_tick_labels`; :func:`colliding_texts` finds any two texts that are not)."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd

from embedeval.aggregate import metric_series
from embedeval.io import atomic_path
from embedeval.labels import ALL, QUESTION
from embedeval.report.break_words import interval_text
from embedeval.schema import QUERY_FORM

LINE_FIGURES = (
    ("normalized_mean", "normalized_vs_length.png", "normalized similarity  sim(q,h) / sim(q,needle)", None),
    ("comparative_ratio", "comparative_ratio_vs_length.png", "comparative ratio (0.5 = chance)", 0.5),
    ("auc", "auc_vs_length.png", "ROC AUC (needle vs control haystacks, pooled over questions)", None),
    ("query_auc", "query_auc_vs_length.png", "per-query AUC among same-length candidates", None),
    ("mrr", "mrr_vs_length.png", "MRR among same-length candidates", None),
    ("ndcg@10", "ndcg_vs_length.png", "nDCG@10 among same-length candidates", None),
)


RECALL_KS = (1, 5, 10)


def _series_label(embedder: str, form: str, forms: list[str]) -> str:
    return embedder if len(forms) == 1 else f"{embedder} [{form}]"


#: The resolution figures are made, laid out, measured and saved at: text measured at another
#: resolution is not as wide (hinted glyphs), and a crop measured there cuts what reaches the edge.
SAVE_DPI = 110


def save_figure(fig, path: Path, laid_out: bool = False) -> None:
    """``fig`` written to ``path`` as a PNG (atomically), cropped to what it draws as
    ``bbox_inches="tight"`` crops it, and closed, in one draw after the figure was laid out once
    (``laid_out``: it was, by the draw :func:`fit_tick_labels` made, and nothing moved since; else
    here): the layout is kept as it stands and the crop measured on it, where ``"tight"`` would
    lay it out and draw it twice more."""
    import matplotlib.pyplot as plt
    from matplotlib import rcParams

    if fig.dpi != SAVE_DPI:  # laid out at another resolution: again at the one it is saved at
        fig.set_dpi(SAVE_DPI)
        laid_out = False
    if not laid_out:
        fig.draw_without_rendering()
    fig.set_layout_engine("none")  # the positions the last layout gave
    crop = fig.get_tightbbox(fig.canvas.get_renderer()).padded(rcParams["savefig.pad_inches"])
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=SAVE_DPI, bbox_inches=crop)
    plt.close(fig)


#: A legend below the panels: the width of one character and of a line sample with its gap, in
#: inches per point of font size (so a column fits its longest label), and one row's height.
LEGEND_CHAR_WIDTH, LEGEND_HANDLE_WIDTH, LEGEND_ROW_HEIGHT = 0.6 / 72, 3.5 / 72, 1.5 / 72


def legend_below(fig, axes, fontsize: float) -> None:
    """One legend for the whole figure, below its panels (never over a line, however many series),
    in as many columns as the figure's width holds (the figure widened to one column when a label
    is wider); the figure grows by the legend's height so the panels keep their size. Each label
    once (panels repeat them). ``fig`` must use the constrained layout, which makes room for it."""
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    if not entries:
        return
    width, height = fig.get_size_inches()
    column = fontsize * (LEGEND_HANDLE_WIDTH + LEGEND_CHAR_WIDTH * max(len(label) for label in entries))
    columns = max(1, min(len(entries), int(width // column)))
    rows = -(-len(entries) // columns)
    fig.set_size_inches(max(width, column), height + fontsize * LEGEND_ROW_HEIGHT * (rows + 1))
    fig.legend(list(entries.values()), list(entries), loc="outside lower center", ncol=columns, fontsize=fontsize)


#: The least room between two texts of a figure (tick labels, values), in points: half a space of their font.
LABEL_GAP_POINTS = 1.5


def too_close(a, b, gap: float) -> bool:
    """Whether two boxes (matplotlib bounding boxes, in pixels) overlap or stand less than ``gap`` pixels apart."""
    return a.x0 < b.x1 + gap and b.x0 < a.x1 + gap and a.y0 < b.y1 + gap and b.y0 < a.y1 + gap


def text_boxes(texts, renderer) -> list[tuple[str, object]]:
    """The visible ``texts`` (matplotlib ``Text`` artists) that say something, each with its window
    extent as ``renderer`` draws it, in their order."""
    return [(text.get_text(), text.get_window_extent(renderer)) for text in texts if text.get_visible() and text.get_text()]


def crowded(boxes: list[tuple[str, object]], gap: float) -> list[tuple[str, str]]:
    """The pairs of ``boxes`` (text and box, as :func:`text_boxes`) that stand less than ``gap`` pixels apart."""
    return [(a, b) for (a, box_a), (b, box_b) in combinations(boxes, 2) if too_close(box_a, box_b, gap)]


def crowded_labels(axis, renderer) -> list[tuple[str, str]]:
    """The pairs of ``axis``'s major tick labels that overlap or stand closer than :data:`LABEL_GAP_POINTS`."""
    return crowded(text_boxes(axis.get_majorticklabels(), renderer), renderer.points_to_pixels(LABEL_GAP_POINTS))


def colliding_texts(fig) -> list[tuple[str, str]]:
    """Every pair of texts of ``fig`` that collide (:func:`crowded`), the figure laid out first: two
    tick labels of one axis, or two texts written in one panel (a heatmap's values); none in a
    figure of the report."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    gap = renderer.points_to_pixels(LABEL_GAP_POINTS)
    return [pair for ax in fig.axes
            for texts in (ax.xaxis.get_majorticklabels(), ax.yaxis.get_majorticklabels(), ax.texts)
            for pair in crowded(text_boxes(texts, renderer), gap)]


def roundness(label: str) -> int:
    """How round a tick label's number is: the exponent of the largest power of two dividing it
    (1024: 10, 192: 6, 96: 5); 0 for a label that is not a positive whole number."""
    return (int(label) & -int(label)).bit_length() - 1 if label.isdigit() and int(label) > 0 else 0


def labels_to_keep(boxes: list[tuple[str, object]], gap: float) -> list[int]:
    """The indices (in order) of the labels ``boxes`` (text and box, as :func:`text_boxes`) that
    thinning keeps: the roundest first (:func:`roundness`, ties from the left), each kept when it
    stands ``gap`` pixels clear of every label kept before it."""
    kept: list[int] = []
    for i in sorted(range(len(boxes)), key=lambda i: (-roundness(boxes[i][0]), i)):
        if not any(too_close(boxes[i][1], boxes[j][1], gap) for j in kept):
            kept.append(i)
    return sorted(kept)


def thin_labels(axis, renderer) -> None:
    """``axis``'s labels thinned to those :func:`labels_to_keep` keeps; the other ticks stay, as
    minor ticks without a label (with their grid lines where the axis has a grid)."""
    locations = list(axis.get_majorticklocs())
    boxes = [(label.get_text(), label.get_window_extent(renderer)) for label in axis.get_majorticklabels()]  # one a location
    kept = labels_to_keep(boxes, renderer.points_to_pixels(LABEL_GAP_POINTS))
    dropped = [loc for i, loc in enumerate(locations) if i not in kept]
    axis.set_ticks([locations[i] for i in kept], [boxes[i][0] for i in kept])
    axis.set_ticks(dropped, [""] * len(dropped), minor=True)


def fit_tick_labels(fig, rotate: bool = False) -> None:
    """Each x axis of ``fig`` whose tick labels collide (:func:`crowded_labels`, the figure laid out)
    made clear: with ``rotate`` its labels turned upright first (a heatmap's columns each keep their
    label); where they still collide, thinned (:func:`thin_labels`)."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    tight = [ax for ax in fig.axes if crowded_labels(ax.xaxis, renderer)]
    if rotate and tight:
        for ax in tight:
            ax.tick_params(axis="x", labelrotation=90)
        fig.draw_without_rendering()
    for ax in tight:
        if crowded_labels(ax.xaxis, renderer):
            thin_labels(ax.xaxis, renderer)


def _length_axis(ax, lengths) -> None:
    """A log2 x axis ticked at the measured haystack lengths, with a grid (at every length, also
    those whose label :func:`fit_tick_labels` drops)."""
    ticks = sorted(set(lengths))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(length) for length in ticks])
    ax.minorticks_off()
    ax.set_xlabel("haystack length (tokens)")
    ax.grid(alpha=0.3, which="both")


def line_figure(metrics: pd.DataFrame, metric: str, ylabel: str, path: Path, hline: float | None = None) -> None:
    """One panel per variant: ``metric`` vs length, a line (with CI band) per embedder/query form,
    the legend below the panels (:func:`legend_below`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = metric_series(metrics, metric)
    variants = sorted(data["variant"].unique())
    forms = sorted(data[QUERY_FORM].unique())
    fig, axes = plt.subplots(1, len(variants), figsize=(5.2 * len(variants), 4), squeeze=False, sharey=True, layout="constrained", dpi=SAVE_DPI)
    for ax, variant in zip(axes[0], variants, strict=True):
        for (embedder, form), series in data[data["variant"] == variant].groupby(["embedder", QUERY_FORM]):
            series = series.sort_values("length")
            ax.plot(series["length"], series["value"], marker="o", label=_series_label(embedder, form, forms))
            ax.fill_between(series["length"], series["ci_lo"], series["ci_hi"], alpha=0.15)
        if hline is not None:
            ax.axhline(hline, color="grey", linestyle="--", linewidth=1, label="chance" if hline == 0.5 else None)
        ax.set_title(variant)
        _length_axis(ax, data["length"])
    axes[0][0].set_ylabel(ylabel)
    legend_below(fig, axes[0], fontsize=8)
    fit_tick_labels(fig)
    save_figure(fig, path, laid_out=True)


#: One colour per k of recall@k (matplotlib's first three), so recall@1, @5 and @10 never look alike.
RECALL_COLORS = {1: "C0", 5: "C1", 10: "C2"}
#: Line styles and markers that tell the series (embedder, strategy, distractors) apart: series i
#: takes style i mod 4 and marker i mod 7, a pair of its own for the first 28 series.
LINE_STYLES, MARKERS = ("-", "--", ":", "-."), ("o", "s", "^", "D", "v", "P", "X")


def series_style(i: int) -> tuple[str, str]:
    """The (line style, marker) of the i-th series (:data:`LINE_STYLES`, :data:`MARKERS`)."""
    return LINE_STYLES[i % len(LINE_STYLES)], MARKERS[i % len(MARKERS)]


#: The break-point notes of a recall panel: their font size, and the rows they stand in, in points apart.
BREAK_NOTE_SIZE, BREAK_NOTE_STEP = 7, 13


def note_break_points(ax, notes: set[tuple[float, str]]) -> None:
    """Each note (a break point's length and its words, once however many series share it)
    written at the top of ``ax`` beside its line, one under another from the leftmost down
    (several series' notes would otherwise stand on one another)."""
    for row, (length, words) in enumerate(sorted(notes)):
        ax.annotate(words, (length, 1.0), xytext=(3, -3 - BREAK_NOTE_STEP * row), textcoords="offset points",
                    fontsize=BREAK_NOTE_SIZE, va="top", ha="left")


def recall_figure(metrics: pd.DataFrame, path: Path, chance: pd.DataFrame | None = None,
                  breaks: pd.DataFrame | None = None) -> None:
    """One panel per variant: recall@1/5/10 vs length (question form), a colour per k
    (:data:`RECALL_COLORS`) and a line style and marker per series (embedder, strategy, distractor
    count), with each series' own chance level beside it (thin, in its colour and style) when
    ``chance`` is given: rows of ``embedder``, ``variant``, ``length``, ``k`` and ``chance``
    (:func:`~embedeval.report.tables.recall_chance_table`, labelled as the metrics are), since pools
    of different sizes (with distractors, say) have different chance levels. ``breaks``: the break
    points (:func:`~embedeval.breaks.break_points`, labelled as the metrics are), each drawn as a
    vertical line at its length (``≥`` in its label where censored) over a band of its interval. The
    legend goes below the panels, the figure sized by the number of series (:func:`legend_below`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = metrics[(metrics[QUERY_FORM] == QUESTION) & (metrics["category"] == ALL) & (metrics["depth_bucket"] == ALL)]
    variants = sorted(data["variant"].unique())
    names = sorted(data["embedder"].unique())
    styles = {name: series_style(i) for i, name in enumerate(names)}
    fig, axes = plt.subplots(1, len(variants), figsize=(5.2 * len(variants), 4), squeeze=False, sharey=True, layout="constrained", dpi=SAVE_DPI)
    for ax, variant in zip(axes[0], variants, strict=True):
        for k in RECALL_KS:
            cell = data[(data["variant"] == variant) & (data["metric"] == f"recall@{k}")]
            for (embedder,), series in cell.groupby(["embedder"]):
                series = series.sort_values("length")
                style, marker = styles[embedder]
                ax.plot(series["length"], series["value"], marker=marker, color=RECALL_COLORS[k], linestyle=style,
                        label=f"recall@{k}" + (f" {embedder}" if len(names) > 1 else ""), gid=f"recall@{k} {embedder}")
                if chance is None:
                    continue
                level = chance[(chance["embedder"] == embedder) & (chance["variant"] == variant) & (chance["k"] == k)]
                level = level.sort_values("length")
                ax.plot(level["length"], level["chance"], color=RECALL_COLORS[k], linestyle=style, linewidth=0.8, alpha=0.5,
                        gid=f"chance recall@{k} {embedder}")
        notes = set()
        for row in ([] if breaks is None else breaks[breaks["variant"] == variant].itertuples()):
            if row.embedder not in styles or pd.isna(row.break_point):
                continue
            if not (pd.isna(row.break_point_lo) or pd.isna(row.break_point_hi)):
                ax.axvspan(row.break_point_lo, row.break_point_hi, color="grey", alpha=0.12, linewidth=0)
            ax.axvline(row.break_point, color="black", linestyle=styles[row.embedder][0], linewidth=1.2, gid=f"break point {row.embedder}",
                       label="break point (band: its interval)" + (f" {row.embedder}" if len(names) > 1 else ""))
            notes.add((row.break_point, f"break point {interval_text(row)}"))
        note_break_points(ax, notes)
        ax.set_title(f"{variant} (thin: each series' chance k/n)" if chance is not None else variant)
        ax.set_ylim(0, 1.02)
        _length_axis(ax, data["length"])
    axes[0][0].set_ylabel("recall@k: share of needle haystacks in the top k")
    legend_below(fig, axes[0], fontsize=7)
    fit_tick_labels(fig)
    save_figure(fig, path, laid_out=True)


#: A heatmap panel's least width and the width of each of its columns (room for a value such as
#: 0.50, and for its length upright), in inches; panels side by side, at most.
HEATMAP_WIDTH, HEATMAP_COLUMN_WIDTH, HEATMAP_PANELS_PER_ROW = 6.0, 0.45, 2


def heatmap_grid(tables: dict[str, pd.DataFrame]) -> tuple[int, int, float, float]:
    """Rows and columns of panels for ``tables`` (at most :data:`HEATMAP_PANELS_PER_ROW` side by
    side) and one panel's width and height in inches: wide enough for its columns
    (:data:`HEATMAP_COLUMN_WIDTH` each, with room for the row labels and colour bar), tall enough
    for its rows."""
    across = min(len(tables), HEATMAP_PANELS_PER_ROW)
    width = max(HEATMAP_WIDTH, HEATMAP_COLUMN_WIDTH * max(t.shape[1] for t in tables.values()) + 2)
    return -(-len(tables) // across), across, width, 0.35 * max(len(t) for t in tables.values()) + 2


def heatmap_figure(tables: dict[str, pd.DataFrame], title: str, path: Path, cmap: str = "viridis") -> None:
    """One heatmap per embedder (:func:`heatmap_grid`); each table is rows x lengths, every length
    labelled (upright where the labels would collide side by side: :func:`fit_tick_labels`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import patheffects

    rows, across, width, height = heatmap_grid(tables)
    fig, axes = plt.subplots(rows, across, figsize=(width * across, height * rows), squeeze=False, layout="constrained", dpi=SAVE_DPI)
    for ax in axes.flat[len(tables):]:
        ax.remove()
    for ax, (name, table) in zip(axes.flat, tables.items(), strict=False):  # the grid may hold more axes (removed above)
        image = ax.imshow(table.to_numpy(float), aspect="auto", cmap=cmap)
        ax.set_xticks(range(table.shape[1]), [str(c) for c in table.columns])
        ax.set_yticks(range(table.shape[0]), [str(i) for i in table.index])
        for (r, c), value in np.ndenumerate(table.to_numpy(float)):
            if np.isfinite(value):
                ax.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=7, color="black",
                        path_effects=[patheffects.withStroke(linewidth=2, foreground="white")])
        ax.set_title(f"{title}\n{name}", fontsize=9)
        ax.set_xlabel("haystack length (tokens)")
        fig.colorbar(image, ax=ax, shrink=0.8)
    fit_tick_labels(fig, rotate=True)
    save_figure(fig, path, laid_out=True)


def expansion_figure(metrics: pd.DataFrame, variant: str, path: Path) -> None:
    """Comparative ratio and AUC vs length, a line per query form (and embedder), chance at 0.5."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), squeeze=False, dpi=SAVE_DPI)
    embedders = metrics["embedder"].unique()
    for ax, metric, title in zip(axes[0], ("comparative_ratio", "auc"), ("comparative ratio", "ROC AUC"), strict=True):
        data = metric_series(metrics, metric)
        data = data[data["variant"] == variant]
        for (embedder, form), series in data.groupby(["embedder", QUERY_FORM]):
            series = series.sort_values("length")
            label = form if len(embedders) == 1 else f"{embedder} [{form}]"
            ax.plot(series["length"], series["value"], marker="o", label=label)
        ax.axhline(0.5, color="grey", linestyle="--", linewidth=1, label="chance")
        ax.set_title(f"{title} by query form ({variant})")
        _length_axis(ax, data["length"])
    axes[0][1].legend(fontsize=8)
    fit_tick_labels(fig)
    save_figure(fig, path, laid_out=True)

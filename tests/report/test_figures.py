"""The report's figures read cleanly: no two texts of a figure collide
(:func:`~embedeval.report.figures.colliding_texts`: the tick labels of one axis, the texts in one
panel) on the metric and recall vs length figures and the heatmaps, for the default length grid and
denser ones, with one strategy or several. Before, ``192`` and ``256`` ran together on every length
axis ("192256"), the heatmaps' columns of a multi-strategy report did too ("1024204840968192"), and
so did the values in their cells and the break-point notes of series that share a break point."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.transforms import Bbox

from embedeval.defaults import DEFAULT_LENGTHS
from embedeval.labels import ALL
from embedeval.report import figures
from embedeval.report.tables import category_tables, depth_tables, scorer_view

#: Every half octave from 64 to 8192: the densest grid a sweep is run with.
DENSE_LENGTHS = (64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192)
#: Every half octave from 4096 to 131072, for a long-context model: labels too wide to stand side by side in a heatmap.
LONG_LENGTHS = (4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152, 65536, 98304, 131072)
GRIDS = {"default grid": DEFAULT_LENGTHS, "dense grid": DENSE_LENGTHS, "long grid": LONG_LENGTHS}
STRATEGIES = {"one strategy": ("truncate",), "three strategies": ("truncate", "chunks-max@128", "windows-mean")}
CATEGORIES = ("dietary", "hobbies", "language", "location", "medical", "professional")
DEPTHS = np.linspace(0, 1, 10)


def sweep_tables(lengths, strategies) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Metrics, similarities and break points of a sweep of MiniLM read with ``strategies`` over
    ``lengths`` (both variants, every category and depth; the first two strategies break at one
    length, a third at the next), as the report shows them: one series per strategy
    (:func:`~embedeval.report.tables.scorer_view`)."""
    base = {"embedder": "st:all-MiniLM-L6-v2", "query_form": "question", "depth_bucket": ALL, "ci_lo": 0.4, "ci_hi": 0.6}
    metrics = pd.DataFrame([{**base, "strategy": strategy, "variant": variant, "category": category, "metric": metric,
                             "length": length, "value": 0.5}
                            for strategy in strategies for variant in ("inverted", "onehop") for length in lengths
                            for category, metric in [*((ALL, f"recall@{k}") for k in (1, 5, 10)),
                                                     *((c, "comparative_ratio") for c in (ALL, *CATEGORIES))]])
    similarities = pd.DataFrame([{"embedder": base["embedder"], "strategy": strategy, "variant": "onehop", "query_form": "question",
                                  "target_depth": depth, "length": length, "normalized": 0.9}
                                 for strategy in strategies for depth in DEPTHS for length in lengths])
    middle = len(lengths) // 2
    breaks = pd.DataFrame([{"embedder": base["embedder"], "strategy": strategy, "variant": variant, "break_point": lengths[middle + i // 2],
                            "break_point_lo": lengths[middle - 1], "break_point_hi": lengths[middle + 2], "break_censored": False}
                           for i, strategy in enumerate(strategies) for variant in ("inverted", "onehop")])
    return scorer_view(metrics), scorer_view(similarities), scorer_view(breaks)


FIGURES = {
    "recall": lambda metrics, similarities, breaks, path: figures.recall_figure(metrics, path, breaks=breaks),
    "metric": lambda metrics, similarities, breaks, path: figures.line_figure(metrics, "comparative_ratio", "comparative ratio", path),
    "category heatmap": lambda metrics, similarities, breaks, path: figures.heatmap_figure(category_tables(metrics, "onehop"), "category", path),
    "depth heatmap": lambda metrics, similarities, breaks, path: figures.heatmap_figure(depth_tables(similarities, "onehop"), "depth", path),
}


def drawn_figure(monkeypatch, tmp_path, figure: str, lengths, strategies) -> dict:
    """What the report's ``figure`` holds as it is saved: its colliding tick labels, and per panel
    the labelled and all x ticks."""
    seen = {}

    def look(fig, path, laid_out=False):
        import matplotlib.pyplot as plt

        panels = [ax for ax in fig.axes if ax.get_xlabel()]  # not the heatmaps' colour bars
        seen.update(crowded=figures.colliding_texts(fig), panels=len(panels),
                    labelled=[[label.get_text() for label in ax.get_xticklabels() if label.get_text()] for ax in panels],
                    ticks=[sorted([*ax.get_xticks(), *ax.get_xticks(minor=True)]) for ax in panels])
        plt.close(fig)

    monkeypatch.setattr(figures, "save_figure", look)
    FIGURES[figure](*sweep_tables(lengths, strategies), tmp_path / "figure.png")
    return seen


@pytest.mark.parametrize("strategies", STRATEGIES.values(), ids=STRATEGIES.keys())
@pytest.mark.parametrize("lengths", GRIDS.values(), ids=GRIDS.keys())
@pytest.mark.parametrize("figure", FIGURES)
def test_no_two_texts_of_a_figure_collide(monkeypatch, tmp_path, figure, lengths, strategies):
    seen = drawn_figure(monkeypatch, tmp_path, figure, lengths, strategies)
    assert seen["panels"] == (2 if figure in ("recall", "metric") else len(strategies))
    assert seen["crowded"] == []  # before: [("192", "256"), ..., ("break point 512 tokens (256-1024)", ...)]
    for labelled, ticks in zip(seen["labelled"], seen["ticks"], strict=True):
        if "heatmap" in figure:  # a column each: every one keeps its label
            assert labelled == [str(length) for length in lengths]
        else:  # a tick at every length; every power of two labelled, the lengths between where there is room
            assert ticks == pytest.approx(lengths)
            assert set(labelled) >= {str(length) for length in lengths if length & (length - 1) == 0}


def test_thinning_keeps_the_roundest_labels_first():
    """Labels 30 px wide every 20 px: every other one fits, and the powers of two are kept."""
    texts = ["64", "96", "128", "192", "256", "384", "512"]
    boxes = [(text, Bbox.from_extents(20 * i, 0, 20 * i + 30, 10)) for i, text in enumerate(texts)]
    assert [texts[i] for i in figures.labels_to_keep(boxes, gap=2)] == ["64", "128", "256", "512"]
    assert [texts[1 + i] for i in figures.labels_to_keep(boxes[1:4], gap=2)] == ["128"]  # not the leftmost: the roundest
    assert figures.labels_to_keep(boxes[::2], gap=2) == [0, 1, 2, 3]  # clear of one another: every one kept
    assert [figures.roundness(t) for t in ("1024", "192", "96", "7", "chance", "0")] == [10, 6, 5, 0, 0, 0]


@pytest.mark.filterwarnings("ignore:constrained_layout not applied")  # text wider than the figure: the layout gives up, as meant
def test_a_saved_figure_keeps_the_padding_round_text_that_reaches_past_its_panels(tmp_path):
    """save_figure crops to what the figure draws, measured at the resolution it saves at: text
    past the panels (a long note at the right, a row below) keeps bbox_inches="tight"'s padding,
    neither cut nor flush with the edge (the crop measured at 100 dpi cut such a note at 110)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image
    import matplotlib.pyplot as plt

    from embedeval.report.figures import SAVE_DPI, save_figure

    def make():
        fig, ax = plt.subplots(figsize=(4, 3), layout="constrained")
        ax.plot([1, 2], [1, 2])
        ax.text(1.0, 0.5, "break point 32768 tokens (16384-49152) " * 3, transform=ax.transAxes, fontsize=7, clip_on=False)
        ax.text(0.5, -0.5, "W" * 120, transform=ax.transAxes, fontsize=7, ha="center", clip_on=False)
        return fig

    margins = {}
    for label, save in (("tight", lambda fig, path: (fig.savefig(path, dpi=SAVE_DPI, bbox_inches="tight"), plt.close(fig))),
                        ("save_figure", save_figure)):
        path = tmp_path / f"{label}.png"
        save(make(), path)
        ink = matplotlib.image.imread(path)[..., :3].mean(axis=2) < 250 / 255
        columns, rows = np.flatnonzero(ink.any(axis=0)), np.flatnonzero(ink.any(axis=1))
        margins[label] = (columns.min(), ink.shape[1] - 1 - columns.max(), rows.min(), ink.shape[0] - 1 - rows.max())
    pad = SAVE_DPI * matplotlib.rcParams["savefig.pad_inches"]
    assert all(margin >= pad - 3 for margin in margins["save_figure"]), margins
    np.testing.assert_allclose(margins["save_figure"], margins["tight"], atol=3)

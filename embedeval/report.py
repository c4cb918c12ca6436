"""Run reports: markdown tables, figures (matplotlib), break point and chunk recommendation.

``write_report(out, metrics, similarities)`` writes ``report.md`` and ``figures/*.png``;
``compare_runs(run_dirs, out)`` does the same over several run directories, labelling each
series with its run when embedders repeat.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from embedeval.aggregate import METRIC_COLUMNS, metric_series, with_later_columns
from embedeval.errors import InputError
from embedeval.io import atomic_path, read_table, write_text_atomic
from embedeval.breaks import BreakRule, break_points, break_sentence
from embedeval.labels import ALL, CHUNKED_PREFIX, CONTROL, NEGATIVE, QUESTION, SIMILARITY_COLUMNS
from embedeval.defaults import CHUNK_FACTOR, DEFAULT_BREAK_K, DEFAULT_BREAK_METRIC, DEFAULT_BREAK_THRESHOLD

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


def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def _length_axis(ax, lengths) -> None:
    """A log2 x axis ticked at the measured haystack lengths, with a grid."""
    ticks = sorted(set(lengths))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(length) for length in ticks])
    ax.minorticks_off()
    ax.set_xlabel("haystack length (tokens)")
    ax.grid(alpha=0.3)


def line_figure(metrics: pd.DataFrame, metric: str, ylabel: str, path: Path, hline: float | None = None) -> None:
    """One panel per variant: ``metric`` vs length, a line (with CI band) per embedder/query form."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = metric_series(metrics, metric)
    variants = sorted(data["variant"].unique())
    forms = sorted(data["query_form"].unique())
    fig, axes = plt.subplots(1, len(variants), figsize=(5.2 * len(variants), 4), squeeze=False, sharey=True)
    for ax, variant in zip(axes[0], variants):
        for (embedder, form), series in data[data["variant"] == variant].groupby(["embedder", "query_form"]):
            series = series.sort_values("length")
            ax.plot(series["length"], series["value"], marker="o", label=_series_label(embedder, form, forms))
            ax.fill_between(series["length"], series["ci_lo"], series["ci_hi"], alpha=0.15)
        if hline is not None:
            ax.axhline(hline, color="grey", linestyle="--", linewidth=1, label="chance" if hline == 0.5 else None)
        ax.set_title(variant)
        _length_axis(ax, data["length"])
    axes[0][0].set_ylabel(ylabel)
    axes[0][-1].legend(fontsize=8)
    _save(fig, path)


def recall_figure(metrics: pd.DataFrame, path: Path, candidates: int | None = None) -> None:
    """One panel per variant: recall@1/5/10 vs length (question form), a colour per embedder (and
    strategy) and a line style per k, with the chance level k / candidates in grey when the pool
    size is known."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = metrics[(metrics["query_form"] == QUESTION) & (metrics["category"] == ALL) & (metrics["depth_bucket"] == ALL)]
    variants = sorted(data["variant"].unique())
    colors = {name: f"C{i % 10}" for i, name in enumerate(sorted(data["embedder"].unique()))}  # one colour per series
    fig, axes = plt.subplots(1, len(variants), figsize=(5.2 * len(variants), 4), squeeze=False, sharey=True)
    for ax, variant in zip(axes[0], variants):
        for k, style in zip(RECALL_KS, ("-", "--", ":")):
            cell = data[(data["variant"] == variant) & (data["metric"] == f"recall@{k}")]
            for (embedder,), series in cell.groupby(["embedder"]):
                series = series.sort_values("length")
                ax.plot(series["length"], series["value"], marker="o", color=colors[embedder], linestyle=style,
                        label=f"recall@{k} {embedder}")
            if candidates:
                ax.axhline(k / candidates, color="grey", linestyle=style, linewidth=0.8)
        ax.set_title(f"{variant} (grey: chance k/{candidates})" if candidates else variant)
        ax.set_ylim(0, 1.02)
        _length_axis(ax, data["length"])
    axes[0][0].set_ylabel("recall@k: share of needle haystacks in the top k")
    axes[0][-1].legend(fontsize=7)
    _save(fig, path)


def heatmap_figure(tables: dict[str, pd.DataFrame], title: str, path: Path, cmap: str = "viridis") -> None:
    """One heatmap per embedder; each table is rows x lengths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import patheffects

    fig, axes = plt.subplots(1, len(tables), figsize=(6 * len(tables), 0.35 * max(len(t) for t in tables.values()) + 2), squeeze=False)
    for ax, (name, table) in zip(axes[0], tables.items()):
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
    _save(fig, path)


def expansion_figure(metrics: pd.DataFrame, variant: str, path: Path) -> None:
    """Comparative ratio and AUC vs length, a line per query form (and embedder), chance at 0.5."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), squeeze=False)
    embedders = metrics["embedder"].unique()
    for ax, metric, title in zip(axes[0], ("comparative_ratio", "auc"), ("comparative ratio", "ROC AUC")):
        data = metric_series(metrics, metric)
        data = data[data["variant"] == variant]
        for (embedder, form), series in data.groupby(["embedder", "query_form"]):
            series = series.sort_values("length")
            label = form if len(embedders) == 1 else f"{embedder} [{form}]"
            ax.plot(series["length"], series["value"], marker="o", label=label)
        ax.axhline(0.5, color="grey", linestyle="--", linewidth=1, label="chance")
        ax.set_title(f"{title} by query form ({variant})")
        _length_axis(ax, data["length"])
    axes[0][1].legend(fontsize=8)
    _save(fig, path)


def best_query_form(metrics: pd.DataFrame, variant: str) -> pd.DataFrame:
    """Per embedder and length: the query form with the highest comparative ratio (AUC breaks ties)."""
    ratio = metric_series(metrics, "comparative_ratio")
    auc = metric_series(metrics, "auc")[["embedder", "query_form", "variant", "length", "value"]]
    data = ratio[ratio["variant"] == variant].merge(auc, on=["embedder", "query_form", "variant", "length"], suffixes=("", "_auc"))
    data = data.sort_values(["embedder", "length", "value", "value_auc"], ascending=[True, True, False, False])
    best = data.groupby(["embedder", "length"], as_index=False).first()
    return best.rename(columns={"query_form": "best_query_form", "value": "comparative_ratio", "value_auc": "auc"})[
        ["embedder", "length", "best_query_form", "comparative_ratio", "auc"]]


def _main_variant(metrics: pd.DataFrame) -> str:
    variants = list(metrics["variant"].unique())
    return "onehop" if "onehop" in variants else sorted(variants)[0]


def category_tables(metrics: pd.DataFrame, variant: str) -> dict[str, pd.DataFrame]:
    """Comparative ratio, category x length, per embedder (question form)."""
    data = metrics[(metrics["metric"] == "comparative_ratio") & (metrics["category"] != ALL)
                   & (metrics["variant"] == variant) & (metrics["query_form"] == QUESTION)]
    return {e: g.pivot_table(index="category", columns="length", values="value") for e, g in data.groupby("embedder")}


def depth_tables(similarities: pd.DataFrame, variant: str) -> dict[str, pd.DataFrame]:
    """Mean normalized similarity, target depth x length, per embedder (question form)."""
    data = similarities[(similarities["variant"] == variant) & (similarities["query_form"] == QUESTION)
                        & similarities["normalized"].notna()]  # a lexical scorer has no normalized similarity
    data = data.assign(depth_label=data["target_depth"].round(2))
    return {e: g.pivot_table(index="depth_label", columns="length", values="normalized") for e, g in data.groupby("embedder")}


def markdown_table(frame: pd.DataFrame, digits: int = 3) -> str:
    """A GitHub-flavoured markdown table."""
    def cell(value) -> str:
        if value is None or (isinstance(value, float) and np.isnan(value)):
            return "–"
        return f"{value:.{digits}f}" if isinstance(value, (float, np.floating)) else str(value)

    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def scorer_view(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with ``embedder`` naming what one figure series shows: the embedder, followed by
    its strategy when the tables hold more than one strategy (``st:all-MiniLM-L6-v2 · windows-mean``)
    and by the distractor count when they hold more than one (``· 4 distractors``)."""
    label = frame["embedder"]
    if "strategy" in frame.columns and frame["strategy"].nunique() > 1:
        label = label + " · " + frame["strategy"]
    if "n_distractors" in frame.columns and frame["n_distractors"].nunique() > 1:
        label = label + " · " + frame["n_distractors"].astype(str) + " distractors"
    return frame.assign(embedder=label)


def one_needle(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``frame`` (metrics or similarities) of haystacks with one needle, asked their
    own question."""
    return frame[(frame["n_needles"] <= 1) & frame["own_question"].astype(bool)]


SEVERAL_METRICS = ("recall@1", "query_auc")


def several_needles_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """Recall@1 and query_auc (question form, main variant) per embedder, strategy, needle count
    and question (own or other) and haystack length; empty for a run with one needle per haystack."""
    if metrics["n_needles"].max() <= 1:
        return pd.DataFrame()
    variant = _main_variant(one_needle(metrics))
    data = metrics[metrics["metric"].isin(SEVERAL_METRICS) & (metrics["category"] == ALL) & (metrics["depth_bucket"] == ALL)
                   & (metrics["variant"] == variant) & (metrics["query_form"] == QUESTION)
                   & (metrics["n_distractors"] == 0)]
    data = data.assign(question=np.where(data["own_question"].astype(bool), "own", "other"))
    return data.pivot_table(index=["embedder", "strategy", "n_needles", "question", "metric"], columns="length",
                            values="value").reset_index()


def fewest_distractors(metrics: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``metrics`` with the smallest distractor count of the run (all rows of a run
    without distractors)."""
    if "n_distractors" not in metrics.columns:
        return metrics
    return metrics[metrics["n_distractors"] == metrics["n_distractors"].min()]


def distractor_table(metrics: pd.DataFrame, metric: str, variant: str) -> pd.DataFrame:
    """``metric`` (question form, ``variant``) per embedder, strategy and distractor count (rows)
    and haystack length (columns)."""
    return chunk_size_table(metrics, metric, variant, rows=("embedder", "strategy", "n_distractors"))


def chunk_size_table(metrics: pd.DataFrame, metric: str, variant: str,
                     rows: tuple[str, ...] = ("embedder", "strategy")) -> pd.DataFrame:
    """``metric`` (question form, ``variant``) per ``rows`` (embedder and strategy) and haystack
    length (columns): whole documents of each length (truncate, windows-mean, bm25), and for
    chunks-max each chunk size's row."""
    data = metric_series(metrics, metric)
    data = data[(data["variant"] == variant) & (data["query_form"] == QUESTION)]
    return data.pivot_table(index=list(rows), columns="length", values="value").reset_index()


def chunk_size_lines(metrics: pd.DataFrame, rule: BreakRule, variant: str) -> list[str]:
    """Per embedder with chunked scoring: the largest chunk size whose headline metric keeps the
    break rule at every length, and whether the best chunk size beats the best whole-document
    strategy at the longest length (with both 95% CIs)."""
    metric = rule.headline_metric
    data = metric_series(metrics, metric)
    data = data[(data["variant"] == variant) & (data["query_form"] == QUESTION) & data["value"].notna()]
    lines = []
    for embedder, rows in data.groupby("embedder"):
        is_chunked = rows["strategy"].str.startswith(CHUNKED_PREFIX)
        if not is_chunked.any():
            continue
        longest = int(rows["length"].max())
        sizes = {int(s.removeprefix(CHUNKED_PREFIX)): g for s, g in rows[is_chunked].groupby("strategy")}
        holding = [c for c, g in sizes.items() if rule.holds_everywhere(g["length"], g["value"])]
        tried = ", ".join(map(str, sorted(sizes)))
        if holding:
            first = (f"of the chunk sizes tried ({tried}), the largest that keeps {rule.condition()} at every "
                     f"length up to {longest} is {max(holding)} tokens")
        else:
            first = f"none of the chunk sizes tried ({tried}) keeps {rule.condition()} at every length up to {longest}"
        at_longest = rows[rows["length"] == longest]
        chunked_there = at_longest["strategy"].str.startswith(CHUNKED_PREFIX)
        best_chunk = at_longest[chunked_there].sort_values("value").iloc[-1]
        whole = at_longest[~chunked_there]
        if whole.empty:
            lines.append(f"- **{embedder}**: {first}.")
            continue
        best_whole = whole.sort_values("value").iloc[-1]
        gap = best_chunk["value"] - best_whole["value"]
        separated = best_chunk["ci_lo"] > best_whole["ci_hi"] or best_whole["ci_lo"] > best_chunk["ci_hi"]
        verdict = ("chunked retrieval beats embedding the document whole" if gap > 0 else
                   "embedding the document whole does at least as well as chunked retrieval")
        lines.append(f"- **{embedder}**: {first}. At {longest} tokens, {best_chunk['strategy']} reaches {best_chunk['value']:.3f} "
                     f"[{best_chunk['ci_lo']:.3f}, {best_chunk['ci_hi']:.3f}] against {best_whole['value']:.3f} "
                     f"[{best_whole['ci_lo']:.3f}, {best_whole['ci_hi']:.3f}] for {best_whole['strategy']}: {verdict}"
                     f"{'' if separated else ' (the 95% CIs overlap)'}.")
    return lines


def truncation_lines(metrics: pd.DataFrame) -> list[str]:
    """One sentence per embedder (and strategy) on where its window hides the needle."""
    lines = []
    visible = metric_series(metrics, "needle_visible_share")
    for embedder, series in visible[visible["query_form"] == QUESTION].groupby("embedder"):
        per_length = series.groupby("length")["value"].mean()
        hidden = [f"{length}: {share:.0%}" for length, share in per_length.items() if share < 1]
        if hidden:
            lines.append(f"- **{embedder}** truncates long haystacks; share of haystacks whose needle it can see, "
                         f"by length: {', '.join(hidden)}. Scores at those lengths partly measure truncation.")
        else:
            lines.append(f"- **{embedder}** sees the needle in every haystack (no truncation before the needle).")
    return lines


def position_table(similarities: pd.DataFrame, depths: int | None = None) -> pd.DataFrame:
    """Per length and distractor count: the distinct needle positions (depths to 0.01) each
    (question, variant) reached (mean, min, max; of ``depths`` asked for, if given) and how many
    needle haystacks hold distractors inside the needle's zone, from one scorer's question-form
    rows."""
    first = similarities[["embedder", "strategy"]].drop_duplicates().iloc[:1]
    rows = similarities.merge(first, on=["embedder", "strategy"])
    rows = rows[(rows["query_form"] == QUESTION) & ~rows["variant"].isin([CONTROL, NEGATIVE])]
    if rows.empty:
        return pd.DataFrame()
    rows = rows.assign(position=rows["depth"].round(2))
    per_question = rows.groupby(["length", "n_distractors", "group_id", "variant"]).agg(
        positions=("position", "nunique"), in_zone=("distractors_in_zone", lambda v: int((v > 0).sum())))
    table = per_question.groupby(["length", "n_distractors"]).agg(
        positions_mean=("positions", "mean"), positions_min=("positions", "min"), positions_max=("positions", "max"),
        in_zone=("in_zone", "sum")).reset_index()
    table = table.rename(columns={"positions_mean": "distinct positions (mean)", "positions_min": "min", "positions_max": "max",
                                  "in_zone": "haystacks with distractors in zone"})
    if depths:
        table.insert(2, "depths asked", int(depths))
    return table


def summary_table(metrics: pd.DataFrame, metric: str) -> pd.DataFrame:
    """``metric`` per length (rows) for each embedder/form/variant (columns)."""
    data = metric_series(metrics, metric)
    data = data.assign(series=data["embedder"] + " " + data["query_form"] + " " + data["variant"])
    return data.pivot_table(index="length", columns="series", values="value").reset_index()


#: Columns that came with long-text strategies and with distractors (runs of older versions lack them).
LATER_COLUMNS = ("strategy", "windows_exact", "best_chunk", "chunk_has_needle", "n_distractors", "control_id", "distractors_in_zone",
                 "n_needles", "own_question")

#: The run settings the report's first line names (from the run's config).
HEADER_KEYS = ("needles", "corpus", "lengths", "depths", "seed", "tokenizer")


def write_report(out: Path, metrics: pd.DataFrame, similarities: pd.DataFrame, rule: BreakRule | None = None,
                 title: str = "NoLiMa sweep", config: dict | None = None,
                 candidates: int | None = None) -> Path:
    """Write ``report.md`` and ``figures/`` into ``out``; returns the report path. ``config``: the
    settings of the run the tables come from (named in the first line), if there is one run;
    ``candidates``: the size of the retrieval pool plus one, for the chance level of recall@k."""
    out = Path(out)
    figures = out / "figures"
    metrics, similarities = with_later_columns(metrics), with_later_columns(similarities)
    rule = rule or BreakRule()
    break_metric = rule.headline_metric
    bps = break_points(metrics, rule)
    several = several_needles_table(metrics)
    metrics, similarities = one_needle(metrics), one_needle(similarities)  # the sections below: one needle, its own question
    variant = _main_variant(metrics)
    fewest = fewest_distractors(metrics)
    chunk_lines = chunk_size_lines(fewest, rule, variant)
    chunk_table = chunk_size_table(fewest, break_metric, variant)
    decoy_table = distractor_table(metrics, break_metric, variant)
    metrics, similarities = scorer_view(metrics), scorer_view(similarities)  # one series per embedder and strategy
    shown = [f for f in LINE_FIGURES if f[0] in set(metrics["metric"])]  # runs of older versions lack some
    for metric, name, ylabel, hline in shown:
        line_figure(metrics, metric, ylabel, figures / name, hline=rule.threshold if metric == rule.metric else hline)
    heatmap_figure(category_tables(metrics, variant), f"comparative ratio by category ({variant})", figures / "category_heatmap.png", cmap="RdYlGn")
    depth = depth_tables(similarities, variant)
    if depth:
        heatmap_figure(depth, f"normalized similarity by needle depth ({variant})", figures / "depth_heatmap.png")

    lines = [f"# {title}", ""]
    if config and all(key in config for key in HEADER_KEYS):
        lines += [f"Needles `{Path(config['needles']).name}`, corpus `{config['corpus']}`, lengths "
                  f"{', '.join(map(str, config['lengths']))}, {config['depths']} depths, seed {config['seed']}, "
                  f"token counts by `{config['tokenizer']}`.", ""]
    lines += [f"## Break point and recommended chunk size ({rule.condition()})", "",
              "The break point is the largest length up to which the rule holds at every length from the shortest; "
              f"the recommended chunk size is {CHUNK_FACTOR} x the headline ({rule.rule}) break point. Where no length "
              "keeps the rule, the best length is named. Both rules are in the table, and the study's break point from "
              "the AUC pooled over questions beside them:", "", *[f"- {line}" for line in rule.meanings()], "",
              *[f"- {r.embedder} [{r.strategy}, {r.variant}, {r.query_form}{series_note(r)}]: "
                f"{break_sentence(r, rule)}" for r in bps.itertuples()], "", markdown_table(bps), ""]
    if not several.empty:
        lines += ["## Several needles", "",
                  "A haystack with K needles holds its own group's needle at the grid's depth and K - 1 needles of other "
                  "groups (other characters) away from it; it is ranked among the same-length needle-free pool by every "
                  "question whose needle it holds: its own (`own`) and the others' (`other`). Recall@1 and query_auc per "
                  f"length ({variant} needles, question form):", "", markdown_table(several), ""]
    positions = position_table(similarities, config.get("depths") if config else None)
    if not positions.empty:
        lines += ["## Needle positions", "",
                  "A needle goes in at the sentence boundary nearest its target depth. In short haystacks of long "
                  "sentences two depths can meet at one boundary; such a haystack is built once and counted once, so "
                  "per length the distinct positions reached (depths to 0.01) can be fewer than the depths asked for (mean, min and max "
                  "over questions and variants). Where no boundary lies outside the ±0.2 zone around the needle, "
                  "its distractors go to the farthest boundaries inside it (`haystacks with distractors in zone`).", "",
                  markdown_table(positions, digits=1), ""]
    if decoy_table["n_distractors"].nunique() > 1:
        lines += ["## Distractors", "",
                  f"{break_metric} ({variant} needles, question form) per distractor count and haystack length. A "
                  "haystack with K distractors holds the first K distractors of its question (texts that share the "
                  "question's keyword) more than 0.2 of its tokens away from the needle; it is compared with its own "
                  "control (the same filler and distractors, no needle) and ranked among the negatives that hold its "
                  "question's K distractors plus that control, so every candidate holds the decoys and only the needle "
                  "tells it apart (without distractors, every group's control and the plain negatives).", "",
                  markdown_table(decoy_table), ""]
    if chunk_table["strategy"].nunique() > 1:
        lines += ["## Chunk size", "",
                  f"{break_metric} ({variant} needles, question form{distractor_note(decoy_table['n_distractors'].min())}) "
                  "per strategy and haystack length: `truncate` reads "
                  "the model's window, `windows-mean` the mean of window vectors over the whole text, `chunks-max@C` the "
                  "best of C-token chunks (a RAG retriever), `full-text` a lexical scorer reading everything.", "",
                  *chunk_lines, "", markdown_table(chunk_table), ""]
    if "recall@5" in set(metrics["metric"]):
        recall_figure(metrics, figures / "recall_vs_length.png", candidates)
        lines += ["## Retrieval among same-length candidates", "",
                  "Each needle haystack ranked by its question's score among every needle-free haystack of its "
                  f"length (the controls and the negative pool{f'; {candidates} candidates in all' if candidates else ''}"
                  f"{'; with distractors, the pool of the Distractors section' if decoy_table['n_distractors'].nunique() > 1 else ''}; "
                  "ties counted against it). Recall@5 per length:", "", markdown_table(summary_table(metrics, "recall@5")), "",
                  "![recall@k](figures/recall_vs_length.png)", ""]
    lines += ["## Truncation", "", *truncation_lines(metrics), ""]
    for metric, name, ylabel, _ in shown:
        lines += [f"## {ylabel}", "", f"![{metric}](figures/{name})", "", markdown_table(summary_table(metrics, metric)), ""]
    if metrics["query_form"].nunique() > 1:
        expansion_figure(metrics, variant, figures / "query_expansion.png")
        lines += ["## Query expansion", "",
                  f"Expanded query = question + N terms. Comparative ratio above 0.5 means the haystack with the needle "
                  f"wins more often than its needle-free control ({variant} needles).", "",
                  "![query expansion](figures/query_expansion.png)", "",
                  markdown_table(best_query_form(metrics, variant)), ""]
    lines += ["## By category and by needle depth", "", "![category](figures/category_heatmap.png)", "",
              *(["![depth](figures/depth_heatmap.png)", ""] if depth else []),
              "Every value in `metrics.csv` carries n and a bootstrap 95% CI.", ""]
    path = out / "report.md"
    write_text_atomic(path, "\n".join(lines))
    return path


def distractor_note(count) -> str:
    """", K distractors" for a count above 0, else nothing (for labels of break-point rows)."""
    return f", {int(count)} distractors" if count else ""


def series_note(row) -> str:
    """What sets a break-point row apart besides embedder, strategy and variant: its distractors,
    and with several needles their number and whose question ranks the haystack."""
    needles = "" if row.n_needles <= 1 else f", {int(row.n_needles)} needles, {'own' if row.own_question else 'other'} questions"
    return distractor_note(row.n_distractors) + needles


def load_run(run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """metrics.csv, similarities.parquet and config.json of a run directory."""
    run_dir = Path(run_dir)
    needed = [run_dir / "metrics.csv", run_dir / "similarities.parquet", run_dir / "config.json"]
    missing = [p.name for p in needed if not p.is_file()]
    if missing:
        raise InputError(f"{run_dir} is not a finished run directory (missing {', '.join(missing)})")
    metrics = read_table(needed[0], [c for c in METRIC_COLUMNS if c not in LATER_COLUMNS])
    similarities = read_table(needed[1], [c for c in SIMILARITY_COLUMNS if c not in LATER_COLUMNS])
    metrics, similarities = with_later_columns(metrics), with_later_columns(similarities)
    try:
        config = json.loads(needed[2].read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{needed[2]} is not valid JSON ({exc})") from None
    if not isinstance(config, dict) or not all(key in config for key in HEADER_KEYS):
        raise InputError(f"{needed[2]} is not a run's config (it needs {', '.join(HEADER_KEYS)})")
    return metrics, similarities, config


def pool_size(retrieval: pd.DataFrame) -> int:
    """Candidates per ranking (pool + 1) at the run's fewest distractors (without them: every
    group's control and the negatives); the chance level of recall@k is k / this."""
    retrieval = with_later_columns(retrieval)
    return int(retrieval.loc[retrieval["n_distractors"] == retrieval["n_distractors"].min(), "n_candidates"].max())


def _pool_size(run_dir: Path) -> int | None:
    """:func:`pool_size` of a run's ``retrieval.parquet``, if it has one."""
    path = run_dir / "retrieval.parquet"
    return pool_size(read_table(path, ["n_candidates"])) if path.is_file() else None


def break_rule_of(config: dict) -> BreakRule:
    """The break rule a run was made with: runs before the relative rule read an absolute one
    (and runs before 0.2 the pooled AUC)."""
    if "break_rule" in config:
        return BreakRule(config["break_rule"], config.get("break_k", DEFAULT_BREAK_K), config.get("break_metric", DEFAULT_BREAK_METRIC),
                         config.get("break_threshold", DEFAULT_BREAK_THRESHOLD))
    if "break_metric" in config:
        return BreakRule("absolute", metric=config["break_metric"], threshold=config.get("break_threshold", DEFAULT_BREAK_THRESHOLD))
    return BreakRule("absolute", metric="auc", threshold=config.get("auc_threshold", DEFAULT_BREAK_THRESHOLD))


def compare_runs(run_dirs: list[Path], out: Path | None = None) -> Path:
    """Rebuild the report of one run, or a combined report of several into ``out``."""
    loaded = [load_run(Path(d)) for d in run_dirs]
    if len(loaded) == 1:
        metrics, sims, config = loaded[0]
        return write_report(Path(out or run_dirs[0]), metrics, sims, break_rule_of(config), config=config,
                            candidates=_pool_size(Path(run_dirs[0])))
    all_embedders = [e for m, _, _ in loaded for e in m["embedder"].unique()]
    relabel = len(all_embedders) != len(set(all_embedders))
    metrics_frames, sim_frames = [], []
    for run_dir, (metrics, sims, _) in zip(run_dirs, loaded):
        if relabel:
            metrics = metrics.assign(embedder=f"{Path(run_dir).name}/" + metrics["embedder"])
            sims = sims.assign(embedder=f"{Path(run_dir).name}/" + sims["embedder"])
        metrics_frames.append(metrics)
        sim_frames.append(sims)
    target = Path(out or "runs/compare")
    target.mkdir(parents=True, exist_ok=True)
    return write_report(target, pd.concat(metrics_frames), pd.concat(sim_frames), break_rule_of(loaded[0][2]),
                        title="NoLiMa sweep: " + " vs ".join(Path(d).name for d in run_dirs))

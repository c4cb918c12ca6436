"""Whether texts (needles) blend into a theme of a finished themes run (``themes membership``,
:func:`theme_membership`): predicted into it by the clusterings (:mod:`~embedeval.experiments.themes.placement`)
and close to it in the embedding space (:func:`theme_distances`), beside each text's nearest theme
(:func:`nearest_theme`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from embedeval import options
from embedeval.defaults import DEFAULT_BLEND_THRESHOLD, DEFAULT_MIN_OUTSIDE_PERCENTILE
from embedeval.embedders.registry import load_embedder
from embedeval.errors import InputError
from embedeval.experiments.themes.files import CHUNKS_FILE, read_manifest
from embedeval.experiments.themes.loading import load_themes
from embedeval.experiments.themes.names import THEME_NUMBER, resolve_theme, theme_top_terms
from embedeval.experiments.themes.placement import COSINE_RESOLUTION, placement, predicted_themes, theme_probabilities
from embedeval.io import read_table
from embedeval.labels import NOISE
from embedeval.metrics.neighbours import neighbour_similarity, percentile_rank
from embedeval.plan import EmbedderPlan, plan_work


def theme_distances(vectors: np.ndarray, corpus: np.ndarray, labels: np.ndarray, target: int, k: int) -> pd.DataFrame:
    """How close ``vectors`` (needles) are to theme ``target`` in the embedding space, against the
    corpus (``corpus`` (n, d) with cluster ``labels`` (n,)): per needle

    - ``neighbour_similarity``: s = its mean cosine to its k nearest chunks of the theme
      (:func:`~embedeval.metrics.neighbours.neighbour_similarity`; all of them when the theme has fewer than k);
    - ``outside_percentile``: P(s) among the same statistic of every chunk outside the theme (other
      clusters and noise), ties (within 1e-6) counted half (:func:`~embedeval.metrics.neighbours.percentile_rank`:
      100 * (#{outside < s} + 0.5 * #{outside = s}) / #outside): "closer to this theme than P% of
      the corpus outside it";
    - ``inside_percentile``: P(s) among the theme's own chunks, each leaving itself out of its k
      nearest (k' = min(k, size - 1)): for reading, a hand-written needle is naturally less alike
      the theme than its chunks are to each other.

    Only the theme's chunks are the k-nearest reference set."""
    inside = labels == target
    if inside.sum() < 2 or inside.all():
        raise InputError(f"cluster {target} has {int(inside.sum())} of {len(labels)} chunks: the distance test needs "
                         "at least 2 inside it and 1 outside")
    theme = corpus[inside]
    needle = neighbour_similarity(vectors, theme, k)
    outside = neighbour_similarity(corpus[~inside], theme, k)
    own = neighbour_similarity(theme, theme, k, exclude_self=True)
    return pd.DataFrame({"neighbour_similarity": needle,
                         "outside_percentile": percentile_rank(needle, outside, COSINE_RESOLUTION),
                         "inside_percentile": percentile_rank(needle, own, COSINE_RESOLUTION)})


def nearest_theme(vectors: np.ndarray, corpus: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each vector's nearest theme in the embedding space: the cluster (of ``labels``, noise left
    out) whose k nearest chunks it is most alike on average (the largest
    :func:`~embedeval.metrics.neighbours.neighbour_similarity`; ties to the smaller cluster number), and
    that similarity."""
    clusters = sorted(set(labels.tolist()) - {NOISE})
    similarities = np.column_stack([neighbour_similarity(vectors, corpus[labels == c], k) for c in clusters])
    best = similarities.argmax(axis=1)
    return np.asarray(clusters)[best], similarities[np.arange(len(vectors)), best]


@dataclass
class MembershipCheck:
    """A :func:`theme_membership` with its inputs read and checked before anything is embedded
    (:meth:`read`: the themes run, its fitted models, the rows' target themes), then planned
    (:meth:`plan`) or computed (:meth:`table`)."""

    out: Path
    rows: pd.DataFrame
    targets: np.ndarray
    manifest: dict
    reducer: object
    clusterers: list
    clusterings: dict
    chunks: pd.DataFrame
    threshold: float
    min_outside_percentile: float
    themes: int

    @classmethod
    def read(cls, out: str | Path, rows: pd.DataFrame, cluster: int | str | None = None, threshold: float = DEFAULT_BLEND_THRESHOLD,
             min_outside_percentile: float = DEFAULT_MIN_OUTSIDE_PERCENTILE, embedder: str | None = None) -> MembershipCheck:
        """Everything a user can get wrong refused with one line: the settings, an ``embedder``
        that is not the run's, the run itself, the themes named."""
        options.THRESHOLD.check(threshold)
        options.MIN_OUTSIDE_PERCENTILE.check(min_outside_percentile)
        if embedder is not None and (made_with := read_manifest(out)["settings"]["embedder"]) != embedder:
            raise InputError(f"{out} was made with {made_with}, not {embedder}: its themes live in that model's space")
        manifest, reducer, clusterers, clusterings = load_themes(out)
        top_terms = theme_top_terms(out)
        default = 0 if cluster is None else resolve_theme(cluster, top_terms, out, "cluster")
        targets = _row_targets(rows, default, top_terms, out)
        chunks = read_table(Path(out) / CHUNKS_FILE, ["text", "cluster"])
        return cls(Path(out), rows, targets, manifest, reducer, clusterers, clusterings, chunks, threshold, min_outside_percentile,
                   len(top_terms))

    @property
    def embedder(self) -> str:
        """The run's embedder: its themes live in that model's space."""
        return self.manifest["settings"]["embedder"]

    def embed(self, model) -> tuple[np.ndarray, np.ndarray]:
        """What the check embeds: the run's chunks (from the cache: the vectors UMAP was fitted on)
        and the rows' needles, both as documents."""
        return model.embed(self.chunks["text"].tolist(), kind="document"), model.embed(self.rows["needle"].tolist(), kind="document")

    def plan(self, cache_dir=None, prices: dict[str, float] | None = None, calibrate: bool = True,
             progress: bool = False) -> list[EmbedderPlan]:
        """What :meth:`table` would embed, send, cost and take (:mod:`embedeval.plan`); nothing sent or stored."""
        return plan_work([self.embedder], lambda models: self.embed(models[0]), cache_dir, prices, calibrate, progress=progress)

    def table(self, cache_dir=None, progress: bool = False) -> pd.DataFrame:
        """The rows with their membership columns (:func:`theme_membership`)."""
        model = load_embedder(self.embedder, cache_dir=cache_dir, progress=progress)
        if model.fingerprint != self.manifest["embedder_fingerprint"]:
            raise InputError(f"{self.out} was made with another {self.embedder} (its fingerprint differs); run embedeval themes again")
        corpus, vectors = self.embed(model)
        targets, threshold = self.targets, self.threshold
        probabilities, shares = theme_probabilities(placement(self.reducer, vectors, corpus), self.clusterers, self.clusterings,
                                                    self.themes)
        predicted = predicted_themes(probabilities, shares)
        on = np.arange(len(self.rows))
        labels, k = self.chunks["cluster"].to_numpy(), self.manifest["settings"]["umap"]["neighbors"]
        table = self.rows.copy()
        table["predicted_cluster"] = predicted
        table["probability"] = np.where(predicted != NOISE, probabilities[on, np.maximum(predicted, 0)], 0.0)
        table["target_cluster"] = targets
        table["target_probability"] = probabilities[on, targets]
        table["target_stability"] = shares[on, targets]
        distances = _distances_to(targets, vectors, corpus, labels, k)
        for column in distances:
            table[column] = distances[column].to_numpy()
        table["blends_in"] = (table["target_probability"] > threshold) & (table["outside_percentile"] >= self.min_outside_percentile)
        best, _ = nearest_theme(vectors, corpus, labels, k)
        best_distances = _distances_to(best, vectors, corpus, labels, k)
        table["best_cluster"] = best
        table["best_probability"] = probabilities[on, best]
        table["best_neighbour_similarity"] = best_distances["neighbour_similarity"].to_numpy()
        table["best_outside_percentile"] = best_distances["outside_percentile"].to_numpy()
        return table


def theme_membership(out: str | Path, rows: pd.DataFrame, cluster: int | str | None = None, threshold: float = DEFAULT_BLEND_THRESHOLD,
                     min_outside_percentile: float = DEFAULT_MIN_OUTSIDE_PERCENTILE, cache_dir=None,
                     progress: bool = False, embedder: str | None = None) -> pd.DataFrame:
    """``rows`` (with a ``needle`` column, and optionally ``target_cluster``: each needle's own
    target theme, empty for the default) plus ``predicted_cluster`` (the theme of the highest
    probability, :func:`~embedeval.experiments.themes.placement.predicted_themes`; -1 when no clustering predicts the needle into a theme:
    each calls it noise or puts it in a cluster of its own that matches no theme) and its ``probability`` (per
    theme, :func:`~embedeval.experiments.themes.placement.theme_probabilities`: HDBSCAN's approximate-prediction strength of the needle
    placed by :func:`~embedeval.experiments.themes.placement.placement`, averaged over the consensus's clusterings, 0 in those that put
    it elsewhere), ``target_cluster`` (the row's own, else ``cluster``, default 0: the largest),
    ``target_probability`` (the probability in the target) and ``target_stability`` (the share of
    the clusterings that predict it into the target), the distance test in the embedding space
    (:func:`theme_distances`, k = the run's UMAP n_neighbors): ``neighbour_similarity``,
    ``outside_percentile``, ``inside_percentile``, and ``blends_in``:

        target_probability > threshold  and  outside_percentile >= min_outside_percentile

    Beside the target's, the needle's best theme (:func:`nearest_theme`: the cluster it is most
    alike in the embedding space) with the same measures: ``best_cluster``, ``best_probability``
    (the probability when predicted into it, else 0), ``best_neighbour_similarity``,
    ``best_outside_percentile``. A needle whose best theme is not its target was written for
    another theme than the one it reads like.

    The probability alone cannot tell a needle about none of the corpus's topics: placement keeps
    no distance, and the middle of a neighbourhood scores near 1 wherever it is. ``embedder``, if
    given, must be the run's (its themes live in that model's space); the run's embedder is used.

    ``cluster`` and each row's ``target_cluster`` name a theme by its number or by a term of its top
    terms (:func:`~embedeval.experiments.themes.names.resolve_theme`: ``6`` or ``"writing"``); the table holds the numbers."""
    return MembershipCheck.read(out, rows, cluster, threshold, min_outside_percentile, embedder).table(cache_dir, progress)


def _row_targets(rows: pd.DataFrame, default: int, top_terms: dict[int, tuple[str, ...]], out) -> np.ndarray:
    """Each row's target cluster: its ``target_cluster`` where given (a number or a term,
    :func:`~embedeval.experiments.themes.names.resolve_theme`), else ``default``. Numbers that are no cluster of the run are one error
    naming the rows; so is a term that names no theme or several (the rows that gave it)."""
    if "target_cluster" not in rows.columns:
        return np.full(len(rows), default, dtype=int)
    given = [None if value is None or (isinstance(value, float) and value != value) or str(value).strip() == "" else value
             for value in rows["target_cluster"]]
    numbers = {i: int(float(value)) for i, value in enumerate(given)
               if value is not None and (isinstance(value, (int, np.integer)) or THEME_NUMBER.fullmatch(str(value).strip()))}
    wrong = [i for i, number in numbers.items() if number not in top_terms]
    if wrong:
        where = ", ".join(f"needle {i + 1} ({numbers[i]})" for i in wrong[:3]) + (f" and {len(wrong) - 3} more" if len(wrong) > 3 else "")
        raise InputError(f"target cluster of {where} is not a cluster of {out} (0..{len(top_terms) - 1}; see its clusters.csv)")
    by_term: dict[str, list[int]] = {}
    for i, value in enumerate(given):
        if value is not None and i not in numbers:
            by_term.setdefault(str(value).strip().lower(), []).append(i)
    resolved = {}
    for term, where in by_term.items():
        named = ", ".join(f"needle {i + 1}" for i in where[:3]) + (f" and {len(where) - 3} more" if len(where) > 3 else "")
        number = resolve_theme(term, top_terms, out, what=f"target of {named}")
        resolved.update({i: number for i in where})
    return np.array([numbers.get(i, resolved.get(i, default)) for i in range(len(given))], dtype=int)


def _distances_to(targets: np.ndarray, vectors: np.ndarray, corpus: np.ndarray, labels: np.ndarray, k: int) -> pd.DataFrame:
    """:func:`theme_distances` of each vector to its own cluster in ``targets`` (each distinct
    cluster's corpus statistics computed once)."""
    table = pd.DataFrame(index=range(len(vectors)), columns=["neighbour_similarity", "outside_percentile", "inside_percentile"],
                         dtype=float)
    for target in np.unique(targets):
        picked = np.flatnonzero(targets == target)
        table.iloc[picked] = theme_distances(vectors[picked], corpus, labels, int(target), k).to_numpy()
    return table

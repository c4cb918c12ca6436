"""How stable a corpus's themes are under float-level differences in the chunk vectors (issue 47).

The same corpus, embedder, seed and cache give the same clusters on one machine; on another CPU the
embedder's vectors can differ in their last bits (other BLAS kernels, other batch shapes), and
UMAP (its nearest-neighbour search and its optimisation) and HDBSCAN can turn such differences into
other clusters. This benchmark measures how much: it runs the themes recipe once (the study's
settings, the chunk vectors from the cache), then again on the same vectors plus Gaussian noise of
standard deviation ``--noise`` (default 1e-7: some tens of float32 units in the last place of a
typical component of a unit vector of 384 dimensions) for several noise seeds, and prints per seed the adjusted Rand index (sklearn's
``adjusted_rand_score``) against the unperturbed clustering, the clusters, the noise share, and
which theme each of ``--terms`` names (or why none: :func:`~embedeval.experiments.themes.resolve_theme`).
A rerun without noise comes first: it must give ARI 1 (the same machine and cache are exact).

    PYTHONPATH=. python benchmarks/bench_theme_stability.py                     # pg-essays, 5 seeds
    PYTHONPATH=. python benchmarks/bench_theme_stability.py --cache-dir CACHE --seeds 3
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from sklearn.metrics import adjusted_rand_score

from embedeval.embedders.registry import load_embedder
from embedeval.errors import InputError
from embedeval.experiments.themes import ThemesConfig, by_size, fit_hdbscan, fit_umap, resolve_theme, run_themes, top_terms
from embedeval.labels import NOISE


def clustering(vectors: np.ndarray, config: ThemesConfig) -> np.ndarray:
    """The recipe's cluster labels (numbered by size, -1 noise) of ``vectors``."""
    _, reduced = fit_umap(vectors, config.umap, config.seed)
    labels = fit_hdbscan(reduced, config.hdbscan).labels_.astype(int)
    rank = {c: i for i, c in enumerate(by_size(labels))}
    return np.array([rank.get(c, NOISE) for c in labels])


def named(terms: list[str], texts: list[str], labels: np.ndarray) -> str:
    """Which theme each term names in this clustering (``term -> N``; ``term -> ?(a,b)`` when
    several themes have it among their top terms, ``term -> -`` when none has)."""
    found = sorted(set(labels.tolist()) - {NOISE})
    top = {c: tuple(t) for c, t in top_terms(texts, labels, found).items()}
    out = []
    for term in terms:
        try:
            out.append(f"{term} -> {resolve_theme(term, top, 'this run')}")
        except InputError:
            having = [str(c) for c in found if term in top[c]]
            out.append(f"{term} -> ?({','.join(having)})" if having else f"{term} -> -")
    return "; ".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="pg-essays")
    parser.add_argument("--cache-dir", default=None, help="embedding cache (default: a temporary one; reuse one to skip embedding)")
    parser.add_argument("--seeds", type=int, default=5, help="noise seeds (default 5)")
    parser.add_argument("--noise", type=float, default=1e-7, help="standard deviation of the noise added to each vector component")
    parser.add_argument("--terms", default="writing,essay,essays,starting,startup,startups", help="terms whose theme is looked up in every clustering")
    args = parser.parse_args()
    terms = [t for t in args.terms.split(",") if t]
    with tempfile.TemporaryDirectory(prefix="bench-stability-") as tmp:
        cache = args.cache_dir or Path(tmp) / "cache"
        config = ThemesConfig(corpus=args.corpus, out=str(Path(tmp) / "themes"))
        base = run_themes(config, progress=False, cache_dir=cache)
        texts = base.chunks["text"].tolist()
        vectors = load_embedder(config.embedder, cache_dir=cache).embed(texts, kind="document")  # from the cache
    reference = base.chunks["cluster"].to_numpy()
    print(f"machine   {os.cpu_count()} cores; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}; "
          f"date {time.strftime('%Y-%m-%d')}")
    print(f"corpus    {args.corpus}: {len(texts)} chunks, vectors {vectors.dtype} {vectors.shape[1]}-d, "
          f"median |component| {np.median(np.abs(vectors)):.3g}; noise sd {args.noise:g}")
    print(f"{'run':<12} {'ARI':>7} {'ARI clustered':>13} {'clusters':>8} {'noise':>6}  terms")

    def report(name: str, labels: np.ndarray) -> float:
        ari = adjusted_rand_score(reference, labels)
        both = (reference != NOISE) & (labels != NOISE)
        ari_clustered = adjusted_rand_score(reference[both], labels[both])
        n = len(set(labels.tolist()) - {NOISE})
        print(f"{name:<12} {ari:7.3f} {ari_clustered:13.3f} {n:8d} {(labels == NOISE).mean():6.1%}  {named(terms, texts, labels)}",
              flush=True)
        return ari

    report("reference", reference)
    report("rerun", clustering(vectors, config))
    scores = []
    for seed in range(args.seeds):
        noise = np.random.default_rng(seed).normal(scale=args.noise, size=vectors.shape)
        scores.append(report(f"noise s{seed}", clustering((vectors + noise).astype(vectors.dtype), config)))
    print(f"ARI under noise {args.noise:g} over {len(scores)} seeds: mean {np.mean(scores):.3f}, "
          f"min {np.min(scores):.3f}, max {np.max(scores):.3f}")


if __name__ == "__main__":
    main()

"""How stable a corpus's themes are under float-level differences in the chunk vectors and under
another seed, for the single clustering of the study and the consensus of several.

The same corpus, embedder, seed and cache give the same themes on one machine; on another CPU the
embedder's vectors can differ in their last bits (other BLAS kernels, other batch shapes), and
UMAP and HDBSCAN turn such differences into other clusters. For each number of clusterings in
``--runs`` (1 is the study's single run) this benchmark finds the themes of the cached chunk
vectors as ``embedeval themes`` does (:func:`~embedeval.experiments.themes.fitting.cluster_runs` and
:func:`~embedeval.experiments.themes.fitting.consensus_themes`), then again on the same vectors plus
Gaussian noise of standard deviation ``--noise`` (default 1e-7: some tens of float32 units in the
last place of a typical component of a unit vector of 384 dimensions) for ``--seeds`` noise seeds,
and with ``--seed`` + 1 (``--other-seed``), and prints per pair the adjusted Rand index (sklearn's
``adjusted_rand_score``, noise as one label, and over the chunks both put in a theme), the themes,
the noise share, which theme each of ``--terms`` names, and the seconds the clusterings and the
consensus took (on all cores, as ``themes`` runs them).

    PYTHONPATH=. python benchmarks/bench_theme_stability.py                          # pg-essays, --runs 1,9
    PYTHONPATH=. python benchmarks/bench_theme_stability.py --corpus dir:BOOKS --min-books 5 --other-seed

What docs/themes.md shows of it is committed in docs/assets/benchmarks/bench_theme_stability*.txt
(the command line, then what it printed); tests/test_docs.py checks the page against them.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import numpy as np
from sklearn.metrics import adjusted_rand_score

from embedeval.embedders.registry import load_embedder
from embedeval.errors import InputError
from embedeval.experiments.themes.chunks import cut_corpus
from embedeval.experiments.themes.config import ThemesConfig
from embedeval.experiments.themes.describing import top_terms
from embedeval.experiments.themes.fitting import cluster_runs, consensus_themes
from embedeval.experiments.themes.names import resolve_theme
from embedeval.labels import NOISE
from embedeval.options import int_list


def themes_of(vectors: np.ndarray, config: ThemesConfig) -> tuple[np.ndarray, float]:
    """The consensus theme of each chunk (-1 noise) and the seconds it took."""
    clock = time.perf_counter()
    labels = consensus_themes(cluster_runs(vectors, config), vectors, config).labels
    return labels, time.perf_counter() - clock


def named(terms: list[str], texts: list[str], labels: np.ndarray) -> str:
    """Which theme each term names (``term -> N``; ``term -> ?(a,b)`` when several themes have it
    among their top terms, ``term -> -`` when none has)."""
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
    parser.add_argument("--min-books", type=int, default=None, help="for a corpus of fewer books than the default needs")
    parser.add_argument("--cache-dir", default=None, help="embedding cache (default: the user cache; a new one embeds the corpus)")
    parser.add_argument("--runs", default="1,9", help="numbers of clusterings to compare (1: the study's single run)")
    parser.add_argument("--seeds", type=int, default=2, help="noise seeds per number of clusterings (default 2)")
    parser.add_argument("--noise", type=float, default=1e-7, help="standard deviation of the noise added to each vector component")
    parser.add_argument("--other-seed", action="store_true", help="also compare with the themes of --seed + 1")
    parser.add_argument("--terms", default="writing,essay,essays,starting,startup,startups", help="terms whose theme is looked up")
    args = parser.parse_args()
    terms = [t for t in args.terms.split(",") if t]
    config = ThemesConfig(corpus=args.corpus, **({"min_books": args.min_books} if args.min_books else {}))
    texts = [c.text for c in cut_corpus(config)]
    vectors = load_embedder(config.embedder, cache_dir=args.cache_dir).embed(texts, kind="document")
    print(f"machine   {os.cpu_count()} cores; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}; "
          f"date {time.strftime('%Y-%m-%d')}")
    print(f"corpus    {args.corpus}: {len(texts)} chunks, vectors {vectors.dtype} {vectors.shape[1]}-d, "
          f"median |component| {np.median(np.abs(vectors)):.3g}; noise sd {args.noise:g}")
    print(f"{'runs':>4} {'against':<12} {'ARI':>6} {'ARI themed':>10} {'themes':>6} {'noise':>6} {'seconds':>7}  terms")
    summary = []
    for runs in int_list(args.runs, "--runs"):
        settings = dataclasses.replace(config, runs=runs)
        reference, seconds = themes_of(vectors, settings)

        def report(name: str, labels: np.ndarray, took: float, *, reference=reference, runs=runs) -> float:
            ari = adjusted_rand_score(reference, labels)
            both = (reference != NOISE) & (labels != NOISE)
            themed = adjusted_rand_score(reference[both], labels[both]) if both.any() else float("nan")
            print(f"{runs:>4} {name:<12} {ari:6.3f} {themed:10.3f} {labels.max() + 1:6d} {(labels == NOISE).mean():6.1%} {took:7.1f}  "
                  f"{named(terms, texts, labels)}", flush=True)
            return ari

        report("itself", reference, seconds)
        scores = []
        for seed in range(args.seeds):
            noisy = (vectors + np.random.default_rng(seed).normal(scale=args.noise, size=vectors.shape)).astype(vectors.dtype)
            scores.append(report(f"noise s{seed}", *themes_of(noisy, settings)))
        other = report(f"seed {config.seed + 1}", *themes_of(vectors, dataclasses.replace(settings, seed=config.seed + 1))) \
            if args.other_seed else None
        summary.append((runs, scores, other, seconds))
    for runs, scores, other, seconds in summary:
        said = [f"ARI under noise {args.noise:g} over {len(scores)} seeds: mean {np.mean(scores):.3f}, min {np.min(scores):.3f}"
                ] if scores else []
        said += [f"against seed {config.seed + 1}: {other:.3f}"] if other is not None else []
        print(f"runs {runs}: " + "; ".join(said + [f"{seconds:.0f} s for the clusterings and consensus"]))


if __name__ == "__main__":
    main()

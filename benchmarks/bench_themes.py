"""Corpus themes at scale: the ten shared Gutenberg books cut into 1-3-sentence chunks
(about 64,000), embedded by all-MiniLM-L6-v2 through the cache (timed apart: not in the rate), then
the study's UMAP (30 neighbours, min_dist 0.05, 50 dimensions) and HDBSCAN (10 / 15), the 2-D map
and the MMR representatives. Prints where the time goes, chunks/s for UMAP + HDBSCAN with the
embedding excluded, and numba's first-use compile time (a tiny UMAP in a fresh process).

    PYTHONPATH=. python benchmarks/bench_themes.py                 # the ten books (../shared)
    PYTHONPATH=. python benchmarks/bench_themes.py --corpus shakespeare
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from embedeval.experiments.themes.config import ThemesConfig, UmapSettings
from embedeval.experiments.themes.fitting import fit_umap
from embedeval.experiments.themes.run import run_themes

BOOKS = Path(__file__).resolve().parent.parent.parent / "shared" / "haystacks" / "gutenberg"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=f"dir:{BOOKS}/*.txt" if BOOKS.is_dir() else "shakespeare")
    parser.add_argument("--cache-dir", default=None, help="embedding cache (default: a temporary one; reuse one to skip embedding)")
    args = parser.parse_args()
    start = time.perf_counter()
    fit_umap(np.random.default_rng(0).normal(size=(200, 16)).astype(np.float32), UmapSettings(15, 0.05, 5), 42)
    compile_seconds = time.perf_counter() - start
    with tempfile.TemporaryDirectory(prefix="bench-themes-") as tmp:
        config = ThemesConfig(corpus=args.corpus, out=str(Path(tmp) / "themes"))
        result = run_themes(config, progress=False, cache_dir=args.cache_dir or Path(tmp) / "cache")
    n = len(result.chunks)
    timings = result.timings
    clustering = timings["umap"] + timings["hdbscan"]
    print(f"machine          {os.cpu_count()} cores; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"corpus           {args.corpus}: {n} chunks ({config.chunker}), {len(result.clusters)} clusters, "
          f"noise {(result.chunks['cluster'] == -1).mean():.1%}, largest {result.clusters['size'].iloc[0]} chunks")
    print(f"numba compile    {compile_seconds:6.1f} s   (a tiny UMAP, first use in this process)")
    for step in ("chunking", "embedding", "umap", "hdbscan", "map"):
        print(f"{step:<16} {timings[step]:6.1f} s")
    print(f"UMAP + HDBSCAN   {clustering:6.1f} s   -> {n / clustering:,.0f} chunks/s (embedding excluded)")
    print(f"peak RSS         {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()

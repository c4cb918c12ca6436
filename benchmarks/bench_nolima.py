"""The full default NoLiMa sweep with all-MiniLM-L6-v2, against the floor of encoding directly.

In one run, on the same unique texts (haystacks, the negative pool and the normalising needles as
documents, questions as queries):
  direct  ``model.encode`` on the unique texts, nothing else (the floor); the pool of needle-free
          negatives (100 per length) is encoded apart, to print its share of the time,
  cold    ``run_nolima`` with an empty embedding cache (embedding, token counts, metrics,
          report; the haystacks are built once beforehand and reused by both runs),
  warm    the same ``run_nolima`` again (everything from the cache).
Prints the times, the pool's share, cold/direct (target <= 1.15) and warm/cold (target <= 0.05),
and peak RSS.
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from pathlib import Path

from embedeval.embedders.local import SentenceTransformerEmbedder
from embedeval.experiments.nolima import NolimaConfig, load_or_build_haystacks, run_nolima
from embedeval.labels import NEGATIVE
from embedeval.needles import STANDARD_NEEDLE


def main(corpus: str = "shakespeare") -> None:
    with tempfile.TemporaryDirectory() as folder:
        config = NolimaConfig(corpus=corpus, out=str(Path(folder) / "run"))
        needle_set = config.validate()
        start = time.perf_counter()
        haystacks = load_or_build_haystacks(config, needle_set, progress=False)
        build = time.perf_counter() - start

        negative = haystacks["variant"] == NEGATIVE
        pool = sorted(set(haystacks.loc[negative, "text"]))
        needles = {g.needles[STANDARD_NEEDLE[v]] for g in needle_set.groups for v in config.variants}
        documents = sorted((set(haystacks.loc[~negative, "text"]) | needles) - set(pool))
        questions = [g.question for g in needle_set.groups]
        model = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
        model.embed(documents[:32])  # warm up kernels
        start = time.perf_counter()
        model.model.encode(documents, batch_size=model.batch_size, normalize_embeddings=True)
        model.model.encode(questions, batch_size=model.batch_size, normalize_embeddings=True)
        middle = time.perf_counter()
        model.model.encode(pool, batch_size=model.batch_size, normalize_embeddings=True)
        direct, direct_pool = time.perf_counter() - start, time.perf_counter() - middle

        start = time.perf_counter()
        run_nolima(config, progress=False, cache_dir=Path(folder) / "cache")
        cold = time.perf_counter() - start
        start = time.perf_counter()
        result = run_nolima(config, progress=False, cache_dir=Path(folder) / "cache")
        warm = time.perf_counter() - start

    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"corpus           {corpus}")
    print(f"haystacks        {len(haystacks)} built in {build:.1f} s; unique texts {len(documents) + len(pool) + len(questions)}")
    print(f"direct encode    {direct:8.2f} s   of which the negative pool ({len(pool)} texts) {direct_pool:.2f} s "
          f"= {direct_pool / direct:.1%}")
    print(f"cold run_nolima  {cold:8.2f} s   cold/direct = {cold / direct:.3f}  (target <= 1.15)")
    print(f"warm run_nolima  {warm:8.2f} s   warm/cold   = {warm / cold:.3f}  (target <= 0.05)")
    print(f"warm rerun embedded {sum(result.newly_embedded.values())} texts")
    print(f"peak RSS         {peak_mb:.0f} MB")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "shakespeare")

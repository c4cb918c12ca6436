"""Haystack construction speed and memory on the full default grid.

Builds 7 lengths x 10 depths x 2 variants + controls for every group of the shipped needle set
from the ten books in ../shared/haystacks/gutenberg/, and prints corpus preparation time (split
and tokenise every book once), build time, haystacks per second and peak memory (RSS).
Target: the full grid in under 30 s on the 2-core project machine.
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

from embedeval.corpus import load_corpus
from embedeval.defaults import DEFAULT_NEEDLES
from embedeval.embedders.tokens import load_token_counter
from embedeval.grid import HaystackGrid
from embedeval.haystacks import SentencePool, build_haystacks
from embedeval.needles import load_needle_set

BOOKS = Path(__file__).resolve().parent.parent.parent / "shared" / "haystacks" / "gutenberg"


def main(books: Path = BOOKS) -> None:
    needle_set = load_needle_set(DEFAULT_NEEDLES)
    tokenizer = load_token_counter()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    corpus = load_corpus(f"dir:{books}/*.txt")  # the books, not the folder's SOURCES.md
    pool = SentencePool.from_corpus(corpus, tokenizer, banned=needle_set.character_pattern())
    prepared = time.perf_counter()
    frame = build_haystacks(needle_set, HaystackGrid(), corpus, tokenizer=tokenizer, pool=pool)
    done = time.perf_counter()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    total = done - start
    print(f"groups           {len(needle_set.groups)}")
    print(f"haystacks        {len(frame)}  ({frame['n_tokens'].sum() / 1e6:.1f} M tokens)")
    print(f"corpus prep      {prepared - start:6.2f} s  ({pool.total_tokens / 1e6:.2f} M tokens, books tokenised once)")
    print(f"build            {done - prepared:6.2f} s  -> {len(frame) / (done - prepared):.0f} haystacks/s")
    print(f"total            {total:6.2f} s  (target < 30 s: {'ok' if total < 30 else 'MISSED'})")
    print(f"peak RSS         {peak_mb:.0f} MB (before build {rss_before / 1024:.0f} MB)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else BOOKS)

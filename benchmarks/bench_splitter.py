"""Sentence splitters side by side in one run: the old regex, syntok (embedeval's splitter) and,
if it is installed, pysbd.

1. Split time of every book of a corpus (default: the 12 default Shakespeare plays).
2. The default haystack build end to end (every group of the shipped needle set, lengths
   128..8192, 10 depths, 2 variants, controls, 100 negatives per length), with each splitter
   plugged into the haystack builder; ratio to the regex.

    python benchmarks/bench_splitter.py [--corpus SPEC] [--no-build] [--repeat N]

The splitter decision in embedeval/text.py and docs/corpus.md rests on these numbers: use the
maintained splitter unless it makes the haystack build more than 3x slower end to end.
"""

from __future__ import annotations

import argparse
import re
import time

import embedeval.haystacks as haystacks
import embedeval.text as text
from embedeval.corpus import load_corpus
from embedeval.defaults import DEFAULT_CORPUS, DEFAULT_NEEDLES
from embedeval.embedders.tokens import load_token_counter
from embedeval.grid import HaystackGrid
from embedeval.needles import load_needle_set

_OLD = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"'’”)\]])\s+|\n\s*\n")  # embedeval's splitter before syntok


def regex_split(passage: str) -> list[str]:
    return [s for s in (" ".join(part.split()) for part in _OLD.split(passage)) if s]


def syntok_split(passage: str) -> list[str]:
    text._SPLIT_CACHE.clear()  # time the splitting, not the memo
    return text.split_sentences(passage)


def pysbd_splitter():
    try:
        import pysbd
    except ImportError:
        return None
    segmenter = pysbd.Segmenter(language="en", clean=False)

    def split(passage: str) -> list[str]:  # per paragraph, as embedeval feeds syntok
        return [" ".join(s.split()) for para in re.split(r"\n\s*\n", passage) if para.strip()
                for s in segmenter.segment(" ".join(para.split())) if s.strip()]
    return split


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", default=DEFAULT_CORPUS)
    parser.add_argument("--no-build", action="store_true", help="only the split times")
    parser.add_argument("--repeat", type=int, default=2, help="builds per splitter (the best is reported)")
    args = parser.parse_args()
    corpus = load_corpus(args.corpus)
    splitters = {"regex": regex_split, "syntok": syntok_split}
    if (pysbd_split := pysbd_splitter()) is not None:
        splitters["pysbd"] = pysbd_split
    print(f"corpus {args.corpus}: {len(corpus.books)} books, {corpus.n_chars / 1e6:.2f} M characters")
    split_times = {}
    for name, split in splitters.items():
        start = time.perf_counter()
        n = sum(len(split(book.text)) for book in corpus.books)
        split_times[name] = time.perf_counter() - start
        print(f"split   {name:<7} {split_times[name]:7.2f} s  {n} sentences  ({split_times[name] / split_times['regex']:.0f}x regex)")
    if args.no_build:
        return
    needle_set, tokenizer = load_needle_set(DEFAULT_NEEDLES), load_token_counter()
    banned = needle_set.character_pattern()
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in splitters}
    for _ in range(args.repeat):  # alternate the splitters, so drift of a shared machine hits all alike
        for name, split in splitters.items():
            haystacks.split_sentences = split
            start = time.perf_counter()
            pool = haystacks.SentencePool.from_corpus(corpus, tokenizer, banned=banned)  # split + tokenise each book
            prepared = time.perf_counter()
            frame = haystacks.build_haystacks(needle_set, HaystackGrid(), corpus, tokenizer=tokenizer, pool=pool)
            runs[name].append((prepared - start, time.perf_counter() - prepared))
    haystacks.split_sentences = text.split_sentences
    best = {name: min(sum(run) for run in times) for name, times in runs.items()}
    for name, times in runs.items():
        pool_s, build_s = min(times, key=sum)
        print(f"build   {name:<7} {best[name]:7.2f} s end to end (pool {pool_s:.2f} s + haystacks {build_s:.2f} s), "
              f"{len(frame)} haystacks, best of {args.repeat}  ({best[name] / best['regex']:.2f}x regex)")

if __name__ == "__main__":
    main()

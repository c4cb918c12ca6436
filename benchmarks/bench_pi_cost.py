"""What LongEmbed's PI (``extend-pi@L``: one table of ``L`` rows, the factor ``s = L // P`` for every
text past ``P``) costs the texts it stretches most, against ``extend-pi-dynamic`` (each text spread
over the ``P`` positions, its own factor ``(n - 1) / (P - 1)``): all-MiniLM-L6-v2 (``P`` = 512
positions, a 256-token window) on the CPU, cosines between unit vectors, mean and minimum over
``--texts`` passages of the default corpus (one per play, from its middle).

1. Short texts (64-254 content tokens, the model's window): cos(truncate, extend-pi@L) and
   cos(truncate, extend-pi-dynamic@L). Both read a text within ``P`` as the model does (LongEmbed
   multiplies its ids by ``s``: rows ``i s`` of the stretched table are the model's own), so both
   are 1 to float precision. Beside them, what the paper's ``f_pi(pid) = pid / s`` read literally
   would give, every text stretched (a short text reading rows ``0 .. n-1`` of the ``L``-row
   table): not a strategy, the cost the ``n <= P`` rule avoids.
2. Texts just past ``P`` (513, 600 and 1,000 content tokens): cos against the model's own reading
   of the text's first 510 content tokens (512 with [CLS] and [SEP]: no stretching), for
   extend-pi@L and extend-pi-dynamic@L. extend-pi-dynamic reads a 513-token text at factor 1.006,
   extend-pi@8194 at 16.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/bench_pi_cost.py      # about a minute on one core
"""

from __future__ import annotations

import argparse
import contextlib

import numpy as np

from embedeval.corpus import load_corpus
from embedeval.defaults import DEFAULT_CORPUS
from embedeval.embedders.local import SentenceTransformerEmbedder
from embedeval.embedders.requests import StretchedIds, TokenIds
from embedeval.embedders.stretch import longembed_factor, longembed_table
from embedeval.embedders.stretch_methods import Stretch

LENGTHS_L = (1026, 2050, 8194)
SHORT = (64, 128, 254)
PAST_P = (513, 600, 1000)
REFERENCE = 510  # content tokens the model reads unstretched: 512 positions with [CLS] and [SEP]


def passages(model, count: int) -> list[list[int]]:
    """The content ids of ``count`` passages of at least ``max(PAST_P)`` tokens, one per play, from its middle."""
    books = load_corpus(DEFAULT_CORPUS).books[:count]
    texts = [book.text[len(book.text) // 2:][:12_000] for book in books]
    ids = [list(map(int, seq)) for seq, _ in model.token_ids(texts)]
    assert all(len(seq) >= max(PAST_P) for seq in ids)
    return ids


@contextlib.contextmanager
def every_text_stretched(model, rows: int):
    """The model's position table swapped for LongEmbed's ``rows``-row table within the block, so
    that a text of ``n <= P`` tokens reads rows ``0 .. n-1`` of it (the paper's ``pid / s`` for every text)."""
    import torch

    embeddings = model._transformer().embeddings
    table = embeddings.position_embeddings
    wide = longembed_table(table.weight.detach().double().numpy(), rows)
    embeddings.position_embeddings = torch.nn.Embedding.from_pretrained(torch.from_numpy(wide).to(table.weight.dtype))
    try:
        yield
    finally:
        embeddings.position_embeddings = table


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1)  # unit vectors


def row(name: str, values: list[np.ndarray]) -> str:
    return f"{name:<44}" + "".join(f"  {v.mean():.4f} ({v.min():.4f})" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", type=int, default=8, help="passages, one per play (at most 12)")
    args = parser.parse_args()
    model = SentenceTransformerEmbedder("all-MiniLM-L6-v2", device="cpu")
    ids = passages(model, args.texts)
    limit = model.positions()
    dynamic = Stretch("pi-dynamic")
    print(f"all-MiniLM-L6-v2, P = {limit}; {len(ids)} passages of {DEFAULT_CORPUS}; cosine mean (min) per length")

    print(f"\n1. texts within the window: cos(truncate, ...)  {'':<4}" + "".join(f"  {n:>6} tokens   " for n in SHORT))
    truncated = {n: model.embed_request(TokenIds.of([seq[:n] for seq in ids])) for n in SHORT}
    print(row("extend-pi-dynamic@L (any L)", [cosines(truncated[n], model.embed_request(StretchedIds.of([s[:n] for s in ids], dynamic))) for n in SHORT]))
    for rows in LENGTHS_L:
        fixed = Stretch("pi", length=rows)
        print(row(f"extend-pi@{rows}", [cosines(truncated[n], model.embed_request(StretchedIds.of([s[:n] for s in ids], fixed))) for n in SHORT]))
    for rows in LENGTHS_L:
        with every_text_stretched(model, rows):
            # gp reads a text within P at ids 0 .. n-1: here, rows 0 .. n-1 of the swapped-in table
            literal = [cosines(truncated[n], model.embed_request(StretchedIds.of([s[:n] for s in ids], Stretch("gp")))) for n in SHORT]
        print(row(f"every text at s = {longembed_factor(rows, limit)} (not a strategy)", literal))

    print(f"\n2. texts past P: cos(first {REFERENCE} read unstretched, ...)" + "".join(f"  {n:>6} tokens   " for n in PAST_P))
    reference = model.embed_request(StretchedIds.of([seq[:REFERENCE] for seq in ids], dynamic))  # 512 tokens: within P, as the model reads them
    print(row("extend-pi-dynamic@L (any L >= n + 2)", [cosines(reference, model.embed_request(StretchedIds.of([s[:n] for s in ids], dynamic)))
                                                       for n in PAST_P]))
    for rows in LENGTHS_L:
        fixed = Stretch("pi", length=rows)
        print(row(f"extend-pi@{rows} (s = {longembed_factor(rows, limit)})",
                  [cosines(reference, model.embed_request(StretchedIds.of([s[:n] for s in ids], fixed))) for n in PAST_P]))


if __name__ == "__main__":
    main()

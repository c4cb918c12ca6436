"""Local vs Ray executors on the same texts: what Ray costs on one machine.

In one process, side by side, each into an empty embedding cache, all-MiniLM-L6-v2 embeds the
same ``--texts`` token-id inputs (haystack-like passages of the Shakespeare corpus, cut to the
model's window) the way a sweep does (``CachedTokenIdEmbedder.embed_request`` of token ids, commits every
``--commit-every``):
  local   the model in this process (torch on every core),
  ray x1  one Ray actor (all the CPUs, as many torch threads),
  ray x2  two Ray actors (half the CPUs each).
Printed per executor: seconds, texts/s, and the ratio to local; Ray's start-up (cluster start,
actors loading the model) is timed apart, outside the ratios, as it is paid once per run. Every
executor's vectors are checked equal to local's. Target: ray x1 <= 1.3 x local.

Then an API sweep at a budget: ``openai:text-embedding-3-small`` against the loopback fake server
of the tests (tests/fake_api.py, 127.0.0.1 only) embeds ``--api-texts`` of the same passages with
``--tpm`` tokens per ``--period`` seconds (the per-minute budget scaled down so the run is short);
printed: seconds, tokens sent, the tokens per period achieved against the budget, requests.

Last, the driver's cache write rate, what a cluster of fast workers is bounded by: random vectors
of 384 and 1024 dimensions stored with ``EmbeddingCache.put_many`` in commits of ``--commit-every``;
printed: vectors/s, MB/s and bytes on disk per vector (the inputs of docs/scale.md's estimate).

    PYTHONPATH=. python benchmarks/bench_executors.py             # 2,000 texts (a few minutes on 2 cores)
    PYTHONPATH=. python benchmarks/bench_executors.py --texts 200 --api-texts 100   # a smoke run
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from embedeval.corpus import load_corpus
from embedeval.embedders.cache import EmbeddingCache
from embedeval.embedders.cached import CachedTokenIdEmbedder
from embedeval.embedders.executors import Executor, RayEmbedder
from embedeval.embedders.local import SentenceTransformerEmbedder
from embedeval.embedders.requests import TokenIds

MODEL = "all-MiniLM-L6-v2"
RAY_CEILING = 1.3


def passages(n: int) -> list[str]:
    """``n`` distinct passages of about 1,500 characters from the Shakespeare corpus."""
    text = " ".join(book.text for book in load_corpus("shakespeare").books)
    step = max(1, (len(text) - 1500) // n)
    return [text[i * step: i * step + 1500] for i in range(n)]


def timed_embed(embedder, ids, commit_every: int) -> tuple[float, np.ndarray]:
    with tempfile.TemporaryDirectory() as folder:
        cached = CachedTokenIdEmbedder(embedder, EmbeddingCache(folder), commit_every=commit_every)
        start = time.perf_counter()
        vectors = cached.embed_request(TokenIds.of(ids))
        seconds = time.perf_counter() - start
        cached.cache.close()
    return seconds, vectors


def api_at_budget(texts: list[str], tpm: int, period: float) -> None:
    """Embed ``texts`` with a fake OpenAI model at ``tpm`` tokens per ``period`` seconds and
    print how close the sweep ran to its budget."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from embedeval.embedders import budget
    from embedeval.embedders.registry import load_embedder

    from fake_api import FakeEmbeddingServer

    with FakeEmbeddingServer() as server, tempfile.TemporaryDirectory() as folder:
        os.environ.update({"OPENAI_API_KEY": "sk-fake-bench", "OPENAI_BASE_URL": f"{server.url}/v1",
                           budget.PERIOD_ENV: str(period)})
        budget.reset()
        budget.configure(tpm={"openai": tpm})
        model = load_embedder("openai:text-embedding-3-small", cache_dir=folder, verify=False)
        tokens = sum(model.count_tokens(texts))
        start = time.perf_counter()
        model.embed(texts)
        seconds = time.perf_counter() - start
        requests = len(server.requests)
        budget.reset()
    per_period = tokens / seconds * period
    print(f"\nAPI at a budget: {len(texts)} texts, {tokens} tokens (reference count), {requests} requests, "
          f"budget {tpm} tokens per {period:g} s")
    print(f"{seconds:.1f} s: {per_period:.0f} tokens per {period:g} s = {per_period / tpm:.2f} x the budget "
          f"(a sweep that runs at its budget: just under 1; the first period's burst is free, so short runs exceed it)")


def cache_write_rate(n: int, commit_every: int) -> None:
    """Store ``n`` random vectors per dimension in an empty cache, ``commit_every`` at a time."""
    print()
    for dim in (384, 1024):
        vectors = np.random.default_rng(0).normal(size=(n, dim)).astype(np.float32)
        keys = TokenIds.of([np.array([i, dim], dtype=np.int32) for i in range(n)]).cache_keys("st:bench", "f")
        with tempfile.TemporaryDirectory() as folder:
            cache = EmbeddingCache(folder)
            start = time.perf_counter()
            for at in range(0, n, commit_every):
                cache.put_many("st:bench", keys[at:at + commit_every], vectors[at:at + commit_every])
            seconds = time.perf_counter() - start
            cache.close()
            size = sum(f.stat().st_size for f in Path(folder).iterdir())
        print(f"cache writes, {dim} dims: {n / seconds:,.0f} vectors/s, {size / seconds / 1e6:.0f} MB/s, "
              f"{size / n:,.0f} bytes per vector on disk")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--commit-every", type=int, default=256)
    parser.add_argument("--api-texts", type=int, default=600)
    parser.add_argument("--tpm", type=int, default=40_000, help="token budget per --period seconds")
    parser.add_argument("--period", type=float, default=5.0)
    parser.add_argument("--cache-vectors", type=int, default=50_000)
    args = parser.parse_args()

    import ray

    local = SentenceTransformerEmbedder(MODEL)
    capacity = local.id_capacity()
    texts = passages(args.texts)
    start = time.perf_counter()
    every = local.token_ids(texts)  # every token of every text: what the driver does for windows-mean
    tokenize = time.perf_counter() - start
    ids = [seq[:capacity] for seq, _ in every]
    n_tokens = sum(len(seq) for seq, _ in every)
    print(f"driver tokenising (one process): {n_tokens / tokenize:,.0f} tokens/s "
          f"({n_tokens} tokens of {len(texts)} texts in {tokenize:.2f} s)")
    print(f"{len(ids)} texts, {sum(map(len, ids))} token ids, commit every {args.commit_every}; "
          f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, load {os.getloadavg()[0]:.2f}")
    local.embed_request(TokenIds.of(ids[:32]))  # warm the local model as the actors are warmed below
    rows = [("local", *timed_embed(local, ids, args.commit_every))]

    start = time.perf_counter()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    started = time.perf_counter() - start
    for workers in (1, 2):
        remote = RayEmbedder(local, MODEL, Executor("ray", workers=workers))
        start = time.perf_counter()
        remote.embed_request(TokenIds.of(ids[:32 * workers]))  # every actor loads the model and embeds one batch
        warm = time.perf_counter() - start
        seconds, vectors = timed_embed(remote, ids, args.commit_every)
        assert np.array_equal(vectors, rows[0][2]), f"ray x{workers} vectors differ from local"
        rows.append((f"ray x{workers}", seconds, vectors))
        print(f"ray x{workers}: actors started and warm in {warm:.1f} s (outside the ratio)")
        del remote
    ray.shutdown()
    print(f"ray cluster start: {started:.1f} s (outside the ratios)\n")

    base = rows[0][1]
    print(f"{'executor':<10} {'seconds':>8} {'texts/s':>8} {'x local':>8}")
    for name, seconds, _ in rows:
        print(f"{name:<10} {seconds:8.1f} {len(ids) / seconds:8.1f} {seconds / base:8.3f}")
    ratio = rows[1][1] / base
    print(f"\nray x1 / local = {ratio:.3f} (target <= {RAY_CEILING}): {'PASS' if ratio <= RAY_CEILING else 'FAIL'}")
    print("vectors: identical to local for every executor")
    api_at_budget(passages(args.api_texts), args.tpm, args.period)
    cache_write_rate(args.cache_vectors, args.commit_every)
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()

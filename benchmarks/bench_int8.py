"""The int8 CPU backend of local models against float32 torch (issue 30, item 3), all-MiniLM-L6-v2.

Part 1, speed and closeness: the default sweep's distinct truncated windows (what a cold default
run embeds), embedded uncached by the float32 torch model and by ``backend=onnx-int8`` side by
side in one process (the ONNX graph exported and quantized before the clock starts); the ratio of
their times (target <= 0.6) and the cosine between their vectors (median, minimum).

Part 2, fidelity: the default sweep with ``st:all-MiniLM-L6-v2?backend=onnx-int8`` beside the
float32 one (both through the user's embedding cache: the float32 run is warm after the README's
first command): recall@5 per length and variant, and the largest difference (target <= 0.02); and
how many needle rankings moved into or out of the top 5 (a difference of one ranking is 1/240 at a
length: the largest difference is a handful of them).

    PYTHONPATH=. python benchmarks/bench_int8.py            # both parts (about 5 minutes on 2 cores)
    PYTHONPATH=. python benchmarks/bench_int8.py --part 1
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from embedeval.embedders.cache import EmbeddingCache
from embedeval.embedders.local import SentenceTransformerEmbedder
from embedeval.embedders.options import LocalOptions
from embedeval.experiments import NolimaConfig, run_nolima
from embedeval.experiments.nolima import load_or_build_haystacks
from embedeval.strategies import EmbeddingScorer, parse_strategies

MODEL = "all-MiniLM-L6-v2"
INT8 = f"st:{MODEL}?backend=onnx-int8"
SPEED_CEILING, RECALL_TOLERANCE = 0.6, 0.02
#: What identifies one needle ranking in the rank table (a question's form and one haystack).
RANKING = ["query_form", "own_question", "haystack_id"]


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def distinct_windows(folder: Path) -> list[list[int]]:
    """The default sweep's distinct truncated windows, as MiniLM's token ids: what a cold default
    run embeds (the haystacks built into ``folder``)."""
    config = NolimaConfig(out=str(folder / "grid"))
    haystacks = load_or_build_haystacks(config, config.validate(), progress=False)
    scorer = EmbeddingScorer(SentenceTransformerEmbedder(MODEL, device="cpu"), parse_strategies(["truncate"])[0])
    distinct = dict.fromkeys(scorer._cut(list(dict.fromkeys(haystacks["text"]))).inputs)  # token ids, as bytes
    return [np.frombuffer(ids, dtype=np.int32).tolist() for ids in distinct]


def part_speed(folder: Path) -> None:
    windows = distinct_windows(folder)
    fp32 = SentenceTransformerEmbedder(MODEL, device="cpu")
    int8 = SentenceTransformerEmbedder(MODEL, options=LocalOptions(device="cpu", backend="onnx-int8"))
    int8.facts_store = EmbeddingCache(folder / "cache")  # its facts, and the exported graph, in this run's folder
    int8.embed_ids(windows[:8])  # export, quantize and warm up: outside the clock
    fp32.embed_ids(windows[:8])
    start = time.perf_counter()
    reference = fp32.embed_ids(windows)
    torch_seconds = time.perf_counter() - start
    start = time.perf_counter()
    quantized = int8.embed_ids(windows)
    int8_seconds = time.perf_counter() - start
    cosines = (reference * quantized).sum(axis=1)
    ratio = int8_seconds / torch_seconds
    print("== Part 1: the default sweep's distinct windows, embedded uncached ==")
    print(f"windows          {len(windows)} distinct, mean "
          f"{np.mean([len(w) for w in windows]):.0f} tokens")
    print(f"float32 torch    {torch_seconds:8.2f} s   {len(windows) / torch_seconds:6.1f} windows/s")
    print(f"onnx-int8        {int8_seconds:8.2f} s   {len(windows) / int8_seconds:6.1f} windows/s")
    print(f"int8/fp32 time   {ratio:.3f}  {'PASS' if ratio <= SPEED_CEILING else 'FAIL'} (target <= {SPEED_CEILING})")
    print(f"cosine to fp32   median {np.median(cosines):.4f}, 5th percentile {np.quantile(cosines, 0.05):.4f}, "
          f"minimum {cosines.min():.4f}")


def part_fidelity(folder: Path) -> None:
    recall, top5 = {}, {}
    for spec in (f"st:{MODEL}", INT8):
        start = time.perf_counter()
        result = run_nolima(NolimaConfig(embedders=[spec], out=str(folder / spec.split("=")[-1].replace(":", "_"))), progress=False)
        metrics = result.metrics
        rows = metrics[(metrics["metric"] == "recall@5") & (metrics["category"] == "all") & (metrics["depth_bucket"] == "all")]
        recall[spec] = rows.set_index(["variant", "length"])["value"]
        top5[spec] = result.retrieval.set_index(RANKING)["recall@5"]
        print(f"{spec:<44} {time.perf_counter() - start:6.1f} s, {sum(result.newly_embedded.values())} newly embedded")
    fp32, int8 = recall[f"st:{MODEL}"], recall[INT8]
    print("== Part 2: recall@5 on the default grid, float32 vs int8 ==")
    print(f"{'variant':<10}{'length':>7}{'fp32':>8}{'int8':>8}{'diff':>8}")
    for (variant, length), value in fp32.items():
        print(f"{variant:<10}{length:>7}{value:>8.3f}{int8[(variant, length)]:>8.3f}{int8[(variant, length)] - value:>+8.3f}")
    moved = top5[INT8] - top5[f"st:{MODEL}"].reindex(top5[INT8].index)
    print(f"top 5 changed    {int((moved > 0).sum())} needle rankings moved in, {int((moved < 0).sum())} out, "
          f"of {len(moved)}")
    worst = float((int8 - fp32).abs().max())
    print(f"largest |diff|   {worst:.3f}  {'PASS' if worst <= RECALL_TOLERANCE else 'FAIL'} (target <= {RECALL_TOLERANCE})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["1", "2", "all"], default="all")
    args = parser.parse_args()
    print(f"machine          {os.cpu_count()} cores; load average {load_average()}")
    with tempfile.TemporaryDirectory(prefix="bench-int8-") as tmp:
        if args.part in ("1", "all"):
            part_speed(Path(tmp))
        if args.part in ("2", "all"):
            part_fidelity(Path(tmp))
    print(f"load average now {load_average()} (other work on the cores skews the ratios)")


if __name__ == "__main__":
    main()

"""The int8 CPU backend of local models against float32 torch, all-MiniLM-L6-v2.

Part 1, speed and closeness: the default sweep's distinct truncated windows (what a cold default
run embeds; ``--windows N``: the first N), embedded uncached by the float32 torch model, by
``backend=onnx-int8`` (one text per call, as embedeval runs it) and by the same int8 graph fed
padded batches, side by side in one process, in turns (each warmed up, then two passes of each
alternated; the median), the ONNX graph exported and quantized before the clock starts; the ratio
of their times (target <= 0.6), what one text per call costs against batches, and the cosine
between int8's and float32's vectors (median, minimum).

Part 2, fidelity: the default sweep with ``st:all-MiniLM-L6-v2?backend=onnx-int8`` beside the
float32 one (both through the user's embedding cache: the float32 run is warm after the README's
first command): recall@5 per length and variant, and the largest difference (target <= 0.02); and
how many needle rankings moved into or out of the top 5 (a difference of one ranking is 1/240 at a
length: the largest difference is a handful of them).

Part 3, fidelity on what int8 reads: under ``truncate`` the model reads at most
254 tokens of a haystack, so parts 1 and 2 say little about the long haystacks. One sweep runs
both embedders side by side with ``truncate`` and ``windows-mean`` (the whole text, in consecutive
full windows) over 128..8192 tokens on a 12-group grid (two groups per category, one-hop needles,
``--depths`` 3, 10 negatives), and prints per strategy: recall@5 and the pooled AUC per length
(fp32, int8, difference), and the break points from ``breaks.csv`` (relative rule with its
bootstrap interval, censored ones as "≥ L"; the pooled-AUC break point) for both.

    PYTHONPATH=. python benchmarks/bench_int8.py            # parts 1 and 2 (about 5 minutes on 2 cores)
    PYTHONPATH=. python benchmarks/bench_int8.py --part 1 [--windows 300]
    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/bench_int8.py --part 3 [--depths 2] [--out runs/bench-int8-windows]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from embedeval.embedders import onnx
from embedeval.embedders.cache import EmbeddingCache
from embedeval.embedders.local import SentenceTransformerEmbedder
from embedeval.embedders.options import LocalOptions
from embedeval.embedders.requests import TokenIds
from embedeval.experiments import NolimaConfig, run_nolima
from embedeval.experiments.nolima import load_or_build_haystacks
from embedeval.grid import HaystackGrid
from embedeval.labels import ALL, QUESTION
from embedeval.report.break_words import interval_text, tokens_text
from embedeval.strategies import EmbeddingScorer, parse_strategies

MODEL = "all-MiniLM-L6-v2"
INT8 = f"st:{MODEL}?backend=onnx-int8"
SPEED_CEILING, RECALL_TOLERANCE = 0.6, 0.02
TURNS = 2  # Part 1: timed passes per backend, alternated
#: What identifies one needle ranking in the rank table (a question's form and one haystack).
RANKING = ["query_form", "own_question", "haystack_id"]
#: Part 3's grid: two question groups per category, one-hop needles, 128..8192 tokens.
WINDOW_GROUPS = ("loc-dresden", "loc-peru", "diet-vegan", "diet-lactose", "med-diabetes", "med-asthma",
                 "lang-portuguese", "lang-greek", "job-pilot", "job-lawyer", "hobby-chess", "hobby-piano")
WINDOW_LENGTHS = (128, 256, 512, 1024, 2048, 4096, 8192)
WINDOW_STRATEGIES = ("truncate", "windows-mean")
WINDOW_NEGATIVES = 10


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def distinct_windows(folder: Path) -> list[list[int]]:
    """The default sweep's distinct truncated windows, as MiniLM's token ids: what a cold default
    run embeds (the haystacks built into ``folder``)."""
    config = NolimaConfig(out=str(folder / "grid"))
    haystacks = load_or_build_haystacks(config, config.validate(), progress=False)
    scorer = EmbeddingScorer(SentenceTransformerEmbedder(MODEL, device="cpu"), parse_strategies(["truncate"])[0])
    distinct = dict.fromkeys(scorer.cut(list(dict.fromkeys(haystacks["text"]))).inputs)  # token ids, as bytes
    return [np.frombuffer(ids, dtype=np.int32).tolist() for ids in distinct]


def part_speed(folder: Path, turns: int = TURNS, sample: int | None = None) -> None:
    """float32 torch, int8 as embedeval runs it (one text per call) and int8 batched (the graph fed
    padded batches: not offered, since a batch shares one activation scale), timed side by side in
    turns (each warmed up, then ``turns`` passes of each alternated; the median), on the default
    sweep's distinct windows (``sample``: the first N of them)."""
    windows = distinct_windows(folder)[:sample]
    fp32 = SentenceTransformerEmbedder(MODEL, device="cpu")
    int8 = SentenceTransformerEmbedder(MODEL, options=LocalOptions(device="cpu", backend="onnx-int8"))
    int8.facts_store = EmbeddingCache(folder / "cache")  # its facts, and the exported graph, in this run's folder
    batched = SentenceTransformerEmbedder(MODEL, options=LocalOptions(device="cpu", backend="onnx-int8"))
    batched.facts_store = int8.facts_store
    int8.embed_request(TokenIds.of(windows[:8]))  # export, quantize and warm up: outside the clock
    batched.embed_request(TokenIds.of(windows[:8]))
    onnx.use_onnx(batched.model, next(p for p in onnx.graph_files(folder / "cache") if p.name == onnx.INT8_GRAPH),
                  torch.get_num_threads(), one_text_per_call=False)  # the same graph, fed padded batches
    models = {"float32 torch": fp32, "onnx-int8": int8, "int8 batched": batched}
    vectors: dict[str, np.ndarray] = {}
    seconds: dict[str, list[float]] = {name: [] for name in models}
    for model in models.values():  # a warm-up pass of each, outside the clock
        model.embed_request(TokenIds.of(windows[: min(64, len(windows))]))
    for _ in range(turns):
        for name, model in models.items():
            start = time.perf_counter()
            vectors[name] = model.embed_request(TokenIds.of(windows))
            seconds[name].append(time.perf_counter() - start)
    median = {name: float(np.median(found)) for name, found in seconds.items()}
    cosines = (vectors["float32 torch"] * vectors["onnx-int8"]).sum(axis=1)
    ratio = median["onnx-int8"] / median["float32 torch"]
    print(f"== Part 1: the default sweep's distinct windows, embedded uncached, {turns} passes each in turns ==")
    print(f"windows          {len(windows)} distinct{' (the first ' + str(sample) + ')' if sample else ''}, mean "
          f"{np.mean([len(w) for w in windows]):.0f} tokens; load average {load_average()}")
    for name in models:
        passes = ", ".join(f"{s:.1f}" for s in seconds[name])
        print(f"{name:16s} {median[name]:8.2f} s   {len(windows) / median[name]:6.1f} windows/s   "
              f"time vs float32 {median[name] / median['float32 torch']:.3f}   (passes {passes})")
    print(f"int8/fp32 time   {ratio:.3f}  {'PASS' if ratio <= SPEED_CEILING else 'FAIL'} (target <= {SPEED_CEILING}); "
          f"one text per call costs {median['onnx-int8'] / median['int8 batched']:.2f}x batched int8's time")
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


def _one_needle_question(table):
    """The rows of ``table`` (metrics or breaks) for the question form of one-needle haystacks
    without distractors: the only series part 3's grid has."""
    return table[(table["query_form"] == QUESTION) & (table["n_distractors"] == 0) & (table["n_needles"] == 1)
                 & table["own_question"].astype(bool)]


def part_windows(folder: Path, depths: int, out: str | None) -> None:
    fp32_spec = f"st:{MODEL}"
    config = NolimaConfig(embedders=(fp32_spec, INT8), groups=WINDOW_GROUPS, strategies=WINDOW_STRATEGIES,
                          grid=HaystackGrid(lengths=WINDOW_LENGTHS, depths=depths, variants=("onehop",),
                                            negatives=WINDOW_NEGATIVES),
                          out=out or str(folder / "windows"))
    start = time.perf_counter()
    result = run_nolima(config, progress=False)
    newly = ", ".join(f"{spec}: {count}" for spec, count in result.newly_embedded.items())
    print(f"== Part 3: fp32 vs int8 per strategy, {len(WINDOW_GROUPS)} groups, one-hop, depths {depths}, "
          f"{WINDOW_NEGATIVES} negatives ==")
    print(f"sweep            {time.perf_counter() - start:.1f} s, newly embedded {newly}; run folder {config.out}")
    metrics = _one_needle_question(result.metrics)
    metrics = metrics[(metrics["category"] == ALL) & (metrics["depth_bucket"] == ALL) & (metrics["variant"] == "onehop")]
    values = metrics[metrics["metric"].isin(["recall@5", "auc"])].set_index(["strategy", "metric", "embedder", "length"])["value"]
    breaks = _one_needle_question(result.breaks).set_index(["strategy", "embedder"])
    ranks = _one_needle_question(result.retrieval)
    for strategy in WINDOW_STRATEGIES:
        print(f"-- {strategy} --")
        print(f"{'length':>7}{'recall@5 fp32':>15}{'int8':>7}{'diff':>8}{'pooled AUC fp32':>17}{'int8':>7}{'diff':>8}")
        for length in WINDOW_LENGTHS:
            cells = []
            for metric in ("recall@5", "auc"):
                fp32, int8 = values[(strategy, metric, fp32_spec, length)], values[(strategy, metric, INT8, length)]
                cells.append(f"{fp32:>{15 if metric == 'recall@5' else 17}.3f}{int8:>7.3f}{int8 - fp32:>+8.3f}")
            print(f"{length:>7}" + "".join(cells))
        for spec, label in ((fp32_spec, "fp32"), (INT8, "int8")):
            row = next(breaks.loc[[(strategy, spec)]].itertuples())
            print(f"{label} break point  {interval_text(row)} (relative rule, recall@5; 90% bootstrap interval), "
                  f"recommended chunk {tokens_text(row.recommended_chunk_tokens)}; base {row.base_value:.3f} "
                  f"[{row.base_ci_lo:.3f}, {row.base_ci_hi:.3f}] over {row.base_lengths}; "
                  f"pooled-AUC break point {tokens_text(row.auc_break_point)}")
        in_top5 = ranks[ranks["strategy"] == strategy].pivot_table(index=RANKING, columns="embedder", values="recall@5")
        moved = in_top5[INT8] - in_top5[fp32_spec]
        per_length = len(moved) // len(WINDOW_LENGTHS)
        print(f"top 5 changed    {int((moved > 0).sum())} needle rankings moved in, {int((moved < 0).sum())} out, of "
              f"{len(moved)} ({per_length} a length: one ranking moves a length's recall@5 by {1 / per_length:.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["1", "2", "3", "all"], default="all",
                        help="all: parts 1 and 2; part 3 (the long sweep) runs when asked for by name")
    parser.add_argument("--depths", type=int, default=3, help="part 3: needle depths per length")
    parser.add_argument("--windows", type=int, default=None, help="part 1: time the first N distinct windows only")
    parser.add_argument("--out", default=None, help="part 3: keep the sweep's run folder here (default: a temporary one)")
    args = parser.parse_args()
    print(f"machine          {os.cpu_count()} cores; load average {load_average()}")
    with tempfile.TemporaryDirectory(prefix="bench-int8-") as tmp:
        if args.part in ("1", "all"):
            part_speed(Path(tmp), sample=args.windows)
        if args.part in ("2", "all"):
            part_fidelity(Path(tmp))
        if args.part == "3":
            part_windows(Path(tmp), args.depths, args.out)
    print(f"load average now {load_average()} (other work on the cores skews the ratios)")


if __name__ == "__main__":
    main()

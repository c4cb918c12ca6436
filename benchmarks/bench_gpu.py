"""Local models on a GPU; without CUDA it says so and exits 0.

Every comparison is measured side by side in one run, in turns (A, B, A, B: the median of each),
each setting warmed up on the same inputs before it is timed, and with both attention settings:

- ``no cuDNN``: what embedeval runs on CUDA (:func:`embedeval.embedders.batching.attention_kernels`:
  flash, memory-efficient and math kernels; cuDNN's attention left out, since it builds a plan per
  input shape);
- ``cuDNN allowed``: PyTorch's own choice (cuDNN's attention kernel included), as before that fix.

Part 1: all-MiniLM-L6-v2's windows/s on the default sweep's distinct truncated windows, float32 and
``dtype=float16``, per attention setting, and the cosine between float16 and float32 vectors; then
4,096 windows of random lengths 60-254 in float16, a first pass (new shapes) and a second pass (the
same shapes again) per attention setting; then a raw float16 forward (the model alone, padded
batches of 256 windows) against embedeval's ``embed_ids`` on the same windows.
Part 2: a ModernBERT-base-shaped model (random weights: 22 layers, hidden 768, 8192 positions) in
float16 at 2,048 and 8,192 tokens per attention setting: tokens/s, peak GPU memory, the batch
shapes the token budget cut; then with the process capped to a share of the GPU's memory
(``torch.cuda.set_per_process_memory_fraction``), so that batches may run out of memory and be
halved (the backoffs are counted).

    PYTHONPATH=. python benchmarks/bench_gpu.py                   # both parts, both attention settings
    PYTHONPATH=. python benchmarks/bench_gpu.py --attention no-cudnn
    PYTHONPATH=. python benchmarks/bench_gpu.py --part 1
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from embedeval.embedders import batching
from embedeval.embedders.local import SentenceTransformerEmbedder
from embedeval.embedders.options import LocalOptions
from embedeval.embedders.requests import TokenIds

MEMORY_CAP = 0.08  # share of the GPU's memory Part 2's capped run may use
TURNS = 2  # timed passes per setting, alternated with the other setting's
NO_CUDNN, CUDNN = "no cuDNN", "cuDNN allowed"
#: The attention settings, as --attention names them.
ATTENTION = {"no-cudnn": NO_CUDNN, "cudnn": CUDNN}


@contextlib.contextmanager
def attention(setting: str):
    """Forward passes inside the block use embedeval's kernels (``no cuDNN``) or PyTorch's own
    choice (``cuDNN allowed``: :func:`batching.attention_kernels` patched to leave the choice alone)."""
    if setting == NO_CUDNN:
        yield
        return
    original = batching.attention_kernels
    batching.attention_kernels = lambda device: contextlib.nullcontext()
    try:
        yield
    finally:
        batching.attention_kernels = original


def default_windows(folder: Path) -> list[list[int]]:
    """The default sweep's distinct truncated windows (MiniLM token ids): what a cold default run embeds."""
    from bench_int8 import distinct_windows

    return distinct_windows(folder)


def timed(model: SentenceTransformerEmbedder, ids: list[list[int]]) -> tuple[np.ndarray, float]:
    torch.cuda.synchronize()
    start = time.perf_counter()
    vectors = model.embed_request(TokenIds.of(ids))
    torch.cuda.synchronize()
    return vectors, time.perf_counter() - start


def in_turns(runs: dict[str, callable], turns: int = TURNS) -> dict[str, float]:
    """Each labelled run once to warm up, then ``turns`` timed passes of each, alternated; the
    median seconds per label."""
    for run in runs.values():
        run()
    seconds: dict[str, list[float]] = {label: [] for label in runs}
    for _ in range(turns):
        for label, run in runs.items():
            seconds[label].append(run())
    return {label: float(np.median(found)) for label, found in seconds.items()}


def minilm(dtype: str) -> SentenceTransformerEmbedder:
    options = LocalOptions(device="cuda", dtype=dtype) if dtype != "float32" else LocalOptions(device="cuda")
    return SentenceTransformerEmbedder("all-MiniLM-L6-v2", options=options)


def part_minilm(folder: Path, settings: list[str]) -> None:
    windows = default_windows(folder)
    models = {dtype: minilm(dtype) for dtype in ("float32", "float16")}
    print(f"== Part 1: all-MiniLM-L6-v2 on {torch.cuda.get_device_name()} (torch {torch.__version__}) ==")
    print(f"the default sweep's {len(windows):,} distinct windows; median of {TURNS} timed passes after a warm-up, in turns")

    def pass_of(dtype: str, setting: str):
        def run() -> float:
            with attention(setting):
                return timed(models[dtype], windows)[1]
        return run

    seconds = in_turns({(dtype, setting): pass_of(dtype, setting) for setting in settings for dtype in models})
    for setting in settings:
        full, half = seconds[("float32", setting)], seconds[("float16", setting)]
        print(f"{setting:14s} float32 {len(windows) / full:9,.0f} windows/s   float16 {len(windows) / half:9,.0f} windows/s   "
              f"fp16/fp32 time {half / full:.3f}")
    with attention(settings[0]):
        full_vectors, half_vectors = timed(models["float32"], windows)[0], timed(models["float16"], windows)[0]
    cosines = (full_vectors * half_vectors).sum(axis=1)
    print(f"cosine fp16-fp32 median {np.median(cosines):.5f}, minimum {cosines.min():.5f}")

    rng = np.random.default_rng(0)
    shaped = [rng.integers(1000, 30000, size=int(n)).tolist() for n in rng.integers(60, 255, size=4096)]
    print("4,096 windows of random lengths 60-254, float16: first pass (new shapes), then a second (the same shapes)")
    for setting in settings:
        fresh = minilm("float16")  # a model whose kernels have seen none of these shapes
        with attention(setting):
            fresh.embed_request(TokenIds.of(shaped[:8]))  # loaded and warmed up on a few shapes: outside the clock
            first = timed(fresh, shaped)[1]
            second = timed(fresh, shaped)[1]
        print(f"{setting:14s} first pass {len(shaped) / first:9,.0f} windows/s   second pass {len(shaped) / second:9,.0f} windows/s")
        del fresh
        torch.cuda.empty_cache()

    half = models["float16"]
    batch = 256
    pad = half.model.tokenizer.pad_token_id

    def raw() -> float:
        """The model alone: padded [CLS] ids [SEP] batches of 256 windows, one forward each."""
        transformer = half.model
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.inference_mode(), batching.attention_kernels("cuda"):
            for first in range(0, len(windows), batch):
                rows = [[101, *w, 102] for w in windows[first : first + batch]]
                width = max(map(len, rows))
                ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device="cuda")
                mask = (ids != pad).long()
                transformer({"input_ids": ids, "attention_mask": mask})
        torch.cuda.synchronize()
        return time.perf_counter() - start

    def framed() -> float:
        with attention(NO_CUDNN):
            return timed(half, windows)[1]

    found = in_turns({"raw forward": raw, "embed_ids": framed})
    print(f"float16, {NO_CUDNN}: raw forward (batches of {batch}) {len(windows) / found['raw forward']:9,.0f} windows/s   "
          f"embedeval embed_ids {len(windows) / found['embed_ids']:9,.0f} windows/s")


def modernbert_base(folder: Path) -> Path:
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoModel, AutoTokenizer, ModernBertConfig

    from embedeval.embedders.models import resolve_model_path

    config = ModernBertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=22, num_attention_heads=12,
                              intermediate_size=1152, max_position_embeddings=8194, pad_token_id=0, cls_token_id=101,
                              sep_token_id=102, bos_token_id=101, eos_token_id=102)
    AutoModel.from_config(config).save_pretrained(folder / "weights")
    AutoTokenizer.from_pretrained(resolve_model_path("all-MiniLM-L6-v2")).save_pretrained(folder / "weights")
    model = SentenceTransformer(modules=[models.Transformer(str(folder / "weights")), models.Pooling(768, "mean"), models.Normalize()])
    model.save(str(folder / "st"))
    return folder / "st"


def part_long(folder: Path, settings: list[str]) -> None:
    path = modernbert_base(folder)
    rng = np.random.default_rng(0)
    inputs = {length: rng.integers(1000, 30000, size=(count, length)).tolist() for length, count in ((2048, 64), (8192, 16))}
    print(f"== Part 2: a ModernBERT-base-shaped model, float16 (median of {TURNS} timed passes after a warm-up, in turns) ==")
    model = SentenceTransformerEmbedder(str(path), options=LocalOptions(device="cuda", dtype="float16", max_seq_length=8194))
    shapes: list[tuple[int, int]] = []
    forward = model.model.forward
    model.model.forward = lambda features: shapes.append(tuple(features["input_ids"].shape)) or forward(features)
    for length, ids in inputs.items():
        peaks: dict[str, float] = {}

        def pass_of(setting: str, ids=ids, peaks=peaks):
            def run() -> float:
                shapes.clear()
                torch.cuda.reset_peak_memory_stats()
                with attention(setting):
                    seconds = timed(model, ids)[1]
                peaks[setting] = torch.cuda.max_memory_allocated() / 2**30
                return seconds
            return run

        seconds = in_turns({setting: pass_of(setting) for setting in settings})
        for setting in settings:
            print(f"{setting:14s} {length:>5} tokens: {len(ids) * length / seconds[setting]:10,.0f} tokens/s, peak "
                  f"{peaks[setting]:.2f} GiB, batches {sorted(set(shapes), reverse=True)}")
    model = forward = None  # the first model's GPU memory freed before the capped pass
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(MEMORY_CAP)
    capped = SentenceTransformerEmbedder(str(path), options=LocalOptions(device="cuda", dtype="float16", max_seq_length=8194))
    for length, ids in inputs.items():
        torch.cuda.reset_peak_memory_stats()
        with attention(settings[0]):
            _, seconds = timed(capped, ids)
        print(f"capped to {MEMORY_CAP:.0%} ({settings[0]}) {length:>5} tokens: {len(ids) * length / seconds:10,.0f} tokens/s, peak "
              f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, backoffs so far {capped.backoffs}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["1", "2", "all"], default="all")
    parser.add_argument("--attention", choices=[*ATTENTION, "both"], default="both",
                        help="no-cudnn: embedeval's kernels; cudnn: PyTorch's own choice; both: side by side")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device here: nothing to measure (this benchmark needs a GPU)")
        return
    settings = list(ATTENTION.values()) if args.attention == "both" else [ATTENTION[args.attention]]
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        if args.part in ("1", "all"):
            part_minilm(Path(tmp), settings)
        if args.part in ("2", "all"):
            part_long(Path(tmp), settings)


if __name__ == "__main__":
    main()

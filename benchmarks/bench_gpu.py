"""Local models on a GPU (issue 30, item 4); without CUDA it says so and exits 0.

Part 1: all-MiniLM-L6-v2's texts/s on the default sweep's distinct truncated windows, float32 vs
``dtype=float16``, side by side (and the cosine between their vectors).
Part 2: a ModernBERT-base-shaped model (random weights: 22 layers, hidden 768, 8192 positions) in
float16 at 2048 and 8192 tokens: tokens/s, peak GPU memory, the batch shapes the token budget
cut; then the same with the process capped to a share of the GPU's memory
(``torch.cuda.set_per_process_memory_fraction``), so that batches run out of memory and are
halved (the backoffs are counted).

    PYTHONPATH=. python benchmarks/bench_gpu.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from embedeval.embedders.local import SentenceTransformerEmbedder
from embedeval.embedders.options import LocalOptions

MEMORY_CAP = 0.08  # share of the GPU's memory Part 2's capped run may use


def default_windows(folder: Path) -> list[list[int]]:
    """The default sweep's distinct truncated windows (MiniLM token ids): what a cold default run embeds."""
    from bench_int8 import distinct_windows

    return distinct_windows(folder)


def timed(model: SentenceTransformerEmbedder, ids: list[list[int]]) -> tuple[np.ndarray, float]:
    torch.cuda.synchronize()
    start = time.perf_counter()
    vectors = model.embed_ids(ids)
    torch.cuda.synchronize()
    return vectors, time.perf_counter() - start


def part_minilm(folder: Path) -> None:
    windows = default_windows(folder)
    fp32 = SentenceTransformerEmbedder("all-MiniLM-L6-v2", options=LocalOptions(device="cuda"))
    fp16 = SentenceTransformerEmbedder("all-MiniLM-L6-v2", options=LocalOptions(device="cuda", dtype="float16"))
    for model in (fp32, fp16):
        model.embed_ids(windows[:64])  # load and warm up
    full, full_seconds = timed(fp32, windows)
    half, half_seconds = timed(fp16, windows)
    cosines = (full * half).sum(axis=1)
    print(f"== Part 1: all-MiniLM-L6-v2 on {torch.cuda.get_device_name()} ==")
    print(f"float32          {len(windows) / full_seconds:8.1f} windows/s")
    print(f"float16          {len(windows) / half_seconds:8.1f} windows/s   fp16/fp32 time {half_seconds / full_seconds:.3f}")
    print(f"cosine fp16-fp32 median {np.median(cosines):.5f}, minimum {cosines.min():.5f}")


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


def part_long(folder: Path) -> None:
    path = modernbert_base(folder)
    rng = np.random.default_rng(0)
    print("== Part 2: a ModernBERT-base-shaped model, float16 ==")
    for capped in (False, True):
        if capped:
            torch.cuda.set_per_process_memory_fraction(MEMORY_CAP)
        model = SentenceTransformerEmbedder(str(path), options=LocalOptions(device="cuda", dtype="float16", max_seq_length=8194))
        shapes: list[tuple[int, int]] = []
        forward = model.model.forward
        model.model.forward = lambda features: shapes.append(tuple(features["input_ids"].shape)) or forward(features)
        for length, count in ((2048, 64), (8192, 16)):
            ids = rng.integers(1000, 30000, size=(count, length)).tolist()
            shapes.clear()
            torch.cuda.reset_peak_memory_stats()
            _, seconds = timed(model, ids)
            label = f"capped to {MEMORY_CAP:.0%}" if capped else "whole GPU"
            print(f"{label:<14} {length:>5} tokens: {count * length / seconds:10,.0f} tokens/s, peak "
                  f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, batches {sorted(set(shapes), reverse=True)}, "
                  f"backoffs so far {model.backoffs}")
        del model
        torch.cuda.empty_cache()


def main() -> None:
    if not torch.cuda.is_available():
        print("no CUDA device here: nothing to measure (this benchmark needs a GPU)")
        return
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        part_minilm(Path(tmp))
        part_long(Path(tmp))


if __name__ == "__main__":
    main()

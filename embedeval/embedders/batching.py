"""How a local model's inputs go through its forward pass: longest first, in batches of a row
count or of a padded-token budget (:func:`cut_batches`), framed and padded as its tokenizer pads
(:func:`frame_batch`), a batch halved when CUDA runs out of memory (:func:`run_in_batches`), with
the attention kernels that suit the device (:func:`attention_kernels`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import numpy as np

from embedeval.errors import InputError


def attention_kernels(device: str):
    """The attention kernels a forward pass on ``device`` may use: on CUDA every kernel PyTorch has
    except cuDNN's, which builds a plan for each new input shape and so is slow on texts of many
    lengths (measured on an H200: float16 MiniLM over 4,096 windows of 60-254 random lengths ran at
    2,445 windows/s on a first pass with it allowed, 7,263 without; ``benchmarks/bench_gpu.py``);
    elsewhere PyTorch's own choice, untouched."""
    if not device.startswith("cuda"):
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def cut_batches(order: Sequence[int], lengths: Sequence[int], batch_size: int, budget: int | None = None) -> list[np.ndarray]:
    """``order`` (rows sorted longest first, ``lengths[i]`` the padded length of ``order[i]``)
    cut into batches: ``batch_size`` rows at a time without a ``budget``; with one, each batch as
    many rows as fit ``rows x its longest <= budget`` (at least one):

        batch = order[i : i + max(1, budget // lengths[i])]

    so long inputs go a few at a time and short ones many at a time."""
    order = np.asarray(order)
    batches, start = [], 0
    while start < len(order):
        size = batch_rows(lengths[start], batch_size, budget)
        batches.append(order[start:start + size])
        start += size
    return batches


def longest_first(ids: Sequence[Sequence[int]], frame: int) -> tuple[np.ndarray, list[int]]:
    """The rows of ``ids`` longest first (a stable sort, like ``encode``'s: batches of similar
    length pad little) and each one's padded length (``frame`` tokens besides its ids)."""
    order = np.argsort([-len(seq) for seq in ids], kind="stable")
    return order, [len(ids[i]) + frame for i in order]


def frame_batch(batch: Sequence[Sequence[int]], head: Sequence[int], tail: Sequence[int], pad_id: int,
                side: str = "right") -> tuple[np.ndarray, np.ndarray]:
    """``input_ids`` and ``attention_mask`` (int64, rows x the longest framed row) of the id
    sequences of ``batch``, each framed as ``head + ids + tail`` and padded with ``pad_id`` on
    ``side`` (a tokenizer's ``padding_side``), as a tokenizer's ``pad`` returns them: filled with
    array operations, not row by row (at a GPU's pace the per-row work set the time)."""
    if side not in ("right", "left"):
        raise ValueError(f"padding side {side!r} is neither right nor left")
    rows = [np.asarray(seq, dtype=np.int64).ravel() for seq in batch]
    content = np.array([seq.size for seq in rows], dtype=np.int64)
    head, tail = np.asarray(head, dtype=np.int64), np.asarray(tail, dtype=np.int64)
    lengths = head.size + content + tail.size
    width = int(lengths.max(initial=0))
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    starts = np.zeros(len(rows), dtype=np.int64) if side == "right" else width - lengths  # where each framed row begins
    at = starts[:, None]
    row = np.arange(len(rows))[:, None]
    ids[row, at + np.arange(head.size)] = head
    if content.sum():
        owner = np.repeat(np.arange(len(rows)), content)
        offset = np.arange(content.sum()) - np.repeat(np.cumsum(content) - content, content)
        ids[owner, starts[owner] + head.size + offset] = np.concatenate(rows)
    ids[row, at + head.size + content[:, None] + np.arange(tail.size)] = tail
    columns = np.arange(width)
    mask = ((columns >= at) & (columns < at + lengths[:, None])).astype(np.int64)
    return ids, mask


def batch_rows(longest: int, batch_size: int, budget: int | None) -> int:
    """Rows in a batch whose longest input is ``longest`` tokens: ``batch_size`` without a
    budget, else ``max(1, budget // longest)``."""
    return batch_size if budget is None else max(1, budget // max(1, longest))


def run_in_batches(ids: Sequence[Sequence[int]], frame: int, run: Callable[[np.ndarray], None], batch_size: int,
                   budget: int | None, device: str, name: str, halved: Callable[[], None] = lambda: None) -> None:
    """``run(rows)`` for every batch of the rows of ``ids`` (:func:`longest_first`, ``frame``
    tokens besides each one's ids; ``batch_size`` rows, or by padded tokens when there is a
    ``budget``: :func:`batch_rows`), under :func:`attention_kernels` for ``device``. When CUDA runs
    out of memory the batch is halved and retried (``halved()`` called each time), and the rest of
    the run keeps that smaller budget (in padded tokens, so shorter inputs still go more at a time):

        budget = (rows // 2) * longest

    A single input that does not fit is one :class:`~embedeval.errors.InputError` naming its
    length (and the model, ``name``). ``run`` writes its results itself, so nothing done before a
    retry is lost or done twice."""
    import torch

    order, lengths = longest_first(ids, frame)
    done = 0
    while done < len(order):
        rows = order[done:done + batch_rows(lengths[done], batch_size, budget)]
        try:
            with attention_kernels(device):
                run(rows)
        except torch.cuda.OutOfMemoryError:
            if len(rows) == 1:
                raise InputError(f"one input of {lengths[done]} tokens does not fit in the memory of {device} for "
                                 f"{name}; lower `max_seq_length` or use a larger device", "max_seq_length") from None
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            budget = (len(rows) // 2) * lengths[done]  # this batch's longest input, half as many
            halved()
            continue
        done += len(rows)

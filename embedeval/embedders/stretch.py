"""Context extension without training (LongEmbed, Zhu et al. 2024, arXiv 2404.12096; its
``src/encoder_model.py: get_position_ids`` in dwzhu-pku/LongEmbed): a model with ``P`` positions
reads a text of ``n > P`` tokens in one pass, its positions re-used or stretched. A text of
``n <= P`` tokens is read exactly as the model reads it, by every method.

Absolute positions (APE: BERT, MiniLM, e5, bge) -- token ``i`` (``0 <= i < n``) reads:

- ``gp``, grouped positions: position ``i // f``, ``f = ceil(n / P)`` (LongEmbed's ``group``);
- ``rp``, recurrent positions: position ``i mod P`` (LongEmbed's ``recurrent``);
- ``pi``, LongEmbed's position interpolation (``interpolate``), for a strategy reading ``L``
  tokens: the table ``T`` of ``P`` rows stretched once to ``L`` rows by the whole factor
  ``s = max(L // P, 1)`` (``E_t[j s] = T[j]``, linear in between), and token ``i`` reads row ``i``,
  the learned position vector at ``x_i = min(i / s, P - 1)``, the same factor for every text
  longer than ``P`` (one of ``P + 1`` tokens under ``@8194`` reads positions 0-32). A text of
  ``n <= P`` tokens reads rows ``i s``, which are ``T``'s own (LongEmbed multiplies its ids by ``s``);
- ``pi-dynamic``, interpolation spread over each text (ours): ``x_i = i (P - 1) / (n - 1)``, the
  factor ``(n - 1) / (P - 1)`` the text's own, so no position is repeated or left unread;

where the vector at a real position ``x`` is ``(1 - (x - floor(x))) T[floor(x)] + (x - floor(x)) T[ceil(x)]``.

Rotary positions (RoPE: ModernBERT, nomic-bert, gte-v1.5) -- with ``s = n / P`` and inverse
frequencies ``theta_j = base^(-2j/d)`` (``j < d/2``, ``d`` the rotary dimension):

- ``ntk``, NTK-aware scaling: a larger base, ``base' = base * s^(d / (d - 2))``, so
  ``theta'_j = theta_j * s^(-2j / (d - 2))``;
- ``linear``, linear RoPE scaling (position interpolation for rotary models): ``theta'_j = theta_j / s``.

``logscale`` (either kind, past the limit): attention logits scaled by ``log(n) / log(P)``
(LongEmbed's scaling for BERT models read past their limit).

:class:`~embedeval.embedders.stretch_methods.Stretch` names one of them (its method,
``logscale`` and, for ``pi``, ``L``) as the model side knows it; the strategy layer (:mod:`embedeval.strategies.extend`) spells it as strategies
(``extend-gp@L``, ``rope-ntk@L``). :func:`stretched` applies one of them to a loaded transformers model for one forward pass over
texts of ``n`` tokens: it returns the extra inputs (position ids) and patches the model's own
modules (the position table, the rotary frequencies, the attention scale) only for that pass; no
model code is forked.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import numpy as np

from embedeval.embedders.stretch_methods import ABSOLUTE, ROTARY, Stretch, type_refusal


def grouped_positions(n: int, limit: int) -> np.ndarray:
    """GP: ``i // ceil(n / P)`` for ``i < n`` (``f = 1`` when ``n <= P``)."""
    return np.arange(n) // max(1, math.ceil(n / limit))


def recurrent_positions(n: int, limit: int) -> np.ndarray:
    """RP: ``i mod P`` for ``i < n``."""
    return np.arange(n) % limit


def table_at(table: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The ``table``'s rows read at real positions ``x`` (``0 <= x <= P - 1``), linearly between
    the two rows around each: ``(1 - (x - floor(x))) T[floor(x)] + (x - floor(x)) T[floor(x) + 1]``
    (the row itself at a whole ``x``)."""
    low = np.floor(x).astype(np.int64)
    high = np.minimum(low + 1, len(table) - 1)
    frac = (x - low)[:, None]
    return (1 - frac) * table[low] + frac * table[high]


def interpolated_table(table: np.ndarray, n: int) -> np.ndarray:
    """PI-dynamic: ``n`` position vectors read off the ``P``-row ``table`` at ``x_i = i (P - 1) / (n - 1)``
    (:func:`table_at`); the table's first ``n`` rows when ``n <= P``."""
    limit = len(table)
    if n <= limit:
        return table[:n]
    return table_at(table, np.arange(n) * (limit - 1) / (n - 1))


def longembed_factor(rows: int, limit: int) -> int:
    """LongEmbed's whole stretch factor ``s = max(L // P, 1)`` (``get_position_ids``: ``factor =
    max(encode_max_length // max_original_positions, 1)``)."""
    return max(rows // limit, 1)


def longembed_table(table: np.ndarray, rows: int) -> np.ndarray:
    """PI as LongEmbed defines it: the ``P``-row ``table`` stretched once to ``L = rows`` rows,
    row ``r`` the vector at ``x_r = min(r / s, P - 1)`` (:func:`table_at`, ``s`` =
    :func:`longembed_factor`): ``E_t[j s] = T[j]``, linear in between (the paper's ``E_t[s j] =
    (i + 1 - j) E_t[i s] + (j - i) E_t[(i + 1) s]``). Rows past ``s (P - 1)``, which have no
    original row after them (the last ``L - 1 - s (P - 1)``: 9 of 4,098 under ``@4098``), hold the
    last row ``T[P - 1]``: ours; LongEmbed's tuned e5-base-4k trains them, its paper leaves them open."""
    s = longembed_factor(rows, len(table))
    return table_at(table, np.minimum(np.arange(rows) / s, len(table) - 1))


def scaled_inv_freq(inv_freq: np.ndarray, method: str, scale: float) -> np.ndarray:
    """RoPE's inverse frequencies ``theta_j`` (``j < d/2``) for a text ``scale = n / P`` times the
    limit: NTK-aware ``theta_j * s^(-2j / (d - 2))`` or linear ``theta_j / s``; unchanged for ``s <= 1``."""
    if scale <= 1:
        return inv_freq
    if method == "linear":
        return inv_freq / scale
    d = 2 * len(inv_freq)
    return inv_freq * scale ** (-2 * np.arange(len(inv_freq)) / (d - 2))


def logscale_factor(n: int, limit: int) -> float:
    """``log(n) / log(P)`` past the limit, 1 within it."""
    return math.log(n) / math.log(limit) if n > limit else 1.0


# -- a loaded transformers model ------------------------------------------------------------------


def _absolute_table(model):
    """The nn.Embedding of a model whose absolute positions count from 0 (BERT's), else None
    (RoBERTa-style tables start after a padding index)."""
    table = getattr(getattr(model, "embeddings", None), "position_embeddings", None)
    kind = getattr(model.config, "position_embedding_type", ABSOLUTE) or ABSOLUTE
    if table is None or kind != ABSOLUTE or getattr(table, "padding_idx", None) is not None:
        return None
    return table


def _rotary_buffers(model) -> list[tuple[object, str]]:
    """(module, buffer name) of every RoPE frequency table in the model (``inv_freq``, or one per
    layer type such as ModernBERT's ``global_inv_freq``; their ``original_`` copies left alone)."""
    return [(module, name) for module in model.modules() for name, _ in module.named_buffers(recurse=False)
            if name.endswith("inv_freq") and "original" not in name]


def _attention_scales(model) -> list:
    """Attention modules that hold their logit scale as a ``scaling`` number (transformers' BERT,
    ModernBERT, ...)."""
    return [m for m in model.modules() if "Attention" in type(m).__name__ and isinstance(getattr(m, "scaling", None), float)]


def position_type(model) -> str | None:
    """``absolute``, ``rotary`` or None (positions this module cannot stretch)."""
    if _absolute_table(model) is not None:
        return ABSOLUTE
    return ROTARY if _rotary_buffers(model) else None


def refusal(model, stretch: Stretch) -> str | None:
    """Why ``stretch`` does not fit ``model`` (None when it does)."""
    kind = position_type(model)
    if kind is None:
        return (f"its positions are neither BERT-style absolute positions nor rotary ones "
                f"({type(model).__name__}); context extension is not offered")
    if stretch.position_type != kind:
        return type_refusal(kind, stretch)
    if stretch.logscale and not _attention_scales(model):
        return "its attention modules do not expose a logit scale, so +logscale cannot be applied"
    return None


@contextlib.contextmanager
def stretched(model, stretch: Stretch, n: int, rows: int, limit: int) -> Iterator[dict]:
    """Within the block, ``model`` reads ``rows`` inputs of ``n`` tokens each (no padding) as
    ``stretch`` says, past its ``limit`` positions ``P`` (the caller's reading, the one it checked
    the strategy against: :meth:`~embedeval.embedders.local.SentenceTransformerEmbedder.positions`);
    yields the inputs to add (``position_ids``, ``token_type_ids``) as tensors. The patched modules
    are restored on leaving, whatever happens."""
    import torch

    stretch.check_reads(n)
    device = next(model.parameters()).device
    extra: dict = {}
    restore: list = []
    try:
        if stretch.position_type == ABSOLUTE:
            table = _absolute_table(model)
            if stretch.method in ("pi", "pi-dynamic"):
                positions = np.arange(n)
                if n > limit:  # within P both read T's own rows (pi: rows i s of its stretched table are T[i])
                    original = table.weight.detach().double().cpu().numpy()[:limit]
                    rows_of = longembed_table(original, stretch.length) if stretch.method == "pi" else interpolated_table(original, n)
                    wide = torch.nn.Embedding.from_pretrained(torch.from_numpy(rows_of).to(table.weight.dtype).to(device))
                    model.embeddings.position_embeddings = wide
                    restore.append(lambda: setattr(model.embeddings, "position_embeddings", table))
            else:
                positions = (grouped_positions if stretch.method == "gp" else recurrent_positions)(n, limit)
            extra["position_ids"] = torch.as_tensor(positions, device=device).long().unsqueeze(0).expand(rows, -1)
            if getattr(model.embeddings, "token_type_embeddings", None) is not None:  # its zeros buffer holds only P
                extra["token_type_ids"] = torch.zeros((rows, n), dtype=torch.long, device=device)
        elif n > limit:
            for module, name in _rotary_buffers(model):
                original = getattr(module, name)
                scaled = scaled_inv_freq(original.double().cpu().numpy(), stretch.method, n / limit)
                setattr(module, name, torch.from_numpy(scaled).to(original.dtype).to(original.device))
                restore.append(lambda module=module, name=name, original=original: setattr(module, name, original))
        if stretch.logscale and n > limit:
            factor = logscale_factor(n, limit)
            for module in _attention_scales(model):
                original = module.scaling
                module.scaling = original * factor
                restore.append(lambda module=module, original=original: setattr(module, "scaling", original))
        yield extra
    finally:
        for undo in reversed(restore):
            undo()

"""An ONNX Runtime backend for local models on the CPU (``st:NAME?backend=onnx`` or
``?backend=onnx-int8``).

The model's transformer (its first sentence-transformers module) is exported once with
``torch.onnx.export`` and run with ONNX Runtime; ``onnx-int8`` quantizes the weights of its
matrix products to int8 with ``onnxruntime.quantization.quantize_dynamic`` per channel (per-tensor
int8 dropped MiniLM's cosine to its float32 vectors to about 0.92; per channel keeps it near 0.99),
and only those (:data:`QUANTIZED_OPS`): the embedding tables stay float32 (a lookup gains no speed
from int8, and their per-tensor int8 cost fidelity), and so do the products of two activations
(attention scores). The attention is
traced as plain matmuls (the model's eager attention), which ONNX Runtime runs as fast as torch.
Everything after the transformer (pooling, dense layers, normalisation) stays the model's own
modules, run by sentence-transformers as before, so prompts, pooling and windows are unchanged:
only the transformer's forward pass is replaced.

``onnx-int8`` runs its graph one text per session call, unpadded (:data:`ONE_TEXT_PER_CALL`):
ONNX Runtime quantizes the activations with one scale per input tensor (``DynamicQuantizeLinear``),
so in a batch a text's vector would depend on its neighbours and on their padding (cosine 0.99
between one text's vectors alone and beside a long one); alone, the scale is the text's own and its
vector is the same in any batch.

The exported files live in the embedding cache, under ``onnx/<the model's fingerprint>/``, made
once (written atomically, one process at a time) and reused by every later run. Each file's sha256
is recorded beside it (``model.onnx.sha256``) and checked before it is loaded: a file that is
missing its record or does not match it (truncated, overwritten) is made again, with one line on
stderr; temporary files of an export that was killed are removed. ``embedeval cache verify``
checks the files (:func:`check_graphs`) and ``embedeval cache clear`` removes them
(:func:`clear_graphs`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from embedeval.errors import CacheError, ConfigError
from embedeval.io import atomic_path, remove_stale_temp_files, write_text_atomic
from embedeval.locks import ONNX_GRAPHS_WAIT, release_lock, take_lock, write_holder
from embedeval.messages import warn

#: The backends of a local model: its own torch modules, or the transformer in ONNX Runtime.
BACKENDS = ("torch", "onnx", "onnx-int8")
#: The transformer's inputs an exported graph may take (those its tokenizer produces).
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OPSET = 17
#: The operators ``onnx-int8`` quantizes: the matrix products (those with a constant weight,
#: :data:`QUANTIZE_OPTIONS`); the embedding lookups (``Gather``) stay float32.
QUANTIZED_OPS = ("MatMul",)
#: ``quantize_dynamic``'s settings: int8 weights per output channel, full range (reduced range lost
#: more), only products with a constant weight (``MatMulConstBOnly``).
QUANTIZE_OPTIONS = {"per_channel": True, "reduce_range": False, "extra_options": {"MatMulConstBOnly": True}}
#: The backends whose graph runs one text per session call, unpadded: int8 quantizes its activations
#: with one scale per input tensor, which a batch would share (see the module docstring).
ONE_TEXT_PER_CALL = ("onnx-int8",)
#: Bump when the exported graphs, the quantization (above) or the way a graph is run change: older
#: graphs are then made again, and the vectors of the old ones are not reused (it is part of the
#: fingerprint). 4: int8 runs one text per call (its vectors no longer depend on their batch).
GRAPH_FORMAT = 4
#: The folder of the exported graphs inside the embedding cache's folder.
GRAPHS_DIR = "onnx"
FLOAT_GRAPH, INT8_GRAPH = "model.onnx", "model-int8.onnx"
#: What follows a graph's file name in the name of the file recording its sha256.
CHECKSUM_SUFFIX = ".sha256"
#: The file a process holds locked (:func:`~embedeval.locks.take_lock`) while it checks or makes a
#: folder's graphs.
LOCK_NAME = ".lock"


def check_installed(backend: str) -> None:
    """One :class:`~embedeval.errors.ConfigError` when ``backend`` needs ONNX Runtime and it is
    not installed (before any model is loaded)."""
    if backend == "torch":
        return
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        raise ConfigError(f"`backend` {backend} needs ONNX Runtime: pip install 'embedeval[onnx]'", "backend") from None


def onnx_folder(cache_dir: str | os.PathLike, fingerprint: str) -> Path:
    """Where the exported files of the model with this fingerprint live."""
    return Path(cache_dir) / GRAPHS_DIR / hashlib.sha256(f"{GRAPH_FORMAT}:{fingerprint}".encode()).hexdigest()[:24]


def _features(model, texts: list[str]) -> dict:
    """``model``'s tokenized features of ``texts`` (``preprocess`` in sentence-transformers 6,
    ``tokenize`` before)."""
    return (model.preprocess if hasattr(model, "preprocess") else model.tokenize)(texts)


def input_names(model) -> list[str]:
    """The transformer inputs of a sentence-transformers ``model`` (what its tokenizer produces)."""
    produced = _features(model, ["a"]).keys()
    return [name for name in INPUT_NAMES if name in produced]


def export(model, path: Path) -> Path:
    """The float32 graph of ``model``'s transformer (first module), exported to ``path``
    (dynamic batch and sequence axes; output ``last_hidden_state``)."""
    import torch

    names = input_names(model)
    auto_model = model[0].auto_model
    attention = getattr(auto_model.config, "_attn_implementation", None)
    if attention not in (None, "eager") and hasattr(auto_model, "set_attn_implementation"):
        # traced through scaled_dot_product_attention the graph ran at two thirds of torch's speed in
        # ONNX Runtime; the plain matmuls run as fast, and quantize to twice it (measured)
        auto_model.set_attn_implementation("eager")

    class Transformer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = auto_model

        def forward(self, *inputs):
            return self.inner(**dict(zip(names, inputs, strict=True))).last_hidden_state

    sample = _features(model, ["an example sentence to trace the graph with", "and a second"])
    args = tuple(sample[name].to("cpu") for name in names)
    axes = {name: {0: "batch", 1: "sequence"} for name in names} | {"last_hidden_state": {0: "batch", 1: "sequence"}}
    with atomic_path(path) as tmp, torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python values it keeps constant (checked by the tests)
        try:
            torch.onnx.export(Transformer().eval().to("cpu"), args, str(tmp), input_names=names, output_names=["last_hidden_state"],
                              dynamic_axes=axes, opset_version=OPSET, dynamo=False)
        finally:
            if attention not in (None, "eager") and hasattr(auto_model, "set_attn_implementation"):
                auto_model.set_attn_implementation(attention)
    return path


def quantize(source: Path, path: Path) -> Path:
    """``source`` with the weights of its matrix products quantized to int8 (:data:`QUANTIZED_OPS`,
    :data:`QUANTIZE_OPTIONS`; the activations are quantized per batch as the graph runs)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # quantize_dynamic logs a pre-processing hint at WARNING
    try:
        with atomic_path(path) as tmp:
            quantize_dynamic(str(source), str(tmp), op_types_to_quantize=list(QUANTIZED_OPS), weight_type=QuantType.QInt8,
                             **QUANTIZE_OPTIONS)
    finally:
        root.setLevel(level)
    return path


def file_sha256(path: Path) -> str:
    """The hex sha256 of a file's bytes (read a megabyte at a time)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _checksum_path(path: Path) -> Path:
    return path.with_name(path.name + CHECKSUM_SUFFIX)


def graph_problem(path: Path) -> str | None:
    """What is wrong with the graph file at ``path``, or None when it matches the sha256 recorded
    at its export."""
    if not path.is_file():
        return "is missing"
    record = _checksum_path(path)
    if record.exists() and not record.is_file():
        return f"has a sha256 record {record.name} that is not a file; remove it, or run `embedeval cache clear`"
    try:
        recorded = _checksum_path(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return "has no record of its sha256"
    if file_sha256(path) != recorded:
        return "does not match the sha256 recorded at its export (truncated or overwritten)"
    return None


def _made(path: Path, make: Callable[[Path], object]) -> Path:
    """``path``, made by ``make(path)`` (and its sha256 recorded) unless it matches its record; a
    file that is there but does not is made again, saying so on one line on stderr."""
    problem = graph_problem(path)
    if problem is None:
        return path
    record = _checksum_path(path)
    if record.exists() and not record.is_file():  # not ours to remove: one line instead of a write that fails
        raise CacheError(f"ONNX graph {path} {problem}")
    if path.exists():
        warn(f"ONNX graph {path} {problem}; making it again")
    make(path)
    write_text_atomic(_checksum_path(path), file_sha256(path) + "\n")
    return path


@contextlib.contextmanager
def _holding(folder: Path) -> Iterator[None]:
    """Hold ``folder``'s lock (so one process at a time checks and makes its graphs), waiting for
    another holder as :data:`~embedeval.locks.ONNX_GRAPHS_WAIT` says (600 s)."""
    lock = folder / LOCK_NAME
    try:
        fd = take_lock(lock, f"ONNX graph folder {folder}", "export", ONNX_GRAPHS_WAIT)
    except OSError as exc:
        raise CacheError(f"cannot lock the ONNX graphs in {folder} ({exc.strerror or exc})") from None
    try:
        write_holder(fd)
        yield
    finally:
        release_lock(fd, lock)


def graph(model, backend: str, folder: Path) -> Path:
    """The graph file of ``backend`` for ``model`` in ``folder``, exported (and quantized) the
    first time it is asked for, and again whenever it does not match its recorded sha256 (the
    float32 graph is checked for int8 only when int8 is made from it)."""
    folder.mkdir(parents=True, exist_ok=True)
    with _holding(folder):
        remove_stale_temp_files(folder)  # of an export that was killed (no export is running: the folder is held)

        def fp32() -> Path:
            return _made(folder / FLOAT_GRAPH, lambda path: export(model, path))

        if backend == "onnx":
            return fp32()
        return _made(folder / INT8_GRAPH, lambda path: quantize(fp32(), path))


def graph_files(cache_dir: str | os.PathLike) -> list[Path]:
    """Every exported graph file in the embedding cache's folder ``cache_dir``."""
    return sorted(p for p in (Path(cache_dir) / GRAPHS_DIR).glob("*/model*.onnx") if p.is_file())


def check_graphs(cache_dir: str | os.PathLike) -> dict[Path, str]:
    """The graph files in ``cache_dir`` that do not match their recorded sha256, each with what is
    wrong (:func:`graph_problem`); nothing is changed (a run makes them again when it needs them)."""
    return {path: problem for path in graph_files(cache_dir) if (problem := graph_problem(path)) is not None}


def clear_graphs(cache_dir: str | os.PathLike) -> list[Path]:
    """Delete the exported graphs in ``cache_dir`` (their records, locks and temporary files too).
    Returns the files removed."""
    root = Path(cache_dir) / GRAPHS_DIR
    removed = sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink()) if root.is_dir() else []
    shutil.rmtree(root, ignore_errors=True)
    return removed


def each_text_alone(run: Callable[[dict], np.ndarray], feeds: dict, mask: np.ndarray) -> np.ndarray:
    """``run`` (one session call: feeds -> ``(batch, sequence, hidden)``) on each row of a padded
    batch alone, its padding left out (the positions ``mask`` marks 0), the outputs put back in
    place (zeros at the padding, which pooling leaves out): each text's output is what it would be
    in any batch."""
    hidden = None
    for row in range(mask.shape[0]):
        kept = np.flatnonzero(mask[row])
        out = run({name: value[row : row + 1, kept] for name, value in feeds.items()})
        if hidden is None:
            hidden = np.zeros((*mask.shape, *out.shape[2:]), dtype=out.dtype)
        hidden[row, kept] = out[0]
    return hidden


def use_onnx(model, path: Path, threads: int, one_text_per_call: bool = False) -> None:
    """Run ``model``'s transformer (its first module) from the ONNX graph at ``path`` with ONNX
    Runtime on ``threads`` CPU threads; the modules after it stay as they are. With
    ``one_text_per_call`` each text of a batch runs alone (:func:`each_text_alone`)."""
    import onnxruntime
    import torch

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def run(feeds: dict) -> np.ndarray:
        (hidden,) = session.run(["last_hidden_state"], feeds)
        return hidden

    def forward(features: dict, **kwargs) -> dict:
        ids = features["input_ids"].cpu().numpy().astype(np.int64)
        # inputs padded from token ids carry no token_type_ids: zeros, as the torch model assumes then
        feeds = {name: features[name].cpu().numpy().astype(np.int64) if name in features else np.zeros_like(ids)
                 for name in names}
        if one_text_per_call:
            mask = features["attention_mask"].cpu().numpy() if "attention_mask" in features else np.ones_like(ids)
            hidden = each_text_alone(run, feeds, mask)
        else:
            hidden = run(feeds)
        features["token_embeddings"] = torch.from_numpy(hidden)
        return features

    model[0].forward = forward

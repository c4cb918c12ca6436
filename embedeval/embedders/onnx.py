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
only the transformer's forward pass is replaced. The exported files live in the embedding cache,
under ``onnx/<the model's fingerprint>/``, made once (written atomically) and reused by every
later run.
"""

from __future__ import annotations

import hashlib
import logging
import os
import warnings
from pathlib import Path

import numpy as np

from embedeval.errors import ConfigError
from embedeval.io import atomic_path

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
#: Bump when the exported graphs or the quantization (above) change: older graphs are then made
#: again, and the vectors of the old ones are not reused (it is part of the fingerprint).
GRAPH_FORMAT = 3


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
    return Path(cache_dir) / "onnx" / hashlib.sha256(f"{GRAPH_FORMAT}:{fingerprint}".encode()).hexdigest()[:24]


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
            return self.inner(**dict(zip(names, inputs))).last_hidden_state

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


def graph(model, backend: str, folder: Path) -> Path:
    """The graph file of ``backend`` for ``model`` in ``folder``, exported (and quantized) the
    first time it is asked for."""
    folder.mkdir(parents=True, exist_ok=True)
    fp32 = folder / "model.onnx"
    if not fp32.is_file():
        export(model, fp32)
    if backend == "onnx":
        return fp32
    int8 = folder / "model-int8.onnx"
    return int8 if int8.is_file() else quantize(fp32, int8)


def use_onnx(model, path: Path, threads: int) -> None:
    """Run ``model``'s transformer (its first module) from the ONNX graph at ``path`` with ONNX
    Runtime on ``threads`` CPU threads; the modules after it stay as they are."""
    import onnxruntime
    import torch

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def forward(features: dict, **kwargs) -> dict:
        ids = features["input_ids"].cpu().numpy().astype(np.int64)
        # inputs padded from token ids carry no token_type_ids: zeros, as the torch model assumes then
        feeds = {name: features[name].cpu().numpy().astype(np.int64) if name in features else np.zeros_like(ids)
                 for name in names}
        (hidden,) = session.run(["last_hidden_state"], feeds)
        features["token_embeddings"] = torch.from_numpy(hidden)
        return features

    model[0].forward = forward

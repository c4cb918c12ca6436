"""embedeval: how long may a chunk be before an embedder stops finding the needle?"""

from importlib.metadata import PackageNotFoundError, version

from embedeval.embedders import Embedder, EmbeddingCache, load_embedder
from embedeval.errors import EmbedevalError

try:
    __version__ = version("embedeval")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0"

__all__ = ["Embedder", "EmbeddingCache", "EmbedevalError", "__version__", "load_embedder"]

"""embedeval: how long may a chunk be before an embedder stops finding the needle?"""

from importlib.metadata import PackageNotFoundError, version

from embedeval.embedders import Embedder, EmbeddingCache, load_embedder
from embedeval.errors import EmbedevalError

try:
    __version__ = version("embedeval")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0"

_LAZY = {"run_nolima", "HaystackGrid", "NolimaConfig", "NolimaResult"}

__all__ = ["Embedder", "EmbeddingCache", "EmbedevalError", "HaystackGrid", "NolimaConfig", "NolimaResult", "__version__",
           "load_embedder", "run_nolima"]


def __getattr__(name: str):
    # The sweep pulls in pandas, scipy and matplotlib: import it only when asked for.
    if name in _LAZY:
        from embedeval import experiments

        return getattr(experiments, name)
    raise AttributeError(f"module 'embedeval' has no attribute {name!r}")

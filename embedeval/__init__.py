"""embedeval: how long may a chunk be before an embedder stops finding the needle?"""

from embedeval.errors import EmbedevalError

_EMBEDDERS = {"Embedder", "EmbeddingCache", "load_embedder"}
_LAZY = {"run_nolima", "HaystackGrid", "NolimaConfig", "NolimaResult"}

__all__ = ["Embedder", "EmbeddingCache", "EmbedevalError", "HaystackGrid", "NolimaConfig", "NolimaResult", "__version__",
           "load_embedder", "run_nolima"]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("embedeval")
    except PackageNotFoundError:  # running from a source tree without install
        return "0.0.0"


def __getattr__(name: str):
    # Imported when asked for: the embedders pull in numpy, httpx and the model code, the sweep
    # pandas, scipy and matplotlib; the command line (embedeval --help) needs none of them.
    if name == "__version__":
        globals()["__version__"] = _version()  # read once
        return globals()["__version__"]
    if name in _EMBEDDERS:
        from embedeval import embedders

        return getattr(embedders, name)
    if name in _LAZY:
        from embedeval import experiments

        return getattr(experiments, name)
    raise AttributeError(f"module 'embedeval' has no attribute {name!r}")

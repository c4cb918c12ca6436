"""Experiments: each turns a config into cached embeddings and result tables.

Its names are imported when first asked for, so that importing a light part of the package
(:mod:`embedeval.experiments.nolima_config`, which a command checks its settings with) does not
import the sweeps and their libraries."""

__all__ = ["HaystackGrid", "NolimaConfig", "NolimaResult", "run_nolima"]


def __getattr__(name: str):
    if name == "HaystackGrid":
        from embedeval.grid import HaystackGrid

        return HaystackGrid
    if name in __all__:
        from embedeval.experiments import nolima

        return getattr(nolima, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

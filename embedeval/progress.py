"""What a long step shows on stderr while it runs, made one way: a tqdm bar where the step counts
something (:func:`bar_options` for a library that makes its own bar, as umap-learn does for its
epochs), and a step line (:func:`step`) where it counts nothing (HDBSCAN, the bootstrap intervals,
the figures)::

    HDBSCAN on 18,819 points ... done in 9.1 s

The step line is a tqdm bar without a bar, so a bar opened inside the step (UMAP's epochs) shows
on the line below it and is cleared when it ends. ``enabled=False`` (the CLI's ``--quiet``) shows
nothing; stdout is never written."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from tqdm.auto import tqdm


@contextlib.contextmanager
def step(what: str, enabled: bool = True) -> Iterator[None]:
    """Show ``"{what} ..."`` on stderr while the block runs, and ``"{what} ... done in X s"`` when
    it ends (only ``"{what} ..."`` stays if it fails)."""
    line = tqdm(total=None, desc=f"{what} ...", bar_format="{desc}", disable=not enabled, leave=True)
    clock = time.perf_counter()
    try:
        yield
        line.set_description_str(f"{what} ... done in {time.perf_counter() - clock:.1f} s", refresh=False)
    finally:
        line.close()


def bar_options(what: str, unit: str, enabled: bool = True) -> dict:
    """tqdm's keyword arguments for a bar another library makes (umap-learn's ``tqdm_kwds``): the
    bar is cleared when it ends (the step line around it keeps the time)."""
    return {"desc": what, "unit": unit, "disable": not enabled, "leave": False}

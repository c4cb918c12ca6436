"""What a long step shows on stderr while it runs, made one way: a bar where the step counts
something (:func:`bar`; :func:`bar_options` for a library that makes its own tqdm bar, as
umap-learn does for its epochs), and a step line (:func:`step`) where it counts nothing (HDBSCAN,
the bootstrap intervals, the figures)::

    HDBSCAN on 18,819 points ... done in 9.1 s

Where progress is drawn live (:func:`live`: stderr is a terminal, or a notebook shows tqdm's
widgets) a step line is a tqdm bar without a bar, drawn when the step starts and redrawn with its
time when it ends, so a bar opened inside the step (UMAP's epochs) shows on the line below it and
is cleared when it ends. Anywhere else (a CI log, ``2> file``, a pipe) nothing is redrawn: a step
writes its one line when it ends, a bar that is kept writes one line when it closes
(``embedding documents (st:all-MiniLM-L6-v2): 1,204 texts ... done in 3.2 s``) and a bar that is
cleared (one inside another, UMAP's) writes nothing; no cursor movement or carriage return is
written, and no line twice. ``enabled=False`` (the CLI's ``--quiet``) shows nothing; stdout is
never written."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterable, Iterator

from tqdm.auto import tqdm


def live() -> bool:
    """Whether progress is drawn live: stderr is a terminal, or tqdm draws its notebook widgets
    (``tqdm.auto`` chose them: a Jupyter kernel with ipywidgets)."""
    notebook = any(cls.__module__ == "tqdm.notebook" for cls in tqdm.__mro__)
    return notebook or sys.stderr.isatty()


def _said(what: str, seconds: float) -> str:
    """``"{what} ... done in X s"``: how a finished step or bar is said."""
    return f"{what} ... done in {seconds:.1f} s"


@contextlib.contextmanager
def step(what: str, enabled: bool = True) -> Iterator[None]:
    """Show ``"{what} ..."`` on stderr while the block runs, and ``"{what} ... done in X s"`` when
    it ends (only ``"{what} ..."`` stays if it fails); where progress is not drawn live
    (:func:`live`), only the last line, once, and nothing if the block fails (its error says what
    went wrong)."""
    clock = time.perf_counter()
    if not enabled or not live():
        yield
        if enabled:
            print(_said(what, time.perf_counter() - clock), file=sys.stderr, flush=True)
        return
    line = tqdm(total=None, desc=f"{what} ...", bar_format="{desc}", leave=True)
    try:
        yield
        line.set_description_str(_said(what, time.perf_counter() - clock), refresh=False)
    finally:
        line.close()


class _LoggedBar:
    """A bar where progress is not drawn live (:func:`bar`): it counts as tqdm counts (``update``,
    iteration) and, kept (``leave``) and shown for ``delay`` seconds or more as a terminal would
    show it, writes one line when it closes: ``"{desc}: N {unit}s ... done in X s"``."""

    def __init__(self, iterable: Iterable | None, desc: str, unit: str, leave: bool, delay: float, enabled: bool):
        self.iterable, self.desc, self.unit = iterable, desc, unit
        self.shown = enabled and leave
        self.delay, self.n, self.clock, self.closed = delay, 0, time.perf_counter(), False

    def __iter__(self) -> Iterator:
        for item in self.iterable:
            yield item
            self.n += 1
        self.close()

    def __enter__(self) -> _LoggedBar:
        return self

    def __exit__(self, kind, error, trace) -> None:
        if kind is None:
            self.close()
        self.closed = True  # a block that failed says nothing: its error does

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        """Nothing: a line written once has no live figures to show."""

    def close(self) -> None:
        seconds = time.perf_counter() - self.clock
        if not self.closed and self.shown and self.n and seconds >= self.delay:
            print(_said(f"{self.desc}: {self.n:,} {self.unit}{'' if self.n == 1 else 's'}", seconds), file=sys.stderr, flush=True)
        self.closed = True


def bar(iterable: Iterable | None = None, *, desc: str, unit: str, total: int | None = None, enabled: bool = True,
        leave: bool = True, delay: float = 0.0, **options):
    """A progress bar on stderr (``options``: tqdm's other keyword arguments, for the live bar):
    tqdm's where progress is drawn live (:func:`live`), else one line when it closes (a bar that
    is kept, ``leave``) or nothing (one that is cleared); see the module docstring."""
    if live():
        return tqdm(iterable, desc=desc, unit=unit, total=total, disable=not enabled, leave=leave, delay=delay, **options)
    return _LoggedBar(iterable, desc, unit, leave, delay, enabled)


def bar_options(what: str, unit: str, enabled: bool = True) -> dict:
    """tqdm's keyword arguments for a bar another library makes (umap-learn's ``tqdm_kwds``): the
    bar is cleared when it ends (the step line around it keeps the time), and not shown at all
    where progress is not drawn live (:func:`live`)."""
    return {"desc": what, "unit": unit, "disable": not (enabled and live()), "leave": False}

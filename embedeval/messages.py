"""What the library has to tell whoever runs it, besides its results and errors.

A *warning* is about the user's data or setup (a damaged cache row, a key too plain to scrub):
:func:`warn` issues it through :mod:`warnings` as an :class:`EmbedevalWarning`. A *note* says what
was done on the user's behalf (a cache upgraded, a changed file kept aside): :func:`note` logs it
at ``INFO`` on the ``embedeval`` logger. A program that imports embedeval handles them as it
handles any warning or log record; the command line shows each as the one line it always printed,
``warning: MESSAGE`` or ``note: MESSAGE`` on stderr (:func:`show_on_stderr`).
"""

from __future__ import annotations

import logging
import sys
import warnings

#: The logger of every note.
LOGGER = logging.getLogger("embedeval")
#: The prefix of each kind of line, as the command line prints it.
WARNING_PREFIX, NOTE_PREFIX = "warning: ", "note: "


class EmbedevalWarning(UserWarning):
    """A warning about the user's data or setup."""


def warn(message: str) -> None:
    """Issue ``message`` (without its ``warning:`` prefix) as an :class:`EmbedevalWarning`."""
    warnings.warn(message, EmbedevalWarning, stacklevel=2)


def note(message: str) -> None:
    """Log ``message`` (without its ``note:`` prefix) at ``INFO`` on :data:`LOGGER`."""
    LOGGER.info(message)


def say(line: str) -> None:
    """A line kept with its prefix (a haystack build's notes): ``warning: ...`` through :func:`warn`,
    anything else through :func:`note`, its ``note:`` prefix taken off."""
    if line.startswith(WARNING_PREFIX):
        warn(line[len(WARNING_PREFIX):])
    else:
        note(line.removeprefix(NOTE_PREFIX))


class _StderrHandler(logging.Handler):
    """Each record as ``note: MESSAGE`` on the ``sys.stderr`` of the moment (a test's, a runner's)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(NOTE_PREFIX + record.getMessage(), file=sys.stderr)
        except Exception:  # as logging's own handlers: a failed display never fails the run
            self.handleError(record)


class _WarningDisplay:
    """``warnings.showwarning`` for the command line: an :class:`EmbedevalWarning` as
    ``warning: MESSAGE`` on the ``sys.stderr`` of the moment, any other warning passed to the
    display it replaced (``before``)."""

    def __init__(self, before) -> None:
        self.before = before

    def __call__(self, message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, EmbedevalWarning):
            print(WARNING_PREFIX + str(message), file=sys.stderr)
        else:
            self.before(message, category, filename, lineno, file, line)


def show_on_stderr() -> None:
    """Show every warning and note as a line of its own on stderr, each time it is issued (the
    command line's display; calling it again adds nothing)."""
    warnings.simplefilter("always", EmbedevalWarning)
    if not isinstance(warnings.showwarning, _WarningDisplay):
        warnings.showwarning = _WarningDisplay(warnings.showwarning)
    if not any(isinstance(handler, _StderrHandler) for handler in LOGGER.handlers):
        LOGGER.addHandler(_StderrHandler())
    LOGGER.setLevel(logging.INFO)

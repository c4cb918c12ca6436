"""One JSON parser for every input embedeval reads (needle sets, distractor, pair and expansion
files, JSON Lines corpora and texts, a run's records, a model folder's configuration, a chat
model's answer), with the limits a reader needs.

``json.loads`` follows nesting by recursion, so a file nested some thousand levels deep is a
``RecursionError`` traceback wherever it is read; a number past float range (``1e400``, or the
integer ``10**400``) is ``inf`` or an integer no float holds, which a later conversion turns into an
``OverflowError``; a text of gigabytes takes gigabytes more once parsed. :func:`loads` parses as
``json.loads`` does and turns those into one :class:`JsonLimitError` (a ``ValueError``, as a syntax error
is) that says what is past the limit; each reader names its file and line with it.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import sys

from embedeval.bounds import MAX_JSON_BYTES, MIB

#: Digits of an integer past which no float holds it (float's largest is about 1.8e308).
MAX_INT_DIGITS = 308


class JsonLimitError(ValueError):
    """A JSON text that is valid but past what embedeval reads: nested too deep, or a number
    beyond float range."""


class JsonTooDeep(JsonLimitError):
    """Nesting deeper than the parser follows."""


class JsonTooLong(JsonLimitError):
    """A text longer than :data:`~embedeval.bounds.MAX_JSON_BYTES`."""


class NotAPlainFile(ValueError):
    """A path that :func:`plain_file_bytes` does not read: a link, a folder, a pipe, a device or
    a socket, or a file longer than its reader takes; the message says which."""


#: What :func:`plain_file_bytes` calls a path that is no regular file, by its ``stat`` type.
_FILE_TYPES = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a device"),
               (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise JsonLimitError(f"the number {text[:24]}{'...' if len(text) > 24 else ''} is beyond float range")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise JsonLimitError(f"the integer {text[:24]}... ({len(text.lstrip('-')):,} digits) is beyond float range")
    return int(text)


def loads(text: str | bytes):
    """The JSON value of ``text`` (``json.loads``), or one :class:`JsonLimitError` for a text
    longer than :data:`~embedeval.bounds.MAX_JSON_BYTES` (characters: at least as many bytes),
    nesting deeper than the interpreter's recursion limit follows (about 1,000 levels) or a number
    beyond float range; a syntax error is ``json.JSONDecodeError`` as ever (both are ``ValueError``)."""
    if len(text) > MAX_JSON_BYTES:  # parsed, it would take up to ten times as much
        raise JsonTooLong(f"longer than the {MAX_JSON_BYTES // MIB} MiB a JSON text may hold ({len(text):,} characters; docs/scale.md)")
    try:
        return json.loads(text, parse_float=_finite_float, parse_int=_bounded_int)
    except RecursionError:
        raise JsonTooDeep(f"nested deeper than the {sys.getrecursionlimit():,} levels a JSON reader follows") from None


def plain_file_bytes(path, most: int) -> bytes:
    """The bytes of the file at ``path`` if it is a regular file of at most ``most`` bytes, found
    without reading what it is not: opened without following a link (``O_NOFOLLOW``) or waiting for
    a writer (``O_NONBLOCK``: a named pipe), its type checked (``fstat``) before a byte is read, and
    no more than ``most`` + 1 bytes read (a 2 GB file, or a link to ``/dev/zero``, costs nothing).
    A link, a folder, a pipe, a device, a socket or a longer file is one :class:`NotAPlainFile`
    saying which; a missing file is ``FileNotFoundError``, other failures ``OSError``."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotAPlainFile("a symbolic link, not a file") from None
        raise
    try:
        info = os.fstat(fd)  # before the descriptor becomes a file object: Python refuses a folder's
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        kind = next((name for test, name in _FILE_TYPES if test(info.st_mode)), "not a regular file")
        raise NotAPlainFile(f"{kind}, not a file")
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > most:
            raise NotAPlainFile(f"{info.st_size:,} bytes, past the {most:,} it may hold")
        data = handle.read(most + 1)
    if len(data) > most:  # grown since it was measured
        raise NotAPlainFile(f"more than the {most:,} bytes it may hold")
    return data


def load_file(path) -> object:
    """The JSON value of the file at ``path``, read as UTF-8 and parsed by :func:`loads`, reading
    no more than :data:`~embedeval.bounds.MAX_JSON_BYTES` + 1 bytes: a longer file is one
    :class:`JsonTooLong` before the rest of it is read (a 2 GB file was read whole first). Errors
    are those of ``Path.read_text`` (``OSError``, ``UnicodeDecodeError``) and of :func:`loads`."""
    with open(path, "rb") as handle:
        data = handle.read(MAX_JSON_BYTES + 1)
        if len(data) > MAX_JSON_BYTES:
            size = os.fstat(handle.fileno()).st_size
            raise JsonTooLong(f"longer than the {MAX_JSON_BYTES // MIB} MiB a JSON text may hold ({size:,} bytes; docs/scale.md)")
    return loads(data.decode("utf-8"))

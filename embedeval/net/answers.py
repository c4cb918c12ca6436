"""How the ``httpx`` clients read an answer (:func:`answer_hooks`): within its deadline
(:mod:`embedeval.net.deadlines`), asking for gzip or deflate only and inflating them here a piece
at a time (:func:`inflate`), and to at most :func:`~embedeval.net.settings.max_answer_bytes_from_env`
bytes once decompressed (:func:`capped`): a gzip bomb is refused with one line, never inflated in full."""

from __future__ import annotations

import functools
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType

from embedeval.net.deadlines import attempt_limit, read_within
from embedeval.net.errors import AnswerTooLargeError, FatalAPIError, MalformedResponseError
from embedeval.net.redirects import origin_text
from embedeval.net.settings import MAX_ANSWER_ENV, max_answer_bytes_from_env


def capped(pieces: Iterable[bytes], max_bytes: int, url: str, setting: str = MAX_ANSWER_ENV) -> Iterator[bytes]:
    """The decompressed pieces of an answer from ``url`` while they hold at most ``max_bytes`` in
    all; past that an :class:`AnswerTooLargeError` naming the URL's origin, the cap and the
    variable that sets it (``setting``)."""
    total = 0
    for piece in pieces:
        total += len(piece)
        if total > max_bytes:
            raise AnswerTooLargeError(f"the answer of {origin_text(url)} is larger than {max_bytes / 2**20:g} MB once "
                                      f"decompressed ({setting}); refused, and not read further")
        yield piece


#: The content encodings the ``httpx`` clients ask for and inflate themselves (:func:`inflate`),
#: with their zlib window bits.
INFLATE_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
ACCEPT_ENCODING = "gzip, deflate"
#: Bytes inflated at a time: a chunk that inflates to gigabytes is never held at once.
INFLATE_PIECE_BYTES = 1 << 20


def inflate(blocks: Iterable[bytes], encoding: str, piece: int = INFLATE_PIECE_BYTES) -> Iterator[bytes]:
    """The ``blocks`` of a body in the content ``encoding`` (gzip or deflate: zlib's, or a raw
    deflate stream as some servers send) decompressed in pieces of at most ``piece`` bytes; a body
    that does not decompress is a :class:`MalformedResponseError`."""
    decompressor, started = zlib.decompressobj(INFLATE_WBITS[encoding]), False
    try:
        for data in blocks:
            while True:
                try:
                    out = decompressor.decompress(data, piece)
                except zlib.error:
                    if started or encoding != "deflate":
                        raise
                    decompressor, started = zlib.decompressobj(-zlib.MAX_WBITS), True
                    continue
                started = True
                if out:
                    yield out
                data = decompressor.unconsumed_tail
                if not data and len(out) < piece:
                    break
        if tail := decompressor.flush():
            yield tail
    except zlib.error as exc:
        raise MalformedResponseError(f"malformed response (its {encoding} body does not decompress: {exc})") from None


#: Where :func:`answer_hooks` keeps a request's :class:`AnswerLimits` (``request.extensions``).
ANSWER_EXTENSION = "embedeval_answer"


@dataclass(frozen=True)
class AnswerLimits:
    """How one answer is read: by the monotonic ``deadline`` (``limit`` says what set it) and to at
    most ``max_bytes`` once decompressed (``setting``: the variable that sets it)."""

    deadline: float
    limit: str
    max_bytes: int
    setting: str = MAX_ANSWER_ENV


@functools.cache
def _answer_stream_class(module: ModuleType) -> type:
    """The response body of :func:`answer_hooks` for the ``httpx`` module ``module`` (``httpx``,
    or the ``httpx2`` the ``openai`` client is built on)."""

    class AnswerStream(module.SyncByteStream):
        """A response body read within its :class:`AnswerLimits`, inflated here (``encodings``, in
        the order they were applied)."""

        def __init__(self, stream, request, limits: AnswerLimits, encodings: Sequence[str]):
            self._stream, self._request, self._limits, self._encodings = stream, request, limits, encodings

        def __iter__(self) -> Iterator[bytes]:
            body = read_within(self._stream, self._limits.deadline, self._limits.limit,
                               lambda message: module.ReadTimeout(message, request=self._request))
            for encoding in reversed(self._encodings):
                body = inflate(body, encoding)
            yield from capped(body, self._limits.max_bytes, str(self._request.url), self._limits.setting)

        def close(self) -> None:
            self._stream.close()

    return AnswerStream


def answer_hooks(seconds: float, hooks: Mapping[str, Sequence[Callable]] | None = None,
                 max_bytes: int | None = None, setting: str = MAX_ANSWER_ENV) -> dict[str, list[Callable]]:
    """``hooks`` (an ``httpx`` client's ``event_hooks``) and the limits of every answer
    (:class:`AnswerLimits`). A deadline on the whole answer: ``httpx`` has no total timeout (its
    ``timeout`` bounds each read), so a request hook stamps ``monotonic() + seconds`` (or what is
    left of the request deadline, :func:`attempt_limit`, which also lowers the request's own
    timeouts) into the request's extensions when it is sent, and a response hook makes the body be
    read within it (:func:`read_within`): a body still arriving past the deadline raises the
    ``ReadTimeout`` of the response's own ``httpx`` module (``httpx``, or the ``openai`` client's
    ``httpx2``), which the clients report as a timeout. The status line and headers are bounded only
    by the client's read timeout. A cap on the answer's size once decompressed (``max_bytes``,
    default :func:`max_answer_bytes_from_env`; ``setting`` names the variable that sets it): the request asks for gzip or deflate only
    (:data:`ACCEPT_ENCODING`), the response hook inflates them itself, a piece at a time
    (:func:`inflate`, :func:`capped`), and an answer in another encoding is refused. Hooks, not a
    transport: a client given a transport ignores the proxy of the environment (``HTTPS_PROXY``)
    and its own ``limits``. Used by the ``openai`` client, the Jina client and :func:`~embedeval.net.fetch.fetch`."""
    cap = max_answer_bytes_from_env() if max_bytes is None else max_bytes

    def stamp_limits(request) -> None:
        limit, why = attempt_limit(seconds)
        request.extensions[ANSWER_EXTENSION] = AnswerLimits(time.monotonic() + limit, why, cap, setting)
        timeouts = request.extensions.get("timeout")
        if limit < seconds and isinstance(timeouts, dict):  # the status line, too, within what is left
            request.extensions["timeout"] = {name: limit if value is None else min(value, limit) for name, value in timeouts.items()}
        request.headers["Accept-Encoding"] = ACCEPT_ENCODING

    def read_body_within_limits(response) -> None:
        limits = response.request.extensions.get(ANSWER_EXTENSION)
        if limits is None:
            return
        encodings = [value.strip().lower() for value in response.headers.get_list("content-encoding", split_commas=True)]
        encodings = [value for value in encodings if value and value != "identity"]
        unread = [value for value in encodings if value not in INFLATE_WBITS]
        if unread:
            response.close()
            raise FatalAPIError(f"{origin_text(str(response.request.url))} answered in the content encoding {', '.join(unread)}, "
                                f"which embedeval does not read (it asks for {ACCEPT_ENCODING})")
        if encodings:
            del response.headers["content-encoding"]  # inflated by the stream below, not again by httpx
        module = sys.modules[type(response).__module__.partition(".")[0]]  # httpx or httpx2: the client's own
        response.stream = _answer_stream_class(module)(response.stream, response.request, limits, encodings)

    merged = {name: list(functions) for name, functions in (hooks or {}).items()}
    merged.setdefault("request", []).append(stamp_limits)
    merged.setdefault("response", []).append(read_body_within_limits)
    return merged

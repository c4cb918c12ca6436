"""How long a request may wait for its answers. One request's attempts wait at most the request
deadline in all (:class:`AnswerClock`; the waits between attempts not counted), each attempt gets
``min(request timeout, what is left of the deadline)`` (:func:`attempt_limit`), and a body still
arriving past its attempt's deadline is cut off (:func:`read_within`) rather than waited on for as
long as the server keeps sending a byte now and then."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator

#: The thread's :class:`AnswerClock` while an attempt is timed (the clients of that thread read it).
_attempts = threading.local()


class AnswerClock:
    """The seconds one request's attempts spend waiting for answers, from sending to the last byte
    (the waits between attempts, and a budget's wait before one, not counted), bounded by
    ``deadline`` (:attr:`~embedeval.net.retry.RetryPolicy.request_deadline`). :meth:`timing` times one attempt; while it
    runs, a client of the same thread gives the request at most what is left
    (:func:`attempt_limit`)."""

    def __init__(self, deadline: float):
        self.deadline = deadline
        self.spent = 0.0
        self._since: float | None = None

    def left(self) -> float:
        """Seconds left of the deadline (the attempt now running counted)."""
        running = time.monotonic() - self._since if self._since is not None else 0.0
        return self.deadline - self.spent - running

    @property
    def exhausted(self) -> bool:
        """Whether no attempt can be sent any more (a millisecond left is none)."""
        return self.left() < 0.001

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        outer = getattr(_attempts, "clock", None)
        _attempts.clock, self._since = self, time.monotonic()
        try:
            yield
        finally:
            self.spent += time.monotonic() - self._since
            self._since, _attempts.clock = None, outer


def attempt_limit(seconds: float) -> tuple[float, str]:
    """The seconds the request this thread sends now may take, and what sets them (for messages):
    the request timeout ``seconds``, or what is left of the request deadline of the attempt being
    timed (:class:`AnswerClock`) when that is less."""
    clock = getattr(_attempts, "clock", None)
    left = clock.left() if clock is not None else seconds
    if left >= seconds:
        return seconds, f"the request timeout of {seconds:g} s in all"
    left = max(left, 0.001)
    return left, f"the {left:.2g} s left of the request deadline"


def read_within(chunks: Iterable[bytes], deadline: float, limit: str,
                timeout_error: Callable[[str], Exception]) -> Iterator[bytes]:
    """The chunks of a response body as they arrive, until the monotonic clock passes ``deadline``:
    then ``timeout_error(message)`` is raised (the client's own timeout exception, so it is retried
    as one). ``limit`` says what set the deadline (:func:`attempt_limit`), for the message. A
    client's own read timeout still bounds the wait for each chunk, so a body is given up at most
    one read timeout late."""
    for chunk in chunks:
        if time.monotonic() > deadline:
            raise timeout_error(f"the answer took longer than {limit} (a server that sends its body too slowly)")
        yield chunk

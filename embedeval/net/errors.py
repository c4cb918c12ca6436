"""The errors of a request, sorted by what may mend them: :class:`RetryableError` (429, 5xx,
timeouts) and its kinds :class:`ConnectionFailedError` (no answer at all) and
:class:`MalformedResponseError` (a 200 whose body is unusable), and :class:`FatalAPIError`
(401/403, unknown model, bad request) with :class:`AnswerTooLargeError` and
:class:`PayloadTooLargeError`. :func:`status_error` maps an HTTP status; :func:`openai_errors` and
:func:`httpx_errors` translate those clients' exceptions. All are
:class:`~embedeval.errors.EmbedevalError`\\ s; :func:`~embedeval.net.retry.call_with_retries` turns
what is left of them into one :class:`~embedeval.errors.APIError`."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping

from embedeval.errors import EmbedevalError
from embedeval.net.retry_after import retry_after_from_headers


class RetryableError(EmbedevalError):
    """A failure worth retrying (429, 5xx, timeout, connection); ``retry_after`` is the wait in
    seconds the server asked for (``Retry-After``), if it did."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class ConnectionFailedError(RetryableError):
    """No answer at all: the connection was refused or reset, or the host is unknown. Retried only
    for :attr:`~embedeval.net.retry.RetryPolicy.connect_seconds`: a server that is down rarely comes back within minutes."""


class MalformedResponseError(RetryableError):
    """A success status whose body cannot be used (not JSON, missing fields, NaN/inf, null or
    all-zero vectors, the wrong count or size): the server is answering, wrongly, so it is tried
    at most :attr:`~embedeval.net.retry.RetryPolicy.malformed_attempts` times in all."""


class FatalAPIError(EmbedevalError):
    """A failure that retrying cannot fix (401/403, unknown model, bad request)."""


class AnswerTooLargeError(FatalAPIError):
    """An answer larger than :func:`~embedeval.net.settings.max_answer_bytes_from_env` once decompressed (a gzip bomb):
    refused, not asked for again."""


class PayloadTooLargeError(FatalAPIError):
    """HTTP 413: the request holds more than the server takes at once (text-embeddings-inference's
    ``max_client_batch_size``); sent again as two halves, not retried as it was."""


#: The answers that may go away by themselves: too many requests, a server error, a bad gateway,
#: unavailable, a gateway timeout.
TRANSIENT_STATUSES = (429, 500, 502, 503, 504)


def status_error(status: int | None, message: str, key_env: str, headers: Mapping[str, str] | None = None) -> Exception:
    """Map an HTTP status to a retryable or fatal error with a readable message; a retryable
    one carries the response's ``Retry-After`` (from ``headers``), and one of an error status its
    ``refused_status`` (the server said no: it wrote no answer, :func:`refused_by_server`)."""
    error = _status_error(status, message, key_env, headers)
    if status is not None and not 200 <= status < 300:
        error.refused_status = status
    return error


def refused_by_server(error: BaseException) -> bool:
    """Whether a failed request got no answer written: the server refused it with an error status
    (429, 5xx, 4xx: :func:`status_error`) or the connection failed (:class:`ConnectionFailedError`);
    not a timeout, nor an answer that broke off, was malformed or too large."""
    return getattr(error, "refused_status", None) is not None or isinstance(error, ConnectionFailedError)


def _status_error(status: int | None, message: str, key_env: str, headers: Mapping[str, str] | None) -> Exception:
    if status in (401, 403):
        return FatalAPIError(f"authentication failed (HTTP {status}); check {key_env}")
    if status is not None and 200 <= status < 300:  # the request went through; its body did not parse
        return MalformedResponseError(f"malformed response ({message})")
    if status == 429 or (status is not None and status >= 500) or status is None:
        return RetryableError(f"HTTP {status}: {message}" if status else message, retry_after_from_headers(headers))
    if status == 413:
        return PayloadTooLargeError(f"HTTP 413: {message}")
    if status == 404:
        return FatalAPIError(f"not found (HTTP 404): unknown model or wrong base URL ({message})")
    return FatalAPIError(f"HTTP {status}: {message}")


@contextlib.contextmanager
def openai_errors(key_env: str):
    """Translate the ``openai`` client's exceptions into retryable or fatal ones."""
    import openai
    import pydantic

    try:
        yield
    except openai.APIStatusError as exc:
        raise status_error(exc.status_code, exc.message, key_env, exc.response.headers) from None
    except openai.APITimeoutError as exc:  # a hung or trickling server: retried like a 5xx
        cause = f": {exc.__cause__}" if exc.__cause__ is not None and str(exc.__cause__) else ""  # what timed out
        raise RetryableError(f"{type(exc).__name__}: {exc}{cause}") from None
    except openai.APIConnectionError as exc:  # refused, reset, unknown host
        if type(exc.__cause__).__name__ == "TooManyRedirects":  # httpx's (whichever copy the client uses): a loop, no retry ends it
            raise FatalAPIError(f"the server redirected too many times (a redirect loop: {exc.__cause__}); check the base URL") from None
        raise ConnectionFailedError(f"{type(exc).__name__}: {exc}") from None
    except (openai.APIResponseValidationError, json.JSONDecodeError, UnicodeDecodeError, pydantic.ValidationError,
            RecursionError) as exc:  # a 200 whose body is not what it should be (a ValueError of our own is a bug)
        raise MalformedResponseError(f"malformed response ({type(exc).__name__}: {exc})") from None
    except ValueError as exc:
        if not raised_parsing_json(exc):
            raise
        raise MalformedResponseError(f"malformed response ({type(exc).__name__}: {exc})") from None


def raised_parsing_json(exc: BaseException) -> bool:
    """Whether ``exc`` came out of the ``json`` module's parser: a number of more digits than
    Python converts (``sys.get_int_max_str_digits``, 4300) is a plain ValueError there, not a
    JSONDecodeError, yet it is the server's body, not our code."""
    where = exc.__traceback__
    while where is not None:
        if where.tb_frame.f_code.co_filename == json.decoder.__file__:
            return True
        where = where.tb_next
    return False


@contextlib.contextmanager
def httpx_errors():
    """Translate an ``httpx`` request's exceptions: no answer (refused, unknown host, hung up
    without one) is a :class:`ConnectionFailedError`, a timeout or a redirect loop a
    :class:`RetryableError`."""
    import httpx

    try:
        yield
    except (httpx.ConnectError, httpx.RemoteProtocolError) as exc:
        raise ConnectionFailedError(f"{type(exc).__name__}: {exc}") from None
    except httpx.RequestError as exc:
        raise RetryableError(f"{type(exc).__name__}: {exc}") from None


def one_line(message: str, limit: int = 600) -> str:
    """An error message as one line of at most ``limit`` characters (an error body may be a whole
    HTML page). Cut only after the key was scrubbed from all of it."""
    line = " ".join(message.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."

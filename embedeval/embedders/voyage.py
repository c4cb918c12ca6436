"""``voyage:voyage-3-large`` through the ``voyageai`` client."""

from __future__ import annotations

import time

from embedeval.embedders.api import APIEmbedder, ModelLimits, Reply
from embedeval.embedders.budget import Budget
from embedeval.net.answers import capped
from embedeval.net.deadlines import attempt_limit, read_within
from embedeval.net.errors import ConnectionFailedError, MalformedResponseError, RetryableError, status_error
from embedeval.net.redirects import refuse_cross_origin_redirect
from embedeval.net.settings import max_answer_bytes_from_env, request_timeout_from_env

#: Bytes asked of the socket at a time while a body is read within its deadline.
READ_CHUNK_BYTES = 65536


def deadline_adapter(seconds: float, max_bytes: int | None = None):
    """A ``requests`` transport adapter whose every answer must arrive in full within ``seconds`` of
    sending its request, or what is left of the request deadline when less
    (:func:`~embedeval.net.deadlines.attempt_limit`, which also lowers the request's own timeout;
    ``requests`` has no total timeout: its ``timeout`` bounds each read): it reads the body itself, a
    socket read at a time (:func:`~embedeval.net.deadlines.read_within`), and a body still arriving
    past the deadline is a :class:`requests.exceptions.ReadTimeout` (the connection is dropped),
    which the ``voyageai`` client reports as a timeout. An answer larger than ``max_bytes`` once
    decompressed (default :func:`~embedeval.net.settings.max_answer_bytes_from_env`; ``urllib3``
    inflates at most a read's worth at a time) is refused
    (:func:`~embedeval.net.answers.capped`)."""
    import requests
    import urllib3

    cap = max_answer_bytes_from_env() if max_bytes is None else max_bytes

    class DeadlineAdapter(requests.adapters.HTTPAdapter):
        def send(self, request, stream=False, timeout=None, **kwargs):
            limit, why = attempt_limit(seconds)
            deadline = time.monotonic() + limit
            if limit < seconds:  # the status line, too, within what is left
                timeout = limit if timeout is None or isinstance(timeout, tuple) else min(timeout, limit)
            response = super().send(request, stream=True, timeout=timeout, **kwargs)
            if stream:
                return response

            def reads():
                while chunk := response.raw.read1(READ_CHUNK_BYTES, decode_content=True):
                    yield chunk

            try:
                body = read_within(reads(), deadline, why, lambda message: requests.exceptions.ReadTimeout(message, request=request))
                response._content = b"".join(capped(body, cap, request.url))
            except urllib3.exceptions.ReadTimeoutError as exc:
                response.close()
                raise requests.exceptions.ReadTimeout(exc, request=request) from None
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                response.close()
                raise requests.exceptions.ConnectionError(exc, request=request) from None
            except BaseException:
                response.close()
                raise
            response._content_consumed = True  # as requests marks a body it read itself
            return response

    return DeadlineAdapter()


def same_origin_session(seconds: float | None = None):
    """A ``requests`` session for the ``voyageai`` client (its ``requestssession`` factory, one per
    thread) that follows no redirect to another origin
    (:func:`~embedeval.net.redirects.refuse_cross_origin_redirect`) and takes at most ``seconds``
    (default :func:`~embedeval.net.settings.request_timeout_from_env`) per request in all
    (:func:`deadline_adapter`)."""
    import requests

    session = requests.Session()
    session.hooks["response"].append(refuse_cross_origin_redirect)
    adapter = deadline_adapter(seconds if seconds is not None else request_timeout_from_env())
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


class VoyageEmbedder(APIEmbedder):
    """Voyage embeddings (key ``VOYAGE_API_KEY``, base URL ``VOYAGE_BASE_URL``), input_type None
    by default (as in the Context Rot study) and server-side truncation on."""

    provider, key_env, base_url_env = "voyage", "VOYAGE_API_KEY", "VOYAGE_BASE_URL"
    default_base_url = "https://api.voyageai.com/v1"
    models = {"voyage-3-large": ModelLimits(1024, 32_000, 1000, 120_000)}
    # Usage tier 1 (a payment method added) of voyage-3-large: 2,000 RPM, 3,000,000 TPM
    # (docs.voyageai.com/docs/rate-limits).
    default_budget = Budget(rpm=2_000, tpm=3_000_000)
    # USD per million tokens after the free ones (the first 200 million tokens of an account are free).
    prices = {"voyage-3-large": 0.18}
    prices_read = "Voyage's list as quoted by third-party price tables of November 2025, read 2026-11-25"

    def __init__(self, model: str, input_type: str | None = None, **kwargs):
        super().__init__(model, **kwargs)
        self.input_type = input_type
        self.truncation = True

    def _prepare(self) -> None:
        self._voyage  # noqa: B018  (imported before the budget admits the first request)

    @property
    def _voyage(self):
        """The ``voyageai`` client module, imported on the first request (with aiohttp it takes
        most of a second, and a plan sends none), its sessions made by :func:`same_origin_session`."""
        import voyageai

        # the client's own setting, global: every thread's session made so, with the request timeout of
        # the environment (no embedder captured in it)
        voyageai.requestssession = same_origin_session
        return voyageai

    def settings(self) -> dict[str, object]:
        return {**super().settings(), "input_type": self.input_type, "truncation": self.truncation}

    def _request(self, texts, kind):
        error = self._voyage.error
        try:
            # The client's embed() drops each item's index; Embedding.create keeps the response.
            response = self._voyage.Embedding.create(input=texts, model=self.model, input_type=self.input_type,
                                                     truncation=self.truncation, api_key=self._key.value,
                                                     base_url=self.base_url, request_timeout=self.timeout)
        except (error.Timeout, error.TryAgain) as exc:
            raise RetryableError(f"{type(exc).__name__}: {exc}") from None
        except error.APIConnectionError as exc:  # refused, reset, unknown host
            raise ConnectionFailedError(f"{type(exc).__name__}: {exc}") from None
        except error.VoyageError as exc:  # .headers: the response's headers ({} when there was none)
            raise status_error(exc.http_status, str(exc._message or exc), self.key_hint, exc.headers) from None
        except (AttributeError, KeyError, TypeError, ValueError, RecursionError) as exc:  # the client choked on a malformed body (nested too deep too)
            raise MalformedResponseError(f"malformed response ({type(exc).__name__}: {exc})") from None
        return Reply([(item.index, item.embedding) for item in getattr(response, "data", None) or ()],
                     getattr(response, "model", None))

"""A file fetched over HTTP (a Gutenberg book) under the API clients' rules: retries, the request
timeout and deadline, the answer cap, no redirect to another origin, no key."""

from __future__ import annotations

from embedeval.net.answers import answer_hooks
from embedeval.net.errors import TRANSIENT_STATUSES, FatalAPIError, RetryableError, httpx_errors
from embedeval.net.redirects import refuse_cross_origin_redirect
from embedeval.net.retry import call_with_retries, retry_policy_from_env
from embedeval.net.retry_after import retry_after_from_headers
from embedeval.net.settings import request_timeout_from_env


def fetch(url: str, what: str):
    """``GET url`` under the API clients' policy: retried as :func:`retry_policy_from_env` says
    (429 and 5xx, timeouts, no answer), the request timeout and deadline, the answer cap
    (:func:`answer_hooks`), no redirect to another origin (:func:`refuse_cross_origin_redirect`).
    Returns the ``httpx`` response, read; any other status, or running out, is one
    :class:`~embedeval.errors.APIError` starting with ``what``. No key is sent."""
    import httpx

    timeout = request_timeout_from_env()
    hooks = answer_hooks(timeout, {"response": [refuse_cross_origin_redirect]})
    with httpx.Client(timeout=timeout, follow_redirects=True, event_hooks=hooks) as client:

        def get():
            with httpx_errors():
                response = client.get(url)
            if response.status_code in TRANSIENT_STATUSES:
                raise RetryableError(f"HTTP {response.status_code}", retry_after_from_headers(response.headers))
            if response.status_code != 200:
                raise FatalAPIError(f"HTTP {response.status_code}")
            return response

        return call_with_retries(get, retry_policy_from_env(), what, lambda message: message)

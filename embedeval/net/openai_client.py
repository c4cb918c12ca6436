"""The ``openai`` client, one way for the embedders and the chat model alike
(:func:`openai_client`), and where OpenAI's API is (:data:`OPENAI`): the key in ``OPENAI_API_KEY``,
the URL in ``OPENAI_BASE_URL`` or OpenAI's own."""

from __future__ import annotations

from embedeval.net.answers import answer_hooks
from embedeval.net.keys import APIKey, ProviderEndpoint
from embedeval.net.redirects import refuse_cross_origin_redirect

#: OpenAI's API: the ``openai:`` prefix, its key variable, the variable that may point it at a
#: proxy, and its own URL (the embeddings and the chat model are reached alike).
OPENAI = ProviderEndpoint("openai", "OPENAI_API_KEY", "OPENAI_BASE_URL", "https://api.openai.com/v1")
#: The headers the ``openai`` client fills from ``OPENAI_ORG_ID`` / ``OPENAI_PROJECT_ID``: they
#: name an OpenAI account, so a server of one's own never gets them.
ACCOUNT_HEADERS = ("OpenAI-Organization", "OpenAI-Project")


def openai_client(key: APIKey, base_url: str, own_server: bool, timeout: float, max_answer: tuple[int, str] | None = None):
    """An ``openai`` client for the embedders and the chat model alike: no retries of its own (ours
    are bounded), ``timeout`` seconds per request in all (its own ``timeout`` bounds each read, so the
    answer is read within :func:`~embedeval.net.answers.answer_hooks`, which also caps its size
    once decompressed: ``max_answer``, (bytes, the variable that sets them), or every answer's cap;
    the client keeps its own
    transport, with the environment's proxy and its connection limits), no redirect followed to another origin
    (:func:`~embedeval.net.redirects.refuse_cross_origin_redirect`), and for a server of one's own
    (``own_server``) none of :data:`ACCOUNT_HEADERS`. Without a key no ``Authorization`` header
    is sent (the client needs a key string; its header is left out)."""
    import openai

    hidden = {name: openai.Omit() for name in ACCOUNT_HEADERS} if own_server else None
    hooks = {"response": [refuse_cross_origin_redirect]}
    if not key.value:  # the client signs with the stand-in key: the header is taken out before it is sent
        hooks["request"] = [lambda request: request.headers.pop("Authorization", None)]
    http_client = openai.DefaultHttpxClient(event_hooks=answer_hooks(timeout, hooks, *(max_answer or ())))
    return openai.OpenAI(api_key=key.value or "none", base_url=base_url, max_retries=0, timeout=timeout,
                         default_headers=hidden, http_client=http_client)

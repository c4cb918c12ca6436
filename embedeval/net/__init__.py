"""The network: everything that talks HTTP for embedeval, shared by the API embedders
(:mod:`embedeval.embedders.api`), the chat client (:mod:`embedeval.llm`) and the corpus downloads
(:mod:`embedeval.corpus`). Nothing here knows about embedders: imports point from them to here.

- :mod:`~embedeval.net.keys`: keys come from an environment variable (:class:`~embedeval.net.keys.APIKey`),
  and every key of the run is scrubbed, in every encoding, from what a server sends before it is printed,
  written or sent on (:func:`~embedeval.net.keys.scrub_all`); a server of one's own (``?base_url=``) gets only the key its
  spec names (``key_env``, never the provider's own key variable: :func:`~embedeval.net.keys.endpoint`).
- :mod:`~embedeval.net.errors`: errors sorted into :class:`~embedeval.net.errors.RetryableError`
  (429, 5xx, timeouts), its kinds :class:`~embedeval.net.errors.ConnectionFailedError` (no server
  answers: refused, reset, unknown host) and :class:`~embedeval.net.errors.MalformedResponseError` (a
  200 whose body is unusable), and :class:`~embedeval.net.errors.FatalAPIError` (401/403, unknown
  model, bad request); :func:`~embedeval.net.errors.status_error` maps an HTTP status, the
  ``openai`` and ``httpx`` clients' exceptions are translated there too.
- :mod:`~embedeval.net.retry_after`: the wait a server asks for (``Retry-After``, ``retry-after-ms``).
- :mod:`~embedeval.net.retry`: :func:`~embedeval.net.retry.call_with_retries` retries with ``tenacity``:
  exponential backoff with full jitter, bounded attempts and bounded total time
  (:class:`~embedeval.net.retry.RetryPolicy`); running out, or a fatal error, is one
  :class:`~embedeval.errors.APIError`.
- :mod:`~embedeval.net.settings`: the request timeout (60 s), the request deadline (90 s) and the
  answer cap (256 MB) as the environment sets them.
- :mod:`~embedeval.net.deadlines`: one request's attempts wait for answers at most the request
  deadline in all (:class:`~embedeval.net.deadlines.AnswerClock`), and a body that trickles is cut off
  when its deadline passes (:func:`~embedeval.net.deadlines.read_within`).
- :mod:`~embedeval.net.answers`: how the ``httpx`` clients read an answer: within its deadline, inflated
  here a piece at a time and capped once decompressed (:func:`~embedeval.net.answers.answer_hooks`).
- :mod:`~embedeval.net.redirects`: no client follows a redirect to another origin.
- :mod:`~embedeval.net.openai_client`: the ``openai`` client of the embedders and the chat model, and
  where OpenAI's API is (:data:`~embedeval.net.openai_client.OPENAI`).
- :mod:`~embedeval.net.fetch`: a file (a Gutenberg book) got under the same rules.
"""

"""A fake server on 127.0.0.1 speaking the OpenAI-shaped JSON of OpenAI, Voyage and Jina embeddings
and of OpenAI-compatible chat completions (scripted replies).

Vectors are deterministic (sha256 of the text). Behaviour is scripted per test: a queue of
status codes to answer before succeeding (e.g. [429, 429] then 200) and headers to send with them
(e.g. ``Retry-After``), keys that get 401, models that get 404, a redirect of every request to
another server, a raw answer to ``GET /models``, answers naming another model than the one asked
for, vectors scaled, gzip-compressed answers padded into a bomb. Every request is recorded (path, model, inputs,
body, authorization header, all headers, arrival time on ``time.monotonic()``).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.server
import json
import threading
import time
from dataclasses import dataclass, field

import numpy as np

DIM = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "voyage-3-large": 1024, "jina-embeddings-v3": 1024}


def fake_vector(text: str, dim: int) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).normal(size=dim).round(6).tolist()


#: What ``Script.faults`` can do to a good answer.
FAULTS = ("nan", "inf", "null", "zero", "short", "long", "count", "duplicate_index", "missing_data", "malformed_json", "true",
          "string", "overflow", "huge_integer",
          "deep_nesting")


def spoil(payload: dict, fault: str | None):
    """``payload`` with one defect (see :data:`FAULTS`), or as it is for ``None``."""
    data = payload["data"]
    if fault == "nan":
        data[0]["embedding"][0] = float("nan")
    elif fault == "inf":
        data[0]["embedding"][0] = float("inf")
    elif fault == "null":
        data[0]["embedding"] = None
    elif fault == "zero":
        data[0]["embedding"] = [0.0] * len(data[0]["embedding"])
    elif fault == "short":
        data[0]["embedding"] = data[0]["embedding"][:1]
    elif fault == "long":
        data[0]["embedding"] = data[0]["embedding"] + [0.5]
    elif fault == "count":
        data.pop()
    elif fault == "duplicate_index":
        data[-1]["index"] = 0
    elif fault == "missing_data":
        del payload["data"]
    elif fault == "true":  # a JSON true where a number should be (numpy would read it as 1.0)
        data[0]["embedding"] = [True] * len(data[0]["embedding"])
    elif fault == "string":  # numeric strings (numpy would read "0.5" as 0.5)
        data[0]["embedding"] = ["0.5"] * len(data[0]["embedding"])
    elif fault == "overflow":  # a finite JSON number beyond float32
        data[0]["embedding"][0] = 1e39
    elif fault == "malformed_json":
        return b'{"object": "list", "data": [{"index": 0, "embedding": [0.1,'
    elif fault == "deep_nesting":  # valid JSON nested deeper than Python's parser recurses (a RecursionError)
        return b'{"object": "list", "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    elif fault == "huge_integer":  # valid JSON whose number has more digits than Python converts (a ValueError, no JSONDecodeError)
        return json.dumps(payload).replace('"index": 0,', '"index": ' + "1" * 5000 + ",", 1).encode()
    return payload


@dataclass
class Script:
    fail_with: list[int] = field(default_factory=list)  # statuses to answer first, in order; 0: hang up without an answer
    fail_headers: dict[str, str] = field(default_factory=dict)  # sent with every error answer
    echo_auth: bool = False  # error answers quote the Authorization header (a careless server)
    echo_key_at: int | None = None  # error answers quote the key after this many characters
    echo_key_as: object = None  # key -> how error answers quote it (URL-encoded, base64: a server's own encoding)
    faults: list[str] = field(default_factory=list)  # ways to spoil successful embedding answers, in order
    always_shuffle: bool = False  # answer embeddings in reverse order (indices kept)
    storm_until: float = 0.0  # time.monotonic() until which every request gets a 429
    bad_keys: set[str] = field(default_factory=lambda: {"bad-key"})
    unknown_models: set[str] = field(default_factory=set)
    chat_replies: list[str] = field(default_factory=list)  # answers of /chat/completions, in order
    chat_reply_for: object = None  # prompt -> the answer's content, or None for the next of chat_replies (a judge's verdicts)
    chat_usage: dict | None = None  # the usage a chat answer reports (default: 1 prompt token, 1 completion token)
    delay: float = 0.0  # seconds each request takes
    trickle: float = 0.0  # seconds between the bytes of a 200 answer's body to a POST (a server that answers, slowly)
    # as OpenAI-compatible servers behave (text-embeddings-inference, vLLM, Ollama):
    max_batch: int | None = None  # more inputs than this in one request: 413 (TEI's max_client_batch_size)
    max_input_tokens: int | None = None  # an input with more tokens (by ``count_tokens``): 400, as vLLM answers
    count_tokens: object = None  # texts -> token counts (the served model's tokenizer); None: words
    no_usage: bool = False  # answers without a usage field (TEI, Ollama)
    served: list[dict] | None = None  # GET /models lists these entries; None: the route is missing (404)
    models_answer: tuple[int, str, bytes] | None = None  # GET /models answered so instead: (status, content type, body)
    redirect_to: str | None = None  # every request answered 307 with Location: this URL + the request's path
    dims: dict[str, int] = field(default_factory=dict)  # vector sizes of served models beside DIM
    reply_model: str | None = None  # embedding answers name this model (None: the one asked for), as a proxy may
    scale: float = 1.0  # every vector component multiplied by this (1e20: a norm that overflows float32)
    gzip: bool = False  # 200 answers sent gzip-compressed (Content-Encoding: gzip)
    padding: int = 0  # spaces appended to a 200 answer's JSON (valid JSON); with gzip, a small body that inflates
    tokens_received: int = 0  # tokens of all embedding inputs answered with 200 (by ``count_tokens``)
    in_flight: int = 0
    max_in_flight: int = 0
    requests: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


#: How often a test server's loop looks for a shutdown (socketserver's default, 0.5 s, was half a
#: second of every test's teardown).
SHUTDOWN_POLL = 0.02


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a client that timed out and hung up mid-answer is what some tests want


class FakeEmbeddingServer:
    def __init__(self):
        self.script = Script()
        script = self.script

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                with script.lock:
                    script.requests.append({"path": self.path, "method": "GET", "model": None, "inputs": [], "body": {},
                                            "auth": self.headers.get("Authorization", ""), "headers": dict(self.headers),
                                            "time": time.monotonic()})
                if script.redirect_to is not None:
                    self._send(307, b"", {"Location": script.redirect_to + self.path})
                elif self.path.endswith("/models") and script.models_answer is not None:
                    status, content_type, raw = script.models_answer
                    self._send(status, raw, {"Content-Type": content_type})
                elif self.path.endswith("/models") and script.served is not None:
                    self._send(200, {"object": "list", "data": [{"object": "model", "owned_by": "test", **entry}
                                                                for entry in script.served]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "error"}})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                auth = self.headers.get("Authorization", "")
                inputs = body.get("input", body.get("messages", []))
                inputs = [inputs] if isinstance(inputs, str) else inputs
                with script.lock:
                    script.requests.append({"path": self.path, "model": body.get("model"), "inputs": inputs,
                                            "body": body, "auth": auth, "headers": dict(self.headers), "time": time.monotonic()})
                    status = script.fail_with.pop(0) if script.fail_with else 200
                    if time.monotonic() < script.storm_until:
                        status = 429
                    script.in_flight += 1
                    script.max_in_flight = max(script.max_in_flight, script.in_flight)
                try:
                    time.sleep(script.delay)
                    if status == 0:  # a connection reset (a keep-alive connection the server dropped)
                        self.close_connection = True
                        return
                    self._answer(status, body, auth, inputs)
                finally:
                    with script.lock:
                        script.in_flight -= 1

            def _answer(self, status, body, auth, inputs):
                if script.redirect_to is not None:
                    self._send(307, b"", {"Location": script.redirect_to + self.path})
                    return
                if auth.removeprefix("Bearer ") in script.bad_keys:
                    status = 401
                if body.get("model") in script.unknown_models:
                    status = 404
                if status != 200:
                    message = f"scripted {status}" + (f" for {auth}" if script.echo_auth else "")
                    if script.echo_key_at is not None:
                        message = "x" * script.echo_key_at + auth.removeprefix("Bearer ") + " was refused"
                    if script.echo_key_as is not None:
                        message = f"the key {script.echo_key_as(auth.removeprefix('Bearer '))} was refused"
                    self._send(status, {"error": {"message": message, "type": "error"}, "detail": message}, script.fail_headers)
                    return
                if self.path.endswith("/chat/completions"):
                    prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []) if isinstance(m, dict))
                    content = script.chat_reply_for(prompt) if script.chat_reply_for else None
                    with script.lock:
                        if content is None:
                            content = script.chat_replies.pop(0) if script.chat_replies else "[]"
                        fault = script.faults.pop(0) if script.faults else None
                    if fault == "error_body":  # a 200 holding an error object instead of choices (some proxies), the key echoed
                        self._send(200, {"error": {"message": f"quota exceeded for {auth}", "type": "insufficient_quota"}})
                        return
                    if fault is not None:  # "malformed_json" or "missing_data" (no choices): a 200 that is no answer
                        self._send(200, b'{"id": "chat-1", "choices": [' if fault == "malformed_json" else {"id": "chat-1"})
                        return
                    self._send(200, {"id": "chat-1", "object": "chat.completion", "created": 0, "model": body.get("model"),
                                     "choices": [{"index": 0, "finish_reason": "stop",
                                                  "message": {"role": "assistant", "content": content}}],
                                     "usage": script.chat_usage or {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
                    return
                counts = script.count_tokens(inputs) if script.count_tokens else [len(t.split()) for t in inputs]
                if script.max_batch is not None and len(inputs) > script.max_batch:
                    self._send(413, {"error": f"batch size {len(inputs)} > maximum allowed batch size {script.max_batch}",
                                     "error_type": "Validation"})
                    return
                if script.max_input_tokens is not None and max(counts) > script.max_input_tokens:
                    self._send(400, {"error": {"message": f"input of {max(counts)} tokens is longer than the model's maximum "
                                                          f"context length of {script.max_input_tokens} tokens"}})
                    return
                dim = script.dims.get(body.get("model")) or DIM.get(body.get("model"), 8)
                data = [{"object": "embedding", "index": i, "embedding": [x * script.scale for x in fake_vector(t, dim)]
                         if script.scale != 1.0 else fake_vector(t, dim)} for i, t in enumerate(inputs)]
                tokens = sum(counts)
                with script.lock:
                    script.tokens_received += tokens
                payload = {"object": "list", "data": data, "model": script.reply_model or body.get("model"),
                           **({} if script.no_usage else {"usage": {"prompt_tokens": tokens, "total_tokens": tokens}})}
                with script.lock:
                    fault = script.faults.pop(0) if script.faults else None
                if script.always_shuffle:
                    data.reverse()
                self._send(200, spoil(payload, fault))

            def _send(self, status, payload, headers=None):
                raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                headers = {"Content-Type": "application/json", **(headers or {})}
                if status == 200 and self.command == "POST" and (script.gzip or script.padding):
                    raw += b" " * script.padding
                    if script.gzip:
                        raw = gzip.compress(raw, compresslevel=9)
                        headers["Content-Encoding"] = "gzip"
                self.send_response(status)
                self.send_header("Content-Length", str(len(raw)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                if not (script.trickle and status == 200 and self.command == "POST"):
                    self.wfile.write(raw)
                    return
                for i in range(len(raw)):  # until the whole body is sent or the client hangs up
                    self.wfile.write(raw[i:i + 1])
                    self.wfile.flush()
                    time.sleep(script.trickle)

            def log_message(self, *args):
                pass

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    @property
    def requests(self) -> list[dict]:
        return self.script.requests

    def embedding_requests(self) -> list[dict]:
        """Embedding requests other than the one-text connection check."""
        return [r for r in self.requests if r.get("method") != "GET" and r["inputs"] != ["embedeval connection check"]]


def finishes_within(seconds: float, call):
    """Run ``call()`` in a daemon thread and return what it returned (or raise what it raised),
    failing the test if it has not finished within ``seconds``: code that waits forever fails the
    test instead of hanging it."""
    import pytest

    outcome = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as exc:  # handed to the test below
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        pytest.fail(f"still waiting after {seconds:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@contextlib.contextmanager
def serving(monkeypatch, keys: dict[str, str], max_attempts: int = 4):
    """Start a :class:`FakeEmbeddingServer` and point each provider at it: ``keys`` maps a provider
    (``OPENAI``, ``VOYAGE``, ``JINA``) to the API key to set; retries are made fast and bounded."""
    from embedeval.embedders import budget

    budget.reset()  # no limiter or --rpm/--tpm setting of an earlier test
    with FakeEmbeddingServer() as server:
        for provider, key in keys.items():
            monkeypatch.setenv(f"{provider}_API_KEY", key)
            monkeypatch.setenv(f"{provider}_BASE_URL", f"{server.url}/v1")
        monkeypatch.setenv("EMBEDEVAL_RETRY_BASE_DELAY", "0.01")
        monkeypatch.setenv("EMBEDEVAL_MAX_ATTEMPTS", str(max_attempts))
        try:
            yield server
        finally:
            budget.reset()

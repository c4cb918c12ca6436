"""A scripted OpenAI-compatible chat server, to try ``embedeval needles draft`` without a chat model.

It listens on 127.0.0.1 only and answers every ``POST /v1/chat/completions`` with the next reply of
a drafts file, in the file's order, whatever the prompt says; once the replies are used up it
answers HTTP 410 (the draft then stops with one ``error:`` line, keeping what it accepted). Every
other request gets a 404. It needs no API key and reads none.

A drafts file is JSON: ``{"description": "...", "replies": [REPLY, ...]}``. A REPLY that is a JSON
object (``{"groups": [...]}``, what ``needles draft`` asks a chat model for) is sent as its JSON
text; a REPLY that is a string is sent as it is (a refusal, a fenced answer, malformed JSON).
``examples/pg-essays-drafts.json`` scripts the worked example of docs/themes.md.

From a shell (port 0, the default, takes a free port; the URL is printed)::

    python examples/scripted_chat.py examples/pg-essays-drafts.json --port 8765
    embedeval needles draft --themes runs/pg-themes --llm "openai:scripted?base_url=http://127.0.0.1:8765/v1" ...

From Python (the notebooks): ``with ScriptedChat(replies) as chat: ... chat.url ...``; the server
stops when the block ends. With a real model, pass ``--llm openai:gpt-4o-mini`` (key in
``OPENAI_API_KEY``) instead and start nothing.

Only the standard library is used, so this file runs with any Python 3.10+.
"""

from __future__ import annotations

import argparse
import http.server
import json
import sys
import threading
from pathlib import Path

#: The path the server answers (an OpenAI-compatible base URL ends in ``/v1``).
CHAT_PATH = "/v1/chat/completions"
#: The model name the server reports when a request names none.
MODEL = "scripted"


def load_replies(path: str | Path) -> list[str]:
    """The replies of a drafts file (module docstring), each as the text the server sends. A file
    that is missing, not JSON or not of that shape is a :class:`ValueError` naming the problem."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read drafts file {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"drafts file {path} is not JSON ({exc.msg} at line {exc.lineno})") from None
    replies = data.get("replies") if isinstance(data, dict) else None
    if not isinstance(replies, list) or not replies:
        raise ValueError(f'drafts file {path} holds no replies: it must be {{"replies": [...]}} with at least one')
    texts = []
    for number, reply in enumerate(replies, start=1):
        if isinstance(reply, str):
            texts.append(reply)
        elif isinstance(reply, dict):
            texts.append(json.dumps(reply, ensure_ascii=False))
        else:
            raise ValueError(f"reply {number} of drafts file {path} is neither a JSON object nor a string")
    return texts


class ScriptedChat:
    """The server: ``replies`` (texts, :func:`load_replies`) answered in order on 127.0.0.1:``port``
    (0: a free port). A context manager that serves in a background thread; ``url`` is the base URL
    to give ``--llm openai:MODEL?base_url=URL``, ``prompts`` the prompts received, in order."""

    def __init__(self, replies: list[str], port: int = 0, log=None):
        self.replies = list(replies)
        self.log = log  # called with one line per request (main() prints them), or None
        self.prompts: list[str] = []
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def next_reply(self, prompt: str) -> str | None:
        """Record ``prompt`` and return the next reply (None once they are used up)."""
        with self._lock:
            self.prompts.append(prompt)
            number = len(self.prompts)
        reply = self.replies[number - 1] if number <= len(self.replies) else None
        if self.log:
            asked = next((line for line in prompt.splitlines() if line.startswith("Theme ")), prompt.split("\n", 1)[0])
            answered = f"reply {number} of {len(self.replies)}" if reply is not None else "HTTP 410, the replies are used up"
            self.log(f"request {number} ({asked[:80]}): {answered}")
        return reply

    def _handler(self):
        chat = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                if self.path.rstrip("/") != CHAT_PATH:
                    self._send(404, {"error": {"message": f"no route {self.path}: only POST {CHAT_PATH}"}})
                    return
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                    prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
                except (ValueError, AttributeError):
                    self._send(400, {"error": {"message": "the request is not an OpenAI chat-completions JSON body"}})
                    return
                reply = chat.next_reply(prompt)
                if reply is None:
                    self._send(410, {"error": {"message": f"all {len(chat.replies)} scripted replies are used up "
                                                          "(the draft asked for more than the drafts file scripts)"}})
                    return
                self._send(200, {"id": f"scripted-{len(chat.prompts)}", "object": "chat.completion", "created": 0,
                                 "model": body.get("model") or MODEL,
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": reply}}],
                                 "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})

            def do_GET(self):
                self._send(404, {"error": {"message": f"no route {self.path}: only POST {CHAT_PATH}"}})

            def _send(self, status: int, payload: dict):
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args):
                pass  # ``log`` says what each request got; the default access log would repeat it

        return Handler

    def __enter__(self) -> ScriptedChat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (Ctrl-C), then close the port."""
        try:
            self._server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            self._server.server_close()

    def stop(self) -> None:
        """Stop serving and close the port."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve the replies of a drafts file as an OpenAI-compatible chat model "
                                                 "on 127.0.0.1, in order (for embedeval needles draft).")
    parser.add_argument("drafts", help="the drafts file: {\"replies\": [...]}, e.g. examples/pg-essays-drafts.json")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default 0: a free one, printed); a draft that is to be resumed "
                        "needs a fixed port: the base_url, port included, is part of the chat model's identity")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        print(f"error: --port must be 0..65535, not {args.port}", file=sys.stderr)
        return 2
    try:
        replies = load_replies(args.drafts)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        server = ScriptedChat(replies, args.port, log=lambda line: print(line, flush=True))
    except OSError as exc:
        print(f"error: cannot listen on 127.0.0.1:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"serving {len(replies)} scripted replies at {server.url}; draft with "
          f"--llm \"openai:{MODEL}?base_url={server.url}\"; Ctrl-C stops", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A scripted OpenAI-compatible chat server, to try ``embedeval needles draft`` without a chat model.

It listens on 127.0.0.1 only and answers every ``POST /v1/chat/completions`` with the next scripted
reply; once the replies are used up it answers HTTP 410 (the draft then stops with one ``error:``
line, keeping what it accepted). Every other request gets a 404. It needs no API key and reads none.

A drafts file is JSON, in one of two shapes:

- ``{"description": "...", "themes": {TERM: [REPLY, ...], ...}}``: replies per theme, the theme
  named by a term of its top terms (``"writing"``). ``needles draft`` shows each theme's top terms
  in its prompt (``Theme 6: 89 passages; its top terms: essay, essays, write, writing, ...``); a
  request gets the next reply of the one TERM among them, whatever number the theme has in this
  run, so the script holds wherever the clusters are numbered otherwise. A prompt whose top terms
  hold no TERM, or more than one, gets HTTP 422 saying so.
- ``{"description": "...", "replies": [REPLY, ...]}``: replies in the file's order, whatever the
  prompt says.

A REPLY that is a JSON object (``{"groups": [...]}``, what ``needles draft`` asks a chat model for)
is sent as its JSON text; a REPLY that is a string is sent as it is (a refusal, a fenced answer,
malformed JSON). ``examples/pg-essays-drafts.json`` scripts the worked example of docs/themes.md
(per theme: ``essay`` and ``starting``).

The same server can be the draft's judge (``needles draft --judge``, the same ``base_url``): a
request whose prompt shows a ``Needle: ...`` line is a judge's, answered from the file's
``"verdicts"``, a list of ``{"question": TEXT, "needle": TEXT, "answers": true|false, "reason":
"..."}``: the verdict on the prompt's question and needle (its ``Question: ...`` and ``Needle: ...``
lines), sent as ``{"answers": ..., "reason": ...}``, however often it is asked. A question and
needle with no verdict get HTTP 422. Verdicts use up no reply.

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
import re
import sys
import threading
from pathlib import Path

#: The path the server answers (an OpenAI-compatible base URL ends in ``/v1``).
CHAT_PATH = "/v1/chat/completions"
#: The model name the server reports when a request names none.
MODEL = "scripted"
#: The line of a draft prompt that names the theme and its top terms.
THEME_LINE = re.compile(r"^Theme (-?\d+): .*?its top terms: (.*?)\.?$", re.M)
#: The lines of a judge's prompt that show the question and the needle it asks about.
QUESTION_LINE = re.compile(r"^Question: (.*)$", re.M)
NEEDLE_LINE = re.compile(r"^Needle: (.*)$", re.M)


def load_replies(path: str | Path) -> list[str] | dict[str, list[str]]:
    """The replies of a drafts file (module docstring), each as the text the server sends: a list
    (``"replies"``, in order) or, per theme, a dict from term to its list (``"themes"``). A file
    that is missing, not JSON or not of either shape is a :class:`ValueError` naming the problem."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read drafts file {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"drafts file {path} is not JSON ({exc.msg} at line {exc.lineno})") from None
    themes = data.get("themes") if isinstance(data, dict) else None
    if isinstance(data, dict) and "themes" in data and "replies" in data:
        raise ValueError(f'drafts file {path} holds both "themes" and "replies": keep one')
    if isinstance(themes, dict) and themes:
        per_theme: dict[str, list[str]] = {}
        for term, replies in themes.items():
            key = term.strip().lower()
            if not key or key in per_theme:  # "Kitchen" and "kitchen " would be one theme: one list silently lost
                raise ValueError(f"drafts file {path}: theme {term!r} is {'empty' if not key else 'given twice (case and spaces aside)'}")
            per_theme[key] = _reply_texts(replies, f"theme {term!r} of drafts file {path}")
        return per_theme
    replies = data.get("replies") if isinstance(data, dict) else None
    if not isinstance(replies, list) or not replies:
        raise ValueError(f'drafts file {path} holds no replies: it must be {{"replies": [...]}} or {{"themes": {{TERM: [...]}}}} '
                         "with at least one")
    return _reply_texts(replies, f"drafts file {path}")


def load_verdicts(path: str | Path) -> dict[tuple[str, str], str]:
    """The judge's verdicts of a drafts file (module docstring), (question, needle) -> the JSON
    text the server answers; none when the file has no ``"verdicts"``. A verdict that is not an
    object with a ``question`` and a ``needle`` text, an ``answers`` true or false and a ``reason``
    text, or a question and needle given twice, is a :class:`ValueError` naming it (call
    :func:`load_replies` first: it reads the file)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    verdicts = data.get("verdicts", []) if isinstance(data, dict) else []
    if not isinstance(verdicts, list):
        raise ValueError(f'"verdicts" of drafts file {path} is not a list')
    answers: dict[tuple[str, str], str] = {}
    for number, verdict in enumerate(verdicts, start=1):
        key = tuple(verdict.get(k) for k in ("question", "needle")) if isinstance(verdict, dict) else ()
        if not (len(key) == 2 and all(isinstance(t, str) and t.strip() for t in key) and isinstance(verdict.get("answers"), bool)
                and isinstance(verdict.get("reason"), str)):
            raise ValueError(f'verdict {number} of drafts file {path} is not {{"question": TEXT, "needle": TEXT, "answers": '
                             'true|false, "reason": TEXT}')
        key = tuple(t.strip() for t in key)
        if key in answers:
            raise ValueError(f"verdict {number} of drafts file {path}: its question and needle are given twice")
        answers[key] = json.dumps({"answers": verdict["answers"], "reason": verdict["reason"]}, ensure_ascii=False)
    return answers


def _reply_texts(replies, where: str) -> list[str]:
    if not isinstance(replies, list) or not replies:
        raise ValueError(f"{where} holds no replies: it must be a list with at least one")
    texts = []
    for number, reply in enumerate(replies, start=1):
        if isinstance(reply, str):
            texts.append(reply)
        elif isinstance(reply, dict):
            texts.append(json.dumps(reply, ensure_ascii=False))
        else:
            raise ValueError(f"reply {number} of {where} is neither a JSON object nor a string")
    return texts


def theme_of_prompt(prompt: str, terms) -> tuple[str | None, str]:
    """The one term of ``terms`` among the top terms the prompt's ``Theme N: ...`` line shows, and
    that line (None, with the reason, when the prompt has no such line, or its top terms hold none
    of ``terms`` or several)."""
    line = THEME_LINE.search(prompt)
    if not line:
        return None, "the prompt names no theme (no 'Theme N: ... its top terms: ...' line)"
    shown = {t.strip().lower() for t in line.group(2).split(",")}
    found = [term for term in terms if term in shown]
    if len(found) != 1:
        which = "none" if not found else "more than one (" + ", ".join(found) + ")"
        return None, f"theme {line.group(1)}'s top terms ({line.group(2)}) hold {which} of the scripted themes {', '.join(terms)}"
    return found[0], line.group(0)


class ScriptedChat:
    """The server: ``replies`` (:func:`load_replies`: texts answered in order, or per theme a dict
    from term to texts) on 127.0.0.1:``port`` (0: a free port). A context manager that serves in a
    background thread; ``url`` is the base URL to give ``--llm openai:MODEL?base_url=URL``,
    ``prompts`` the prompts received, in order."""

    def __init__(self, replies: list[str] | dict[str, list[str]], port: int = 0, log=None,
                 verdicts: dict[tuple[str, str], str] | None = None):
        self.per_theme = {term: list(texts) for term, texts in replies.items()} if isinstance(replies, dict) else None
        self.verdicts = dict(verdicts or {})  # (question, needle) -> the judge's answer (load_verdicts)
        self.replies = [t for texts in self.per_theme.values() for t in texts] if self.per_theme else list(replies)
        self._used = {term: 0 for term in self.per_theme or ()}
        self._replied = 0  # replies answered in order (a judge's requests use up none)
        self.log = log  # called with one line per request (main() prints them), or None
        self.prompts: list[str] = []
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def next_reply(self, prompt: str) -> tuple[int, str]:
        """Record ``prompt`` and return (HTTP status, the reply or the error message): 200 with the
        next reply (of the prompt's theme, when the replies are per theme); 410 once they are used
        up; 422 when the prompt's theme is none of the scripted ones. A judge's prompt (a
        ``Needle:`` line) gets the verdict on its question and needle, or 422 when there is none."""
        asked = next((line for line in prompt.splitlines() if line.startswith("Theme ")), prompt.split("\n", 1)[0])
        needle = NEEDLE_LINE.search(prompt)
        with self._lock:
            self.prompts.append(prompt)
            number = len(self.prompts)
            if needle:
                question = QUESTION_LINE.search(prompt)
                key = ((question.group(1) if question else "").strip(), needle.group(1).strip())
                asked = f"judge: {key[1]}"
                verdict = self.verdicts.get(key)
                status, reply = (200, verdict) if verdict else (422, f"no scripted verdict on the question {key[0]!r} and the "
                                                                     f"needle {key[1]!r}")
                answered = ("HTTP 422, no scripted verdict" if verdict is None else
                            "answers" if json.loads(verdict)["answers"] else "does not answer")
            elif self.per_theme is None:
                self._replied += 1
                status, reply = (200, self.replies[self._replied - 1]) if self._replied <= len(self.replies) else \
                    (410, f"all {len(self.replies)} scripted replies are used up (the draft asked for more than the drafts file scripts)")
                answered = f"reply {self._replied} of {len(self.replies)}" if status == 200 else "HTTP 410, the replies are used up"
            else:
                term, why = theme_of_prompt(prompt, list(self.per_theme))
                if term is None:
                    status, reply, answered = 422, f"no scripted replies for this prompt: {why}", "HTTP 422, no scripted theme"
                else:
                    used, texts = self._used[term], self.per_theme[term]
                    self._used[term] += 1
                    status, reply = (200, texts[used]) if used < len(texts) else \
                        (410, f"all {len(texts)} scripted replies of theme {term!r} are used up (the draft asked for more than "
                              "the drafts file scripts)")
                    answered = (f"{term} reply {used + 1} of {len(texts)}" if status == 200
                                else f"HTTP 410, the {term} replies are used up")
        if self.log:
            self.log(f"request {number} ({asked[:80]}): {answered}")
        return status, reply

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
                status, reply = chat.next_reply(prompt)
                if status != 200:
                    self._send(status, {"error": {"message": reply}})
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
        verdicts = load_verdicts(args.drafts)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        server = ScriptedChat(replies, args.port, log=lambda line: print(line, flush=True), verdicts=verdicts)
    except OSError as exc:
        print(f"error: cannot listen on 127.0.0.1:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    themes = f" for the themes {', '.join(replies)}" if isinstance(replies, dict) else ""
    themes += f" and {len(verdicts)} verdicts of a judge" if verdicts else ""
    judge = " (and --judge, the same, for the verdicts)" if verdicts else ""
    print(f"serving {len(server.replies)} scripted replies{themes} at {server.url}; draft with "
          f"--llm \"openai:{MODEL}?base_url={server.url}\"{judge}; Ctrl-C stops", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The judge of drafted needles (``needles draft --judge``): a chat model asked, for each one-hop
and inverted needle of a drafted group, whether the needle alone lets a careful reader answer the
group's question with its character. None of the draft's other checks tests that: they guard the
form (no shared word, not already answered by the corpus, inside the theme, not a duplicate), and a
needle that only alludes to its answer ("Katrin says starting a startup is like the Oktoberfest"
for "Which character has been to Munich?") passes them all.

The judge reads :data:`JUDGE_PROMPT` and answers JSON ``{"answers": true|false, "reason": "..."}``
(bare, inside a ```json fence or amid prose, as drafts are read: :func:`~embedeval.llm.answer_json`).
A needle it says does not answer, or on which it gives no usable verdict, rejects its group with
the judge's reason; a group's inverted needle is not asked about once its one-hop needle failed.
Each verdict is recorded: in the accepted group's ``checks`` (per needle) and in the needle set's
provenance (every verdict, of rejected groups too). Each usable verdict is also kept in the cache
folder as it arrives (:func:`kept_answer_path`: the judge, its settings and the prompt), and the
same prompt to the same judge is answered from there: a draft stopped or killed while the judge
works pays for none of the verdicts it heard again. Only what embedeval keeps there is read as a
verdict (:func:`read_kept_verdict`); anything else at a verdict's path (a damaged or foreign file, a
link, a folder, a pipe, a file past :data:`~embedeval.bounds.MAX_VERDICT_BYTES`) is one ``note:``
line, left as it is, and the judge asked again; a verdict that cannot be kept (an unwritable cache)
is one ``note:`` line too, and used for the run all the same.
"""

from __future__ import annotations

import json
from pathlib import Path

from embedeval.bounds import MAX_VERDICT_BYTES
from embedeval.errors import EmbedevalError, InputError
from embedeval.io import text_sha256, write_text_atomic
from embedeval.jsonread import NotAPlainFile, loads, plain_file_bytes
from embedeval.llm import ChatReply, answer_json
from embedeval.messages import note
from embedeval.needles import NO_OVERLAP_VARIANTS, NeedleSet
from embedeval.paths import default_cache_dir

#: The judge's sampling temperature: a verdict, not a draft.
JUDGE_TEMPERATURE = 0.0
#: ``max_tokens`` of a judge's answer (a verdict and a one-sentence reason).
JUDGE_ANSWER_TOKENS = 200
#: A plan's estimate of the tokens a judge's prompt holds beside :data:`JUDGE_PROMPT` itself (the
#: question, the needle and the character).
JUDGE_TEXT_TOKENS = 80
#: The cache's sub-folder that keeps the judge's answers (:func:`kept_answer_path`).
VERDICTS_FOLDER = "verdicts"
#: Characters of a judge's reason kept (in the rejected table, the provenance, a redraft).
REASON_CHARS = 300

JUDGE_PROMPT = """You check one needle of a needle-in-a-haystack test: a needle is one sentence hidden in a long text, and the question asks for it.

Question: {question}
Needle: {needle}

Read the needle alone, as a careful reader who knows the world but nothing else of the text. Does the needle let that reader answer the question with "{character}", from what it states or by one step of common knowledge (the country of a city, the city of a landmark)? A needle that only alludes, compares or hints does not answer it.

Answer with JSON only, no other text: {{"answers": true or false, "reason": "one sentence"}}
"""


def judge_prompt(question: str, needle: str, character: str) -> str:
    """The judge's request on one needle (:data:`JUDGE_PROMPT`)."""
    return JUDGE_PROMPT.format(question=question, needle=needle, character=character)


def parse_verdict(reply: ChatReply | str) -> tuple[bool, str]:
    """(answers, reason) of a judge's answer: the JSON object ``{"answers": true|false, "reason":
    "..."}`` read as drafts are read; anything else is one :class:`~embedeval.errors.InputError`
    saying what it was (a reason that is missing or not text is an empty one)."""
    data = answer_json(reply, "verdict")
    if not isinstance(data, dict) or not isinstance(data.get("answers"), bool):
        raise InputError('the answer is not a JSON object {"answers": true|false, "reason": "..."}')
    reason = data.get("reason")
    return data["answers"], _one_line(reason) if isinstance(reason, str) else ""


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= REASON_CHARS else line[:REASON_CHARS] + " ..."


class NeedleJudge:
    """The judge of one draft: ``llm`` (a :class:`~embedeval.llm.ChatLLM`) asked about every
    one-hop and inverted needle of the groups that passed the other checks; its requests are
    counted by ``meter`` (:class:`~embedeval.plan.ChatMeter`: every attempt, retries included) at
    ``price`` USD per million tokens, and its prompts kept in ``prompts`` (sha256 -> text: the
    draft's provenance); each answer is kept in the cache (``cache_dir``, :func:`kept_answer_path`)
    as it arrives, and a prompt asked before is answered from there, not sent. ``verdicts``: every
    verdict of this run, in order; ``requests`` counts the requests sent, ``usable`` the usable
    verdicts."""

    def __init__(self, llm, meter, price: float | None, prompts: dict[str, str], cache_dir=None):
        self.llm, self.meter, self.price, self.prompts, self.cache_dir = llm, meter, price, prompts, cache_dir
        self.verdicts: list[dict] = []
        self.requests = self.usable = 0

    @property
    def name(self) -> str:
        return self.llm.chat.name

    def judge(self, needle_set: NeedleSet, values: dict, reasons_of: dict[str, list[str]]) -> None:
        """Ask about each group of ``needle_set`` that no check refused yet (``reasons_of`` empty):
        its verdicts go into ``values`` (``needles.VARIANT.judge``) and :attr:`verdicts`, a needle
        that does not answer (or an unusable verdict) into ``reasons_of``."""
        for group in needle_set.groups:
            if reasons_of[group.id]:
                continue
            character = group.characters[0]
            for variant in (v for v in NO_OVERLAP_VARIANTS if v in group.needles):
                prompt = judge_prompt(group.question, group.needle(variant, character), character)
                sha = text_sha256(prompt)
                self.prompts[sha] = prompt
                reply = self._answer(prompt, sha, f"the judge's request on group {group.id}'s {variant} needle")
                try:
                    answers, reason = parse_verdict(reply)
                    reason = self.llm.scrub(reason)  # a key written with JSON escapes is one once read
                except InputError as exc:
                    answers, reason = None, str(exc)
                else:
                    self.usable += 1
                record = {"answers": answers, "reason": reason, "prompt_sha256": sha}
                values[group.id]["needles"][variant]["judge"] = record
                self.verdicts.append({"group_id": group.id, "character": character, "variant": variant, **record})
                self.meter.stop_if_over()  # an answer past its max_tokens took the spending past max_cost: no more requests
                if answers is not True:
                    said = (f"says the {variant} needle does not answer the question: {reason or 'no reason given'}"
                            if answers is False else f"gave no usable verdict on the {variant} needle: {reason}")
                    reasons_of[group.id].append(f"the judge ({self.llm.model}) {said}")
                    break  # the group is rejected: its other needle is not asked about

    def _answer(self, prompt: str, sha: str, what: str) -> ChatReply:
        """The judge's answer to ``prompt`` (sha256 ``sha``): the one kept in the cache
        (:func:`kept_answer_path`, read by :func:`read_kept_verdict`) when it was asked before, else
        asked for (a request, metered as ``what``) and, if it is a usable verdict, kept there at
        once, before anything else is sent: a draft killed while the judge works asks again for
        none of the verdicts it heard. Something else at that path is one ``note:`` line and is
        left as it is (the verdict heard is used, not kept there); a verdict that cannot be
        written is one ``note:`` line and used all the same."""
        path = kept_answer_path(self.cache_dir, self.name, sha)
        try:
            kept = read_kept_verdict(path)
        except InputError as exc:
            kept, foreign = None, True
            note(f"{path} is no verdict embedeval kept ({exc}): it is left as it is and the judge is asked again; its "
                 "verdict is used for this run but not kept (move that file away to keep verdicts)")
        else:
            foreign = False
        if kept is not None:
            return kept
        reply = self.meter.ask(self.llm, "judge", self.price, prompt, JUDGE_ANSWER_TOKENS, what)
        self.requests += 1
        try:
            parse_verdict(reply)
        except InputError:
            return reply  # no usable verdict: a rerun asks again
        if not foreign:
            _keep_verdict(path, reply)
        return reply


def read_kept_verdict(path) -> ChatReply | None:
    """The judge's answer kept at ``path`` (:func:`kept_answer_path`), or None when nothing is
    there. What embedeval keeps is a regular file of at most
    :data:`~embedeval.bounds.MAX_VERDICT_BYTES` holding the JSON object ``{"text": TEXT, "kind":
    "text", "finish_reason": TEXT or null}`` whose text is a usable verdict (:func:`parse_verdict`);
    anything else there (a link, a folder, a pipe, a device, a longer file, not JSON, a field of
    another type, no usable verdict, unreadable) is one :class:`~embedeval.errors.InputError`
    saying what it is, found without following a link, waiting on a pipe or reading past the bound."""
    try:
        kept = loads(plain_file_bytes(path, MAX_VERDICT_BYTES).decode("utf-8"))
    except FileNotFoundError:
        return None
    except NotAPlainFile as exc:
        raise InputError(str(exc)) from None
    except OSError as exc:
        raise InputError(f"it cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError("it is not UTF-8") from None
    except ValueError as exc:  # a syntax error, or past a JSON limit
        raise InputError(f"it is not JSON: {exc}") from None
    if not isinstance(kept, dict):
        raise InputError("it is not a JSON object")
    text, kind, finish_reason = kept.get("text"), kept.get("kind"), kept.get("finish_reason")
    if not isinstance(text, str):
        raise InputError(f"its text is {_kind_of(text)}, not a string")
    if kind != "text":
        raise InputError(f"its kind is {_kind_of(kind)}, not 'text'")
    if finish_reason is not None and not isinstance(finish_reason, str):
        raise InputError(f"its finish_reason is {_kind_of(finish_reason)}, not a string or null")
    reply = ChatReply(text, kind, finish_reason=finish_reason)
    try:
        parse_verdict(reply)
    except InputError as exc:
        raise InputError(f"its text is no usable verdict: {exc}") from None
    return reply


def _kind_of(value) -> str:
    """A kept field's value as a note names it: a short string quoted, else its JSON type."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else f"{value[:40]!r}..."
    return {type(None): "missing or null", bool: "a boolean", int: "a number", float: "a number", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)


def _keep_verdict(path: Path, reply: ChatReply) -> None:
    """Write ``reply`` (a usable verdict) to ``path`` as :func:`read_kept_verdict` reads it; one
    that cannot be written (no permission, no space, longer than
    :data:`~embedeval.bounds.MAX_VERDICT_BYTES`) is one ``note:`` line, and the draft goes on."""
    text = json.dumps({"text": reply.text, "kind": reply.kind, "finish_reason": reply.finish_reason})
    try:
        if len(text.encode("utf-8")) > MAX_VERDICT_BYTES:
            raise InputError(f"{len(text.encode('utf-8')):,} bytes, past the {MAX_VERDICT_BYTES:,} a kept verdict may hold")
        write_text_atomic(path, text)
    except (EmbedevalError, OSError) as exc:  # the cache's folder changed meanwhile: an OSError atomic_path passes on
        said = exc.strerror or exc if isinstance(exc, OSError) else exc
        note(f"the judge's verdict is used for this run but not kept in {path} ({said}); a rerun asks the judge "
             "again")


def kept_answer_path(cache_dir, judge: str, prompt_sha: str) -> Path:
    """Where the answer of the judge ``judge`` (its chat spec) to the prompt of sha256
    ``prompt_sha`` is kept: ``<cache_dir>/verdicts/KEY.json`` (default: the user cache,
    ``$EMBEDEVAL_CACHE``), KEY the sha256 of the judge, its temperature, its ``max_tokens`` and the
    prompt's sha256 (a verdict at temperature 0 is the judge's answer to that prompt)."""
    key = text_sha256(f"{judge}\0{JUDGE_TEMPERATURE}\0{JUDGE_ANSWER_TOKENS}\0{prompt_sha}")
    return (Path(cache_dir) if cache_dir else default_cache_dir()) / VERDICTS_FOLDER / f"{key}.json"

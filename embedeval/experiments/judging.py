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
works pays for none of the verdicts it heard again.
"""

from __future__ import annotations

import json
from pathlib import Path

from embedeval.errors import InputError
from embedeval.io import text_sha256, write_text_atomic
from embedeval.jsonread import load_file
from embedeval.llm import ChatReply, answer_json
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
        (:func:`kept_answer_path`) when it was asked before, else asked for (a request, metered as
        ``what``) and, if it is a usable verdict, kept there at once, before anything else is sent:
        a draft killed while the judge works asks again for none of the verdicts it heard."""
        path = kept_answer_path(self.cache_dir, self.name, sha)
        try:
            kept = load_file(path)
            return ChatReply(kept["text"], kept["kind"], finish_reason=kept["finish_reason"])
        except (OSError, ValueError, KeyError, TypeError):  # not asked yet, or a damaged file: asked again
            pass
        reply = self.meter.ask(self.llm, "judge", self.price, prompt, JUDGE_ANSWER_TOKENS, what)
        self.requests += 1
        try:
            parse_verdict(reply)
        except InputError:
            return reply  # no usable verdict: a rerun asks again
        write_text_atomic(path, json.dumps({"text": reply.text, "kind": reply.kind, "finish_reason": reply.finish_reason}))
        return reply


def kept_answer_path(cache_dir, judge: str, prompt_sha: str) -> Path:
    """Where the answer of the judge ``judge`` (its chat spec) to the prompt of sha256
    ``prompt_sha`` is kept: ``<cache_dir>/verdicts/KEY.json`` (default: the user cache,
    ``$EMBEDEVAL_CACHE``), KEY the sha256 of the judge, its temperature, its ``max_tokens`` and the
    prompt's sha256 (a verdict at temperature 0 is the judge's answer to that prompt)."""
    key = text_sha256(f"{judge}\0{JUDGE_TEMPERATURE}\0{JUDGE_ANSWER_TOKENS}\0{prompt_sha}")
    return (Path(cache_dir) if cache_dir else default_cache_dir()) / VERDICTS_FOLDER / f"{key}.json"

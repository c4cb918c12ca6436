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
provenance (every verdict, of rejected groups too).
"""

from __future__ import annotations

from embedeval.errors import InputError
from embedeval.io import text_sha256
from embedeval.llm import ChatReply, answer_json
from embedeval.needles import NO_OVERLAP_VARIANTS, NeedleSet

#: The judge's sampling temperature: a verdict, not a draft.
JUDGE_TEMPERATURE = 0.0
#: ``max_tokens`` of a judge's answer (a verdict and a one-sentence reason).
JUDGE_ANSWER_TOKENS = 200
#: A plan's estimate of the tokens a judge's prompt holds beside :data:`JUDGE_PROMPT` itself (the
#: question, the needle and the character).
JUDGE_TEXT_TOKENS = 80
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
    ``price`` USD per million tokens, and its prompts kept in ``prompts`` (sha256 -> text: the draft's provenance). ``verdicts``:
    every verdict of this run, in order; ``requests`` and ``usable`` count its answers."""

    def __init__(self, llm, meter, price: float | None, prompts: dict[str, str]):
        self.llm, self.meter, self.price, self.prompts = llm, meter, price, prompts
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
                reply = self.meter.ask(self.llm, "judge", self.price, prompt, JUDGE_ANSWER_TOKENS,
                                       f"the judge's request on group {group.id}'s {variant} needle")
                self.requests += 1
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

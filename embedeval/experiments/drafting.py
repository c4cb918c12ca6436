"""Needles for a corpus of one's own, drafted by a chat model per theme and kept only when every
check passes (issue 38: Context Rot wrote its needles by hand inside a theme; this closes the loop).

:func:`run_draft` reads a themes run (:mod:`embedeval.experiments.themes`: its clusters, each one's
MMR representatives and top terms) and, for each chosen theme, asks the chat model
(:class:`~embedeval.llm.ChatLLM`, named as ``expand`` names it) for ``per_theme`` needle groups in
the needle-set group format, answered as JSON ``{"groups": [...]}`` (a bare object, or one inside a
```json fence). Every drafted group goes through the existing checks, and each value is recorded
per needle (:class:`DraftChecker`):

1. the needle-set validator (``needles check``, :func:`~embedeval.needles.group_problems`): fields,
   the character in every needle, the keyword in the question, and no content lemma shared by the
   question and the one-hop or inverted needle; a draft must give the one-hop and inverted needles
   (``nolima``'s default variants) and a keyword, and no character of an accepted group;
2. the absence check: no chunk of the whole corpus (the themes run's chunks) holds the group's
   keyword or one of its character names as whole words (compared as every check compares words,
   :func:`~embedeval.text.words`), and the question's top k chunks
   (:func:`~embedeval.experiments.context_rot.answer_absence`, exact search) are recorded, so the
   corpus does not already answer it; the reason names the chunk (its rank when it is among the
   top k);
3. theme membership (:func:`~embedeval.experiments.themes.theme_membership`, the theme as target):
   every needle blends in (probability > threshold and outside percentile >= its minimum);
4. needle-question similarity (:func:`~embedeval.experiments.context_rot.needle_question_similarity`)
   for ``embedder`` (default: the themes run's), recorded for every needle; with ``nq_band``
   (lo, hi) the one-hop and inverted needles must lie in it (literal needles share the question's
   words on purpose, so the band is not theirs);
5. no needle is a near-duplicate of a needle of an accepted group: cosine (the themes run's
   embedder, every character written as "someone") below ``duplicate_cosine``; and no accepted
   group asks the same question (the same words).

A theme's rejected drafts go back to the model with their reasons, for the groups still missing,
up to ``attempts`` requests per theme. Every rejected draft (and every answer that is no JSON, such
as a refusal) is a row of the rejected table with its reason: nothing is dropped silently. The
output is a needle set ``nolima --needles`` takes as it is, with provenance: the chat model, every
prompt sent (by sha256), the themes run (path, the sha256 of its ``themes.json`` and the key of
what defines its themes, :func:`~embedeval.experiments.themes.themes_key`), each check's
settings and each needle's values. It is written after every request, so an interrupted draft
(a network failure) loses no accepted group, and a rerun with the same themes run and chat model
resumes, asking only for the groups still missing. One draft at a time writes an output (a lock
beside it, :func:`~embedeval.io.output_file_lock`).

With a judge (``DraftConfig.judge``, :mod:`embedeval.experiments.judging`) a group that passed
checks 1-4 is also refused when the judge says its one-hop or inverted needle does not let a
careful reader answer the question; without one, no check tests that, and the needle set's
description says so.

What the draft spends is bounded as it runs, not only in the plan: an answer is asked for with
``max_tokens`` (:func:`answer_tokens`), holds at most the groups asked for (the rest are cut
before any check), a redraft quotes back only the known fields of the rejected groups, cut
(:func:`_draft_text`), ``attempts`` bounds the requests sent per theme, a retry of a failed one
included, and with ``max_cost`` every attempt sent (of the chat model and of the judge, retries
included) is counted (:meth:`~embedeval.plan.ChatMeter.ask`): none is sent that could take the
spending past it, and an answer longer than its ``max_tokens`` that took it past stops the draft
once the answer is written. Every answer is written before it is checked (a row of the rejected
table whose reason begins :data:`UNCHECKED` until its checks end), so a draft stopped, failed or
killed (SIGTERM, ``kill -9``) while it checks an answer, the judge's requests included, loses
nothing paid for: a rerun checks that answer first, without asking for it again. What was spent
(``provenance.usage``) is written with the needle set, so it does not count a run that ended before
any group was accepted (no needle set yet; the rejected table keeps answers, not usage), nor the
judge's requests on an answer a kill cut short (docs/needles.md).
"""

from __future__ import annotations

import csv
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from embedeval.defaults import (
    API_TOKEN_MARGIN, DEFAULT_ABSENCE_TOP_K, DEFAULT_DRAFT_PROMPT_CHUNKS, DEFAULT_DUPLICATE_COSINE, DEFAULT_INDEX, DEFAULT_VARIANTS,
)
from embedeval.derived import file_sha256
from embedeval.embedders.registry import load_embedder
from embedeval.embedders.tokens import load_token_counter
from embedeval.errors import APIError, ConfigError, EmbedevalError, InputError
from embedeval.experiments.context_rot import answer_absence, needle_question_similarity, pair_rows, question_key
from embedeval.experiments.judging import JUDGE_ANSWER_TOKENS, JUDGE_PROMPT, JUDGE_TEMPERATURE, JUDGE_TEXT_TOKENS, NeedleJudge
from embedeval.experiments.themes import (
    MANIFEST, check_themes_files, load_themes, read_manifest, resolve_themes, theme_membership, theme_top_terms, themes_chunks, themes_key,
)
from embedeval.io import (
    Force, atomic_path, check_output_file, json_text, output_file_lock, read_json, read_table, text_sha256, write_text_atomic,
    written_by_embedeval,
)
from embedeval.llm import ChatLLM, ChatReply, answer_json, chat_spec_difference, check_temperature, parse_chat_spec
from embedeval.plan import ChatMeter, CostCeilingReached, EmbedderPlan, check_ceiling, check_price, plan_documents
from embedeval.metrics.neighbours import nearest_cosines
from embedeval.options import (
    ATTEMPTS, MIN_OUTSIDE_PERCENTILE, PER_THEME, TEMPERATURE, THRESHOLD, check_options, number_in, whole_at_least,
)
from embedeval.needles import (
    CHAR, NEEDLE_VARIANTS, NO_OVERLAP_VARIANTS, NeedleGroup, NeedleSet, group_problems, parse_needle_set, raw_questions,
)
from embedeval.text import WordIndex, words
from embedeval.progress import step

#: ``provenance.tool`` of a needle set this module wrote: only such a file is resumed (or replaced).
DRAFT_TOOL = "embedeval needles draft"
#: The columns of the rejected table.
REJECTED_COLUMNS = ["theme", "attempt", "group_id", "question", "character", "keyword", "needles", "reason", "prompt_sha256",
                    "answer"]
#: A plan's estimate of the tokens of one drafted group as JSON (question, character, keyword, two
#: or three needles) with its reason: what a redraft sends back per rejected one.
GROUP_TOKENS_ESTIMATE = 150
#: ``max_tokens`` of an answer asked for N groups: this many per group, plus :data:`ANSWER_TOKENS_BASE`
#: (prose or a fence around the JSON). A real group takes about 150.
ANSWER_TOKENS_PER_GROUP = 300
ANSWER_TOKENS_BASE = 200
#: The fields of a drafted group a redraft quotes back (the model's invented fields and embedeval's
#: own stay home), each text cut at :data:`SENT_BACK_CHARS` characters.
SENT_BACK_FIELDS = ("question", "character", "character_set", "keyword", "needles")
SENT_BACK_CHARS = 300
#: The fields of a drafted group that go into the needle set: those asked for, and ``id`` and
#: ``category`` (filled in when missing or taken). Any other field a model writes (``distractors``,
#: ``questions``: texts no check tests; ``notes``) stays out, its name recorded in ``checks.ignored_fields``.
DRAFT_FIELDS = ("id", "category", *SENT_BACK_FIELDS)
#: How the rejected table's reason of an answer not checked to the end begins (the draft was stopped,
#: failed or was killed while checking it: :func:`_unchecked`): a rerun checks it first, without
#: asking for it again, as :data:`RECHECKED` ends the reason.
UNCHECKED = "not checked to the end"
RECHECKED = " (a rerun checks it first, without asking again)"
#: Characters of a reason a redraft quotes back.
REASON_SENT_BACK_CHARS = 600
#: What the description of a needle set drafted without a judge says.
NOT_JUDGED = ("No check tested whether a needle answers its question: no judge was asked (needles draft --judge asks a "
              "chat model, per one-hop and inverted needle).")
#: How the near-duplicate check writes every needle's character (:func:`anonymous`).
ANONYMOUS = "someone"
#: Characters of a representative chunk shown in the prompt (a long chunk is cut at a word).
PROMPT_CHUNK_CHARS = 600

PROMPT = """You write needles for a needle-in-a-haystack test of retrieval over the corpus described below.
A needle is one sentence hidden in the corpus; a question asks for it. Write {n} needle groups for this theme of the corpus.

Theme {cluster}: {size} passages; its top terms: {terms}.
Representative passages of the theme:
{passages}

Rules:
- The needles must read like passages of this theme: same subject, register and vocabulary, so that they blend in.
- "character": an invented first name that appears nowhere in the corpus, different in every group; every needle names it literally.
- "question" asks which character the needle is about (for example "Which character ...?"); "keyword" is one word of the question that the corpus does not contain.
- One-hop: the "onehop" and "inverted" needles share no content word (nor a form of one: write/wrote, city/cities) with the question; the reader needs one step of world knowledge to link them.
- "inverted" says the same fact as "onehop" in another order; "literal" (optional) answers the question with the question's own words.
- The corpus must not already answer the question, and no two groups may say the same thing.

Answer with JSON only, no other text:
{{"groups": [{{"question": "...", "character": "...", "keyword": "...", "needles": {{"onehop": "...", "inverted": "...", "literal": "..."}}}}]}}
"""
REDRAFT = """{prompt}
Your earlier drafts were rejected, each for the reason given:
{rejected}
Write {n} new groups that avoid these problems, with the same rules, as JSON only.
"""


@dataclass(frozen=True)
class Theme:
    """One theme of a themes run, as the prompt shows it: its cluster number, size, top terms and
    the texts of its representative chunks (MMR order)."""

    cluster: int
    size: int
    top_terms: tuple[str, ...]
    representatives: tuple[str, ...]


@dataclass(frozen=True)
class DraftConfig:
    """Everything a draft depends on (recorded in the output's provenance)."""

    themes: str
    llm: str
    out: str
    per_theme: int = PER_THEME.field()
    theme_ids: tuple[int | str, ...] | None = None  # by number or by a top term (``writing``); None: every theme of the run
    attempts: int = ATTEMPTS.field()
    embedder: str | None = None  # needle-question similarity; None: the themes run's embedder
    nq_band: tuple[float, float] | None = None
    threshold: float = THRESHOLD.field()
    min_outside_percentile: float = MIN_OUTSIDE_PERCENTILE.field()
    absence_top_k: int = DEFAULT_ABSENCE_TOP_K
    duplicate_cosine: float = DEFAULT_DUPLICATE_COSINE
    prompt_chunks: int = DEFAULT_DRAFT_PROMPT_CHUNKS
    temperature: float = TEMPERATURE.field()
    judge: str | None = None  # a chat spec, as ``llm``: asks whether each one-hop and inverted needle answers; None: no judge

    def validate(self) -> None:
        """One-line :class:`~embedeval.errors.ConfigError` for settings that cannot work."""
        if self.judge is not None:
            try:
                parse_chat_spec(self.judge)  # a bad spec: one line, before anything is read
            except ConfigError as exc:
                raise ConfigError(f"`judge`: {exc}", "judge", *(p for p in exc.parameters if p != "llm")) from None
        check_temperature(self.temperature)
        check_options(self)  # per_theme, attempts, threshold, min_outside_percentile
        for parameter in ("absence_top_k", "prompt_chunks"):  # no flags of their own
            whole_at_least(1).check(getattr(self, parameter), parameter)
        if self.nq_band is not None:
            lo, hi = self.nq_band
            if not -1 <= lo <= hi <= 1:
                raise ConfigError(f"`nq_band` must be LO,HI with -1 <= LO <= HI <= 1, not {lo},{hi}", "nq_band")
        number_in(0, 1, low_open=True).check(self.duplicate_cosine, "duplicate_cosine")
        if self.theme_ids is not None and not self.theme_ids:
            raise ConfigError("`theme_ids` names no theme (leave it unset for every theme)", "theme_ids")
        names = [str(theme).strip().lower() for theme in self.theme_ids or ()]
        if len(set(names)) != len(names):
            repeated = next(theme for theme in names if names.count(theme) > 1)
            raise ConfigError(f"`theme_ids` names theme {repeated} twice in {','.join(map(str, self.theme_ids))}: each theme "
                              "is drafted once (`per_theme` sets how many groups)", "theme_ids", "per_theme")

    def check_rules(self) -> dict:
        """The settings of the checks, as the provenance records them."""
        return {"threshold": self.threshold, "min_outside_percentile": self.min_outside_percentile,
                "absence_top_k": self.absence_top_k, "duplicate_cosine": self.duplicate_cosine,
                "nq_band": list(self.nq_band) if self.nq_band else None}


@dataclass
class DraftResult:
    """What a draft produced: the output needle set (as written), the rejected table, and per theme
    the groups accepted (in all, this run included) and the drafts rejected in this run."""

    needle_set: dict
    rejected: pd.DataFrame
    accepted: dict[int, int]
    rejected_now: dict[int, int]
    requests: int
    out: Path
    rejected_path: Path
    judge_requests: int = 0


@dataclass(frozen=True)
class DraftPlan:
    """What a draft would send to the chat model (``--plan``): per theme the prompt's tokens, and
    in all the requests (one per theme at least, ``attempts`` at most) and the tokens sent and
    received at most (answers at most their ``max_tokens``, :func:`answer_tokens`; redrafts carry
    the rejected groups back, estimated at :data:`GROUP_TOKENS_ESTIMATE` each), counted with the
    reference tokenizer: an estimate within ``token_margin``. With a judge, ``judge_requests_max`` and ``judge_tokens_max`` (two
    needles of every group an answer may hold, each a prompt and up to
    :data:`~embedeval.experiments.judging.JUDGE_ANSWER_TOKENS` of answer), at ``judge_usd_per_million``."""

    chat_model: str
    themes: list[dict]
    requests_min: int
    requests_max: int
    tokens_max: int
    tokenizer: str
    token_margin: float
    usd_per_million: float | None
    usd_high: float | None
    judge_model: str | None = None
    judge_requests_max: int = 0
    judge_tokens_max: int = 0
    judge_usd_per_million: float | None = None


def rejected_path_of(out: str | Path) -> Path:
    """Where the rejected drafts of the needle set ``out`` go: ``NAME.rejected.csv`` beside it."""
    out = Path(out)
    return out.with_name(f"{out.stem}.rejected.csv")


def read_themes(run: str | Path, theme_ids=None, prompt_chunks: int = DEFAULT_DRAFT_PROMPT_CHUNKS) -> list[Theme]:
    """The themes of a finished themes run (``theme_ids``: those, in that order, each by its number
    or by a term of its top terms, :func:`~embedeval.experiments.themes.resolve_theme`; None: all),
    each with its first ``prompt_chunks`` representatives' texts. A folder that is no themes run,
    an id that is no cluster of it, a term that names no theme or several, or two names of one
    theme is one :class:`~embedeval.errors.InputError`."""
    folder = Path(run)
    read_manifest(folder)  # a missing folder or an unfinished run: one line
    known = list(theme_top_terms(folder))  # each theme a number, listed once (else one line naming the line), in file order
    clusters = read_table(folder / "clusters.csv", ["cluster", "size", "representatives", "top_terms"],
                          integers=["cluster", "size"])  # an edited cell: one line naming it
    if clusters["cluster"].isna().any() or clusters["size"].isna().any():
        raise InputError(f"{folder / 'clusters.csv'} has a theme without its number or size (the file was edited or damaged): "
                         "run embedeval themes again")
    chunks = read_table(folder / "chunks.parquet", ["chunk_id", "text"])
    text_of = dict(zip(chunks["chunk_id"].astype(str), chunks["text"]))
    wanted = known if theme_ids is None else resolve_themes(folder, theme_ids, "theme_ids")
    themes = []
    for cluster in wanted:
        line, row = next((i + 2, r) for i, (_, r) in enumerate(clusters.iterrows()) if int(float(r["cluster"])) == cluster)
        if not 1 <= float(row["size"]) < 2**63:
            raise InputError(f"{folder / 'clusters.csv'}, line {line}, column size: {row['size']} is not the size of a theme (a "
                             "whole number >= 1; the file was edited or damaged): run embedeval themes again")
        cell = row["representatives"]
        ids = [i for i in (cell if isinstance(cell, str) else "").split(";") if i]
        unknown = next((i for i in ids if i not in text_of), None) if ids else ""
        if unknown is not None:  # the prompt would show the theme without (some of) its passages
            said = f"{unknown!r} is no chunk of its chunks.parquet" if unknown else "the theme has no representatives"
            raise InputError(f"{folder / 'clusters.csv'}, line {line}, column representatives: {said} (the file was edited or "
                             "damaged): run embedeval themes again")
        terms = tuple(t for t in (row["top_terms"] if isinstance(row["top_terms"], str) else "").split(";") if t)
        themes.append(Theme(int(cluster), int(row["size"]), terms, tuple(text_of[i] for i in ids[:prompt_chunks] if i in text_of)))
    check_themes_files(folder)  # a folder the draft's membership check would refuse: refused by its plan too
    return themes


def draft_prompt(theme: Theme, n: int) -> str:
    """The first request for theme ``theme``: its representatives, top terms and the rules, asking
    for ``n`` groups (:data:`PROMPT`)."""
    passages = "\n".join(f"- {_cut(text, PROMPT_CHUNK_CHARS)}" for text in theme.representatives)
    return PROMPT.format(n=n, cluster=theme.cluster, size=theme.size, terms=", ".join(theme.top_terms) or "-", passages=passages)


def redraft_prompt(prompt: str, n: int, rejected: list[tuple[str, str]]) -> str:
    """A theme's next request: its first prompt, the rejected drafts (their known fields, cut:
    :func:`_draft_text`) with their reasons, and ``n`` groups asked for again (:data:`REDRAFT`)."""
    listed = "\n".join(f"- {draft} -> rejected: {_cut(reason, REASON_SENT_BACK_CHARS)}" for draft, reason in rejected)
    return REDRAFT.format(prompt=prompt.rstrip("\n"), rejected=listed, n=n)


def answer_tokens(n: int) -> int:
    """``max_tokens`` of an answer asked for ``n`` groups (:data:`ANSWER_TOKENS_PER_GROUP`)."""
    return ANSWER_TOKENS_BASE + n * ANSWER_TOKENS_PER_GROUP


def _cut(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: text.rfind(" ", 0, limit) if " " in text[:limit] else limit] + " ..."


sha256_text = text_sha256


def parse_drafts(answer) -> list:
    """The drafted groups of a chat answer (text, or a :class:`~embedeval.llm.ChatReply`): the JSON
    object ``{"groups": [...]}``, the whole answer, inside a ```json fence or amid prose
    (:func:`~embedeval.llm.answer_json`). Anything else is one
    :class:`~embedeval.errors.InputError` saying what the answer was (a content that is not text,
    empty, no JSON: a refusal, malformed or cut-off JSON, JSON nested too deep, another shape)."""
    data = answer_json(answer if answer is not None else "", 'JSON object {"groups": [...]}')
    if not isinstance(data, dict) or not isinstance(data.get("groups"), list):
        raise InputError('the answer is not a JSON object {"groups": [...]}')
    if not data["groups"]:
        raise InputError("the answer holds no groups")
    return data["groups"]


def anonymous(needle: str, group: dict) -> str:
    """A needle with its character (``{CHAR}`` or the group's names) written as :data:`ANONYMOUS`:
    two needles that say the same of different characters are duplicates (a name alone moves
    all-MiniLM-L6-v2's cosine of two such needles down to about 0.8)."""
    names = sorted(_names(group), key=len, reverse=True)
    text = needle.replace(CHAR, ANONYMOUS)
    return re.sub(r"\b(" + "|".join(map(re.escape, names)) + r")\b", ANONYMOUS, text, flags=re.I) if names else text


def _names(group: dict) -> set[str]:
    names = [*(group.get("character_set") if isinstance(group.get("character_set"), list) else []), group.get("character")]
    return {str(n).lower() for n in names if isinstance(n, str)}


def _name_keys(group: dict) -> set[str]:
    """The group's character names as the checks compare words (:func:`~embedeval.text.words`):
    ``Yüki`` and ``YUKI`` are the name ``yuki``."""
    return {" ".join(words(name)) for name in _names(group)} - {""}


def _draft_text(raw) -> str:
    """A drafted group as the redraft prompt quotes it: its known fields only
    (:data:`SENT_BACK_FIELDS`; the needles of known variants), each text cut at
    :data:`SENT_BACK_CHARS` characters; a draft that is no object, as a short text."""
    if not isinstance(raw, dict):
        return _cut(_json_or_kind(raw), SENT_BACK_CHARS)
    known = {}
    for field in SENT_BACK_FIELDS:
        if field not in raw:
            continue
        value = raw[field]
        if field == "needles" and isinstance(value, dict):
            known[field] = {v: _cut(_json_or_kind(value[v]), SENT_BACK_CHARS) for v in NEEDLE_VARIANTS if v in value}
        elif field == "character_set" and isinstance(value, list):
            known[field] = [_cut(_json_or_kind(name), 40) for name in value[:10]]
        else:
            known[field] = _cut(_json_or_kind(value), SENT_BACK_CHARS)
    return json.dumps(known, ensure_ascii=False)


#: What ends a line: a drafted text holding one is refused (:meth:`DraftChecker._structure`).
_LINE_BREAK = re.compile("[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")


def _scrubbed(groups: list, scrub) -> list:
    """``groups`` with ``scrub`` applied to each text in them on its own, as read from their JSON (a
    key the model wrote with JSON escapes, ``sk\\u002d...``, is itself once read): every value, and
    every field's name (an unknown one is written among a group's ``ignored_fields`` and quoted in
    reasons), never the JSON text as a whole. ``scrub`` (:meth:`~embedeval.llm.ChatLLM.scrub`)
    replaces no key too plain to tell from words, so ``keyword`` and a needle's words stay."""

    def values(value):
        if isinstance(value, str):
            return scrub(value)
        if isinstance(value, list):
            return [values(item) for item in value]
        if isinstance(value, dict):
            return {scrub(name): values(item) for name, item in value.items()}
        return value

    try:
        return values(groups)
    except RecursionError:
        raise InputError("the answer nests its JSON too deep to read") from None


def _json_or_kind(value) -> str:
    """A text as it is; any other JSON value as its JSON (its type's name when too deep to write)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (RecursionError, ValueError):
        return f"<{type(value).__name__}>"


class DraftChecker:
    """Checks 1-5 of the module docstring on drafted groups of one theme against a themes run and the
    groups accepted so far: loads the run's chunks and embedder (and the needle-question embedder)
    once. With ``judge`` (:class:`~embedeval.experiments.judging.NeedleJudge`), the groups that
    pass checks 1-4 are put to it too."""

    def __init__(self, config: DraftConfig, cache_dir=None, progress: bool = False, judge: NeedleJudge | None = None):
        self.config, self.cache_dir, self.progress, self.judge = config, cache_dir, progress, judge
        manifest, *_ = load_themes(config.themes)  # fitted with other packages: refused before any request
        self.embedder_spec = manifest["settings"]["embedder"]
        self.chunks, _ = themes_chunks(config.themes)
        self.corpus = WordIndex(chunk.text for chunk in self.chunks)  # the absence check searches all of it
        self.model = load_embedder(self.embedder_spec, cache_dir=cache_dir, progress=progress)
        if self.model.fingerprint != manifest["embedder_fingerprint"]:
            raise InputError(f"{config.themes} was made with another {self.embedder_spec} (its fingerprint differs); "
                             "run embedeval themes again")
        nq_spec = config.embedder or self.embedder_spec
        self.nq_model = self.model if nq_spec == self.embedder_spec else load_embedder(nq_spec, cache_dir=cache_dir, progress=progress)

    def check(self, raws: list, theme: int, accepted: list[dict]) -> tuple[list[dict], list[tuple[object, str]]]:
        """(groups accepted, in draft order, each with ``checks``; (raw draft, reason) of each
        rejected one). ``accepted``: the groups accepted before (their ids, characters and needles
        are not to be repeated); it is not changed."""
        kept_ids = {g["id"] for g in accepted}
        kept_names = {n: g["id"] for g in accepted for n in _name_keys(g)}
        candidates, rejected = [], []
        for index, raw in enumerate(raws):
            group, reasons = self._structure(raw, index, theme, kept_ids, kept_names)
            if reasons:
                rejected.append((raw, "; ".join(reasons)))
                continue
            candidates.append((raw, group))
            kept_ids.add(group["id"])
            kept_names.update({n: group["id"] for n in _name_keys(group)})
        if not candidates:
            return [], rejected
        needle_set = parse_needle_set({"name": "drafts", "groups": [g for _, g in candidates]}, "<drafts>")
        values, reasons_of = self._measure(needle_set, theme)
        if self.judge is not None:  # asked only about groups that passed checks 1-4, before check 5 counts them as accepted
            self.judge.judge(needle_set, values, reasons_of)
        duplicates = self._duplicates(needle_set, accepted, values, reasons_of)
        kept = []
        for raw, group in candidates:
            reasons = reasons_of[group["id"]] + duplicates[group["id"]]
            if reasons:
                rejected.append((raw, "; ".join(reasons)))
            else:
                ignored = [_cut(_json_or_kind(k), 40) for k in raw if k not in DRAFT_FIELDS][:20]
                kept.append({**group, "checks": {**values[group["id"]], **({"ignored_fields": ignored} if ignored else {})}})
        return kept, rejected

    def _structure(self, raw, index: int, theme: int, kept_ids: set, kept_names: dict) -> tuple[dict | None, list[str]]:
        """Check 1: the group with embedeval's fields filled in (``id`` if it has none or one taken,
        ``category`` ``theme-N``), and why it is not a valid one-hop group (empty: it is)."""
        if not isinstance(raw, dict):
            return None, ["is not a JSON object"]
        group = {k: raw[k] for k in DRAFT_FIELDS if k in raw}  # the model's other fields are no part of a checked group
        group["category"] = raw.get("category") or f"theme-{theme}"
        if not isinstance(group.get("id"), str) or not group["id"].strip() or group["id"] in kept_ids:
            number = 1
            while f"theme{theme}-{number}" in kept_ids:
                number += 1
            group["id"] = f"theme{theme}-{number}"
        _, reasons = group_problems(group, index)
        needles = group.get("needles") if isinstance(group.get("needles"), dict) else {}
        reasons += [f"missing needle {v!r} (every group serves nolima's default variants: {', '.join(DEFAULT_VARIANTS)})"
                    for v in DEFAULT_VARIANTS if v not in needles and needles]
        if "keyword" not in raw:
            reasons.append("missing field 'keyword' (the absence check looks for it in the corpus)")
        texts = [("the question", group.get("question")), ("the character", group.get("character")),
                 ("the keyword", group.get("keyword")), *((f"the {v} needle", needles.get(v)) for v in NEEDLE_VARIANTS)]
        reasons += [f"{what} holds a line break: a drafted text is one line (a needle one sentence; the judge is shown each "
                    "on one line, so a line break could speak to it)" for what, text in texts
                    if isinstance(text, str) and _LINE_BREAK.search(text)]
        taken = sorted(n for n in _name_keys(group) if n in kept_names)
        if taken:
            reasons.append(f"character {taken[0]!r} is already used by group {kept_names[taken[0]]}")
        return group, list(dict.fromkeys(reasons))

    def _measure(self, needle_set: NeedleSet, theme: int) -> tuple[dict[str, dict], dict[str, list[str]]]:
        """Checks 2-4 on valid groups: per group id, the values of each needle (and of its question's
        absence check), and the reasons it fails."""
        config = self.config
        rows = pair_rows(needle_set)
        with step(f"checking {len(needle_set.groups)} drafts of theme {theme}", self.progress):
            absence = answer_absence(needle_set, self.chunks, self.model, top=config.absence_top_k, index=DEFAULT_INDEX)
            member = theme_membership(config.themes, rows[["group_id", "variant", "needle"]], cluster=theme,
                                      threshold=config.threshold, min_outside_percentile=config.min_outside_percentile,
                                      cache_dir=self.cache_dir)
            similarity = needle_question_similarity(needle_set, [self.nq_model])
        values: dict[str, dict] = {g.id: {"absence": {}, "needles": {}} for g in needle_set.groups}
        reasons: dict[str, list[str]] = {g.id: [] for g in needle_set.groups}
        asked = absence["question"].map(question_key)
        for group in needle_set.groups:  # each group on its own: its question's rows, its keyword, its names
            values[group.id]["absence"], reasons[group.id] = self._absence(group, absence[asked == question_key(group.question)])
        for row, nq, shared in zip(member.itertuples(index=False), similarity[self.nq_model.name], rows["shared_words"]):
            record = {"shared_words": [w for w in shared.split(";") if w], "predicted_cluster": int(row.predicted_cluster),
                      "target_probability": _finite(row.target_probability), "outside_percentile": _finite(row.outside_percentile),
                      "blends_in": bool(row.blends_in), "nq_similarity": {self.nq_model.name: _finite(nq)}}
            values[row.group_id]["needles"][row.variant] = record
            if not row.blends_in:
                reasons[row.group_id].append(
                    f"{row.variant} needle does not blend into theme {theme} (probability {row.target_probability:.2f}, outside "
                    f"percentile {row.outside_percentile:.0f}; needs > {config.threshold:g} and >= {config.min_outside_percentile:g})")
            if config.nq_band is not None and row.variant in NO_OVERLAP_VARIANTS and not config.nq_band[0] <= nq <= config.nq_band[1]:
                reasons[row.group_id].append(f"{row.variant} needle's needle-question similarity {nq:.3f} is outside "
                                             f"[{config.nq_band[0]:g}, {config.nq_band[1]:g}]")
        return values, reasons

    def _absence(self, group: NeedleGroup, top: pd.DataFrame) -> tuple[dict, list[str]]:
        """Check 2 for one group, given its question's top-k rows: its keyword and each of its
        character names searched as whole words in the whole corpus. Returns the group's absence
        record and one reason per term some chunk holds, naming the best-ranked such chunk of the
        top k, else the corpus's first."""
        k = self.config.absence_top_k
        ranked = list(zip(top["rank"].astype(int), top["chunk_id"].astype(str)))
        terms = [("its keyword", group.keyword)] * bool(group.keyword) + [("its character name", n) for n in group.characters]
        held, reasons = {}, []
        for what, term in terms:
            holding = self.corpus.holding(term)
            if not holding:
                continue
            held[term] = {self.chunks[i].id for i in holding}
            inside = [(rank, chunk) for rank, chunk in ranked if chunk in held[term]]
            where = (f"chunk {inside[0][1]} (rank {inside[0][0]} of the question's top {k}) holds {what} {term!r}" if inside else
                     f"chunk {self.chunks[holding[0]].id} holds {what} {term!r} (outside the question's top {k}: "
                     f"{len(holding)} of the corpus's {len(self.corpus)} chunks hold it)")
            reasons.append(f"the corpus may already answer it: {where}")
        record = {"top_similarity": _finite(top["similarity"].max()),
                  "flagged_chunks": [chunk for _, chunk in ranked if any(chunk in ids for ids in held.values())],
                  "corpus_chunks": {term: len(ids) for term, ids in held.items()}}
        return record, reasons

    def _duplicates(self, needle_set: NeedleSet, accepted: list[dict], values: dict, reasons_of: dict) -> dict[str, list[str]]:
        """Check 5, group by group in draft order: a needle whose cosine to a needle of an accepted
        group (before, or earlier in this draft and passing checks 1-4) reaches ``duplicate_cosine``,
        or a question such a group asks (the same words, :func:`~embedeval.text.words`). Records each
        needle's nearest accepted needle (``nearest_accepted``, ``nearest_cosine``)."""
        found: dict[str, list[str]] = {g.id: [] for g in needle_set.groups}
        asked = {tuple(words(raw_questions(g).get("question", ""))): g["id"] for g in accepted}
        labels = [(g["id"], v) for g in accepted for v in g["needles"]]
        texts = [anonymous(text, g) for g in accepted for text in g["needles"].values()]
        reference = self.model.embed(texts, kind="document") if texts else None
        for group in needle_set.groups:
            variants = list(group.needles)
            raw = {"character": group.character, "character_set": list(group.character_set)}
            question = tuple(words(group.question))
            if question in asked:
                found[group.id].append(f"asks the question of group {asked[question]}: two groups asking one question are duplicates")
            vectors = self.model.embed([anonymous(group.needles[v], raw) for v in variants], kind="document")
            if reference is not None:
                cosines, rows = nearest_cosines(vectors, reference, 1)
                for variant, cosine, row in zip(variants, cosines[:, 0], rows[:, 0]):
                    other_id, other_variant = labels[row]
                    values[group.id]["needles"][variant].update(nearest_accepted=f"{other_id}:{other_variant}", nearest_cosine=_finite(cosine))
                    if cosine >= self.config.duplicate_cosine:
                        found[group.id].append(f"{variant} needle is a near-duplicate of group {other_id}'s {other_variant} needle "
                                               f"(cosine {cosine:.3f} >= {self.config.duplicate_cosine:g})")
            if not reasons_of[group.id] and not found[group.id]:  # accepted: later drafts must not repeat it
                asked[question] = group.id
                labels += [(group.id, v) for v in variants]
                reference = vectors if reference is None else np.concatenate([reference, vectors])
        return found


def _finite(value) -> float | None:
    """A measured value as the needle set records it: a float, or None (JSON null) for a value that
    is missing or not finite, never a bare NaN or Infinity (which is no JSON)."""
    value = float(value)
    return value if np.isfinite(value) else None


def new_draft(config: DraftConfig, chat_model: str, embedder: str, judge: str | None = None) -> dict:
    """An empty draft needle set with its provenance; ``judge``: the judge's chat spec, or None
    (the description then says that no check tested whether a needle answers its question)."""
    folder = Path(config.themes)
    judged = (f", the judge {judge}'s included: it said each one-hop and inverted needle lets a careful reader answer its "
              "question." if judge else f". {NOT_JUDGED}")
    return {"name": f"draft-{folder.resolve().name}",
            "description": f"Needles drafted by {chat_model} for the themes of {folder}; each kept only when every check passed "
                           f"(embedeval needles draft){judged}",
            "provenance": {"tool": DRAFT_TOOL, "chat_model": chat_model, "temperature": config.temperature,
                           "themes_run": str(folder), "themes_sha256": file_sha256(folder / MANIFEST), "themes_key": themes_key(folder),
                           "embedder": embedder, "nq_embedder": config.embedder or embedder, "checks": config.check_rules(),
                           "judge": None if judge is None else {"chat_model": judge, "temperature": JUDGE_TEMPERATURE, "verdicts": []},
                           "usage": {who: _no_usage() for who in ("chat", "judge")},
                           "theme_prompts": {}, "prompts": {}},
            "groups": []}


def _no_usage() -> dict:
    return {"requests": 0, "tokens_sent": 0, "tokens_received": 0}


def _usage_of(record) -> dict:
    """A provenance's usage record as counted so far (a count edited into something else: 0)."""
    record = record if isinstance(record, dict) else {}
    return {k: v if isinstance(v := record.get(k), int) and not isinstance(v, bool) else 0 for k in _no_usage()}


def open_draft(config: DraftConfig, chat_model: str, embedder: str, judge: str | None = None,
               force: Force | bool = False) -> tuple[dict, pd.DataFrame]:
    """The draft to continue and its rejected table: a new one when ``config.out`` does not exist,
    else the one there, if an earlier draft from the same themes (:func:`~embedeval.experiments.themes.themes_key`)
    with the same chat model and judge wrote it. Any other file there, or a draft edited by hand
    into one that cannot be resumed, is refused with one line (it is never overwritten), unless
    ``force`` (``embedeval --force``) lets a new draft replace it."""
    out = check_output_file(config.out, (".json",), force)
    rejected_path = check_output_file(rejected_path_of(out), (".csv",), force)
    fresh = new_draft(config, chat_model, embedder, judge)
    rejected = _read_rejected(rejected_path, force)
    if not out.exists():
        return fresh, rejected
    try:
        data = read_json(out)
    except InputError:
        if not force:
            raise
        data = None  # --force: a file that is not even JSON is replaced too
    provenance = data.get("provenance") if isinstance(data, dict) else None
    if not isinstance(provenance, dict) or provenance.get("tool") != DRAFT_TOOL or not isinstance(data.get("groups"), list):
        if force:  # --force: replaced by a new draft, as the note of check_output_file said (or this one)
            if written_by_embedeval(out):  # another command's output: no note was given for it yet
                print(f"note: replacing {out}, which is no needle draft (--force)", file=sys.stderr)
            return fresh, rejected
        raise InputError(f"{out} exists and is not a needle draft of embedeval: it is never overwritten; choose another output")
    _check_draft_file(data, out)
    then, now = fresh["provenance"], provenance
    if now.get("chat_model") != then["chat_model"]:
        raise InputError(f"{out} was drafted with another chat model: {chat_spec_difference(str(now.get('chat_model')), then['chat_model'])}; "
                         f"to resume, draft with `llm` {now.get('chat_model')!r}, or choose another output", "llm")
    was = (now.get("judge") or {}).get("chat_model")
    if was != judge:
        said = (chat_spec_difference(str(was), judge) if was and judge else
                f"it was {'judged by ' + repr(was) if was else 'drafted without a judge'}, now {'with ' + repr(judge) if judge else 'without one'}")
        raise InputError(f"{out} was drafted with another judge: {said}; to resume, draft "
                         f"{'with `judge` ' + repr(was) if was else 'without `judge`'}, or choose another output", "judge")
    themes = "themes_key" if "themes_key" in now else "themes_sha256"  # a draft written before the key: its themes.json's sha256
    for key, what in ((themes, "another themes run"), ("checks", "other check settings"),
                      ("nq_embedder", "another needle-question embedder")):
        if now.get(key) != then[key]:
            raise InputError(f"{out} was drafted with {what} ({key} {now.get(key)!r}, now {then[key]!r}); to resume, draft with "
                             "the same, or choose another output")
    now["themes_key"] = then["themes_key"]
    now.setdefault("usage", then["usage"])
    return data, rejected


def _check_draft_file(data: dict, out: Path) -> None:
    """One line for a draft that cannot be resumed as it is (edited by hand): groups that are no
    valid needle set (no ``id``, needles that are a list, a group that is a string), or a
    provenance without its prompts, theme prompts, usage or judge's verdicts."""
    provenance = data["provenance"]
    fix = "(a draft edited by hand?): it is never overwritten; mend it, or choose another output"
    for key, kind in (("prompts", dict), ("theme_prompts", dict), ("usage", dict)):
        if key in provenance or key != "usage":
            if not isinstance(provenance.get(key), kind):
                raise InputError(f"{out}: its provenance has no {key!r} object {fix}")
    judge = provenance.get("judge")
    if judge is not None and not (isinstance(judge, dict) and isinstance(judge.get("verdicts"), list)):
        raise InputError(f"{out}: its provenance's 'judge' is not an object with a list of 'verdicts' {fix}")
    if data["groups"]:
        try:
            parse_needle_set(data, str(out))
        except EmbedevalError as exc:
            raise InputError(f"{exc} {fix}") from None


def _read_rejected(path: Path, force: Force | bool = False) -> pd.DataFrame:
    """The rejected table an earlier draft wrote at ``path`` (empty if there is none); a file there
    that is not one (other columns), or one whose ``theme`` or ``attempt`` is not a whole number
    (edited by hand), is refused with one line, never overwritten (``force``: a file that is no such
    table is replaced)."""
    if not path.exists():
        return pd.DataFrame(columns=REJECTED_COLUMNS)
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False)
    except Exception:  # pandas raises many types for a file that is not a table
        table = None
    if table is None or list(table.columns) != REJECTED_COLUMNS:
        if force:  # --force: a file embedeval did not write is replaced, as its note said
            return pd.DataFrame(columns=REJECTED_COLUMNS)
        raise InputError(f"{path} exists and is not a rejected-drafts table of embedeval: it is never overwritten; "
                         "move it or choose another output")
    for column in ("theme", "attempt"):
        bad = table.index[~table[column].str.fullmatch(r"-?[0-9]+")]
        if len(bad):
            raise InputError(f"{path}: row {bad[0] + 1}: {column} {table[column].iloc[bad[0]]!r} is not a whole number (a table "
                             "edited by hand?): it is never overwritten; mend it, or move it away")
    return table.astype({"theme": int, "attempt": int})


def _unchecked(row: dict) -> bool:
    """Whether a rejected row holds an answer not checked to the end (:data:`UNCHECKED`)."""
    return str(row["reason"]).startswith(UNCHECKED) and bool(row["answer"])


def _rejected_row(theme: int, attempt: int, raw, reason: str, prompt_sha: str, answer: str = "") -> dict:
    group = raw if isinstance(raw, dict) else {}
    texts = {k: group.get(k) for k in ("id", "question", "character", "keyword")}
    return {"theme": theme, "attempt": attempt, "group_id": texts["id"] or "", "question": texts["question"] or "",
            "character": texts["character"] or "", "keyword": texts["keyword"] or "",
            "needles": _json_or_kind(group["needles"]) if "needles" in group else "",
            "reason": reason, "prompt_sha256": prompt_sha, "answer": answer}


def save_draft(data: dict, rejected: pd.DataFrame, out: Path) -> None:
    """Write the rejected table (every field quoted, so that any text round-trips: CR, LF, quotes,
    NUL; on the disk, fsync'd, before it replaces the last one: it holds the paid answers not yet
    checked), then the needle set (checked to load as one first), atomically."""
    with atomic_path(rejected_path_of(out)) as tmp:
        rejected.to_csv(tmp, index=False, quoting=csv.QUOTE_ALL)
        with open(tmp, "rb") as written:
            os.fsync(written.fileno())
    if data["groups"]:
        parse_needle_set(data, str(out))
        write_text_atomic(out, json_text(data, 1, ensure_ascii=False) + "\n")


def run_draft(config: DraftConfig, llm, progress: bool = False, cache_dir=None, judge=None, max_cost: float | None = None,
              chat_price: float | None = None, judge_price: float | None = None, say_first=None,
              force: Force | bool = False) -> DraftResult:
    """Draft, check and keep needles per theme (the module docstring); ``llm``: a
    :class:`~embedeval.llm.ChatLLM`; ``judge``: the judge's (default: ``config.judge``'s, None: no
    judge). ``max_cost`` (USD) holds while the draft runs, counted at ``chat_price`` and
    ``judge_price`` (USD per million tokens; the judge's default: ``chat_price``): a request that
    could pass it is not sent (one :class:`~embedeval.plan.CostCeilingReached`, all accepted kept).
    Everything a user can get wrong (settings, themes run, theme ids, the output, a second draft
    writing it) is refused before the first request; then ``say_first``, if given, is called with
    :func:`plan_draft_embedding`'s plans (what the draft embeds first), before anything is embedded
    or sent; ``force`` (``embedeval --force``) lets the draft replace an output it did not write. A
    chat model (or judge) that answers no usable JSON at all, or a draft in which no group passes, is one :class:`~embedeval.errors.APIError` /
    :class:`~embedeval.errors.InputError` after the rejected table is written."""
    config.validate()
    check_ceiling(max_cost)
    check_price(chat_price, "chat_price")
    check_price(judge_price, "judge_price")
    judge_price = chat_price if judge_price is None else judge_price
    if max_cost is not None and chat_price is None:
        raise ConfigError(f"no price known for chat model {llm.chat.name}, so `max_cost` cannot be kept: give `chat_price` "
                          "(USD per million tokens)", "chat_price")
    if judge is None and config.judge is not None:
        judge = ChatLLM(config.judge, temperature=JUDGE_TEMPERATURE)  # a missing key: one line before any work
    themes = read_themes(config.themes, config.theme_ids, config.prompt_chunks)
    embedder = read_manifest(config.themes)["settings"]["embedder"]
    out = check_output_file(config.out, (".json",), force)
    with output_file_lock(out):
        data, rejected = open_draft(config, llm.chat.name, embedder, judge.chat.name if judge else None, force)
        if say_first is not None:
            say_first(plan_draft_embedding(config, cache_dir, calibrate=False, progress=progress))
        meter = ChatMeter(max_cost)
        provenance = data["provenance"]
        judging = NeedleJudge(judge, meter, judge_price, provenance["prompts"], cache_dir) if judge else None
        checker = DraftChecker(config, cache_dir=cache_dir, progress=progress, judge=judging)
        draft = _Draft(config, llm, chat_price, meter, checker, judging, data, rejected, out)
        try:
            for theme in themes:
                draft.theme(theme)
        except CostCeilingReached as exc:
            draft.save()
            kept, unchecked = len(data["groups"]), sum(map(_unchecked, draft.rows))
            said = [f"{kept} accepted group(s) are kept in {out}" if kept else "no group was accepted yet"]
            if unchecked:
                said.append(f"{unchecked} answer(s) not checked yet are kept in {rejected_path_of(out)}, for a rerun to check "
                            "without asking again")
            go_on = ": run the command again to go on (the ceiling holds per run: a rerun may spend up to `max_cost` more)"
            raise CostCeilingReached(f"{exc}; {'; '.join(said)}{go_on if kept or unchecked else ''}", "max_cost") from None
        except APIError:
            draft.save()  # a judge's request that failed: the answer it was judging is in the rejected table
            raise
        draft.save()
        table = pd.DataFrame(draft.rows, columns=REJECTED_COLUMNS)
    if draft.requests and not draft.usable:
        raise APIError(f"chat model {llm.chat.name} answered no usable JSON in {draft.requests} request(s) (first: "
                       f"{table['reason'].iloc[-draft.requests]}); its answers are in {rejected_path_of(out)}")
    if judging is not None and judging.requests and not judging.usable:
        raise APIError(f"the judge {judging.name} gave no usable verdict in {judging.requests} request(s) (first: "
                       f"{judging.verdicts[0]['reason']}); the reasons are in {rejected_path_of(out)}")
    if not data["groups"]:
        raise InputError(f"no drafted group passed every check ({len(table)} rejected, reasons in {rejected_path_of(out)}); "
                         "nothing written to " + str(out))
    return DraftResult(data, table, draft.accepted, draft.rejected_now, draft.requests, out, rejected_path_of(out),
                       judging.requests if judging else 0)


class _Draft:
    """One run of :func:`run_draft` inside its lock: the requests per theme, the rejected rows,
    what is written after every request."""

    def __init__(self, config, llm, price, meter, checker, judging, data, rejected, out):
        self.config, self.llm, self.price, self.meter, self.checker, self.judging = config, llm, price, meter, checker, judging
        self.data, self.out = data, out
        self.rows = rejected.to_dict("records")
        self.accepted = {}
        self.rejected_now = {}
        self.requests = self.usable = 0
        usage = data["provenance"]["usage"]
        self.usage_before = {who: _usage_of(usage.get(who)) for who in ("chat", "judge")}

    def theme(self, theme: Theme) -> None:
        """Check the answers for ``theme`` an earlier run left unchecked (:data:`UNCHECKED`), then
        ask for its missing groups: up to ``attempts`` requests sent, retries included, each
        answer on disk before it is checked."""
        data, config, cluster = self.data, self.config, theme.cluster
        prompts = data["provenance"]["prompts"]
        self.accepted[cluster] = sum(g.get("theme") == cluster for g in data["groups"])
        self.rejected_now[cluster] = 0
        missing = config.per_theme - self.accepted[cluster]
        if missing <= 0:
            return
        first = draft_prompt(theme, missing)
        data["provenance"]["theme_prompts"][str(cluster)] = sha256_text(first)
        prompt, sent = first, 0
        for row in [r for r in self.rows if r["theme"] == cluster and _unchecked(r)]:
            if missing <= 0:
                break
            self.rows = [r for r in self.rows if r is not row]  # paid for in an earlier run: checked now, not asked for again
            missing, sent_back = self._answer(cluster, row["attempt"], missing, row["prompt_sha256"], ChatReply(row["answer"]))
            prompt = redraft_prompt(first, missing, sent_back)

        def sending() -> None:
            nonlocal sent
            sent += 1

        while missing > 0 and sent < config.attempts:
            sha = sha256_text(prompt)
            prompts[sha] = prompt
            # a network failure ends the draft here: everything accepted is written
            reply = self.meter.ask(self.llm, "chat", self.price, prompt, answer_tokens(missing), f"request {sent + 1} for theme "
                                   f"{cluster}", max_attempts=config.attempts - sent, on_attempt=sending)
            self.requests += 1
            missing, sent_back = self._answer(cluster, sent, missing, sha, reply)
            prompt = redraft_prompt(first, missing, sent_back)

    def _answer(self, theme: int, attempt: int, missing: int, sha: str, reply: ChatReply) -> tuple[int, list[tuple[str, str]]]:
        """Write the answer to request ``attempt`` (its prompt's sha256 ``sha``) to disk, then check
        it: (the groups still missing, what a redraft sends back). An answer that took the
        spending past ``max_cost`` (longer than its ``max_tokens``) stops the draft once it is
        written (:meth:`~embedeval.plan.ChatMeter.stop_if_over`): a rerun checks it."""
        try:
            raws = _scrubbed(parse_drafts(reply), self.llm.scrub)
        except InputError as exc:
            self.rows.append(_rejected_row(theme, attempt, None, str(exc), sha, reply.text))
            self.rejected_now[theme] += 1
            self.save()
            self.meter.stop_if_over()
            return missing, [(_cut(reply.text, SENT_BACK_CHARS), str(exc))]
        self.usable += 1
        unchecked = _rejected_row(theme, attempt, None, f"{UNCHECKED}: the draft stopped while checking it{RECHECKED}", sha, reply.text)
        self.rows.append(unchecked)
        self.save()  # on disk before any check: a kill while the judge works loses nothing paid for
        self.meter.stop_if_over()
        kept, refused = self._check(raws, theme, attempt, missing, sha, unchecked)
        self.save()
        return missing - len(kept), [(_draft_text(raw), reason) for raw, reason in refused]

    def _check(self, raws: list, theme: int, attempt: int, missing: int, sha: str, unchecked: dict):
        """Check an answer's groups (the first ``missing``: the rest are cut unread) and keep those
        that pass; (kept, refused). ``unchecked``: the answer's row while it is checked, taken out
        when the checks end, else saying why they did not (:data:`UNCHECKED`)."""
        if len(raws) > missing:
            cut = _rejected_row(theme, attempt, None, f"the answer held {len(raws)} groups, {missing} asked for: the other "
                                f"{len(raws) - missing} were cut unread", sha)
            if cut not in self.rows:  # an answer checked again (:data:`UNCHECKED`) is cut once
                self.rows.append(cut)
                self.rejected_now[theme] += len(raws) - missing
            raws = raws[:missing]
        heard = len(self.judging.verdicts) if self.judging else 0
        try:
            kept, refused = self.checker.check(raws, theme, self.data["groups"])
        except BaseException as exc:  # the judge was not asked about every group, Ctrl-C, a failure: the paid answer is kept
            said = str(exc) if isinstance(exc, EmbedevalError) else f"interrupted ({type(exc).__name__}{f': {exc}' if str(exc) else ''})"
            unchecked["reason"] = f"{UNCHECKED}: {said}{RECHECKED}"
            if not isinstance(exc, (CostCeilingReached, APIError)):  # those two are saved by run_draft, with their message
                self.save()
            raise
        finally:
            if self.judging:
                self.data["provenance"]["judge"]["verdicts"] += [{"theme": theme, "attempt": attempt, **v}
                                                                 for v in self.judging.verdicts[heard:]]
        self.rows = [r for r in self.rows if r is not unchecked]
        for group in kept:
            self.data["groups"].append({**group, "theme": theme, "attempt": attempt, "prompt_sha256": sha})
        self.rows += [_rejected_row(theme, attempt, raw, reason, sha) for raw, reason in refused]
        self.rejected_now[theme] += len(refused)
        self.accepted[theme] += len(kept)
        return kept, refused

    def save(self) -> None:
        """Write the draft and its rejected table as they are now, with what was spent."""
        if not self.rows and not self.data["groups"] and not rejected_path_of(self.out).exists():
            return  # nothing answered yet (the first request failed): no empty table is left behind
        self.data["provenance"]["usage"] = {who: {k: self.usage_before[who][k] + v for k, v in self.meter.usage(who).items()}
                                            for who in ("chat", "judge")}
        save_draft(self.data, pd.DataFrame(self.rows, columns=REJECTED_COLUMNS), self.out)


#: What :func:`plan_draft_embedding` counts, as its lines name it (:func:`~embedeval.plan.forecast_line`).
EMBEDDED_FIRST = "chunks of the themes run (the drafted needles are embedded as they are drafted)"


def plan_draft_embedding(config: DraftConfig, cache_dir=None, prices: dict[str, float] | None = None, calibrate: bool = True,
                         progress: bool = False) -> list[EmbedderPlan]:
    """What a draft embeds whatever is drafted (:mod:`embedeval.plan`): the themes run's chunks, by
    its embedder (the absence check searches them and theme membership reads them: from the cache,
    where the themes run left them). The drafted needles are not known before they are drafted.
    Nothing is sent or stored."""
    chunks, _ = themes_chunks(config.themes)
    spec = read_manifest(config.themes)["settings"]["embedder"]
    return plan_documents(spec, [chunk.text for chunk in chunks], cache_dir, prices, calibrate, progress=progress)


def plan_draft(config: DraftConfig, chat_model: str, usd_per_million: float | None = None,
               judge_usd_per_million: float | None = None, force: Force | bool = False) -> DraftPlan:
    """What :func:`run_draft` would send (:class:`DraftPlan`), without sending or writing anything:
    the groups an existing draft at ``config.out`` already holds are not asked for again (``force``:
    an output it may replace, as :func:`open_draft`). The judge's price defaults to the chat model's."""
    config.validate()
    check_price(usd_per_million, "chat_price")
    check_price(judge_usd_per_million, "judge_price")
    themes = read_themes(config.themes, config.theme_ids, config.prompt_chunks)
    embedder = read_manifest(config.themes)["settings"]["embedder"]
    judge = parse_chat_spec(config.judge).name if config.judge else None
    data, _ = open_draft(config, chat_model, embedder, judge, force)
    counter = load_token_counter()
    judge_request = counter.count([JUDGE_PROMPT.format(question="", needle="", character="")])[0] + JUDGE_TEXT_TOKENS + JUDGE_ANSWER_TOKENS
    rows, sent_max, judge_requests = [], 0, 0
    for theme in themes:
        missing = config.per_theme - sum(g.get("theme") == theme.cluster for g in data["groups"])
        if missing <= 0:
            continue
        tokens = counter.count([draft_prompt(theme, missing)])[0]
        # every request sends the prompt and gets an answer of up to max_tokens; a redraft also sends back the rejected groups
        theme_max = config.attempts * (tokens + answer_tokens(missing)) + (config.attempts - 1) * missing * GROUP_TOKENS_ESTIMATE
        asked = config.attempts * missing * len(NO_OVERLAP_VARIANTS) if judge else 0  # the judge: two needles of every group checked
        rows.append({"theme": theme.cluster, "groups": missing, "prompt_tokens": tokens, "tokens_max": theme_max,
                     "judge_requests_max": asked})
        sent_max += theme_max
        judge_requests += asked
    judge_price = usd_per_million if judge_usd_per_million is None else judge_usd_per_million
    usd = None
    if usd_per_million is not None and (judge_price is not None or not judge):
        usd = (sent_max * usd_per_million + judge_requests * judge_request * (judge_price or 0)) / 1e6 * (1 + API_TOKEN_MARGIN)
    return DraftPlan(chat_model, rows, len(rows), len(rows) * config.attempts, sent_max, f"{counter.name} (the reference, an estimate)",
                     API_TOKEN_MARGIN, usd_per_million, usd, judge, judge_requests, judge_requests * judge_request, judge_price)


def format_draft_plan(plan: DraftPlan) -> str:
    """The plan as lines of text: one per theme, then the totals."""
    lines = [f"{'theme':<6} {'groups':>6} {'prompt tokens':>13} {'tokens at most':>14}"]
    lines += [f"{r['theme']:<6} {r['groups']:>6} {r['prompt_tokens']:>13,} {r['tokens_max']:>14,}" for r in plan.themes]
    cost = ("cost unknown (give a price per million tokens)" if plan.usd_high is None
            else f"at most ${plan.usd_high:,.4f} at ${plan.usd_per_million:g} per million tokens"
            + (f" (the judge's ${plan.judge_usd_per_million:g})" if plan.judge_model and plan.judge_usd_per_million != plan.usd_per_million
               else ""))
    judge = (f"; the judge {plan.judge_model}: 0 to {plan.judge_requests_max} request(s) (each one-hop and inverted needle of "
             f"every group checked), at most {plan.judge_tokens_max:,} tokens" if plan.judge_model
             else "; no judge (nothing checks whether a needle answers its question)")
    lines.append(f"{plan.chat_model}: {plan.requests_min} to {plan.requests_max} chat request(s), at most {plan.tokens_max:,} tokens "
                 f"±{plan.token_margin:.0%} (counted by {plan.tokenizer}; answers at most their max_tokens, {ANSWER_TOKENS_BASE} + "
                 f"{ANSWER_TOKENS_PER_GROUP} a group; rejected groups sent back estimated at {GROUP_TOKENS_ESTIMATE} tokens each)"
                 f"{judge}; {cost}; nothing was sent or written")
    return "\n".join(lines)


def check_draft_cost(plan: DraftPlan, max_cost: float | None) -> None:
    """One :class:`~embedeval.errors.ConfigError` when the plan's high cost estimate exceeds
    ``max_cost`` USD, or when the chat model has no price to tell it by."""
    if max_cost is None:
        return
    check_ceiling(max_cost)
    if plan.usd_high is None:
        raise ConfigError(f"no price known for chat model {plan.chat_model}, so `max_cost` cannot be kept: give `chat_price` "
                          "(USD per million tokens)", "chat_price")
    if plan.usd_high > max_cost:
        raise ConfigError(f"the draft would cost up to ${plan.usd_high:,.4f} (the estimated tokens +{plan.token_margin:.0%}), "
                          f"over `max_cost` ${max_cost:,.4f}; nothing was sent", "max_cost")

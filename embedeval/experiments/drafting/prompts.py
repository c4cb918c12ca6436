"""The conversation with the drafting chat model: the themes as the prompt shows them
(:func:`read_themes`), the first request of a theme (:data:`PROMPT`) and its redrafts, which quote
the rejected drafts back cut (:data:`REDRAFT`, :func:`draft_text`), the ``max_tokens`` an answer
is asked with (:func:`answer_tokens`), and an answer read into drafted groups (:func:`parse_drafts`),
each text scrubbed of keys (:func:`scrubbed`).

The first request of a theme asks for N groups, its answer for at most

    max_tokens = ANSWER_TOKENS_BASE + N * ANSWER_TOKENS_PER_GROUP"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from embedeval.defaults import DEFAULT_DRAFT_PROMPT_CHUNKS
from embedeval.errors import InputError
from embedeval.experiments.themes.files import read_manifest
from embedeval.experiments.themes.loading import check_themes_files
from embedeval.experiments.themes.names import resolve_themes, theme_top_terms
from embedeval.io import read_table, text_sha256
from embedeval.llm import answer_json
from embedeval.needles import NEEDLE_VARIANTS

#: ``max_tokens`` of an answer asked for N groups: this many per group, plus :data:`ANSWER_TOKENS_BASE`
#: (prose or a fence around the JSON). A real group takes about 150.
ANSWER_TOKENS_PER_GROUP = 300
ANSWER_TOKENS_BASE = 200
#: The fields of a drafted group a redraft quotes back (the model's invented fields and embedeval's
#: own stay home), each text cut at :data:`SENT_BACK_CHARS` characters.
SENT_BACK_FIELDS = ("question", "character", "character_set", "keyword", "needles")
SENT_BACK_CHARS = 300
#: Characters of a reason a redraft quotes back.
REASON_SENT_BACK_CHARS = 600
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


def read_themes(run: str | Path, theme_ids=None, prompt_chunks: int = DEFAULT_DRAFT_PROMPT_CHUNKS) -> list[Theme]:
    """The themes of a finished themes run (``theme_ids``: those, in that order, each by its number
    or by a term of its top terms, :func:`~embedeval.experiments.themes.names.resolve_theme`; None: all),
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
    text_of = dict(zip(chunks["chunk_id"].astype(str), chunks["text"], strict=True))
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
    passages = "\n".join(f"- {cut_text(text, PROMPT_CHUNK_CHARS)}" for text in theme.representatives)
    return PROMPT.format(n=n, cluster=theme.cluster, size=theme.size, terms=", ".join(theme.top_terms) or "-", passages=passages)


def redraft_prompt(prompt: str, n: int, rejected: list[tuple[str, str]]) -> str:
    """A theme's next request: its first prompt, the rejected drafts (their known fields, cut:
    :func:`draft_text`) with their reasons, and ``n`` groups asked for again (:data:`REDRAFT`)."""
    listed = "\n".join(f"- {draft} -> rejected: {cut_text(reason, REASON_SENT_BACK_CHARS)}" for draft, reason in rejected)
    return REDRAFT.format(prompt=prompt.rstrip("\n"), rejected=listed, n=n)


def answer_tokens(n: int) -> int:
    """``max_tokens`` of an answer asked for ``n`` groups (:data:`ANSWER_TOKENS_PER_GROUP`)."""
    return ANSWER_TOKENS_BASE + n * ANSWER_TOKENS_PER_GROUP


def cut_text(text: str, limit: int) -> str:
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


def draft_text(raw) -> str:
    """A drafted group as the redraft prompt quotes it: its known fields only
    (:data:`SENT_BACK_FIELDS`; the needles of known variants), each text cut at
    :data:`SENT_BACK_CHARS` characters; a draft that is no object, as a short text."""
    if not isinstance(raw, dict):
        return cut_text(json_or_kind(raw), SENT_BACK_CHARS)
    known = {}
    for field in SENT_BACK_FIELDS:
        if field not in raw:
            continue
        value = raw[field]
        if field == "needles" and isinstance(value, dict):
            known[field] = {v: cut_text(json_or_kind(value[v]), SENT_BACK_CHARS) for v in NEEDLE_VARIANTS if v in value}
        elif field == "character_set" and isinstance(value, list):
            known[field] = [cut_text(json_or_kind(name), 40) for name in value[:10]]
        else:
            known[field] = cut_text(json_or_kind(value), SENT_BACK_CHARS)
    return json.dumps(known, ensure_ascii=False)


def scrubbed(groups: list, scrub) -> list:
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


def json_or_kind(value) -> str:
    """A text as it is; any other JSON value as its JSON (its type's name when too deep to write)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (RecursionError, ValueError):
        return f"<{type(value).__name__}>"

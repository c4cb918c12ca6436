"""Query expansion (DESIGN §7): N related search terms per question, stored for offline reruns.

``expand(questions, n_terms, llm)`` asks an OpenAI-compatible chat endpoint (OpenAI, vLLM,
Ollama: any base URL) for exactly ``n_terms`` terms grouped by the question's facets, parses the
answer (JSON, numbered or bulleted lists, commas), de-duplicates, asks again for what is
missing (bounded) and trims any excess. An expansion file holds every size for a needle set
with the model, prompt, temperature and date; the expanded query is ``question + " " + terms``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from embedeval.errors import APIError, EmbedderUnavailableError, InputError
from embedeval.io import write_text_atomic
from embedeval.needles import NeedleSet

PROMPT = (
    "You expand search queries for a retrieval system.\n"
    "Question: {question}\n"
    "Write exactly {n} distinct search terms (words or short phrases) that a relevant passage "
    "might contain. Group them by the facets of the question (who, what, where, related "
    "activities, synonyms), but return only a JSON array of {n} strings, no explanations."
)
FOLLOW_UP = (
    "You gave {have} usable terms; {missing} more are needed. Write {missing} further distinct terms, "
    "none of these: {existing}. Return only a JSON array of {missing} strings."
)
REQUIRED_METADATA = ("needle_set", "model", "prompt", "temperature", "created", "sizes")
_LIST_MARKER = re.compile(r"^\s*(?:[-*•]+|\d+[.)]|\(\d+\))\s*")


def parse_terms(text: str) -> list[str]:
    """Terms from a model answer: a JSON array (or {"terms": [...]}) if there is one, else one
    term per line (numbers, bullets and facet headings removed) or comma-separated.
    De-duplicated case-insensitively, order kept."""
    terms: list[str] = []
    match = re.search(r"\[.*\]", text, flags=re.S)
    parsed = None
    if match:
        try:
            parsed = json.loads(match.group(0))
        except json.JSONDecodeError:
            parsed = None
    if parsed is None:
        try:
            whole = json.loads(text)
            parsed = whole.get("terms") if isinstance(whole, dict) else None
        except json.JSONDecodeError:
            parsed = None
    if isinstance(parsed, list):
        terms = [str(t) for t in parsed if isinstance(t, (str, int, float))]
    else:
        for line in text.splitlines():
            line = _LIST_MARKER.sub("", line).strip().strip("*_#").strip()
            if not line or line.endswith(":"):  # blank or a facet heading
                continue
            terms += line.split(",") if "," in line else [line]
    seen, out = set(), []
    for term in terms:
        term = term.strip().strip("\"'`*").strip()
        if term and len(term) <= 80 and term.lower() not in seen:
            seen.add(term.lower())
            out.append(term)
    return out


@dataclass
class ChatLLM:
    """An OpenAI-compatible chat endpoint (key ``OPENAI_API_KEY``, base URL from the argument or
    ``OPENAI_BASE_URL``), with the same retry policy as the API embedders."""

    model: str
    base_url: str | None = None
    temperature: float = 0.7

    def __post_init__(self):
        import openai

        from embedeval.embedders.api import retry_policy_from_env

        key = os.environ.get("OPENAI_API_KEY", "").strip()
        if not key:
            raise EmbedderUnavailableError("query expansion needs an API key in OPENAI_API_KEY (any value for a local server)")
        self._key = key
        self._client = openai.OpenAI(api_key=key, base_url=self.base_url or os.environ.get("OPENAI_BASE_URL") or None, max_retries=0)
        self.policy = retry_policy_from_env()

    def complete(self, prompt: str) -> str:
        from embedeval.embedders.api import call_with_retries, openai_errors

        def request() -> str:
            with openai_errors("OPENAI_API_KEY"):
                response = self._client.chat.completions.create(
                    model=self.model, messages=[{"role": "user", "content": prompt}], temperature=self.temperature)
            return response.choices[0].message.content or ""

        return call_with_retries(request, self.policy, f"chat model {self.model}", lambda m: m.replace(self._key, "***"))


def expand_question(question: str, n_terms: int, llm: ChatLLM, max_rounds: int = 3) -> list[str]:
    """Exactly ``n_terms`` de-duplicated terms for one question, or :class:`APIError` saying why."""
    terms = parse_terms(llm.complete(PROMPT.format(question=question, n=n_terms)))
    for _ in range(max_rounds - 1):
        if len(terms) >= n_terms:
            break
        missing = n_terms - len(terms)
        more = parse_terms(llm.complete(FOLLOW_UP.format(have=len(terms), missing=missing, existing=", ".join(terms))))
        known = {t.lower() for t in terms}
        terms += [t for t in more if t.lower() not in known]
    if len(terms) < n_terms:
        raise APIError(f"expansion of {question!r} has {len(terms)} usable terms after {max_rounds} requests, "
                       f"needs {n_terms}")
    return terms[:n_terms]


def expand(questions: Sequence[str], n_terms: int, llm: ChatLLM, max_rounds: int = 3) -> list[list[str]]:
    """:func:`expand_question` for every question."""
    return [expand_question(q, n_terms, llm, max_rounds) for q in questions]


def build_expansion_file(needle_set: NeedleSet, sizes: Sequence[int], llm: ChatLLM, progress: bool = False) -> dict:
    """Expansions of every question of ``needle_set`` at every size, with their metadata."""
    data = {"needle_set": needle_set.name, "model": llm.model, "prompt": PROMPT, "temperature": llm.temperature,
            "created": dt.date.today().isoformat(), "how": f"generated by {llm.model} through embedeval expand",
            "sizes": {}}
    jobs = [(size, group) for size in sizes for group in needle_set.groups]
    for size, group in tqdm(jobs, desc="expanding", unit="question", disable=not progress):
        data["sizes"].setdefault(str(size), {})[group.id] = expand_question(group.question, size, llm)
    validate_expansions(data, needle_set, "<new expansions>")
    return data


def validate_expansions(data: object, needle_set: NeedleSet | None, path: str) -> None:
    """Raise :class:`InputError` (naming the file) for missing metadata, wrong sizes, missing
    groups, or terms that leak a character name or needle text."""
    if not isinstance(data, dict):
        raise InputError(f"expansion file {path}: top level must be an object")
    missing = [k for k in REQUIRED_METADATA if k not in data]
    if missing:
        raise InputError(f"expansion file {path}: missing metadata {', '.join(missing)}")
    if not isinstance(data["sizes"], dict) or not data["sizes"]:
        raise InputError(f"expansion file {path}: 'sizes' must map sizes to expansions")
    for size, groups in data["sizes"].items():
        if not str(size).isdigit() or not isinstance(groups, dict):
            raise InputError(f"expansion file {path}: size {size!r} is not a number of terms")
        for group_id, terms in groups.items():
            if not isinstance(terms, list) or len(terms) != int(size):
                count = len(terms) if isinstance(terms, list) else "no"
                raise InputError(f"expansion file {path}: group {group_id} at size {size} has {count} terms, not {size}")
    if needle_set is None:
        return
    if data["needle_set"] != needle_set.name:
        raise InputError(f"expansion file {path} is for needle set {data['needle_set']!r}, not {needle_set.name!r}")
    names = re.compile(r"\b(" + "|".join(map(re.escape, needle_set.characters)) + r")\b", re.I)
    for size, groups in data["sizes"].items():
        absent = [g.id for g in needle_set.groups if g.id not in groups]
        if absent:
            raise InputError(f"expansion file {path}: size {size} has no expansion for group {absent[0]}")
        for group in needle_set.groups:
            for term in groups[group.id]:
                if names.search(term) or any(_leaks(term, needle) for needle in group.needles.values()):
                    raise InputError(f"expansion file {path}: group {group.id} at size {size} leaks the answer in term {term!r}")


def _leaks(term: str, needle: str) -> bool:
    """A term leaks a needle if it contains the whole needle, or is a 4+-word stretch of it."""
    term, needle = term.lower().strip(" ."), needle.lower().strip(" .")
    return needle in term or (len(term.split()) >= 4 and term in needle)


def load_expansions(path: str | os.PathLike, needle_set: NeedleSet | None = None) -> dict:
    """Load and validate an expansion file."""
    source = Path(path)
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"expansion file {source} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"expansion file {source} is not valid JSON ({exc})") from None
    validate_expansions(data, needle_set, str(source))
    return data


def write_expansions(data: dict, path: str | os.PathLike) -> None:
    write_text_atomic(path, json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def expanded_query_forms(files: Sequence[str], needle_set: NeedleSet) -> dict[str, list[str]]:
    """``{"expanded-N": [question + " " + terms, ...]}`` for every size of every file."""
    forms: dict[str, list[str]] = {}
    for path in files:
        data = load_expansions(path, needle_set)
        for size, groups in sorted(data["sizes"].items(), key=lambda item: int(item[0])):
            forms[f"expanded-{size}"] = [f"{g.question} {' '.join(groups[g.id])}" for g in needle_set.groups]
    return forms

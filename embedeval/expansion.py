"""Query expansion (docs/expansion.md): N related search terms per question, stored for offline reruns.

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
from pathlib import Path

from embedeval.errors import APIError, InputError
from embedeval.io import json_text, write_text_atomic
from embedeval.jsonread import JsonLimitError, load_file, loads
from embedeval.llm import ChatLLM
from embedeval.needles import NeedleSet
from embedeval.options import EXPANSION_SIZES
from embedeval.progress import bar

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
            parsed = loads(match.group(0))
        except ValueError:  # not JSON, or past the reader's limits: read as lines
            parsed = None
    if parsed is None:
        try:
            whole = loads(text)
            parsed = whole.get("terms") if isinstance(whole, dict) else None
        except ValueError:
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


def build_expansion_file(needle_set: NeedleSet, sizes: Sequence[int], llm: ChatLLM, progress: bool = False,
                         checkpoint: str | os.PathLike | None = None) -> dict:
    """Expansions of every question of ``needle_set`` at every size, with their metadata.

    With a ``checkpoint`` file, every finished question is saved there at once, and expansions
    found there (from an interrupted call with the same needle set, model, prompt and
    temperature, for the same question text) are reused, so a rerun asks only for the rest. The
    caller removes the checkpoint once the result is safely stored.
    """
    EXPANSION_SIZES.check(list(sizes))
    data = {"needle_set": needle_set.name, "model": llm.model, "prompt": PROMPT, "temperature": llm.temperature,
            "created": dt.date.today().isoformat(), "how": f"generated by {llm.model} through embedeval expand",
            "sizes": {}}
    done = _read_checkpoint(checkpoint, data) if checkpoint else {}
    jobs = [(size, group) for size in sizes for group in needle_set.groups]
    for size, group in bar(jobs, desc="expanding", unit="question", enabled=progress):
        saved = done.get(f"{size}:{group.id}")
        if isinstance(saved, dict) and saved.get("question") == group.question and len(saved.get("terms", ())) == size:
            terms = saved["terms"]
        else:
            terms = expand_question(group.question, size, llm)
            if checkpoint:
                done[f"{size}:{group.id}"] = {"question": group.question, "terms": terms}
                write_text_atomic(checkpoint, json_text({**data, "done": done}, None, ensure_ascii=False))
        data["sizes"].setdefault(str(size), {})[group.id] = terms
    validate_expansions(data, needle_set, "<new expansions>")
    return data


def _read_checkpoint(path: str | os.PathLike, data: dict) -> dict:
    """The finished expansions saved in ``path`` by an earlier call with the same settings, else {}."""
    try:
        saved = load_file(Path(path))
    except (OSError, ValueError):
        return {}
    same = isinstance(saved, dict) and all(saved.get(k) == data[k] for k in ("needle_set", "model", "prompt", "temperature"))
    return saved["done"] if same and isinstance(saved.get("done"), dict) else {}


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
            odd = next((index for index, term in enumerate(terms) if not isinstance(term, str) or not term.strip()), None)
            if odd is not None:
                raise InputError(f"expansion file {path}: group {group_id} at size {size}: term {odd + 1} is "
                                 f"{json.dumps(terms[odd])[:40]}, not a non-empty text")
    if needle_set is None:
        return
    if data["needle_set"] != needle_set.name:
        raise InputError(f"expansion file {path} is for needle set {data['needle_set']!r}, not {needle_set.name!r}")
    names = needle_set.character_pattern()
    for size, groups in data["sizes"].items():
        absent = [g.id for g in needle_set.groups if g.id not in groups]
        if absent:
            raise InputError(f"expansion file {path}: size {size} has no expansion for group {absent[0]}")
        for group in needle_set.groups:
            for term in groups[group.id]:
                if names.search(term) or any(_leaks(term, group.needle(v)) for v in group.needles):
                    raise InputError(f"expansion file {path}: group {group.id} at size {size} leaks the answer in term {term!r}")


def _leaks(term: str, needle: str) -> bool:
    """A term leaks a needle if it contains the whole needle, or is a run of 4+ of its words."""
    term, needle = term.lower().strip(" ."), needle.lower().strip(" .")
    return needle in term or (len(term.split()) >= 4 and term in needle)


def load_expansions(path: str | os.PathLike, needle_set: NeedleSet | None = None) -> dict:
    """Load and validate an expansion file."""
    source = Path(path)
    try:
        data = load_file(source)
    except FileNotFoundError:
        raise InputError(f"expansion file {source} does not exist") from None
    except OSError as exc:  # a folder, no permission
        raise InputError(f"expansion file {source} cannot be read ({exc.strerror or exc})") from None
    except JsonLimitError as exc:
        raise InputError(f"expansion file {source}: {exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"expansion file {source} is not valid JSON ({exc})") from None
    validate_expansions(data, needle_set, str(source))
    return data


def write_expansions(data: dict, path: str | os.PathLike) -> None:
    write_text_atomic(path, json_text(data, 1, ensure_ascii=False) + "\n")


def query_texts(needle_set: NeedleSet, expansion_files: Sequence[str] = ()) -> dict[str, list[str | None]]:
    """Query texts per form, one per group in needle-set order: the question, the set's other
    question forms (``twohop``, ...; None for a group without that form), then ``expanded-N``
    (question + N terms) for every size of every expansion file."""
    forms = {form: [g.query(form) for g in needle_set.groups] for form in needle_set.question_forms}
    return {**forms, **expanded_query_texts(expansion_files, needle_set)}


def expanded_query_texts(files: Sequence[str], needle_set: NeedleSet) -> dict[str, list[str]]:
    """``{"expanded-N": [question + " " + terms, ...]}`` for every size of every file."""
    forms: dict[str, list[str]] = {}
    for path in files:
        data = load_expansions(path, needle_set)
        for size, groups in sorted(data["sizes"].items(), key=lambda item: int(item[0])):
            forms[f"expanded-{size}"] = [f"{g.question} {' '.join(groups[g.id])}" for g in needle_set.groups]
    return forms

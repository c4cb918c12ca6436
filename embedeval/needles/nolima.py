"""NoLiMa's needle-set schema (adobe-research/NoLiMa, ``needlesets/*.json``) converted to ours."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from embedeval.errors import NeedleSetError
from embedeval.labels import QUESTION
from embedeval.needles.model import CHAR, PLACEHOLDER, REQUIRED_VARIANT, non_empty_string

# --- NoLiMa's needle-set schema ------------------------------------------------------------------

#: NoLiMa's question type that is our plain ``question`` form; its other types keep their names.
NOLIMA_PRIMARY_QUESTION = "onehop"
NOLIMA_FIELDS: tuple[str, ...] = ("id", "needle", "questions", "tests")


def is_nolima_schema(data: object) -> bool:
    """Whether ``data`` has the shape of a NoLiMa needle set: a list of entries with a ``needle``
    template, ``questions`` by type and ``tests`` (adobe-research/NoLiMa, ``needlesets/*.json``);
    an entry missing some of them is reported by :func:`convert_nolima`."""
    return (isinstance(data, list) and bool(data) and all(isinstance(e, dict) for e in data)
            and any("needle" in e and ("questions" in e or "tests" in e) for e in data))


def _fill_arguments(template: object, args: list[str], what: str) -> str:
    """``template`` with ``{1}..{n}`` replaced by ``args``; ``{CHAR}`` is kept for later. A
    template that is not text, or a placeholder it cannot fill, is a :class:`ValueError`."""
    if not non_empty_string(template):
        raise ValueError(f"{what} must be a non-empty text, not {template!r}"[:200])

    def fill(match: re.Match) -> str:
        name = match.group(0)[1:-1]
        if name == CHAR[1:-1]:
            return match.group(0)
        if not name.isdigit():
            raise ValueError(f"{what} has an unknown placeholder {match.group(0)}")
        if not 1 <= int(name) <= len(args):
            raise ValueError(f"{what} needs {{{name}}} but the test gives {len(args)} input_args")
        return str(args[int(name) - 1])

    return PLACEHOLDER.sub(fill, template)


def convert_nolima(data: list, source: str = "<memory>") -> dict:
    """A NoLiMa needle set in our format (docs/needles.md), with provenance in ``source``.

    Each (entry, test) becomes a group ``<entry id>_<test id>``: its needle template with the
    test's ``input_args`` filled in as the ``onehop`` needle (``{CHAR}`` kept, drawn per haystack
    from the entry's ``character_set``), each question type as a query form (``onehop`` ->
    ``question``, the others by name) and the entry's ``distractors`` by question type, filled in
    the same way. Problems are a :class:`NeedleSetError` listing every entry and test at fault.
    """
    groups, problems = [], []
    for index, entry in enumerate(data):
        eid = str(entry.get("id", f"#{index}"))
        missing = [f for f in NOLIMA_FIELDS if f not in entry]
        if missing:
            problems += [(eid, f"missing field {f!r}") for f in missing]
            continue
        if not isinstance(entry["questions"], dict) or not entry["questions"]:
            problems.append((eid, "'questions' must be an object of question templates by type"))
            continue
        if not isinstance(entry["tests"], dict) or not entry["tests"]:
            problems.append((eid, "'tests' must be an object of tests by id"))
            continue
        names = entry.get("character_set")
        if names is not None and not (isinstance(names, list) and all(isinstance(n, str) and n.strip() for n in names)):
            problems.append((eid, "'character_set' must be a list of names"))
            continue
        if isinstance(entry["needle"], str) and CHAR in entry["needle"] and not names:  # another needle: each test says so
            problems.append((eid, f"the needle writes {CHAR} but 'character_set' is missing or empty"))
            continue
        raw = entry.get("distractors", {})
        by_kind = raw if isinstance(raw, dict) else {NOLIMA_PRIMARY_QUESTION: raw}  # a plain list: the one-hop question's
        distractors = [(kind, d) for kind, value in by_kind.items() for d in (value if isinstance(value, list) else [value])]
        if NOLIMA_PRIMARY_QUESTION not in entry["questions"]:
            problems.append((eid, f"has no {NOLIMA_PRIMARY_QUESTION!r} question (embedeval's plain question form); "
                                  f"its types are {', '.join(map(str, entry['questions']))}"))
            continue
        for test_id, test in entry["tests"].items():
            args = test.get("input_args") if isinstance(test, dict) else None
            if not isinstance(args, list):
                problems.append((f"{eid}_{test_id}", "test has no 'input_args' list"))
                continue
            try:
                needle = _fill_arguments(entry["needle"], args, "the needle")
                questions = {(QUESTION if kind == NOLIMA_PRIMARY_QUESTION else kind): _fill_arguments(q, args, f"the {kind} question")
                             for kind, q in entry["questions"].items()}
                filled: dict[str, list[str]] = {}
                for kind, d in distractors:
                    if kind not in entry["questions"]:
                        raise ValueError(f"a distractor is for question type {kind!r}, which the entry does not ask")
                    form = QUESTION if kind == NOLIMA_PRIMARY_QUESTION else kind
                    filled.setdefault(form, []).append(_fill_arguments(d, args, f"the {kind} distractor"))
            except ValueError as exc:
                problems.append((f"{eid}_{test_id}", str(exc)))
                continue
            group = {"id": f"{eid}_{test_id}", "category": str(entry.get("category") or entry.get("reasoning_type") or entry.get("type") or "nolima"),
                     "questions": questions, "needles": {REQUIRED_VARIANT: needle}}
            if CHAR in needle:
                group["character_set"] = list(dict.fromkeys(names))
            else:
                problems.append((f"{eid}_{test_id}", f"the needle names no character ({CHAR})"))
                continue
            if filled:
                group["distractors"] = filled
            groups.append(group)
    if problems:
        raise NeedleSetError(source, problems)
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode("utf-8")).hexdigest()
    name = Path(source).stem if source != "<memory>" else "nolima"
    return {"name": name, "description": f"Converted by embedeval from the NoLiMa needle set {source}.",
            "source": {"format": "nolima", "path": source, "sha256": digest, "entries": len(data)},
            "groups": groups}

"""Needle sets: schema, loading and validation (DESIGN §3).

A needle set is ``{"name", "description", "groups": [...]}``; each group is
``{"id", "category", "question", "character", "keyword", "needles": {variant: text}}`` with the
variants ``onehop``, ``inverted``, ``literal``, ``literal_inverted``.

Validation reports *every* problem as (group id, reason): missing or empty fields, duplicate
ids, a one-hop (or inverted) needle sharing a content word (by lemma,
:func:`embedeval.text.lexical_overlap`) with its question, a needle without the character's
name, a question without its keyword.

A pair file (``.csv``, ``.jsonl`` or ``.parquet``) is the lighter input of the similarity
commands: one question-needle :class:`Pair` per row, columns ``question``, ``needle`` and
optionally ``id`` and ``topic``; no variants, characters or keywords, and overlap is reported,
not refused (:func:`load_pairs`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from embedeval.errors import ConfigError, InputError, NeedleSetError
from embedeval.io import jsonl_lines
from embedeval.labels import QUESTION
from embedeval.text import lexical_overlap

NEEDLE_VARIANTS: tuple[str, ...] = ("onehop", "inverted", "literal", "literal_inverted")
#: The needle each variant is normalised by under ``normalize_by="standard"`` (as the Jina study
#: does): the one-hop needle for one-hop and inverted haystacks, the literal one for literal ones.
STANDARD_NEEDLE: dict[str, str] = {"onehop": "onehop", "inverted": "onehop",
                                   "literal": "literal", "literal_inverted": "literal"}
NORMALIZE_BY: tuple[str, ...] = ("standard", "own")


def check_normalize_by(value: str) -> None:
    """A :class:`~embedeval.errors.ConfigError` unless ``value`` is one of :data:`NORMALIZE_BY`."""
    if value not in NORMALIZE_BY:
        raise ConfigError(f"normalize_by must be one of {', '.join(NORMALIZE_BY)}, not {value!r}")
#: Variants whose needle must share no content word with the question.
NO_OVERLAP_VARIANTS: tuple[str, ...] = ("onehop", "inverted")
#: The one variant every group must have; the others are optional (a run asks for what it uses).
REQUIRED_VARIANT = "onehop"
#: Placeholder for the character's name in a needle (drawn from the group's ``character_set``).
CHAR = "{CHAR}"
_PLACEHOLDER = re.compile(r"\{[^{}]*\}")
REQUIRED_FIELDS: tuple[str, ...] = ("id", "category", "needles")
#: Query forms that ask with the needle's own words on purpose (NoLiMa's ``direct`` questions):
#: exempt from the no-overlap rule.
LEXICAL_QUESTION_FORMS: tuple[str, ...] = ("direct",)


@dataclass(frozen=True)
class NeedleGroup:
    """One question with its needles (one per variant the set provides).

    ``question`` is the plain query form (``question``); ``questions`` holds further forms of the
    same question over the same haystacks (``twohop``, ...). A needle may write the character as
    ``{CHAR}``: it is filled from ``character_set`` per haystack (or with ``character``).
    ``keyword`` is the question's term the one-hop needle avoids ("" when the set names none).
    """

    id: str
    category: str
    question: str
    character: str
    keyword: str
    needles: dict[str, str]
    questions: dict[str, str] = field(default_factory=dict)
    character_set: tuple[str, ...] = ()
    distractors: tuple[tuple[str, str], ...] = ()  # (query form, text): texts that share the form's keyword

    @property
    def characters(self) -> tuple[str, ...]:
        """The names a haystack's character is drawn from (the one character, if no set)."""
        return self.character_set or (self.character,)

    def needle(self, variant: str, character: str | None = None) -> str:
        """The ``variant`` needle with ``{CHAR}`` filled by ``character`` (default: ``character``)."""
        return self.needles[variant].replace(CHAR, character or self.character)

    def query(self, form: str) -> str | None:
        """The question of query form ``form`` (``question`` or one of ``questions``), or None."""
        return self.question if form == QUESTION else self.questions.get(form)

    @property
    def distractor_texts(self) -> tuple[str, ...]:
        """The distinct distractor texts, the plain question's first, then the other forms', each
        in the order given: the first K go into a haystack built with K distractors."""
        ordered = sorted(self.distractors, key=lambda pair: pair[0] != QUESTION)  # stable
        return tuple(dict.fromkeys(text for _, text in ordered))


@dataclass(frozen=True)
class NeedleSet:
    """A validated needle set."""

    name: str
    description: str
    groups: tuple[NeedleGroup, ...]
    path: str | None = None

    def group(self, group_id: str) -> NeedleGroup:
        for group in self.groups:
            if group.id == group_id:
                return group
        raise KeyError(group_id)

    @property
    def characters(self) -> list[str]:
        """Every character name the set can put in a haystack."""
        return sorted({name for g in self.groups for name in g.characters})

    @property
    def question_forms(self) -> list[str]:
        """The query forms the set's questions come in: ``question`` first, then the others."""
        extra = {form for g in self.groups for form in g.questions}
        return [QUESTION, *sorted(extra)]

    def variants_served(self) -> list[str]:
        """The needle variants every group has."""
        return [v for v in NEEDLE_VARIANTS if all(v in g.needles for g in self.groups)]

    def check_variants(self, variants) -> None:
        """A :class:`~embedeval.errors.ConfigError` naming the groups that lack a requested variant."""
        for variant in variants:
            lacking = [g.id for g in self.groups if variant not in g.needles]
            if lacking:
                shown = ", ".join(lacking[:5]) + (f" and {len(lacking) - 5} more" if len(lacking) > 5 else "")
                raise ConfigError(f"needle set {self.name!r} has no {variant!r} needle for {shown} "
                                  f"(every group serves: {', '.join(self.variants_served())})")

    def check_distractors(self, counts) -> None:
        """A :class:`~embedeval.errors.ConfigError` naming the groups with fewer distinct
        distractors than the largest of ``counts`` asks for."""
        most = max(counts, default=0)
        if most:
            names = self.character_pattern()
            naming = [(g.id, text) for g in self.groups for text in g.distractor_texts[:most] if names.search(text)]
            if naming:
                group_id, text = naming[0]
                raise ConfigError(f"a distractor of group {group_id!r} names a character ({names.search(text).group(0)}): "
                                  "the needle-free haystacks that hold it would then mention one")
        short = [f"{g.id} ({len(g.distractor_texts)})" for g in self.groups if len(g.distractor_texts) < most]
        if short:
            shown = ", ".join(short[:5]) + (f" and {len(short) - 5} more" if len(short) > 5 else "")
            raise ConfigError(f"{most} distractors per haystack asked for, but needle set {self.name!r} has fewer for "
                              f"{shown}; give them in the needle file or with --distractors-file")

    def with_distractors(self, distractors: dict[str, tuple[tuple[str, str], ...]], source: str = "the distractors") -> NeedleSet:
        """The set with the distractors of every group named in ``distractors`` (group id ->
        (query form, text) pairs, as :func:`load_distractors` reads them) replaced; the other
        groups keep theirs. A group id the set lacks, or a query form its group does not ask, is a
        :class:`~embedeval.errors.ConfigError`."""
        known = {g.id: g for g in self.groups}
        unknown = [group_id for group_id in distractors if group_id not in known]
        if unknown:
            raise ConfigError(f"{source}: group {unknown[0]!r} is not in needle set {self.name!r}")
        for group_id, pairs in distractors.items():
            reasons = distractor_problems(pairs, (QUESTION, *known[group_id].questions))
            if reasons:
                raise ConfigError(f"{source}: group {group_id!r}: {reasons[0]}")
        return replace(self, groups=tuple(replace(g, distractors=distractors[g.id]) if g.id in distractors else g
                                          for g in self.groups))

    def character_pattern(self) -> re.Pattern:
        """A case-insensitive regex matching any character name of the set as a whole word."""
        return re.compile(r"\b(" + "|".join(map(re.escape, self.characters)) + r")\b", re.I)

    def subset(self, group_ids) -> NeedleSet:
        """The same set restricted to ``group_ids`` (in the set's order). An unknown id, or none at
        all, is a :class:`~embedeval.errors.ConfigError`."""
        wanted = set(group_ids)
        if not wanted:
            raise ConfigError("no groups given (leave the groups unset to use every group)")
        unknown = wanted - {g.id for g in self.groups}
        if unknown:
            raise ConfigError(f"no group {sorted(unknown)[0]!r} in needle set {self.name!r}")
        return replace(self, groups=tuple(g for g in self.groups if g.id in wanted))


def _contains_word(text: str, word: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", text, flags=re.IGNORECASE) is not None


def _non_empty_string(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def raw_questions(raw: dict) -> dict[str, str]:
    """A raw group's query forms: ``question`` (the field, or ``questions["question"]``) and the
    other entries of ``questions``."""
    forms = dict(raw["questions"]) if isinstance(raw.get("questions"), dict) else {}
    if "question" in raw:
        forms = {QUESTION: raw["question"], **{k: v for k, v in forms.items() if k != QUESTION}}
    return forms


def raw_distractors(raw: dict) -> list[tuple[str, object]]:
    """A raw group's distractors as (query form, text) pairs: a list belongs to the plain
    ``question``; an object maps query forms to a text or a list of texts."""
    value = raw.get("distractors", [])
    by_form = value if isinstance(value, dict) else {QUESTION: value}
    pairs = [(form, x) for form, v in by_form.items() for x in (v if isinstance(v, list) else [v])]
    return list(dict.fromkeys(pairs)) if all(isinstance(x, str) for _, x in pairs) else pairs


def distractor_problems(pairs: list[tuple[str, object]], questions=None) -> list[str]:
    """Why (query form, text) distractor pairs are not valid: a text that is not non-empty text,
    a form not among ``questions`` (when given), a placeholder in a text."""
    reasons = []
    if not all(_non_empty_string(d) for _, d in pairs):
        reasons.append("'distractors' must hold non-empty texts (a list, or lists by query form)")
    if questions is not None:
        reasons += [f"distractors are given for query form {form!r}, which the group does not ask"
                    for form in dict.fromkeys(f for f, _ in pairs) if form not in questions]
    reasons += [f"a distractor has a placeholder {_PLACEHOLDER.findall(d)[0]} (distractors are plain text)"
                for _, d in pairs if isinstance(d, str) and _PLACEHOLDER.search(d)]
    return reasons


def group_problems(raw: object, index: int) -> tuple[str, list[str]]:
    """(group id, reasons) for one raw group dict; no reasons means valid."""
    if not isinstance(raw, dict):
        return f"#{index}", ["is not an object"]
    gid = str(raw.get("id") or f"#{index}")
    reasons = [f"missing field {f!r}" for f in REQUIRED_FIELDS if f not in raw]
    reasons += [f"field {f!r} must be a non-empty string" for f in ("id", "category")
                if f in raw and not _non_empty_string(raw[f])]
    if "questions" in raw and not isinstance(raw["questions"], dict):
        reasons.append("'questions' must be an object of question texts by query form")
    questions = raw_questions(raw)
    if QUESTION not in questions:
        reasons.append("missing field 'question'")
    reasons += [f"question form {form!r} must be a non-empty string" for form, text in questions.items()
                if not _non_empty_string(text)]
    has_set, has_character = "character_set" in raw, "character" in raw
    if has_set == has_character:
        reasons.append("needs either 'character' or 'character_set'")
    elif has_character and not _non_empty_string(raw["character"]):
        reasons.append("field 'character' must be a non-empty string")
    elif has_set and (not isinstance(raw["character_set"], list) or not raw["character_set"]
                      or not all(_non_empty_string(c) for c in raw["character_set"])):
        reasons.append("'character_set' must be a non-empty list of names")
    elif has_set and len(set(raw["character_set"])) != len(raw["character_set"]):
        reasons.append("'character_set' names a character twice")
    if "keyword" in raw and not _non_empty_string(raw["keyword"]):
        reasons.append("field 'keyword' must be a non-empty string")
    reasons += [f"question form {form!r} is reserved for query expansion" for form in questions if form.startswith("expanded-")]
    reasons += [f"the {form} question has a placeholder {_PLACEHOLDER.findall(text)[0]} (questions are plain text)"
                for form, text in questions.items() if isinstance(text, str) and _PLACEHOLDER.search(text)]
    reasons += distractor_problems(raw_distractors(raw), questions)
    needles = raw.get("needles")
    if "needles" in raw and not isinstance(needles, dict):
        reasons.append("'needles' must be an object")
    if reasons:
        return gid, reasons
    if REQUIRED_VARIANT not in needles:
        reasons.append(f"missing needle {REQUIRED_VARIANT!r}")
    reasons += [f"unknown needle variant {v!r}" for v in needles if v not in NEEDLE_VARIANTS]
    for variant, text in needles.items():
        if variant not in NEEDLE_VARIANTS:
            continue
        if not _non_empty_string(text):
            reasons.append(f"needle {variant!r} must be a non-empty string")
            continue
        unknown = [p for p in _PLACEHOLDER.findall(text) if p != CHAR]
        if unknown:
            reasons.append(f"{variant} needle has an unknown placeholder {unknown[0]} (only {CHAR} is filled in)")
        if has_set and CHAR not in text:
            reasons.append(f"{variant} needle must write the character as {CHAR} (the group has a character_set)")
        elif has_character and CHAR not in text and not _contains_word(text, raw["character"]):
            reasons.append(f"{variant} needle does not name the character {raw['character']!r}")
        if variant in NO_OVERLAP_VARIANTS:
            for form, question in ((f, q) for f, q in questions.items() if f not in LEXICAL_QUESTION_FORMS):
                shared = lexical_overlap(question, text.replace(CHAR, " "))
                if shared:
                    where = "the question" if form == QUESTION else f"the {form} question"
                    reasons.append(f"{variant} needle shares content words with {where}: {', '.join(shared)}")
    if "keyword" in raw and not _contains_word(questions[QUESTION], raw["keyword"]):
        reasons.append(f"question does not contain its keyword {raw['keyword']!r}")
    return gid, reasons


def validate_needle_set(data: object, path: str = "<memory>") -> list[tuple[str, str]]:
    """Every problem of a raw needle set (our format) as (group id, reason)."""
    if not isinstance(data, dict):
        return [("-", "top level must be an object with name and groups (or a NoLiMa needle set: a list of "
                      "entries with needle, questions and tests)")]
    problems = [("-", f"missing field {f!r}") for f in ("name", "groups") if f not in data]
    groups = data.get("groups", [])
    if not isinstance(groups, list) or ("groups" in data and not groups):
        return problems + [("-", "'groups' must be a non-empty list")]
    seen: set[str] = set()
    for index, raw in enumerate(groups):
        gid, reasons = group_problems(raw, index)
        problems += [(gid, r) for r in reasons]
        if isinstance(raw, dict) and "id" in raw:
            if raw["id"] in seen:
                problems.append((gid, "duplicate id"))
            seen.add(raw["id"])
    characters = [g.get("character") for g in groups if isinstance(g, dict)]
    for name in sorted({c for c in characters if isinstance(c, str) and characters.count(c) > 1}):
        problems.append(("-", f"character {name!r} is used by more than one group (give one group several "
                              "question forms instead)"))
    return problems


def parse_needle_set(data: dict, path: str | None = None) -> NeedleSet:
    """Validate raw data (our format, or NoLiMa's: converted first) and build a :class:`NeedleSet`;
    raises :class:`NeedleSetError`."""
    if is_nolima_schema(data):
        data = convert_nolima(data, path or "<memory>")
    problems = validate_needle_set(data, path or "<memory>")
    if problems:
        raise NeedleSetError(path or "<memory>", problems)
    groups = []
    for g in data["groups"]:
        questions = raw_questions(g)
        names = tuple(g.get("character_set", ()))
        groups.append(NeedleGroup(
            id=g["id"], category=g["category"], question=questions.pop(QUESTION),
            character=g.get("character") or names[0], keyword=g.get("keyword", ""),
            needles={v: g["needles"][v] for v in NEEDLE_VARIANTS if v in g["needles"]},
            questions=questions, character_set=names, distractors=tuple(raw_distractors(g)),
        ))
    return NeedleSet(name=data["name"], description=data.get("description", ""), groups=tuple(groups), path=path)


def read_needle_json(path: str | os.PathLike) -> dict | list:
    """Raw JSON of a needle file; unreadable or malformed JSON is a :class:`NeedleSetError`."""
    source = Path(path)
    try:
        return json.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NeedleSetError(str(source), [("-", "file does not exist")]) from None
    except IsADirectoryError:
        raise NeedleSetError(str(source), [("-", "is a folder, not a JSON file")]) from None
    except OSError as exc:
        raise NeedleSetError(str(source), [("-", f"cannot be read ({exc.strerror or exc})")]) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise NeedleSetError(str(source), [("-", f"not valid JSON ({exc})")]) from None


def load_needle_set(path: str | os.PathLike) -> NeedleSet:
    """Load and validate a needle set file (our format or NoLiMa's, told apart by shape)."""
    return parse_needle_set(read_needle_json(path), str(path))


def grid_needle_set(path: str | os.PathLike, groups=None, variants=(), n_distractors=(0,),
                    distractors_file: str | os.PathLike | None = None) -> NeedleSet:
    """The needle set a haystack grid is built from: loaded, restricted to ``groups`` (None: all),
    its distractors replaced by those of ``distractors_file`` for the groups it names, and
    checked to serve ``variants`` and the largest of ``n_distractors``."""
    needle_set = load_needle_set(path)
    if distractors_file:
        needle_set = needle_set.with_distractors(load_distractors(distractors_file), f"distractors file {distractors_file}")
    needle_set = needle_set if groups is None else needle_set.subset(groups)
    needle_set.check_variants(variants)
    needle_set.check_distractors(n_distractors)
    return needle_set


def needle_report(path: str | os.PathLike) -> tuple[list[dict], list[tuple[str, str]]]:
    """Per-group overview rows (id, category, characters, query forms, variants, one-hop/inverted
    overlap) and all problems. Used by ``embedeval needles check``; raises only for an unreadable
    file or a NoLiMa file that cannot be converted."""
    data = read_needle_json(path)
    if is_nolima_schema(data):
        data = convert_nolima(data, str(path))
    problems = validate_needle_set(data, str(path))
    rows = []
    for index, raw in enumerate(data.get("groups", []) if isinstance(data, dict) else []):
        if not isinstance(raw, dict):
            continue
        needles = raw.get("needles") if isinstance(raw.get("needles"), dict) else {}
        questions = {k: v for k, v in raw_questions(raw).items() if isinstance(v, str)}
        names = raw.get("character_set") if isinstance(raw.get("character_set"), list) else [raw.get("character", "")]
        row = {"id": raw.get("id", f"#{index}"), "category": raw.get("category", ""),
               "character": ", ".join(map(str, names)), "forms": ", ".join(questions),
               "variants": ", ".join(v for v in NEEDLE_VARIANTS if v in needles)}
        for variant in NO_OVERLAP_VARIANTS:
            text = needles.get(variant)
            shared = sorted({w for q in questions.values() for w in lexical_overlap(q, text.replace(CHAR, " "))}) \
                if isinstance(text, str) else None
            row[f"{variant}_overlap"] = "–" if shared is None else ", ".join(shared)
        rows.append(row)
    return rows, problems


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
    if not _non_empty_string(template):
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

    return _PLACEHOLDER.sub(fill, template)


def convert_nolima(data: list, source: str = "<memory>") -> dict:
    """A NoLiMa needle set in our format (DESIGN §3), with provenance in ``source``.

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
        if CHAR in entry["needle"] and (not isinstance(names, list) or not names):
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


#: Pair-file formats, by file extension.
PAIR_SUFFIXES: tuple[str, ...] = (".csv", ".jsonl", ".parquet")
PAIR_COLUMNS: tuple[str, ...] = ("question", "needle")


@dataclass(frozen=True)
class Pair:
    """One question with one needle, from a pair file."""

    id: str
    topic: str
    question: str
    needle: str


def _cell_text(value: object) -> str | None:
    """A cell as text: strings as they are, whole numbers as digits; None for a missing value."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if isinstance(value, str) else str(value)


def _read_records(source: Path, what: str, columns: tuple[str, ...], optional: tuple[str, ...]) -> tuple[list[dict], str]:
    """The records of a ``.csv``, ``.jsonl`` or ``.parquet`` table (``what``: "pair file", ...)
    with the required ``columns`` and any of the ``optional`` ones, and the word naming their
    place (``row`` or ``line``; JSONL records carry theirs as ``_place``)."""
    suffix = source.suffix.lower()
    if suffix not in PAIR_SUFFIXES:
        raise InputError(f"{what} {source} must end in .csv, .jsonl or .parquet")
    if not source.exists():
        raise InputError(f"{what} {source} does not exist")
    if source.is_dir():
        raise InputError(f"{what} {source} is a folder, not a file")
    try:
        if suffix == ".jsonl":
            return _read_jsonl_records(source, what, columns), "line"
        if suffix == ".csv":
            frame = pd.read_csv(source, dtype=str, keep_default_na=False, encoding="utf-8-sig")
        else:
            frame = pd.read_parquet(source)
    except InputError:
        raise
    except OSError as exc:
        raise InputError(f"{what} {source} cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} {source} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except Exception as exc:  # pandas and pyarrow raise many types for a file that is not a table
        kind = "CSV" if suffix == ".csv" else "Parquet"
        raise InputError(f"{what} {source} is not a readable {kind} table ({type(exc).__name__}: {str(exc)[:120]})") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(f"{what} {source} lacks the column(s) {', '.join(missing)} "
                         f"(needs {' and '.join(columns)}; {', '.join(optional)} optional)")
    return frame[[c for c in (*optional, *columns) if c in frame.columns]].to_dict("records"), "row"


def _read_jsonl_records(source: Path, what: str, columns: tuple[str, ...]) -> list[dict]:
    records = []
    for number, line in jsonl_lines(source.read_text(encoding="utf-8-sig")):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{what} {source}: line {number}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise InputError(f"{what} {source}: line {number}: expected an object with {' and '.join(columns)}")
        records.append({"_place": number, **record})
    return records


def _text_field(record: dict, column: str, where: str, problems: list[str]) -> str | None:
    """``record[column]`` if it is non-empty text; else None, with the problem added."""
    value = record.get(column)
    if column not in record:
        problems.append(f"{where}: missing field {column!r}")
    elif isinstance(value, str) and value.strip():
        return value
    elif value is None or isinstance(value, str) or _cell_text(value) is None:
        problems.append(f"{where}: empty {column}")
    else:
        problems.append(f"{where}: {column} must be text, not {value!r}")
    return None


def _raise_problems(what: str, source: Path, problems: list[str]) -> None:
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise InputError(f"{what} {source}: {'; '.join(problems[:3])}{more}")


def load_pairs(path: str | os.PathLike) -> tuple[Pair, ...]:
    """The question-needle pairs of a ``.csv``, ``.jsonl`` or ``.parquet`` file.

    Fields: ``question`` and ``needle`` (non-empty text, required), ``id`` (optional; unique;
    default: the pair's 1-based row number, or line number in JSONL) and ``topic`` (optional,
    default empty). Other fields are ignored. A file that cannot be read, an unknown extension, a
    missing column, an empty question or needle, an empty or duplicate id, or a file with no pairs
    is one :class:`~embedeval.errors.InputError` naming the file and the rows at fault.
    """
    source = Path(path)
    records, place = _read_records(source, "pair file", PAIR_COLUMNS, ("id", "topic"))
    pairs: list[Pair] = []
    problems: list[str] = []
    seen: set[str] = set()
    for number, record in enumerate(records, start=1):
        number = record.pop("_place", number)
        where = f"{place} {number}"
        texts = {column: _text_field(record, column, where, problems) for column in PAIR_COLUMNS}
        pair_id = _cell_text(record["id"]) if "id" in record else str(number)
        if pair_id is None or not pair_id.strip():
            problems.append(f"{where}: empty id")
        elif pair_id in seen:
            problems.append(f"{where}: duplicate id {pair_id!r}")
        else:
            seen.add(pair_id)
            if all(texts.values()):
                pairs.append(Pair(id=pair_id, topic=_cell_text(record.get("topic")) or "", **texts))
    _raise_problems("pair file", source, problems)
    if not pairs:
        raise InputError(f"pair file {source} has no pairs")
    return tuple(pairs)


DISTRACTOR_COLUMNS: tuple[str, ...] = ("group_id", "distractor")


def load_distractors(path: str | os.PathLike) -> dict[str, tuple[tuple[str, str], ...]]:
    """Distractors by group from a file (``--distractors-file``): group id -> (query form, text)
    pairs, in file order.

    ``.json``: an object mapping group ids to what a group's ``distractors`` field holds (a list of
    texts, or an object mapping query forms to a text or a list). ``.csv``/``.jsonl``/``.parquet``:
    columns ``group_id`` and ``distractor``, optional ``query_form`` (default ``question``), one
    distractor per row. A file that cannot be read, a missing column, an empty text, a placeholder
    in a text, or no distractors at all is one :class:`~embedeval.errors.InputError`.
    """
    source = Path(path)
    what = "distractors file"
    problems: list[str] = []
    found: dict[str, list[tuple[str, str]]] = {}
    if source.suffix.lower() not in (".json", *PAIR_SUFFIXES):
        raise InputError(f"{what} {source} must end in .json, .csv, .jsonl or .parquet")
    if source.suffix.lower() == ".json":
        try:
            data = read_needle_json(source)
        except NeedleSetError as exc:
            raise InputError(f"{what} {source}: {exc.problems[0][1]}") from None
        if not isinstance(data, dict):
            raise InputError(f"{what} {source} must hold an object mapping group ids to distractors")
        for group_id, value in data.items():
            found[group_id] = raw_distractors({"distractors": value})
            if not found[group_id]:
                problems.append(f"group {group_id!r}: no distractors")
    else:
        records, place = _read_records(source, what, DISTRACTOR_COLUMNS, ("query_form",))
        for number, record in enumerate(records, start=1):
            where = f"{place} {record.pop('_place', number)}"
            group_id, text = (_text_field(record, column, where, problems) for column in DISTRACTOR_COLUMNS)
            form = _cell_text(record.get("query_form")) or QUESTION
            if group_id and text:
                found.setdefault(group_id, []).append((form, text))
    problems += [f"group {group_id!r}: {reason}" for group_id, pairs in found.items() for reason in distractor_problems(pairs)]
    _raise_problems(what, source, problems)
    if not found:
        raise InputError(f"{what} {source} has no distractors")
    return {group_id: tuple(dict.fromkeys(pairs)) for group_id, pairs in found.items()}

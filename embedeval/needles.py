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

import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from embedeval.errors import ConfigError, InputError, NeedleSetError
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
GROUP_FIELDS: tuple[str, ...] = ("id", "category", "question", "character", "keyword", "needles")


@dataclass(frozen=True)
class NeedleGroup:
    """One question with its needles (one per variant)."""

    id: str
    category: str
    question: str
    character: str
    keyword: str
    needles: dict[str, str]


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
        return [g.character for g in self.groups]

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


def group_problems(raw: object, index: int) -> tuple[str, list[str]]:
    """(group id, reasons) for one raw group dict; no reasons means valid."""
    if not isinstance(raw, dict):
        return f"#{index}", ["is not an object"]
    gid = str(raw.get("id") or f"#{index}")
    reasons = [f"missing field {f!r}" for f in GROUP_FIELDS if f not in raw]
    reasons += [
        f"field {f!r} must be a non-empty string"
        for f in GROUP_FIELDS[:-1]
        if f in raw and (not isinstance(raw[f], str) or not raw[f].strip())
    ]
    needles = raw.get("needles")
    if "needles" in raw and not isinstance(needles, dict):
        return gid, reasons + ["'needles' must be an object"]
    if reasons:
        return gid, reasons
    for variant in NEEDLE_VARIANTS:
        text = needles.get(variant)
        if not isinstance(text, str) or not text.strip():
            reasons.append(f"missing needle {variant!r}")
            continue
        if not _contains_word(text, raw["character"]):
            reasons.append(f"{variant} needle does not name the character {raw['character']!r}")
        if variant in NO_OVERLAP_VARIANTS:
            shared = lexical_overlap(raw["question"], text)
            if shared:
                reasons.append(f"{variant} needle shares content words with the question: {', '.join(shared)}")
    reasons += [f"unknown needle variant {v!r}" for v in needles if v not in NEEDLE_VARIANTS]
    if not _contains_word(raw["question"], raw["keyword"]):
        reasons.append(f"question does not contain its keyword {raw['keyword']!r}")
    return gid, reasons


def validate_needle_set(data: object, path: str = "<memory>") -> list[tuple[str, str]]:
    """Every problem of a raw needle set as (group id, reason)."""
    if not isinstance(data, dict):
        return [("-", "top level must be an object with name, description and groups")]
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
        problems.append(("-", f"character {name!r} is used by more than one group"))
    return problems


def parse_needle_set(data: dict, path: str | None = None) -> NeedleSet:
    """Validate raw data and build a :class:`NeedleSet`; raises :class:`NeedleSetError`."""
    problems = validate_needle_set(data, path or "<memory>")
    if problems:
        raise NeedleSetError(path or "<memory>", problems)
    groups = tuple(
        NeedleGroup(
            id=g["id"], category=g["category"], question=g["question"], character=g["character"],
            keyword=g["keyword"], needles={v: g["needles"][v] for v in NEEDLE_VARIANTS},
        )
        for g in data["groups"]
    )
    return NeedleSet(name=data["name"], description=data.get("description", ""), groups=groups, path=path)


def read_needle_json(path: str | os.PathLike) -> dict:
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
    """Load and validate a needle set file."""
    return parse_needle_set(read_needle_json(path), str(path))


def needle_report(path: str | os.PathLike) -> tuple[list[dict], list[tuple[str, str]]]:
    """Per-group overview rows (id, category, character, one-hop/inverted overlap) and all problems.

    Used by ``embedeval needles check``; raises only for an unreadable file.
    """
    data = read_needle_json(path)
    problems = validate_needle_set(data, str(path))
    rows = []
    for index, raw in enumerate(data.get("groups", []) if isinstance(data, dict) else []):
        if not isinstance(raw, dict):
            continue
        needles = raw.get("needles") if isinstance(raw.get("needles"), dict) else {}
        question = raw.get("question", "") if isinstance(raw.get("question"), str) else ""
        row = {"id": raw.get("id", f"#{index}"), "category": raw.get("category", ""), "character": raw.get("character", "")}
        for variant in NO_OVERLAP_VARIANTS:
            text = needles.get(variant)
            row[f"{variant}_overlap"] = ", ".join(lexical_overlap(question, text)) if isinstance(text, str) else "?"
        rows.append(row)
    return rows, problems


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


def _read_pair_records(source: Path) -> tuple[list[dict], str]:
    """The records of a pair file and the word naming their place (``row`` or ``line``)."""
    suffix = source.suffix.lower()
    if suffix not in PAIR_SUFFIXES:
        raise InputError(f"pair file {source} must end in .csv, .jsonl or .parquet")
    if not source.exists():
        raise InputError(f"pair file {source} does not exist")
    if source.is_dir():
        raise InputError(f"pair file {source} is a folder, not a file")
    try:
        if suffix == ".jsonl":
            return _read_jsonl_records(source), "line"
        if suffix == ".csv":
            frame = pd.read_csv(source, dtype=str, keep_default_na=False, encoding="utf-8-sig")
        else:
            frame = pd.read_parquet(source)
    except InputError:
        raise
    except OSError as exc:
        raise InputError(f"pair file {source} cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"pair file {source} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except Exception as exc:  # pandas and pyarrow raise many types for a file that is not a table
        kind = "CSV" if suffix == ".csv" else "Parquet"
        raise InputError(f"pair file {source} is not a readable {kind} table ({type(exc).__name__}: {str(exc)[:120]})") from None
    missing = [c for c in PAIR_COLUMNS if c not in frame.columns]
    if missing:
        raise InputError(f"pair file {source} lacks the column(s) {', '.join(missing)} "
                         f"(needs question and needle; id and topic are optional)")
    columns = [c for c in ("id", "topic", *PAIR_COLUMNS) if c in frame.columns]
    return frame[columns].to_dict("records"), "row"


def _read_jsonl_records(source: Path) -> list[dict]:
    records = []
    for number, line in enumerate(source.read_text(encoding="utf-8-sig").split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"pair file {source}: line {number}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise InputError(f"pair file {source}: line {number}: expected an object with question and needle")
        records.append({"_place": number, **record})
    return records


def load_pairs(path: str | os.PathLike) -> tuple[Pair, ...]:
    """The question-needle pairs of a ``.csv``, ``.jsonl`` or ``.parquet`` file.

    Fields: ``question`` and ``needle`` (non-empty text, required), ``id`` (optional; unique;
    default: the pair's 1-based row number, or line number in JSONL) and ``topic`` (optional,
    default empty). Other fields are ignored. A file that cannot be read, an unknown extension, a
    missing column, an empty question or needle, an empty or duplicate id, or a file with no pairs
    is one :class:`~embedeval.errors.InputError` naming the file and the rows at fault.
    """
    source = Path(path)
    records, place = _read_pair_records(source)
    pairs: list[Pair] = []
    problems: list[str] = []
    seen: set[str] = set()
    for number, record in enumerate(records, start=1):
        number = record.pop("_place", number)
        where = f"{place} {number}"
        texts = {}
        for field in PAIR_COLUMNS:
            value = record.get(field)
            if field not in record:
                problems.append(f"{where}: missing field {field!r}")
            elif isinstance(value, str) and value.strip():
                texts[field] = value
            elif value is None or isinstance(value, str) or _cell_text(value) is None:
                problems.append(f"{where}: empty {field}")
            else:
                problems.append(f"{where}: {field} must be text, not {value!r}")
        pair_id = _cell_text(record["id"]) if "id" in record else str(number)
        if pair_id is None or not pair_id.strip():
            problems.append(f"{where}: empty id")
        elif pair_id in seen:
            problems.append(f"{where}: duplicate id {pair_id!r}")
        else:
            seen.add(pair_id)
            if len(texts) == len(PAIR_COLUMNS):
                pairs.append(Pair(id=pair_id, topic=_cell_text(record.get("topic")) or "", **texts))
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise InputError(f"pair file {source}: {'; '.join(problems[:3])}{more}")
    if not pairs:
        raise InputError(f"pair file {source} has no pairs")
    return tuple(pairs)

"""Pair files and distractor files: the lighter inputs of the similarity commands and
``--distractors-file`` (``.csv``, ``.jsonl``, ``.parquet``; distractors also ``.json``)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from embedeval.errors import InputError, NeedleSetError
from embedeval.io import jsonl_objects, read_text_file
from embedeval.jsonread import JsonLimitError, load_file
from embedeval.labels import QUESTION
from embedeval.needles.model import distractor_problems, raw_distractors
from embedeval.schema import QUERY_FORM


def read_needle_json(path: str | os.PathLike) -> dict | list:
    """Raw JSON of a needle file; unreadable or malformed JSON is a :class:`NeedleSetError`."""
    source = Path(path)
    try:
        return load_file(source)
    except FileNotFoundError:
        raise NeedleSetError(str(source), [("-", "file does not exist")]) from None
    except IsADirectoryError:
        raise NeedleSetError(str(source), [("-", "is a folder, not a JSON file")]) from None
    except OSError as exc:
        raise NeedleSetError(str(source), [("-", f"cannot be read ({exc.strerror or exc})")]) from None
    except JsonLimitError as exc:
        raise NeedleSetError(str(source), [("-", str(exc))]) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise NeedleSetError(str(source), [("-", f"not valid JSON ({exc})")]) from None


#: Pair-file formats, by file extension.
PAIR_SUFFIXES: tuple[str, ...] = (".csv", ".jsonl", ".parquet")
PAIR_COLUMNS: tuple[str, ...] = ("question", "needle")
#: A pair file's column naming the needle's target theme (a cluster number of a themes run, or a
#: term of the theme's top terms), by either name; ``themes membership`` reads it, the similarity
#: commands ignore it.
TARGET_COLUMNS: tuple[str, ...] = ("cluster", "theme")
#: A whole number >= 0 as a cell may hold it (``3``, or ``3.0`` as a table of floats writes it).
_WHOLE_NUMBER = re.compile(r"([0-9]+)(?:\.0*)?")  # ASCII digits only, as a theme number anywhere else
#: A term as a theme's top terms hold them: one word of letters (``writing``).
_TERM = re.compile(r"[^\W\d_]+")


@dataclass(frozen=True)
class Pair:
    """One question with one needle, from a pair file."""

    id: str
    topic: str
    question: str
    needle: str
    #: the theme the needle is written for (``cluster``/``theme`` column), if named: its number, or a
    #: term of its top terms (``writing``) that a themes run resolves
    target_cluster: int | str | None = None


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
        import pandas as pd  # a table file's reader, imported when one is read (a needle set's checks need none)

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
    text = read_text_file(source, what, encoding="utf-8-sig", lines=True)
    return [{"_place": number, **record} for number, record in
            jsonl_objects(text, lambda number: f"{what} {source}: line {number}", f"expected an object with {' and '.join(columns)}")]


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


def _target_cluster(record: dict, where: str, problems: list[str]) -> int | str | None:
    """The pair's target theme from its ``cluster`` or ``theme`` field: a whole number >= 0, a term
    (one word of letters, lowercased: which theme has it among its top terms is for the themes run
    to say), or None when the field is absent or empty."""
    given = {c: text for c in TARGET_COLUMNS if (text := _cell_text(record.get(c))) is not None and text.strip()}
    if len(given) > 1:
        problems.append(f"{where}: both cluster and theme given; name the target in one of them")
        return None
    if not given:
        return None
    (column, text), = given.items()
    number = _WHOLE_NUMBER.fullmatch(text.strip())
    if number:
        return int(number.group(1))
    if _TERM.fullmatch(text.strip()):
        return text.strip().lower()
    problems.append(f"{where}: {column} must be a cluster number (0, 1, ... as in the themes run's clusters.csv) or a term of "
                    f"the theme's top terms (one word, such as writing), not {text!r}")
    return None


def load_pairs(path: str | os.PathLike) -> tuple[Pair, ...]:
    """The question-needle pairs of a ``.csv``, ``.jsonl`` or ``.parquet`` file.

    Fields: ``question`` and ``needle`` (non-empty text, required), ``id`` (optional; unique;
    default: the pair's 1-based row number, or line number in JSONL), ``topic`` (optional,
    default empty) and ``cluster`` or ``theme`` (optional, one of the two: the theme, in a themes
    run, the needle is written for, by its number or by a term of its top terms such as
    ``writing``; empty: none named). Other fields are ignored. A file that cannot be read, an
    unknown extension, a missing column, an empty question or needle, an empty or duplicate id, a
    target that is neither a whole number >= 0 nor one word, or given in both columns, or a file
    with no pairs is one :class:`~embedeval.errors.InputError` naming the file and the rows at
    fault.
    """
    source = Path(path)
    records, place = _read_records(source, "pair file", PAIR_COLUMNS, ("id", "topic", *TARGET_COLUMNS))
    pairs: list[Pair] = []
    problems: list[str] = []
    seen: set[str] = set()
    for number, record in enumerate(records, start=1):
        number = record.pop("_place", number)
        where = f"{place} {number}"
        texts = {column: _text_field(record, column, where, problems) for column in PAIR_COLUMNS}
        target = _target_cluster(record, where, problems)
        pair_id = _cell_text(record["id"]) if "id" in record else str(number)
        if pair_id is None or not pair_id.strip():
            problems.append(f"{where}: empty id")
        elif pair_id in seen:
            problems.append(f"{where}: duplicate id {pair_id!r}")
        else:
            seen.add(pair_id)
            if all(texts.values()):
                pairs.append(Pair(id=pair_id, topic=_cell_text(record.get("topic")) or "", target_cluster=target, **texts))
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
    columns ``group_id`` and ``distractor``, optional :data:`~embedeval.schema.QUERY_FORM` (the query
    form, default ``question``), one distractor per row. A file that cannot be read, a missing
    column, an empty text, a placeholder in a text, or no distractors at all is one
    :class:`~embedeval.errors.InputError`.
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
        records, place = _read_records(source, what, DISTRACTOR_COLUMNS, (QUERY_FORM,))
        for number, record in enumerate(records, start=1):
            where = f"{place} {record.pop('_place', number)}"
            group_id, text = (_text_field(record, column, where, problems) for column in DISTRACTOR_COLUMNS)
            form = _cell_text(record.get(QUERY_FORM)) or QUESTION
            if group_id and text:
                found.setdefault(group_id, []).append((form, text))
    problems += [f"group {group_id!r}: {reason}" for group_id, pairs in found.items() for reason in distractor_problems(pairs)]
    _raise_problems(what, source, problems)
    if not found:
        raise InputError(f"{what} {source} has no distractors")
    return {group_id: tuple(dict.fromkeys(pairs)) for group_id, pairs in found.items()}

"""Themes named by their number or by a term of their top terms (``6`` or ``writing``), as a
finished run's ``clusters.csv`` lists them: a term keeps naming the same subject where a number
may not (cluster numbers follow the clusters' sizes, which can change between machines)."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import numpy as np

from embedeval.errors import InputError
from embedeval.experiments.themes.files import CLUSTERS_FILE, read_manifest
from embedeval.io import read_table

#: A theme named by its number (``6``; a table of floats writes ``6.0``).
THEME_NUMBER = re.compile(r"-?[0-9]+(?:\.0*)?")  # ASCII digits only, as every number of a command line


def theme_top_terms(out: str | Path) -> dict[int, tuple[str, ...]]:
    """Each theme's top terms (cluster number -> its terms, heaviest first), as the finished themes
    run ``out`` wrote them in ``clusters.csv``."""
    read_manifest(out)  # a missing folder or an unfinished run: one line
    path = Path(out) / CLUSTERS_FILE
    clusters = read_table(path, ["cluster", "top_terms"])
    found: dict[int, tuple[str, ...]] = {}
    for line, (cluster, terms) in enumerate(zip(clusters["cluster"], clusters["top_terms"], strict=True), start=2):
        text = str(cluster).strip()
        if not THEME_NUMBER.fullmatch(text) or not 0 <= (number := int(float(text))) < 2**31:
            raise InputError(f"{path}, line {line}: cluster {text!r} is not a theme number (a whole number >= 0, "
                             f"below {2**31:,})")
        if number in found:
            raise InputError(f"{path}, line {line}: theme {number} is listed twice")
        found[number] = tuple(t.strip().lower() for t in (terms if isinstance(terms, str) else "").split(";") if t.strip())
    return found


def resolve_theme(name: int | str, top_terms: dict[int, tuple[str, ...]], run: str | Path, parameter: str | None = None,
                  what: str | None = None) -> int:
    """The cluster number of the theme ``name`` names in the run ``run`` (whose themes' top terms
    are ``top_terms``, :func:`theme_top_terms`): a whole number (``6``, ``"6"``) is the theme of that
    number; any other text is a term (``"writing"``, case and surrounding spaces aside), the theme
    that has it among its top terms. A number that is no theme of the run, a term no theme has, and
    a term more than one theme has (the candidates named, with their first top terms) are one
    :class:`~embedeval.errors.InputError`, after ``what: `` (default: `` `parameter` `` when the
    name is that parameter's value; a pair file: the needles that named it).

    Cluster numbers follow the clusters' sizes, and sizes can change between machines (the
    docstring of :mod:`embedeval.experiments.themes`, Determinism): a term keeps naming the same subject where a number may not."""
    what = what or (f"`{parameter}`" if parameter else "")
    label = f"{what}: " if what else ""
    parameters = (parameter,) if parameter else ()
    known = sorted(top_terms)
    text = str(name).strip() if not isinstance(name, (int, np.integer)) or isinstance(name, bool) else None
    if text is None or THEME_NUMBER.fullmatch(text):
        number = int(name) if text is None else int(float(text))
        if number not in top_terms:
            raise InputError(f"{label}theme {number} is not a theme of {run} (its themes: {theme_range(known)}; see its clusters.csv)", *parameters)
        return number
    term = text.lower()
    if not term:
        raise InputError(f"{label}an empty name: name a theme by its number or by one of its top terms (see {run}/clusters.csv)", *parameters)
    matches = [c for c in known if term in top_terms[c]]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        every = sorted({t for terms in top_terms.values() for t in terms})
        close = difflib.get_close_matches(term, every, n=3)
        hint = f"; closest: {', '.join(f'{t} ({_themes_with(t, top_terms)})' for t in close)}" if close else ""
        raise InputError(f"{label}no theme of {run} has {text!r} among its top terms{hint} (see its clusters.csv)", *parameters)
    candidates = "; ".join(f"{c} ({', '.join(top_terms[c][:4])})" for c in matches)
    raise InputError(f"{label}{text!r} is a top term of {len(matches)} themes of {run}: {candidates}; name one by its "
                     "number or by a term only it has", *parameters)


def resolve_themes(run: str | Path, names, parameter: str | None = None) -> list[int]:
    """:func:`resolve_theme` for each of ``names`` against the themes of the finished run ``run``,
    in order; two names of the same theme (``writing`` and ``6``) are one
    :class:`~embedeval.errors.InputError`."""
    top_terms = theme_top_terms(run)
    numbers = [resolve_theme(name, top_terms, run, parameter) for name in names]
    for number in numbers:
        same = [str(n) for n, c in zip(names, numbers, strict=True) if c == number]
        if len(same) > 1:
            raise InputError(f"{f'`{parameter}`' if parameter else 'the list'} names theme {number} twice ({', '.join(same)}): "
                             "name each theme once", *((parameter,) if parameter else ()))
    return numbers


def theme_range(known: list[int]) -> str:
    return f"0..{known[-1]}" if known == list(range(len(known))) and known else ", ".join(map(str, known)) or "none"


def _themes_with(term: str, top_terms: dict[int, tuple[str, ...]]) -> str:
    found = [str(c) for c in sorted(top_terms) if term in top_terms[c]]
    return f"theme{'s' if len(found) > 1 else ''} {', '.join(found)}"

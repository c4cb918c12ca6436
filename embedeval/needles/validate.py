"""Needle-set validation and loading: every problem of a raw set as (group id, reason); our
format and NoLiMa's (told apart by shape) load into a :class:`~embedeval.needles.model.NeedleSet`."""

from __future__ import annotations

import os

from embedeval.errors import NeedleSetError
from embedeval.labels import QUESTION
from embedeval.needles.files import load_distractors, read_needle_json
from embedeval.needles.model import (
    CHAR,
    LEXICAL_QUESTION_FORMS,
    NEEDLE_VARIANTS,
    NO_OVERLAP_VARIANTS,
    PLACEHOLDER,
    REQUIRED_FIELDS,
    REQUIRED_VARIANT,
    NeedleGroup,
    NeedleSet,
    contains_word,
    distractor_problems,
    non_empty_string,
    raw_distractors,
    raw_questions,
)
from embedeval.needles.nolima import convert_nolima, is_nolima_schema
from embedeval.text import content_words, describe_invisible, lexical_overlap, mixed_script_words, same_words
from embedeval.text import words as words_of


def group_problems(raw: object, index: int) -> tuple[str, list[str]]:
    """(group id, reasons) for one raw group dict; no reasons means valid."""
    if not isinstance(raw, dict):
        return f"#{index}", ["is not an object"]
    gid = str(raw.get("id") or f"#{index}")
    reasons = [f"missing field {f!r}" for f in REQUIRED_FIELDS if f not in raw]
    reasons += [f"field {f!r} must be a non-empty string" for f in ("id", "category")
                if f in raw and not non_empty_string(raw[f])]
    if "questions" in raw and not isinstance(raw["questions"], dict):
        reasons.append("'questions' must be an object of question texts by query form")
    questions = raw_questions(raw)
    if QUESTION not in questions:
        reasons.append("missing field 'question'")
    reasons += [f"question form {form!r} must be a non-empty string" for form, text in questions.items()
                if not non_empty_string(text)]
    has_set, has_character = "character_set" in raw, "character" in raw
    if has_set == has_character:
        reasons.append("needs either 'character' or 'character_set'")
    elif has_character and not non_empty_string(raw["character"]):
        reasons.append("field 'character' must be a non-empty string")
    elif has_set and (not isinstance(raw["character_set"], list) or not raw["character_set"]
                      or not all(non_empty_string(c) for c in raw["character_set"])):
        reasons.append("'character_set' must be a non-empty list of names")
    elif has_set and len(set(raw["character_set"])) != len(raw["character_set"]):
        reasons.append("'character_set' names a character twice")
    if "keyword" in raw and not non_empty_string(raw["keyword"]):
        reasons.append("field 'keyword' must be a non-empty string")
    reasons += [f"question form {form!r} is reserved for query expansion" for form in questions if form.startswith("expanded-")]
    reasons += [f"the {form} question has a placeholder {PLACEHOLDER.findall(text)[0]} (questions are plain text)"
                for form, text in questions.items() if isinstance(text, str) and PLACEHOLDER.search(text)]
    reasons += distractor_problems(raw_distractors(raw), questions)
    needles = raw.get("needles")
    if "needles" in raw and not isinstance(needles, dict):
        reasons.append("'needles' must be an object")
    if reasons:
        return gid, reasons
    names = [raw["character"]] if has_character else raw["character_set"]
    for what, text in [*((f"the {form} question" if form != QUESTION else "the question", q) for form, q in questions.items()),
                       *(("the character", name) for name in names), ("the keyword", raw.get("keyword", ""))]:
        reasons += spelling_problems(text, what)
    if REQUIRED_VARIANT not in needles:
        reasons.append(f"missing needle {REQUIRED_VARIANT!r}")
    reasons += [f"unknown needle variant {v!r}" for v in needles if v not in NEEDLE_VARIANTS]
    for variant, text in needles.items():
        if variant not in NEEDLE_VARIANTS:
            continue
        if not non_empty_string(text):
            reasons.append(f"needle {variant!r} must be a non-empty string")
            continue
        reasons += spelling_problems(text, f"{variant} needle")
        unknown = [p for p in PLACEHOLDER.findall(text) if p != CHAR]
        if unknown:
            reasons.append(f"{variant} needle has an unknown placeholder {unknown[0]} (only {CHAR} is filled in)")
        if has_set and CHAR not in text:
            reasons.append(f"{variant} needle must write the character as {CHAR} (the group has a character_set)")
        elif has_character and CHAR not in text and not contains_word(text, raw["character"]):
            reasons.append(f"{variant} needle does not name the character {raw['character']!r}")
        if variant in NO_OVERLAP_VARIANTS:
            for form, question in ((f, q) for f, q in questions.items() if f not in LEXICAL_QUESTION_FORMS):
                shared = lexical_overlap(question, text.replace(CHAR, " "))
                if shared:
                    where = "the question" if form == QUESTION else f"the {form} question"
                    reasons.append(f"{variant} needle shares content words with {where}: {', '.join(shared)}")
    if all(non_empty_string(needles.get(v)) for v in ("onehop", "inverted")) and same_words(needles["inverted"], needles["onehop"]):
        reasons.append("inverted needle is the onehop needle word for word: it must say the same fact in another order")
    if "keyword" in raw and not contains_word(questions[QUESTION], raw["keyword"]):
        reasons.append(f"question does not contain its keyword {raw['keyword']!r}")
    if "keyword" in raw and not content_words(raw["keyword"]):
        reasons.append(f"keyword {raw['keyword']!r} is only function words (as the checks read it: "
                       f"{', '.join(map(repr, [w for w in words_of(raw['keyword'])])) or 'no word'}), which the overlap check "
                       "skips: a needle could share it with the question unseen; choose a content word of the question")
    return gid, reasons


def spelling_problems(text: str, what: str) -> list[str]:
    """Why ``text`` (``what``: "the question", "onehop needle") could hide a word from the overlap
    and absence checks: an invisible character (a tokenizer drops it, the word comparison would
    not) or a word mixing scripts (a look-alike letter), one line each."""
    invisible = describe_invisible(text, what)
    return ([invisible] if invisible else []) + [
        f"{what}'s word {word!r} mixes scripts ({', '.join(scripts)}): a look-alike letter hides the word it imitates"
        for word, scripts in mixed_script_words(text)]


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
        if isinstance(raw, dict) and isinstance(raw.get("id"), str):  # another id is a problem of its group
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


def load_needle_set(path: str | os.PathLike) -> NeedleSet:
    """Load and validate a needle set file (our format or NoLiMa's, told apart by shape)."""
    return parse_needle_set(read_needle_json(path), str(path))


def grid_needle_set(path: str | os.PathLike, groups=None, variants=(), distractor_counts=(0,),
                    distractors_file: str | os.PathLike | None = None) -> NeedleSet:
    """The needle set a haystack grid is built from: loaded, restricted to ``groups`` (None: all),
    its distractors replaced by those of ``distractors_file`` for the groups it names, and
    checked to serve ``variants`` and the largest of the ``distractor_counts``."""
    needle_set = load_needle_set(path)
    if distractors_file:
        needle_set = needle_set.with_distractors(load_distractors(distractors_file), f"distractors file {distractors_file}")
    needle_set = needle_set if groups is None else needle_set.subset(groups)
    needle_set.check_variants(variants)
    needle_set.check_distractors(distractor_counts)
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
    groups = data.get("groups") if isinstance(data, dict) else None
    for index, raw in enumerate(groups if isinstance(groups, list) else []):  # any other is among the problems
        if not isinstance(raw, dict):
            continue
        needles = raw.get("needles") if isinstance(raw.get("needles"), dict) else {}
        questions = {k: v for k, v in raw_questions(raw).items() if isinstance(v, str)}
        names = raw.get("character_set") if isinstance(raw.get("character_set"), list) else [raw.get("character", "")]
        row = {"id": str(raw.get("id", f"#{index}")), "category": str(raw.get("category", "")),
               "character": ", ".join(map(str, names)), "forms": ", ".join(questions),
               "variants": ", ".join(v for v in NEEDLE_VARIANTS if v in needles)}
        for variant in NO_OVERLAP_VARIANTS:
            text = needles.get(variant)
            shared = sorted({w for q in questions.values() for w in lexical_overlap(q, text.replace(CHAR, " "))}) \
                if isinstance(text, str) else None
            row[f"{variant}_overlap"] = "–" if shared is None else ", ".join(shared)
        rows.append(row)
    return rows, problems

"""The needle-set model (docs/needles.md): groups of a question, its needles by variant and its
character(s); the variants and what each is normalised by."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from embedeval.errors import ConfigError
from embedeval.labels import QUESTION
from embedeval.text import contains_words

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
PLACEHOLDER = re.compile(r"\{[^{}]*\}")
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
                              f"{shown}; give them in the needle file or with `distractors_file`", "distractors_file")

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


def contains_word(text: str, word: str) -> bool:
    """Whether ``word`` (a keyword, a name) is in ``text`` as whole words, compared as every check
    compares words (:func:`~embedeval.text.contains_words`: case, accents and invisible characters
    aside)."""
    return contains_words(text, word)


def non_empty_string(value: object) -> bool:
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
    if not all(non_empty_string(d) for _, d in pairs):
        reasons.append("'distractors' must hold non-empty texts (a list, or lists by query form)")
    if questions is not None:
        reasons += [f"distractors are given for query form {form!r}, which the group does not ask"
                    for form in dict.fromkeys(f for f, _ in pairs) if form not in questions]
    reasons += [f"a distractor has a placeholder {PLACEHOLDER.findall(d)[0]} (distractors are plain text)"
                for _, d in pairs if isinstance(d, str) and PLACEHOLDER.search(d)]
    return reasons

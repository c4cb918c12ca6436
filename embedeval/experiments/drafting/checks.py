"""What a drafted group must pass to be kept (checks 1-5 of :mod:`embedeval.experiments.drafting`,
and the judge's verdict when there is one): :class:`DraftChecker`, against a themes run and the
groups accepted so far."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from embedeval.defaults import DEFAULT_INDEX, DEFAULT_VARIANTS
from embedeval.embedders.registry import load_embedder
from embedeval.errors import InputError
from embedeval.experiments.context_rot import answer_absence, needle_question_similarity, pair_rows, question_key
from embedeval.experiments.drafting.config import DraftConfig
from embedeval.experiments.drafting.prompts import SENT_BACK_FIELDS, cut_text, json_or_kind
from embedeval.experiments.judging import NeedleJudge
from embedeval.experiments.themes.chunks import themes_chunks
from embedeval.experiments.themes.loading import load_themes
from embedeval.experiments.themes.membership import theme_membership
from embedeval.metrics.neighbours import nearest_cosines
from embedeval.needles import CHAR, NEEDLE_VARIANTS, NO_OVERLAP_VARIANTS, NeedleGroup, NeedleSet, group_problems, parse_needle_set, raw_questions
from embedeval.progress import step
from embedeval.text import WordIndex, words

#: The fields of a drafted group that go into the needle set: those asked for, and ``id`` and
#: ``category`` (filled in when missing or taken). Any other field a model writes (``distractors``,
#: ``questions``: texts no check tests; ``notes``) stays out, its name recorded in ``checks.ignored_fields``.
DRAFT_FIELDS = ("id", "category", *SENT_BACK_FIELDS)
#: How the near-duplicate check writes every needle's character (:func:`anonymous`).
ANONYMOUS = "someone"


def anonymous(needle: str, group: dict) -> str:
    """A needle with its character (``{CHAR}`` or the group's names) written as :data:`ANONYMOUS`:
    two needles that say the same of different characters are duplicates (a name alone moves
    all-MiniLM-L6-v2's cosine of two such needles down to about 0.8)."""
    names = sorted(_names(group), key=len, reverse=True)
    text = needle.replace(CHAR, ANONYMOUS)
    return re.sub(r"\b(" + "|".join(map(re.escape, names)) + r")\b", ANONYMOUS, text, flags=re.I) if names else text


def _names(group: dict) -> set[str]:
    names = [*(group.get("character_set") if isinstance(group.get("character_set"), list) else []), group.get("character")]
    return {str(n).lower() for n in names if isinstance(n, str)}


def _name_keys(group: dict) -> set[str]:
    """The group's character names as the checks compare words (:func:`~embedeval.text.words`):
    ``Yüki`` and ``YUKI`` are the name ``yuki``."""
    return {" ".join(words(name)) for name in _names(group)} - {""}


#: What ends a line: a drafted text holding one is refused (:meth:`DraftChecker._structure`).
_LINE_BREAK = re.compile("[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")


class DraftChecker:
    """Checks 1-5 of :mod:`embedeval.experiments.drafting` on drafted groups of one theme against a themes run and the
    groups accepted so far: loads the run's chunks and embedder (and the needle-question embedder)
    once. With ``judge`` (:class:`~embedeval.experiments.judging.NeedleJudge`), the groups that
    pass checks 1-4 are put to it too."""

    def __init__(self, config: DraftConfig, cache_dir=None, progress: bool = False, judge: NeedleJudge | None = None):
        self.config, self.cache_dir, self.progress, self.judge = config, cache_dir, progress, judge
        manifest, *_ = load_themes(config.themes)  # fitted with other packages: refused before any request
        self.embedder_spec = manifest["settings"]["embedder"]
        self.chunks, _ = themes_chunks(config.themes)
        self.corpus = WordIndex(chunk.text for chunk in self.chunks)  # the absence check searches all of it
        self.model = load_embedder(self.embedder_spec, cache_dir=cache_dir, progress=progress)
        if self.model.fingerprint != manifest["embedder_fingerprint"]:
            raise InputError(f"{config.themes} was made with another {self.embedder_spec} (its fingerprint differs); "
                             "run embedeval themes again")
        nq_spec = config.embedder or self.embedder_spec
        self.nq_model = self.model if nq_spec == self.embedder_spec else load_embedder(nq_spec, cache_dir=cache_dir, progress=progress)

    def check(self, raws: list, theme: int, accepted: list[dict]) -> tuple[list[dict], list[tuple[object, str]]]:
        """(groups accepted, in draft order, each with ``checks``; (raw draft, reason) of each
        rejected one). ``accepted``: the groups accepted before (their ids, characters and needles
        are not to be repeated); it is not changed."""
        kept_ids = {g["id"] for g in accepted}
        kept_names = {n: g["id"] for g in accepted for n in _name_keys(g)}
        candidates, rejected = [], []
        for index, raw in enumerate(raws):
            group, reasons = self._structure(raw, index, theme, kept_ids, kept_names)
            if reasons:
                rejected.append((raw, "; ".join(reasons)))
                continue
            candidates.append((raw, group))
            kept_ids.add(group["id"])
            kept_names.update({n: group["id"] for n in _name_keys(group)})
        if not candidates:
            return [], rejected
        needle_set = parse_needle_set({"name": "drafts", "groups": [g for _, g in candidates]}, "<drafts>")
        values, reasons_of = self._measure(needle_set, theme)
        if self.judge is not None:  # asked only about groups that passed checks 1-4, before check 5 counts them as accepted
            self.judge.judge(needle_set, values, reasons_of)
        duplicates = self._duplicates(needle_set, accepted, values, reasons_of)
        kept = []
        for raw, group in candidates:
            reasons = reasons_of[group["id"]] + duplicates[group["id"]]
            if reasons:
                rejected.append((raw, "; ".join(reasons)))
            else:
                ignored = [cut_text(json_or_kind(k), 40) for k in raw if k not in DRAFT_FIELDS][:20]
                kept.append({**group, "checks": {**values[group["id"]], **({"ignored_fields": ignored} if ignored else {})}})
        return kept, rejected

    def _structure(self, raw, index: int, theme: int, kept_ids: set, kept_names: dict) -> tuple[dict | None, list[str]]:
        """Check 1: the group with embedeval's fields filled in (``id`` if it has none or one taken,
        ``category`` ``theme-N``), and why it is not a valid one-hop group (empty: it is)."""
        if not isinstance(raw, dict):
            return None, ["is not a JSON object"]
        group = {k: raw[k] for k in DRAFT_FIELDS if k in raw}  # the model's other fields are no part of a checked group
        group["category"] = raw.get("category") or f"theme-{theme}"
        if not isinstance(group.get("id"), str) or not group["id"].strip() or group["id"] in kept_ids:
            number = 1
            while f"theme{theme}-{number}" in kept_ids:
                number += 1
            group["id"] = f"theme{theme}-{number}"
        _, reasons = group_problems(group, index)
        needles = group.get("needles") if isinstance(group.get("needles"), dict) else {}
        reasons += [f"missing needle {v!r} (every group serves nolima's default variants: {', '.join(DEFAULT_VARIANTS)})"
                    for v in DEFAULT_VARIANTS if v not in needles and needles]
        if "keyword" not in raw:
            reasons.append("missing field 'keyword' (the absence check looks for it in the corpus)")
        texts = [("the question", group.get("question")), ("the character", group.get("character")),
                 ("the keyword", group.get("keyword")), *((f"the {v} needle", needles.get(v)) for v in NEEDLE_VARIANTS)]
        reasons += [f"{what} holds a line break: a drafted text is one line (a needle one sentence; the judge is shown each "
                    "on one line, so a line break could speak to it)" for what, text in texts
                    if isinstance(text, str) and _LINE_BREAK.search(text)]
        taken = sorted(n for n in _name_keys(group) if n in kept_names)
        if taken:
            reasons.append(f"character {taken[0]!r} is already used by group {kept_names[taken[0]]}")
        return group, list(dict.fromkeys(reasons))

    def _measure(self, needle_set: NeedleSet, theme: int) -> tuple[dict[str, dict], dict[str, list[str]]]:
        """Checks 2-4 on valid groups: per group id, the values of each needle (and of its question's
        absence check), and the reasons it fails."""
        config = self.config
        rows = pair_rows(needle_set)
        with step(f"checking {len(needle_set.groups)} drafts of theme {theme}", self.progress):
            absence = answer_absence(needle_set, self.chunks, self.model, top=config.absence_top_k, index=DEFAULT_INDEX)
            member = theme_membership(config.themes, rows[["group_id", "variant", "needle"]], cluster=theme,
                                      threshold=config.threshold, min_outside_percentile=config.min_outside_percentile,
                                      cache_dir=self.cache_dir)
            similarity = needle_question_similarity(needle_set, [self.nq_model])
        values: dict[str, dict] = {g.id: {"absence": {}, "needles": {}} for g in needle_set.groups}
        reasons: dict[str, list[str]] = {g.id: [] for g in needle_set.groups}
        asked = absence["question"].map(question_key)
        for group in needle_set.groups:  # each group on its own: its question's rows, its keyword, its names
            values[group.id]["absence"], reasons[group.id] = self._absence(group, absence[asked == question_key(group.question)])
        for row, nq, shared in zip(member.itertuples(index=False), similarity[self.nq_model.name], rows["shared_words"], strict=True):
            record = {"shared_words": [w for w in shared.split(";") if w], "predicted_cluster": int(row.predicted_cluster),
                      "target_probability": _finite(row.target_probability), "outside_percentile": _finite(row.outside_percentile),
                      "blends_in": bool(row.blends_in), "nq_similarity": {self.nq_model.name: _finite(nq)}}
            values[row.group_id]["needles"][row.variant] = record
            if not row.blends_in:
                reasons[row.group_id].append(
                    f"{row.variant} needle does not blend into theme {theme} (probability {row.target_probability:.2f}, outside "
                    f"percentile {row.outside_percentile:.0f}; needs > {config.threshold:g} and >= {config.min_outside_percentile:g})")
            if config.nq_band is not None and row.variant in NO_OVERLAP_VARIANTS and not config.nq_band[0] <= nq <= config.nq_band[1]:
                reasons[row.group_id].append(f"{row.variant} needle's needle-question similarity {nq:.3f} is outside "
                                             f"[{config.nq_band[0]:g}, {config.nq_band[1]:g}]")
        return values, reasons

    def _absence(self, group: NeedleGroup, top: pd.DataFrame) -> tuple[dict, list[str]]:
        """Check 2 for one group, given its question's top-k rows: its keyword and each of its
        character names searched as whole words in the whole corpus. Returns the group's absence
        record and one reason per term some chunk holds, naming the best-ranked such chunk of the
        top k, else the corpus's first."""
        k = self.config.absence_top_k
        ranked = list(zip(top["rank"].astype(int), top["chunk_id"].astype(str), strict=True))
        terms = [("its keyword", group.keyword)] * bool(group.keyword) + [("its character name", n) for n in group.characters]
        held, reasons = {}, []
        for what, term in terms:
            holding = self.corpus.holding(term)
            if not holding:
                continue
            held[term] = {self.chunks[i].id for i in holding}
            inside = [(rank, chunk) for rank, chunk in ranked if chunk in held[term]]
            where = (f"chunk {inside[0][1]} (rank {inside[0][0]} of the question's top {k}) holds {what} {term!r}" if inside else
                     f"chunk {self.chunks[holding[0]].id} holds {what} {term!r} (outside the question's top {k}: "
                     f"{len(holding)} of the corpus's {len(self.corpus)} chunks hold it)")
            reasons.append(f"the corpus may already answer it: {where}")
        record = {"top_similarity": _finite(top["similarity"].max()),
                  "flagged_chunks": [chunk for _, chunk in ranked if any(chunk in ids for ids in held.values())],
                  "corpus_chunks": {term: len(ids) for term, ids in held.items()}}
        return record, reasons

    def _duplicates(self, needle_set: NeedleSet, accepted: list[dict], values: dict, reasons_of: dict) -> dict[str, list[str]]:
        """Check 5, group by group in draft order: a needle whose cosine to a needle of an accepted
        group (before, or earlier in this draft and passing checks 1-4) reaches ``duplicate_cosine``,
        or a question such a group asks (the same words, :func:`~embedeval.text.words`). Records each
        needle's nearest accepted needle (``nearest_accepted``, ``nearest_cosine``)."""
        found: dict[str, list[str]] = {g.id: [] for g in needle_set.groups}
        asked = {tuple(words(raw_questions(g).get("question", ""))): g["id"] for g in accepted}
        labels = [(g["id"], v) for g in accepted for v in g["needles"]]
        texts = [anonymous(text, g) for g in accepted for text in g["needles"].values()]
        reference = self.model.embed(texts, kind="document") if texts else None
        for group in needle_set.groups:
            variants = list(group.needles)
            raw = {"character": group.character, "character_set": list(group.character_set)}
            question = tuple(words(group.question))
            if question in asked:
                found[group.id].append(f"asks the question of group {asked[question]}: two groups asking one question are duplicates")
            vectors = self.model.embed([anonymous(group.needles[v], raw) for v in variants], kind="document")
            if reference is not None:
                cosines, rows = nearest_cosines(vectors, reference, 1)
                for variant, cosine, row in zip(variants, cosines[:, 0], rows[:, 0], strict=True):
                    other_id, other_variant = labels[row]
                    values[group.id]["needles"][variant].update(nearest_accepted=f"{other_id}:{other_variant}", nearest_cosine=_finite(cosine))
                    if cosine >= self.config.duplicate_cosine:
                        found[group.id].append(f"{variant} needle is a near-duplicate of group {other_id}'s {other_variant} needle "
                                               f"(cosine {cosine:.3f} >= {self.config.duplicate_cosine:g})")
            if not reasons_of[group.id] and not found[group.id]:  # accepted: later drafts must not repeat it
                asked[question] = group.id
                labels += [(group.id, v) for v in variants]
                reference = vectors if reference is None else np.concatenate([reference, vectors])
        return found


def _finite(value) -> float | None:
    """A measured value as the needle set records it: a float, or None (JSON null) for a value that
    is missing or not finite, never a bare NaN or Infinity (which is no JSON)."""
    value = float(value)
    return value if np.isfinite(value) else None

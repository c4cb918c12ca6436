"""A draft on disk: the needle set with its provenance (:func:`new_draft`), its rejected table
(``NAME.rejected.csv`` beside it, :func:`rejected_path_of`), both written after every request
(:func:`save_draft`), and an earlier draft resumed when it came from the same themes, chat model,
judge and check settings (:func:`open_draft`)."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pandas as pd

from embedeval.errors import EmbedevalError, InputError
from embedeval.experiments.drafting.config import DraftConfig
from embedeval.experiments.drafting.prompts import json_or_kind
from embedeval.experiments.judging import JUDGE_TEMPERATURE
from embedeval.experiments.themes.files import MANIFEST
from embedeval.experiments.themes.loading import themes_key
from embedeval.io import Force, atomic_path, check_output_file, json_text, read_json, write_text_atomic, written_by_embedeval
from embedeval.llm import chat_spec_difference
from embedeval.messages import note
from embedeval.needles import parse_needle_set
from embedeval.ownership import file_sha256

#: ``provenance.tool`` of a needle set this module wrote: only such a file is resumed (or replaced).
DRAFT_TOOL = "embedeval needles draft"
#: The columns of the rejected table.
REJECTED_COLUMNS = ["theme", "attempt", "group_id", "question", "character", "keyword", "needles", "reason", "prompt_sha256",
                    "answer"]
#: How the rejected table's reason of an answer not checked to the end begins (the draft was stopped,
#: failed or was killed while checking it: :func:`is_unchecked`): a rerun checks it first, without
#: asking for it again, as :data:`RECHECKED` ends the reason.
UNCHECKED = "not checked to the end"
RECHECKED = " (a rerun checks it first, without asking again)"
#: What the description of a needle set drafted without a judge says.
NOT_JUDGED = ("No check tested whether a needle answers its question: no judge was asked (needles draft --judge asks a "
              "chat model, per one-hop and inverted needle).")


def rejected_path_of(out: str | Path) -> Path:
    """Where the rejected drafts of the needle set ``out`` go: ``NAME.rejected.csv`` beside it."""
    out = Path(out)
    return out.with_name(f"{out.stem}.rejected.csv")


def new_draft(config: DraftConfig, chat_model: str, embedder: str, judge: str | None = None) -> dict:
    """An empty draft needle set with its provenance; ``judge``: the judge's chat spec, or None
    (the description then says that no check tested whether a needle answers its question)."""
    folder = Path(config.themes)
    judged = (f", the judge {judge}'s included: it said each one-hop and inverted needle lets a careful reader answer its "
              "question." if judge else f". {NOT_JUDGED}")
    return {"name": f"draft-{folder.resolve().name}",
            "description": f"Needles drafted by {chat_model} for the themes of {folder}; each kept only when every check passed "
                           f"(embedeval needles draft){judged}",
            "provenance": {"tool": DRAFT_TOOL, "chat_model": chat_model, "temperature": config.temperature,
                           "themes_run": str(folder), "themes_sha256": file_sha256(folder / MANIFEST), "themes_key": themes_key(folder),
                           "embedder": embedder, "nq_embedder": config.embedder or embedder, "checks": config.check_rules(),
                           "judge": None if judge is None else {"chat_model": judge, "temperature": JUDGE_TEMPERATURE, "verdicts": []},
                           "usage": {who: no_usage() for who in ("chat", "judge")},
                           "theme_prompts": {}, "prompts": {}},
            "groups": []}


def no_usage() -> dict:
    return {"requests": 0, "tokens_sent": 0, "tokens_received": 0}


def usage_of(record) -> dict:
    """A provenance's usage record as counted so far (a count edited into something else: 0)."""
    record = record if isinstance(record, dict) else {}
    return {k: v if isinstance(v := record.get(k), int) and not isinstance(v, bool) else 0 for k in no_usage()}


def open_draft(config: DraftConfig, chat_model: str, embedder: str, judge: str | None = None,
               force: Force | bool = False) -> tuple[dict, pd.DataFrame]:
    """The draft to continue and its rejected table: a new one when ``config.out`` does not exist,
    else the one there, if an earlier draft from the same themes (:func:`~embedeval.experiments.themes.loading.themes_key`)
    with the same chat model and judge wrote it. Any other file there, or a draft edited by hand
    into one that cannot be resumed, is refused with one line (it is never overwritten), unless
    ``force`` (``embedeval --force``) lets a new draft replace it."""
    out = check_output_file(config.out, (".json",), force)
    rejected_path = check_output_file(rejected_path_of(out), (".csv",), force)
    fresh = new_draft(config, chat_model, embedder, judge)
    rejected = _read_rejected(rejected_path, force)
    if not out.exists():
        return fresh, rejected
    try:
        data = read_json(out)
    except InputError:
        if not force:
            raise
        data = None  # --force: a file that is not even JSON is replaced too
    provenance = data.get("provenance") if isinstance(data, dict) else None
    if not isinstance(provenance, dict) or provenance.get("tool") != DRAFT_TOOL or not isinstance(data.get("groups"), list):
        if force:  # --force: replaced by a new draft, as the note of check_output_file said (or this one)
            if written_by_embedeval(out):  # another command's output: no note was given for it yet
                note(f"replacing {out}, which is no needle draft (--force)")
            return fresh, rejected
        raise InputError(f"{out} exists and is not a needle draft of embedeval: it is never overwritten; choose another output")
    _check_draft_file(data, out)
    then, now = fresh["provenance"], provenance
    if now.get("chat_model") != then["chat_model"]:
        raise InputError(f"{out} was drafted with another chat model: {chat_spec_difference(str(now.get('chat_model')), then['chat_model'])}; "
                         f"to resume, draft with `llm` {now.get('chat_model')!r}, or choose another output", "llm")
    was = (now.get("judge") or {}).get("chat_model")
    if was != judge:
        said = (chat_spec_difference(str(was), judge) if was and judge else
                f"it was {'judged by ' + repr(was) if was else 'drafted without a judge'}, now {'with ' + repr(judge) if judge else 'without one'}")
        raise InputError(f"{out} was drafted with another judge: {said}; to resume, draft "
                         f"{'with `judge` ' + repr(was) if was else 'without `judge`'}, or choose another output", "judge")
    themes = "themes_key" if "themes_key" in now else "themes_sha256"  # a draft written before the key: its themes.json's sha256
    for key, what in ((themes, "another themes run"), ("checks", "other check settings"),
                      ("nq_embedder", "another needle-question embedder")):
        if now.get(key) != then[key]:
            raise InputError(f"{out} was drafted with {what} ({key} {now.get(key)!r}, now {then[key]!r}); to resume, draft with "
                             "the same, or choose another output")
    now["themes_key"] = then["themes_key"]
    now.setdefault("usage", then["usage"])
    return data, rejected


def _check_draft_file(data: dict, out: Path) -> None:
    """One line for a draft that cannot be resumed as it is (edited by hand): groups that are no
    valid needle set (no ``id``, needles that are a list, a group that is a string), or a
    provenance without its prompts, theme prompts, usage or judge's verdicts."""
    provenance = data["provenance"]
    fix = "(a draft edited by hand?): it is never overwritten; mend it, or choose another output"
    for key, kind in (("prompts", dict), ("theme_prompts", dict), ("usage", dict)):
        if key in provenance or key != "usage":
            if not isinstance(provenance.get(key), kind):
                raise InputError(f"{out}: its provenance has no {key!r} object {fix}")
    judge = provenance.get("judge")
    if judge is not None and not (isinstance(judge, dict) and isinstance(judge.get("verdicts"), list)):
        raise InputError(f"{out}: its provenance's 'judge' is not an object with a list of 'verdicts' {fix}")
    if data["groups"]:
        try:
            parse_needle_set(data, str(out))
        except EmbedevalError as exc:
            raise InputError(f"{exc} {fix}") from None


def _read_rejected(path: Path, force: Force | bool = False) -> pd.DataFrame:
    """The rejected table an earlier draft wrote at ``path`` (empty if there is none); a file there
    that is not one (other columns), or one whose ``theme`` or ``attempt`` is not a whole number
    (edited by hand), is refused with one line, never overwritten (``force``: a file that is no such
    table is replaced)."""
    if not path.exists():
        return pd.DataFrame(columns=REJECTED_COLUMNS)
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False)
    except Exception:  # pandas raises many types for a file that is not a table
        table = None
    if table is None or list(table.columns) != REJECTED_COLUMNS:
        if force:  # --force: a file embedeval did not write is replaced, as its note said
            return pd.DataFrame(columns=REJECTED_COLUMNS)
        raise InputError(f"{path} exists and is not a rejected-drafts table of embedeval: it is never overwritten; "
                         "move it or choose another output")
    for column in ("theme", "attempt"):
        bad = table.index[~table[column].str.fullmatch(r"-?[0-9]+")]
        if len(bad):
            raise InputError(f"{path}: row {bad[0] + 1}: {column} {table[column].iloc[bad[0]]!r} is not a whole number (a table "
                             "edited by hand?): it is never overwritten; mend it, or move it away")
    return table.astype({"theme": int, "attempt": int})


def is_unchecked(row: dict) -> bool:
    """Whether a rejected row holds an answer not checked to the end (:data:`UNCHECKED`)."""
    return str(row["reason"]).startswith(UNCHECKED) and bool(row["answer"])


def rejected_row(theme: int, attempt: int, raw, reason: str, prompt_sha: str, answer: str = "") -> dict:
    group = raw if isinstance(raw, dict) else {}
    texts = {k: group.get(k) for k in ("id", "question", "character", "keyword")}
    return {"theme": theme, "attempt": attempt, "group_id": texts["id"] or "", "question": texts["question"] or "",
            "character": texts["character"] or "", "keyword": texts["keyword"] or "",
            "needles": json_or_kind(group["needles"]) if "needles" in group else "",
            "reason": reason, "prompt_sha256": prompt_sha, "answer": answer}


def save_draft(data: dict, rejected: pd.DataFrame, out: Path) -> None:
    """Write the rejected table (every field quoted, so that any text round-trips: CR, LF, quotes,
    NUL; on the disk, fsync'd, before it replaces the last one: it holds the paid answers not yet
    checked), then the needle set (checked to load as one first), atomically."""
    with atomic_path(rejected_path_of(out)) as tmp:
        rejected.to_csv(tmp, index=False, quoting=csv.QUOTE_ALL)
        with open(tmp, "rb") as written:
            os.fsync(written.fileno())
    if data["groups"]:
        parse_needle_set(data, str(out))
        write_text_atomic(out, json_text(data, 1, ensure_ascii=False) + "\n")

"""The judge's verdict cache of `needles draft --judge`: only what embedeval keeps in
`<cache>/verdicts/` is read as a verdict. A damaged or foreign file there (a text that is no
string, a kind that is not 'text', a named pipe, a link to /dev/zero, a 2 GB file, a folder) was a
traceback, a MemoryError, a hang, an abort after the judge was paid, or a good group rejected
without asking; now it is one note line naming it, left as it is, and the judge is asked again. A
verdict that cannot be kept is used for the run all the same. The chat models are scripted
servers on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from embedeval.bounds import GIB, MAX_VERDICT_BYTES
from embedeval.errors import InputError
from embedeval.experiments.judging import judge_prompt, kept_answer_path, read_kept_verdict
from embedeval.io import text_sha256
from embedeval.needles import load_needle_set

from test_draft import GOOD, chat, draft, theme_of, themes_run  # noqa: F401
from test_draft_guards import ANSWERS, judged_by

#: The judge's chat spec, as the kept verdicts are keyed (``--judge judge-model`` with the fake server's key).
JUDGE = "openai:judge-model"
#: A verdict as embedeval keeps it.
KEPT = {"text": json.dumps(ANSWERS), "kind": "text", "finish_reason": "stop"}


def verdict_path(variant: str) -> Path:
    """Where the judge's verdict on GOOD's ``variant`` needle is kept (the test's own cache folder)."""
    prompt = judge_prompt(GOOD["question"], GOOD["needles"][variant], GOOD["character"])
    return kept_answer_path(None, JUDGE, text_sha256(prompt))


def sparse(path: Path) -> None:
    with open(path, "wb") as handle:
        handle.truncate(2 * GIB)  # 2 GB that take no disk


#: A damaged or foreign thing at a verdict's path: (make it, what the note says it is).
DAMAGED = {
    "text not a string": (lambda p: p.write_text('{"text": 123, "kind": "text", "finish_reason": null}'),
                          "its text is a number, not a string"),
    "kind not text": (lambda p: p.write_text(json.dumps({**KEPT, "kind": 5})), "its kind is a number, not 'text'"),
    "finish_reason a list": (lambda p: p.write_text(json.dumps({**KEPT, "finish_reason": []})),
                             "its finish_reason is a list, not a string or null"),
    "no usable verdict": (lambda p: p.write_text(json.dumps({**KEPT, "text": '{"answers": "yes"}'})),
                          "its text is no usable verdict: the answer is not a JSON object"),
    "not JSON": (lambda p: p.write_text('{"text": '), "it is not JSON: "),
    "not UTF-8": (lambda p: p.write_bytes(b'{"text": "\xff"}'), "it is not UTF-8"),
    "a named pipe": (os.mkfifo, "a named pipe, not a file"),
    "a link to /dev/zero": (lambda p: p.symlink_to("/dev/zero"), "a symbolic link, not a file"),
    "a 2 GB file": (sparse, f"2,147,483,648 bytes, past the {MAX_VERDICT_BYTES:,} it may hold"),
    "a folder": (Path.mkdir, "a folder, not a file"),
}


def snapshot(path: Path):
    """What is at ``path``, to tell that it was left as it is."""
    info = os.lstat(path)
    if path.is_symlink():
        return "link", os.readlink(path)
    if path.is_dir():
        return "folder", sorted(os.listdir(path))
    if path.is_fifo():
        return "fifo", info.st_ino
    with open(path, "rb") as handle:
        return "file", info.st_size, info.st_mtime_ns, handle.read(4096)


# ---- read_kept_verdict: fast, no draft


def test_a_kept_verdict_is_read_and_nothing_there_is_none(tmp_path):
    path = tmp_path / "v.json"
    assert read_kept_verdict(path) is None
    path.write_text(json.dumps(KEPT))
    reply = read_kept_verdict(path)
    assert (reply.text, reply.kind, reply.finish_reason) == (KEPT["text"], "text", "stop")


@pytest.mark.parametrize("case", DAMAGED)
def test_anything_else_at_a_verdicts_path_is_one_error_saying_what_it_is(case, tmp_path):
    make, says = DAMAGED[case]
    path = tmp_path / "v.json"
    make(path)
    before = snapshot(path)
    with pytest.raises(InputError) as raised:
        read_kept_verdict(path)  # a pipe: no wait for a writer; /dev/zero, 2 GB: nothing read past the bound
    assert str(raised.value).startswith(says), str(raised.value)
    assert snapshot(path) == before


def test_a_verdicts_folder_that_is_a_file_is_unreadable_not_missing(tmp_path):
    (tmp_path / "verdicts").write_text("mine")
    with pytest.raises(InputError, match="it cannot be read: Not a directory"):
        read_kept_verdict(tmp_path / "verdicts" / "v.json")


# ---- in a draft


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """One cache folder for this module's drafts: the themes run's chunks are embedded once."""
    return tmp_path_factory.mktemp("verdict-cache")


@pytest.fixture
def cache(shared_cache, monkeypatch):
    """The shared cache folder, without the verdicts an earlier test kept."""
    monkeypatch.setenv("EMBEDEVAL_CACHE", str(shared_cache))
    verdicts = verdict_path("onehop").parent
    if verdicts.is_symlink():
        verdicts.unlink()
    shutil.rmtree(verdicts, ignore_errors=True)
    return shared_cache


def judged_draft(themes_run, tmp_path):  # noqa: F811
    out = tmp_path / "n.json"
    cooking = theme_of(themes_run, "cooking")
    return out, draft(themes_run, out, "--themes-ids", str(cooking), "--per-theme", "1", "--judge", "judge-model")


def judge_requests(chat, variant: str) -> int:  # noqa: F811
    return sum(r["model"] == "judge-model" and f"Needle: {GOOD['needles'][variant]}" in r["body"]["messages"][0]["content"]
               for r in chat.requests)


def notes(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("note: ")]


@pytest.mark.slow
@pytest.mark.parametrize("case", DAMAGED)
def test_a_damaged_or_foreign_verdict_is_one_note_and_the_judge_is_asked_again(case, themes_run, chat, cache, tmp_path):  # noqa: F811
    """Each was a traceback (text 123: AttributeError; 2 GB, /dev/zero: MemoryError), a hang (a
    pipe), an abort after the judge was paid (a folder) or a good group rejected unasked (kind 5)."""
    chat.script.chat_replies = [json.dumps({"groups": [GOOD]})]
    chat.script.chat_reply_for = judged_by({GOOD["needles"]["onehop"]: ANSWERS, GOOD["needles"]["inverted"]: ANSWERS})
    make, says = DAMAGED[case]
    path = verdict_path("onehop")
    path.parent.mkdir(parents=True)
    make(path)
    before = snapshot(path)

    out, result = judged_draft(themes_run, tmp_path)
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    (note,) = notes(result)
    assert note.startswith(f"note: {path} is no verdict embedeval kept ({says}"), note
    assert note.endswith("): it is left as it is and the judge is asked again; its verdict is used for this run "
                                     "but not kept (move that file away to keep verdicts)")
    assert judge_requests(chat, "onehop") == 1 and judge_requests(chat, "inverted") == 1
    assert [g.character for g in load_needle_set(out).groups] == ["Yuki"]
    assert snapshot(path) == before  # the user's file, left as it is
    assert read_kept_verdict(verdict_path("inverted")).text == json.dumps(ANSWERS)  # the other verdict: kept as ever


@pytest.mark.slow
def test_a_verdict_that_cannot_be_kept_is_used_all_the_same(themes_run, chat, cache, tmp_path):  # noqa: F811
    """The cache's verdicts folder a link to a folder no one may write to: the paid verdicts are
    used (one note each), the draft ends as ever, and a rerun would ask again."""
    chat.script.chat_replies = [json.dumps({"groups": [GOOD]})]
    chat.script.chat_reply_for = judged_by({GOOD["needles"]["onehop"]: ANSWERS, GOOD["needles"]["inverted"]: ANSWERS})
    folder = verdict_path("onehop").parent
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.symlink_to("/sys")  # creating a file under /sys fails (EACCES) everywhere, root included

    out, result = judged_draft(themes_run, tmp_path)
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert notes(result) == [f"note: the judge's verdict is used for this run but not kept in {verdict_path(v)} (cannot write "
                             f"{verdict_path(v)} (Permission denied)); a rerun asks the judge again" for v in ("onehop", "inverted")]
    assert judge_requests(chat, "onehop") == 1 and judge_requests(chat, "inverted") == 1
    assert [g.character for g in load_needle_set(out).groups] == ["Yuki"]

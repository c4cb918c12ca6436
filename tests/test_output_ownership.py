"""Issue 45 §3: a file the user owns is never replaced on a guess. An existing output file is
replaced only when embedeval wrote it (its marker ``.NAME.embedeval`` holds the file's sha256),
never because its keys or header look like embedeval's; ``embedeval --force`` replaces any file,
said in one note; temporary files of killed writes beside an output are swept."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from embedeval.cli import app

NOLIMA = [
    {"id": "0101", "category": "place", "needle": "Actually, {CHAR} lives next to the {1}.",
     "questions": {"onehop": "Which character has been to {2}?"},
     "character_set": ["Yuki", "Stuart"],
     "tests": {"T01": {"input_args": ["Kiasma museum", "Helsinki"]}}},
]
#: A hand-written needle set with the keys a converted set always has.
MINE = '{"name": "my set", "source": "my notes", "groups": []}\n'


@pytest.fixture
def nolima(tmp_path):
    path = tmp_path / "nolima.json"
    path.write_text(json.dumps(NOLIMA), encoding="utf-8")
    return path


def convert(nolima, out, *options):
    result = CliRunner().invoke(app, [*options, "needles", "convert", str(nolima), "--out", str(out)])
    return result, [line for line in result.output.splitlines() if line.strip()]


def test_a_hand_written_needle_set_with_the_converted_keys_is_not_overwritten(nolima, tmp_path):
    mine = tmp_path / "mine.json"
    mine.write_text(MINE)
    result, lines = convert(nolima, mine)
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0].startswith(f"error: output {mine} exists and is not a file embedeval wrote"), lines[0]
    assert "--force" in lines[0] and mine.read_text() == MINE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.json", "nolima.json"]


def test_a_file_embedeval_wrote_is_replaced_and_one_the_user_edited_is_not(nolima, tmp_path):
    out = tmp_path / "ours.json"
    for _ in range(2):
        result, _lines = convert(nolima, out)
        assert result.exit_code == 0, result.output
    marker = tmp_path / ".ours.json.embedeval"
    assert marker.is_file() and json.loads(out.read_text())["source"]["format"] == "nolima"
    edited = out.read_text().replace("my", "our") + " "
    out.write_text(edited)  # the user's now
    result, lines = convert(nolima, out)
    assert result.exit_code == 1 and len(lines) == 1 and "is not a file embedeval wrote" in lines[0], result.output
    assert out.read_text() == edited


def test_force_replaces_a_users_file_with_one_note(nolima, tmp_path):
    mine = tmp_path / "mine.json"
    mine.write_text(MINE)
    result, lines = convert(nolima, mine, "--force")
    assert result.exit_code == 0, result.output
    assert [line for line in lines if line.startswith("note:")] == [
        f"note: replacing {mine}, which embedeval did not write (--force)"], result.output
    assert json.loads(mine.read_text())["source"]["format"] == "nolima"
    result, lines = convert(nolima, mine)  # embedeval's now: replaced without --force, and no note
    assert result.exit_code == 0 and not any(line.startswith("note:") for line in lines), result.output


def test_stale_temporary_files_of_dead_processes_are_swept_on_the_next_write(nolima, tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    pid = int(dead.stdout)  # a process that has ended
    stale = tmp_path / f".ours.json.embedeval-{pid}-abcd1234.tmp"
    live = tmp_path / f".ours.json.embedeval-{os.getpid()}-efgh5678.tmp"
    other = tmp_path / f".other.json.embedeval-{pid}-abcd1234.tmp"  # another target's: not this write's to sweep
    users = tmp_path / f".ours.json.embedeval-{pid}-notes.tmp"  # a name embedeval never makes
    for path in (stale, live, other, users):
        path.write_text("x" * 100)
    result, _lines = convert(nolima, tmp_path / "ours.json")
    assert result.exit_code == 0, result.output
    assert not stale.exists() and live.exists() and other.exists() and users.exists()

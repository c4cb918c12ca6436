"""A file the user owns is never replaced on a guess. An existing output file is
replaced only when embedeval wrote it (its record in the cache folder holds the file's sha256),
never because its keys or header look like embedeval's; ``embedeval --force`` replaces any file,
said in one note; temporary files of killed writes beside an output are swept. the record
is kept in the cache folder, not beside the file, so the user's folder (and ``git status``) holds
only the files asked for; a marker an earlier version left beside a file still counts, and goes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.ownership import RECORDS, file_sha256, legacy_marker, output_key, record_path

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
    assert json.loads(out.read_text())["source"]["format"] == "nolima"
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


def test_the_record_is_kept_in_the_cache_folder_and_the_users_folder_holds_only_the_file(nolima, tmp_path, isolated_cache):
    out = tmp_path / "ours.json"
    result, _lines = convert(nolima, out)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nolima.json", "ours.json"]  # no hidden file beside it
    record = record_path(out)
    assert record.parent == isolated_cache / RECORDS
    assert json.loads(record.read_text()) == {"path": output_key(out), "sha256": file_sha256(out)}


def test_a_copy_of_a_file_embedeval_wrote_is_not_its_elsewhere(nolima, tmp_path):
    """The record names the path: the same bytes at another path are the user's."""
    ours = tmp_path / "ours.json"
    assert convert(nolima, ours)[0].exit_code == 0
    copy = tmp_path / "copy.json"
    copy.write_bytes(ours.read_bytes())
    result, lines = convert(nolima, copy)
    assert result.exit_code == 1 and len(lines) == 1 and "is not a file embedeval wrote" in lines[0], result.output


def test_a_marker_an_earlier_version_left_still_counts_and_goes_when_the_file_is_written_again(nolima, tmp_path):
    out = tmp_path / "ours.json"
    out.write_text(MINE)
    marker = legacy_marker(out)
    assert marker.name == ".ours.json.embedeval"
    marker.write_text(file_sha256(out) + "\n")  # as earlier versions wrote it
    result, lines = convert(nolima, out)
    assert result.exit_code == 0 and not any(line.startswith("note:") for line in lines), result.output
    assert json.loads(out.read_text())["source"]["format"] == "nolima"
    assert not marker.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["nolima.json", "ours.json"]
    stale = legacy_marker(tmp_path / "mine.json")  # a marker of other bytes proves nothing
    (tmp_path / "mine.json").write_text(MINE)
    stale.write_text("0" * 64 + "\n")
    result, lines = convert(nolima, tmp_path / "mine.json")
    assert result.exit_code == 1 and "is not a file embedeval wrote" in lines[0] and stale.exists(), result.output


def test_git_status_shows_only_the_files_asked_for(nolima, tmp_path):
    """A user's repository after commands that write one output file each: only those files are new."""
    repo = tmp_path / "work"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for name in ("a.json", "b.json", "a.json"):  # written, another written, the first written again
        result, _lines = convert(nolima, repo / name)
        assert result.exit_code == 0, result.output
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--ignored"], cwd=repo,
                            capture_output=True, text=True, check=True).stdout
    assert sorted(status.splitlines()) == ["?? a.json", "?? b.json"], status


def test_a_record_that_is_a_pipe_a_link_or_huge_proves_nothing_and_is_read_without_waiting(nolima, tmp_path):
    """The record is opened without following a link or waiting for a writer, and read only so
    far: a pipe there (a read would wait forever), a link (to /dev/zero, a read would fill the
    memory) or a huge file is no record, and the file is refused at once."""
    import signal

    from embedeval.ownership import written_by_embedeval

    out = tmp_path / "ours.json"
    assert convert(nolima, out)[0].exit_code == 0
    record = record_path(out)
    good = record.read_text()
    elsewhere = tmp_path / "record.json"
    elsewhere.write_text(good)

    def late(*_args):
        raise TimeoutError("the record was read as a pipe: it waits for a writer")

    previous = signal.signal(signal.SIGALRM, late)
    signal.alarm(10)
    try:
        record.unlink()
        os.mkfifo(record)
        assert not written_by_embedeval(out)
        record.unlink()
        record.symlink_to(elsewhere)  # the same text, through a link: not followed
        assert not written_by_embedeval(out)
        record.unlink()
        record.write_text(good.rstrip("\n") + " " * (1 << 20) + "\n")  # valid JSON, but no record is a MiB
        assert not written_by_embedeval(out)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    record.unlink()
    record.write_text(good)
    assert written_by_embedeval(out)


def test_an_existing_file_whose_name_is_too_long_for_a_marker_is_one_error_line(nolima, tmp_path):
    """``.NAME.embedeval`` is longer than the file system allows: the check of a marker must not
    raise (it was a traceback); the file is refused as any other of the user's, untouched."""
    mine = tmp_path / ("x" * 245 + ".json")
    mine.write_text(MINE)
    result, lines = convert(nolima, mine)
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: "), (result.output, result.exception)
    assert mine.read_text() == MINE


def test_an_output_below_a_link_to_nothing_is_refused_before_any_work(nolima, tmp_path):
    """Its folders cannot be made (the link is there): this was found only when writing, after the
    work ("cannot write ... (File exists)"); now the check of the output refuses it."""
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    result, lines = convert(nolima, tmp_path / "gone" / "sub" / "out.json")
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0] == f"error: output {tmp_path / 'gone' / 'sub' / 'out.json'} cannot be created: {tmp_path / 'gone'} is a link to nothing"
    assert (tmp_path / "gone").is_symlink() and not (tmp_path / "nowhere").exists()

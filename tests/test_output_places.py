"""Audit finding 6: a file a run writes whose place in its folder is taken by a folder or a
link was refused only when the run came to write it, after the sweep had rewritten the tables
before it and removed config.json (a finished run left unfinished). Every output of ``nolima``,
``report``, ``themes`` and ``export --format mteb`` is now checked before any work: one ``error:``
line naming it, and the folder as it was."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.derived import RECORD
from embedeval.experiments.themes.files import MANIFEST, THEMES_FILES
from embedeval.report.write import REPORT_FILES
from embedeval.run import RUN_FILES, is_run_directory

WORDS = "the walls hung called across children toward under skies ran stone lanterns while gulls past".split()


def _snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder``: a link's target, "dir", or a file's sha256 and modification
    time (a file written again with the same bytes is written too)."""
    return {str(p.relative_to(folder)): (f"link to {os.readlink(p)}" if p.is_symlink() else "dir" if p.is_dir()
                                         else f"{hashlib.sha256(p.read_bytes()).hexdigest()} {p.stat().st_mtime_ns}")
            for p in sorted(folder.rglob("*"))}


def _sweep(folder: Path, out: Path):
    return CliRunner().invoke(app, ["nolima", "-q", "-e", "bm25", "--corpus", f"jsonl:{folder / 'corpus.jsonl'}", "--needles",
                                    str(folder / "needles.json"), "--lengths", "64,128", "--depths", "2", "--out", str(out)])


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A folder holding the inputs of a small bm25 sweep, its finished run ``run`` and that run's
    MTEB export ``mteb``."""
    folder = tmp_path_factory.mktemp("finished")
    lines = []
    for book in range(10):
        words = [WORDS[(book * 7 + i * 3 + i // 5) % len(WORDS)] for i in range(40 * 11)]
        lines.append(json.dumps({"id": f"book-{book}", "text": " ".join(" ".join(words[i:i + 11]).capitalize() + "."
                                                                       for i in range(0, len(words), 11))}))
    (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    shipped = json.loads((Path(__file__).parent.parent / "queries" / "nolima-onehop.json").read_text())
    (folder / "needles.json").write_text(json.dumps({**shipped, "groups": shipped["groups"][:2]}))
    result = _sweep(folder, folder / "run")
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["export", str(folder / "run"), "--format", "mteb", "--out", str(folder / "mteb")])
    assert result.exit_code == 0, result.output
    return folder


def _plant(path: Path, how: str, elsewhere: Path) -> None:
    """Put a folder, or a link to ``elsewhere``, where ``path`` was."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    if how == "folder":
        path.mkdir()
        (path / "mine.txt").write_text("the user's")
    else:
        path.symlink_to(elsewhere)


def _taken_message(path: Path, how: str) -> str:
    kind = "a folder" if how == "folder" else "a link"
    return f"error: output {path} is {kind}; embedeval writes no file over or through it: remove it (nothing was written)\n"


@pytest.mark.parametrize("how", ["folder", "link"])
@pytest.mark.parametrize("name", [*RUN_FILES, RECORD, *REPORT_FILES])
def test_a_run_output_taken_by_a_folder_or_link_is_refused_before_the_sweep(finished, tmp_path, name, how):
    run = tmp_path / "run"
    shutil.copytree(finished / "run", run, symlinks=True)
    original = (run / name).read_bytes()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "theirs.txt").write_text("not embedeval's")
    _plant(run / name, how, tmp_path / "elsewhere")
    before = _snapshot(tmp_path)
    result = _sweep(finished, run)
    assert result.exit_code == 1 and result.output == _taken_message(run / name, how), result.output
    assert _snapshot(tmp_path) == before  # nothing rewritten, nothing written through the link
    if name != "config.json":
        assert is_run_directory(run)  # the finished run stays finished
    _plant(run / name, "folder", tmp_path)  # put the file back: the run reads as it did
    shutil.rmtree(run / name)
    (run / name).write_bytes(original)
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("how", ["folder", "link"])
@pytest.mark.parametrize("name", [*REPORT_FILES, RECORD])
def test_a_report_output_taken_by_a_folder_or_link_is_refused_before_a_figure_is_drawn(finished, tmp_path, name, how):
    """`report RUN` into the run's own folder: on main the figures and report.html were drawn again
    before report.md was found to be a folder."""
    run = tmp_path / "run"
    shutil.copytree(finished / "run", run, symlinks=True)
    (tmp_path / "elsewhere").mkdir()
    _plant(run / name, how, tmp_path / "elsewhere")
    before = _snapshot(tmp_path)
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.exit_code == 1 and result.output == _taken_message(run / name, how), result.output
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("how", ["folder", "link"])
@pytest.mark.parametrize("which", ["result", "meta", "model folder", RECORD])
def test_an_export_output_taken_by_a_folder_or_link_is_refused_before_any_write(finished, tmp_path, which, how):
    out = tmp_path / "mteb"
    shutil.copytree(finished / "mteb", out, symlinks=True)
    model = next(p for p in out.iterdir() if p.is_dir())
    result_file = next(model.glob("*/*.json"))
    if which == "meta":
        result_file = result_file.parent / "model_meta.json"
    (tmp_path / "elsewhere").mkdir()
    target = {"result": result_file, "meta": result_file, "model folder": model, RECORD: out / RECORD}[which]
    _plant(target, "folder" if which == "model folder" and how == "folder" else how, tmp_path / "elsewhere")
    if which == "model folder" and how == "folder":  # a folder in its place is fine: a file there is not
        shutil.rmtree(target)
        target.write_text("the user's")
    before = _snapshot(tmp_path)
    result = CliRunner().invoke(app, ["export", str(finished / "run"), "--format", "mteb", "--out", str(out)])
    lines = result.output.splitlines()
    assert result.exit_code == 1 and len(lines) == 1, result.output
    if which == "model folder":
        assert lines[0].endswith(f"cannot be written: {model} is a link or not a folder; embedeval writes into folders "
                                 "of its own only: remove it (nothing was written)"), lines[0]
    elif which == RECORD:  # without its record (a folder, or a link embedeval does not read) it is no export embedeval wrote
        assert lines[0].startswith(f"error: --out {out} holds files and is not a run folder embedeval wrote"), lines[0]
    else:
        assert result.output == _taken_message(target, how), result.output
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("how", ["folder", "link"])
@pytest.mark.parametrize("name", [name for name in THEMES_FILES if name != MANIFEST])
def test_a_themes_output_taken_by_a_folder_or_link_is_refused_before_the_corpus_is_read(tmp_path, monkeypatch, name, how):
    out = tmp_path / "themes"
    out.mkdir()
    (out / MANIFEST).write_text(json.dumps({"settings": {}, "embedder_fingerprint": "x"}))  # a themes run embedeval wrote
    (out / name).parent.mkdir(exist_ok=True)
    (tmp_path / "elsewhere").mkdir()
    _plant(out / name, how, tmp_path / "elsewhere")
    monkeypatch.chdir(tmp_path)
    before = _snapshot(tmp_path)
    result = CliRunner().invoke(app, ["themes", "--corpus", "dir:no-such-corpus", "--out", "themes"])
    assert result.exit_code == 1 and result.output == _taken_message(Path("themes") / name, how), result.output
    assert _snapshot(tmp_path) == before

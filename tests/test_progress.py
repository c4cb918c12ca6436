"""Progress where stderr is no terminal (a CI log, ``2> file``) is a line per step,
written once when it ends, with no cursor movement and no carriage return; a bar that is kept writes
one line when it closes, one that is cleared writes nothing. In a terminal, today's live tqdm lines
stay. A real command's stderr is read through a pipe and through a pseudo-terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest

from embedeval.progress import bar, bar_options, step

from fakes import write_word_books

DONE = r" \.\.\. done in \d+\.\d s"
WORDS = "harbour lantern meadow orchard bridge river candle window garden market winter morning quiet ancient".split()


@pytest.fixture(scope="module")
def books(tmp_path_factory):
    return write_word_books(tmp_path_factory.mktemp("books"), WORDS, (6, 12), seed=5, n_books=3, n_sentences=40)


def needle_haystack(books, folder) -> list[str]:
    """``embedeval similarity needle-haystack`` of one needle group over ``books``, writing into ``folder``
    (the embedding cache: this test's, through ``EMBEDEVAL_CACHE``)."""
    return [sys.executable, "-c", "from embedeval.cli import main; main()", "similarity", "needle-haystack", "--corpus", f"dir:{books}",
            "--min-books", "3", "--groups", "loc-dresden", "--out", str(folder / "nh.csv")]


def through_a_terminal(args: list[str]) -> str:
    """What ``args`` writes on stderr when stderr is a terminal (a pseudo-terminal 120 columns wide)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=follower)
    os.close(follower)
    shown = b""
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # the command ended: the terminal is closed
            break
        if not data:
            break
        shown += data
    os.close(leader)
    assert process.wait(timeout=600) == 0, shown
    return shown.decode("utf-8")


@pytest.mark.slow
def test_without_a_terminal_each_step_is_one_line_once_and_nothing_is_redrawn(books, tmp_path):
    done = subprocess.run(needle_haystack(books, tmp_path), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "\x1b[" not in done.stderr and "\r" not in done.stderr, repr(done.stderr)
    assert len(lines) == len(set(lines)), lines  # no line twice
    assert " texts to embed, " in lines[0], lines  # what it will embed, said first
    assert re.fullmatch(rf"loading st:all-MiniLM-L6-v2 on cpu{DONE}", lines[1]), lines
    assert all(re.search(rf"{DONE}$", line) for line in lines[1:]), lines  # then finished steps and bars alone


@pytest.mark.slow
def test_in_a_terminal_steps_and_bars_are_drawn_live_as_before(books, tmp_path):
    shown = through_a_terminal(needle_haystack(books, tmp_path))
    # tqdm's step line: drawn when the step starts, drawn over with its time when it ends
    assert re.search(rf"\rloading st:all-MiniLM-L6-v2 on cpu \.\.\.\rloading st:all-MiniLM-L6-v2 on cpu{DONE}\r\n", shown), repr(shown)
    bars = through_a_terminal([sys.executable, "-c", "import time\nfrom embedeval.progress import bar\n"
                               "with bar(total=3, desc='embedding documents (m)', unit='text') as shown:\n"
                               "    for _ in range(3):\n        time.sleep(0.2)\n        shown.update(1)\n"])
    assert re.search(r"\rembedding documents \(m\):\s+0%\|.*\rembedding documents \(m\): 100%\|.*\| 3/3 ", bars), repr(bars)


def test_a_step_without_a_terminal_writes_its_line_when_it_ends_and_nothing_when_it_fails(capsys):
    with step("counting sheep"):
        assert capsys.readouterr().err == ""  # nothing while it runs
    assert re.fullmatch(rf"counting sheep{DONE}\n", capsys.readouterr().err)
    with pytest.raises(ValueError), step("failing"):
        raise ValueError("its error says what went wrong")
    with step("silent", enabled=False):
        pass
    assert capsys.readouterr().err == ""


def test_a_bar_without_a_terminal_writes_one_line_when_it_closes_if_kept_and_shown_long_enough(capsys):
    with bar(total=3, desc="embedding documents (m)", unit="text") as shown:
        shown.update(2)
        shown.set_postfix_str("12 tok/s")
        shown.update(1)
    assert re.fullmatch(rf"embedding documents \(m\): 3 texts{DONE}\n", capsys.readouterr().err)
    assert list(bar(range(4), desc="building haystacks", unit="condition")) == [0, 1, 2, 3]
    assert re.fullmatch(rf"building haystacks: 4 conditions{DONE}\n", capsys.readouterr().err)
    for options in ({"leave": False}, {"enabled": False}, {"delay": 60.0}):  # cleared, --quiet, or too quick to be shown
        with bar(total=2, desc="sending (m)", unit="tok", **options) as shown:
            shown.update(2)
    with pytest.raises(ValueError), bar(total=2, desc="failing", unit="text") as shown:
        shown.update(1)
        raise ValueError("its error says what went wrong")
    assert capsys.readouterr().err == ""
    assert bar_options("UMAP epochs", "epoch")["disable"] is True  # umap-learn's own bar: not shown in a log

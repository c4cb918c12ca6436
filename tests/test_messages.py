"""The library's warnings and notes: warnings and log records for a program, the command line's
``warning:`` / ``note:`` lines once shown on stderr."""

import logging
import warnings

import pytest

from embedeval.messages import LOGGER, EmbedevalWarning, note, say, show_on_stderr, warn


def test_a_program_gets_a_warning_and_a_log_record(caplog):
    caplog.set_level(logging.INFO, logger="embedeval")
    with pytest.warns(EmbedevalWarning, match="^the data is odd$"):
        warn("the data is odd")
    note("the cache was upgraded")
    assert [(record.name, record.levelno, record.getMessage()) for record in caplog.records] == [
        ("embedeval", logging.INFO, "the cache was upgraded")]


def test_a_kept_line_goes_by_its_prefix(caplog):
    caplog.set_level(logging.INFO, logger="embedeval")
    with pytest.warns(EmbedevalWarning, match="^3 haystacks moved$"):
        say("warning: 3 haystacks moved")
    say("note: 2 haystacks merged")
    assert [record.getMessage() for record in caplog.records] == ["2 haystacks merged"]


def test_the_command_line_display_prints_each_line_every_time_and_leaves_other_warnings_alone(monkeypatch, capsys, recwarn):
    monkeypatch.setattr(LOGGER, "handlers", [])
    monkeypatch.setattr(LOGGER, "level", logging.NOTSET)
    show_on_stderr()
    show_on_stderr()  # twice: still one line each
    for _ in range(2):
        warn("the data is odd")
        note("the cache was upgraded")
    assert capsys.readouterr().err.splitlines() == ["warning: the data is odd", "note: the cache was upgraded"] * 2
    warnings.warn("another library's", UserWarning, stacklevel=1)  # passed on to the display it replaced (here pytest's record)
    assert capsys.readouterr().err == "" and [str(w.message) for w in recwarn.list] == ["another library's"]

"""A run's ``strategy`` labels as the tables hold them, and strategies made by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from embedeval.errors import ConfigError, InputError
from embedeval.run import read_run_table
from embedeval.strategies import Strategy, is_written_label, parse_strategies

WRITTEN = ["truncate", "windows-mean", "chunks-max@128", "late-chunking@64", "extend-gp@4096", "rope-ntk@8192+logscale",
           "full-text"]
EDITED = ["chunks-max@0", "chunks-max@-1", "chunks-max@0128", "late-chunking@", "chunks-max@１２８", "extend-gp@1e3",
          "extend-gp@0", "extend-pi@600+logscale+logscale", "truncate ", "@128", "chunks-max", "", "bogus", math.nan, 3, None]


@pytest.mark.parametrize("label", WRITTEN)
def test_a_label_a_family_writes_is_one(label):
    assert is_written_label(label)


@pytest.mark.parametrize("label", EDITED)
def test_a_hand_edited_label_is_none(label):
    assert not is_written_label(label)


@pytest.mark.parametrize("label, shown", [("chunks-max@0", "'chunks-max@0' is not a strategy label"),
                                          ("extend-gp@1e3", "'extend-gp@1e3' is not a strategy label"),
                                          ("truncate ", "'truncate ' is not a strategy label"), ("@128", "'@128' is not a strategy label"),
                                          (None, "an empty cell is not a text")])  # a cell's names are required (TABLE_SCHEMAS)
def test_a_run_table_with_a_hand_edited_label_is_one_line_naming_file_line_and_label(tmp_path, label, shown):
    """`report` crashed half-way on these (ValueError: cannot convert float NaN to integer, 'float' object has
    no attribute 'split'): the table is refused when it is opened, as a damaged number is."""
    path = tmp_path / "metrics.csv"
    pd.DataFrame({"strategy": ["truncate", "chunks-max@128", label], "value": [0.5, 0.6, 0.7]}).to_csv(path, index=False)
    with pytest.raises(InputError) as caught:
        read_run_table(path)
    assert str(caught.value).startswith(f"{path}, line 4, column strategy: {shown}")
    pd.DataFrame({"strategy": ["truncate", "chunks-max@128", "full-text"], "value": [0.5, 0.6, 0.7]}).to_csv(path, index=False)
    assert list(read_run_table(path)["strategy"]) == ["truncate", "chunks-max@128", "full-text"]


def test_a_label_of_a_family_not_registered_now_is_read_as_before(tmp_path):
    """A run made with a user's family (windows-max, mine@128) is reported by a process that has not imported it."""
    path = tmp_path / "metrics.csv"
    labels = ["truncate", "windows-max", "mine@128", "mine@256+logscale"]
    pd.DataFrame({"strategy": labels, "value": [0.5] * 4}).to_csv(path, index=False)
    assert list(read_run_table(path)["strategy"]) == labels
    for odd in ("mine@0", "mine@", "mine @128", "-mine"):
        pd.DataFrame({"strategy": ["truncate", odd], "value": [0.5, 0.6]}).to_csv(path, index=False)
        with pytest.raises(InputError, match="is not a strategy label"):
            read_run_table(path)


@pytest.mark.parametrize("parameters", [
    {"name": "chunks-max", "chunk_tokens": True}, {"name": "chunks-max", "chunk_tokens": 1.5},
    {"name": "chunks-max", "chunk_tokens": math.nan}, {"name": "chunks-max", "chunk_tokens": "128"},
    {"name": "extend-gp", "read_tokens": math.nan}, {"name": "extend-pi", "read_tokens": True},
    {"name": "extend-gp", "read_tokens": "4096"}, {"name": "windows-mean", "overlap": True},
    {"name": "windows-mean", "overlap": 2.5}, {"name": "extend-gp", "read_tokens": 4096, "logscale": 1},
])
def test_a_strategy_made_by_hand_with_a_number_that_is_no_whole_number_is_refused(parameters):
    """Strategy(chunk_tokens=1.5) was taken and labelled chunks-max@1.5 (True: chunks-max@True); "128" was a TypeError."""
    with pytest.raises(ConfigError, match="a strategy's"):
        Strategy(**parameters)


def test_numpy_whole_numbers_are_plain_ones():
    import numpy as np

    strategy = Strategy("chunks-max", chunk_tokens=np.int64(128))
    assert strategy == Strategy("chunks-max", chunk_tokens=128) and type(strategy.chunk_tokens) is int


@pytest.mark.parametrize("settings, says", [
    ({"chunk_tokens": [128.7]}, "chunk sizes must be distinct positive token counts, not [128.7]"),
    ({"chunk_tokens": [True]}, "chunk sizes must be distinct positive token counts, not [True]"),
    ({"chunk_tokens": ["abc"]}, "chunk sizes must be distinct positive token counts, not ['abc']"),
    ({"window_overlap": True}, "window overlap must be a whole number of tokens, not True"),
    ({"late_overlap": math.nan}, "late-chunking overlap must be a whole number of tokens, not nan"),
])
def test_settings_that_are_no_whole_numbers_are_refused_not_truncated(settings, says):
    """parse_strategies read chunk sizes with int(): 128.7 ran as 128, True as 1, "abc" was a ValueError;
    an overlap of NaN or True passed when no strategy read it."""
    with pytest.raises(ConfigError) as caught:
        parse_strategies(["truncate", "chunks-max"], **{"chunk_tokens": [128], **settings})
    assert str(caught.value) == says


@pytest.mark.parametrize("names", [("x@y",), ("",), ("a,b",), ("chunks-max@128",), ("windows max",), ("w+logscale",),
                                   ("dup", "dup"), (), ["windows-max"], "windows-max"])
def test_a_family_whose_names_no_label_or_command_line_can_hold_is_refused(names):
    """register took names with '@' (read as a chunk size: chunks-max@128 was another family's label), ',' (which
    --strategy splits), '' and repeats, and a family with no name at all."""
    from embedeval.strategies.base import FAMILIES, Family, register

    before = list(FAMILIES)
    family = type("Odd", (Family,), {"names": names})
    with pytest.raises(ValueError, match="names"):
        register(family)
    assert FAMILIES == before


def test_a_family_registered_twice_or_under_a_taken_name_is_refused_and_not_a_family_at_all():
    from embedeval.strategies.base import FAMILIES, Family, register

    before = list(FAMILIES)
    with pytest.raises(ValueError, match=r"strategy names registered twice: \['truncate'\]"):
        register(type("Mine", (Family,), {"names": ("truncate",)}))
    with pytest.raises(TypeError, match="register takes a Family subclass"):
        register(type("NotOne", (), {"names": ("mine",)}))
    assert FAMILIES == before


def test_a_strategy_holds_its_familys_declared_parameters_and_no_other():
    """Strategy is the family's name and the values of the parameters that family declares: no field
    for every family's parameters, a parameter of another family is an AttributeError."""
    import dataclasses

    assert [field.name for field in dataclasses.fields(Strategy)] == ["name", "parameters"]
    late = Strategy("late-chunking", chunk_tokens=128)
    assert late.parameters == (("chunk_tokens", 128), ("overlap", 64)) and (late.chunk_tokens, late.overlap) == (128, 64)
    assert [p.name for p in late.family.parameters] == ["chunk_tokens", "overlap"]
    stretched = Strategy.parse("extend-pi@4096+logscale")
    assert (stretched.read_tokens, stretched.logscale) == (4096, True)
    assert dataclasses.replace(stretched, read_tokens=8192).label == "extend-pi@8192+logscale"
    with pytest.raises(AttributeError, match=r"strategy extend-pi@4096\+logscale has no parameter 'chunk_tokens' "
                                             r"\(its family takes read_tokens, logscale\)"):
        _ = stretched.chunk_tokens
    assert Strategy("truncate").overlap == 0  # no overlap declared: its windows do not overlap
    with pytest.raises(ConfigError, match="a strategy's chunk_tokens goes with chunks-max and late-chunking, and only with them"):
        Strategy("truncate", chunk_tokens=128)
    with pytest.raises(ConfigError, match="chunks-max needs a chunk size"):
        Strategy("chunks-max")

"""Every size a run takes has a declared bound, checked before any work:
a value past it is one ``error:`` line naming the bound, exit 1, nothing written, in a second,
``--plan`` or not; the largest value allowed is taken; a run's peak memory is estimated, printed
by ``--plan`` and kept under what the machine has (embedeval.bounds)."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from embedeval import bounds
from embedeval.bounds import (
    LOCAL_RUNTIME_BYTES,
    MAX_JSON_BYTES,
    MAX_LINE_BYTES,
    MAX_N_BOOTSTRAP,
    MAX_NEGATIVES,
    MAX_READ_TOKENS,
    MAX_THEME_RUNS,
    MEMORY_ENV,
    PROCESS_BYTES,
    WEIGHT_MEMORY_FACTOR,
    MemoryEstimate,
    MemoryPart,
)
from embedeval.cli import app
from embedeval.errors import ConfigError
from embedeval.grid import HaystackGrid
from embedeval.jsonread import JsonTooLong, loads
from embedeval.strategies import parse_strategies


def _files(folder):
    return sorted(p.relative_to(folder) for p in folder.rglob("*"))


def _long_line_files(folder):
    """A JSON Lines corpus and an ``embed -i`` text file whose line 2 is one byte past the bound."""
    long = "a" * (MAX_LINE_BYTES - len('{"text": ""}') + 1)
    books = [json.dumps({"text": f"book {i}. It has a sentence."}) for i in range(12)]
    (folder / "big.jsonl").write_text("\n".join([books[0], json.dumps({"text": long}), *books[1:]]) + "\n")
    (folder / "big.txt").write_text("a short text\n" + "a" * (MAX_LINE_BYTES + 1) + "\n")


@pytest.mark.parametrize("args, says", [
    (["nolima", "-s", "extend-pi@100000000", "--plan", "--out", "run"],
     "strategy 'extend-pi@100000000' reads 100,000,000 tokens in one pass, past the 131,072 one pass can hold"),
    (["nolima", "-s", "extend-gp@99999999999999999999", "--out", "run"], "use L at most 131,072"),
    (["nolima", "-s", "rope-ntk@131073", "--plan", "--out", "run"], "past the 131,072 one pass can hold"),
    (["nolima", "--negatives", "99999999999", "--plan", "--out", "run"],
     "--negatives 99,999,999,999 is past the 10,000 needle-free haystacks per length a run can hold (docs/scale.md); use at most 10,000"),
    (["nolima", "--negatives", "2000000", "--out", "run"], "use at most 10,000"),
    (["nolima", "--lengths", "64,1000000000000000", "--plan", "--out", "run"],  # in config.json, report blamed decision.csv
     "haystack length 1000000000000000 is invalid: each of --lengths is a whole number of tokens from 16 to 1,000,000,000"),
    (["nolima", "--n-bootstrap", "99999999999", "--plan", "--out", "run"],
     "--n-bootstrap must be a whole number of resamples from 10 to 100,000, not 99999999999"),
    (["nolima", "--n-bootstrap", "30000000", "--out", "run"], "from 10 to 100,000"),
    (["themes", "--runs", "99999999999", "--plan", "--out", "themes"], "--runs must be a whole number of clusterings from 1 to 100"),
    (["needles", "draft", "--themes", "themes", "--llm", "m", "--out", "d.json", "--plan", "--per-theme", "99999999999"],
     "--per-theme must be a whole number of needle groups from 1 to 50, not 99999999999"),
    (["needles", "draft", "--themes", "themes", "--llm", "m", "--out", "d.json", "--attempts", "99999999999"],
     "--attempts must be a whole number of requests from 1 to 100, not 99999999999"),
    (["nolima", "-e", "bm25", "--corpus", "jsonl:big.jsonl", "--plan", "--out", "run"],
     "corpus file big.jsonl: line 2 is longer than the 8 MiB a line may hold (docs/scale.md)"),
    (["nolima", "-e", "bm25", "--corpus", "jsonl:big.jsonl", "--lengths", "64", "--out", "run"], "big.jsonl: line 2 is longer than"),
    (["embed", "-i", "big.jsonl", "-o", "v.npy"], "input file big.jsonl: line 2 is longer than the 8 MiB a line may hold"),
    (["embed", "-i", "big.txt", "-o", "v.npy"], "input file big.txt: line 2 is longer than the 8 MiB a line may hold"),
])
def test_a_size_past_its_bound_is_one_line_at_once_and_writes_nothing(tmp_path, monkeypatch, args, says):
    _long_line_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = _files(tmp_path)
    start = time.monotonic()
    result = CliRunner().invoke(app, args)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1, result.output
    assert lines[-1].startswith("error: ") and says in lines[-1], result.output
    assert not any(line.startswith("Traceback") for line in lines)
    assert _files(tmp_path) == before
    assert time.monotonic() - start < 10  # refused before any work (the old code ran for minutes, or was killed)


def test_the_largest_values_allowed_are_taken():
    assert parse_strategies([f"extend-pi@{MAX_READ_TOKENS}", f"rope-ntk@{MAX_READ_TOKENS}+logscale"])[0].read_tokens == MAX_READ_TOKENS
    assert HaystackGrid(negatives=MAX_NEGATIVES).negatives == MAX_NEGATIVES
    with pytest.raises(ConfigError, match="use at most 10,000"):
        HaystackGrid(negatives=MAX_NEGATIVES + 1)
    from embedeval.experiments.nolima_config import NolimaConfig
    from embedeval.experiments.themes.config import ThemesConfig

    NolimaConfig(embedders=("bm25",), n_bootstrap=MAX_N_BOOTSTRAP).check()
    with pytest.raises(ConfigError, match="from 10 to 100,000"):
        NolimaConfig(embedders=("bm25",), n_bootstrap=MAX_N_BOOTSTRAP + 1).check()
    ThemesConfig(runs=MAX_THEME_RUNS).validate()
    with pytest.raises(ConfigError, match="from 1 to 100"):
        ThemesConfig(runs=MAX_THEME_RUNS + 1).validate()


def _plan(negatives: int, n_bootstrap: int, *extra: str):
    """A plan of a small grid over a small corpus (in the working folder's ``books``)."""
    return CliRunner().invoke(app, ["nolima", "-e", "bm25", "--corpus", "dir:books", "--lengths", "64", "--depths", "1", "--groups",
                                    "loc-dresden", "--plan", "-q", "--out", "run", "--negatives", str(negatives), "--n-bootstrap",
                                    str(n_bootstrap), *extra])


@pytest.fixture
def books(tmp_path, monkeypatch):
    """Twelve short books of plain sentences in ``tmp_path / "books"``, the working folder."""
    (tmp_path / "books").mkdir()
    for i in range(12):
        sentences = [f"The {word} of book {i} stood by the river in the morning light number {n}." for n in range(40)
                     for word in ("house", "tree")]
        (tmp_path / "books" / f"b{i}.txt").write_text(" ".join(sentences))
    monkeypatch.chdir(tmp_path)
    return _files(tmp_path)


def test_a_plan_says_its_peak_memory_and_takes_the_most_resamples(tmp_path, books):
    result = _plan(10, MAX_N_BOOTSTRAP)
    assert result.exit_code == 0, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("peak memory: about 0.33 GiB (haystacks 0.00 GiB, bootstrap 0.01 GiB, process 0.33 GiB) of the ")
    assert MEMORY_ENV in line
    found = json.loads(_plan(10, MAX_N_BOOTSTRAP, "--json").output)["peak_memory"]
    # the haystacks: 64 tokens x (2 x 1 group x 2 variants x 1 depth + 10 negatives) x 24 bytes; the bootstrap:
    # 100,000 resamples x 1 group x 8 bytes x (3 + 5 x 1 row); the process of a sweep with no local model
    assert found["parts"] == {"haystacks": 64 * (2 * 2 + 10) * 24, "bootstrap": MAX_N_BOOTSTRAP * 8 * 8, "process": PROCESS_BYTES}
    assert found["bytes"] == sum(found["parts"].values()) and found["machine_bytes"] == bounds.machine_memory()
    assert _files(tmp_path) == books


def test_a_plan_takes_the_most_negatives(books):
    result = _plan(MAX_NEGATIVES, 10, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["peak_memory"]["parts"]["haystacks"] == 64 * (2 * 2 + MAX_NEGATIVES) * 24


def test_a_run_past_the_memory_here_is_refused_naming_what_to_lower(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(MEMORY_ENV, "0.5")
    for extra in ([], ["--plan"]):
        result = CliRunner().invoke(app, ["nolima", "-e", "bm25", "--out", "run", *extra])
        assert result.exit_code == 1, result.output
        assert result.output.strip().splitlines()[-1].startswith(
            "error: the run would need about 1.10 GiB of memory, more than the 0.50 GiB here (the largest part: haystacks, 0.75 GiB); "
            "lower --negatives, --depths or the longest of --lengths, or set EMBEDEVAL_MEMORY_GB to allow more"), result.output
        assert _files(tmp_path) == []


@pytest.mark.parametrize("value", ["lots", "1e300", "inf", "nan", "1048577", "1e-30", "0.05", "0", "-1", "\uff11"])
def test_a_memory_setting_outside_its_range_is_one_line(tmp_path, monkeypatch, value):
    """1e300 was an OverflowError traceback, 1e-30 "needs about
    0.00 GiB ... more than the 0.00 GiB here"."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(MEMORY_ENV, value)
    result = CliRunner().invoke(app, ["nolima", "-e", "bm25", "--plan", "--out", "run"])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception  # no traceback
    assert result.output.strip().splitlines() == [
        f"error: EMBEDEVAL_MEMORY_GB must be a number of GiB from 0.1 to 1,048,576, not {value!r}"], result.output
    assert _files(tmp_path) == []


@pytest.mark.parametrize("value, gib", [("0.1", 0.1), ("1048576", 1_048_576), (" 2 ", 2)])
def test_a_memory_setting_in_its_range_is_taken(monkeypatch, value, gib):
    monkeypatch.setenv(MEMORY_ENV, value)
    assert bounds.machine_memory() == int(gib * bounds.GIB)


def test_the_estimate_counts_the_process_and_each_local_models_weights():
    """A MiniLM sweep was estimated at 0.01 GiB and peaked at 1.01 GiB.
    The process is counted for every sweep (with torch's runtime once a local model loads), and
    each local model's weight files x the measured factor; an API model or bm25 holds none here."""
    from embedeval.experiments.nolima_config import NolimaConfig

    config = NolimaConfig()
    needles = config.needle_set()
    minilm = "st:all-MiniLM-L6-v2"
    parts = config.memory(needles, ["bm25", "openai:text-embedding-3-small"]).parts
    assert parts["process"].bytes == PROCESS_BYTES and not any(what.startswith("weights") for what in parts)
    parts = config.memory(needles, ["bm25", minilm, f"{minilm}?device=cpu"]).parts
    assert parts["process"].bytes == PROCESS_BYTES + LOCAL_RUNTIME_BYTES  # the runtime once, however many models
    weights = 90_868_376  # the bundled model's model.safetensors
    assert parts[f"weights of {minilm}"].bytes == parts[f"weights of {minilm}?device=cpu"].bytes == int(weights * WEIGHT_MEMORY_FACTOR)
    line = config.memory(needles, [minilm]).line()
    assert ", process 0.66 GiB, weights of st:all-MiniLM-L6-v2 0.09 GiB) of the " in line, line
    small = NolimaConfig(grid=HaystackGrid(lengths=(64,), depths=2), n_bootstrap=10)
    with pytest.raises(ConfigError) as raised:
        MemoryEstimate(small.memory(needles, [minilm]).parts, machine=bounds.GIB // 5).check()
    assert str(raised.value) == (
        "the run would need about 0.76 GiB of memory, more than the 0.20 GiB here (the largest part: process, 0.66 GiB); use a machine "
        "with more memory (the process is the interpreter and its libraries, torch with a local model: no setting lowers it), or set "
        "EMBEDEVAL_MEMORY_GB to allow more")


def test_a_models_weight_files_are_its_safetensors_or_else_its_bin_files(tmp_path):
    from embedeval.embedders.models import weight_file_bytes

    (tmp_path / "model.safetensors").write_bytes(b"x" * 1000)
    (tmp_path / "pytorch_model.bin").write_bytes(b"x" * 3000)  # the same weights in the older format: not loaded
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "other.safetensors").write_bytes(b"x" * 50)  # not at the top: not the model's
    assert weight_file_bytes(str(tmp_path)) == 1000
    (tmp_path / "model.safetensors").unlink()
    assert weight_file_bytes(str(tmp_path)) == 3000
    assert weight_file_bytes(str(tmp_path / "no-such-folder")) == 0


def test_extend_pi_counts_its_position_table_at_the_models_width(monkeypatch):
    """all-MiniLM-L6-v2's position table is 384 wide: extend-pi@L holds L x 384 x 8 bytes three times."""
    from embedeval.experiments.nolima_config import NolimaConfig

    config = NolimaConfig(strategies=("truncate", f"extend-pi@{MAX_READ_TOKENS}", "extend-gp@4096"))
    estimate = config.memory(config.needle_set())
    assert estimate.parts["position table"].bytes == MAX_READ_TOKENS * 384 * 8 * 3
    assert "position table" not in NolimaConfig(strategies=("extend-gp@4096",)).memory(config.needle_set()).parts
    monkeypatch.setenv(MEMORY_ENV, "1")
    with pytest.raises(ConfigError, match=r"\(the largest part: position table, 1.12 GiB\); lower L of extend-pi@131072"):
        config.validate()


def test_an_estimate_names_its_largest_part_and_its_parameters():
    estimate = MemoryEstimate({"a": MemoryPart(3 * bounds.GIB, "lower `x`", ("x",)), "b": MemoryPart(5 * bounds.GIB, "lower `y`", ("y",))},
                              machine=6 * bounds.GIB)
    with pytest.raises(ConfigError) as raised:
        estimate.check()
    assert str(raised.value) == ("the run would need about 8.00 GiB of memory, more than the 6.00 GiB here (the largest part: b, 5.00 GiB); "
                                 "lower `y`, or set EMBEDEVAL_MEMORY_GB to allow more")
    assert raised.value.parameters == ("y",)
    MemoryEstimate(estimate.parts, machine=8 * bounds.GIB).check()  # at the memory here: taken


def test_a_json_text_past_its_bound_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    with pytest.raises(JsonTooLong, match="longer than the 64 MiB a JSON text may hold"):
        loads("[" + " " * MAX_JSON_BYTES + "]")
    assert loads("[" + " " * (MAX_JSON_BYTES - 2) + "]") == []
    (tmp_path / "needles.json").write_text('{"groups": []' + " " * MAX_JSON_BYTES + "}")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["needles", "check", "needles.json"])
    assert result.exit_code == 1 and "longer than the 64 MiB a JSON text may hold" in result.output, result.output
    assert "Traceback" not in result.output


def test_the_bootstrap_itself_refuses_more_resamples_than_a_run_can_hold():
    from embedeval.metrics.bootstrap import cluster_resamples

    with pytest.raises(ValueError, match="99,999,999,999 resamples is past the 100,000 a run can hold"):
        cluster_resamples(48, 99_999_999_999)
    assert cluster_resamples(2, MAX_N_BOOTSTRAP)[1].shape == (MAX_N_BOOTSTRAP, 2)


def test_a_line_at_the_bound_is_read(tmp_path):
    from embedeval.io import read_texts

    (tmp_path / "t.txt").write_text("a" * MAX_LINE_BYTES + "\r\nb\n")
    assert [len(text) for text in read_texts(tmp_path / "t.txt")] == [MAX_LINE_BYTES, 1]


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])
def test_a_line_is_bounded_whatever_ends_it_and_named_by_its_number(tmp_path, newline):
    """An old Mac's file (lines ending at a lone CR) over 8 MiB was refused
    as one long line 1, while the same file under 8 MiB was read as many lines. Short lines of any
    ending are read, however long the file; a long line is named by its number, a CRLF cut between
    two blocks read counted once."""
    from embedeval.errors import InputError
    from embedeval.io import _LINE_BLOCK, read_texts

    short = ["x" * 999] * (MAX_LINE_BYTES // 1000 + 50)  # more than the bound in all
    (tmp_path / "t.txt").write_text(newline.join(short) + newline, newline="")
    assert len(read_texts(tmp_path / "t.txt")) == len(short)
    first = "y" * (_LINE_BLOCK - 1)  # its line break begins at the last byte of the first block
    (tmp_path / "t.txt").write_text(newline.join([first, "z", "w" * (MAX_LINE_BYTES + 1), "v"]), newline="")
    with pytest.raises(InputError, match=r"t\.txt: line 3 is longer than the 8 MiB a line may hold"):
        read_texts(tmp_path / "t.txt")


@pytest.mark.parametrize("args", [["needles", "check", "big.json"], ["nolima", "--plan", "--expansions", "big.json", "--out", "run"]],
                         ids=["needles", "expansions"])
def test_a_json_file_past_its_bound_is_refused_without_reading_it_whole(tmp_path, monkeypatch, args):
    """A 4 GiB JSON file (sparse: no disk) is refused after reading 64 MiB of it: each JSON input
    goes through :func:`~embedeval.jsonread.load_file`, which reads at most the bound plus a byte
    (it was read whole by ``Path.read_text`` first: 4 GiB of memory, then 8 as text)."""
    import resource

    with open(tmp_path / "big.json", "wb") as handle:
        handle.truncate(4 * 2**30)
    monkeypatch.chdir(tmp_path)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = CliRunner().invoke(app, args)
    grew_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert result.exit_code == 1 and "longer than the 64 MiB a JSON text may hold (4,294,967,296 bytes" in result.output, result.output
    assert grew_mib < 1024, f"the peak grew by {grew_mib:,.0f} MiB"

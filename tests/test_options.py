"""Each option declared once (embedeval.options): the command line's flags, help and defaults come
from the declarations, the library checks a setting with the same option, and a library parameter's
flag is found there."""

from __future__ import annotations

import dataclasses
import math

import pytest
import typer
from typer.testing import CliRunner

from embedeval import options
from embedeval.cli import app
from embedeval.cli.options import flag_of, in_flag_words
from embedeval.errors import ConfigError
from embedeval.experiments.drafting.config import DraftConfig
from embedeval.experiments.nolima_config import NolimaConfig
from embedeval.experiments.themes.config import ThemesConfig
from embedeval.grid import HaystackGrid


def _command_options(command) -> dict[str, object]:
    """{flag: click option} of every command under ``command``."""
    found = {}
    for sub in getattr(command, "commands", {}).values():
        found.update(_command_options(sub))
    for param in getattr(command, "params", ()):
        for name in param.opts:
            found.setdefault(name, param)
    return found


def test_every_declared_option_is_a_flag_of_some_command():
    flags = _command_options(typer.main.get_command(app))
    missing = sorted({option.flag for option in options.OPTIONS} - set(flags))
    assert missing == []


def test_a_parameter_has_one_flag():
    flags: dict[str, set[str]] = {}
    for option in options.OPTIONS:
        flags.setdefault(option.parameter, set()).add(option.flag)
    assert {parameter: found for parameter, found in flags.items() if len(found) > 1} == {}


def test_the_command_line_declares_no_option_by_hand():
    """Every typer option comes from a declared one (cli.options.as_typer): no module of the command
    line calls typer.Option itself."""
    import ast
    from pathlib import Path

    import embedeval.cli

    calls = []
    for path in Path(embedeval.cli.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "Option":
                calls.append(f"{path.name}:{node.lineno}")
    assert [call.split(":")[0] for call in calls] == ["options.py"]  # as_typer's one call


def test_each_out_is_the_one_declared_out_with_its_commands_words():
    """``--out`` is declared once (options.OUT); each command's words and files are data (options.OUTPUTS)."""
    def outs(command, path=()):
        for name, sub in getattr(command, "commands", {}).items():
            yield from outs(sub, (*path, name))
        for param in getattr(command, "params", ()):
            if "--out" in param.opts:
                yield " ".join(path), param

    found = dict(outs(typer.main.get_command(app)))
    assert sorted(found) == sorted(options.OUTPUTS)
    for command, param in found.items():
        assert param.name == options.OUT.parameter and options.OUTPUTS[command].help in param.help


@pytest.mark.parametrize("written", [[], ["--force"]])
def test_a_forced_output_is_said_once_however_often_it_is_checked(tmp_path, caplog, written):
    """A Force is given to every writer of a command: an output checked twice is noted once (a
    note of the ``embedeval`` logger, which the command line prints as ``note: ...``)."""
    from embedeval.errors import InputError
    from embedeval.io import Force, check_output_file

    mine = tmp_path / "mine.parquet"
    mine.write_text("the user's")
    force = Force(bool(written))
    with caplog.at_level("INFO", logger="embedeval"):
        for _ in range(2):
            if not written:
                with pytest.raises(InputError, match="give `force` to replace it anyway"):
                    check_output_file(mine, (".parquet",), force)
            else:
                check_output_file(mine, (".parquet",), force)
    said = [record.getMessage() for record in caplog.records if record.name == "embedeval"]
    assert sum(message.startswith(f"replacing {mine}") for message in said) == (1 if written else 0)


@pytest.mark.parametrize("parameter, flag", [
    ("embedders", "--embedder"), ("strategies", "--strategy"), ("prices", "--price"), ("theme_ids", "--themes-ids"),
    ("hdbscan.min_cluster_size", "--min-cluster-size"), ("hdbscan.min_samples", "--min-samples"), ("umap.min_dist", "--umap-min-dist"),
    ("n_bootstrap", "--n-bootstrap"), ("dtype", None),
])
def test_a_library_parameter_is_said_as_its_declared_flag(parameter, flag):
    assert flag_of(parameter) == flag


def test_a_settings_field_takes_its_default_from_its_option():
    """Each field declared with an option (Option.field) holds the option; their defaults agree
    (the needle file is a path the config keeps as text)."""
    for settings in (NolimaConfig, HaystackGrid, ThemesConfig, DraftConfig):
        for setting in dataclasses.fields(settings):
            option = setting.metadata.get("option")
            if option is None or setting.default is dataclasses.MISSING:
                continue
            expected = str(option.default) if setting.name == "needles" else option.default
            assert setting.default == expected, (settings.__name__, setting.name)
            assert option.parameter.rsplit(".", 1)[-1] == setting.name, (settings.__name__, setting.name)


def test_a_comma_list_reads_and_shows_as_the_command_line_writes_it():
    assert options.CHUNK_TOKENS.cli_default == "128,256" and options.CHUNK_TOKENS.value("64, 32") == [64, 32]
    assert options.STRATEGIES.cli_default is None and options.STRATEGIES.value(None) == ["truncate"]
    assert options.STRATEGIES.value(["truncate,chunks-max", "windows-mean"]) == ["truncate", "chunks-max", "windows-mean"]
    assert options.EXPANSIONS.cli_default is None and options.EXPANSIONS.value(None) == []
    assert options.NEEDLES.cli_default is None and options.NEEDLES.value(None) == options.NEEDLES.default


def test_the_library_and_the_command_line_refuse_commit_every_with_the_same_words(tmp_path):
    from embedeval.experiments.nolima import run_nolima

    with pytest.raises(ConfigError) as refused:
        run_nolima(NolimaConfig(out=str(tmp_path / "lib")), progress=False, commit_every=0)
    assert str(refused.value) == "`commit_every` must be a whole number >= 1, not 0"
    result = CliRunner().invoke(app, ["nolima", "--commit-every", "0", "--out", str(tmp_path / "cli"), "-q"])
    assert result.exit_code == 1 and result.output.strip() == f"error: {in_flag_words(refused.value)}"
    assert result.output.strip() == "error: --commit-every must be a whole number >= 1, not 0"
    assert not (tmp_path / "lib").exists() and not (tmp_path / "cli").exists()


def test_a_constraint_names_the_parameter_and_the_value():
    with pytest.raises(ConfigError, match=r"^`n_bootstrap` must be a whole number of resamples from 10 to 100,000, not 3$"):
        NolimaConfig(n_bootstrap=3).check()
    with pytest.raises(ConfigError, match=r"^`per_theme` must be a whole number of needle groups from 1 to 50, not True$"):
        options.PER_THEME.check(True)
    with pytest.raises(ConfigError, match=r"^`pool` must be one of needle-free, all, not 'everything'$"):
        options.POOL.check("everything")
    assert options.number_in(0, 1, low_open=True).words == "in (0, 1]"


def test_the_library_and_the_command_line_refuse_expansion_sizes_with_the_same_words(tmp_path):
    from embedeval.expansion import build_expansion_file

    with pytest.raises(ConfigError) as refused:
        build_expansion_file(None, [5, 0], llm=None)  # refused before the needle set or the chat model is used
    assert str(refused.value) == "`sizes` must be positive whole numbers, not [5, 0]"
    result = CliRunner().invoke(app, ["expand", "--sizes", "5,0", "--llm", "fake-model", "--out", str(tmp_path / "e.json")])
    assert result.exit_code == 1 and result.output.strip() == "error: --sizes must be positive whole numbers, not [5, 0]"


def test_nolimas_sweep_flags_are_built_from_their_declarations():
    from embedeval.cli.options import SweepOptions, literal

    nolima = typer.main.get_command(app).commands["nolima"]
    flags = _command_options(nolima)
    for setting in dataclasses.fields(SweepOptions):
        option = next(option for option in options.OPTIONS if option.parameter == setting.name)
        param = flags[option.flag]
        assert param.help == literal(option.help_text) and param.default == option.cli_default, option.flag


def test_the_library_and_the_command_line_refuse_a_negative_seed_with_the_same_words_before_anything_is_written(tmp_path):
    """--seed -1 was numpy's 'expected non-negative integer' traceback half-way through building
    haystacks (the library took it too); the themes' UMAP seed must be < 2**32, which is what RandomState takes."""
    with pytest.raises(ConfigError) as refused:
        NolimaConfig(grid=HaystackGrid(seed=-1), out=str(tmp_path / "lib"))
    with pytest.raises(ConfigError, match=r"in \[0, 2\*\*32\), not 100000000000000000000"):  # the fuzz tier: a Parquet OverflowError
        HaystackGrid(seed=10**20)
    assert str(refused.value) == "`seed` must be a whole number in [0, 2**32), not -1"
    for seed in (True, "0"):
        with pytest.raises(ConfigError, match=r"`seed` must be a whole number in \[0, 2\*\*32\)"):
            HaystackGrid(seed=seed)
    result = CliRunner().invoke(app, ["nolima", "--seed", "-1", "--embedder", "bm25", "--out", str(tmp_path / "cli"), "-q"])
    assert result.exit_code == 1 and result.output.strip() == "error: --seed must be a whole number in [0, 2**32), not -1"
    assert not (tmp_path / "lib").exists() and not (tmp_path / "cli").exists()
    with pytest.raises(ConfigError, match=r"^`seed` must be a whole number in \[0, 2\*\*32\), not 4294967296$"):
        ThemesConfig(seed=2**32).validate()
    with pytest.raises(ConfigError, match=r"^`chunk_seed` must be a whole number in \[0, 2\*\*32\), not -1$"):
        ThemesConfig(chunk_seed=-1).validate()


@pytest.mark.parametrize("settings, says", [
    ({"break_k": True}, "`break_k` must be one of 1, 5, 10 (the recall@k measured), not True"),  # True == 1: recall@True
    ({"break_threshold": "0.8"}, "break threshold must be in (0, 1], not 0.8"),  # was a TypeError
    ({"break_threshold": None}, "break threshold must be in (0, 1], not None"),
    ({"chunk_tokens": math.nan}, "`chunk_tokens` must be a list of chunk sizes, not one holding nan"),  # was a TypeError
    ({"chunk_tokens": None}, "`chunk_tokens` must be a list of chunk sizes, not None"),
    ({"embedders": 3}, "`embedders` must be a list of embedder specs, not one holding 3"),  # was an AttributeError
    ({"strategies": [2.5]}, "`strategies` must be a list of strategy names, not one holding 2.5"),
    ({"groups": [True]}, "`groups` must be a list of group ids, not one holding True"),
    ({"expansions": None}, "`expansions` must be a list of expansion file paths, not None"),
    ({"skip_unavailable": "no"}, "`skip_unavailable` must be true or false, not 'no'"),  # "no" was true
    ({"dedupe": "no"}, "`dedupe` must be true or false, not 'no'"),
    ({"tokenizer": 3}, "`tokenizer` must be a tokenizer's name, not 3"),
])
def test_the_library_refuses_settings_of_the_wrong_kind_with_one_config_error_before_any_work(tmp_path, settings, says):
    """What the command line cannot give (a bool, NaN, None, a number where a list of names
    goes) was taken, or a TypeError/AttributeError of run_nolima's, not one error naming the setting."""
    from embedeval.experiments.nolima import run_nolima

    with pytest.raises(ConfigError) as refused:
        run_nolima(NolimaConfig(**{"embedders": ("bm25",), **settings}, grid=HaystackGrid(corpus=f"dir:{tmp_path / 'books'}"),
                                out=str(tmp_path / "run")), progress=False)  # a corpus of its own: nothing is fetched, whatever happens
    assert str(refused.value) == says
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("field", ["lengths", "variants", "n_distractors", "needles_per_haystack"])
@pytest.mark.parametrize("value", [math.nan, 2.5, None])
def test_a_grid_list_given_one_odd_value_is_one_config_error(field, value):
    """HaystackGrid(lengths=nan) was tuple(nan)'s TypeError; one value is read as a list of one and checked."""
    with pytest.raises(ConfigError):
        HaystackGrid(**{field: value})
    assert HaystackGrid(lengths=512).lengths == (512,) and HaystackGrid(variants="onehop").variants == ("onehop",)


@pytest.mark.parametrize("depths", [10**20, 10**8, 129])
def test_more_depths_than_the_shortest_haystack_has_tokens_is_refused_at_once(tmp_path, depths):
    """--depths 99999999999999999999 was numpy's 'Maximum allowed size exceeded' traceback, 10**8 a plan that
    filled gigabytes; a depth is a token position, so the shortest length bounds them."""
    result = CliRunner().invoke(app, ["nolima", "--depths", str(depths), "--lengths", "128,512", "--embedder", "bm25",
                                      "--out", str(tmp_path / "run"), "--plan"])
    assert result.exit_code == 1 and result.output.strip() == (
        f"error: --depths must be at most the shortest haystack length, 128 tokens (more depths than token positions "
        f"only merge), not {depths}")
    assert not (tmp_path / "run").exists()
    assert HaystackGrid(lengths=(128, 512), depths=128).depths == 128


@pytest.mark.parametrize("command", ["needle-haystack", "absence"])
def test_a_similarity_command_refuses_a_negative_seed_in_one_line(tmp_path, command):
    """`similarity needle-haystack --seed -1` was numpy's 'expected non-negative integer'
    traceback while cutting the corpus into chunks."""
    (tmp_path / "pairs.csv").write_text("question,needle\nWho?,Ann was there.\n")
    books = tmp_path / "books"
    books.mkdir()
    for i in range(12):
        (books / f"b{i}.txt").write_text("Ann was there. " * 50)
    result = CliRunner().invoke(app, ["similarity", command, "--pairs", str(tmp_path / "pairs.csv"), "--corpus", f"dir:{books}",
                                      "--seed", "-1", "-e", "bm25", "--out", str(tmp_path / "out.csv")])
    assert result.exit_code == 1 and result.output.strip() == "error: --seed must be a whole number in [0, 2**32), not -1", result.output
    assert not (tmp_path / "out.csv").exists()

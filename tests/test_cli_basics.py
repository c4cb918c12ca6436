import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from embedeval import __version__
from embedeval.cli import app
from embedeval.defaults import DEFAULT_LENGTHS
from embedeval.io import read_texts

runner = CliRunner()


def _error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit), result.exception  # no escaped exception
    return lines[0]


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"embedeval {__version__}"


def test_embedders_lists_the_default_as_ready():
    result = runner.invoke(app, ["embedders"])
    assert result.exit_code == 0
    line = next(line for line in result.output.splitlines() if line.startswith("st:all-MiniLM-L6-v2"))
    assert "ready" in line


def test_embed_writes_npy_and_parquet_matching_the_model(tmp_path, minilm, isolated_cache):
    source = tmp_path / "in.txt"
    texts = ["first text", "second text", "third, unrelated"]
    source.write_text("\n".join(texts) + "\n")
    result = runner.invoke(app, ["embed", "--input", str(source), "--out", str(tmp_path / "v.npy"), "-q"])
    assert result.exit_code == 0, result.output
    vectors = np.load(tmp_path / "v.npy")
    np.testing.assert_allclose(vectors, minilm.embed(texts), atol=1e-5)

    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text("\n".join(f'{{"text": "{t}"}}' for t in texts))
    result = runner.invoke(app, ["embed", "-i", str(jsonl), "-o", str(tmp_path / "v.parquet"), "-q"])
    assert result.exit_code == 0, result.output
    frame = pd.read_parquet(tmp_path / "v.parquet")
    assert frame["text"].tolist() == texts
    np.testing.assert_allclose(np.stack(frame["embedding"]), vectors, atol=1e-6)

    info = runner.invoke(app, ["cache", "info"])
    assert "st:all-MiniLM-L6-v2: 3" in info.output


@pytest.mark.parametrize("content, args, says", [
    ("a text\n", ["-e", "nope:model"], "error: unknown embedder 'nope:model'"),
    ("\n\n", [], "has no texts"),
    ("one\n\nthree\n", [], "gap.txt:2: empty text"),
])
def test_bad_embed_input_is_one_line_and_writes_nothing(tmp_path, content, args, says):
    source = tmp_path / "gap.txt"
    source.write_text(content)
    result = runner.invoke(app, ["embed", *args, "-i", str(source), "-o", str(tmp_path / "o.npy")])
    assert result.exit_code == 1
    assert says in _error_line(result)
    assert not (tmp_path / "o.npy").exists()


def test_lines_split_only_at_newlines(tmp_path):
    source = tmp_path / "odd.txt"
    source.write_text("one\u2028still one\ntwo\x0cstill two\r\nthree\n", encoding="utf-8")
    assert read_texts(source) == ["one\u2028still one", "two\x0cstill two", "three"]


def test_corrupt_cache_via_cli(tmp_path, isolated_cache):
    (isolated_cache / "embeddings.sqlite").write_bytes(b"garbage" * 500)
    source = tmp_path / "in.txt"
    source.write_text("a text\n")
    result = runner.invoke(app, ["embed", "-i", str(source), "-o", str(tmp_path / "o.npy"), "-q"])
    assert result.exit_code == 1
    assert "embeddings.sqlite is corrupt" in _error_line(result)
    cleared = runner.invoke(app, ["cache", "clear"])
    assert cleared.exit_code == 0 and "removed" in cleared.output
    assert runner.invoke(app, ["embed", "-i", str(source), "-o", str(tmp_path / "o.npy"), "-q"]).exit_code == 0


def _commands(command, path=()):
    """Every command of the click tree under ``command``, with its path."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_help_shows_square_brackets_as_written():
    """typer renders help with rich, which reads ``[word]`` as a markup tag and drops it: `--executor`
    said ``pip install 'embedeval'`` and `--distractors-file` ``({group id: })``."""
    import typer
    from rich.text import Text

    shown = " ".join(line.strip(" │╭╮╰╯─") for line in runner.invoke(app, ["nolima", "--help"]).output.splitlines()).split()
    assert "'embedeval[ray]')." in shown and "{group id: [texts]})" in " ".join(shown)
    for path, command in _commands(typer.main.get_command(app)):
        for text in [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]:
            assert Text.from_markup(text).plain == text.replace("\\[", "["), (path, text)  # nothing read as markup


# -- answering at once -------------------------------------------------------------------------------

#: Libraries that take seconds to import: neither `import embedeval.cli` nor `--help` nor a mistyped
#: option may pull them in (a command imports what it uses).
HEAVY = ("torch", "transformers", "sentence_transformers", "pandas", "numpy", "scipy", "sklearn", "umap", "hdbscan",
         "onnxruntime", "matplotlib")


def _run_cli_reporting_imports(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``embedeval ARGS`` in a fresh interpreter (the tests' own imports do not count), whose last
    stdout line names the :data:`HEAVY` modules it had imported when it ended."""
    code = ("import sys\nfrom embedeval.cli import main\nsys.argv = ['embedeval', *sys.argv[1:]]\ntry:\n    main()\n"
            f"finally:\n    print('heavy:', *[m for m in {HEAVY!r} if m in sys.modules])")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, env=env)


def test_importing_the_cli_imports_no_heavy_library():
    code = f"import sys\nimport embedeval.cli\nprint(*[m for m in {HEAVY!r} if m in sys.modules])"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert shown.stdout.strip() == "", f"import embedeval.cli imported {shown.stdout.strip()}"


@pytest.mark.parametrize("args", [["--help"], ["nolima", "--help"], ["themes", "membership", "--help"],
                                  ["nolima", "--lenghts", "128"], ["similarity", "needle-haystack", "--top-k", "many"]])
def test_help_and_a_mistyped_option_import_no_heavy_library(args):
    result = _run_cli_reporting_imports(*args)
    assert result.stdout.splitlines()[-1] == "heavy:", result.stdout[-300:]


@pytest.mark.parametrize("strategy, says", [
    ("extend-gp@512", "error: extend-gp@512 reads no further than st:all-MiniLM-L6-v2 does itself: it has 512 positions"),
    ("rope-ntk@1024", "error: rope-ntk@1024 does not fit st:all-MiniLM-L6-v2: it has absolute positions"),
])
def test_a_setting_the_folder_refuses_is_refused_before_the_tables_libraries_are_imported(strategy, says, tmp_path):
    """`nolima -s extend-gp@512` on all-MiniLM-L6-v2 (512 positions) took a second to refuse, most
    of it importing pandas with the sweep: the settings are checked first (numpy and the
    tokenizers may load, the libraries of the tables and the models may not)."""
    result = _run_cli_reporting_imports("nolima", "-s", strategy, "--out", str(tmp_path / "run"))
    assert result.returncode == 1 and result.stderr.startswith(says), result.stderr
    heavy = set(result.stdout.splitlines()[-1].split()[1:])
    assert not heavy & {"pandas", "torch", "transformers", "sentence_transformers", "scipy", "sklearn"}, heavy
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("args, says", [
    (["nolima", "--depths", "ten"], "error: invalid value for --depths: "),
    (["nolima", "--lenghts", "128"], "error: no such option --lenghts; did you mean --lengths?"),
    (["nolima", "--lengths"], "error: option --lengths requires an argument; `embedeval nolima --help` lists the options"),
    (["nolima", "--no-such-flag", "1"], "error: no such option --no-such-flag; `embedeval nolima --help` lists the options"),
    (["cache", "info", "--cache-dir"], "error: option --cache-dir requires an argument; `embedeval cache info --help` lists"),
    (["themes", "membership", "--treshold", "0.5"], "error: no such option --treshold; did you mean --threshold?"),
    (["embed", "-i", "texts.txt"], "error: missing option --out"),
    (["needles", "check"], "error: missing argument"),
    (["nolima", "surplus"], "error: got unexpected extra argument"),
    (["nolimaa"], "error: no such command 'nolimaa'; did you mean 'nolima'?"),
    (["--verison"], "error: no such option --verison; did you mean --version?"),
])
def test_the_option_parsers_own_errors_are_one_line_and_status_1(args, says):
    """docs/getting-started.md promises one `error:` line and exit status 1 for a user's mistake;
    click's own (a value of the wrong type, an unknown or misspelt option, a missing value) was a
    boxed usage message with status 2."""
    result = runner.invoke(app, args, prog_name="embedeval")
    assert result.exit_code == 1, result.output
    assert _error_line(result).startswith(says)


def test_a_group_given_nothing_still_shows_its_help():
    for args in ([], ["cache"]):
        result = runner.invoke(app, args, prog_name="embedeval")
        assert "Usage" in result.output and "error:" not in result.output, result.output


def test_the_parsers_errors_come_from_the_installed_command_too():
    result = _run_cli_reporting_imports("nolima", "--depths", "ten")
    assert result.returncode == 1 and result.stderr.startswith("error: invalid value for --depths: "), result.stderr
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.slow
def test_piped_help_is_wide_enough_for_the_defaults():
    """With stdout not a terminal rich renders 80 columns and cut `--lengths`' default to
    `128,256,512,1024,2048,4096,819…`; piped help is PIPED_HELP_WIDTH columns wide."""
    env = {k: v for k, v in os.environ.items() if k not in ("TERMINAL_WIDTH", "COLUMNS")}
    result = _run_cli_reporting_imports("nolima", "--help", env=env)
    assert result.returncode == 0, result.stderr
    assert f"[default: {','.join(map(str, DEFAULT_LENGTHS))}]" in result.stdout and "…" not in result.stdout
    told = _run_cli_reporting_imports("nolima", "--help", env={**env, "TERMINAL_WIDTH": "80"})
    assert "…" in told.stdout  # the width said is the width used (what made the cut)


@pytest.mark.parametrize("strategy, says", [
    ("extend-gp@512", "error: extend-gp@512 reads no further than st:all-MiniLM-L6-v2 does itself: it has 512 positions; "
                      "use @L with L above 512"),
    ("rope-ntk@1024", "error: rope-ntk@1024 does not fit st:all-MiniLM-L6-v2: it has absolute positions, and ntk is for "
                      "rotary ones; use extend-gp, extend-rp, extend-pi, extend-pi-dynamic"),
    ("extend-pi-dynamic@512", "error: extend-pi-dynamic@512 reads no further than st:all-MiniLM-L6-v2 does itself: it has "
                              "512 positions; use @L with L above 512"),
])
def test_a_context_extension_the_model_folder_rules_out_is_refused_before_the_model_loads(tmp_path, strategy, says):
    """The refusal needs only the folder's config.json and the headers of its weights: it came after
    the weights had loaded (42-48 s on a loaded 2-core machine); now neither torch nor the
    statistics the sweep computes at its end (scipy, scikit-learn, matplotlib) are imported."""
    result = _run_cli_reporting_imports("nolima", "-s", strategy, "--out", str(tmp_path / "run"))
    assert result.returncode == 1 and result.stderr.strip() == says, result.stderr
    imported = result.stdout.splitlines()[-1].split()[1:]
    assert not {"torch", "transformers", "sentence_transformers", "scipy", "sklearn", "matplotlib"} & set(imported), imported
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("out", ["/sys/embedeval-test.npy", "/sys/embedeval-test/new/vectors.parquet"])
def test_an_unwritable_embed_output_is_refused_before_any_text_is_embedded(tmp_path, monkeypatch, out):
    """An output no one may write (under /sys, root included) was found after the work."""
    import embedeval.embedders

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded for an output that cannot be written")

    monkeypatch.setattr(embedeval.embedders, "load_embedder", never)
    (tmp_path / "in.txt").write_text("a text\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["embed", "--input", str(tmp_path / "in.txt"), "--out", out, "-q"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith(f"error: cannot write {out} ("), result.output

"""A strategy family from a package of its own (docs/development.md, "Adding a strategy family from
your own package"): a module with a :class:`~embedeval.strategies.base.Family` that declares a
parameter of its own, found through the ``embedeval.strategies`` entry points of its
``dist-info`` folder, runs a sweep through the command line; a plugin that cannot be loaded or takes
a name already taken is one ``error:`` line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from embedeval.errors import ConfigError
from embedeval.strategies import base, family_of_label, is_written_label, parameter_table, parse_strategies, strategy_choices

from test_fuzz import write_corpus

REPO_ROOT = Path(__file__).resolve().parents[2]

DEVELOPMENT = (REPO_ROOT / "docs" / "development.md").read_text(encoding="utf-8")


def recipe_block(language: str) -> str:
    """The ``language`` code block of docs/development.md's recipe for a family from your own
    package, as written (its first line a comment naming the file)."""
    recipe = DEVELOPMENT[DEVELOPMENT.index("- Adding a strategy family from your own package"):]
    block = recipe[recipe.index(f"```{language}\n") + len(language) + 4:]
    return textwrap.dedent(block[:block.index("```")])


#: The outside package's one module, as the recipe writes it: the model's windows over the whole
#: text, a text scored by its best window among every N-th one (the first, the N+1-th, ...).
EVERY_OTHER = recipe_block("python")


def test_the_recipes_entry_point_is_the_one_the_tests_install():
    assert recipe_block("toml").splitlines()[1:] == [f'[project.entry-points."{base.ENTRY_POINT_GROUP}"]',
                                                      'every-other = "every_other:EveryOther"']
    assert EVERY_OTHER.startswith("# every_other.py\n") and "class EveryOther(Family):" in EVERY_OTHER


def test_the_parameters_table_of_the_docs_is_the_families_declarations():
    assert parameter_table() in (REPO_ROOT / "docs" / "strategies.md").read_text(encoding="utf-8")


def plugin_package(folder: Path, module: str = EVERY_OTHER, entry: str = "every-other = every_other:EveryOther",
                   with_metadata: bool = True) -> Path:
    """``folder`` holding the module ``every_other.py`` and, with ``with_metadata``, the
    ``every_other-0.1.dist-info`` folder an installer writes, naming ``entry`` in the group."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "every_other.py").write_text(module)
    if with_metadata:
        info = folder / "every_other-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: every-other\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[{base.ENTRY_POINT_GROUP}]\n{entry}\n")
    return folder


def embedeval(args: list[str], cwd: Path, plugins: Path) -> subprocess.CompletedProcess:
    """``embedeval ARGS`` in a process of its own with ``plugins`` on its path (``PYTHONPATH``)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugins), str(REPO_ROOT)]), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-c", "from embedeval.cli import main; main()", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture
def fresh_registry(monkeypatch):
    """The registry as a new process finds it: entry points not read yet, the plugin's module not
    imported; the families registered here are removed afterwards."""
    before = list(base.FAMILIES)
    monkeypatch.setattr(base, "_PLUGINS", base._Plugins())
    monkeypatch.delitem(sys.modules, "every_other", raising=False)
    yield
    base.FAMILIES[:] = before
    sys.modules.pop("every_other", None)


def test_a_family_named_by_an_entry_point_is_registered_with_its_parameter(tmp_path, monkeypatch, fresh_registry):
    monkeypatch.syspath_prepend(str(plugin_package(tmp_path / "site")))
    strategy, = parse_strategies(["every-other@3"])
    assert (strategy.label, strategy.step, strategy.name) == ("every-other@3", 3, "every-other")
    assert is_written_label("every-other@3") and not is_written_label("every-other@03")
    assert type(family_of_label("every-other@3")).__name__ == "EveryOther"
    with pytest.raises(AttributeError, match="has no parameter 'chunk_tokens'"):
        _ = strategy.chunk_tokens
    with pytest.raises(ConfigError, match=r"strategy 'every-other@0': write every-other@N, N which windows are kept: every N-th "
                                          r"\(e\.g\. every-other@2\)"):
        parse_strategies(["every-other@0"])
    assert strategy_choices()["every-other@N"] == "keeping every N-th window (N: which windows are kept: every N-th)"


def test_without_its_entry_point_the_family_is_unknown(tmp_path, monkeypatch, fresh_registry):
    monkeypatch.syspath_prepend(str(plugin_package(tmp_path / "site", with_metadata=False)))
    with pytest.raises(ConfigError, match="unknown strategy 'every-other@3'"):
        parse_strategies(["every-other@3"])


@pytest.mark.parametrize("module, entry, says", [
    ("raise ImportError('numpy 0.1 is too old')\n", "every-other = every_other:EveryOther",
     "strategy plugin 'every-other' (every_other:EveryOther, entry point group embedeval.strategies) cannot be loaded: "
     "ImportError: numpy 0.1 is too old"),
    (EVERY_OTHER.replace('names = ("every-other",)', 'names = ("truncate",)'), "every-other = every_other:EveryOther",
     "strategy plugin 'every-other' (every_other:EveryOther, entry point group embedeval.strategies) is refused: strategy names "
     "registered twice: ['truncate']"),
    (EVERY_OTHER.replace("parameters = (", "parameters = [").replace('example=2),)', 'example=2)]'), "every-other = every_other:EveryOther",
     "strategy plugin 'every-other' (every_other:EveryOther, entry point group embedeval.strategies) is refused: EveryOther.parameters "
     "must be a tuple of Parameters with distinct names"),
    (EVERY_OTHER, "every-other = every_other:np", "strategy plugin 'every-other' (every_other:np, entry point group "
     "embedeval.strategies) is refused: register takes a Family subclass"),
])
def test_a_plugin_that_cannot_be_registered_is_one_refusal_naming_its_entry_point(tmp_path, monkeypatch, fresh_registry,
                                                                                  module, entry, says):
    monkeypatch.syspath_prepend(str(plugin_package(tmp_path / "site", module, entry)))
    for _ in range(2):  # said again to every later question, not a registry without it
        with pytest.raises(ConfigError) as refused:
            parse_strategies(["truncate"])
        assert str(refused.value).startswith(says)
    assert base.families(strict=False) == base.FAMILIES  # the help the command line builds first lists the rest


def sweep_args(out: str, strategy: str) -> list[str]:
    return ["nolima", "-q", "-e", "st:all-MiniLM-L6-v2", "-s", strategy, "--corpus", "jsonl:corpus.jsonl", "--needles",
            "needles.json", "--variants", "onehop", "--lengths", "768", "--depths", "3", "--negatives", "2", "--n-bootstrap",
            "20", "--out", out]


@pytest.fixture
def sweep_folder(tmp_path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    write_corpus(folder / "corpus.jsonl", sentences=100)
    shipped = json.loads((REPO_ROOT / "queries" / "nolima-onehop.json").read_text())
    (folder / "needles.json").write_text(json.dumps({**shipped, "groups": shipped["groups"][:2]}))
    return folder


@pytest.mark.slow
def test_an_outside_family_runs_a_sweep_through_its_entry_point(tmp_path, sweep_folder):
    """The family is unknown to a process without its dist-info; with it, ``every-other@1`` and
    ``every-other@3`` are rows of the sweep's tables whose scores differ where the needle sits in a
    window the step skips (a 768-token haystack is three of all-MiniLM-L6-v2's 254-token windows)."""
    bare = embedeval(sweep_args("bare", "every-other@1"), sweep_folder, plugin_package(tmp_path / "bare", with_metadata=False))
    assert bare.returncode == 1 and bare.stderr.startswith("error: unknown strategy 'every-other@1'"), bare.stderr
    site = plugin_package(tmp_path / "site")
    listing = embedeval(["embedders"], sweep_folder, site)
    assert "every-other@N (keeping every N-th window" in listing.stdout, listing.stdout + listing.stderr
    ran = embedeval(sweep_args("run", "every-other@1,every-other@3,truncate"), sweep_folder, site)
    assert ran.returncode == 0, ran.stderr[-3000:]
    sims = pd.read_parquet(sweep_folder / "run" / "similarities.parquet")
    assert set(sims["strategy"]) == {"every-other@1", "every-other@3", "truncate"}
    scores = sims.set_index(["haystack_id", "query_form", "strategy"])["sim_qh"].unstack()  # a haystack's score per strategy
    every, third = scores["every-other@1"], scores["every-other@3"]
    assert len(scores) > 0 and every.notna().all() and third.notna().all()
    assert (every >= third - 1e-6).all() and (every > third + 1e-6).any()  # the windows the step skips held the best
    metrics = pd.read_csv(sweep_folder / "run" / "metrics.csv")
    assert {"every-other@1", "every-other@3"} <= set(metrics["strategy"])
    assert json.loads((sweep_folder / "run" / "config.json").read_text())["strategies"] == ["every-other@1", "every-other@3", "truncate"]
    assert "st:all-MiniLM-L6-v2 [every-other@3, onehop, question]" in (sweep_folder / "run" / "report.md").read_text()


@pytest.mark.slow
def test_a_broken_plugin_is_one_error_line_not_a_traceback(tmp_path, sweep_folder):
    site = plugin_package(tmp_path / "site", "import numpy\nraise RuntimeError('half installed')\n")
    refused = embedeval(sweep_args("run", "truncate"), sweep_folder, site)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr.splitlines() == [
        "error: strategy plugin 'every-other' (every_other:EveryOther, entry point group embedeval.strategies) cannot be loaded: "
        "RuntimeError: half installed"]
    assert not (sweep_folder / "run").exists()

"""A strategy family from a package of its own (docs/development.md, "Adding a strategy family from
your own package"): a module with a :class:`~embedeval.strategies.base.Family` that declares a
parameter of its own, found through the ``embedeval.strategies`` entry points of its
``dist-info`` folder, runs a sweep through the command line; a plugin that cannot be loaded or takes
a name already taken is one ``error:`` line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from embedeval.bounds import MAX_PARAMETER_VALUE
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
     "strategy plugin 'every-other' (every_other:EveryOther, package every-other, entry point group embedeval.strategies) cannot be loaded: "
     "ImportError: numpy 0.1 is too old"),
    (EVERY_OTHER.replace('names = ("every-other",)', 'names = ("truncate",)'), "every-other = every_other:EveryOther",
     "strategy plugin 'every-other' (every_other:EveryOther, package every-other, entry point group embedeval.strategies) is refused: strategy names "
     "registered twice: ['truncate']"),
    (EVERY_OTHER.replace("parameters = (", "parameters = [").replace('example=2),)', 'example=2)]'), "every-other = every_other:EveryOther",
     "strategy plugin 'every-other' (every_other:EveryOther, package every-other, entry point group embedeval.strategies) is refused: EveryOther.parameters "
     "must be a tuple of Parameters with distinct names"),
    (EVERY_OTHER, "every-other = every_other:np", "strategy plugin 'every-other' (every_other:np, package every-other, entry point group "
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
        "error: strategy plugin 'every-other' (every_other:EveryOther, package every-other, entry point group embedeval.strategies) cannot be loaded: "
        "RuntimeError: half installed"]
    assert not (sweep_folder / "run").exists()


WHERE = "strategy plugin 'every-other' (every_other:EveryOther, package every-other, entry point group embedeval.strategies)"


def refusal() -> str:
    """The refusal every strict question to the registry gets, after the help's question lists the rest."""
    assert "truncate" in strategy_choices() and base.families(strict=False) == base.FAMILIES
    with pytest.raises(ConfigError) as refused:
        parse_strategies(["truncate"])
    return str(refused.value)


def test_a_plugin_that_exits_on_import_is_its_refusal_and_an_interrupt_goes_through(tmp_path, monkeypatch, fresh_registry):
    """sys.exit in a plugin's module ended every command, silently (only Exception was caught)."""
    monkeypatch.syspath_prepend(str(plugin_package(tmp_path / "site", "import sys\nsys.exit(3)\n")))
    assert refusal() == f"{WHERE} cannot be loaded: SystemExit: 3"
    base.FAMILIES[:] = [family for family in base.FAMILIES if type(family).__module__.startswith("embedeval.")]
    monkeypatch.setattr(base, "_PLUGINS", base._Plugins())
    monkeypatch.delitem(sys.modules, "every_other", raising=False)
    (tmp_path / "site" / "every_other.py").write_text("raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        base.families()


@pytest.mark.parametrize("text", [b"[console_scripts]\nfoo bar\n", b"\xff[console_scripts]\n"])
def test_a_package_whose_entry_points_cannot_be_read_is_one_refusal_and_hides_no_plugin(tmp_path, monkeypatch, fresh_registry, text):
    """A malformed entry_points.txt of any installed package was a traceback from importlib.metadata in every command."""
    site = plugin_package(tmp_path / "site")
    info = site / "other_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: other-pkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_bytes(text)
    monkeypatch.syspath_prepend(str(site))
    said = refusal()
    assert said.startswith("strategy plugins cannot all be found: the entry points of package 'other-pkg' cannot be read "
                           "(its entry_points.txt is malformed: "), said
    assert "every-other@N" in strategy_choices()  # the readable package's plugin is registered


@pytest.mark.parametrize("anchor, added, says", [
    ('    words = "keeping', '    choices = ["a"]\n', "EveryOther.choices must be a dict, not ['a']"),
    ('    words = "keeping', '    settings_help = {"window_overlap": 5}\n',
     "EveryOther.settings_help must map settings (chunk_tokens, window_overlap, late_overlap) to their help (text), "
     "not {'window_overlap': 5}"),
    ('    words = "keeping', "    hint = 5\n", "EveryOther.hint must be a str, not 5"),
    ("    def combine", "    def listed_choices(self):\n        raise RuntimeError('listing')\n\n",
     "EveryOther fails when it is made and listed: RuntimeError: listing"),
    ("    def combine", "    def __init__(self):\n        raise OSError('no config')\n\n",
     "EveryOther fails when it is made and listed: OSError: no config"),
], ids=["choices", "settings_help", "hint", "listed_choices", "init"])
def test_a_family_with_bad_attributes_or_a_failing_constructor_is_its_refusal(tmp_path, monkeypatch, fresh_registry, anchor, added, says):
    """Each was a traceback in every command: the help is built when the command line is imported."""
    module = EVERY_OTHER.replace(anchor, added + anchor, 1)
    assert module != EVERY_OTHER
    monkeypatch.syspath_prepend(str(plugin_package(tmp_path / "site", module)))
    assert refusal() == f"{WHERE} is refused: {says}"


def test_a_number_past_every_bound_is_the_labels_refusal(tmp_path, monkeypatch, fresh_registry):
    """every-other@99999999999999999999 (no maximum declared) was taken and overflowed numpy in the family."""
    monkeypatch.syspath_prepend(str(plugin_package(tmp_path / "site")))
    for huge in ("99999999999999999999", "1000000001", "9" * 5000):
        with pytest.raises(ConfigError, match=r"^strategy 'every-other@9*1?0*1?': write every-other@N, N which windows"):
            parse_strategies([f"every-other@{huge}"])
    assert parse_strategies(["every-other@1000000000"])[0].step == MAX_PARAMETER_VALUE
    with pytest.raises(ConfigError, match="step of every-other is at most 1,000,000,000, not 100,000,000,000,000,000,000"):
        base.Strategy("every-other", step=10**20)


def declared(*parameters: str, name: str = "mine") -> str:
    """A plugin module whose family ``name`` declares ``parameters`` (source text of each)."""
    return textwrap.dedent(f"""\
        from embedeval.strategies import Family, Parameter

        class EveryOther(Family):
            names = ({name!r},)
            parameters = ({", ".join(parameters)},)
            words = "mine"
        """)


NUMBER = 'Parameter("n", "the n", minimum=1, mark="@", symbol="N", example=2)'


@pytest.mark.parametrize("parameters, says", [
    ((NUMBER, 'Parameter("fast", "fast", kind=bool, default=False, mark="+x")', 'Parameter("slow", "slow", kind=bool, default=False, mark="+x")'),
     "two parameters marked '+x' (a label could not tell them apart)"),
    (('Parameter("shift", "a shift", minimum=-5, default=-3, mark="@", symbol="S", example=1)',),
     "parameter shift: a number a label writes (@) has a minimum of 0 or more, not -5"),
    (('Parameter("shift", "a shift", default=3, mark="@", symbol="S", example=1)',),
     "parameter shift: a number a label writes (@) has a minimum of 0 or more, not None"),
    (('Parameter("n", "the n", minimum=1, default=True)',), "parameter n: the default of a number is a whole number or None, not True"),
    (('Parameter("n", "the n", minimum=1, default="12")',), "parameter n: the default of a number is a whole number or None, not '12'"),
    (('Parameter("n", "the n", minimum=1, maximum=8, default=9)',), "parameter n: default 9 is outside its bounds (1..8)"),
    (('Parameter("n", "the n", minimum=1, default=0)',), "parameter n: default 0 is outside its bounds (1..1000000000)"),
    (('Parameter("n", "the n", minimum=9, maximum=8)',), "parameter n: minimum 9 is above maximum 8"),
    (('Parameter("n", "the n", minimum=1, setting="window_overlap")',),
     "parameter n: setting is one of chunk_tokens, window, late or None, not 'window_overlap'"),
    (('Parameter("n", "the n", minimum=1, mark="@", example=2)',),
     "parameter n: a number a label writes (@) has a symbol for the help (N in every-other@N), not ''"),
    (('Parameter("n", "the n", minimum=1, mark="@", symbol="N")',),
     "parameter n: a number a label writes (@) has an example for the help (2 in every-other@2)"),
    (('Parameter("fast", "fast", kind=bool, mark="+fast")',), "parameter fast: a flag's default is True or False, not None"),
], ids=["same-mark", "negative-minimum", "no-minimum", "bool-default", "text-default", "default-above", "default-below",
        "min-above-max", "no-such-setting", "no-symbol", "no-example", "flag-without-default"])
def test_a_parameter_declared_amiss_is_its_plugins_refusal(tmp_path, monkeypatch, fresh_registry, parameters, says):
    """Each was accepted and blamed on the user later (neg@-3 written, then called damaged; a 'garbled' how-to-write)."""
    monkeypatch.syspath_prepend(str(plugin_package(tmp_path / "site", declared(*parameters))))
    assert refusal() == f"{WHERE} is refused: EveryOther.parameters: {says}"


@pytest.mark.parametrize("parameters, values", [
    ((NUMBER,), [{"n": 1}, {"n": 12}]),
    (('Parameter("fast", "fast", kind=bool, default=False, mark="+fast")', NUMBER),
     [{"n": 3}, {"n": 3, "fast": True}]),
    ((NUMBER, 'Parameter("fast", "fast", kind=bool, default=False, mark="+fast")',
      'Parameter("wide", "wide", kind=bool, default=True, mark="+wide")'),
     [{"n": 3}, {"n": 4, "fast": True}, {"n": 5, "wide": False}, {"n": 6, "fast": True, "wide": False}]),
    (('Parameter("a", "a", kind=bool, default=False, mark="+a")', 'Parameter("a_b", "a b", kind=bool, default=False, mark="+a-b")'),
     [{}, {"a": True}, {"a_b": True}, {"a": True, "a_b": True}]),
    (('Parameter("n", "the n", minimum=0, default=4, setting="chunk_tokens", mark="@", symbol="N", example=2)',
      'Parameter("k", "unwritten", default=-2, minimum=-9)'), [{"n": 0}, {"n": 4}]),
], ids=["number", "flag-first", "number-two-flags", "prefix-flags", "setting-and-unmarked"])
def test_a_label_reads_back_as_its_strategy_for_every_accepted_declaration(tmp_path, monkeypatch, fresh_registry, parameters, values):
    """A flag declared before the number broke the family's own labels (only the first marked parameter was looked for)."""
    monkeypatch.syspath_prepend(str(plugin_package(tmp_path / "site", declared(*parameters))))
    for given in values:
        strategy = base.Strategy("mine", **given)
        assert base.Strategy.parse(strategy.label) == strategy, strategy.label
        assert is_written_label(strategy.label) and family_of_label(strategy.label) is strategy.family
        assert parse_strategies([strategy.label]) == [strategy]


def test_every_plugin_is_loaded_past_broken_ones_and_the_first_failure_counts_the_others(tmp_path, monkeypatch, fresh_registry):
    """Loading stopped at the first broken plugin: a good one after it was unknown."""
    module = EVERY_OTHER + "\n\nclass Hinted(EveryOther):\n    names = ('hinted',)\n    hint = 5\n"
    entries = "aaa = every_other:Nope\nbbb = every_other:Hinted\nevery-other = every_other:EveryOther"
    monkeypatch.syspath_prepend(str(plugin_package(tmp_path / "site", module, entries)))
    assert refusal() == ("strategy plugin 'aaa' (every_other:Nope, package every-other, entry point group embedeval.strategies) "
                         "cannot be loaded: AttributeError: module 'every_other' has no attribute 'Nope' "
                         "(and 1 more strategy plugin failure)")
    assert "every-other@N" in strategy_choices() and "hinted@N" not in strategy_choices()


def test_a_name_taken_names_its_holder_and_an_empty_entry_point_is_refused(tmp_path, monkeypatch, fresh_registry):
    module = EVERY_OTHER + "\n\nclass Again(EveryOther):\n    pass\n"
    monkeypatch.syspath_prepend(str(plugin_package(tmp_path / "site", module, "every-other = every_other:EveryOther\nagain = every_other:Again\nnone =")))
    assert refusal() == (
        "strategy plugin 'again' (every_other:Again, package every-other, entry point group embedeval.strategies) is refused: "
        "strategy names registered twice: ['every-other'] (held already: 'every-other' by every_other.EveryOther) "
        "(and 1 more strategy plugin failure)")
    base.FAMILIES[:] = [family for family in base.FAMILIES if type(family).__module__.startswith("embedeval.")]
    monkeypatch.setattr(base, "_PLUGINS", base._Plugins())
    (tmp_path / "site" / "every_other-0.1.dist-info" / "entry_points.txt").write_text(f"[{base.ENTRY_POINT_GROUP}]\nnone =\n")
    assert refusal() == ("strategy plugin 'none' (no value, package every-other, entry point group embedeval.strategies) is refused: "
                         "its entry point names no class (write none = module:Class)")


def test_what_a_plugin_prints_on_import_goes_to_stderr(tmp_path, monkeypatch, fresh_registry, capsys):
    """A plugin printing on import corrupted a command's stdout (nolima --plan --json)."""
    monkeypatch.syspath_prepend(str(plugin_package(tmp_path / "site", "print('hello from the plugin')\n" + EVERY_OTHER)))
    assert "every-other@N" in strategy_choices()
    printed = capsys.readouterr()
    assert printed.out == "" and printed.err == "hello from the plugin\n"


def test_a_table_label_no_installed_family_reads_may_be_a_plugins(tmp_path, monkeypatch, fresh_registry):
    """The refusal said only that the file was edited or damaged; a run made with a plugin is read where it is not installed."""
    from embedeval.errors import InputError
    from embedeval.run import read_run_table

    path = tmp_path / "metrics.csv"
    plugin = ("the file was edited or damaged, or the label is a strategy plugin's that is not installed now or has changed since "
              "the run: install the plugin the run used, or run again to rewrite it)")
    for label, cause in [("every-other@3+fast", plugin), ("every-other@0", plugin), ("chunks-max@0", "the file was edited or damaged; run again "
                         "to rewrite it)"), ("@128", "the file was edited or damaged; run again to rewrite it)")]:
        pd.DataFrame({"strategy": ["truncate", label], "value": [0.5, 0.6]}).to_csv(path, index=False)
        with pytest.raises(InputError) as refused:
            read_run_table(path)
        assert str(refused.value) == (f"{path}, line 3, column strategy: {label!r} is not a strategy label as a run writes it "
                                      f"(e.g. truncate, chunks-max@128) ({cause}"), label
    monkeypatch.syspath_prepend(str(plugin_package(tmp_path / "site")))  # installed: its own label that it would not write
    monkeypatch.setattr(base, "_PLUGINS", base._Plugins())
    assert type(family_of_label("every-other@0")).__name__ == "EveryOther"
    pd.DataFrame({"strategy": ["truncate", "every-other@0"], "value": [0.5, 0.6]}).to_csv(path, index=False)
    with pytest.raises(InputError, match=re.escape(plugin)):
        read_run_table(path)

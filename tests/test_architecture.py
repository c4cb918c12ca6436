"""The package's imports point one way: no module reaches (even inside a function) a module that
imports it back."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT


def module_graph(package_dir: Path) -> dict[str, set[str]]:
    """{module: modules of the same package it imports}, from every import statement in the file
    (top level and inside functions). ``from a.b import c`` is an edge to ``a.b.c`` when that is a
    module, else to ``a.b``. Importing a module runs its parent packages' ``__init__`` first, so an
    import of ``a.b.c`` is an edge to ``a.b`` too, unless ``a.b`` is the importer's own package (or
    one around it), which is loaded before the importer runs."""
    root = package_dir.name
    modules = {}
    for path in package_dir.rglob("*.py"):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in node.names:
                    candidate = f"{base}.{alias.name}"
                    edges.add(candidate if candidate in modules else base)
        edges |= {parent for edge in edges for parent in _parents(edge) if parent not in _parents(name)}
        graph[name] = {e for e in edges if e in modules and e != name and e.split(".")[0] == root}
    return graph


def _parents(module: str) -> set[str]:
    """The packages around ``module``: ``{"a", "a.b"}`` for ``a.b.c``."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first search with colours)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_embedeval_has_no_import_cycle():
    graph = module_graph(REPO_ROOT / "embedeval")
    assert "embedeval.embedders.registry" in graph["embedeval.experiments.nolima"]  # the walk sees real edges
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


#: The layers of embedeval, lowest first: a package (or top-level module) imports its own layer and
#: those below it, never one above. ``embedeval`` is the package's own ``__init__``.
LAYERS: list[set[str]] = [
    {"errors", "labels", "bounds", "defaults", "jsonread", "paths", "versions", "locks", "ownership", "progress", "index",
     "text", "io", "run_folder", "derived", "consensus", "metrics", "group_means", "break_rule", "messages", "schema", "aggregate"},
    {"net"},
    {"corpus", "needles"},
    {"embedders"},
    {"strategies", "llm", "sentences", "chunking", "plan"},
    {"options", "grid", "haystacks", "haystack_store", "expansion"},
    {"breaks", "decision", "similarity", "run"},
    {"report"},
    {"experiments"},
    {"export", "mteb_task", "cli", "embedeval"},
]


def unit_of(module: str) -> str:
    """The layer unit of a module: its subpackage (``embedeval.strategies.base`` -> ``strategies``),
    a top-level module itself (``embedeval.run`` -> ``run``), the package's ``__init__`` ``embedeval``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_violations(graph: dict[str, set[str]], layers: list[set[str]]) -> list[str]:
    """Every import of ``graph`` from a unit to a unit in a higher layer than its own, as
    ``importer -> imported``; a unit in no layer is one too (every unit must be placed)."""
    rank = {unit: i for i, layer in enumerate(layers) for unit in layer}
    unplaced = sorted({unit_of(m) for m in graph} - set(rank))
    upward = sorted(f"{name} -> {edge}" for name, edges in graph.items() for edge in edges
                    if unit_of(edge) in rank and unit_of(name) in rank and rank[unit_of(edge)] > rank[unit_of(name)])
    return [f"{unit} is in no layer" for unit in unplaced] + upward


def test_packages_import_only_their_own_layer_and_those_below():
    graph = module_graph(REPO_ROOT / "embedeval")
    assert len({unit for layer in LAYERS for unit in layer}) == sum(map(len, LAYERS))  # each unit in one layer
    assert layer_violations(graph, LAYERS) == []


def test_no_embedder_imports_a_strategy():
    """The embedders are the layer under the strategies: what they need of context extension (the
    :class:`~embedeval.embedders.stretch_methods.Stretch` settings) is theirs, and they refuse in their own
    words; scoring (the Scorer protocol, BM25) sits above them. Importing ``embedeval.embedders.base``
    loads no strategy family."""
    graph = module_graph(REPO_ROOT / "embedeval")
    assert "embedeval.embedders.stretch_methods" in graph["embedeval.strategies.extend"]  # the walk sees the arrow that goes up
    assert sorted(f"{name} -> {edge}" for name, edges in graph.items() if name.startswith("embedeval.embedders")
                  for edge in edges if edge.startswith("embedeval.strategies")) == []
    loaded = subprocess.run([sys.executable, "-c", "import sys, embedeval.embedders.base\n"
                             "print(*sorted(m for m in sys.modules if m.startswith('embedeval.strategies')))"],
                            cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert loaded.stdout.split() == []


def test_one_import_that_goes_up_a_layer_is_found(tmp_path):
    """A parent package imported for its submodule counts as an import of its ``__init__``, and one
    backwards arrow fails the layer check."""
    package = tmp_path / "pkg"
    for sub in ("low", "high"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
        (package / sub / "part.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "high" / "part.py").write_text("from pkg.low.part import x\n")
    layers = [{"low"}, {"high"}, {"pkg"}]
    graph = module_graph(package)
    assert graph["pkg.high.part"] == {"pkg.low.part", "pkg.low"}  # the package's __init__ runs first: an arrow too
    assert graph["pkg.low.part"] == set()  # its own package is loaded before it: no arrow
    assert layer_violations(graph, layers) == []
    (package / "low" / "part.py").write_text("def f():\n    import pkg.high\n")
    assert layer_violations(module_graph(package), layers) == ["pkg.low.part -> pkg.high"]
    (package / "low" / "part.py").write_text("from pkg.high import part\n")
    assert layer_violations(module_graph(package), layers) == ["pkg.low.part -> pkg.high", "pkg.low.part -> pkg.high.part"]
    assert layer_violations(module_graph(package), [{"low"}, {"high"}]) == ["pkg is in no layer", "pkg.low.part -> pkg.high",
                                                                            "pkg.low.part -> pkg.high.part"]


@pytest.mark.slow
def test_the_network_imports_none_of_its_users():
    """embedeval.net is shared by the API embedders, the chat client and the corpus downloads: its
    imports point away from them (embedders -> net, llm -> net, corpus -> net), never back."""
    graph = module_graph(REPO_ROOT / "embedeval")
    net = {name: edges for name, edges in graph.items() if name.startswith("embedeval.net")}
    assert "embedeval.net.retry" in net and "embedeval.net.fetch" in graph["embedeval.corpus"]
    users = ("embedeval.embedders", "embedeval.llm", "embedeval.corpus")
    assert {name: sorted(e for e in edges if e.startswith(users)) for name, edges in net.items()
            if any(e.startswith(users) for e in edges)} == {}


def test_a_cycle_hidden_in_a_function_is_found(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "low.py").write_text("def f():\n    from pkg.sub import high\n")
    (package / "sub" / "high.py").write_text("from .. import low\n")
    graph = module_graph(package)
    assert graph["pkg.low"] == {"pkg.sub.high", "pkg.sub"} and graph["pkg.sub.high"] == {"pkg.low"}
    assert find_cycle(graph) in (["pkg.low", "pkg.sub.high", "pkg.low"], ["pkg.sub.high", "pkg.low", "pkg.sub.high"])
    (package / "low.py").write_text("")
    assert find_cycle(module_graph(package)) is None


@pytest.mark.slow
def test_package_modules_import_each_other_at_the_top():
    """Inside functions only third-party heavyweights are imported (torch, chromadb, faiss,
    matplotlib, API clients); an embedeval import there could hide a cycle. The command line
    (the package embedeval.cli) and the lazy ``__getattr__`` of the packages ``embedeval``,
    ``embedeval.embedders``, ``embedeval.experiments`` and ``embedeval.strategies`` defer loading on purpose (the cycle test
    above still sees their edges)."""
    hidden = []
    for path in sorted((REPO_ROOT / "embedeval").rglob("*.py")):
        lazy_package = path.name == "__init__.py" and path.parent.name in ("embedeval", "embedders", "experiments", "strategies")
        if path.parent == REPO_ROOT / "embedeval" / "cli" or lazy_package:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and id(node) not in top and (node.module or "").startswith("embedeval"):
                hidden.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno} {node.module}")
    assert hidden == []


def _constants(path: Path) -> list[ast.Constant]:
    """The string constants of a module that are not docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [node for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings]


LIBRARY = [p for p in (REPO_ROOT / "embedeval").rglob("*.py") if p.parent != REPO_ROOT / "embedeval" / "cli"]


def test_library_errors_name_parameters_not_flags():
    """A user of the Python API is told about ``umap.min_dist``, not ``--umap-min-dist``; the CLI
    translates (cli.options.in_flag_words)."""
    import re

    flag = re.compile(r"(^|[\s(`'\"])--[a-z]")
    found = []
    for path in LIBRARY:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and node.exc is not None:
                found += [f"{path.name}:{node.lineno}: {sub.value!r}" for sub in ast.walk(node.exc)
                          if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and flag.search(sub.value)]
    assert not found, found


@pytest.mark.slow
def test_only_run_py_names_the_run_directory_files():
    """embedeval.run owns the run directory: no other module spells its files' names as paths."""
    from embedeval import run

    names = {run.HAYSTACKS, run.HAYSTACK_SETTINGS, run.SIMILARITIES, run.RETRIEVAL, run.METRICS, run.BREAKS}
    assert names == {"haystacks.parquet", "haystacks.json", "similarities.parquet", "retrieval.parquet", "metrics.csv", "breaks.csv"}
    found = [f"{path.relative_to(REPO_ROOT)}:{node.lineno}: {node.value}" for path in (REPO_ROOT / "embedeval").rglob("*.py")
             if path.name != "run.py" for node in _constants(path) if node.value in names]
    assert not found, found


@pytest.mark.slow
def test_only_mteb_task_imports_mteb_and_nothing_imports_it():
    """``mteb`` is an optional extra: embedeval.mteb_task may import it at its top, no other module
    imports mteb or embedeval.mteb_task (so the package runs without the extra)."""
    graph = module_graph(REPO_ROOT / "embedeval")
    assert "embedeval.mteb_task" in graph
    assert [name for name, edges in graph.items() if "embedeval.mteb_task" in edges] == []
    importing = []
    for path in sorted((REPO_ROOT / "embedeval").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(n == "mteb" or n.startswith("mteb.") for n in names):
                importing.append(path.name)
    assert sorted(set(importing)) == ["mteb_task.py"]


def test_docstrings_cite_files_a_clone_has():
    """DESIGN.md lives beside the repository, not in it: a docstring points at the docs instead."""
    cited = [f"{path.relative_to(REPO_ROOT)}" for path in sorted((REPO_ROOT / "embedeval").rglob("*.py"))
             if "DESIGN §" in path.read_text(encoding="utf-8")]
    assert cited == []


def test_ruff_finds_nothing():
    """The linter as pyproject.toml configures it (``ruff check .``), run by the suite so that CI runs it."""
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", "."], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("folder", ["benchmarks", "docs"])
def test_scripts_import_names_the_package_has(folder):
    """Every ``from embedeval... import name`` in the benchmarks and the docs' scripts names something
    the package still has (a renamed function once broke a benchmark the docs quote, unseen: the
    scripts run by hand, not in the suite)."""
    import importlib
    import importlib.util

    missing = []
    for path in sorted((REPO_ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "embedeval" and not node.level:
                module = importlib.import_module(node.module)
                submodules = getattr(module, "__path__", None) is not None
                missing += [f"{path.relative_to(REPO_ROOT)}: {node.module}.{alias.name}" for alias in node.names
                            if not hasattr(module, alias.name)
                            and not (submodules and importlib.util.find_spec(f"{node.module}.{alias.name}") is not None)]
    assert not missing

"""The :class:`~embedeval.strategies.reader.Reader` a family is handed is its whole contract with
the model: a family's reading code uses its members only, sets none of its attributes, and
:class:`~embedeval.strategies.scorers.EmbeddingScorer` has every one of them."""

from __future__ import annotations

import ast
import inspect

from embedeval.strategies import EmbeddingScorer, Strategy
from embedeval.strategies.reader import Reader

from conftest import REPO_ROOT
from fakes import CountingEmbedder

FAMILY_MODULES = sorted((REPO_ROOT / "embedeval" / "strategies").glob("*.py"))


def _reader_members() -> set[str]:
    """Reader's attributes, properties and methods (not the protocol machinery's)."""
    return {name for name in vars(Reader) if not name.startswith("_")} | set(Reader.__annotations__)


def _uses_of_reader(path) -> tuple[set[str], list[str]]:
    """The ``reader.<member>`` names a module reads, and where it assigns one."""
    used, assigned = set(), []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "reader":
            used.add(node.attr)
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                assigned.append(f"{path.name}:{node.lineno} reader.{node.attr}")
    return used, assigned


def test_families_use_exactly_the_readers_members_and_set_none():
    members = _reader_members()
    used, assigned = set(), []
    for path in FAMILY_MODULES:
        module_used, module_assigned = _uses_of_reader(path)
        used |= module_used
        assigned += module_assigned
    assert "cut_consecutive" in used and "set_capacity" in used  # the walk sees the families' calls
    assert sorted(used - members) == [] and sorted(members - used) == []  # exactly what the families use
    assert assigned == []


def test_the_embedding_scorer_has_every_member_of_the_reader():
    scorer = EmbeddingScorer(CountingEmbedder(), Strategy("truncate"))
    assert sorted(name for name in _reader_members() if not hasattr(scorer, name)) == []
    for name, method in vars(Reader).items():
        if callable(method) and not name.startswith("_"):  # the same parameters, in the same order
            assert list(inspect.signature(method).parameters)[1:] == list(inspect.signature(getattr(scorer, name)).parameters), name

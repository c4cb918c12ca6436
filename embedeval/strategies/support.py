"""The checks of a run's strategies against its embedders before any model loads
(:func:`check_strategy_support`): each family's
:meth:`~embedeval.strategies.base.Family.check_support`, told by :class:`ModelFolders` what a spec's
model folder says (its positions, their width, its weights' size) without loading it."""

from __future__ import annotations

from collections.abc import Sequence

from embedeval.embedders.local import local_name
from embedeval.embedders.local_folder import folder_stretch_refusal, position_limit, position_width
from embedeval.embedders.models import resolve_model_path, weight_file_bytes
from embedeval.embedders.options import LocalOptions, split_spec
from embedeval.embedders.registry import LEXICAL_SPECS
from embedeval.errors import EmbedevalError
from embedeval.strategies.base import FAMILIES, Strategy


class ModelFolders:
    """What a spec's model says before it loads, for the support checks of
    :meth:`~embedeval.strategies.base.Family.check_support`."""

    @staticmethod
    def lexical(spec: str) -> bool:
        """Whether ``spec`` is a lexical scorer (it reads whole texts, every strategy aside)."""
        return spec in LEXICAL_SPECS

    @staticmethod
    def stretch_refusal(spec: str, stretch) -> tuple[str, str | None, int | None]:
        """``(name, why, P)`` of the ``st:`` ``spec``'s model folder: the model's name as refusals
        give it, why ``stretch`` does not fit it (a folder that names no positions, a backend other
        than torch, a method for another position type where the folder says which it has:
        :func:`~embedeval.embedders.local_folder.folder_stretch_refusal`; None: nothing known against it)
        and, where nothing is, its positions ``P`` (:func:`~embedeval.embedders.local_folder.position_limit`)."""
        name, query = split_spec(spec.partition(":")[2])
        options = LocalOptions.parse(query)
        path = resolve_model_path(name)
        limit = position_limit(path)
        why = folder_stretch_refusal(path, options, stretch, limit)
        return local_name(name, options), why, None if why else limit[0]

    @staticmethod
    def width(spec: str) -> int | None:
        """The width of the ``st:`` ``spec``'s position vectors as its folder says it
        (:func:`~embedeval.embedders.local_folder.position_width`; None where it does not, or for a model
        that is no folder here)."""
        try:
            path = resolve_model_path(split_spec(spec.partition(":")[2])[0])
        except EmbedevalError:
            return None
        return position_width(path)

    @staticmethod
    def weight_bytes(spec: str) -> int:
        """The size on disk of the ``st:`` ``spec``'s weight files
        (:func:`~embedeval.embedders.models.weight_file_bytes`; 0 for a model that is no folder here)."""
        try:
            return weight_file_bytes(resolve_model_path(split_spec(spec.partition(":")[2])[0]))
        except (EmbedevalError, OSError):
            return 0


def check_strategy_support(specs: Sequence[str], strategies: Sequence[Strategy], executor: str = "local") -> None:
    """Refuse, before any model is loaded, a strategy an embedder cannot do (each family's
    :meth:`~embedeval.strategies.base.Family.check_support`: late chunking needs a local ``st:``
    model on the local executor or a ``jina:`` model; context extension a local ``st:`` model on
    the local executor, whose folder does not rule the method or length out)."""
    for family in FAMILIES:
        own = [strategy for strategy in strategies if strategy.family is family]
        if own:
            family.check_support(list(specs), own, executor, ModelFolders)

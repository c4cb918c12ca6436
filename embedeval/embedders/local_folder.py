"""What a local model's folder says about its model without loading the weights.

Its positions (:func:`position_limit`, :func:`position_width`: from ``config.json`` and the headers
of its weights), whether a context extension can read past them (:func:`folder_stretch_refusal`),
and, for a folder plain enough, every fact the pipeline asks of the loaded model
(:func:`folder_facts`: dimension, window, special and prompt ids, pooling), so that a plan of the
bundled model counts without the weights. :mod:`embedeval.embedders.local` is the model itself.
"""

from __future__ import annotations

from pathlib import Path

from embedeval.embedders import stretch as stretching
from embedeval.embedders.base import KINDS, Kind
from embedeval.embedders.models import weight_shapes
from embedeval.embedders.options import LocalOptions
from embedeval.embedders.tokens import TokenCounter
from embedeval.errors import ConfigError, InputError, UnknownEmbedderError
from embedeval.jsonread import load_file

#: The end of the name of a transformer's table of absolute positions (BERT, RoBERTa, ...).
POSITION_TABLE = "position_embeddings.weight"


def position_limit(path: str) -> tuple[int, str] | None:
    """The longest input a model folder's positions allow, and where that was read: the rows of its
    table of absolute positions (:data:`POSITION_TABLE`, from the weights' headers: the table
    that fails on a longer input), else its transformer config's ``max_position_embeddings``;
    None when the folder says neither (rotary positions with no config value, a hub name). A
    ``config.json`` that is not a JSON object, or weights that do not open, is one
    :class:`~embedeval.errors.UnknownEmbedderError`."""
    config = Path(path) / "config.json"
    try:
        settings = load_file(config)
    except (OSError, ValueError):
        settings = {}  # no config here (a hub name), or one the loader will name as broken
    if not isinstance(settings, dict):
        raise UnknownEmbedderError(f"cannot load local model {path!r}: {config} holds a JSON {type(settings).__name__}, not an object")
    tables = [(shape[0], name) for name, shape in weight_shapes(path).items() if name.endswith(POSITION_TABLE) and shape]
    limit = settings.get("max_position_embeddings")
    if tables:
        rows, name = min(tables)
        if isinstance(limit, int) and not isinstance(limit, bool) and limit != rows:
            raise UnknownEmbedderError(f"cannot load local model {path!r}: its {config} says max_position_embeddings {limit}, "
                                       f"but its weights' position table {name} has {rows} rows; set max_position_embeddings "
                                       f"to {rows} in {config} (the weights decide)")
        return rows, f"the rows of its position table {name}"
    return (limit, f"max_position_embeddings in {config}") if isinstance(limit, int) and not isinstance(limit, bool) else None


def position_width(path: str) -> int | None:
    """The width of a model folder's position vectors: the columns of its table of absolute
    positions (:data:`POSITION_TABLE`, from the weights' headers), else its config's
    ``hidden_size``; None when the folder says neither (what ``extend-pi@L``'s stretched table is
    as wide as: :func:`embedeval.bounds.position_table_bytes`)."""
    widths = [shape[1] for name, shape in weight_shapes(path).items() if name.endswith(POSITION_TABLE) and len(shape) == 2]
    if widths:
        return max(widths)
    hidden = _folder_config(path).get("hidden_size")
    return hidden if isinstance(hidden, int) and not isinstance(hidden, bool) and hidden > 0 else None


def check_window(path: str, max_seq_length: int | None) -> tuple[int, str] | None:
    """One :class:`~embedeval.errors.ConfigError` when ``max_seq_length`` exceeds the model's
    position limit (:func:`position_limit`), before any weights are loaded (a broken config or
    weights file: one :class:`~embedeval.errors.UnknownEmbedderError`). Returns the limit it read,
    so that the caller checks and stretches against this one reading."""
    limit = position_limit(path)
    if max_seq_length is not None and limit is not None and max_seq_length > limit[0]:
        raise ConfigError(f"`max_seq_length` {max_seq_length} is over the model's position limit of {limit[0]} tokens "
                          f"({limit[1]})", "max_seq_length")
    return limit


#: Transformer configs (``model_type`` in config.json) whose table of absolute positions counts
#: from 0, so that a table in the weights means BERT-style absolute positions
#: (:func:`embedeval.embedders.stretch.position_type` says ``absolute`` once the model is loaded).
ABSOLUTE_TABLE_MODEL_TYPES = ("bert",)


def _folder_config(path: str) -> dict:
    """The model folder's ``config.json`` as a dict ({} where there is none or it is not an object:
    :func:`position_limit` names a broken one)."""
    try:
        settings = load_file(Path(path) / "config.json")
    except (OSError, ValueError):
        return {}
    return settings if isinstance(settings, dict) else {}


def folder_stretch_refusal(path: str, options: LocalOptions, stretch: stretching.Stretch,
                           limit: tuple[int, str] | None) -> str | None:
    """Why ``stretch`` cannot read the model folder ``path`` past its positions, as far as the
    folder says without loading any weights (its config.json and the headers of its weights), or
    None where it does not say (the loaded model decides then: :meth:`~embedeval.embedders.local.SentenceTransformerEmbedder.stretch_refusal`).
    ``limit``: the folder's :func:`position_limit`. A folder that names no position limit, a
    backend other than torch, and a rotary method on a BERT-type model whose weights hold a table
    of absolute positions are refused here, with the words the loaded model would use."""
    if limit is None:
        return ("its folder names no position limit (no position table in its weights, no max_position_embeddings "
                "in its config), so there is nothing to stretch past")
    if options.backend != "torch":
        return f"context extension runs on the torch backend, not {options.backend}"
    if stretch.position_type == stretching.ABSOLUTE:
        return None  # whether the positions are BERT-style (a table counting from 0) is the loaded model's to say
    config = _folder_config(path)
    if (config.get("model_type") in ABSOLUTE_TABLE_MODEL_TYPES
            and config.get("position_embedding_type", stretching.ABSOLUTE) in (None, stretching.ABSOLUTE)
            and any(name.endswith(POSITION_TABLE) for name in weight_shapes(path))):
        return stretching.type_refusal(stretching.ABSOLUTE, stretch)
    return None


#: The modules of a folder whose facts :func:`folder_facts` reads: a transformer, mean pooling,
#: and a normalisation or nothing after it (all-MiniLM-L6-v2's).
_PLAIN_MODULES = (("sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling"),
                  ("sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
                   "sentence_transformers.models.Normalize"))


def _folder_json(path: str, name: str):
    try:
        return load_file(Path(path) / name)
    except (OSError, ValueError):
        return None


def special_ids(counter: TokenCounter, framed: list[int]) -> tuple[list[int], list[int]]:
    """The special tokens a tokenizer puts before and after a single text ([CLS] / [SEP], <s> /
    </s>): around the content ids of "a" (``counter``'s) in ``framed``, "a" tokenised with them."""
    probe = counter.ids(["a"])[0][0]
    at = next(i for i in range(len(framed)) if framed[i : i + len(probe)] == probe)
    return framed[:at], framed[at + len(probe):]


def prompt_ids(counter: TokenCounter, prompt: str, kind: Kind, name: str) -> list[int]:
    """Content ids of a model's ``prompt`` for ``kind`` as they come out when the prompt is
    tokenised together with a text (as ``encode`` does): the tokens that start inside the prompt.
    Checked on a probe text: if prompt ids + text ids differ from the joint tokenisation, ids cannot
    reproduce ``encode`` for the model (``name``) and an :class:`InputError` says so."""
    if not prompt:
        return []
    probe = "The probe sentence checks how the prompt joins the text."
    (joint, offsets), = counter.ids([prompt + probe])
    ids = [i for i, (start, _) in zip(joint, offsets, strict=True) if start < len(prompt)]
    if ids + counter.ids([probe])[0][0] != joint:
        raise InputError(f"{name}'s {kind} prompt {prompt!r} does not tokenise apart from the text, "
                         "so windows on token ids cannot match the model's own encode; use `strategies` truncate", "strategies")
    return ids


def folder_facts(path: str, options: LocalOptions, counter: TokenCounter, name: str) -> dict | None:
    """A model's facts (:meth:`~embedeval.embedders.local.SentenceTransformerEmbedder._live_facts`) but its fingerprint, read
    from its folder and its tokenizer (``counter``) without loading the weights, where the folder is
    plain enough to say them (:data:`_PLAIN_MODULES`, a ``max_seq_length`` of its own, no
    lowercasing or default prompt of sentence-transformers' own, one pooling mode); None where it is
    not. A plan of the bundled model uses them while none of its vectors is cached; a test checks
    them against the loaded model's."""
    modules, bert_config = _folder_json(path, "modules.json"), _folder_json(path, "sentence_bert_config.json") or {}
    pooling = _folder_json(path, "1_Pooling/config.json") or {}
    settings = _folder_json(path, "config_sentence_transformers.json") or {}
    kinds = tuple(m.get("type") for m in modules) if isinstance(modules, list) and all(isinstance(m, dict) for m in modules) else ()
    window = options.max_seq_length or bert_config.get("max_seq_length")
    modes = [key for key, on in pooling.items() if key.startswith("pooling_mode_") and on is True]
    prompts = settings.get("prompts") or {}
    if (kinds not in _PLAIN_MODULES or not isinstance(window, int) or bert_config.get("do_lower_case")
            or modes != ["pooling_mode_mean_tokens"] or settings.get("default_prompt_name") or not isinstance(prompts, dict)):
        return None
    by_kind: dict[str, list[int] | str] = {}
    for kind in KINDS:
        try:
            by_kind[kind] = prompt_ids(counter, prompts.get(kind) or "", kind, name)
        except InputError as exc:
            by_kind[kind] = str(exc)
    limit = position_limit(path)
    return {"dim": int(pooling["word_embedding_dimension"]), "max_tokens": window,
            "special_ids": list(special_ids(counter, counter.framed_ids("a"))), "prompt_ids": by_kind, "tokenizer": counter.fingerprint,
            "pooling": {"mode": "mean", "after": ["Normalize"] if len(kinds) == 3 else []},
            "stretch_refusals": {stretch.name: folder_stretch_refusal(path, options, stretch, limit) for stretch in stretching.Stretch.every()}}


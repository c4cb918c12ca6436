"""How a long text is read (docs/strategies.md): one module per strategy family, each a
:class:`~embedeval.strategies.base.Family` that registers itself, and the registry's answers every
other part of embedeval asks (the command line's help and checks, the report's words, the
decision table, the breaks' base):

- :mod:`~embedeval.strategies.truncate`: ``truncate``, the model's own window;
- :mod:`~embedeval.strategies.windows`: ``windows-mean``, the mean of window vectors;
- :mod:`~embedeval.strategies.chunks`: ``chunks-max@C``, the best chunk, as a RAG retriever;
- :mod:`~embedeval.strategies.late`: ``late-chunking@C``, chunks pooled from one pass per window;
- :mod:`~embedeval.strategies.full_text`: ``full-text``, how a lexical scorer reads (a label only);
- :mod:`~embedeval.strategies.extend`: context extension, ``extend-*@L`` and ``rope-*@L``.

What a family reads with is the :class:`~embedeval.strategies.reader.Reader` protocol
(:mod:`~embedeval.strategies.reader`). Importing this package imports nothing heavy. The reading
itself is loaded when one of its names is first asked for here: the :class:`Scorer` protocol and
:class:`Scores` (:mod:`~embedeval.strategies.scoring`), :class:`EmbeddingScorer` and
:func:`load_scorers` (:mod:`~embedeval.strategies.scorers`), the lexical baseline
(:mod:`~embedeval.strategies.bm25`), the tokenisation memo (:mod:`~embedeval.strategies.token_memo`)
and the support checks (:mod:`~embedeval.strategies.support`).
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral

from embedeval.defaults import DEFAULT_CHUNK_TOKENS, DEFAULT_LATE_CHUNKING_OVERLAP, DEFAULT_STRATEGIES, DEFAULT_WINDOW_OVERLAP
from embedeval.errors import ConfigError

# each module registers its family; the order is --help's and the model readings' (truncate first)
from embedeval.strategies import truncate, windows, chunks, late, full_text, extend  # noqa: F401  # isort: skip
from embedeval.strategies.base import (
    FAMILIES,
    PLAIN,
    Family,
    Strategy,
    chunking_names,
    families,
    family_of_entry,
    family_of_label,
    piece_bounds,
    register,
    strategy_names,
)
from embedeval.strategies.parameters import Parameter, ReadSettings

__all__ = [
    "FAMILIES", "PLAIN", "Family", "Parameter", "Strategy", "families", "family_of_label", "is_written_label", "model_reading_count",
    "model_reading_rank", "move_words",
    "glossary", "parameter_table", "parse_strategies", "piece_bounds", "reading_mode", "register", "scores_chunks", "setting_help", "strategy_choices",
    "strategy_names",
    "vectors_per_document",
]


def strategy_choices() -> dict[str, str]:
    """Each strategy as ``--strategy`` takes it and what it does (``embedeval embedders`` and
    ``--help`` list them), in the registry's order: a plugin that cannot be loaded is refused where
    a strategy is read, not in the help."""
    return {written: what for family in families(strict=False) if family.selectable for written, what in family.listed_choices().items()}


def setting_help(setting: str) -> str:
    """The ``--help`` of a run setting the families read: each family's words for it
    (:attr:`~embedeval.strategies.base.Family.settings_help`); the chunk sizes as one sentence
    ("Comma-separated chunk sizes for chunks-max, in ..., and for late-chunking, in ...")."""
    words = [family.settings_help[setting] for family in families(strict=False) if setting in family.settings_help]
    if setting == "chunk_tokens":
        return "Comma-separated chunk sizes for " + ", and for ".join(words) + "."
    return " ".join(words)


def glossary() -> str:
    """What the strategy labels mean, as the report's chunk-size section says it: each family's
    :attr:`~embedeval.strategies.base.Family.glossary`, in the registry's order."""
    return ", ".join(family.glossary for family in families() if family.glossary)


#: The run's settings a parameter may be read from (:attr:`~embedeval.strategies.base.Parameter.setting`), by the
#: option that gives them.
SETTING_OPTIONS = {"chunk_tokens": "--chunk-tokens", "window": "--window-overlap", "late": "--late-overlap"}


def parameter_table() -> str:
    """The families' parameters as docs/strategies.md lists them, one Markdown row per
    :class:`~embedeval.strategies.base.Parameter` of each registered family: the names it goes
    with, how the label writes it, the run setting that gives it otherwise, its default, its
    bounds and what it is."""
    rows = ["| strategy | parameter | in the label | else from | default | values | what it is |", "|---|---|---|---|---|---|---|"]
    for family in families():
        for parameter in family.parameters:
            names = ", ".join(f"`{name}`" for name in family.names)
            written = f"`{parameter.written}`" if parameter.mark else "–"
            setting = f"`{SETTING_OPTIONS.get(parameter.setting, parameter.setting)}`" if parameter.setting else "–"
            default = "–" if parameter.default is None else f"`{str(parameter.default).lower()}`"
            values = ("true, false" if parameter.kind is bool else "any whole number" if parameter.minimum is None else
                      f"≥ {parameter.minimum:,}" if parameter.maximum is None else f"{parameter.minimum:,} to {parameter.maximum:,}")
            rows.append(f"| {names} | `{parameter.name}` | {written} | {setting} | {default} | {values} | {parameter.help} |")
    return "\n".join(rows) + "\n"


def parse_strategies(names: Sequence[str] = DEFAULT_STRATEGIES, chunk_tokens: Sequence[int] = DEFAULT_CHUNK_TOKENS,
                     window_overlap: int = DEFAULT_WINDOW_OVERLAP,
                     late_overlap: int = DEFAULT_LATE_CHUNKING_OVERLAP) -> list[Strategy]:
    """The strategies a run asks for: a family that takes chunk sizes (``chunks-max``,
    ``late-chunking``) becomes one strategy per size, or one for ``name@C``; ``window_overlap`` goes
    to ``windows-mean``, ``late_overlap`` to ``late-chunking``; context extension is named with its
    length (``extend-gp@4096``). Unknown names, repeats (two spellings of one strategy too), chunk
    sizes < 1 and a negative overlap are a :class:`ConfigError`."""
    names = list(names)
    if not names:
        raise ConfigError("no strategies given")
    odd = next((name for name in names if not isinstance(name, str)), None)
    if odd is not None:  # a number was an AttributeError in the registry
        raise ConfigError(f"strategies are names such as truncate or chunks-max@128, not {odd!r}", "strategies")
    families = [family_of_entry(name) for name in names]
    for option, overlap in (("window", window_overlap), ("late-chunking", late_overlap)):
        if isinstance(overlap, bool) or not isinstance(overlap, Integral):  # NaN, 2.5 or True: checked when no strategy reads it too
            raise ConfigError(f"{option} overlap must be a whole number of tokens, not {overlap!r}")
        if overlap < 0:
            raise ConfigError(f"{option} overlap must be >= 0 tokens, not {overlap}")
    sizes = list(chunk_tokens)
    whole = all(isinstance(c, Integral) and not isinstance(c, bool) for c in sizes)
    if any(family.asks_chunk_sizes(name) for family, name in zip(families, names, strict=True)):
        if not sizes:
            raise ConfigError(f"{' and '.join(chunking_names())} need at least one chunk size (`chunk_tokens`)", "chunk_tokens")
        if not (whole and all(c >= 1 for c in sizes)) or len(set(sizes)) != len(sizes):
            raise ConfigError(f"chunk sizes must be distinct positive token counts, not {sizes}")
    elif not whole:  # unread, but no token count either (NaN was int()'s ValueError), as --chunk-tokens refuses it
        raise ConfigError(f"chunk sizes are whole numbers of tokens, not {sizes}", "chunk_tokens")
    settings = ReadSettings(tuple(int(c) for c in sizes), {"window": window_overlap, "late": late_overlap})
    out = [strategy for family, name in zip(families, names, strict=True) for strategy in family.parse(name, settings)]
    # repeats compared by label, so that two spellings of one strategy (extend-gp@1024, extend-gp@01024) are one
    labels = [strategy.label for strategy in out]
    if len(set(labels)) != len(labels):
        twice = next(label for label in labels if labels.count(label) > 1)
        raise ConfigError(f"strategy {twice} given twice in {', '.join(names)}")
    return out


def is_written_label(label) -> bool:
    """Whether ``label`` is a table's ``strategy`` value exactly as a registered family writes it
    (``truncate``, ``chunks-max@128``, ``extend-gp@4096+logscale``, ``full-text``): not a label no
    family writes, nor one a family's prefix starts but whose number it would not write
    (``chunks-max@0``, ``chunks-max@0128``, ``late-chunking@``, ``extend-gp@1e3``), nor a cell that is
    no text (a number, NaN). A run's tables are checked with it when they are opened, so a
    hand-edited label is one line, not a traceback where the report first reads it."""
    if not isinstance(label, str):
        return False
    family = family_of_label(label)
    if family is None:
        return False
    try:
        read = family.parse(label, ReadSettings((), {}))
    except ConfigError:
        return False
    return len(read) == 1 and read[0].label == label


def model_reading_rank(label) -> int | None:
    """Where a strategy label stands among the readings that read a text inside the model's window
    as the model reads it itself, most direct first across the registry (0 = ``truncate``, then
    ``windows-mean``, ``full-text``, the context extensions); None for a strategy that reads short
    texts otherwise (chunks, late chunking) or a label no family writes."""
    label, offset = str(label), 0
    for family in families():
        rank = family.model_reading_rank(label) if family.owns_label(label) else None
        if rank is not None:
            return offset + rank
        offset += len(family.model_readings)
    return None


def model_reading_count() -> int:
    """How many model readings the registry has: a rank past every :func:`model_reading_rank`."""
    return sum(len(family.model_readings) for family in families())


def scores_chunks(label) -> bool:
    """Whether a strategy label scores a text by its best chunk (``chunks-max@C``,
    ``late-chunking@C``): its length is the document's, not a chunk's."""
    family = family_of_label(label)
    return family is not None and family.scores_chunks


def vectors_per_document(label, length: int, frame_tokens: int = 0) -> int:
    """The vectors a retriever stores for one document of ``length`` content tokens read by
    ``label``: one for a strategy that gives a document one vector (``truncate``, ``windows-mean``,
    ``extend-*@L``, ``rope-*@L``, a lexical scorer's ``full-text``, a label no family writes),
    one per chunk for one that keeps a vector per chunk: ``ceil(length / (C - frame_tokens))`` for
    ``chunks-max@C``, whose ``C`` counts the model's ``frame_tokens`` (special tokens and prompt
    per input), ``ceil(length / C)`` for ``late-chunking@C``, whose ``C`` counts content tokens."""
    family = family_of_label(label)
    return 1 if family is None else family.vectors_per_document(str(label), length, frame_tokens)


def reading_mode(label) -> str:
    """Which of a model's speeds a strategy's cost reads: :data:`PLAIN` for inputs of at most the
    model's window (``truncate``, ``windows-mean``, ``chunks-max@C``), the label itself for a model
    pass of another kind (``late-chunking@C``, ``extend-*@L``, ``rope-*@L``)."""
    label = str(label)
    family = family_of_label(label)
    if family is None:
        return label if "@" in label else PLAIN
    return family.reading_mode(label)


def move_words(label) -> str:
    """What reading a document by ``label`` instead does, in words ("late chunking
    (`late-chunking@128`)"); a label no family writes as it is."""
    family = family_of_label(label)
    return f"`{label}`" if family is None else family.move_words(str(label))


#: The reading's names (numpy and the embedders) -> their module, loaded when first asked for.
_READING = {
    **dict.fromkeys(("EmbeddedTexts", "EmbeddingScorer", "distinct_rows", "load_scorers", "segment_starts", "shortfalls"),
                    "scorers"),
    **dict.fromkeys(("Reading", "ScoredTexts", "Scorer", "Scores"), "scoring"),
    "TokenMemo": "token_memo",
    "check_strategy_support": "support",
}


def __getattr__(name: str):
    """The reading's names (:data:`_READING`: numpy and the embedders), loaded when first asked for."""
    if name not in _READING:
        raise AttributeError(f"module 'embedeval.strategies' has no attribute {name!r}")
    from embedeval.strategies import scorers, scoring, support, token_memo
    return getattr({"scorers": scorers, "scoring": scoring, "support": support, "token_memo": token_memo}[_READING[name]], name)

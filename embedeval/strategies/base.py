"""What a long-text strategy is (docs/strategies.md): :class:`Strategy`, one way of reading long
texts as a run asks for it (``chunks-max@128``), and :class:`Family`, the class a strategy family's
module defines to say everything about it — its names and help, how it is parsed and labelled, what
it needs from an embedder, how it cuts a text into pieces and combines their vectors, what it
stores per document and what its reading costs. A family registers itself (:func:`register`); the
command line's help and checks, ``embedeval embedders``, the report's words, the decision table and
the support checks all ask the registry, so a new strategy is one module in this package.

This module and the family modules import nothing heavy (the command line builds its help from
them); the reading itself (numpy, the embedders) is in :mod:`embedeval.strategies.scorers`, which
hands each family a :class:`~embedeval.strategies.reader.Reader` (an
:class:`~embedeval.strategies.scorers.EmbeddingScorer`) with the primitives it cuts and embeds with.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import ClassVar

from embedeval.errors import ConfigError
from embedeval.strategies.reader import Pieces, Reader

#: :meth:`Family.reading_mode` of a strategy whose inputs are at most the model's window, read as
#: the model reads them (one speed per model, measured on all of them).
PLAIN = "plain"


def piece_bounds(n_tokens: int, size: int, step: int) -> list[tuple[int, int]]:
    """Token ranges ``[start, end)`` of consecutive pieces of ``size`` tokens, each starting
    ``step`` after the previous, covering ``n_tokens`` (at least one piece, even when empty)."""
    if n_tokens <= size:
        return [(0, n_tokens)]
    overlap = size - step
    return [(start, min(start + size, n_tokens)) for start in range(0, n_tokens - overlap, step)]


def whole_number(text: str) -> bool:
    """Whether ``text`` is a whole number written in ASCII digits (``0128`` too)."""
    return text.isascii() and text.isdigit()


@dataclass(frozen=True)
class ReadSettings:
    """The run's settings a family parses its strategies with: the chunk sizes (``--chunk-tokens``)
    and the window overlaps by :attr:`Family.overlap_setting` (``window``, ``late``)."""

    chunk_tokens: tuple[int, ...]
    overlaps: dict[str, int]


@dataclass(frozen=True)
class Strategy:
    """One way of reading long texts: a family's name and its parameters. ``label`` is the table's
    ``strategy`` value (``truncate``, ``windows-mean``, ``chunks-max@128``, ``late-chunking@128``,
    ``extend-gp@4096``, ``extend-pi@4096+logscale``); the family (:attr:`family`) checks the
    parameters and does the reading."""

    name: str
    chunk_tokens: int | None = None  # families that take a chunk size only
    #: Tokens shared by neighbouring windows (None: the family's default, :attr:`Family.overlap_default`;
    #: 0 for a family without one).
    overlap: int | None = None
    #: Families that read a set length in one pass only: the tokens read (``L``), and whether
    #: attention logits are scaled past the model's positions.
    read_tokens: int | None = None
    logscale: bool = False

    def __post_init__(self) -> None:
        family = family_named(self.name)
        if self.overlap is None:
            object.__setattr__(self, "overlap", family.overlap_default or 0)
        for field in ("chunk_tokens", "overlap", "read_tokens"):  # 1.5, NaN, True or "128" would be written into labels
            value = getattr(self, field)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, Integral):
                raise ConfigError(f"a strategy's {field} is a whole number of tokens, not {value!r}")
            object.__setattr__(self, field, int(value))
        if not isinstance(self.logscale, bool):
            raise ConfigError(f"a strategy's logscale is true or false, not {self.logscale!r}")
        family.check_parameters(self)

    @property
    def family(self) -> Family:
        return family_named(self.name)

    @property
    def label(self) -> str:
        return self.family.label(self)

    @property
    def one_piece(self) -> bool:
        """Whether a text is read as one piece, its start (``truncate`` and context extension)."""
        return self.family.one_piece

    @property
    def stretch(self):
        """How the model reads past its positions (:class:`~embedeval.embedders.stretch_methods.Stretch`),
        None for a strategy that reads within them."""
        return self.family.stretch(self)

    @classmethod
    def parse(cls, text: str) -> Strategy:
        """One strategy from its label (``chunks-max@128``, ``extend-gp@4096+logscale``), the
        run's default settings for anything the label does not name."""
        strategies = family_of_entry(text).parse(text, ReadSettings((), {}))
        if len(strategies) != 1:
            raise ConfigError(f"strategy {text!r} names no chunk size: write {text}@C", "strategies")
        return strategies[0]

    stretched = parse  # ``Strategy.stretched("extend-gp@4096")``, as the context-extension code reads


class Family:
    """A strategy family: everything the rest of embedeval asks about a way of reading long texts.
    A subclass declares its names and help and overrides what it does otherwise than the default,
    which reads a text in consecutive pieces (``cut``), embeds each distinct piece once
    (``embed``), scores a text by its best piece and keeps one vector per piece.

    Class attributes:

    - ``names``: what ``--strategy`` takes (before any ``@``); ``choices``: the ``--help`` and
      ``embedeval embedders`` lines, as written -> what it does; ``hint``: how to write the family
      with its number, for the unknown-name error (``chunks-max@C``).
    - ``one_piece``: a text is read as one piece, its start; ``scores_chunks``: a text's score is
      its best chunk's and its table length is the document's (a chunk-size recommendation reads
      it); ``model_readings``: labels (or label prefixes ending in ``@``) that read a text inside
      the model's window as the model reads it itself, most direct first (the base every strategy
      of an embedder is held to, :mod:`embedeval.breaks`).
    - ``text_margins``: how many :data:`~embedeval.defaults.TEXT_FIT_MARGIN` s a text-fed model's
      inputs keep below its window (1: the embedder's own cut; 2: windows cut apart and re-read).
    - ``overlap_setting`` / ``overlap_default``: the run setting that gives the family's window
      overlap (``window``, ``late``) and the overlap when none is given (None: takes none).
    - ``takes_chunk_size``: one strategy per ``--chunk-tokens`` size, ``name@C`` for one size.
    - ``words``: what reading a document by the family does, in the report's sentences;
      ``glossary``: what its labels mean, in the report's chunk-size section ("" : not listed there).
    - ``settings_help``: per run setting the family reads (``window_overlap``, ``late_overlap``,
      ``chunk_tokens``), what it means for the family: the settings' ``--help``
      (:func:`embedeval.strategies.setting_help`).
    """

    names: ClassVar[tuple[str, ...]] = ()
    choices: ClassVar[dict[str, str]] = {}
    hint: ClassVar[str] = ""
    selectable: ClassVar[bool] = True
    one_piece: ClassVar[bool] = False
    scores_chunks: ClassVar[bool] = False
    model_readings: ClassVar[tuple[str, ...]] = ()
    text_margins: ClassVar[int] = 2
    overlap_setting: ClassVar[str | None] = None
    overlap_default: ClassVar[int | None] = None
    takes_chunk_size: ClassVar[bool] = False
    words: ClassVar[str] = ""
    glossary: ClassVar[str] = ""
    settings_help: ClassVar[dict[str, str]] = {}
    reads_length: ClassVar[bool] = False  # context extension: ``name@L`` reads L tokens in one pass

    # -- naming ---------------------------------------------------------------------------------

    def takes(self, entry: str) -> bool:
        """Whether ``entry`` (a ``--strategy`` value) names this family."""
        head, at, _ = entry.partition("@")
        return entry in self.names or (bool(at) and head in self.names and self.takes_chunk_size)

    def parse(self, entry: str, settings: ReadSettings) -> list[Strategy]:
        """The strategies ``entry`` asks for: one per chunk size for a family that takes them
        (``chunks-max``), one for ``name@C``, else one."""
        head, at, size = entry.partition("@")
        overlap = settings.overlaps.get(self.overlap_setting) if self.overlap_setting else 0
        if not self.takes_chunk_size:
            return [Strategy(entry, overlap=overlap)]
        if not at:
            return [Strategy(head, chunk_tokens=int(c), overlap=overlap) for c in settings.chunk_tokens]
        if not (whole_number(size) and int(size) > 0):
            raise ConfigError(f"strategy {entry!r}: write {head}@C, C the chunk size in tokens (e.g. {head}@128)", "strategies")
        return [Strategy(head, chunk_tokens=int(size), overlap=overlap)]

    def asks_chunk_sizes(self, entry: str) -> bool:
        """Whether ``entry`` takes its chunk sizes from the run's ``--chunk-tokens``."""
        return self.takes_chunk_size and "@" not in entry

    def check_parameters(self, strategy: Strategy) -> None:
        """One :class:`ConfigError` for parameters the family does not take or a value out of range."""
        self.check_length(strategy)
        if self.takes_chunk_size != (strategy.chunk_tokens is not None):
            raise ConfigError(f"a chunk size goes with {' and '.join(chunking_names())}, and only with them")
        if strategy.chunk_tokens is not None and strategy.chunk_tokens < 1:
            raise ConfigError(f"chunk size must be a positive token count, not {strategy.chunk_tokens}")
        if strategy.overlap < 0 or (strategy.overlap and self.overlap_default is None):
            raise ConfigError(f"a window overlap (>= 0 tokens) goes with {' and '.join(overlapping_names())} only, "
                              f"not {strategy.overlap} for {strategy.name}")

    def check_length(self, strategy: Strategy) -> None:
        """A length to read in one pass (``@L``, ``+logscale``) goes with context extension only."""
        if strategy.read_tokens is not None or strategy.logscale:
            raise ConfigError(f"a length to read (@L) and +logscale go with {', '.join(stretching_names())}, and only "
                              f"with them (e.g. {stretching_names()[0]}@4096)")

    def label(self, strategy: Strategy) -> str:
        """The table's ``strategy`` value: the name, ``@C`` for a chunk size."""
        return strategy.name if strategy.chunk_tokens is None else f"{strategy.name}@{strategy.chunk_tokens}"

    def owns_label(self, label: str) -> bool:
        """Whether a table's ``strategy`` value was written by this family."""
        return label in self.names or (self.takes_chunk_size and label.partition("@")[0] in self.names and "@" in label)

    def stretch(self, strategy: Strategy):
        """How the model reads past its positions; None: within them."""
        return None

    # -- what the tables and the report read from a label ------------------------------------

    def model_reading_rank(self, label: str) -> int | None:
        """Where ``label`` stands among the family's :attr:`model_readings` (0 = most direct), None
        for a label that reads short texts otherwise."""
        return next((i for i, name in enumerate(self.model_readings)
                     if label == name or (name.endswith("@") and label.startswith(name))), None)

    def vectors_per_document(self, label: str, length: int, frame_tokens: int = 0) -> int:
        """The vectors a retriever stores for one document of ``length`` content tokens: one,
        unless the family keeps one per chunk (``frame_tokens``: the model's special tokens and
        prompt per input, which a chunk size counting them leaves to content less)."""
        return 1

    def reading_mode(self, label: str) -> str:
        """Which of a model's speeds the strategy's cost reads: :data:`PLAIN` for inputs of at most
        the model's window read as the model reads them, the label itself for a model pass of
        another kind."""
        return PLAIN

    def move_words(self, label: str) -> str:
        """What reading a document by ``label`` instead does, in words."""
        return f"{self.words} (`{label}`)" if self.words else f"`{label}`"

    # -- what it needs from an embedder ------------------------------------------------------

    def check_support(self, specs: Sequence[str], strategies: Sequence[Strategy], executor: str, folders) -> None:
        """Refuse, before any model loads, an embedder spec that cannot read ``strategies`` (this
        family's) on ``executor``; ``folders`` tells what a local model folder says
        (:class:`~embedeval.strategies.support.ModelFolders`). Any spec by default."""

    def prepare(self, strategy: Strategy, reader: Reader) -> None:
        """Refuse, with the model loaded, what the family cannot do with it (``reader``'s
        ``capacity`` and ``frame_tokens`` are the model's), and set what the family reads per input
        where it is not the model's own window (:meth:`~embedeval.strategies.reader.Reader.set_capacity`)."""

    # -- reading ---------------------------------------------------------------------------------

    def cut(self, strategy: Strategy, reader: Reader, texts: list[str]) -> Pieces:
        """The pieces a model reads of ``texts``: windows of the reader's capacity."""
        return reader.cut_consecutive(texts, reader.capacity, reader.capacity - strategy.overlap, limit=None)

    def embed(self, strategy: Strategy, reader: Reader, inputs: list, texts: list[str]):
        """The pieces' vectors, each distinct piece embedded once."""
        return reader.embed_pieces(inputs)

    def combine(self, strategy: Strategy, reader: Reader, vectors, pieces: Pieces, n_texts: int):
        """``(vectors, owner, spans)`` of what is scored: the pieces themselves by default (a
        text's score is its best piece's)."""
        return vectors, pieces.owner, pieces.spans

    def shortfall(self, strategy: Strategy, reader: Reader, longest: int) -> str | None:
        """A line saying ``strategy`` cannot read a ``longest``-token text whole and what would,
        where that is news (context extension's ``@L``); None otherwise."""
        return None


#: What a strategy name is (:func:`register`).
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")

#: The registered families, in the order ``--help`` lists them.
FAMILIES: list[Family] = []


def register(cls: type[Family]) -> type[Family]:
    """Class decorator: add a family to the registry (once; its names must be new, and each a name
    ``--strategy`` can take and a label can start with: letters, digits, ``-``, ``_``, ``.``, no ``@``,
    ``+``, ``,`` or space, which the labels and the command line read as separators)."""
    if not (isinstance(cls, type) and issubclass(cls, Family)):
        raise TypeError(f"register takes a Family subclass, not {cls!r}")
    names = cls.names
    if not (isinstance(names, tuple) and names and all(isinstance(n, str) and NAME.fullmatch(n) for n in names)):
        raise ValueError(f"{cls.__name__}.names must be a tuple of one or more names of letters, digits, '-', '_' and '.' "
                         f"(no '@', '+', ',' or space), not {names!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"{cls.__name__}.names repeats a name: {names!r}")
    taken = {name for family in FAMILIES for name in family.names}
    if taken & set(cls.names):
        raise ValueError(f"strategy names registered twice: {sorted(taken & set(cls.names))}")
    FAMILIES.append(cls())
    return cls


def names_where(test: Callable[[Family], bool]) -> tuple[str, ...]:
    """The names of the registered families that pass ``test``, in the registry's order."""
    return tuple(name for family in FAMILIES if test(family) for name in family.names)


def strategy_names() -> tuple[str, ...]:
    """Every name ``--strategy`` takes (before any ``@``)."""
    return names_where(lambda family: family.selectable)


def stretching_names() -> tuple[str, ...]:
    """The names of families that read a set length ``L`` in one pass (context extension)."""
    return names_where(lambda family: family.reads_length)


def chunking_names() -> tuple[str, ...]:
    """The names of families that take a chunk size (``name@C``)."""
    return names_where(lambda family: family.takes_chunk_size)


def overlapping_names() -> tuple[str, ...]:
    """The names of families whose windows overlap."""
    return names_where(lambda family: family.overlap_default is not None)


def family_named(name: str) -> Family:
    """The family of a strategy name; an unknown one is a :class:`ConfigError`."""
    family = next((family for family in FAMILIES if name in family.names), None)
    if family is None:
        raise ConfigError(f"unknown strategy {name!r}; use one of {', '.join(strategy_names())}")
    return family


def family_of_entry(entry: str) -> Family:
    """The family a ``--strategy`` value names; an unknown one is a :class:`ConfigError` saying how
    the families are written."""
    family = next((family for family in FAMILIES if family.selectable and family.takes(entry)), None)
    if family is None:
        hints = ", ".join(family.hint for family in FAMILIES if family.hint)
        raise ConfigError(f"unknown strategy {entry!r}; use one of {', '.join(strategy_names())}" + (f" ({hints})" if hints else ""))
    return family


def family_of_label(label) -> Family | None:
    """The family that wrote a table's ``strategy`` value; None for a label no family writes."""
    label = str(label)
    return next((family for family in FAMILIES if family.owns_label(label)), None)

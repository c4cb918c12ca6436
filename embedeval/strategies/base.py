"""What a long-text strategy is (docs/strategies.md): :class:`Strategy`, one way of reading long
texts as a run asks for it (``chunks-max@128``), and :class:`Family`, the class a strategy family's
module defines to say everything about it — its names and help, its parameters (:class:`Parameter`:
how a label writes them, their checks), what it needs from an embedder, how it cuts a text into
pieces and combines their vectors, what it stores per document and what its reading costs. A family
registers itself (:func:`register`), or another package names it in the ``embedeval.strategies``
entry points (:func:`families` reads them once); the command line's help and checks, ``embedeval
embedders``, the report's words, the decision table and the support checks all ask the registry, so
a new strategy is one module, in this package or another.

This module and the family modules import nothing heavy (the command line builds its help from
them); the reading itself (numpy, the embedders) is in :mod:`embedeval.strategies.scorers`, which
hands each family a :class:`~embedeval.strategies.reader.Reader` (an
:class:`~embedeval.strategies.scorers.EmbeddingScorer`) with the primitives it cuts and embeds with.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, distributions, entry_points
from typing import ClassVar

from embedeval.errors import ConfigError
from embedeval.strategies.parameters import NAME, Parameter, ReadSettings
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


@dataclass(frozen=True, init=False)
class Strategy:
    """One way of reading long texts: a family's name and the values of that family's parameters
    (:attr:`Family.parameters`), each read as an attribute (``strategy.chunk_tokens``; one the
    family does not declare is an :class:`AttributeError`). ``label`` is the table's ``strategy``
    value (``truncate``, ``windows-mean``, ``chunks-max@128``, ``late-chunking@128``,
    ``extend-gp@4096``, ``extend-pi@4096+logscale``); the family (:attr:`family`) checks the
    parameters and does the reading.

    ``Strategy("chunks-max", chunk_tokens=128)``: values not given are the declared defaults; a
    value of None is not given. ``dataclasses.replace(strategy, read_tokens=8192)`` gives a copy
    with one value changed."""

    name: str
    #: ``(parameter, value)`` in the family's declared order, every declared parameter given.
    parameters: tuple[tuple[str, int | bool], ...]

    def __init__(self, name: str, parameters: Sequence[tuple[str, int | bool]] = (), **values) -> None:
        family = family_named(name)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "parameters", family.settle(name, {**dict(parameters), **values}))

    def __getattr__(self, attribute: str):
        """A parameter's value: ``strategy.chunk_tokens``."""
        if attribute.startswith("_") or attribute in ("name", "parameters"):  # copying and pickling ask before the fields are set
            raise AttributeError(attribute)
        values = dict(self.parameters)
        if attribute in values:
            return values[attribute]
        raise AttributeError(f"strategy {self.label} has no parameter {attribute!r} (its family takes "
                             f"{', '.join(values) or 'none'})")

    @property
    def overlap(self) -> int:
        """Tokens shared by neighbouring windows: the family's ``overlap`` parameter, 0 for a family
        that declares none (its windows, where it reads any, do not overlap)."""
        return dict(self.parameters).get("overlap", 0)

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


class Family:
    """A strategy family: everything the rest of embedeval asks about a way of reading long texts.
    A subclass declares its names and help and overrides what it does otherwise than the default,
    which reads a text in consecutive pieces (``cut``), embeds each distinct piece once
    (``embed``), scores a text by its best piece and keeps one vector per piece.

    Class attributes:

    - ``names``: what ``--strategy`` takes (before any ``@``); ``choices``: the ``--help`` and
      ``embedeval embedders`` lines, as written -> what it does (none: :meth:`listed_choices` makes
      one from the names, the parameters and ``words``); ``hint``: how to write the family
      with its number, for the unknown-name error (``chunks-max@C``).
    - ``one_piece``: a text is read as one piece, its start; ``scores_chunks``: a text's score is
      its best chunk's and its table length is the document's (a chunk-size recommendation reads
      it); ``model_readings``: labels (or label prefixes ending in ``@``) that read a text inside
      the model's window as the model reads it itself, most direct first (the base every strategy
      of an embedder is held to, :mod:`embedeval.breaks`).
    - ``text_margins``: how many :data:`~embedeval.defaults.TEXT_FIT_MARGIN` s a text-fed model's
      inputs keep below its window (1: the embedder's own cut; 2: windows cut apart and re-read).
    - ``parameters``: the :class:`Parameter` s its strategies take (``chunks-max@C``'s chunk size,
      ``windows-mean``'s overlap): their values, how labels write them, their checks.
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
    parameters: ClassVar[tuple[Parameter, ...]] = ()
    words: ClassVar[str] = ""
    glossary: ClassVar[str] = ""
    settings_help: ClassVar[dict[str, str]] = {}

    # -- naming: the names and the declared parameters ----------------------------------------

    def parameter(self, name: str) -> Parameter | None:
        """The declared parameter called ``name``; None where the family takes none of that name."""
        return next((parameter for parameter in self.parameters if parameter.name == name), None)

    def takes(self, entry: str) -> bool:
        """Whether ``entry`` (a ``--strategy`` value) names this family: one of its names, alone or
        followed by what one of its marked parameters writes (``chunks-max@128``; :meth:`parse` checks
        the rest)."""
        return entry in self.names or self._marked(entry)

    def _marked(self, entry: str) -> bool:
        """Whether ``entry`` is one of the names followed by a marked parameter's mark (``@`` of a
        number, ``+word`` of a flag: whichever the family declares first, the label writes first)."""
        head = _head(entry)
        rest = entry[len(head):]
        return head in self.names and any(rest.startswith(p.mark[0] if p.kind is int else p.mark) for p in self.parameters if p.mark)

    def parse(self, entry: str, settings: ReadSettings) -> list[Strategy]:
        """The strategies ``entry`` asks for, by the declared parameters: a value the label writes
        (``chunks-max@128``, ``+logscale``), else the run's setting for it (one strategy per chunk
        size for ``chunks-max``), else the default. A label not written as the parameters write it
        is one :class:`ConfigError` (:meth:`how_to_write`)."""
        head = _head(entry)
        written = self._form().fullmatch(entry[len(head):]) if head in self.names else None
        if written is None:
            raise ConfigError(self.how_to_write(entry), "strategies")
        candidates = []
        for parameter in self.parameters:
            text = written.groupdict().get(parameter.name)
            if parameter.kind is bool and parameter.mark:
                candidates.append((bool(text),))
            elif text is not None:
                digits = text.lstrip("0") or "0"  # one past every bound is read without int's digit limit
                value = int(digits) if len(digits) <= len(str(parameter.upper)) else parameter.upper + 1
                self.check_written(entry, parameter, value)
                candidates.append((value,))
            else:
                from_run = settings.values(parameter.setting) if parameter.setting else ()
                candidates.append(tuple(from_run) or ((parameter.default,) if parameter.default is not None else ()))
        names = [parameter.name for parameter in self.parameters]
        return [Strategy(head, **dict(zip(names, values, strict=True))) for values in itertools.product(*candidates)]

    def _form(self) -> re.Pattern:
        """What the label writes after the name: each marked parameter in the declared order, a
        number (``@128``, left out where a run setting or a default gives it) or a flag
        (``+logscale``, left out when false)."""
        parts = []
        for parameter in self.parameters:
            if not parameter.mark:
                continue
            if parameter.kind is bool:
                parts.append(f"(?P<{parameter.name}>{re.escape(parameter.mark)})?")
            else:
                optional = "?" if parameter.setting or parameter.default is not None else ""
                parts.append(f"(?:{re.escape(parameter.mark)}(?P<{parameter.name}>[0-9]+)){optional}")
        return re.compile("".join(parts))

    def how_to_write(self, entry: str) -> str:
        """The refusal of an entry not written as the family's parameters write it: ``strategy
        'chunks-max@': write chunks-max@C, C the chunk size in tokens (e.g. chunks-max@128)``."""
        head = _head(entry) if _head(entry) in self.names else self.names[0]
        numbers = [p for p in self.parameters if p.mark and p.kind is int]
        flags = [p for p in self.parameters if p.mark and p.kind is bool]
        forms = " or ".join(head + "".join(p.written for p in self.parameters if p.mark and (p.kind is int or p is flag))
                            for flag in [None, *flags])  # in the declared order, as the label writes them
        meaning = ", ".join(f"{p.symbol} {p.help}" for p in numbers)
        example = head + "".join(f"{p.mark}{p.example}" for p in numbers if p.example is not None)
        return f"strategy {entry!r}: write {forms}" + (f", {meaning}" if meaning else "") + (f" (e.g. {example})" if example != head else "")

    def check_written(self, entry: str, parameter: Parameter, value: int) -> None:
        """One :class:`ConfigError` for a number a label writes out of the parameter's bounds: how
        the family is written (:meth:`how_to_write`)."""
        if (parameter.minimum is not None and value < parameter.minimum) or value > parameter.upper:
            raise ConfigError(self.how_to_write(entry), "strategies")

    def asks_chunk_sizes(self, entry: str) -> bool:
        """Whether ``entry`` takes its chunk sizes from the run's ``--chunk-tokens``: a parameter
        read from that setting that the entry does not write."""
        return any(parameter.setting == "chunk_tokens" for parameter in self.parameters) and "@" not in entry

    def settle(self, name: str, given: dict) -> tuple[tuple[str, int | bool], ...]:
        """The values of a strategy called ``name`` (:class:`Strategy`), in the declared order: each
        given one checked (:meth:`Parameter.check`), the default for one not given (None: not
        given). One :class:`ConfigError` for a parameter the family does not take or a value
        missing or out of range."""
        declared = {parameter.name for parameter in self.parameters}
        odd = next((key for key, value in given.items() if key not in declared and value is not None), None)
        if odd is not None:
            holders = names_where(lambda family: family.parameter(odd) is not None)
            raise ConfigError(f"a strategy's {odd} goes with {' and '.join(holders) or 'no strategy'}, and only with them, not with {name}")
        values = []
        for parameter in self.parameters:
            value = given.get(parameter.name)
            value = parameter.default if value is None else value
            if value is None:
                raise ConfigError(f"{name} needs {parameter.what or parameter.name} ({name}{parameter.written})")
            values.append((parameter.name, parameter.check(value, name)))
        return tuple(values)

    def label(self, strategy: Strategy) -> str:
        """The table's ``strategy`` value: the name, then each marked parameter as it is marked
        (``chunks-max@128``, ``extend-gp@4096+logscale``)."""
        values = dict(strategy.parameters)
        marks = [(f"{p.mark}{values[p.name]}" if p.kind is int else (p.mark if values[p.name] else ""))
                 for p in self.parameters if p.mark]
        return strategy.name + "".join(marks)

    def owns_label(self, label: str) -> bool:
        """Whether a table's ``strategy`` value was written by this family: one of its names (unless
        a number the label must carry is missing), or a name with what its parameters write
        (:meth:`parse` checks the rest)."""
        if label in self.names:
            return not any(p.mark and p.kind is int and not p.setting and p.default is None for p in self.parameters)
        return self._marked(label)

    def stretch(self, strategy: Strategy):
        """How the model reads past its positions; None: within them."""
        return None

    def listed_choices(self) -> dict[str, str]:
        """:attr:`choices`, or for a family that declares none, its names as written with their
        parameters and what it does: ``{"every-other@N": "reads every N-th piece (N: the step)"}``."""
        if self.choices:
            return dict(self.choices)
        forms = ", ".join(name + "".join(p.written for p in self.parameters if p.mark and p.kind is int) for name in self.names)
        said = "; ".join(f"{p.symbol or p.written or p.name}: {p.help}" for p in self.parameters)
        return {forms: (self.words or "a strategy family") + (f" ({said})" if said else "")}

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


#: The registered families, in the order ``--help`` lists them.
FAMILIES: list[Family] = []


#: The class attributes :func:`register` checks, with the type each must be of (``choices`` and
#: ``settings_help``: text to text; ``model_readings``: texts).
ATTRIBUTE_TYPES = {"hint": str, "words": str, "glossary": str, "selectable": bool, "one_piece": bool, "scores_chunks": bool,
                   "text_margins": int, "model_readings": tuple, "choices": dict, "settings_help": dict}
#: The run settings a family may word (:attr:`Family.settings_help`): the options' names.
HELPED_SETTINGS = ("chunk_tokens", "window_overlap", "late_overlap")


def _text_map(value) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def declaration_problem(cls: type[Family]) -> str | None:
    """What :func:`register` refuses in a family's class attributes, as one sentence; None for none."""
    for attribute, kind in ATTRIBUTE_TYPES.items():
        value = getattr(cls, attribute)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            return f"{cls.__name__}.{attribute} must be a {kind.__name__}, not {value!r}"
    if not all(isinstance(reading, str) for reading in cls.model_readings):
        return f"{cls.__name__}.model_readings must be a tuple of labels, not {cls.model_readings!r}"
    if not _text_map(cls.choices):
        return f"{cls.__name__}.choices must map each name as written to what it does (text to text), not {cls.choices!r}"
    if not (_text_map(cls.settings_help) and set(cls.settings_help) <= set(HELPED_SETTINGS)):
        return (f"{cls.__name__}.settings_help must map settings ({', '.join(HELPED_SETTINGS)}) to their help (text), "
                f"not {cls.settings_help!r}")
    for parameter in cls.parameters:
        problem = parameter.declaration_problem()
        if problem is not None:
            return f"{cls.__name__}.parameters: parameter {parameter.name}: {problem}"
    marks = [p.mark for p in cls.parameters if p.mark]
    if len(set(marks)) != len(marks):
        twice = sorted({mark for mark in marks if marks.count(mark) > 1})
        return f"{cls.__name__}.parameters: two parameters marked {' and '.join(repr(m) for m in twice)} (a label could not tell them apart)"
    return None


def register(cls: type[Family]) -> type[Family]:
    """Class decorator: add a family to the registry (once; its names must be new, and each a name
    ``--strategy`` can take and a label can start with: letters, digits, ``-``, ``_``, ``.``, no ``@``,
    ``+``, ``,`` or space, which the labels and the command line read as separators; its
    ``parameters`` a tuple of :class:`Parameter` s with distinct names and marks, each sound
    (:meth:`Parameter.declaration_problem`); its other attributes of their types
    (:data:`ATTRIBUTE_TYPES`); its constructor and :meth:`Family.listed_choices` working)."""
    if not (isinstance(cls, type) and issubclass(cls, Family)):
        raise TypeError(f"register takes a Family subclass, not {cls!r}")
    names = cls.names
    if not (isinstance(names, tuple) and names and all(isinstance(n, str) and NAME.fullmatch(n) for n in names)):
        raise ValueError(f"{cls.__name__}.names must be a tuple of one or more names of letters, digits, '-', '_' and '.' "
                         f"(no '@', '+', ',' or space), not {names!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"{cls.__name__}.names repeats a name: {names!r}")
    parameters = cls.parameters
    if not (isinstance(parameters, tuple) and all(isinstance(p, Parameter) for p in parameters)
            and len({p.name for p in parameters}) == len(parameters)):
        raise ValueError(f"{cls.__name__}.parameters must be a tuple of Parameters with distinct names, not {parameters!r}")
    problem = declaration_problem(cls)
    if problem is not None:
        raise ValueError(problem)
    holders = {name: family for family in FAMILIES for name in family.names}
    if holders.keys() & set(cls.names):
        twice = sorted(holders.keys() & set(cls.names))
        held = ", ".join(f"{name!r} by {type(holders[name]).__module__}.{type(holders[name]).__name__}" for name in twice)
        raise ValueError(f"strategy names registered twice: {twice} (held already: {held})")
    try:
        family = cls()
        choices = family.listed_choices()
    except Exception as failed:  # the family's own code: one refusal, not a traceback where the help is built
        raise ValueError(f"{cls.__name__} fails when it is made and listed: {_failure(failed)}") from None
    if not _text_map(choices):
        raise ValueError(f"{cls.__name__}.listed_choices() must map each name as written to what it does, not {choices!r}")
    FAMILIES.append(family)
    return cls


def _failure(failed: BaseException) -> str:
    """An exception as one line: its type and, where it says any, its words."""
    return f"{type(failed).__name__}: {failed}" if str(failed) else type(failed).__name__


#: The entry-point group another package names its families in (``[project.entry-points."embedeval.strategies"]``,
#: each entry a :class:`Family` subclass: ``every-other = mypackage.family:EveryOther``; docs/development.md).
ENTRY_POINT_GROUP = "embedeval.strategies"


@dataclass
class _Plugins:
    """Whether the entry points were read (once per process) and the refusal of the plugins that
    failed (the first, with a count of the others), kept for every later question to the registry."""

    read: bool = False
    error: ConfigError | None = None


_PLUGINS = _Plugins()


def families(*, strict: bool = True) -> list[Family]:
    """The registered families, in the order ``--help`` lists them: the package's own, then those
    other packages name in :data:`ENTRY_POINT_GROUP`, loaded on the first call, every one of them. A
    plugin that cannot be imported or registered (or a package whose entry points cannot be read)
    is one :class:`ConfigError` naming its entry point, the first such with a count of the others,
    raised by every call (``strict=False``, for the help the command line builds before it runs a
    command: the families that did register)."""
    if not _PLUGINS.read:
        _PLUGINS.read = True
        failures = []
        for point in _entry_points(failures):
            try:
                _register_plugin(point)
            except ConfigError as refused:
                failures.append(str(refused))
        if failures:
            others = len(failures) - 1
            more = f" (and {others} more strategy plugin failure{'s' if others > 1 else ''})" if others else ""
            _PLUGINS.error = ConfigError(failures[0] + more)
    if strict and _PLUGINS.error is not None:
        raise _PLUGINS.error
    return FAMILIES


def _entry_points(failures: list[str]) -> list[EntryPoint]:
    """The entry points of :data:`ENTRY_POINT_GROUP`, as :func:`importlib.metadata.entry_points`
    finds them; where a package's entry points cannot be read (its ``entry_points.txt`` malformed,
    or not text: that call fails for every group), the other packages' read one by one and a line
    in ``failures`` naming the package."""
    try:
        return list(entry_points(group=ENTRY_POINT_GROUP))
    except Exception:  # any package's file, read for every group: not embedeval's
        pass
    points, seen = [], set()
    for dist in distributions():
        name = None
        try:
            name = dist.name
            key = re.sub(r"[-_.]+", "-", name or "").lower()
            if key and key in seen:  # the first of a name on the path, as entry_points() takes it
                continue
            seen.add(key)
            points.extend(dist.entry_points.select(group=ENTRY_POINT_GROUP))
        except Exception as failed:
            failures.append(f"strategy plugins cannot all be found: the entry points of package {name or dist!r} cannot be read "
                            f"(its entry_points.txt is malformed: {_failure(failed)})")
    return points


def _register_plugin(point: EntryPoint) -> None:
    """Register the family an entry point names (nothing more for one its module registered on
    import), its module imported with what it prints sent to stderr (a command's output is
    stdout's); its failure to import (an exception or an exit), or a value that is no family, is
    declared amiss or whose names are taken, is one :class:`ConfigError` naming the entry point and
    its package."""
    package = getattr(getattr(point, "dist", None), "name", None)
    where = (f"strategy plugin {point.name!r} ({point.value or 'no value'}, " + (f"package {package}, " if package else "")
             + f"entry point group {ENTRY_POINT_GROUP})")
    if not point.value.strip():
        raise ConfigError(f"{where} is refused: its entry point names no class (write {point.name} = module:Class)")
    try:
        with contextlib.redirect_stdout(sys.stderr):
            family = point.load()
    except (Exception, SystemExit) as failed:  # anything its import raises, or an exit: the plugin's, not embedeval's
        raise ConfigError(f"{where} cannot be loaded: {_failure(failed)}") from None
    if any(type(registered) is family for registered in FAMILIES):
        return
    try:
        with contextlib.redirect_stdout(sys.stderr):
            register(family)
    except (TypeError, ValueError) as refused:
        raise ConfigError(f"{where} is refused: {refused}") from None
    except SystemExit as failed:
        raise ConfigError(f"{where} is refused: {_failure(failed)}") from None


def names_where(test: Callable[[Family], bool]) -> tuple[str, ...]:
    """The names of the registered families that pass ``test``, in the registry's order."""
    return tuple(name for family in families() if test(family) for name in family.names)


def strategy_names() -> tuple[str, ...]:
    """Every name ``--strategy`` takes (before any ``@``)."""
    return names_where(lambda family: family.selectable)


def chunking_names() -> tuple[str, ...]:
    """The names of families that take a chunk size (``name@C``): a parameter read from the run's
    chunk sizes."""
    return names_where(lambda family: any(parameter.setting == "chunk_tokens" for parameter in family.parameters))


def _head(entry: str) -> str:
    """The name an entry or a label starts with: what comes before any ``@`` or ``+``."""
    return re.split(r"[@+]", entry, maxsplit=1)[0]


def family_named(name: str) -> Family:
    """The family of a strategy name; an unknown one is a :class:`ConfigError`."""
    family = next((family for family in families() if name in family.names), None)
    if family is None:
        raise ConfigError(f"unknown strategy {name!r}; use one of {', '.join(strategy_names())}")
    return family


def family_of_entry(entry: str) -> Family:
    """The family a ``--strategy`` value names; an unknown one is a :class:`ConfigError` saying how
    the families are written."""
    family = next((family for family in families() if family.selectable and family.takes(entry)), None)
    if family is None:
        hints = ", ".join(family.hint for family in families() if family.hint)
        raise ConfigError(f"unknown strategy {entry!r}; use one of {', '.join(strategy_names())}" + (f" ({hints})" if hints else ""))
    return family


def family_of_label(label) -> Family | None:
    """The family that wrote a table's ``strategy`` value; None for a label no family writes."""
    label = str(label)
    return next((family for family in families() if family.owns_label(label)), None)

"""The ways a model reads past its positions, as the model side names them
(:mod:`embedeval.embedders.stretch` has their formulas and applies them): the methods per
position type (:data:`METHODS`), the :class:`Stretch` settings that name one, and the refusal of a
method for the other position type (:func:`type_refusal`). Imports nothing heavy: the strategy
layer (:mod:`embedeval.strategies.extend`) names these methods as strategies (``extend-gp@L``,
``rope-ntk@L``) and the command line builds its help from it."""

from __future__ import annotations

from dataclasses import dataclass

from embedeval.errors import ConfigError, InputError

ABSOLUTE, ROTARY = "absolute", "rotary"
#: The methods per position type (the strategy layer names them with a prefix per type: ``extend-gp``, ``rope-ntk``).
METHODS: dict[str, tuple[str, ...]] = {ABSOLUTE: ("gp", "rp", "pi", "pi-dynamic"), ROTARY: ("ntk", "linear")}
#: Methods whose vectors depend on the length ``L`` a strategy reads (the rows of LongEmbed's
#: stretched table), not only on the ids read.
READS_L: tuple[str, ...] = ("pi",)
#: The cache's name of a method where it is not the method's own: ``pi-dynamic`` was ``pi`` until
#: ``pi`` became LongEmbed's, and its vectors keep their keys.
CACHE_NAMES = {"pi-dynamic": "pi"}


@dataclass(frozen=True)
class Stretch:
    """How a model reads past its positions: ``method`` (one of :data:`METHODS`), whether
    attention logits are scaled by ``log(n) / log(P)`` (``logscale``) and, for the methods in
    :data:`READS_L` (``pi``), ``length``: the ``L`` the strategy reads, the rows of the stretched
    table (None for the others, whose vectors do not depend on it; a ``pi`` without it names the
    method, as refusals do, and reads nothing). ``key`` names what the vectors depend on (the
    cache keys them on it and the ids read)."""

    method: str
    logscale: bool = False
    length: int | None = None

    def __post_init__(self) -> None:
        if self.method not in self.all_methods():
            raise ConfigError(f"unknown context extension {self.method!r}; use one of {', '.join(self.all_methods())}")
        if self.length is not None and (self.method not in READS_L or self.length < 1):
            raise ConfigError(f"a length L >= 1 goes with {', '.join(READS_L)} only, not {self.length} with {self.method}")

    @staticmethod
    def all_methods() -> tuple[str, ...]:
        return tuple(m for methods in METHODS.values() for m in methods)

    @classmethod
    def every(cls) -> list[Stretch]:
        """Every method, without and with ``logscale`` (no ``length``: what refusals are about)."""
        return [cls(method, scaled) for method in cls.all_methods() for scaled in (False, True)]

    @property
    def position_type(self) -> str:
        return next(kind for kind, methods in METHODS.items() if self.method in methods)

    @property
    def name(self) -> str:
        """The method and ``+logscale``, without ``L``: what a refusal depends on."""
        return self.method + ("+logscale" if self.logscale else "")

    @property
    def key(self) -> str:
        """``stretch:`` + the method's cache name, ``@L`` for the methods in :data:`READS_L`,
        ``+logscale``: ``stretch:gp``, ``stretch:pi@8194+logscale``; ``pi-dynamic`` keeps the key
        ``stretch:pi`` its vectors had when it was called ``pi``, which no ``pi@L`` key equals."""
        self.check_reads(1)  # a pi without its L has no key
        length = f"@{self.length}" if self.method in READS_L else ""
        return f"stretch:{CACHE_NAMES.get(self.method, self.method)}{length}" + ("+logscale" if self.logscale else "")

    def check_reads(self, n: int) -> None:
        """One :class:`InputError` where an input of ``n`` tokens (special tokens counted) is more
        than the method reads: a :data:`READS_L` method reads the ``L`` rows of its table, and
        needs its ``L``."""
        if self.method not in READS_L:
            return
        if self.length is None:
            raise InputError(f"{self.method} reads a table of L rows: give L (its length)")
        if n > self.length:
            raise InputError(f"{self.method} with L = {self.length} reads at most {self.length} tokens in one pass, not {n}")


def type_refusal(kind: str, stretch: Stretch) -> str:
    """Why ``stretch`` does not fit a model with ``kind`` positions (another position type); the
    strategy layer, which names the methods, adds which ones the model takes."""
    return f"it has {kind} positions, and {stretch.method} is for {stretch.position_type} ones"

"""A strategy family's parameters (docs/strategies.md): :class:`Parameter`, one parameter declared
once on its family (:attr:`~embedeval.strategies.base.Family.parameters`), from which a label is
parsed and written, a value checked and the docs' table of parameters made; and
:class:`ReadSettings`, the run's settings that give a parameter its value where a label does not."""

from __future__ import annotations

import re
from dataclasses import dataclass
from numbers import Integral

from embedeval.bounds import MAX_PARAMETER_VALUE
from embedeval.errors import ConfigError

#: What a strategy name is (:func:`~embedeval.strategies.base.register`), and a flag's word after its ``+``.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
#: What a parameter may not be called: a strategy's own attributes.
STRATEGY_WORDS = ("name", "parameters", "family", "label", "one_piece", "stretch", "parse", "stretched")
#: The run settings a parameter may be read from (:attr:`Parameter.setting`, :meth:`ReadSettings.values`).
SETTINGS = ("chunk_tokens", "window", "late")


@dataclass(frozen=True)
class ReadSettings:
    """The run's settings a family parses its strategies with: the chunk sizes (``--chunk-tokens``)
    and the window overlaps by setting (``window``, ``late``), each the :attr:`Parameter.setting`
    of a family's parameter."""

    chunk_tokens: tuple[int, ...]
    overlaps: dict[str, int]

    def values(self, setting: str) -> tuple:
        """The values a run gives a parameter read from ``setting``: every chunk size for
        ``chunk_tokens`` (one strategy each), else the one overlap given (none: the parameter's
        default)."""
        if setting == "chunk_tokens":
            return self.chunk_tokens
        value = self.overlaps.get(setting)
        return () if value is None else (value,)


@dataclass(frozen=True)
class Parameter:
    """One parameter of a family's strategies, declared once on the family
    (:attr:`Family.parameters`): a strategy's value is read as ``strategy.<name>``, and the label's
    parsing and writing, the checks and the words that list it all come from here.

    - ``kind``: ``int`` (a whole number, within ``minimum``..``maximum``; no ``maximum``:
      :data:`~embedeval.bounds.MAX_PARAMETER_VALUE`) or ``bool`` (a flag).
    - ``default``: the value when neither the label nor a run setting gives one (None: the
      strategy cannot be made without it).
    - ``setting``: the run setting that gives it when the label does not (:meth:`ReadSettings.values`:
      ``chunk_tokens``, one strategy per size; ``window``, ``late``: an overlap).
    - ``mark``: how the label writes it: a number after ``mark`` (``@``: ``chunks-max@128``), a
      flag as ``mark`` itself when true (``+logscale``); "" for a parameter the label leaves out.
    - ``symbol`` and ``example``: the number as the help writes it (``chunks-max@C``) and a value
      to show (``chunks-max@128``); ``what``: the parameter in a sentence ("a chunk size");
      ``unit``: what the number counts ("tokens"), for its refusal."""

    name: str
    help: str
    kind: type = int
    default: int | bool | None = None
    minimum: int | None = None
    maximum: int | None = None
    setting: str | None = None
    mark: str = ""
    symbol: str = ""
    example: int | None = None
    what: str = ""
    unit: str = ""

    def __post_init__(self) -> None:
        if not (self.name.isidentifier() and not self.name.startswith("_") and self.name not in STRATEGY_WORDS):
            raise ValueError(f"a parameter's name is a Python name not starting with '_', nor one of {STRATEGY_WORDS}, "
                             f"not {self.name!r}")
        if self.kind not in (int, bool):
            raise ValueError(f"parameter {self.name}: kind is int or bool, not {self.kind!r}")
        if self.mark and (self.mark[0] not in "@+" or (self.kind is int and self.mark != "@")
                          or (self.kind is bool and not NAME.fullmatch(self.mark[1:]))):
            raise ValueError(f"parameter {self.name}: a number is marked '@' and a flag '+word' in a label, not {self.mark!r}")

    @property
    def upper(self) -> int:
        """The largest value an ``int`` parameter takes: its ``maximum``, else
        :data:`~embedeval.bounds.MAX_PARAMETER_VALUE`."""
        return MAX_PARAMETER_VALUE if self.maximum is None else self.maximum

    def declaration_problem(self) -> str | None:
        """What is wrong with the declaration itself (:func:`~embedeval.strategies.base.register`
        refuses a family with it): a bound or default of the wrong kind or out of order, a setting
        no run gives, a number its label writes without a symbol, an example or a minimum of 0 or
        more (a label writes no sign); None for a sound one."""
        def number(value) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)

        if self.kind is bool:
            if not isinstance(self.default, bool):
                return f"a flag's default is True or False, not {self.default!r}"
            if self.setting is not None:
                return f"a flag is read from no run setting, not {self.setting!r}"
            return None
        for field in ("minimum", "maximum", "example"):
            value = getattr(self, field)
            if value is not None and not number(value):
                return f"{field} is a whole number or None, not {value!r}"
        if self.default is not None and not number(self.default):
            return f"the default of a number is a whole number or None, not {self.default!r}"
        if self.maximum is not None and self.minimum is not None and self.minimum > self.maximum:
            return f"minimum {self.minimum} is above maximum {self.maximum}"
        for field in ("default", "example"):
            value = getattr(self, field)
            if value is not None and not ((self.minimum is None or value >= self.minimum) and value <= self.upper):
                return f"{field} {value} is outside its bounds ({self.minimum}..{self.upper})"
        if self.setting is not None and self.setting not in SETTINGS:
            return f"setting is one of {', '.join(SETTINGS)} or None, not {self.setting!r}"
        if self.mark:
            if self.minimum is None or self.minimum < 0:
                return f"a number a label writes (@) has a minimum of 0 or more, not {self.minimum}"
            if not (isinstance(self.symbol, str) and NAME.fullmatch(self.symbol)):
                return f"a number a label writes (@) has a symbol for the help (N in every-other@N), not {self.symbol!r}"
            if self.example is None:
                return "a number a label writes (@) has an example for the help (2 in every-other@2)"
        return None

    @property
    def written(self) -> str:
        """How the label writes it in the help: ``@C``, ``+logscale``; "" for one it leaves out."""
        return self.mark + self.symbol if self.kind is int and self.mark else self.mark

    def check(self, value, family: str):
        """``value`` as the strategy holds it (a plain ``int`` or ``bool``); one :class:`ConfigError`
        for a value of another kind (1.5, NaN, True or "128" would be written into labels) or out of
        bounds."""
        if self.kind is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"a strategy's {self.name} is true or false, not {value!r}")
            return value
        if isinstance(value, bool) or not isinstance(value, Integral):
            raise ConfigError(f"a strategy's {self.name} is a whole number" + (f" of {self.unit}" if self.unit else "")
                              + f", not {value!r}")
        value = int(value)
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(f"{self.what or self.name} of {family} is at least {self.minimum}, not {value}")
        if value > self.upper:
            raise ConfigError(f"{self.what or self.name} of {family} is at most {self.upper:,}, not {value:,}")
        return value


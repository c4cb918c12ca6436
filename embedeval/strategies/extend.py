"""Context extension (after LongEmbed, Zhu et al. 2024): ``extend-gp@L``, ``extend-rp@L``,
``extend-pi@L``, ``extend-pi-dynamic@L`` (absolute positions), ``rope-ntk@L``, ``rope-linear@L``
(rotary positions), each optionally ``+logscale``: one piece, the text's first ``L`` tokens
(counted as ``max_tokens`` counts them, special tokens and prompt included) read in one pass by a
model with fewer positions, which are re-used or stretched for it (the model side, with the
:class:`~embedeval.embedders.stretch_methods.Stretch` settings, is :mod:`embedeval.embedders.stretch`).
Score = cos(q, v). Offered for a local ``st:`` model on the local executor (its positions)."""

from __future__ import annotations

from dataclasses import replace

from embedeval.bounds import MAX_READ_TOKENS
from embedeval.embedders.stretch_methods import ABSOLUTE, METHODS, READS_L, ROTARY, Stretch, type_refusal
from embedeval.errors import ConfigError
from embedeval.strategies.base import Family, Strategy, register
from embedeval.strategies.parameters import Parameter
from embedeval.strategies.reader import Pieces, Reader

#: The strategy names' prefix per position type (``extend-gp``, ``rope-ntk``).
STRATEGY_PREFIX = {ABSOLUTE: "extend-", ROTARY: "rope-"}
#: Strategy name -> method.
STRETCH_METHODS: dict[str, str] = {STRATEGY_PREFIX[kind] + method: method for kind, methods in METHODS.items() for method in methods}
LOGSCALE_SUFFIX = "+logscale"


def _misfit(strategy: Strategy, name: str, why: str) -> ConfigError:
    """``strategy`` does not fit the model ``name`` because ``why`` (the model's words); where its
    positions are of the other type (:func:`~embedeval.embedders.stretch_methods.type_refusal`), the
    strategies that fit them are named."""
    stretch = strategy.stretch
    other = next(kind for kind in METHODS if kind != stretch.position_type)
    if why == type_refusal(other, stretch):
        why += "; use " + ", ".join(STRATEGY_PREFIX[other] + method for method in METHODS[other])
    return ConfigError(f"{strategy.label} does not fit {name}: {why}")


def _reads_no_further(strategy: Strategy, name: str, limit: int) -> ConfigError:
    return ConfigError(f"{strategy.label} reads no further than {name} does itself: it has {limit} positions; "
                       f"use @L with L above {limit}", "strategies")


@register
class Extend(Family):
    names = tuple(STRETCH_METHODS)
    choices = {
        "extend-gp@L, extend-rp@L, extend-pi@L, extend-pi-dynamic@L": "absolute-position models read L tokens in one pass, "
                                                                      "positions grouped, recurrent, interpolated to L rows "
                                                                      "(LongEmbed's PI) or over each text",
        "rope-ntk@L, rope-linear@L": "rotary models read L tokens in one pass, RoPE base NTK-scaled or positions linearly scaled",
        "...+logscale": "context extension with attention logits scaled by log(n)/log(P) past the positions",
    }
    hint = f"context extension as {next(iter(STRETCH_METHODS))}@L"
    one_piece = True
    parameters = (Parameter("read_tokens", f"the tokens read in one pass (a label's at most {MAX_READ_TOKENS:,})", minimum=1, mark="@", symbol="L",
                            example=4096, what="a length to read (@L)", unit="tokens"),
                  Parameter("logscale", "attention logits scaled by log(n)/log(P) past the positions", kind=bool, default=False,
                            mark=LOGSCALE_SUFFIX))
    model_readings = tuple(name + "@" for name in STRETCH_METHODS)
    words = "stretching the model's positions"

    def how_to_write(self, entry: str) -> str:
        head = entry.partition("@")[0]
        example = head if head in STRETCH_METHODS else next(iter(STRETCH_METHODS))
        return (f"strategy {entry!r}: write {example}@L or {example}@L{LOGSCALE_SUFFIX}, L the tokens read in one pass "
                "(e.g. 4096)")

    def check_written(self, entry: str, parameter: Parameter, value: int) -> None:
        """``L`` from 1 to :data:`~embedeval.bounds.MAX_READ_TOKENS` in a label (a copy made to read
        a longer text, :meth:`shortfall`, may name more)."""
        if value < 1:
            raise ConfigError(f"{entry.partition('@')[0]} reads a positive number of tokens, not {value}")
        if value > MAX_READ_TOKENS:  # 1e8 was a 286 GiB position table minutes into a run
            raise ConfigError(f"strategy {entry!r} reads {value:,} tokens in one pass, past the {MAX_READ_TOKENS:,} one pass can "
                              f"hold (docs/scale.md); use L at most {MAX_READ_TOKENS:,}", "strategies")

    def stretch(self, strategy: Strategy) -> Stretch:
        method = STRETCH_METHODS[strategy.name]
        return Stretch(method, strategy.logscale, strategy.read_tokens if method in READS_L else None)

    def reading_mode(self, label: str) -> str:
        return label  # one pass over L tokens: a speed of its own

    def check_support(self, specs, strategies, executor: str, folders) -> None:
        """Context extension changes a local ``st:`` model's positions, on the local executor; a
        length ``L`` not above the folder's positions, or a method the folder rules out, is refused
        before the model loads (:meth:`~embedeval.strategies.support.ModelFolders.stretch_refusal`),
        in the words the loaded model's check (:meth:`prepare`) uses."""
        models = [spec for spec in specs if not folders.lexical(spec)]
        for spec in models:
            if spec.partition(":")[0] != "st" or executor != "local":
                raise ConfigError(f"{strategies[0].label} is not offered for {spec} on the {executor} executor: context extension "
                                  "changes a local st: model's positions, on the local executor")
        for spec in models:
            for strategy in strategies:
                name, why, limit = folders.stretch_refusal(spec, strategy.stretch)
                if why:
                    raise _misfit(strategy, name, why)
                if strategy.read_tokens <= limit:
                    raise _reads_no_further(strategy, name, limit)

    def prepare(self, strategy: Strategy, reader: Reader) -> None:
        """Refuse context extension where it is not defined: a model not fed token ids by this
        process, one whose positions the method does not fit, or a length ``L`` the model reads
        without stretching (not above its positions ``P``); then the reader reads ``L`` less the
        model's special tokens and prompt per text."""
        name = reader.name
        if not (reader.reads_ids and reader.offers_stretching()):
            raise ConfigError(f"{strategy.label} is not offered for {name}: context extension changes a local st: "
                              "model's positions, on the local executor")
        model = reader.model()
        why = model.stretch_refusal(strategy.stretch)
        if why:
            raise _misfit(strategy, name, why)
        limit = model.positions()
        if strategy.read_tokens <= limit or strategy.read_tokens <= reader.frame_tokens:
            raise _reads_no_further(strategy, name, limit)
        reader.set_capacity(strategy.read_tokens - reader.frame_tokens)

    def cut(self, strategy: Strategy, reader: Reader, texts: list[str]) -> Pieces:
        return reader.cut_consecutive(texts, reader.capacity, reader.capacity, limit=reader.capacity, first_only=True)

    def embed(self, strategy: Strategy, reader: Reader, inputs: list, texts: list[str]):
        return reader.embed_stretched(inputs, strategy.stretch)

    def shortfall(self, strategy: Strategy, reader: Reader, longest: int) -> str | None:
        """``L`` counts the model's special tokens and prompt, haystack lengths count content
        tokens, so ``extend-gp@2048`` on all-MiniLM-L6-v2 reads 2,046 of a 2,048-token haystack's
        tokens and ``extend-gp@2050`` reads them all."""
        if reader.window_tokens >= longest:
            return None
        whole = replace(strategy, read_tokens=longest + reader.frame_tokens).label
        return (f"{reader.name} [{reader.strategy}] reads {reader.window_tokens:,} content tokens of a text ({reader.frame_tokens} "
                f"of its {strategy.read_tokens:,} are special tokens or prompt): the {longest:,}-token haystacks lose their last "
                f"{longest - reader.window_tokens:,}, and a needle there is not read; {whole} reads them whole")

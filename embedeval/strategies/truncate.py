"""``truncate``: one piece, the text's first ``W`` content tokens (``W`` = the model's capacity:
``max_tokens`` minus special tokens and prompt) — what the model does natively. Score = cos(q, v).

For a model fed text (an API model) the piece is the word-aligned prefix the embedder would cut
itself (cut here with the reference tokenizer, so two texts with the same prefix cost one request)."""

from __future__ import annotations

from embedeval.strategies.base import Family, Strategy, register
from embedeval.strategies.reader import Pieces, Reader

#: ``strategy`` of an embedder read as it reads a text itself: its one window, the rest cut off.
TRUNCATE = "truncate"


@register
class Truncate(Family):
    names = (TRUNCATE,)
    choices = {TRUNCATE: "the model's own window"}
    one_piece = True
    model_readings = (TRUNCATE,)
    text_margins = 1
    words = "truncating to the model's window"
    glossary = "`truncate` reads the model's window"

    def cut(self, strategy: Strategy, reader: Reader, texts: list[str]) -> Pieces:
        if not reader.reads_ids:  # the embedder's own cut, made here: dedupes too
            return self.cut_prefixes(reader, texts)
        return reader.cut_consecutive(texts, reader.capacity, reader.capacity, limit=reader.capacity, first_only=True)

    @staticmethod
    def cut_prefixes(reader: Reader, texts: list[str]) -> Pieces:
        """One piece per text as a model fed text cuts it itself: the word-aligned prefix of the
        reader's capacity in reference tokens (the whole text without a reference), its tokens
        counted by the reference (else by the model, at most its window)."""
        reference = reader.reference
        read = reference.prefixes(texts, reader.capacity) if reference else list(texts)
        seen = [len(text) for text in read]
        tokens = reference.count(read) if reference else [min(n, reader.max_tokens) for n in reader.count_tokens(read)]
        return reader.pieces(read, range(len(texts)), [(0, n) for n in seen], seen, tokens)

    def embed(self, strategy: Strategy, reader: Reader, inputs: list, texts: list[str]):
        if not reader.dedupe:  # every text sent whole, one by one: the check without deduplication
            return reader.embed_whole(texts)
        return reader.embed_pieces(inputs)

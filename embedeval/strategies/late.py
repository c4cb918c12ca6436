"""``late-chunking@C``: late chunking (Günther et al. 2024, jina-ai/late-chunking): the model reads
each window of the text in one pass and every ``C``-token chunk's vector is the normalised mean of
its tokens' outputs, so a chunk keeps the context of its window. Score = max over chunks of
cos(q, chunk), as ``chunks-max``.

A local ``st:`` model on the local executor pools its own token embeddings (its windows overlap by
``--late-overlap`` tokens, a later window's first outputs dropped, :func:`late_layout`); a ``jina:``
model is sent the chunks of each window and late-chunks them itself (the API's ``late_chunking``)."""

from __future__ import annotations

import bisect

from embedeval.defaults import DEFAULT_LATE_CHUNKING_OVERLAP
from embedeval.errors import ConfigError
from embedeval.strategies.base import Strategy, piece_bounds, register
from embedeval.strategies.chunks import CHUNK_SIZE, ChunkFamily
from embedeval.strategies.parameters import Parameter
from embedeval.strategies.reader import Pieces, Reader

LATE_CHUNKING = "late-chunking"
#: Providers whose models late-chunk: local models (token embeddings), Jina (the API's own late chunking).
LATE_CHUNKING_PROVIDERS = ("st", "jina")


def late_layout(n_tokens: int, window: int, overlap: int, chunk: int) -> list[list[tuple[int, int, int]]]:
    """How late chunking reads a text of ``n_tokens`` content tokens, as jina-ai/late-chunking reads
    long documents: macro windows of ``window`` tokens, each starting ``overlap`` tokens before the
    previous one ends; a later window's first ``overlap`` outputs are dropped, so every token keeps
    exactly one output (from the first window holding it, or the window its left context is in).
    The text is cut into chunks of ``chunk`` tokens, each returned as its parts ``(first, start,
    end)``: the window starting at token ``first`` gives the outputs of tokens ``[start, end)``
    (text positions). A chunk spans two windows (more when ``chunk > window - overlap``) where it
    crosses a boundary; its vector is the mean over all its parts' outputs."""
    windows = piece_bounds(n_tokens, window, window - overlap)
    kept_from = [first + (overlap if k else 0) for k, (first, _) in enumerate(windows)]
    layout = []
    for start, end in piece_bounds(n_tokens, chunk, chunk):
        first_window = bisect.bisect_right(kept_from, start) - 1
        last_window = bisect.bisect_right(kept_from, end - 1) - 1
        layout.append([(windows[k][0], max(start, kept_from[k]), min(end, windows[k][1]) if k == last_window
                        else kept_from[k + 1]) for k in range(first_window, last_window + 1)])
    return layout


@register
class LateChunking(ChunkFamily):
    names = (LATE_CHUNKING,)
    choices = {LATE_CHUNKING: "best chunk, each pooled from one pass over its window (late-chunking@C: chunks of C tokens)"}
    parameters = (CHUNK_SIZE, Parameter("overlap", "tokens shared by neighbouring macro windows", default=DEFAULT_LATE_CHUNKING_OVERLAP,
                                        minimum=0, setting="late", what="a window overlap", unit="tokens"))
    words = "late chunking"
    glossary = "`late-chunking@C` the best of C-token chunks pooled from one model pass over each window"
    settings_help = {"chunk_tokens": "late-chunking, in content tokens (at most the model's window)",
                     "late_overlap": "late-chunking of st: models: tokens shared by neighbouring macro windows (each later window's "
                                     "first outputs dropped, so chunks keep left context); less than the model's window."}

    def reading_mode(self, label: str) -> str:
        return label  # one pass over a whole window, pooled per chunk: a speed of its own

    def check_support(self, specs, strategies, executor: str, folders) -> None:
        """Late chunking needs a local ``st:`` model on the local executor (token embeddings) or a
        ``jina:`` model."""
        for spec in specs:
            provider = spec.partition(":")[0]
            if folders.lexical(spec):
                continue
            if provider not in LATE_CHUNKING_PROVIDERS:
                raise ConfigError(f"late-chunking is not offered for {spec}: it needs a local st: model (token embeddings) "
                                  "or a jina: model (the API's own late chunking)")
            if provider == "st" and executor != "local":
                raise ConfigError(f"late-chunking of {spec} runs on the local executor only (the Ray actors return pooled "
                                  "vectors, not token embeddings); use `executor` local", "executor")

    def prepare(self, strategy: Strategy, reader: Reader) -> None:
        """Refuse late chunking where it is not defined: a model without token embeddings, one whose
        own vector is not the normalised mean of them (pooling other than mean, or a module other than
        Normalize after it), or chunks longer than the model's window."""
        name, chunk = reader.name, strategy.chunk_tokens
        if not reader.offers_late_chunking():
            raise ConfigError(f"late-chunking is not offered for {name}: it needs a local st: model run by the local "
                              "executor (token embeddings) or a jina: model (the API's own late chunking)")
        why = reader.late_chunking_refusal()
        if why:
            raise ConfigError(f"late-chunking is not defined for {name}: {why}")
        if chunk > reader.capacity:
            raise ConfigError(f"late-chunking@{chunk} does not fit {name}, which reads {reader.capacity} content "
                              f"tokens per window; use `chunk_tokens` up to {reader.capacity}", "chunk_tokens")

    def cut(self, strategy: Strategy, reader: Reader, texts: list[str]) -> Pieces:
        """Consecutive chunks of ``chunk_tokens`` content tokens (the last one shorter), each a tuple
        of parts ``(window, (start, end))``: a window the model reads whole and the chunk's unit
        range in it. For a model fed ids windows are token ids (int32 bytes) that overlap and a chunk
        may span two of them; for an API windows are chunk texts and a chunk is one of them."""
        parts_of = self._parts_ids if reader.reads_ids else self._parts_text
        inputs, owner, spans, read = [], [], [], []
        for t, (text, (ids, offsets)) in enumerate(zip(texts, reader.encode(texts, None), strict=True)):
            reader.check_tokens(t, text, ids)
            # the windows the model reads: overlapping for a model fed ids, side by side for an API
            step = reader.capacity - (strategy.overlap if reader.reads_ids else 0)
            read.append(sum(end - start for start, end in piece_bounds(len(ids), reader.capacity, step)))
            for parts, (a, b) in parts_of(strategy, reader.capacity, text, ids, offsets):
                inputs.append(parts)
                owner.append(t)
                spans.append((int(offsets[a, 0]), int(offsets[b - 1, 1])))
        return reader.pieces(inputs, owner, spans, [len(t) for t in texts], read)

    @staticmethod
    def _parts_ids(strategy: Strategy, capacity: int, text: str, ids, offsets):
        """Per chunk (its parts, its token range): the windows of :func:`late_layout`, as id bytes."""
        windows: dict[int, bytes] = {}
        for chunk in late_layout(len(ids), capacity, strategy.overlap, strategy.chunk_tokens):
            for first, _, _ in chunk:
                windows.setdefault(first, ids[first : first + capacity].tobytes())
            yield tuple((windows[first], (a - first, b - first)) for first, a, b in chunk), (chunk[0][1], chunk[-1][2])

    @staticmethod
    def _parts_text(strategy: Strategy, capacity: int, text: str, ids, offsets):
        """Per chunk (its one part, its token range): windows of the model's capacity that do not
        overlap, each sent as its chunk texts (the API pools every input of a request itself), so a
        chunk never spans two windows."""
        size = strategy.chunk_tokens
        for first, last in piece_bounds(len(ids), capacity, capacity):
            chunks = [(first + a, first + b) for a, b in piece_bounds(last - first, size, size)]
            window = tuple(text[int(offsets[a, 0]) : int(offsets[b - 1, 1])] for a, b in chunks)
            for k, chunk in enumerate(chunks):
                yield ((window, (k, k + 1)),), chunk

    def embed(self, strategy: Strategy, reader: Reader, inputs: list, texts: list[str]):
        """Each distinct window runs once (through the cache), each distinct chunk is pooled once."""
        windows: dict = {}
        chunks: dict = {}
        for piece in inputs:
            if piece not in chunks:
                chunks[piece] = tuple((windows.setdefault(w, len(windows)), a, b) for w, (a, b) in piece)
        if not chunks:
            return reader.no_vectors()
        vectors = reader.embed_late_chunks(list(windows), list(chunks.values()))
        row = {piece: i for i, piece in enumerate(chunks)}
        return vectors[[row[piece] for piece in inputs]]

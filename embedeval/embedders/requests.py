"""What an embedder is asked for: one small frozen type per request, and the one call that takes it.

Every embedder answers ``embed_request(request)`` with a float32 ``(len(request), dim)`` array of
L2-normalised rows, one per vector the request asks for, in order, and says which requests it can
serve with ``serves(RequestType)`` (a wrapper asks the model under it). The requests:

- :class:`Texts`: texts, each read as the model reads text (cut at its window);
- :class:`TokenIds`: content token-id sequences of at most ``id_capacity(kind)`` ids, framed with the
  model's special tokens and prompt (a model fed token ids, ``st:``);
- :class:`LateChunks`: windows each read in one pass and chunks pooled from their parts' outputs:
  a window is token ids (a local model) or its chunk texts (an API with late chunking of its own);
- :class:`StretchedIds`: content-id sequences of any length, each read in one pass with its
  positions re-used or stretched (:mod:`embedeval.embedders.stretch`).

Each carries its ``kind`` (``"query"`` or ``"document"``) and knows what the wrappers need of it
without their asking which type it is: its vectors' cache keys (:meth:`Texts.cache_keys`, the bytes
the cache has always used), the part of it that asks for some of its vectors (``subset``), its
tokens (``tokens``), the model inputs it is made of (``units``, what a plan records), the bytes a
plan's stand-in vectors are drawn from (``stand_in_bytes``), and its JSON form for the plan's timing
process (``to_json``, :func:`request_from_json`). Only the model that serves a request branches on
its type (:class:`ModelServer`); ``embed(texts, kind)`` is the small convenience of a request of texts
(:class:`RequestEmbedder`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from embedeval.embedders.stretch_methods import Stretch
from embedeval.errors import InputError

Kind = Literal["query", "document"]
KINDS: tuple[str, ...] = ("query", "document")

#: Counts texts' tokens for :meth:`Texts.tokens`: a list of texts -> tokens per text.
TextCounter = Callable[[list[str]], list[int]]


def check_kind(kind: str) -> None:
    """One :class:`InputError` for a ``kind`` that is not one of :data:`KINDS`."""
    if kind not in KINDS:
        raise InputError(f"unknown embedding kind {kind!r}; use one of {', '.join(KINDS)}")


def check_texts(texts: Sequence[str], kind: str) -> list[str]:
    """Validate an embed() call: a known ``kind`` and non-empty strings. Returns a list."""
    check_kind(kind)
    if isinstance(texts, str):
        raise InputError("embed() takes a list of texts, not a single string")
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"text #{i} is {type(text).__name__}, not a string")
        if not text.strip():
            raise InputError(f"text #{i} is empty")
    return texts


def id_bytes(ids) -> bytes:
    """Token ids as the bytes requests hold and keys hash: little-endian int32. Ids that are no
    whole numbers (1.5 was read as 1) or outside int32 (numpy's OverflowError) are one :class:`InputError`."""
    array = np.asarray(ids)
    if array.size and (array.dtype.kind not in "iu" or array.min() < -2**31 or array.max() >= 2**31):
        shown = array.ravel()[:5].tolist()
        raise InputError(f"token ids are whole numbers within int32, not {shown}{' ...' if array.size > 5 else ''}")
    return array.astype("<i4").tobytes()


def id_array(raw: bytes) -> np.ndarray:
    """Token ids held as :func:`id_bytes`, as an int32 array."""
    return np.frombuffer(raw, dtype="<i4")


def _sha256(*parts: bytes) -> bytes:
    return hashlib.sha256(b"".join(parts)).digest()


def _key_head(spec: str, fingerprint: str, kind_part: str) -> bytes:
    """``spec \\0 fingerprint \\0 kind_part \\0`` as UTF-8: what every vector key starts with."""
    return f"{spec}\0{fingerprint}\0{kind_part}\0".encode()


def _stand_in_ids(raw: bytes) -> bytes:
    """The bytes a stand-in vector of token ids is drawn from: the ids as int64."""
    return id_array(raw).astype(np.int64).tobytes()


@dataclass(frozen=True)
class Texts:
    """Texts to embed as the model reads text. Key of a vector:

        sha256(spec \\0 fingerprint \\0 kind \\0 text)"""

    texts: tuple[str, ...]
    kind: Kind = "document"
    #: What the cache's progress bar counts.
    unit: ClassVar[str] = "text"
    #: The name :func:`request_from_json` knows it by.
    label: ClassVar[str] = "texts"

    def __post_init__(self) -> None:
        check_texts(self.texts, self.kind)

    @classmethod
    def of(cls, texts: Sequence[str], kind: Kind = "document") -> Texts:
        return cls(texts if isinstance(texts, str) else tuple(texts), kind)

    def __len__(self) -> int:
        return len(self.texts)

    def cache_keys(self, spec: str, fingerprint: str) -> list[bytes]:
        return [hashlib.sha256(f"{spec}\0{fingerprint}\0{self.kind}\0{text}".encode()).digest() for text in self.texts]

    def subset(self, rows: Sequence[int]) -> Texts:
        return Texts(tuple(self.texts[i] for i in rows), self.kind)

    def tokens(self, count_texts: TextCounter) -> int:
        """The tokens of the texts as ``count_texts`` counts them."""
        return sum(count_texts(list(self.texts))) if self.texts else 0

    def units(self) -> list[Texts]:
        return [Texts((text,), self.kind) for text in self.texts]

    def stand_in_bytes(self) -> list[bytes]:
        return [text.encode() for text in self.texts]

    @classmethod
    def joined(cls, requests: Sequence[Texts]) -> Texts:
        return cls(tuple(t for r in requests for t in r.texts), requests[0].kind)

    def join_key(self) -> tuple:
        return (type(self), self.kind)

    def to_json(self) -> dict:
        return {"request": self.label, "kind": self.kind, "texts": list(self.texts)}

    @classmethod
    def from_json(cls, row: dict) -> Texts:
        return cls(tuple(row["texts"]), row["kind"])


class IdSequences:
    """What :class:`TokenIds` and :class:`StretchedIds` share: ``ids``, a tuple of id sequences
    (each :func:`id_bytes`), keyed on the ids with ``_fingerprint(fingerprint)``."""

    ids: tuple[bytes, ...]
    kind: Kind

    def __post_init__(self) -> None:
        check_kind(self.kind)

    def __len__(self) -> int:
        return len(self.ids)

    def sequences(self) -> list[np.ndarray]:
        """The id sequences as int32 arrays."""
        return [id_array(raw) for raw in self.ids]

    def _fingerprint(self, fingerprint: str) -> str:
        return fingerprint

    def cache_keys(self, spec: str, fingerprint: str) -> list[bytes]:
        head = _key_head(spec, self._fingerprint(fingerprint), f"{self.kind}:ids")
        return [_sha256(head, raw) for raw in self.ids]

    def tokens(self, count_texts: TextCounter) -> int:
        """The ids (``count_texts`` is for texts: none here)."""
        return sum(len(raw) // 4 for raw in self.ids)

    def stand_in_bytes(self) -> list[bytes]:
        return [_stand_in_ids(raw) for raw in self.ids]

    def _ids_json(self) -> list[list[int]]:
        return [id_array(raw).tolist() for raw in self.ids]


@dataclass(frozen=True)
class TokenIds(IdSequences):
    """Content token-id sequences (each :func:`id_bytes`) a model fed ids frames with its special
    tokens and prompt. Key of a vector (``:ids`` keeps it apart from text keys):

        sha256(spec \\0 fingerprint \\0 kind:ids \\0 ids as little-endian int32)"""

    ids: tuple[bytes, ...]
    kind: Kind = "document"
    unit: ClassVar[str] = "text"
    label: ClassVar[str] = "ids"

    @classmethod
    def of(cls, ids: Sequence[Sequence[int]], kind: Kind = "document") -> TokenIds:
        check_kind(kind)
        return cls(tuple(id_bytes(seq) for seq in ids), kind)

    def subset(self, rows: Sequence[int]) -> TokenIds:
        return type(self)(tuple(self.ids[i] for i in rows), self.kind)

    def units(self) -> list[TokenIds]:
        return [type(self)((raw,), self.kind) for raw in self.ids]

    @classmethod
    def joined(cls, requests: Sequence[TokenIds]) -> TokenIds:
        return cls(tuple(raw for r in requests for raw in r.ids), requests[0].kind)

    def join_key(self) -> tuple:
        return (type(self), self.kind)

    def to_json(self) -> dict:
        return {"request": self.label, "kind": self.kind, "ids": self._ids_json()}

    @classmethod
    def from_json(cls, row: dict) -> TokenIds:
        return cls.of(row["ids"], row["kind"])


@dataclass(frozen=True)
class StretchedIds(IdSequences):
    """Content-id sequences of any length, each read in one pass with its positions re-used or
    stretched as ``stretch`` says (:mod:`embedeval.embedders.stretch`). Keyed as :class:`TokenIds`
    with the stretch's key joined to the fingerprint (a vector depends on the method and the ids
    read, and for ``pi`` on the length read up to: :attr:`~embedeval.embedders.stretch_methods.Stretch.key`):

        sha256(spec \\0 fingerprint|stretch key \\0 kind:ids \\0 ids as little-endian int32)"""

    ids: tuple[bytes, ...]
    stretch: Stretch
    kind: Kind = "document"
    unit: ClassVar[str] = "text"
    label: ClassVar[str] = "stretched ids"

    @classmethod
    def of(cls, ids: Sequence[Sequence[int]], stretch: Stretch, kind: Kind = "document") -> StretchedIds:
        check_kind(kind)
        return cls(tuple(id_bytes(seq) for seq in ids), stretch, kind)

    def _fingerprint(self, fingerprint: str) -> str:
        return f"{fingerprint}|{self.stretch.key}"

    def subset(self, rows: Sequence[int]) -> StretchedIds:
        return StretchedIds(tuple(self.ids[i] for i in rows), self.stretch, self.kind)

    def units(self) -> list[StretchedIds]:
        return [StretchedIds((raw,), self.stretch, self.kind) for raw in self.ids]

    @classmethod
    def joined(cls, requests: Sequence[StretchedIds]) -> StretchedIds:
        return cls(tuple(raw for r in requests for raw in r.ids), requests[0].stretch, requests[0].kind)

    def join_key(self) -> tuple:
        return (type(self), self.kind, self.stretch)

    def to_json(self) -> dict:
        return {"request": self.label, "kind": self.kind, "ids": self._ids_json(),
                "stretch": [self.stretch.method, self.stretch.logscale, self.stretch.length]}

    @classmethod
    def from_json(cls, row: dict) -> StretchedIds:
        return cls.of(row["ids"], Stretch(*row["stretch"]), row["kind"])


#: A late-chunking window: token ids (:func:`id_bytes`) or its chunk texts.
Window = bytes | tuple[str, ...]


def _window_bytes(window: Window) -> bytes:
    """A window as the bytes its chunks' keys hash: ids as little-endian int32, texts NUL-joined."""
    return window if isinstance(window, bytes) else "\0".join(window).encode("utf-8", "surrogatepass")


@dataclass(frozen=True)
class LateChunks:
    """Late chunking: ``windows`` each read in a single pass (token ids for a model fed ids, chunk
    texts for an API with late chunking of its own); a chunk is a sequence of parts ``(w, start,
    end)``, units ``[start, end)`` of window ``w``; one vector per chunk, pooled from its parts'
    outputs. A chunk's key covers every window it reads (its vector depends on all they hold);
    a chunk inside one window:

        sha256(spec \\0 fingerprint \\0 kind:late \\0 start:end \\0 window bytes)

    and a chunk of ``n`` parts (``kind:late:n``, then per part ``start:end:len(window bytes)
    \\0 window bytes``)."""

    windows: tuple[Window, ...]
    chunks: tuple[tuple[tuple[int, int, int], ...], ...]
    kind: Kind = "document"
    unit: ClassVar[str] = "chunk"
    label: ClassVar[str] = "late chunks"

    def __post_init__(self) -> None:
        check_kind(self.kind)
        sizes = [len(w) if isinstance(w, tuple) else len(w) // 4 for w in self.windows]  # texts, or int32 ids
        for i, parts in enumerate(self.chunks):
            # refused when made, not when a model reads it: a window that is not there was an IndexError of the cache's keys
            bad = next(((w, a, b) for w, a, b in parts if not (0 <= w < len(sizes) and 0 <= a < b <= sizes[w])), None)
            if not parts or bad is not None:
                raise InputError(f"late chunk #{i} " + (f"has a part {bad} outside its window's units [0, n)" if parts else "has no part")
                                 + f" (windows of {sizes} units)")

    @classmethod
    def of(cls, windows: Sequence, chunks: Sequence[Sequence[tuple[int, int, int]]], kind: Kind = "document") -> LateChunks:
        """Windows given as id sequences or as sequences of chunk texts; chunks as ``(w, start, end)`` parts."""
        check_kind(kind)

        def window(units) -> Window:
            items = units if isinstance(units, np.ndarray) else list(units)
            return tuple(items) if len(items) and isinstance(items[0], str) else id_bytes(items)

        return cls(tuple(window(w) for w in windows),
                   tuple(tuple((int(w), int(a), int(b)) for w, a, b in parts) for parts in chunks), kind)

    def __len__(self) -> int:
        return len(self.chunks)

    def window_units(self) -> list:
        """Each window as a model reads it: token ids as an int32 array, chunk texts as a list."""
        return [window if isinstance(window, tuple) else id_array(window) for window in self.windows]

    def cache_keys(self, spec: str, fingerprint: str) -> list[bytes]:
        window_keys = [_window_bytes(w) for w in self.windows]
        keys = []
        for parts in self.chunks:
            if len(parts) == 1:
                (w, start, end), = parts
                keys.append(_sha256(_key_head(spec, fingerprint, f"{self.kind}:late"), f"{start}:{end}\0".encode(),
                                    window_keys[w]))
                continue
            digest = hashlib.sha256(_key_head(spec, fingerprint, f"{self.kind}:late:{len(parts)}"))
            for w, start, end in parts:
                digest.update(f"{start}:{end}:{len(window_keys[w])}\0".encode() + window_keys[w])
            keys.append(digest.digest())
        return keys

    def subset(self, rows: Sequence[int]) -> LateChunks:
        """The chunks ``rows`` with the windows they read (in window order), re-numbered."""
        used = sorted({w for c in rows for w, _, _ in self.chunks[c]})
        local = {w: i for i, w in enumerate(used)}
        return LateChunks(tuple(self.windows[w] for w in used),
                          tuple(tuple((local[w], a, b) for w, a, b in self.chunks[c]) for c in rows), self.kind)

    def tokens(self, count_texts: TextCounter) -> int:
        """The tokens of the windows: a window of ids its length, one of texts its texts' tokens
        as ``count_texts`` counts them."""
        texts = [text for window in self.windows if isinstance(window, tuple) for text in window]
        counted = sum(count_texts(texts)) if texts else 0
        return counted + sum(len(window) // 4 for window in self.windows if isinstance(window, bytes))

    def units(self) -> list[TokenIds | LateChunks]:
        """The inputs the model is given: each window (a window of ids as the :class:`TokenIds` it
        is, one of texts with a chunk per text)."""
        return [TokenIds((window,), self.kind) if isinstance(window, bytes) else
                LateChunks((window,), tuple(((0, i, i + 1),) for i in range(len(window))), self.kind)
                for window in self.windows]

    def stand_in_bytes(self) -> list[bytes]:
        return [repr(list(parts)).encode() for parts in self.chunks]

    @classmethod
    def joined(cls, requests: Sequence[LateChunks]) -> LateChunks:
        windows, chunks = [], []
        for request in requests:
            chunks += [tuple((w + len(windows), a, b) for w, a, b in parts) for parts in request.chunks]
            windows += request.windows
        return cls(tuple(windows), tuple(chunks), requests[0].kind)

    def join_key(self) -> tuple:
        return (type(self), self.kind)

    def to_json(self) -> dict:
        return {"request": self.label, "kind": self.kind, "chunks": [[list(part) for part in parts] for parts in self.chunks],
                "windows": [list(w) if isinstance(w, tuple) else id_array(w).tolist() for w in self.windows]}

    @classmethod
    def from_json(cls, row: dict) -> LateChunks:
        return cls.of(row["windows"], row["chunks"], row["kind"])


Request = Texts | TokenIds | StretchedIds | LateChunks
REQUEST_TYPES: dict[str, type] = {cls.label: cls for cls in (Texts, TokenIds, StretchedIds, LateChunks)}


def request_from_json(row: dict) -> Request:
    """A request from its ``to_json()`` form (the plan's timing process reads its sample so)."""
    return REQUEST_TYPES[row["request"]].from_json(row)


def joined(requests: Sequence[Request]) -> list[Request]:
    """``requests`` joined into one request per type, kind (and stretch): a sample of recorded
    inputs as the run would send them, a call each."""
    groups: dict[tuple, list] = {}
    for request in requests:
        groups.setdefault(request.join_key(), []).append(request)
    return [group[0].joined(group) for group in groups.values()]


def innermost(embedder):
    """The model under ``embedder``'s wrappers (followed through ``inner``)."""
    while getattr(embedder, "inner", None) is not None:
        embedder = embedder.inner
    return embedder


def late_chunking_refusal(embedder) -> str | None:
    """Why the innermost model under ``embedder`` (through its wrappers' ``inner``) says late
    chunking is not defined for it (its ``late_chunking_refusal()``), or None."""
    refusal = getattr(innermost(embedder), "late_chunking_refusal", None)
    return refusal() if callable(refusal) else None


class RequestEmbedder:
    """What every embedder of embedeval is: ``embed_request(request)`` and ``serves(request_type)``
    (see the module docstring); ``embed(texts, kind)`` is the convenience of a request of texts."""

    def embed(self, texts: Sequence[str], kind: Kind = "document") -> np.ndarray:
        """Vectors of ``texts`` (sentence-transformers style): ``embed_request(Texts(texts, kind))``."""
        return self.embed_request(Texts.of(texts, kind))

    def embed_request(self, request: Request) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def serves(self, request_type: type) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError


class ModelServer(RequestEmbedder):
    """A model that serves requests itself: ``request_methods`` maps each request type it serves to the name
    of its method for it (which gets the request, never an empty one). ``embed_request`` answers an
    empty request with a ``(0, dim)`` array without reaching the model, and a request of a type not
    served with one :class:`InputError`."""

    request_methods: ClassVar[dict[type, str]] = {}

    def serves(self, request_type: type) -> bool:
        return request_type in self.request_methods

    def embed_request(self, request: Request) -> np.ndarray:
        method = self.request_methods.get(type(request))
        if method is None:
            raise InputError(f"{self.name} does not embed {type(request).label}")
        if not len(request):
            return np.zeros((0, self.dim), dtype=np.float32)
        return getattr(self, method)(request)

"""The request types (embedeval.embedders.requests): their cache keys are the bytes the cache used
before requests existed (no vector is embedded again), and what the wrappers ask of them."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest

from embedeval.embedders.requests import LateChunks, StretchedIds, Texts, TokenIds, joined, request_from_json
from embedeval.embedders.stretch_methods import Stretch
from embedeval.errors import InputError

SPEC, FINGERPRINT = "st:all-MiniLM-L6-v2?dtype=float16", "0f1e2d3c"


# The key functions as embedeval.embedders.cache wrote them before the requests (copied, not imported).
def old_cache_key(spec: str, fingerprint: str, kind: str, text: str) -> bytes:
    return hashlib.sha256(f"{spec}\0{fingerprint}\0{kind}\0{text}".encode()).digest()


def old_ids_cache_key(spec: str, fingerprint: str, kind: str, ids) -> bytes:
    head = f"{spec}\0{fingerprint}\0{kind}:ids\0".encode()
    return hashlib.sha256(head + np.asarray(ids, dtype="<i4").tobytes()).digest()


def old_late_chunk_key(spec: str, fingerprint: str, kind: str, parts) -> bytes:
    if len(parts) == 1:
        (window, (start, end)), = parts
        return hashlib.sha256(f"{spec}\0{fingerprint}\0{kind}:late\0{int(start)}:{int(end)}\0".encode() + window).digest()
    digest = hashlib.sha256(f"{spec}\0{fingerprint}\0{kind}:late:{len(parts)}\0".encode())
    for window, (start, end) in parts:
        digest.update(f"{int(start)}:{int(end)}:{len(window)}\0".encode() + window)
    return digest.digest()


def old_window_bytes(window) -> bytes:
    items = list(window)
    if items and isinstance(items[0], str):
        return "\0".join(items).encode("utf-8", "surrogatepass")
    return np.asarray(items, dtype="<i4").tobytes()


def old_late_keys(windows, chunks, kind):
    window_keys = [old_window_bytes(w) for w in windows]
    return [old_late_chunk_key(SPEC, FINGERPRINT, kind, [(window_keys[w], (start, end)) for w, start, end in parts])
            for parts in chunks]


TEXTS = ["a short text", "ünïcödé and emoji 🙂", "a short text", "tabs\tand\nnewlines"]
IDS = [np.array([101, 2023, 2003], dtype=np.int32), [7, 8, 9, 10, 11], np.arange(300, dtype=np.int32), [2**31 - 1]]


@pytest.mark.parametrize("kind", ["query", "document"])
def test_text_keys_are_the_old_keys_byte_for_byte(kind):
    request = Texts.of(TEXTS, kind)
    assert request.cache_keys(SPEC, FINGERPRINT) == [old_cache_key(SPEC, FINGERPRINT, kind, t) for t in TEXTS]


@pytest.mark.parametrize("kind", ["query", "document"])
def test_token_id_keys_are_the_old_keys_byte_for_byte(kind):
    request = TokenIds.of(IDS, kind)
    assert request.cache_keys(SPEC, FINGERPRINT) == [old_ids_cache_key(SPEC, FINGERPRINT, kind, seq) for seq in IDS]


@pytest.mark.parametrize("stretch", [Stretch("gp"), Stretch("rp", logscale=True), Stretch("pi", length=1024),
                                     Stretch("pi", logscale=True, length=600), Stretch("pi-dynamic"), Stretch("ntk", True),
                                     Stretch("linear")])
def test_stretched_keys_are_the_old_keys_byte_for_byte(stretch):
    request = StretchedIds.of(IDS, stretch, "document")
    fingerprint = f"{FINGERPRINT}|{stretch.key}"  # as CachedTokenIdEmbedder.embed_stretched joined them
    assert request.cache_keys(SPEC, FINGERPRINT) == [old_ids_cache_key(SPEC, fingerprint, "document", seq) for seq in IDS]
    assert request.cache_keys(SPEC, FINGERPRINT) != TokenIds.of(IDS).cache_keys(SPEC, FINGERPRINT)


def test_late_chunk_keys_of_id_windows_are_the_old_keys_byte_for_byte():
    windows = [np.arange(10, 40, dtype=np.int32), np.arange(30, 60, dtype=np.int32), [5, 6, 7]]
    chunks = [((0, 0, 8),), ((0, 8, 16),), ((0, 24, 30), (1, 0, 6)), ((1, 6, 30),), ((2, 0, 3),), ((0, 1, 2), (1, 1, 2), (2, 1, 2))]
    for kind in ("query", "document"):
        assert LateChunks.of(windows, chunks, kind).cache_keys(SPEC, FINGERPRINT) == old_late_keys(windows, chunks, kind)


def test_late_chunk_keys_of_text_windows_are_the_old_keys_byte_for_byte():
    windows = [("first chunk.", "second chunk, ü.", "third"), ("another window",)]
    chunks = [((0, 0, 1),), ((0, 1, 2),), ((0, 2, 3),), ((1, 0, 1),)]
    request = LateChunks.of(windows, chunks)
    assert request.cache_keys(SPEC, FINGERPRINT) == old_late_keys(windows, chunks, "document")
    assert request.cache_keys(SPEC, FINGERPRINT) != LateChunks.of(windows, chunks, "query").cache_keys(SPEC, FINGERPRINT)


def test_a_subset_of_late_chunks_keeps_its_keys_with_only_the_windows_it_reads():
    windows = [np.arange(10, 40), np.arange(30, 60), np.arange(100, 120)]
    chunks = [((0, 0, 8),), ((0, 24, 30), (1, 0, 6)), ((2, 0, 3),)]
    request = LateChunks.of(windows, chunks)
    part = request.subset([2, 1])
    assert len(part.windows) == 3 and part.chunks == (((2, 0, 3),), ((0, 24, 30), (1, 0, 6)))
    alone = request.subset([2])
    assert len(alone.windows) == 1 and alone.chunks == (((0, 0, 3),),)
    keys = request.cache_keys(SPEC, FINGERPRINT)
    assert part.cache_keys(SPEC, FINGERPRINT) == [keys[2], keys[1]] and alone.cache_keys(SPEC, FINGERPRINT) == [keys[2]]


def test_tokens_count_ids_by_length_and_texts_as_told():
    count = lambda texts: [len(t.split()) for t in texts]  # noqa: E731
    assert Texts.of(["a b c", "d"]).tokens(count) == 4
    assert TokenIds.of([[1, 2, 3], [4]]).tokens(count) == 4
    assert StretchedIds.of([[1, 2, 3], [4]], Stretch("gp")).tokens(count) == 4
    assert LateChunks.of([[1, 2, 3], [4, 5]], [((0, 0, 1),), ((1, 0, 2),)]).tokens(count) == 5
    assert LateChunks.of([("a b", "c")], [((0, 0, 1),), ((0, 1, 2),)]).tokens(count) == 3


def test_units_are_the_model_inputs_a_plan_records():
    assert Texts.of(["a", "b"]).units() == [Texts(("a",)), Texts(("b",))]
    late = LateChunks.of([[1, 2, 3], [4, 5]], [((0, 0, 1),), ((1, 0, 2),), ((0, 1, 3),)])
    assert late.units() == TokenIds.of([[1, 2, 3], [4, 5]]).units()  # a window of ids is read as the ids it is
    text_late = LateChunks.of([("a", "b")], [((0, 0, 1),), ((0, 1, 2),)])
    assert text_late.units() == [text_late]
    assert len({*Texts.of(["a"], "query").units(), *Texts.of(["a"]).units()}) == 2  # kinds apart


@pytest.mark.parametrize("request_", [
    Texts.of(["a", "ü b"], "query"),
    TokenIds.of([[1, 2], [3]]),
    StretchedIds.of([[1, 2, 3]], Stretch("pi", logscale=True, length=700)),
    LateChunks.of([[1, 2, 3]], [((0, 0, 2),)]),
    LateChunks.of([("a", "b")], [((0, 0, 1),), ((0, 1, 2),)], "query"),
], ids=lambda r: type(r).__name__)
def test_the_timing_process_reads_a_request_back_as_it_was_written(request_):
    assert request_from_json(json.loads(json.dumps(request_.to_json()))) == request_


def test_a_sample_is_joined_into_a_call_per_type_kind_and_stretch():
    gp, ntk = Stretch("gp"), Stretch("ntk")
    sample = [Texts(("a",)), TokenIds.of([[1]]), Texts(("b",)), Texts(("q",), "query"), StretchedIds.of([[2]], gp),
              StretchedIds.of([[3]], ntk), StretchedIds.of([[4]], gp), TokenIds.of([[5, 6]])]
    assert joined(sample) == [Texts(("a", "b")), TokenIds.of([[1], [5, 6]]), Texts(("q",), "query"),
                              StretchedIds.of([[2], [4]], gp), StretchedIds.of([[3]], ntk)]
    late = joined([LateChunks.of([[1, 2]], [((0, 0, 1),)]), LateChunks.of([[3, 4]], [((0, 1, 2),)])])
    assert late == [LateChunks.of([[1, 2], [3, 4]], [((0, 0, 1),), ((1, 1, 2),)])]


def test_bad_requests_are_refused_with_the_words_embed_used():
    with pytest.raises(InputError, match="unknown embedding kind 'passage'"):
        Texts.of(["a"], "passage")
    with pytest.raises(InputError, match="unknown embedding kind 'passage'"):
        TokenIds.of([[1]], "passage")
    with pytest.raises(InputError, match="not a single string"):
        Texts.of("abc")
    with pytest.raises(InputError, match="text #1 is empty"):
        Texts.of(["a", " "])


def test_stand_in_vectors_are_drawn_from_the_bytes_the_recorder_used_before():
    from embedeval.embedders.recorder import stand_in_vectors

    def old_raw(item) -> bytes:  # the recorder's raw() before the requests: texts as UTF-8, ids as int64
        return item.encode() if isinstance(item, str) else np.asarray(item, dtype=np.int64).tobytes()

    ids = [(1, 2, 3), (2**31 - 1,)]
    assert Texts.of(["a", "ü"]).stand_in_bytes() == [old_raw("a"), old_raw("ü")]
    assert TokenIds.of(ids).stand_in_bytes() == [old_raw(seq) for seq in ids]
    assert StretchedIds.of(ids, Stretch("gp")).stand_in_bytes() == [old_raw(seq) for seq in ids]
    chunks = [[(0, 0, 2)], [(0, 1, 3), (1, 0, 1)]]  # as the cache passed a group's chunks: lists of tuples
    assert LateChunks.of([[1, 2, 3], [4]], chunks).stand_in_bytes() == [old_raw(repr(chunk)) for chunk in chunks]
    vectors = stand_in_vectors(TokenIds.of(ids).stand_in_bytes(), 8)
    assert vectors.shape == (2, 8) and np.allclose(np.linalg.norm(vectors, axis=1), 1)


@pytest.mark.parametrize("chunks, says", [
    ([[(5, 0, 1)]], "late chunk #0 has a part (5, 0, 1) outside its window's units"),  # was IndexError in cache_keys
    ([[(0, 2, 10)]], "late chunk #0 has a part (0, 2, 10) outside its window's units"),
    ([[(0, 2, 2)]], "late chunk #0 has a part (0, 2, 2) outside its window's units"),
    ([[(0, 0, 1)], []], "late chunk #1 has no part"),
])
def test_a_late_chunk_outside_its_windows_is_refused_when_the_request_is_made(chunks, says):
    """A late-chunk request with a part outside its windows was keyed by the cache before any
    model looked at it (an IndexError for a window that is not there); it is one InputError when made."""
    from embedeval.embedders.requests import LateChunks
    from embedeval.errors import InputError

    with pytest.raises(InputError, match=re.escape(says)):
        LateChunks.of([[1, 2, 3]], chunks)
    assert len(LateChunks.of([[1, 2, 3], [4, 5]], [[(0, 2, 3), (1, 0, 2)]]).cache_keys("s", "f")) == 1
    assert len(LateChunks.of([("a", "b")], [[(0, 0, 1)], [(0, 1, 2)]])) == 2


@pytest.mark.parametrize("ids", [[1.5], [2**40], [True], ["3"]])
def test_token_ids_that_are_no_int32_whole_numbers_are_refused_not_cut(ids):
    """TokenIds.of([[1.5]]) read id 1 (and keyed its vector so), 2**40 was numpy's OverflowError."""
    from embedeval.embedders.requests import TokenIds

    with pytest.raises(InputError, match="token ids are whole numbers within int32"):
        TokenIds.of([ids])
    assert TokenIds.of([np.array([1, 2], dtype=np.int64)]).ids == (np.array([1, 2], dtype="<i4").tobytes(),)

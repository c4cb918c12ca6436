"""A shared chroma server (``--chroma-url``): a real ``chroma run`` on 127.0.0.1, started here."""

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from embedeval.chunking import Chunk
from embedeval.cli import app
from embedeval.defaults import DEFAULT_NEEDLES
from embedeval.errors import ConfigError
from embedeval.experiments.context_rot import needle_haystack_similarity
from embedeval.index import chroma_client, collection_identity, collection_name, top_k
from embedeval.needles import load_needle_set

from fakes import CountingEmbedder


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def chroma_url(tmp_path_factory):
    """``chroma run`` (the CLI of the installed chromadb) on a free 127.0.0.1 port, stopped afterwards."""
    chroma = Path(sys.executable).with_name("chroma")
    assert chroma.exists(), f"chromadb's `chroma` command is not beside {sys.executable}"
    folder = tmp_path_factory.mktemp("chroma-server")
    port = free_port()
    log = (folder / "server.log").open("wb")
    server = subprocess.Popen([str(chroma), "run", "--host", "127.0.0.1", "--port", str(port), "--path", str(folder / "db")],
                              stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "ANONYMIZED_TELEMETRY": "False"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:  # bounded: 60 s, or the server exiting
            try:
                if httpx.get(f"{url}/api/v2/heartbeat", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None, (folder / "server.log").read_text(errors="replace")[-2000:]
            assert time.monotonic() < deadline, "chroma run did not answer its heartbeat within 60 s"
            time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=15)
        log.close()


@pytest.fixture
def writes(monkeypatch):
    """Counts of vectors written to any chroma collection (``add`` and ``upsert``), in this process."""
    from chromadb.api.models.Collection import Collection

    counts = {"add": 0, "upsert": 0}
    for method in counts:
        original = getattr(Collection, method)

        def counted(self, *args, _original=original, _method=method, **kwargs):
            counts[_method] += len(kwargs.get("ids") or args[0])
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(Collection, method, counted)
    return counts


def random_unit_vectors(n: int, dim: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_top_k_through_the_server_equals_faiss(chroma_url):
    vectors, queries = random_unit_vectors(600, 32, 1), random_unit_vectors(20, 32, 2)
    by_faiss = top_k(vectors, queries, 7, index="faiss")
    by_server = top_k(vectors, queries, 7, index="chroma", url=chroma_url)
    np.testing.assert_array_equal(by_server[1], by_faiss[1])
    np.testing.assert_allclose(by_server[0], by_faiss[0], atol=1e-5)


def book_chunks(n: int) -> list[Chunk]:
    words = "the river ran past the mill while Yuki counted barges under a grey sky".split()
    return [Chunk(f"book{i % 3}:{i}", f"book{i % 3}", " ".join(words[i % 7 :] + words[: i % 5]) + f" ({i})")
            for i in range(n)]


def test_a_second_run_reuses_the_collection_without_embedding_or_adding(chroma_url, writes):
    needle_set = load_needle_set(DEFAULT_NEEDLES)
    needle_set = needle_set.subset([g.id for g in needle_set.groups[:3]])
    chunks = book_chunks(120)
    origin = {"corpus": "dir:books", "chunker": "sentences:1-3", "seed": 0}
    first_model = CountingEmbedder("fake:counting", dim=16)
    first = needle_haystack_similarity(needle_set, chunks, [first_model], top=5, index="chroma", chroma_url=chroma_url,
                                       chunk_origin=origin)
    assert writes["add"] + writes["upsert"] == 120
    assert any(len(call) == 120 for call in first_model.calls)  # the chunks were embedded once
    by_faiss = needle_haystack_similarity(needle_set, chunks, [CountingEmbedder("fake:counting", dim=16)], top=5)
    np.testing.assert_allclose(first["fake:counting"], by_faiss["fake:counting"], atol=1e-5)

    again_model = CountingEmbedder("fake:counting", dim=16)
    again = needle_haystack_similarity(needle_set, chunks, [again_model], top=5, index="chroma", chroma_url=chroma_url,
                                       chunk_origin=origin)
    assert writes["add"] + writes["upsert"] == 120  # nothing written the second time
    assert all(len(call) != 120 for call in again_model.calls)  # and the chunks were not even embedded
    pd.testing.assert_frame_equal(again, first)
    renamed = {**origin, "corpus": "dir:/srv/shared/books"}  # the same chunks, their folder named otherwise
    moved = needle_haystack_similarity(needle_set, chunks, [CountingEmbedder("fake:counting", dim=16)], top=5,
                                       index="chroma", chroma_url=chroma_url, chunk_origin=renamed)
    assert writes["add"] + writes["upsert"] == 120  # shares the collection: the origin is recorded, not compared
    pd.testing.assert_frame_equal(moved, first)

    client = chroma_client(chroma_url)
    identity = collection_identity("fake:counting", "v1", 16, [c.id for c in chunks], [c.text for c in chunks], origin)
    collection = client.get_collection(collection_name(identity))
    assert collection.count() == 120
    assert {k: v for k, v in collection.metadata.items() if k.startswith("embedeval:")} == {
        f"embedeval:{k}": v for k, v in identity.items()}
    assert collection.metadata["embedeval:corpus"] == "dir:books" and collection.metadata["embedeval:chunker"] == "sentences:1-3"

    other = CountingEmbedder("fake:counting", dim=16, fingerprint="v2")  # another model version: its own collection
    needle_haystack_similarity(needle_set, chunks, [other], top=5, index="chroma", chroma_url=chroma_url, chunk_origin=origin)
    assert writes["add"] + writes["upsert"] == 240


def test_an_incomplete_collection_is_completed(chroma_url, writes):
    chunks = book_chunks(50)
    texts = [c.text for c in chunks]
    identity = collection_identity("fake:partial", "v1", 8, [c.id for c in chunks], texts)
    vectors = np.stack([CountingEmbedder.vector_for(t) for t in texts]).astype(np.float32)
    client = chroma_client(chroma_url)
    metadata = {"hnsw:space": "cosine", **{f"embedeval:{k}": v for k, v in identity.items()}}
    partial = client.create_collection(collection_name(identity), embedding_function=None, metadata=metadata)
    partial.add(ids=[str(i) for i in range(20)], embeddings=vectors[:20])  # a run that stopped mid-way
    scores, ids = top_k(lambda: vectors, vectors[:3], 1, index="chroma", url=chroma_url, identity=identity)
    assert partial.count() == 50 and ids[:, 0].tolist() == [0, 1, 2]
    # made with chroma's default ef_search (100 in chromadb 1.x): raised to what this search asks for, and kept
    assert partial.configuration["hnsw"]["ef_search"] < 256
    assert client.get_collection(collection_name(identity)).configuration["hnsw"]["ef_search"] == 256


def test_a_collection_in_another_space_is_refused(chroma_url):
    vectors = random_unit_vectors(30, 8, 3)
    identity = collection_identity("fake:l2", "v1", 8, [str(i) for i in range(30)], [f"t{i}" for i in range(30)])
    metadata = {"hnsw:space": "l2", **{f"embedeval:{k}": v for k, v in identity.items()}}
    chroma_client(chroma_url).create_collection(collection_name(identity), embedding_function=None, metadata=metadata)
    with pytest.raises(ConfigError, match=r"chroma collection .* measures l2 distance, not cosine"):
        top_k(vectors, vectors[:2], 1, index="chroma", url=chroma_url, identity=identity)


@pytest.mark.slow
def test_the_cli_takes_a_chroma_url_and_reuses_its_collection(chroma_url, writes, tmp_path, books_dir):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for book in sorted(books_dir.glob("*.txt"))[:3]:
        (corpus / book.name).write_text(book.read_text(encoding="utf-8")[20_000:26_000], encoding="utf-8")
    common = ["similarity", "needle-haystack", "--groups", ",".join(g.id for g in load_needle_set(DEFAULT_NEEDLES).groups[:2]),
              "--corpus", f"dir:{corpus}", "--min-books", "3", "--top-k", "5", "-q"]
    runner = CliRunner()
    result = runner.invoke(app, [*common, "--out", str(tmp_path / "faiss.csv")])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, [*common, "--index", "chroma", "--chroma-url", chroma_url, "--out", str(tmp_path / "server.csv")])
    assert result.exit_code == 0, result.output
    added = writes["add"] + writes["upsert"]
    assert added > 0
    by_faiss, by_server = pd.read_csv(tmp_path / "faiss.csv"), pd.read_csv(tmp_path / "server.csv")
    np.testing.assert_allclose(by_server["st:all-MiniLM-L6-v2"], by_faiss["st:all-MiniLM-L6-v2"], atol=1e-5)
    result = runner.invoke(app, [*common, "--index", "chroma", "--chroma-url", chroma_url, "--out", str(tmp_path / "again.csv")])
    assert result.exit_code == 0, result.output
    assert writes["add"] + writes["upsert"] == added  # the second run found its collection
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "again.csv"), by_server)
    names = [c.name for c in chroma_client(chroma_url).list_collections()]
    assert any(name.startswith("ee-st-all-MiniLM-L6-v2-sentences-1-3-") for name in names), names


def test_a_server_that_is_not_there_is_one_error_line(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ConfigError, match=f"cannot reach the chroma server at {url}"):
        chroma_client(url)
    with pytest.raises(ConfigError, match="must look like http://HOST:PORT"):
        chroma_client("127.0.0.1:8000")
    result = CliRunner().invoke(app, ["similarity", "needle-haystack", "--chroma-url", url, "--out", str(tmp_path / "x.csv")])
    assert result.exit_code == 1 and "error: --chroma-url needs --index chroma" in result.output
    result = CliRunner().invoke(app, ["similarity", "absence", "--chroma-url", url, "--chroma-path", str(tmp_path / "db"),
                                      "--out", str(tmp_path / "x.csv")])
    assert result.exit_code == 1 and "error: --chroma-url and --chroma-path: give one or the other" in result.output


@pytest.mark.parametrize("embedder", ["st:all-MiniLM-L6-v2", "st:" + "/very/long/folder" * 20 + "/model", "openai:text-embedding-3-large"])
def test_collection_names_are_valid_chroma_names(embedder):
    identity = collection_identity(embedder, "f" * 300, 384, ["a"], ["text"], {"chunker": "sentences:1-3", "corpus": "shakespeare"})
    name = collection_name(identity)
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{1,61}[A-Za-z0-9]", name), name
    other = collection_name(collection_identity(embedder, "g", 384, ["a"], ["text"], {"chunker": "sentences:1-3"}))
    assert other != name  # another fingerprint, another collection


def test_a_collection_holding_other_chunks_under_the_name_is_refused(chroma_url):
    vectors = random_unit_vectors(30, 8, 4)
    identity = collection_identity("fake:clash", "v1", 8, [str(i) for i in range(30)], [f"t{i}" for i in range(30)])
    other = {**identity, "chunks_sha256": "0" * 64}
    metadata = {"hnsw:space": "cosine", **{f"embedeval:{k}": v for k, v in other.items()}}
    chroma_client(chroma_url).create_collection(collection_name(identity), embedding_function=None, metadata=metadata)
    with pytest.raises(ConfigError, match=r"chroma collection .* holds something else"):
        top_k(vectors, vectors[:2], 1, index="chroma", url=chroma_url, identity=identity)

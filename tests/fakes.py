"""Test doubles: a deterministic embedder that counts its calls, a copy of MiniLM with edited configs."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from embedeval.embedders.base import check_texts, l2_normalize
from embedeval.embedders.models import resolve_model_path
from embedeval.embedders.requests import ModelServer, Texts


@dataclass
class MatrixScorer:
    """A scorer's name and traits only, for :class:`~embedeval.similarity.HaystackScores` built
    from a hand-made score matrix."""

    name: str = "matrix"
    strategy: str = "full-text"
    windows_exact: bool = True
    normalizable: bool = False


class CountingEmbedder(ModelServer):
    """Unit vectors derived from sha256(kind, text); records every text it is asked to embed.
    Implements the whole :class:`~embedeval.embedders.base.Embedder` protocol, serving requests of
    texts through its ``embed`` (which subclasses replace)."""

    request_methods = {Texts: "_embed_texts"}

    def __init__(self, name: str = "fake:counting", dim: int = 8, fail_on_call: bool = False, fingerprint: str = "v1"):
        self.name = name
        self.fingerprint = fingerprint
        self.dim = dim
        self.max_tokens = 512
        self.fail_on_call = fail_on_call
        self.calls: list[list[str]] = []

    @staticmethod
    def vector_for(text: str, kind: str = "document", dim: int = 8) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(f"{kind}|{text}".encode()).digest()[:8], "little")
        return l2_normalize(np.random.default_rng(seed).normal(size=dim))[0]

    def _embed_texts(self, request):
        return self.embed(list(request.texts), request.kind)

    def embed(self, texts, kind="document"):
        texts = check_texts(texts, kind)
        if self.fail_on_call:
            raise AssertionError(f"model called for {len(texts)} texts")
        self.calls.append(list(texts))
        return np.stack([self.vector_for(t, kind, self.dim) for t in texts])

    def count_tokens(self, texts):
        return [len(t.split()) + 2 for t in texts]

    def check(self):
        pass


def similarity_table(embedder, haystacks, needle_set, forms, normalize_by="standard", strategy="truncate"):
    """The similarity table of ``embedder`` read through ``strategy`` (no reference tokenizer:
    a fake's texts are read whole)."""
    from embedeval.similarity import score_haystacks, similarity_rows
    from embedeval.strategies import EmbeddingScorer, Strategy

    scored = score_haystacks(EmbeddingScorer(embedder, Strategy(strategy)), haystacks, forms)
    return similarity_rows(scored, needle_set, normalize_by)


def copy_minilm(target: Path, **st_config) -> Path:
    """A copy of the bundled MiniLM folder (weights linked, configs copied), with
    ``config_sentence_transformers.json`` updated by ``st_config``."""
    source = Path(resolve_model_path("all-MiniLM-L6-v2"))
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("model.safetensors"))
    (target / "model.safetensors").symlink_to(source / "model.safetensors")
    config_path = target / "config_sentence_transformers.json"
    config = json.loads(config_path.read_text())
    config.update(st_config)
    config_path.write_text(json.dumps(config))
    return target


def cache_vectors(path) -> int:
    """Vectors in the cache file at ``path`` (0 while it does not exist or is being created)."""
    import sqlite3

    try:
        with sqlite3.connect(path, timeout=1) as conn:
            return conn.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]
    except sqlite3.Error:
        return 0


def kill_cli_run(args: list[str], cache_file, vectors: int, timeout: float = 300) -> int:
    """Run ``embedeval ARGS`` in a child process, SIGKILL it once its cache holds ``vectors``
    vectors, and return how many the cache kept; the run must still have been going."""
    import os
    import signal
    import subprocess
    import sys
    import time

    process = subprocess.Popen([sys.executable, "-c", "from embedeval.cli import main; main()", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + timeout
    while cache_vectors(cache_file) < vectors and process.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert process.poll() is None, f"run ended before it could be interrupted: {process.communicate()[1][-2000:]!r}"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    return cache_vectors(cache_file)


def newly_embedded(output: str, name: str = "st:all-MiniLM-L6-v2") -> int:
    """The count of ``NAME: N texts newly embedded`` in the output of ``embedeval nolima``."""
    return int(output.split(f"{name}: ")[1].split(" texts newly embedded")[0].replace(",", ""))


#: What a command says on stderr before it embeds with an embedder (embedeval.plan.forecast_line).
SAID_FIRST = r"(?P<name>\S+): (?P<to_embed>[\d,]+) texts to embed, (?P<cached>[\d,]+) found in the cache: the (?P<texts>[\d,]+) distinct .+"


def said_first(stderr: str, name: str = "st:all-MiniLM-L6-v2") -> tuple[int, int, int]:
    """(to embed, found in the cache, distinct texts) of the line a command says on stderr before it
    embeds with ``name``; the line must be there once."""
    import re

    found = [match for line in stderr.splitlines() if (match := re.fullmatch(SAID_FIRST, line)) and match["name"] == name]
    assert len(found) == 1, stderr
    return tuple(int(found[0][group].replace(",", "")) for group in ("to_embed", "cached", "texts"))


def without_said_first(output: str) -> list[str]:
    """The non-blank lines of a command's output but those it says before it embeds (:func:`said_first`)."""
    import re

    return [line for line in output.splitlines() if line.strip() and not re.fullmatch(SAID_FIRST, line)]


def write_word_books(folder: Path, words: list[str], sentence_words: tuple[int, int], seed: int, n_books: int = 10,
                     n_sentences: int = 60) -> Path:
    """``n_books`` books (``book00.txt`` ...) of ``n_sentences`` sentences, each a random run of
    ``words`` between ``sentence_words`` words long, drawn with ``seed``: prose the tests write."""
    rng = np.random.default_rng(seed)
    for b in range(n_books):
        sentences = [" ".join(rng.choice(words, size=int(rng.integers(*sentence_words)))).capitalize() + "."
                     for _ in range(n_sentences)]
        (folder / f"book{b:02d}.txt").write_text(" ".join(sentences) + "\n", encoding="utf-8")
    return folder


def small_model_folder(path: Path, architecture: str, positions: int, max_seq_length: int = 512,
                       initializer_range: float = 0.02) -> Path:
    """A small random-weight model with ``positions`` absolute positions (``bert``) or rotary
    positions (``modernbert``), saved as a sentence-transformers folder (mean pooling, Normalize)
    with the bundled model's tokenizer and ``max_seq_length``; a wider ``initializer_range`` gives
    sharper attention (a logit scale then shows in the vectors)."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoModel, AutoTokenizer, BertConfig, ModernBertConfig

    if architecture == "bert":
        config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                            max_position_embeddings=positions, initializer_range=initializer_range)
    else:
        config = ModernBertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=positions, pad_token_id=0, cls_token_id=101,
                                  sep_token_id=102, bos_token_id=101, eos_token_id=102, global_attn_every_n_layers=2,
                                  initializer_range=initializer_range)
    torch.manual_seed(0)
    AutoModel.from_config(config).save_pretrained(path / "weights")
    AutoTokenizer.from_pretrained(resolve_model_path("all-MiniLM-L6-v2")).save_pretrained(path / "weights")
    transformer = models.Transformer(str(path / "weights"), max_seq_length=max_seq_length)
    model = SentenceTransformer(modules=[transformer, models.Pooling(32, "mean"), models.Normalize()])
    model.save(str(path / "st"))
    return path / "st"


def killed_mid_write(target) -> None:
    """Leave what a run killed inside :func:`atomic_path` leaves: its temporary file beside ``target``."""
    import subprocess
    import sys

    code = ("import os, signal, sys; from embedeval.io import atomic_path\n"
            "with atomic_path(sys.argv[1]) as tmp:\n    tmp.write_text('half')\n    os.kill(os.getpid(), signal.SIGKILL)")
    subprocess.run([sys.executable, "-c", code, str(target)], check=False, timeout=120)

"""Late chunking: chunk vectors pooled from one pass over each window, against
sentence-transformers' own token embeddings; the windows of windows-mean; the cache; Jina's API
flag; embedders that cannot do it refused with one line."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.defaults import DEFAULT_LATE_CHUNKING_OVERLAP
from embedeval.embedders.registry import load_embedder
from embedeval.embedders.requests import TokenIds
from embedeval.errors import ConfigError
from embedeval.strategies import EmbeddingScorer, Strategy, parse_strategies
from embedeval.strategies.late import late_layout

from fake_api import serving

SHORT = ("Actually, Yuki lives next to the Semper Opera House. The river was quiet that morning, and the bridges "
         "were full of people walking home from the market with bread and flowers.")


def test_chunks_of_a_short_text_equal_sentence_transformers_token_embeddings_pooled_by_hand(minilm):
    scorer = EmbeddingScorer(minilm, Strategy("late-chunking", chunk_tokens=8))
    indexed = scorer.index([SHORT])
    (ids, _), = minilm.token_ids([SHORT])
    assert len(ids) < scorer.capacity and len(indexed.vectors) == -(-len(ids) // 8)  # one window, ceil(n / 8) chunks
    tokens = minilm.model.encode(SHORT, output_value="token_embeddings", convert_to_numpy=True)
    tokens = np.asarray(tokens)[1:-1]  # [CLS] ... [SEP]: the content tokens only
    expected = np.stack([tokens[start:start + 8].mean(axis=0) for start in range(0, len(ids), 8)])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(indexed.vectors, expected, atol=1e-5)
    # a chunk's vector carries its context: not the vector of the chunk embedded alone
    alone = minilm.embed_request(TokenIds.of([ids[:8]]))[0]
    assert float(alone @ indexed.vectors[0]) < 0.999


def test_the_layout_gives_every_token_one_output_and_lets_chunks_cross_windows():
    # windows of 8 tokens overlapping by 3: starting at 0, 5, 10, 15; kept outputs from 0, 8, 13, 18
    layout = late_layout(20, 8, 3, 6)
    assert layout == [[(0, 0, 6)], [(0, 6, 8), (5, 8, 12)], [(5, 12, 13), (10, 13, 18)], [(15, 18, 20)]]
    for n, window, overlap, chunk in [(20, 8, 3, 6), (1000, 254, 64, 100), (1000, 254, 0, 254), (600, 254, 200, 30),
                                      (253, 254, 64, 128), (257, 254, 64, 1)]:
        parts = [part for chunk_parts in late_layout(n, window, overlap, chunk) for part in chunk_parts]
        assert [p for _, a, b in parts for p in range(a, b)] == list(range(n))  # each token once, in order
        assert all(first <= a < b <= min(first + window, n) and (first == 0 or a >= first + overlap) for first, a, b in parts)


def _one_token_words(minilm, books_dir, n_words: int) -> str:
    """Book words the tokenizer reads as one token each: a window cut anywhere re-tokenises to its ids."""
    words = (books_dir / sorted(p.name for p in books_dir.glob("*.txt"))[0]).read_text().split()
    alphabetic = [w for w in words if w.isalpha()]
    ids = minilm.token_ids(alphabetic)
    return " ".join([w for w, (i, _) in zip(alphabetic, ids, strict=True) if len(i) == 1][:n_words])


@pytest.mark.slow
def test_overlapping_windows_recomputed_by_hand_from_sentence_transformers_token_embeddings(minilm, books_dir):
    text = _one_token_words(minilm, books_dir, 700)
    (ids, _), = minilm.token_ids([text])
    scorer = EmbeddingScorer(minilm, Strategy("late-chunking", chunk_tokens=100, overlap=64))
    window, n = scorer.capacity, len(ids)
    assert scorer.strategy_spec.overlap == DEFAULT_LATE_CHUNKING_OVERLAP == 64 and window == 254 and n == 700
    # by hand: windows start every 254 - 64 tokens; a later window's first 64 outputs are dropped
    outputs = np.zeros((n, minilm.dim))
    for first in range(0, n - 64, window - 64):
        words = text.split()[first : first + window]
        assert minilm.token_ids([" ".join(words)])[0][0] == list(ids[first : first + len(words)])
        tokens = np.asarray(minilm.model.encode(" ".join(words), output_value="token_embeddings", convert_to_numpy=True))[1:-1]
        keep = 64 if first else 0
        outputs[first + keep : first + len(words)] = tokens[keep:]
    expected = np.stack([outputs[a : a + 100].mean(axis=0) for a in range(0, n, 100)])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    indexed = scorer.index([text])
    assert len(indexed.vectors) == 7
    np.testing.assert_allclose(indexed.vectors, expected, atol=1e-5)
    # chunk 2 (tokens 200-300) crosses the first window's end (254); without overlap the second
    # window starts at 254 with no left context, and chunk 3 (300-400) reads differently
    pieces = scorer.cut([text]).inputs
    assert [len(p) for p in pieces] == [1, 1, 2, 1, 2, 1, 2]  # windows keep tokens from 0, 254, 444, 634
    no_overlap = EmbeddingScorer(minilm, Strategy("late-chunking", chunk_tokens=100, overlap=0)).index([text]).vectors
    np.testing.assert_allclose(no_overlap[:2], indexed.vectors[:2], atol=1e-6)  # inside the first window: the same
    assert float(no_overlap[3] @ indexed.vectors[3]) < 0.999


def test_late_chunks_go_through_the_cache_and_a_rerun_embeds_nothing(tmp_path):
    model = load_embedder("st:all-MiniLM-L6-v2", cache_dir=tmp_path)
    scorer = EmbeddingScorer(model, Strategy("late-chunking", chunk_tokens=8))
    first = scorer.index([SHORT, SHORT + " And then it rained."]).vectors
    assert model.stats.embedded == len(first) and model.stats.model_calls == 1
    again = load_embedder("st:all-MiniLM-L6-v2", cache_dir=tmp_path)
    second = EmbeddingScorer(again, Strategy("late-chunking", chunk_tokens=8)).index([SHORT, SHORT + " And then it rained."]).vectors
    assert again.stats.embedded == 0 and again.stats.cache_hits == len(second)
    np.testing.assert_array_equal(first, second)


def test_jina_late_chunks_with_the_apis_own_flag_one_request_per_window(monkeypatch, tmp_path):
    from embedeval.embedders.tokens import load_token_counter

    with serving(monkeypatch, {"JINA": "jina_SECRET_key"}) as fake:
        model = load_embedder("jina:jina-embeddings-v3", cache_dir=tmp_path)
        scorer = EmbeddingScorer(model, Strategy("late-chunking", chunk_tokens=10), reference=load_token_counter())
        indexed = scorer.index([SHORT])
        sent = [r for r in fake.embedding_requests() if r["body"].get("late_chunking")]
        assert len(sent) == 1 and sent[0]["body"]["late_chunking"] is True
        chunks = sent[0]["inputs"]
        assert len(chunks) == len(indexed.vectors) > 1 and " ".join(chunks) == " ".join(SHORT.split())
        assert [SHORT[a:b] for a, b in indexed.spans] == chunks  # the chunks in order, as the texts' spans
        scores = indexed.scores(["Which character has been to Dresden?"])
        assert scores.best_piece.shape == (1, 1)


@pytest.mark.parametrize("args, message", [
    (["--embedder", "openai:text-embedding-3-small"], "error: late-chunking is not offered for openai:text-embedding-3-small"),
    (["--executor", "ray"], "error: late-chunking of st:all-MiniLM-L6-v2 runs on the local executor only"),
    (["--chunk-tokens", "255"], "error: late-chunking@255 does not fit st:all-MiniLM-L6-v2, which reads 254 content tokens"),
    (["--late-overlap", "254"], "error: a window overlap of 254 tokens leaves nothing new in st:all-MiniLM-L6-v2's windows"),
    (["--late-overlap", "-1"], "error: late-chunking overlap must be >= 0 tokens, not -1"),
])
def test_embedders_that_cannot_late_chunk_are_refused_with_one_line(args, message, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-unused")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # nothing may be sent anywhere
    result = CliRunner().invoke(app, ["nolima", "--strategy", "late-chunking", *args, "--out", str(tmp_path / "run")])
    assert result.exit_code != 0 and message in result.output, result.output
    assert not (tmp_path / "run").exists()


def test_late_chunking_strategies_are_named_per_chunk_size():
    labels = [s.label for s in parse_strategies(["truncate", "late-chunking", "chunks-max"], [128, 256])]
    assert labels == ["truncate", "late-chunking@128", "late-chunking@256", "chunks-max@128", "chunks-max@256"]


@pytest.mark.slow
def test_late_chunking_and_several_needles_give_the_same_tables_with_dedupe_on_and_off(tmp_path, books_dir):
    import pandas as pd

    from embedeval.experiments.nolima import NolimaConfig, run_nolima
    from embedeval.grid import HaystackGrid

    def sweep(name: str, dedupe: bool):
        config = NolimaConfig(groups=["loc-dresden", "diet-vegan", "loc-peru"], n_bootstrap=20, dedupe=dedupe, out=str(tmp_path / name),
                strategies=["truncate", "late-chunking"], chunk_tokens=[128],
                grid=HaystackGrid(corpus=f"dir:{books_dir}", lengths=[256, 512], depths=3, negatives=4, needles_per_haystack=[1, 2]))
        return run_nolima(config, progress=False, cache_dir=tmp_path / f"cache-{name}")

    deduped, every_text = sweep("dedupe", True), sweep("whole", False)
    assert set(deduped.similarities["strategy"]) == {"truncate", "late-chunking@128"} and set(deduped.retrieval["n_needles"]) == {1, 2}
    for table in ("similarities", "retrieval"):
        a, b = getattr(deduped, table), getattr(every_text, table)
        numeric = a.select_dtypes("number").columns
        pd.testing.assert_frame_equal(a.drop(columns=numeric), b.drop(columns=numeric))
        np.testing.assert_allclose(a[numeric].to_numpy(float), b[numeric].to_numpy(float), atol=1e-5)


@pytest.fixture(scope="module")
def pooled_copies(tmp_path_factory):
    """Copies of the bundled model with the same transformer: CLS pooling, and mean pooling
    followed by a Dense layer (then Normalize), saved as folders."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Dense, Normalize, Pooling

    from embedeval.embedders.models import resolve_model_path

    bundled = SentenceTransformer(resolve_model_path("all-MiniLM-L6-v2"), device="cpu")
    transformer, dim = bundled[0], bundled.get_embedding_dimension()
    folder = tmp_path_factory.mktemp("pooled-copies")
    copies = {"cls": [Pooling(dim, "cls"), Normalize()], "Dense": [Pooling(dim, "mean"), Dense(dim, dim), Normalize()]}
    for name, modules in copies.items():
        SentenceTransformer(modules=[transformer, *modules], device="cpu").save(str(folder / name))
    return folder


@pytest.mark.parametrize("copy, says", [("cls", "it pools with cls, not mean"),
                                        ("Dense", "it has a Dense module after its mean pooling")])
def test_models_not_mean_pooled_are_refused_before_any_work(copy, says, pooled_copies, tmp_path):
    spec = f"st:{pooled_copies / copy}"
    model = load_embedder(spec, cache_dir=tmp_path / "cache")
    with pytest.raises(ConfigError, match=f"late-chunking is not defined for {spec}: {says}"):
        EmbeddingScorer(model, Strategy("late-chunking", chunk_tokens=64))
    assert model.stats.requested == model.stats.embedded == 0
    EmbeddingScorer(model, Strategy("chunks-max", chunk_tokens=64))  # other strategies stay open to it
    result = CliRunner().invoke(app, ["nolima", "--embedder", spec, "--strategy", "late-chunking",
                                      "--out", str(tmp_path / "run"), "-q"])  # -q: no step line while the weights load
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code != 0 and len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], result.output
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_the_cache_keys_chunks_on_all_their_windows_so_another_overlap_reuses_only_what_it_shares(tmp_path, minilm, books_dir):
    text = _one_token_words(minilm, books_dir, 700)
    fresh = {overlap: EmbeddingScorer(minilm, Strategy("late-chunking", chunk_tokens=100, overlap=overlap)).index([text]).vectors
             for overlap in (0, 64)}
    for overlap in (64, 0):
        model = load_embedder("st:all-MiniLM-L6-v2", cache_dir=tmp_path)
        cached = EmbeddingScorer(model, Strategy("late-chunking", chunk_tokens=100, overlap=overlap)).index([text]).vectors
        np.testing.assert_allclose(cached, fresh[overlap], atol=1e-6)
    assert model.stats.cache_hits == 2 and model.stats.embedded == 5  # only the first window's chunks are the same

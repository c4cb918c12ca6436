"""Late chunking (issue 24, item 2): chunk vectors pooled from one pass over each window, against
sentence-transformers' own token embeddings; the windows of windows-mean; the cache; Jina's API
flag; embedders that cannot do it refused with one line."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.embedders.registry import load_embedder
from embedeval.strategies import EmbeddingScorer, Strategy, parse_strategies
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
    alone = minilm.embed_ids([ids[:8]])[0]
    assert float(alone @ indexed.vectors[0]) < 0.999


def test_long_texts_are_cut_into_the_windows_of_windows_mean(minilm, books_dir):
    text = " ".join((books_dir / sorted(p.name for p in books_dir.glob("*.txt"))[0]).read_text().split()[:1500])
    late = EmbeddingScorer(minilm, Strategy("late-chunking", chunk_tokens=100))
    mean = EmbeddingScorer(minilm, Strategy("windows-mean"))
    windows = list(dict.fromkeys(window for window, _ in late._cut_late([text]).inputs))
    assert len(windows) > 3 and windows == mean._cut([text]).inputs
    pieces = late._cut_late([text])
    spans = [span for _, span in pieces.inputs]
    assert all(0 <= a < b <= late.capacity and b - a <= 100 for a, b in spans)
    assert len(pieces.inputs) == sum(-(-len(np.frombuffer(w, dtype=np.int32)) // 100) for w in windows)


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
    from embedeval.tokens import load_token_counter

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


def test_late_chunking_and_several_needles_give_the_same_tables_with_dedupe_on_and_off(tmp_path, books_dir):
    import pandas as pd

    from embedeval.experiments.nolima import NolimaConfig, run_nolima

    def sweep(name: str, dedupe: bool):
        config = NolimaConfig(groups=["loc-dresden", "diet-vegan", "loc-peru"], corpus=f"dir:{books_dir}", lengths=[512, 1024],
                              depths=3, negatives=4, n_bootstrap=20, dedupe=dedupe, out=str(tmp_path / name),
                              strategies=["truncate", "late-chunking"], chunk_tokens=[128], needles_per_haystack=[1, 2])
        return run_nolima(config, progress=False, cache_dir=tmp_path / f"cache-{name}")

    deduped, every_text = sweep("dedupe", True), sweep("whole", False)
    assert set(deduped.similarities["strategy"]) == {"truncate", "late-chunking@128"} and set(deduped.retrieval["n_needles"]) == {1, 2}
    for table in ("similarities", "retrieval"):
        a, b = getattr(deduped, table), getattr(every_text, table)
        numeric = a.select_dtypes("number").columns
        pd.testing.assert_frame_equal(a.drop(columns=numeric), b.drop(columns=numeric))
        np.testing.assert_allclose(a[numeric].to_numpy(float), b[numeric].to_numpy(float), atol=1e-5)

"""The ONNX Runtime backend of local models: the transformer exported once into
the cache, float32 equal to torch, int8 close to it, the model's own pooling kept."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from embedeval.embedders import onnx
from embedeval.embedders.registry import load_embedder
from embedeval.embedders.requests import TokenIds
from embedeval.errors import ConfigError
from embedeval.experiments import HaystackGrid, NolimaConfig, run_nolima
from embedeval.messages import EmbedevalWarning

from fakes import killed_mid_write

MINILM = "st:all-MiniLM-L6-v2"
TEXTS = ["A short one.", "The quick brown fox jumps over the lazy dog, again and again, until the dog wakes up. " * 6,
         *(f"Sentence number {i} says something a little different about item {i * 7}." for i in range(20))]


@pytest.mark.slow
def test_float32_onnx_gives_the_torch_vectors_and_int8_stays_close(tmp_path, minilm):
    fp32 = load_embedder(f"{MINILM}?backend=onnx", cache_dir=tmp_path, verify=False)
    int8 = load_embedder(f"{MINILM}?backend=onnx-int8", cache_dir=tmp_path, verify=False)
    assert (fp32.name, int8.name) == (f"{MINILM}?backend=onnx", f"{MINILM}?backend=onnx-int8")
    expected = minilm.embed(TEXTS)
    np.testing.assert_allclose(fp32.embed(TEXTS), expected, atol=1e-5)  # other lengths and batch sizes than the trace's
    ids = [seq for seq, _ in minilm.token_ids(TEXTS, minilm.id_capacity())]
    np.testing.assert_allclose(fp32.inner.embed_request(TokenIds.of(ids)), minilm.embed_request(TokenIds.of(ids)), atol=1e-5)
    cosines = (int8.embed(TEXTS) * expected).sum(axis=1)
    assert np.median(cosines) > 0.99 and cosines.min() > 0.985  # per-channel int8 (measured on these: median 0.992, min 0.989)
    assert cosines.max() < 1 - 1e-4  # it is another model: the cache must keep its vectors apart
    folder = next((tmp_path / "onnx").iterdir())
    assert sorted(p.name for p in folder.glob("model*")) == ["model-int8.onnx", "model-int8.onnx.sha256", "model.onnx",
                                                             "model.onnx.sha256"]


@pytest.mark.slow
def test_the_graph_is_exported_once(tmp_path, monkeypatch):
    load_embedder(f"{MINILM}?backend=onnx-int8", cache_dir=tmp_path, verify=False).embed(["warm"])

    def refuse(*args, **kwargs):
        raise AssertionError("exported again")

    monkeypatch.setattr(onnx, "export", refuse)
    monkeypatch.setattr(onnx, "quantize", refuse)
    again = load_embedder(f"{MINILM}?backend=onnx-int8", cache_dir=tmp_path, verify=False)
    assert again.embed(["a new text: the model runs, from the graph in the cache"]).shape == (1, 384)
    assert again.inner.loaded


@pytest.mark.slow
def test_a_model_that_pools_otherwise_keeps_its_own_pooling(tmp_path):
    from sentence_transformers import SentenceTransformer, models

    from embedeval.embedders.models import resolve_model_path

    folder = tmp_path / "cls-model"
    SentenceTransformer(modules=[models.Transformer(resolve_model_path("all-MiniLM-L6-v2")), models.Pooling(384, "cls"),
                                 models.Normalize()]).save(str(folder))
    torch_vectors = load_embedder(f"st:{folder}", cache_dir=tmp_path / "c1", verify=False).embed(TEXTS)
    onnx_vectors = load_embedder(f"st:{folder}?backend=onnx", cache_dir=tmp_path / "c2", verify=False).embed(TEXTS)
    np.testing.assert_allclose(onnx_vectors, torch_vectors, atol=1e-5)


def test_an_unknown_backend_is_one_line():
    from embedeval.embedders.registry import select_embedders

    with pytest.raises(ConfigError, match="`backend` must be one of torch, onnx, onnx-int8, not 'tensorrt'"):
        select_embedders([f"{MINILM}?backend=tensorrt"])


@pytest.mark.slow
def test_another_graph_format_is_another_model(tmp_path, monkeypatch):
    from embedeval.embedders import options

    first = load_embedder(f"{MINILM}?backend=onnx-int8", cache_dir=tmp_path, verify=False)
    first.embed(["its facts and vectors are cached now"])
    before = first.fingerprint
    monkeypatch.setattr(options, "GRAPH_FORMAT", options.GRAPH_FORMAT + 1)  # graphs made another way
    again = load_embedder(f"{MINILM}?backend=onnx-int8", cache_dir=tmp_path, verify=False)
    assert again.fingerprint != before  # not the remembered facts, nor the cached vectors of the old graphs


@pytest.mark.slow
def test_int8_quantizes_the_weighted_products_only(tmp_path):
    """The embedding lookups and the products of two activations (attention) stay float32; every
    product with a constant weight runs in int8 (:data:`onnx.QUANTIZED_OPS`)."""
    import onnx as onnxlib

    load_embedder(f"{MINILM}?backend=onnx-int8", cache_dir=tmp_path, verify=False).embed(["quantize"])
    folder = next((tmp_path / "onnx").iterdir())
    fp32, int8 = (onnxlib.load(str(folder / name)).graph for name in ("model.onnx", "model-int8.onnx"))
    weights = {i.name for i in fp32.initializer}
    weighted = [n for n in fp32.node if n.op_type == "MatMul" and n.input[1] in weights]
    two_activations = [n for n in fp32.node if n.op_type == "MatMul" and n.input[1] not in weights]
    ops = [n.op_type for n in int8.node]
    assert weighted and two_activations
    assert ops.count("MatMulInteger") == len(weighted) and ops.count("MatMul") == len(two_activations)
    tables = {i.name: i.data_type for i in int8.initializer}
    looked_up = [tables[n.input[0]] for n in int8.node if n.op_type == "Gather" and n.input[0] in tables]
    assert looked_up and set(looked_up) == {onnxlib.TensorProto.FLOAT}  # the embedding tables, as they were


@pytest.mark.slow
def test_an_int8_vector_does_not_depend_on_the_texts_beside_it(tmp_path):
    """ONNX Runtime quantizes int8 activations with one scale per input tensor: a batch shared it,
    padding included (cosine 0.993 between a text alone and beside a long one). Each text now runs
    alone."""
    int8 = load_embedder(f"{MINILM}?backend=onnx-int8", cache=False, cache_dir=tmp_path, verify=False)
    text = "The cat sat on the mat near the window."
    long = "A much longer unrelated text about sea voyages, storms, kings and treaties. " * 10
    alone = int8.embed([text])[0]
    for batch in ([long, text, "Hi."], [text, "Hi.", "Ok then."], [*TEXTS, text]):
        np.testing.assert_allclose(int8.embed(batch)[batch.index(text)], alone, atol=1e-6)
    ids = [seq for seq, _ in int8.token_ids([text, long, "Hi."], int8.id_capacity())]
    np.testing.assert_allclose(int8.embed_request(TokenIds.of(ids))[0], int8.embed_request(TokenIds.of(ids[:1]))[0], atol=1e-6)
    np.testing.assert_allclose(int8.embed_request(TokenIds.of(ids[:1]))[0], alone, atol=1e-6)


@pytest.mark.slow
def test_int8_tables_do_not_depend_on_how_the_work_was_cut(tmp_path, books_dir):
    """Two fresh runs, one committing every 4 texts in batches of at most 600 padded tokens, one
    every 256 texts in batches of 32 texts: the same tables, byte for byte."""
    grid = HaystackGrid(corpus=f"dir:{books_dir}", lengths=[128, 512], depths=2, variants=["onehop"], negatives=2)
    tables = []
    for name, query, commit_every in [("small", "&max_batch_tokens=600", 4), ("large", "", 256)]:
        config = NolimaConfig(embedders=[f"{MINILM}?backend=onnx-int8{query}"], groups=["loc-dresden", "diet-vegan", "lang-dutch"],
                              grid=grid, out=str(tmp_path / name), n_bootstrap=20)
        run_nolima(config, progress=False, cache_dir=tmp_path / f"cache-{name}", commit_every=commit_every)
        tables.append({table: (tmp_path / name / table).read_bytes() for table in ("similarities.parquet", "retrieval.parquet")})
    small, large = tables
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "small" / "similarities.parquet"),
                                  pd.read_parquet(tmp_path / "large" / "similarities.parquet"), check_exact=True)
    assert small == large


@pytest.mark.slow
def test_a_damaged_graph_is_made_again_verify_finds_it_and_clear_removes_it(tmp_path):
    """A truncated model.onnx and a random-bytes model-int8.onnx crashed every run with
    InvalidProtobuf, unseen by `cache verify` and left by `cache clear`."""
    from typer.testing import CliRunner

    from embedeval.cli import app

    spec = f"{MINILM}?backend=onnx-int8"
    expected = load_embedder(spec, cache_dir=tmp_path, verify=False).embed(TEXTS[:3])
    folder = next((tmp_path / "onnx").iterdir())
    fp32, int8 = folder / "model.onnx", folder / "model-int8.onnx"
    fp32.write_bytes(fp32.read_bytes()[: fp32.stat().st_size // 2])
    int8.write_bytes(np.random.default_rng(0).bytes(4096))
    killed_mid_write(fp32)  # what an export killed mid-write leaves beside the graph
    stale, = folder.glob(".model.onnx.embedeval-*.tmp")
    runner = CliRunner()
    verify = runner.invoke(app, ["cache", "verify", "--cache-dir", str(tmp_path)])
    assert verify.exit_code == 1
    assert f"ONNX graph {fp32} does not match the sha256 recorded at its export" in verify.output
    assert f"ONNX graph {int8} does not match" in verify.output
    assert "error: 2 exported ONNX graph(s) are damaged; each is exported again when next used" in verify.output

    with pytest.warns(EmbedevalWarning) as caught:
        again = load_embedder(spec, cache_dir=tmp_path, verify=False)
        np.testing.assert_allclose(again.inner.embed(TEXTS[:3]), expected, atol=1e-6)  # uncached: from the graphs made again
    warnings = [str(w.message) for w in caught if w.category is EmbedevalWarning]
    assert warnings == [f"ONNX graph {int8} does not match the sha256 recorded at its export (truncated or overwritten); "
                        "making it again",
                        f"ONNX graph {fp32} does not match the sha256 recorded at its export (truncated or overwritten); "
                        "making it again"]
    assert not stale.exists()
    assert runner.invoke(app, ["cache", "verify", "--cache-dir", str(tmp_path)]).exit_code == 0

    (folder / "model-int8.onnx.sha256").unlink()  # a graph without its record is not trusted either
    assert onnx.check_graphs(tmp_path) == {int8: "has no record of its sha256"}
    cleared = runner.invoke(app, ["cache", "clear", "--cache-dir", str(tmp_path)])
    assert cleared.exit_code == 0 and not (tmp_path / "onnx").exists()


@pytest.mark.slow
def test_garbage_in_a_sha256_record_is_mended_and_a_record_that_is_a_folder_is_one_line(tmp_path):
    """A sha256 record of random bytes reads as no record (the graph is made again);
    one that is a folder was 'exported again when next used' by verify's word, yet every run then
    failed writing the record: now it is one line naming it, for verify and a run alike."""
    from typer.testing import CliRunner

    from embedeval.cli import app
    from embedeval.errors import CacheError

    spec = f"{MINILM}?backend=onnx"
    load_embedder(spec, cache_dir=tmp_path, verify=False).inner.embed(TEXTS[:1])
    graph = next((tmp_path / "onnx").iterdir()) / "model.onnx"
    record = graph.with_name("model.onnx.sha256")
    record.write_bytes(np.random.default_rng(1).bytes(64))
    assert onnx.check_graphs(tmp_path) == {graph: "has no record of its sha256"}
    load_embedder(spec, cache_dir=tmp_path, verify=False).inner.embed(TEXTS[:1])  # made again, record and all
    assert onnx.check_graphs(tmp_path) == {}
    record.unlink()
    record.mkdir()
    says = "has a sha256 record model.onnx.sha256 that is not a file; remove it, or run `embedeval cache clear`"
    verify = CliRunner().invoke(app, ["cache", "verify", "--cache-dir", str(tmp_path)])
    assert verify.exit_code == 1 and f"ONNX graph {graph} {says}" in verify.output
    with pytest.raises(CacheError) as info:
        load_embedder(spec, cache_dir=tmp_path, verify=False).inner.embed(TEXTS[:1])
    assert str(info.value) == f"ONNX graph {graph} {says}" and record.is_dir()

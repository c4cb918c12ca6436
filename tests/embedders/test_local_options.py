"""Local models as people run them: options in the spec, batches cut by
a token budget, the batch halved when CUDA runs out of memory, and long-context models read whole."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.embedders import batching
from embedeval.embedders.batching import cut_batches
from embedeval.embedders.local import SentenceTransformerEmbedder
from embedeval.embedders.options import LocalOptions
from embedeval.embedders.registry import canonical_spec, load_embedder, select_embedders
from embedeval.embedders.requests import TokenIds
from embedeval.errors import ConfigError, InputError, UnknownEmbedderError

from fakes import small_model_folder

MINILM = "st:all-MiniLM-L6-v2"


def test_options_are_parsed_checked_and_named():
    options = LocalOptions.parse("max_seq_length=512&device=cpu&trust_remote_code=false")
    assert (options.max_seq_length, options.device, options.trust_remote_code) == (512, "cpu", False)
    assert canonical_spec(f"{MINILM}?max_seq_length=512&device=cpu") == f"{MINILM}?device=cpu&max_seq_length=512"
    assert canonical_spec(f"{MINILM}?dtype=float32") == MINILM  # a default is no option
    model = load_embedder(f"{MINILM}?device=cpu&max_seq_length=512", cache=False, verify=False)
    assert model.name == f"{MINILM}?max_seq_length=512"  # what changes a vector names it; where it runs does not
    assert load_embedder(f"{MINILM}?device=cpu", cache=False, verify=False).name == MINILM
    for query, says in [("colour=red", "unknown option 'colour'"), ("dtype=int4", "`dtype` must be one of"),
                        ("device=tpu", "`device` must be one of"), ("max_seq_length=0", "`max_seq_length` must be a whole"),
                        ("trust_remote_code=maybe", "`trust_remote_code` must be true or false"),
                        ("device=cpu&device=cpu", "given twice")]:
        with pytest.raises(ConfigError, match=says):
            select_embedders([f"{MINILM}?{query}"])


@pytest.mark.parametrize("query, says", [
    ("device=cuda", "error: spec option device cuda is not there: this machine has 0 CUDA device(s)"),
    ("dtype=float16", "error: spec option dtype float16 runs on a GPU only; on the CPU use float32"),
    ("max_seq_length=1024", "error: spec option max_seq_length 1024 is over the model's position limit of 512 tokens"),
])
def test_a_spec_this_machine_cannot_run_is_one_line_before_any_work(query, says, tmp_path):
    if query == "device=cuda" and torch.cuda.is_available():
        query, says = "device=cuda:99", "error: spec option device cuda:99 is not there"
    result = CliRunner().invoke(app, ["nolima", "--embedder", f"{MINILM}?{query}", "--out", str(tmp_path / "run")])
    lines = [line for line in result.output.splitlines() if line]
    assert result.exit_code == 1 and lines == [line for line in lines if line.startswith("error:")]
    assert says in result.output, result.output
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_longer_window_reads_more_and_matches_sentence_transformers(minilm):
    text = " ".join(f"word{i} is here" for i in range(200))  # about 800 tokens
    longer = load_embedder(f"{MINILM}?max_seq_length=512", verify=False)
    assert longer.max_tokens == 512 and minilm.max_tokens == 256
    direct = minilm.model
    direct.max_seq_length = 512
    try:
        expected = direct.encode_document([text], normalize_embeddings=True)
    finally:
        direct.max_seq_length = 256
    np.testing.assert_allclose(longer.embed([text]), expected, atol=1e-5)
    assert float(longer.embed([text])[0] @ minilm.embed([text])[0]) < 0.999  # the cache keeps the two windows apart


@pytest.mark.slow
def test_batches_cut_by_a_token_budget(minilm):
    order = np.arange(6)
    assert [b.tolist() for b in cut_batches(order, [200, 200, 200, 20, 20, 20], 32, 420)] == [[0, 1], [2, 3], [4, 5]]
    assert [b.tolist() for b in cut_batches(order, [200] * 6, 4)] == [[0, 1, 2, 3], [4, 5]]  # no budget: a count
    ids = [list(range(1000, 1000 + n)) for n in [250] * 6 + [12] * 40]
    budgeted = SentenceTransformerEmbedder("all-MiniLM-L6-v2", options=LocalOptions(device="cpu", max_batch_tokens=1024))
    shapes = []
    forward = budgeted.model.forward
    budgeted.model.forward = lambda features: shapes.append(tuple(features["input_ids"].shape)) or forward(features)
    vectors = budgeted.embed_request(TokenIds.of(ids))
    assert shapes == [(4, 252), (4, 252), (38, 14)]  # 1024 // 252 = 4 rows while a long input leads; 1024 // 14 = 73 after
    np.testing.assert_allclose(vectors, minilm.embed_request(TokenIds.of(ids)), atol=1e-5)


@pytest.mark.slow
def test_out_of_memory_halves_the_batch_and_keeps_every_vector(minilm):
    ids = [list(range(1000, 1000 + n)) for n in [200] * 9 + [30] * 20]
    model = SentenceTransformerEmbedder("all-MiniLM-L6-v2", options=LocalOptions(device="cpu", max_batch_tokens=4000))
    shapes = []
    forward = model.model.forward

    def tight(features):  # a device that holds 1000 padded tokens at once
        rows, length = features["input_ids"].shape
        shapes.append((rows, length))
        if rows * length > 1000:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return forward(features)

    model.model.forward = tight
    vectors = model.embed_request(TokenIds.of(ids))
    np.testing.assert_allclose(vectors, minilm.embed_request(TokenIds.of(ids)), atol=1e-5)
    # 4000 // 202 = 19 rows, out of memory; half of them, again; then 4 x 202 = 808 tokens a batch from there on
    assert shapes == [(19, 202), (9, 202), (4, 202), (4, 202), (4, 202), (17, 32)] and model.backoffs == 2
    assert sum(rows for rows, length in shapes[2:]) == len(ids)  # each input embedded once, after the retries
    model.model.forward = lambda features: (_ for _ in ()).throw(torch.cuda.OutOfMemoryError("simulated"))
    with pytest.raises(InputError, match="one input of 202 tokens does not fit"):
        model.embed_request(TokenIds.of(ids[:2]))


def cudnn_sdp_flags() -> tuple[bool, bool, bool, bool]:
    backends = torch.backends.cuda
    return (backends.cudnn_sdp_enabled(), backends.flash_sdp_enabled(), backends.mem_efficient_sdp_enabled(),
            backends.math_sdp_enabled())


def test_cuda_forwards_leave_out_cudnn_attention_and_other_devices_keep_pytorch_s_choice(minilm, monkeypatch):
    """cuDNN's attention builds a plan per input shape (slow on texts of many lengths, bench_gpu.py):
    on CUDA every forward pass runs without it, the other kernels still allowed; on the CPU nothing changes."""
    before = cudnn_sdp_flags()
    assert before[0], "PyTorch allows cuDNN attention by default"
    with batching.attention_kernels("cuda:0"):
        assert cudnn_sdp_flags() == (False, True, True, True)
    assert cudnn_sdp_flags() == before
    with batching.attention_kernels("cpu"):
        assert cudnn_sdp_flags() == before
    seen = []
    forward = minilm.model.forward
    monkeypatch.setattr(minilm.model, "forward", lambda features, **kw: seen.append(cudnn_sdp_flags()[0]) or forward(features, **kw))
    monkeypatch.setattr(minilm, "device", "cuda")  # the flags are global; the forward still runs on the CPU
    minilm.embed_request(TokenIds.of([[2000, 2001, 2002]] * 3))
    minilm.embed(["a question"], kind="query")
    assert seen == [False, False]


#: Positions of the synthetic long-context models: an 8192-token haystack (content tokens, as the
#: grid counts them) plus [CLS] and [SEP].
POSITIONS = 8192 + 2


@pytest.mark.slow
@pytest.mark.parametrize("architecture", ["bert", "modernbert"])
def test_a_long_context_model_reads_every_needle_at_8192_tokens(architecture, tmp_path, books_dir):
    """No window logic: the model reads each haystack whole (a window of 8192 would read 8190
    content tokens beside [CLS] and [SEP], and miss a needle in the last two)."""
    from embedeval.experiments import HaystackGrid, NolimaConfig, run_nolima

    folder = small_model_folder(tmp_path, architecture, POSITIONS)
    spec = f"st:{folder}?max_seq_length={POSITIONS}&max_batch_tokens={POSITIONS}"
    config = NolimaConfig(embedders=[spec], groups=["loc-dresden", "diet-vegan", "loc-peru"], out=str(tmp_path / "run"),
                          grid=HaystackGrid(corpus=f"dir:{books_dir}", lengths=[128, 8192], depths=2, variants=["onehop"],
                                            negatives=2), n_bootstrap=20)
    result = run_nolima(config, progress=False, cache_dir=tmp_path / "cache")
    sims = result.similarities
    needled = sims[sims["variant"] == "onehop"]
    assert set(needled["length"]) == {128, 8192} and needled["needle_visible"].all() and not sims["truncated"].any()
    assert result.embedders == [f"st:{folder}?max_batch_tokens={POSITIONS}&max_seq_length={POSITIONS}"]
    assert set(sims["embedder"]) == {f"st:{folder}?max_seq_length={POSITIONS}"}
    assert pd.read_json(tmp_path / "run" / "config.json", typ="series")["embedders"] == result.embedders


def test_a_spec_with_options_reads_its_tokenizer_alone_once_its_facts_are_remembered(tmp_path):
    spec = f"{MINILM}?max_seq_length=128"
    load_embedder(spec, cache_dir=tmp_path, verify=False).embed(["its facts are remembered now"])
    again = load_embedder(spec, cache_dir=tmp_path, verify=False).inner  # the name carries the options; the tokenizer not
    assert again.token_ids(["a text never tokenized before"])[0][0] and not again.loaded


@pytest.mark.parametrize("query, says", [
    ("max_seq_length=²", "`max_seq_length` must be a whole number >= 1 in the digits 0-9, not '²'"),
    ("max_batch_tokens=١٢٨", "`max_batch_tokens` must be a whole number >= 1 in the digits 0-9, not '١٢٨'"),
    ("max_seq_length=7", "`max_seq_length` must be at least 8, not 7: a window must leave at least 8 content tokens"),
])
def test_numbers_are_ascii_digits_and_a_window_leaves_enough_to_read(query, says):
    with pytest.raises(ConfigError, match=says):
        LocalOptions.parse(query)
    assert LocalOptions.parse("max_seq_length=128&max_batch_tokens=0128") == LocalOptions(max_seq_length=128, max_batch_tokens=128)


def test_a_window_that_leaves_too_few_content_tokens_beside_special_tokens_is_refused():
    model = load_embedder(f"{MINILM}?max_seq_length=9", cache=False, verify=False)  # [CLS] + 7 + [SEP]
    with pytest.raises(ConfigError, match=r"`max_seq_length` 9 leaves 7 content tokens to a query .* at least 8"):
        model.check()
    load_embedder(f"{MINILM}?max_seq_length=10", cache=False)  # 8 content tokens: enough


def test_the_position_limit_is_read_from_the_position_table(tmp_path):
    """A config without ``max_position_embeddings`` does not let a window past the table's rows (a
    tensor-size crash on the first long text); one that claims more than the weights hold is refused."""
    from embedeval.embedders.local_folder import check_window, position_limit

    from test_bad_input import copied_model_folder

    silent = copied_model_folder(tmp_path / "silent", config=lambda c: {k: v for k, v in c.items() if k != "max_position_embeddings"})
    boasting = copied_model_folder(tmp_path / "boasting", config=lambda c: {**c, "max_position_embeddings": 8192})
    assert position_limit(str(silent)) == (512, "the rows of its position table embeddings.position_embeddings.weight")
    with pytest.raises(ConfigError, match="`max_seq_length` 4096 is over the model's position limit of 512 tokens"):
        check_window(str(silent), 4096)
    check_window(str(silent), 512)
    # a config that claims more than the weights hold cannot be loaded at all (transformers refuses the
    # mismatched table): one line naming both numbers, before any weights are read
    with pytest.raises(UnknownEmbedderError, match="says max_position_embeddings 8192, but its weights' position table .* has 512 rows"):
        position_limit(str(boasting))


@pytest.mark.parametrize("message, one_line", [("Error(s) in loading state_dict: size mismatch for embeddings.weight", True),
                                               ("CUDA error: an illegal memory access was encountered", False)])
def test_only_a_load_error_about_mismatched_sizes_is_blamed_on_the_folder(message, one_line, monkeypatch):
    """A RuntimeError while loading is turned into one line about the folder only when it is about
    weights that do not fit the config; a device error stays what it is."""
    import sentence_transformers

    def failing(*args, **kwargs):
        raise RuntimeError(message)
    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", failing)
    model = SentenceTransformerEmbedder("all-MiniLM-L6-v2", options=LocalOptions(device="cpu"))
    if one_line:
        with pytest.raises(UnknownEmbedderError, match=r"its weights do not fit its config \(Error\(s\) in loading state_dict: size mismatch"):
            _ = model.model
    else:
        with pytest.raises(RuntimeError, match="illegal memory access") as caught:
            _ = model.model
        assert not isinstance(caught.value, UnknownEmbedderError)

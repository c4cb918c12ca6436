import json
from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from embedeval.embedders.models import resolve_model_path
from embedeval.embedders.registry import expand_specs, load_embedder
from embedeval.embedders.requests import TokenIds
from embedeval.errors import InputError, UnknownEmbedderError

from fakes import copy_minilm

TEXTS = [
    "The cat sat on the mat.",
    "A kitten was resting on the rug.",
    "Quarterly revenue fell by twelve percent.",
    "How do I reset my router password?",
]


def test_vectors_are_unit_norm_with_shape_and_order(minilm):
    vectors = minilm.embed(TEXTS, kind="document")
    assert vectors.dtype == np.float32
    assert vectors.shape == (len(TEXTS), 384) == (len(TEXTS), minilm.dim)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # order preserved: each row equals that text embedded on its own
    for i, text in enumerate(TEXTS):
        np.testing.assert_allclose(minilm.embed([text])[0], vectors[i], atol=1e-5)
    reversed_vectors = minilm.embed(TEXTS[::-1])
    np.testing.assert_allclose(reversed_vectors[::-1], vectors, atol=1e-5)


def test_paraphrase_scores_higher_than_unrelated(minilm):
    cat, kitten, revenue, _ = minilm.embed(TEXTS)
    assert float(cat @ kitten) > float(cat @ revenue) + 0.2


def test_model_limits_and_token_counts(minilm):
    assert minilm.max_tokens == 256
    counts = minilm.count_tokens(["hello world", "hello " * 600])
    assert counts[0] == 4  # [CLS] hello world [SEP]
    assert counts[1] == 602  # counted before truncation


def test_empty_text_is_rejected(minilm):
    with pytest.raises(InputError, match="text #1 is empty"):
        minilm.embed(["fine", "  "])


def test_unknown_local_model_is_one_clear_error(tmp_path):
    with pytest.raises(UnknownEmbedderError, match="unknown local model 'no-such-model'.*all-MiniLM-L6-v2"):
        load_embedder("st:no-such-model")


def test_unknown_prefix_lists_known_specs():
    with pytest.raises(UnknownEmbedderError, match=r"unknown embedder 'nope:x'; known: .*st:all-MiniLM-L6-v2"):
        load_embedder("nope:x")


# --- prompts, fingerprints and folder names --------------------------------------------------

def st_reference(folder: Path, texts: list[str], **encode) -> np.ndarray:
    """sentence-transformers' own output, independent of embedeval."""
    return SentenceTransformer(str(folder), device="cpu").encode(texts, normalize_embeddings=True, **encode)


def test_minilm_has_no_prompts_and_embeds_both_kinds_like_plain_encode(minilm):
    assert minilm.model.prompts.get("query", "") == "" and minilm.model.prompts.get("document", "") == ""
    expected = st_reference(Path(resolve_model_path("all-MiniLM-L6-v2")), TEXTS)
    np.testing.assert_allclose(minilm.embed(TEXTS, kind="query"), expected, atol=1e-6)
    np.testing.assert_allclose(minilm.embed(TEXTS, kind="document"), expected, atol=1e-6)


def test_model_prompts_are_used_for_queries_and_documents(tmp_path):
    folder = copy_minilm(tmp_path / "e5like", prompts={"query": "query: ", "document": "passage: "})
    model = load_embedder(f"st:{folder}", cache_dir=tmp_path / "cache")
    text = ["Which character has been to Dresden?"]
    query, document = model.embed(text, kind="query"), model.embed(text, kind="document")
    assert float(query[0] @ document[0]) < 0.999
    np.testing.assert_allclose(query, st_reference(folder, text, prompt="query: "), atol=1e-6)
    np.testing.assert_allclose(document, st_reference(folder, text, prompt="passage: "), atol=1e-6)


def test_editing_a_model_folder_never_serves_stale_vectors(tmp_path):
    folder = copy_minilm(tmp_path / "model")
    cache = tmp_path / "cache"
    text = ["Actually, Yuki lives next to the Semper Opera House."]
    before = load_embedder(f"st:{folder}", cache_dir=cache).embed(text)
    pooling = folder / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    config.update(pooling_mode_mean_tokens=False, pooling_mode_max_tokens=True)
    pooling.write_text(json.dumps(config))
    edited = load_embedder(f"st:{folder}", cache_dir=cache)
    after = edited.embed(text)
    np.testing.assert_allclose(after, st_reference(folder, text), atol=1e-6)
    assert float(before[0] @ after[0]) < 0.99 and edited.stats.embedded == 1


def test_raising_max_seq_length_changes_the_fingerprint(minilm):
    before = minilm.fingerprint
    minilm.model.max_seq_length = 512
    try:
        assert minilm.fingerprint != before
    finally:
        minilm.model.max_seq_length = 256
    assert minilm.fingerprint == before


def test_relative_folder_names_resolve_to_absolute_paths(tmp_path, monkeypatch):
    names = []
    for side in ("a", "b"):
        copy_minilm(tmp_path / side / "model")
        monkeypatch.chdir(tmp_path / side)
        assert expand_specs(["st:model"]) == [f"st:{tmp_path / side / 'model'}"]
        names.append(load_embedder("st:model", cache=False).name)
    assert names == [f"st:{tmp_path / 'a' / 'model'}", f"st:{tmp_path / 'b' / 'model'}"]
    assert expand_specs(["st:sentence-transformers/all-MiniLM-L6-v2"]) == ["st:all-MiniLM-L6-v2"]


def test_fingerprint_is_the_one_cached_vectors_were_keyed_on(minilm):
    """The definition the cache's existing keys rest on, computed from sentence-transformers alone."""
    import hashlib

    from embedeval.embedders.models import folder_fingerprint

    st = SentenceTransformer(resolve_model_path("all-MiniLM-L6-v2"), device="cpu")
    live = {"folder": folder_fingerprint("all-MiniLM-L6-v2"), "max_seq_length": st.max_seq_length, "prompts": st.prompts,
            "default_prompt": st.default_prompt_name, "modules": [m.get_config_dict() for m in st if hasattr(m, "get_config_dict")]}
    assert minilm.fingerprint == hashlib.sha256(json.dumps(live, sort_keys=True, default=str).encode()).hexdigest()


@pytest.mark.slow
def test_a_cached_model_loads_its_weights_only_to_embed_something_new(tmp_path, minilm):
    cache = tmp_path / "cache"
    long_text = "The orchard wall was older than the house. " * 60
    first = load_embedder("st:all-MiniLM-L6-v2", cache_dir=cache)
    vectors = first.embed(TEXTS, kind="query")
    prefixes = first.token_ids([long_text], 254)
    window = first.embed_request(TokenIds.of([prefixes[0][0][:254]]))
    assert first.inner.loaded

    warm = load_embedder("st:all-MiniLM-L6-v2", cache_dir=cache)  # a later run: facts, ids and vectors cached
    assert not warm.inner.loaded
    assert (warm.fingerprint, warm.dim, warm.max_tokens, warm.id_capacity("document"), warm.token_fingerprint) == (
        minilm.fingerprint, minilm.dim, minilm.max_tokens, minilm.id_capacity("document"), minilm.token_fingerprint)
    np.testing.assert_array_equal(warm.embed(TEXTS, kind="query"), vectors)
    ids = warm.token_ids([long_text], 254)[0][0]
    np.testing.assert_array_equal(warm.embed_request(TokenIds.of([ids[:254]])), window)
    assert not warm.inner.loaded and warm.stats.embedded == 0 and warm.stats.tokenized == 0

    warm.token_ids(["A text no run has seen before."], 254)  # a new text: the tokenizer alone
    assert warm.stats.tokenized == 1 and not warm.inner.loaded
    fresh = warm.embed(["A text no run has seen before."])  # a new vector: now the weights
    assert warm.inner.loaded and warm.stats.embedded == 1
    np.testing.assert_allclose(fresh, minilm.embed(["A text no run has seen before."]), atol=1e-6)


def test_remembered_facts_keep_a_prompt_that_cannot_go_as_ids(tmp_path):
    folder = copy_minilm(tmp_path / "glued", prompts={"query": "", "document": "passage"})  # "passage" + text fuses
    cache = tmp_path / "cache"
    with pytest.raises(InputError, match="does not tokenise apart") as loaded:
        load_embedder(f"st:{folder}", cache_dir=cache).id_capacity("document")
    warm = load_embedder(f"st:{folder}", cache_dir=cache)
    with pytest.raises(InputError, match="does not tokenise apart") as remembered:
        warm.id_capacity("document")
    assert str(remembered.value) == str(loaded.value) and not warm.inner.loaded


def test_frame_batch_pads_as_the_tokenizer_pads(minilm):
    """frame_batch against the model's own tokenizer ``pad`` (the path it replaced): random id
    sequences, with and without a head and tail, padded right and left, one row, equal rows."""
    import torch

    from embedeval.embedders.batching import frame_batch

    tokenizer = minilm.model.tokenizer
    rng = np.random.default_rng(3)
    batches = [[rng.integers(1000, 3000, int(n)) for n in rng.integers(1, 40, 9)], [rng.integers(1000, 3000, 5)],
               [rng.integers(1000, 3000, 7) for _ in range(3)]]
    side = tokenizer.padding_side
    try:
        for padding_side in ("right", "left"):
            tokenizer.padding_side = padding_side
            for batch in batches:
                for head, tail in (([101], [102]), ([], []), ([101, 2054, 2003], [102])):
                    expected = tokenizer.pad({"input_ids": [head + seq.tolist() + tail for seq in batch]}, return_tensors="pt",
                                             return_attention_mask=True)
                    ids, mask = frame_batch(batch, head, tail, tokenizer.pad_token_id, padding_side)
                    assert torch.equal(torch.from_numpy(ids), expected["input_ids"])
                    assert torch.equal(torch.from_numpy(mask), expected["attention_mask"])
    finally:
        tokenizer.padding_side = side
    with pytest.raises(ValueError, match="padding side"):
        frame_batch(batches[0], [], [], 0, "middle")

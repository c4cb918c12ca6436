import numpy as np
import pytest

from embedeval.embedders.registry import load_embedder
from embedeval.errors import InputError, UnknownEmbedderError

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

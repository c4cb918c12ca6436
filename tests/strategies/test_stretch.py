"""Context extension (LongEmbed's training-free position tricks): the positions each method feeds
the model, the tables and frequencies recomputed by hand, equality with the unmodified model for
texts within its positions, batch independence, the cache, the plan and every refusal."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from embedeval.embedders.local import SentenceTransformerEmbedder
from embedeval.embedders.registry import load_embedder
from embedeval.embedders.requests import StretchedIds, TokenIds
from embedeval.embedders.stretch import grouped_positions, interpolated_table, logscale_factor, longembed_table, recurrent_positions, scaled_inv_freq, stretched
from embedeval.embedders.stretch_methods import Stretch
from embedeval.errors import ConfigError, InputError
from embedeval.strategies import EmbeddingScorer, Strategy, check_strategy_support, parse_strategies

from fakes import small_model_folder

#: Positions of the small random-weight models: texts of a few dozen tokens already exceed them.
P = 32
TEXT = ("The lighthouse keeper wrote down every ship that passed the northern rocks, and in the evening "
        "he read the list aloud to the gulls on the railing. ") * 8


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(str(small_model_folder(tmp_path_factory.mktemp("bert"), "bert", P, max_seq_length=P, initializer_range=0.5)))


@pytest.fixture(scope="module")
def modernbert(tmp_path_factory) -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(str(small_model_folder(tmp_path_factory.mktemp("modernbert"), "modernbert", P,
                                                              max_seq_length=P, initializer_range=0.5)))


def _ids(model, text: str, n: int) -> list[int]:
    ids = list(model.token_ids([text])[0][0])
    assert len(ids) >= n
    return ids[:n]


# -- the formulas, by hand ------------------------------------------------------------------------


def test_grouped_and_recurrent_positions_by_hand():
    assert grouped_positions(10, 4).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]  # f = ceil(10 / 4) = 3
    assert recurrent_positions(10, 4).tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    for n in (1, 3, 4):  # within the positions both are the identity
        assert grouped_positions(n, 4).tolist() == recurrent_positions(n, 4).tolist() == list(range(n))


def test_interpolated_table_by_hand():
    table = np.array([[0.0, 10.0], [2.0, 20.0], [6.0, 40.0]])  # P = 3
    # n = 5: x_i = i * 2 / 4 = 0, 0.5, 1, 1.5, 2
    expected = np.array([[0.0, 10.0], [1.0, 15.0], [2.0, 20.0], [4.0, 30.0], [6.0, 40.0]])
    np.testing.assert_allclose(interpolated_table(table, 5), expected)
    np.testing.assert_array_equal(interpolated_table(table, 2), table[:2])  # within the positions: the table itself
    assert interpolated_table(table, 7)[-1].tolist() == table[-1].tolist()  # the last row reads the last position


def test_longembed_table_by_hand():
    """LongEmbed's PI: the P-row table stretched once to L rows by s = max(L // P, 1), E_t[j s] = T[j],
    linear in between; rows past s (P - 1) hold the last row (ours)."""
    table = np.array([[0.0, 10.0], [2.0, 20.0], [6.0, 40.0], [12.0, 80.0]])  # P = 4
    # L = 8: s = 2, row r at x = r / 2 = 0, 0.5, 1, 1.5, 2, 2.5, 3, then 3.5 -> 3 (held)
    expected = np.array([[0.0, 10.0], [1.0, 15.0], [2.0, 20.0], [4.0, 30.0], [6.0, 40.0], [9.0, 60.0], [12.0, 80.0],
                         [12.0, 80.0]])
    np.testing.assert_allclose(longembed_table(table, 8), expected)
    # L = 11: s = 2 still (11 // 4), so the first 8 rows are L = 8's and the last four hold T[3]
    np.testing.assert_allclose(longembed_table(table, 11), np.vstack([expected, [[12.0, 80.0]] * 3]))
    # L = 12: s = 3, x = 0, 1/3, 2/3, 1, ...: the rows 0, 3, 6, 9 are T's own
    wide = longembed_table(table, 12)
    np.testing.assert_array_equal(wide[[0, 3, 6, 9]], table)
    np.testing.assert_allclose(wide[1], [2 / 3, 10 + 10 / 3])
    # L = 6: s = 1, the table itself, then its last row twice
    np.testing.assert_array_equal(longembed_table(table, 6), table[[0, 1, 2, 3, 3, 3]])


def test_pi_and_pi_dynamic_read_different_positions_by_hand():
    """P = 4, L = 8 (s = 2). A 3-token text (n <= P) reads T[0..2] under both (LongEmbed multiplies
    its ids by s: rows 0, 2, 4 of the stretched table, which are T's own). A 6-token text: PI reads
    rows 0..5, x = 0, 0.5, 1, 1.5, 2, 2.5 (the factor s = 2 of every text); PI-dynamic spreads it
    over the table, x = i * 3 / 5 = 0, 0.6, 1.2, 1.8, 2.4, 3 (its own factor 5 / 3)."""
    table = np.array([[0.0], [2.0], [6.0], [12.0]])
    wide = longembed_table(table, 8)
    np.testing.assert_array_equal(wide[[0, 2, 4]], interpolated_table(table, 3))
    np.testing.assert_allclose(wide[:6, 0], [0.0, 1.0, 2.0, 4.0, 6.0, 9.0])
    np.testing.assert_allclose(interpolated_table(table, 6)[:, 0], [0.0, 1.2, 2.0 + 0.2 * 4, 2.0 + 0.8 * 4, 6.0 + 0.4 * 6, 12.0])


def test_the_cache_key_names_L_for_pi_only_and_keeps_pi_dynamics_old_key():
    """extend-pi's vectors depend on L (s = L // P), so its key names L; extend-pi-dynamic's do not,
    and keep the key ``stretch:pi`` its vectors were stored under while it was called extend-pi:
    no extend-pi@L key ever finds them."""
    keys = {name: Strategy.parse(name).stretch.key for name in
            ("extend-pi@1026", "extend-pi@2050", "extend-pi-dynamic@1026", "extend-pi-dynamic@2050", "extend-pi@1026+logscale",
             "extend-pi-dynamic@1026+logscale", "extend-gp@1026", "extend-gp@2050")}
    assert keys["extend-pi@1026"] == "stretch:pi@1026" and keys["extend-pi@2050"] == "stretch:pi@2050"
    assert keys["extend-pi-dynamic@1026"] == keys["extend-pi-dynamic@2050"] == "stretch:pi"
    assert keys["extend-pi-dynamic@1026+logscale"] == "stretch:pi+logscale" != keys["extend-pi@1026+logscale"]
    assert keys["extend-gp@1026"] == keys["extend-gp@2050"] == "stretch:gp"
    assert len({keys[n] for n in keys if "-gp" not in n}) == 5
    with pytest.raises(InputError, match=r"give L \(its length\)"):
        _ = Stretch("pi").key
    with pytest.raises(ConfigError, match="goes with pi only"):
        Stretch("gp", length=1024)


def test_ntk_base_and_linear_frequencies_from_the_formula():
    base, d, s = 10000.0, 8, 3.0
    inv_freq = 1.0 / base ** (np.arange(0, d, 2) / d)
    ntk_base = base * s ** (d / (d - 2))  # NTK-aware: a larger base
    np.testing.assert_allclose(scaled_inv_freq(inv_freq, "ntk", s), 1.0 / ntk_base ** (np.arange(0, d, 2) / d), rtol=1e-12)
    np.testing.assert_allclose(scaled_inv_freq(inv_freq, "linear", s), inv_freq / s, rtol=1e-12)
    assert scaled_inv_freq(inv_freq, "ntk", 1.0) is inv_freq  # within the positions: unchanged
    assert logscale_factor(P, P) == 1.0 and logscale_factor(4 * P, P) == pytest.approx(math.log(4 * P) / math.log(P))


# -- what the model is fed -------------------------------------------------------------------------


@pytest.mark.parametrize("method, expected", [("gp", lambda n: grouped_positions(n, P)), ("rp", lambda n: recurrent_positions(n, P))])
def test_the_position_ids_the_model_reads(bert, method, expected):
    """A hook on the position table sees the ids each method feeds the model for a text of 3P + 5 tokens."""
    seen = []
    table = bert._transformer().embeddings.position_embeddings
    handle = table.register_forward_hook(lambda module, args, output: seen.append(args[0].clone()))
    try:
        bert.embed_request(StretchedIds.of([_ids(bert, TEXT, 3 * P + 5 - 2)], Stretch(method)))
    finally:
        handle.remove()
    assert seen and seen[0].shape == (1, 3 * P + 5)
    assert seen[0][0].tolist() == expected(3 * P + 5).tolist()


def _column_interp(weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The table read at real positions ``x``, column by column with numpy's own linear interpolation."""
    return np.stack([np.interp(x, np.arange(len(weights)), weights[:, c]) for c in range(weights.shape[1])], axis=1)


@pytest.mark.parametrize("stretch, x", [
    (Stretch("pi-dynamic"), lambda n: np.arange(n) * (P - 1) / (n - 1)),
    (Stretch("pi", length=4 * P + 1), lambda n: np.minimum(np.arange(4 * P + 1) / 4, P - 1)),  # s = 4, L rows
])
def test_pi_reads_an_interpolated_copy_of_the_table_and_restores_it(bert, stretch, x):
    model = bert._transformer()
    original = model.embeddings.position_embeddings
    weights = original.weight.detach().double().numpy().copy()
    n = 2 * P + 3
    with stretched(model, stretch, n, 1, P) as extra:
        inside = model.embeddings.position_embeddings.weight.detach().double().numpy()
        assert extra["position_ids"][0].tolist() == list(range(n))  # token i reads row i
    np.testing.assert_allclose(inside, _column_interp(weights, x(n)), rtol=1e-6, atol=1e-7)
    assert model.embeddings.position_embeddings is original
    np.testing.assert_array_equal(original.weight.detach().double().numpy(), weights)


def test_pi_reads_at_most_its_L(bert):
    with pytest.raises(InputError, match=f"pi with L = {2 * P} reads at most {2 * P} tokens in one pass, not {2 * P + 1}"):
        bert.embed_request(StretchedIds.of([_ids(bert, TEXT, 2 * P - 1)], Stretch("pi", length=2 * P)))
    with pytest.raises(InputError, match=f"reads at most {2 * P} tokens"):
        with stretched(bert._transformer(), Stretch("pi", length=2 * P), 2 * P + 1, 1, P):
            pass


def test_rope_frequencies_inside_and_after(modernbert):
    model = modernbert._transformer()
    buffers = {name: buf.clone() for name, buf in model.named_buffers() if name.endswith("inv_freq") and "original" not in name}
    assert len(buffers) == 2  # ModernBERT's global and local rotary tables: both stretched
    n = 3 * P
    for method in ("ntk", "linear"):
        with stretched(model, Stretch(method), n, 1, P):
            for name, before in buffers.items():
                np.testing.assert_allclose(dict(model.named_buffers())[name].double().numpy(),
                                           scaled_inv_freq(before.double().numpy(), method, n / P), rtol=1e-6)
        for name, before in buffers.items():  # restored
            assert torch.equal(dict(model.named_buffers())[name], before)


def test_the_logit_scale_inside_and_after(bert):
    model = bert._transformer()
    scales = [m.scaling for m in model.modules() if "Attention" in type(m).__name__ and isinstance(getattr(m, "scaling", None), float)]
    assert scales
    n = 3 * P
    with stretched(model, Stretch("gp", logscale=True), n, 1, P):
        inside = [m.scaling for m in model.modules() if "Attention" in type(m).__name__ and isinstance(getattr(m, "scaling", None), float)]
        assert inside == pytest.approx([s * math.log(n) / math.log(P) for s in scales])
    with stretched(model, Stretch("gp", logscale=True), P, 1, P):  # within the positions: no scaling
        assert [m.scaling for m in model.modules() if "Attention" in type(m).__name__ and isinstance(getattr(m, "scaling", None), float)] == scales
    assert [m.scaling for m in model.modules() if "Attention" in type(m).__name__ and isinstance(getattr(m, "scaling", None), float)] == scales


# -- vectors ---------------------------------------------------------------------------------------


def _every_stretch(model):
    """Every method that fits ``model``, with +logscale where it applies (PI reading ``L = 4P``)."""
    return [replace(stretch, length=4 * model.positions()) if stretch.method == "pi" else stretch
            for stretch in Stretch.every() if model.stretch_refusal(stretch) is None]


@pytest.mark.parametrize("which", ["bert", "modernbert"])
def test_texts_within_the_positions_are_read_as_the_model_reads_them(which, request):
    model = request.getfixturevalue(which)
    short = [_ids(model, TEXT, P - 2), _ids(model, TEXT[40:], 7)]
    plain = model.embed_request(TokenIds.of(short))
    for stretch in _every_stretch(model):
        np.testing.assert_allclose(model.embed_request(StretchedIds.of(short, stretch)), plain, atol=1e-6)


@pytest.mark.slow
def test_the_real_minilm_reads_short_texts_unchanged(minilm):
    """all-MiniLM-L6-v2 (mean pooling, 512 positions, a 256-token window): texts it reads whole are
    read alike by every APE method."""
    short = [_ids(minilm, TEXT, 200), _ids(minilm, "Yuki lives next to the Semper Opera House.", 5)]
    plain = minilm.embed_request(TokenIds.of(short))
    for stretch in _every_stretch(minilm):
        np.testing.assert_allclose(minilm.embed_request(StretchedIds.of(short, stretch)), plain, atol=1e-6)


def test_pi_below_2P_holds_the_last_position(bert):
    """Under extend-pi@L with P < L < 2P, s = 1: token i reads T[min(i, P - 1)], which the unchanged
    model reads when given those ids."""
    import torch

    n = P + 5
    ids = _ids(bert, TEXT, n - 2)
    stretched_vector = bert.embed_request(StretchedIds.of([ids], Stretch("pi", length=n + 1)))
    features = bert._framed([ids], *bert._special_ids())
    held = torch.clamp(torch.arange(n), max=P - 1).unsqueeze(0)
    with torch.inference_mode():
        out = bert.model.forward({**features, "position_ids": held, "token_type_ids": torch.zeros((1, n), dtype=torch.long)})
    by_hand = torch.nn.functional.normalize(out["sentence_embedding"].float(), dim=1).numpy()
    np.testing.assert_allclose(stretched_vector, by_hand, atol=1e-6)


def test_pi_reads_every_text_past_P_with_one_factor_and_pi_dynamic_with_its_own(bert):
    """A text of P + 1 tokens: extend-pi@L reads it at L // P (its vector changes with L),
    extend-pi-dynamic at P / (P - 1) (its vector does not); both differ from each other. A text within
    P is read as the model reads it by both, whatever L (LongEmbed's ids i s)."""
    just_past = [_ids(bert, TEXT, P - 1)]  # P + 1 with [CLS] and [SEP]
    at = {L: bert.embed_request(StretchedIds.of(just_past, Stretch("pi", length=L)))[0] for L in (2 * P, 4 * P)}
    dynamic = bert.embed_request(StretchedIds.of(just_past, Stretch("pi-dynamic")))[0]
    assert np.abs(at[2 * P] - at[4 * P]).max() > 1e-4 and np.abs(at[2 * P] - dynamic).max() > 1e-4
    short = [_ids(bert, TEXT, P - 2), _ids(bert, TEXT[40:], 3)]
    for L in (2 * P, 4 * P):
        np.testing.assert_allclose(bert.embed_request(StretchedIds.of(short, Stretch("pi", length=L))),
                                   bert.embed_request(TokenIds.of(short)), atol=1e-6)


@pytest.mark.parametrize("which", ["bert", "modernbert"])
def test_long_texts_change_with_the_method_and_not_with_their_batch(which, request):
    model = request.getfixturevalue(which)
    long, other = _ids(model, TEXT, 3 * P), _ids(model, TEXT[100:], 2 * P + 1)
    vectors = {}
    for stretch in _every_stretch(model):
        alone = model.embed_request(StretchedIds.of([long], stretch))
        mixed = model.embed_request(StretchedIds.of([other, long, long[:5]], stretch))
        np.testing.assert_allclose(mixed[1], alone[0], atol=1e-6)  # a vector does not depend on its neighbours
        vectors[stretch] = alone[0]
    found = list(vectors.values())  # each method (and +logscale) reads a long text differently
    assert all(np.abs(a - b).max() > 1e-5 for i, a in enumerate(found) for b in found[i + 1:])


# -- refusals --------------------------------------------------------------------------------------


def test_a_method_that_does_not_fit_the_positions_is_refused(bert, modernbert):
    # the model says it in its own words, the strategy layer names the strategies that fit it
    assert bert.stretch_refusal(Stretch("ntk")) == "it has absolute positions, and ntk is for rotary ones"
    assert modernbert.stretch_refusal(Stretch("rp")) == "it has rotary positions, and rp is for absolute ones"
    with pytest.raises(ConfigError, match=f"rope-ntk@{2 * P} does not fit .*: it has absolute positions, and ntk is for rotary ones; "
                                          "use extend-gp, extend-rp, extend-pi, extend-pi-dynamic$"):
        EmbeddingScorer(bert, Strategy.parse(f"rope-ntk@{2 * P}"))
    with pytest.raises(ConfigError, match="it has rotary positions, and rp is for absolute ones; use rope-ntk, rope-linear$"):
        EmbeddingScorer(modernbert, Strategy.parse(f"extend-rp@{4 * P}"))
    assert bert.stretch_refusal(Stretch("pi", logscale=True)) is None and modernbert.stretch_refusal(Stretch("ntk")) is None
    assert "logit scale" in modernbert.stretch_refusal(Stretch("ntk", logscale=True))  # ModernBERT computes its scale inline
    assert len(_every_stretch(bert)) == 8 and len(_every_stretch(modernbert)) == 2
    with pytest.raises(ConfigError, match="absolute positions"):
        bert.embed_request(StretchedIds.of([[1000, 1001]], Stretch("linear")))
    assert bert.positions() == P == bert._transformer().embeddings.position_embeddings.num_embeddings


def test_the_factors_use_the_limit_the_checks_read(bert, monkeypatch):
    """``P`` is read once, from the folder before the weights load, and that one reading both
    checks the strategy and sets the factors: a folder reading of P / 2 (told by the test) gives
    grouped positions ``i // ceil(n / (P / 2))``, not the loaded table's ``i // ceil(n / P)``."""
    import embedeval.embedders.local_folder as local_folder

    reads = []

    def told(path):
        reads.append(path)
        return P // 2, "a limit the test tells"

    monkeypatch.setattr(local_folder, "position_limit", told)
    model = SentenceTransformerEmbedder(bert.path)
    with pytest.raises(ConfigError, match=f"it has {P // 2} positions"):  # the check reads P / 2 ...
        EmbeddingScorer(model, Strategy.parse(f"extend-gp@{P // 2}"))
    seen = []
    handle = model._transformer().embeddings.position_embeddings.register_forward_hook(
        lambda module, args, output: seen.append(args[0].clone()))
    try:
        model.embed_request(StretchedIds.of([_ids(model, TEXT, 3 * P + 5 - 2)], Stretch("gp")))
    finally:
        handle.remove()
    assert seen[0][0].tolist() == grouped_positions(3 * P + 5, P // 2).tolist()  # ... and so do the factors
    assert grouped_positions(3 * P + 5, P // 2).tolist() != grouped_positions(3 * P + 5, P).tolist()
    assert reads == [bert.path]  # one reading serves both


def test_a_folder_that_names_no_position_limit_is_refused_not_a_crash(bert, monkeypatch):
    import embedeval.embedders.local_folder as local_folder

    monkeypatch.setattr(local_folder, "position_limit", lambda path: None)
    model = SentenceTransformerEmbedder(bert.path)
    with pytest.raises(ConfigError, match="names no position limit"):
        EmbeddingScorer(model, Strategy.parse("extend-gp@1024"))
    with pytest.raises(ConfigError, match="names no position limit"):
        model.embed_request(StretchedIds.of([[1000, 1001]], Stretch("gp")))


@pytest.mark.parametrize("name, message", [
    ("extend-gp", "write extend-gp@L"), ("extend-gp@", "write extend-gp@L"), ("extend-gp@١٢٨", "write extend-gp@L"),
    ("rope-ntk@1024+log", "write rope-ntk@L"), ("extend-gp@0", "positive"), ("chunks-max@1x8", "write chunks-max@C"),
    ("stretch@1024", "unknown strategy"),
])
def test_bad_strategy_names(name, message):
    with pytest.raises(ConfigError, match=message):
        parse_strategies([name])


def test_help_names_every_strategy():
    from embedeval.strategies import strategy_choices, strategy_names

    named = {part.strip().partition("@")[0] for key in strategy_choices() for part in key.split(",")}
    assert set(strategy_names()) <= named
    assert "full-text" not in strategy_names()  # a label of the lexical scorer, not a --strategy


def test_strategy_labels_round_trip():
    parsed = parse_strategies(["truncate", "extend-pi@4096+logscale", "rope-linear@2048"])
    assert [s.label for s in parsed] == ["truncate", "extend-pi@4096+logscale", "rope-linear@2048"]
    assert parsed[1].stretch == Stretch("pi", logscale=True, length=4096) and parsed[0].stretch is None
    dynamic = parse_strategies(["extend-pi-dynamic@1024+logscale"])[0]
    assert dynamic.label == "extend-pi-dynamic@1024+logscale" and dynamic.stretch == Stretch("pi-dynamic", logscale=True)


def test_lengths_within_the_positions_and_other_models_are_refused(tmp_path):
    spec = f"st:{small_model_folder(tmp_path, 'bert', P, max_seq_length=P)}"
    model = load_embedder(spec, cache_dir=tmp_path / "cache")
    with pytest.raises(ConfigError, match=f"it has {P} positions; use @L with L above {P}"):
        EmbeddingScorer(model, Strategy.parse(f"extend-gp@{P}"))
    with pytest.raises(ConfigError, match="absolute positions"):
        EmbeddingScorer(model, Strategy.parse("rope-ntk@1024"))
    onnx = load_embedder(f"{spec}?backend=onnx", cache_dir=tmp_path / "cache")
    with pytest.raises(ConfigError, match="torch backend"):
        EmbeddingScorer(onnx, Strategy.parse("extend-gp@1024"))
    with pytest.raises(ConfigError, match="on the local executor"):
        check_strategy_support(["openai:text-embedding-3-small"], parse_strategies(["extend-gp@1024"]))
    with pytest.raises(ConfigError, match="on the local executor"):
        check_strategy_support([spec], parse_strategies(["extend-gp@1024"]), executor="ray")
    check_strategy_support([spec, "bm25"], parse_strategies(["extend-gp@1024"]))  # a local model and the lexical baseline


def test_what_the_folder_rules_out_is_refused_before_the_weights_load_in_the_loaded_models_words(tmp_path, monkeypatch):
    """A run checks its strategies against each st: model's folder (config.json, the weights'
    headers) before any model loads: a length within the positions, a rotary method on a BERT
    table, another backend than torch, a folder without a position limit are refused there with
    the words the loaded model uses; what only the loaded model can tell is left to it."""
    from embedeval.strategies import support

    spec = f"st:{small_model_folder(tmp_path, 'bert', P, max_seq_length=P)}"
    said_when_loaded = {}
    for name in (f"extend-gp@{P}", "rope-ntk@1024", "rope-linear@64+logscale"):
        with pytest.raises(ConfigError) as refused:
            EmbeddingScorer(load_embedder(spec, cache_dir=tmp_path / "cache"), Strategy.parse(name))
        said_when_loaded[name] = str(refused.value)

    def no_weights(self):
        raise AssertionError("the weights were loaded")

    monkeypatch.setattr(SentenceTransformerEmbedder, "model", property(no_weights))
    for name, said in said_when_loaded.items():
        with pytest.raises(ConfigError) as refused:
            check_strategy_support([spec, "bm25"], parse_strategies(["truncate", name]))
        assert str(refused.value) == said
    with pytest.raises(ConfigError, match=r"extend-gp@1024 does not fit st:.*: context extension runs on the torch backend, not onnx"):
        check_strategy_support([f"{spec}?backend=onnx"], parse_strategies(["extend-gp@1024"]))
    check_strategy_support([spec], parse_strategies(["extend-gp@1024", "extend-pi@64+logscale"]))  # the loaded model decides these
    monkeypatch.setattr(support, "position_limit", lambda path: None)
    with pytest.raises(ConfigError, match="names no position limit"):
        check_strategy_support([spec], parse_strategies(["extend-gp@1024"]))


def test_loading_the_weights_is_a_step_line_unless_quiet(tmp_path, capsys):
    from embedeval.embedders.requests import innermost

    spec = f"st:{small_model_folder(tmp_path, 'bert', P, max_seq_length=P)}"
    capsys.readouterr()
    for progress in (True, False):
        model = load_embedder(spec, cache_dir=tmp_path / f"cache-{progress}", progress=progress)  # checks it: loads it
        model.embed(["a text"])
        assert innermost(model).progress is progress and innermost(model).loaded
        said = capsys.readouterr()
        assert said.out == ""
        assert (f"loading {model.name} on cpu ... done in " in said.err) is progress, said.err
    assert innermost(load_embedder(spec, cache_dir=tmp_path / "plan", progress=True, plan=True)).progress is False


# -- through the pipeline --------------------------------------------------------------------------


def test_the_scorer_reads_up_to_L_tokens_and_the_cache_shares_lengths(tmp_path, books_dir):
    """extend-gp@L reads a text's first L tokens (special tokens counted, as max_tokens counts
    them); vectors are cached on the method and the ids read, so extend-gp@96 finds what
    extend-gp@64 embedded of texts no longer than 64 tokens, and a rerun embeds nothing."""
    spec = f"st:{small_model_folder(tmp_path, 'bert', P, max_seq_length=P)}"
    texts = [TEXT, TEXT[:60], "A short line."]
    model = load_embedder(spec, cache_dir=tmp_path / "cache")
    short = EmbeddingScorer(model, Strategy.parse("extend-gp@64")).index(texts)
    n_tokens = [len(ids) for ids, _ in model.token_ids(texts)]
    assert n_tokens[0] > 96 and n_tokens[1] <= 62 and model.stats.embedded == 3
    assert short.seen_chars[0] < len(TEXT) and short.seen_chars[1:].tolist() == [len(t) for t in texts[1:]]
    wide = EmbeddingScorer(model, Strategy.parse("extend-gp@96")).index(texts)
    assert model.stats.embedded == 4  # only the long text is read again, further
    assert short.seen_chars[0] < wide.seen_chars[0] < len(TEXT)
    np.testing.assert_allclose(wide.vectors[1:], short.vectors[1:])
    other = EmbeddingScorer(model, Strategy.parse("extend-rp@64")).index(texts)
    assert model.stats.embedded == 7  # another method: other vectors
    assert not np.allclose(other.vectors[0], short.vectors[0], atol=1e-4)
    again = load_embedder(spec, cache_dir=tmp_path / "cache")
    EmbeddingScorer(again, Strategy.parse("extend-gp@64")).index(texts)
    assert again.stats.embedded == 0 and not again.inner.loaded  # cached vectors, remembered facts: no weights loaded


def test_the_cache_keeps_extend_pi_apart_per_L_and_from_extend_pi_dynamic(tmp_path):
    """extend-pi@L's vectors are keyed on L and never found by extend-pi-dynamic (whose key is the
    one today's vectors of the old extend-pi were stored under), nor the other way round."""
    spec = f"st:{small_model_folder(tmp_path, 'bert', P, max_seq_length=P)}"
    texts = [TEXT, TEXT[:60], "A short line."]
    model = load_embedder(spec, cache_dir=tmp_path / "cache")
    dynamic = EmbeddingScorer(model, Strategy.parse("extend-pi-dynamic@64")).index(texts)
    assert model.stats.embedded == 3
    fixed = EmbeddingScorer(model, Strategy.parse("extend-pi@64")).index(texts)
    assert model.stats.embedded == 6  # nothing shared with extend-pi-dynamic
    assert np.abs(fixed.vectors[0] - dynamic.vectors[0]).max() > 1e-4  # 64 tokens at s = 2, not 63 / 31
    np.testing.assert_allclose(fixed.vectors[1:], dynamic.vectors[1:], atol=1e-6)  # within P: the model's own reading
    EmbeddingScorer(model, Strategy.parse("extend-pi@96")).index(texts)
    assert model.stats.embedded == 9  # another L, another table: every text read again
    EmbeddingScorer(model, Strategy.parse("extend-pi-dynamic@96")).index(texts)
    assert model.stats.embedded == 10  # PI-dynamic's vectors depend on the ids only: the long text, read further


@pytest.mark.slow
def test_a_sweep_plans_reads_and_reports_what_L_lets_the_model_see(tmp_path, books_dir):
    """A small sweep with truncate and extend-gp@128 on a 32-position model: the plan's texts to
    embed are what the run embeds; needle_visible is true exactly where the needle ends within the
    first 126 content tokens (counted here with the tokenizer), and only there; a rerun embeds nothing."""
    import json

    import pandas as pd
    from typer.testing import CliRunner

    from embedeval.cli import app
    from embedeval.embedders.tokens import load_token_counter

    spec = f"st:{small_model_folder(tmp_path, 'bert', P, max_seq_length=P)}"
    args = ["nolima", "--groups", "loc-dresden,diet-vegan", "--lengths", "128,256", "--depths", "3", "--negatives", "3",
            "--corpus", f"dir:{books_dir}", "-e", spec, "-s", "truncate,extend-gp@128,extend-pi@128,extend-pi-dynamic@128",
            "--out", str(tmp_path / "run"), "-q"]
    planned = CliRunner().invoke(app, [*args, "--plan", "--json"])
    assert planned.exit_code == 0, planned.output
    plan = json.loads(planned.stdout)["embedders"][0]  # stderr warns: @128 cannot read the 256-token haystacks whole
    assert "warning: " in planned.stderr and "extend-gp@258 reads them whole" in planned.stderr
    run = CliRunner().invoke(app, args)
    assert run.exit_code == 0, run.output
    assert f"{spec}: {plan['to_embed']} texts newly embedded" in run.output
    sims = pd.read_parquet(tmp_path / "run" / "similarities.parquet")
    haystacks = pd.read_parquet(tmp_path / "run" / "haystacks.parquet").set_index("id")
    counter = load_token_counter(spec)
    extended = sims[(sims["strategy"] == "extend-gp@128") & sims["variant"].isin(["onehop"])].drop_duplicates("haystack_id")
    ends = haystacks.loc[extended["haystack_id"], ["text", "needle_end"]]
    within = [counter.count([text[:end]], special_tokens=False)[0] <= 128 - 2 for text, end in zip(ends["text"], ends["needle_end"], strict=True)]
    assert extended["needle_visible"].tolist() == within and 0 < sum(within) < len(within)
    truncated = sims[(sims["strategy"] == "truncate") & (sims["variant"] == "onehop")]
    assert truncated["needle_visible"].mean() < extended["needle_visible"].mean()
    again = CliRunner().invoke(app, args)
    assert f"{spec}: 0 texts newly embedded" in again.output


def test_a_model_without_a_transformer_module_is_refused_not_a_crash(tmp_path):
    """A sentence-transformers model whose first module has no transformers model under it (static
    embeddings) gets a refusal naming the module."""
    model = SentenceTransformerEmbedder(str(small_model_folder(tmp_path, "bert", P, max_seq_length=P)))
    first = next(iter(model.model._modules))
    model.model._modules[first] = torch.nn.Identity()
    assert model.stretch_refusal(Stretch("gp")) == "its first module is a Identity, not a transformer with positions"


def test_an_extension_that_cannot_read_the_longest_haystack_whole_names_the_length_that_would(minilm):
    """Extend-gp@2048 on 2,048-token haystacks silently lost their last two tokens ([CLS]
    and [SEP] count in L, the lengths are content tokens): a warning names extend-gp@2050."""
    from embedeval.strategies import shortfalls

    scorers = [EmbeddingScorer(minilm, Strategy("truncate")), EmbeddingScorer(minilm, Strategy.parse("extend-gp@2048")),
               EmbeddingScorer(minilm, Strategy.parse("extend-pi@2048+logscale")),
               EmbeddingScorer(minilm, Strategy.parse("extend-rp@2050"))]
    lines = shortfalls(scorers, 2048)
    assert len(lines) == 2 and lines[0] == (
        "st:all-MiniLM-L6-v2 [extend-gp@2048] reads 2,046 content tokens of a text (2 of its 2,048 are special tokens or "
        "prompt): the 2,048-token haystacks lose their last 2, and a needle there is not read; extend-gp@2050 reads them whole")
    assert lines[1].endswith("extend-pi@2050+logscale reads them whole")
    assert shortfalls(scorers, 2046) == []  # they read 2,046-token haystacks whole; truncate is not an extension

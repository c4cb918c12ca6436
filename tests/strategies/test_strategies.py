"""Long-text strategies checked against direct computations: the model's own transformers forward
on window ids, sentence-transformers' encode, and numpy maxima; dedupe on token ids; BM25 in the
sweep; bad strategy settings."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.embedders.requests import TokenIds
from embedeval.errors import ConfigError
from embedeval.strategies import EmbeddingScorer, Strategy, parse_strategies, piece_bounds

from fakes import CountingEmbedder, copy_minilm

SENTENCES = [
    "The ferry left the harbour before dawn, loaded with crates of apples and a single bicycle.",
    "Nobody on the island remembered who had painted the lighthouse green.",
    "Marta kept a notebook of every storm, with the wind speed written in pencil.",
    "In the evenings the baker sold the unsold bread to the fishermen at half price.",
    "A goat wandered into the post office and ate two letters and a postcard.",
]


def long_text(n_sentences: int, offset: int = 0) -> str:
    return " ".join(SENTENCES[(offset + i) % len(SENTENCES)] for i in range(n_sentences))


TEXTS = [long_text(40), long_text(9, 2), "Marta counts storms.", long_text(25, 4)]


def direct_vectors(minilm, id_windows: list[list[int]]) -> np.ndarray:
    """Window ids -> [CLS] ids [SEP] -> BERT -> attention-masked mean -> L2 normalise, with
    transformers directly (no sentence-transformers)."""
    bert = minilm.model[0].auto_model
    tokenizer = minilm.model.tokenizer
    out = []
    with torch.inference_mode():
        for ids in id_windows:
            input_ids = torch.tensor([[tokenizer.cls_token_id, *ids, tokenizer.sep_token_id]])
            hidden = bert(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).last_hidden_state[0]
            out.append(torch.nn.functional.normalize(hidden.mean(dim=0), dim=0).numpy())
    return np.stack(out)


def content_ids(minilm, text: str) -> list[int]:
    return minilm.model.tokenizer(text, add_special_tokens=False)["input_ids"]


def test_piece_bounds_cover_the_text_with_the_given_step():
    assert piece_bounds(10, 4, 4) == [(0, 4), (4, 8), (8, 10)]
    assert piece_bounds(10, 4, 3) == [(0, 4), (3, 7), (6, 10)]
    assert piece_bounds(3, 4, 4) == [(0, 3)]
    for n, size, step in [(1000, 254, 254), (1000, 254, 200), (255, 254, 254)]:
        bounds = piece_bounds(n, size, step)
        assert bounds[0][0] == 0 and bounds[-1][1] == n and all(e - s <= size for s, e in bounds)
        assert all(b[0] - a[0] == step for a, b in zip(bounds, bounds[1:], strict=False))  # neighbours


@pytest.mark.slow
def test_truncate_on_token_ids_equals_sentence_transformers_encode(minilm):
    scorer = EmbeddingScorer(minilm, Strategy("truncate"))
    indexed = scorer.index(TEXTS)
    expected = minilm.model.encode_document(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    np.testing.assert_allclose(indexed.vectors, expected, atol=2e-6)
    long_ids = content_ids(minilm, TEXTS[0])
    assert len(long_ids) > 254 and indexed.seen_chars[0] < len(TEXTS[0]) and indexed.seen_chars[2] == len(TEXTS[2])


def test_the_window_a_one_piece_strategy_reads_counts_content_tokens(minilm):
    """The recommended chunk of a strategy that reads one window of a text is capped at the
    content tokens of that window: lengths count content tokens, so 254 for all-MiniLM-L6-v2's 256
    with [CLS] and [SEP], L - 2 for extend-*@L; None for strategies that read it all."""
    special = len(minilm.model.tokenizer("x")["input_ids"]) - len(minilm.token_ids(["x"])[0][0])  # [CLS] and [SEP]
    assert special == 2
    assert EmbeddingScorer(minilm, Strategy("truncate")).window_tokens == minilm.max_tokens - special == 254
    assert EmbeddingScorer(minilm, Strategy.parse("extend-gp@1024")).window_tokens == 1024 - special
    for strategy in (Strategy("windows-mean"), Strategy("chunks-max", chunk_tokens=64)):
        assert EmbeddingScorer(minilm, strategy).window_tokens is None


@pytest.mark.slow
@pytest.mark.parametrize("overlap", [0, 50])
def test_windows_mean_equals_a_direct_computation(minilm, overlap):
    scorer = EmbeddingScorer(minilm, Strategy("windows-mean", overlap=overlap))
    indexed = scorer.index(TEXTS)
    for text, vector in zip(TEXTS, indexed.vectors, strict=True):
        ids = content_ids(minilm, text)
        windows = [ids[s : s + 254] for s in range(0, max(len(ids) - overlap, 1), 254 - overlap)]
        mean = direct_vectors(minilm, windows).mean(axis=0)
        np.testing.assert_allclose(vector, mean / np.linalg.norm(mean), atol=2e-5)
    assert (indexed.seen_chars == [len(t) for t in TEXTS]).all()  # the whole text is read


@pytest.mark.slow
def test_chunks_max_scores_equal_a_direct_max_over_chunk_vectors(minilm):
    scorer = EmbeddingScorer(minilm, Strategy("chunks-max", chunk_tokens=64))  # 62 content tokens a chunk
    queries = ["Who painted the lighthouse?", "What did the goat eat?"]
    scores = scorer.index(TEXTS).scores(queries)
    q = minilm.model.encode_query(queries, normalize_embeddings=True, convert_to_numpy=True)
    for t, text in enumerate(TEXTS):
        ids = content_ids(minilm, text)
        chunks = direct_vectors(minilm, [ids[s : s + 62] for s in range(0, len(ids), 62)])
        expected = q @ chunks.T
        np.testing.assert_allclose(scores.values[:, t], expected.max(axis=1), atol=2e-5)
        assert (scores.best_piece[:, t] == expected.argmax(axis=1)).all()
        offsets = minilm.model.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        for qi, best in enumerate(scores.best_piece[:, t]):  # the span is the winning chunk's characters
            assert scores.best_start[qi, t] == offsets[62 * best][0]
            assert scores.best_end[qi, t] == offsets[min(62 * best + 61, len(ids) - 1)][1]


@pytest.mark.slow
def test_a_prompted_model_gets_its_prompt_on_token_ids_too(tmp_path):
    from embedeval.embedders.local import SentenceTransformerEmbedder

    folder = copy_minilm(tmp_path / "e5like", prompts={"query": "query: ", "document": "passage of text: "})
    model = SentenceTransformerEmbedder(str(folder))
    assert model.id_capacity("document") == 254 - 4 and model.id_capacity("query") == 254 - 2  # "passage of text :"
    for kind in ("query", "document"):
        ids = [tuple(ids[: model.id_capacity(kind)]) for ids, _ in model.token_ids(TEXTS)]
        expected = model.embed(TEXTS, kind=kind)  # sentence-transformers adds the prompt to the text and truncates
        np.testing.assert_allclose(model.embed_request(TokenIds.of(ids, kind)), expected, atol=2e-6)


def test_api_models_get_windows_from_the_reference_tokenizer_flagged_as_estimates():
    from embedeval.embedders.tokens import load_token_counter

    reference = load_token_counter()
    fake = CountingEmbedder()
    fake.max_tokens = 96  # windows of 96 - 2 x 16 = 64 reference tokens (margins below the embedder's own cut)
    scorer = EmbeddingScorer(fake, Strategy("windows-mean"), reference)
    assert not scorer.windows_exact and not EmbeddingScorer(fake, Strategy("truncate"), reference).windows_exact
    indexed = scorer.index(TEXTS[:2])
    for text, vector in zip(TEXTS[:2], indexed.vectors, strict=True):
        offsets = reference.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        pieces = [text[offsets[s][0] : offsets[min(s + 64, len(offsets)) - 1][1]] for s in range(0, len(offsets), 64)]
        mean = np.stack([CountingEmbedder.vector_for(p) for p in pieces]).mean(axis=0)
        np.testing.assert_allclose(vector, mean / np.linalg.norm(mean), atol=1e-6)


def test_each_distinct_window_is_embedded_once(minilm, tmp_path):
    from embedeval.embedders.cache import EmbeddingCache
    from embedeval.embedders.cached import CachedTokenIdEmbedder

    cached = CachedTokenIdEmbedder(minilm, EmbeddingCache(tmp_path))
    head = long_text(30)  # > 254 tokens: what follows is past the window
    texts = [head + " The key was under the mat.", head + " A different ending entirely.", head]
    EmbeddingScorer(cached, Strategy("truncate")).index(texts)
    assert cached.stats.embedded == 1  # three texts, one window
    EmbeddingScorer(cached, Strategy("windows-mean")).index(texts)
    distinct = {tuple(ids[s : s + 254]) for ids, _ in minilm.token_ids(texts) for s in range(0, len(ids), 254)}
    assert cached.stats.embedded == len(distinct)  # the shared first window is not embedded again


@pytest.mark.slow
def test_texts_the_model_reads_alike_get_one_vector_and_the_same_score_in_every_strategy(minilm):
    """A needle haystack whose window is its control's shares the control's vector and
    score to the last bit (a tie), in a batch of other texts and whatever strategy reads it."""
    from embedeval.strategies import distinct_rows

    head = long_text(30)  # > 254 tokens: what follows is past the window
    texts = [long_text(9, 2), head + " The key was under the mat.", *[long_text(12, k) for k in range(5)], head + " Another end."]
    queries = ["Where was the key?", "Who painted the lighthouse?"]
    indexed = EmbeddingScorer(minilm, Strategy("truncate")).index(texts)
    assert (indexed.vectors[1] == indexed.vectors[-1]).all()
    assert (indexed.scores(queries).values[:, 1] == indexed.scores(queries).values[:, -1]).all()
    again = [*texts, texts[1]]  # read whole: the same text twice
    for strategy in (Strategy("windows-mean"), Strategy.parse("extend-gp@1026"), Strategy("chunks-max", chunk_tokens=64)):
        scores = EmbeddingScorer(minilm, strategy).index(again).scores(queries)
        assert (scores.values[:, 1] == scores.values[:, -1]).all(), strategy.label
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((3000, 384)).astype(np.float32)
    vectors[[7, 1500, 2999]] = vectors[42]
    distinct, inverse = distinct_rows(vectors)
    assert len(distinct) == 2997 and (distinct[inverse] == vectors).all() and inverse[0] == 0
    assert len(distinct_rows(vectors[:0])[0]) == 0


@pytest.mark.slow
def test_dedupe_embeds_fewer_texts_and_gives_the_same_tables(tmp_path, books_dir):
    from embedeval.experiments.nolima import NolimaConfig, run_nolima
    from embedeval.grid import HaystackGrid

    def sweep(name: str, dedupe: bool):
        config = NolimaConfig(groups=["loc-dresden", "diet-vegan"], n_bootstrap=20, dedupe=dedupe, out=str(tmp_path / name),
                grid=HaystackGrid(corpus=f"dir:{books_dir}", lengths=[512, 1024], depths=4, negatives=4))
        return run_nolima(config, progress=False, cache_dir=tmp_path / f"cache-{name}")

    deduped, every_text = sweep("dedupe", True), sweep("whole", False)
    n_docs = deduped.haystacks["text"].nunique()
    assert deduped.newly_embedded["st:all-MiniLM-L6-v2"] < n_docs < every_text.newly_embedded["st:all-MiniLM-L6-v2"]
    for table in ("similarities", "retrieval"):
        a, b = getattr(deduped, table), getattr(every_text, table)
        numeric = a.select_dtypes("number").columns
        pd.testing.assert_frame_equal(a.drop(columns=numeric), b.drop(columns=numeric))
        np.testing.assert_allclose(a[numeric].to_numpy(float), b[numeric].to_numpy(float), atol=1e-5)


def test_parse_strategies_expands_chunk_sizes_and_refuses_bad_settings():
    assert [s.label for s in parse_strategies(["truncate", "chunks-max"], [128, 256])] == \
        ["truncate", "chunks-max@128", "chunks-max@256"]
    assert parse_strategies(["windows-mean"], [], 32)[0].overlap == 32
    # a label as the tables spell it is a name too: one chunk size, the overlap of its kind
    one = parse_strategies(["chunks-max@64", "late-chunking@96", "truncate"], [128], 0, 16)
    assert [s.label for s in one] == ["chunks-max@64", "late-chunking@96", "truncate"] and one[1].overlap == 16
    for names, sizes, overlap, message in [
        (["chunks-max", "chunks-max@128"], [128], 0, "chunks-max@128 given twice"), (["chunks-max@x"], [128], 0, "write chunks-max@C"),
        (["late-chunking@0"], [128], 0, "write late-chunking@C"),
        (["truncate", "truncate"], [128], 0, "twice"), (["mean"], [128], 0, "unknown strategy 'mean'"),
        (["extend-gp@1024", "extend-gp@01024"], [128], 0, "twice"),  # two spellings of one strategy, refused before any work
        (["chunks-max"], [], 0, "at least one chunk size"), (["chunks-max"], [0], 0, "distinct positive"),
        (["windows-mean"], [128], -1, "overlap"), ([], [128], 0, "no strategies"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_strategies(names, sizes, overlap)


def test_chunks_larger_than_the_window_are_one_error_line_before_any_work(tmp_path):
    result = CliRunner().invoke(app, ["nolima", "--strategy", "chunks-max", "--chunk-tokens", "128,512",
                                      "--out", str(tmp_path / "run"), "-q"])
    assert result.exit_code == 1
    assert result.output.startswith("error: chunks of 512 tokens do not fit st:all-MiniLM-L6-v2")
    assert result.output.count("\n") == 1 and not (tmp_path / "run" / "haystacks.parquet").exists()
    result = CliRunner().invoke(app, ["nolima", "--strategy", "windows-mean", "--window-overlap", "254", "--out", str(tmp_path / "r2")])
    assert result.exit_code == 1 and "leaves nothing new" in result.output


@pytest.mark.slow
def test_bm25_and_three_strategies_in_one_sweep(tmp_path, books_dir):
    result = CliRunner().invoke(app, [
        "nolima", "--embedder", "st:all-MiniLM-L6-v2", "--embedder", "bm25", "--strategy", "truncate,windows-mean",
        "--strategy", "chunks-max", "--chunk-tokens", "128", "--groups", "loc-dresden,diet-vegan,lang-dutch,job-pilot",
        "--corpus", f"dir:{books_dir}", "--lengths", "128,512", "--depths", "3", "--negatives", "8",
        "--variants", "onehop,literal", "--n-bootstrap", "20", "--out", str(tmp_path / "run"), "-q"])
    assert result.exit_code == 0, result.output
    sims = pd.read_parquet(tmp_path / "run" / "similarities.parquet")
    pairs = set(zip(sims["embedder"], sims["strategy"], strict=True))
    assert pairs == {("st:all-MiniLM-L6-v2", s) for s in ("truncate", "windows-mean", "chunks-max@128")} | {("bm25", "full-text")}
    bm25 = sims[sims["embedder"] == "bm25"]
    assert bm25["normalized"].isna().all() and bm25["sim_qn"].isna().all() and bm25["needle_visible"].dropna().all()
    whole_text = sims[sims["strategy"] != "truncate"]
    assert whole_text["needle_visible"].dropna().all() and not whole_text["truncated"].any()
    retrieval = pd.read_parquet(tmp_path / "run" / "retrieval.parquet")
    lexical = retrieval[retrieval["embedder"] == "bm25"].groupby("variant")["query_auc"].mean()
    # finds the keyword, not the meaning (a pool text may still share another question word: 0.95 to 0.97 seen)
    assert lexical["literal"] > 0.9 and lexical["onehop"] < lexical["literal"] - 0.2
    report = (tmp_path / "run" / "report.md").read_text()
    assert "## Chunk size" in report and "chunks-max@128" in report and "bm25 · full-text" in report


@pytest.mark.slow
def test_strategies_of_one_model_tokenise_the_texts_once(minilm):
    from embedeval.strategies import TokenMemo

    calls = []

    class Counting:
        def __getattr__(self, name):
            return getattr(minilm, name)

        def token_ids(self, texts, limit=None):
            calls.append((len(texts), limit))
            return minilm.token_ids(texts, limit)

    counting = Counting()
    memo = TokenMemo()
    scorers = [EmbeddingScorer(minilm, s, memo=memo) for s in parse_strategies(["windows-mean", "chunks-max", "truncate"], [128, 256])]
    for scorer in scorers:
        scorer.embedder = counting
    assert all(scorer.reads_ids for scorer in scorers)
    vectors = [scorer.index(TEXTS).vectors for scorer in scorers]
    assert calls == [(len(TEXTS), None)]  # one full tokenisation served windows, both chunk sizes and truncation
    np.testing.assert_allclose(vectors[-1], EmbeddingScorer(minilm, Strategy("truncate")).index(TEXTS).vectors, atol=1e-6)


def test_the_strategies_named_model_readings_read_a_text_inside_the_window_as_truncate_does(minilm):
    """The one base of an embedder is read from any strategy of
    :func:`embedeval.strategies.model_reading_rank`: each must give a text inside the window truncate's
    vector, and the strategies left out must not."""
    from embedeval.strategies import model_reading_rank

    texts = [long_text(4), long_text(9, 2)]  # well inside 254 tokens
    expected = EmbeddingScorer(minilm, Strategy("truncate")).index(texts).vectors
    labels = ["windows-mean", "extend-gp@1026", "extend-rp@1026", "extend-pi@1026", "extend-pi-dynamic@1026",
              "extend-gp@1026+logscale", "extend-pi@2050+logscale", "chunks-max@64", "late-chunking@64"]
    for label in labels:
        (strategy,) = parse_strategies([label], [64])
        vectors = EmbeddingScorer(minilm, strategy).index(texts).vectors
        same = vectors.shape == expected.shape and np.allclose(vectors, expected, atol=1e-6)
        assert same == (model_reading_rank(strategy.label) is not None), label


@pytest.mark.slow
def test_a_scorer_says_what_it_read_and_the_models_time_on_what_it_embedded(tmp_path):
    """The decision table's costs. Per text, the tokens the model reads (windows
    that overlap count their shared tokens again; late chunking its overlapping macro windows);
    the seconds and tokens of the inputs the model embedded, cache misses only."""
    from embedeval.embedders.tokens import load_token_counter
    from embedeval.strategies import load_scorers

    texts = [long_text(60), long_text(25, offset=7), long_text(3)]
    reference = load_token_counter()
    windows, late, truncate = load_scorers("st:all-MiniLM-L6-v2", parse_strategies(["windows-mean", "late-chunking", "truncate"], [128],
                                                                                   window_overlap=10, late_overlap=64),
                                           reference, cache_dir=tmp_path)
    n = [len(ids) for ids, _ in windows.embedder.token_ids(texts)]
    assert n[0] > 600 and n[2] < 254
    windows.index(texts)
    assert list(windows.reading.tokens_read) == [sum(b - a for a, b in piece_bounds(k, 254, 244)) for k in n]
    assert windows.reading.tokens == windows.embedder.stats.document_tokens == sum(windows.reading.tokens_read)  # all new
    assert windows.reading.seconds > 0
    late.index(texts)
    assert list(late.reading.tokens_read) == [sum(b - a for a, b in piece_bounds(k, 254, 190)) for k in n]
    # the model runs each distinct window once (these texts repeat sentences: some windows are the same ids)
    assert 0 < late.reading.tokens <= sum(late.reading.tokens_read) and late.reading.seconds > 0
    truncate.index(texts)  # its windows are windows-mean's first ones: nothing new to embed, nothing timed
    assert list(truncate.reading.tokens_read) == [min(k, 254) for k in n]
    assert (truncate.reading.seconds, truncate.reading.tokens) == (0.0, 0)


TOY_STRATEGY = '''"""``windows-max``: windows of the model's own size over the whole text; a text scores as its best
window (chunks-max at the model's full input, named as a family of its own)."""

from embedeval.strategies.base import Family, register


@register
class WindowsMax(Family):
    names = ("windows-max",)
    choices = {"windows-max": "best window of the model's own size over the whole text"}
    words = "taking its best window"
'''


@pytest.fixture
def toy_strategy(tmp_path):
    """The one module a new strategy is (docs/development.md), written where a user would write it
    and imported: its family registers itself; removed from the registry afterwards."""
    import importlib.util

    from embedeval.strategies import FAMILIES

    path = tmp_path / "windows_max.py"
    path.write_text(TOY_STRATEGY)
    before = list(FAMILIES)
    spec = importlib.util.spec_from_file_location("windows_max", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    yield
    FAMILIES[:] = before


@pytest.mark.slow
def test_a_new_strategy_is_one_module_and_runs_in_a_sweep(toy_strategy, tmp_path, books_dir):
    """A strategy in one file reaches --strategy, `embedeval embedders`, the sweep's tables and the
    report with nothing else edited; its scores are chunks-max@256's, which reads the same windows
    of all-MiniLM-L6-v2 (256 input tokens: 254 content tokens and [CLS], [SEP])."""
    listing = CliRunner().invoke(app, ["embedders"])
    assert listing.exit_code == 0 and "windows-max (best window of the model's own size" in listing.output
    result = CliRunner().invoke(app, [
        "nolima", "--strategy", "windows-max,chunks-max@256,truncate", "--groups", "loc-dresden,diet-vegan,lang-dutch",
        "--corpus", f"dir:{books_dir}", "--lengths", "128,1024", "--depths", "3", "--negatives", "8", "--n-bootstrap", "20",
        "--out", str(tmp_path / "run"), "-q"])
    assert result.exit_code == 0, result.output
    sims = pd.read_parquet(tmp_path / "run" / "similarities.parquet")
    assert set(sims["strategy"]) == {"windows-max", "chunks-max@256", "truncate"}
    key = ["haystack_id", "query_form"]
    toy = sims[sims["strategy"] == "windows-max"].sort_values(key).reset_index(drop=True)
    chunks = sims[sims["strategy"] == "chunks-max@256"].sort_values(key).reset_index(drop=True)
    assert len(toy) == len(chunks) > 0
    np.testing.assert_array_equal(toy["sim_qh"], chunks["sim_qh"])
    np.testing.assert_array_equal(toy["best_chunk"], chunks["best_chunk"])
    truncate = sims[sims["strategy"] == "truncate"].sort_values(key).reset_index(drop=True)
    long = toy["length"] == 1024
    assert (toy.loc[long, "sim_qh"] >= truncate.loc[long, "sim_qh"] - 1e-6).all()  # the first window is one of its windows
    assert "windows-max" in (tmp_path / "run" / "report.md").read_text()
    unknown = CliRunner().invoke(app, ["nolima", "--strategy", "windows-min", "--out", str(tmp_path / "r2")])
    assert unknown.exit_code == 1 and "use one of truncate, windows-mean" in unknown.output and "windows-max" in unknown.output

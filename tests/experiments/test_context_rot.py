import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from embedeval.chunking import Chunk, chunk_corpus, parse_chunker
from embedeval.cli import app
from embedeval.corpus import Book, Corpus, load_corpus
from embedeval.defaults import DEFAULT_NEEDLES
from embedeval.embedders.registry import load_embedder
from embedeval.errors import ConfigError
from embedeval.experiments.context_rot import answer_absence, needle_haystack_similarity, needle_question_similarity
from embedeval.index import top_k
from embedeval.needles import load_needle_set, load_pairs, parse_needle_set
from embedeval.text import split_sentences

from fake_api import serving
from fakes import CountingEmbedder

PAIRS = pd.DataFrame({
    "id": ["w1", "w2", "s1", "c1"],
    "topic": ["writing", "writing", "study", ""],
    "question": ["Which character is writing a novel?", "Which character is writing a novel?",
                 "Which character studies Latin?", "Which character has been to Dresden?"],
    "needle": ["Ana wrote every night.", "Ben has a book deal with Penguin.", "Cleo studied in Rome.",
               "Dora lives next to the Semper Opera House."],
})


@pytest.fixture(scope="module")
def needle_set():
    full = load_needle_set(DEFAULT_NEEDLES)
    return full.subset([g.id for g in full.groups[:4]])


@pytest.fixture(scope="module")
def small_corpus(books_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("small-corpus")
    for book in sorted(books_dir.glob("*.txt"))[:3]:
        (folder / book.name).write_text(book.read_text(encoding="utf-8")[20_000:32_000], encoding="utf-8")
    return load_corpus(f"dir:{folder}")


@pytest.fixture
def fake(monkeypatch):
    with serving(monkeypatch, {"OPENAI": "sk-test", "JINA": "jina-test"}) as server:
        yield server


def test_chunkers_cover_the_text_in_order(small_corpus):
    chunks = chunk_corpus(small_corpus, "sentences:1-3", seed=1)
    for book in small_corpus.books:
        mine = [c.text for c in chunks if c.book == book.id]
        assert " ".join(mine) == " ".join(split_sentences(book.text))
        sizes = [len(split_sentences(t)) for t in mine]
        assert min(sizes) >= 1 and max(sizes) <= 3
    assert [c.text for c in chunk_corpus(small_corpus, "sentences:1-3", seed=1)] == [c.text for c in chunks]
    windows = chunk_corpus(small_corpus, "tokens:64")
    from embedeval.embedders.tokens import load_token_counter

    counts = load_token_counter().count([c.text for c in windows])
    assert max(counts) <= 64 and np.median(counts) >= 60


@pytest.mark.parametrize("spec", ["words:3", "sentences:0", "sentences:3-1", "tokens:"])
def test_bad_chunker_spec(spec):
    with pytest.raises(ConfigError, match="chunker"):
        parse_chunker(spec)


def test_faiss_and_chroma_agree_with_brute_force():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(1500, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = vectors[:20] + 0.3 * rng.normal(size=(20, 32)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    brute = queries @ vectors.T
    expected_ids = np.argsort(-brute, axis=1)[:, :5]
    for index in ["faiss", "chroma"]:
        scores, ids = top_k(vectors, queries, 5, index=index)
        np.testing.assert_array_equal(ids, expected_ids)
        np.testing.assert_allclose(scores, np.take_along_axis(brute, expected_ids, axis=1), atol=1e-5)


@pytest.mark.slow
def test_needle_question_across_embedders(fake, needle_set, minilm, tmp_path):
    models = [load_embedder("st:all-MiniLM-L6-v2", cache_dir=tmp_path), load_embedder("openai:text-embedding-3-small", cache_dir=tmp_path),
              load_embedder("jina:jina-embeddings-v3", cache_dir=tmp_path)]
    table = needle_question_similarity(needle_set, models)
    assert len(table) == 4 * 4
    q = minilm.embed(table["question"].tolist(), kind="query")
    n = minilm.embed(table["needle"].tolist())
    np.testing.assert_allclose(table["st:all-MiniLM-L6-v2"], np.sum(q * n, axis=1), atol=1e-5)
    columns = ["st:all-MiniLM-L6-v2", "openai:text-embedding-3-small", "jina:jina-embeddings-v3"]
    values = table[columns].to_numpy()
    np.testing.assert_allclose(table["mean"], values.mean(axis=1))
    np.testing.assert_allclose(table["std"], values.std(axis=1, ddof=1))


@pytest.mark.slow
def test_needle_haystack_mean_of_top5(needle_set, small_corpus, minilm, tmp_path):
    chunks = chunk_corpus(small_corpus, "sentences:1-3")
    model = load_embedder("st:all-MiniLM-L6-v2", cache_dir=tmp_path)
    by_faiss = needle_haystack_similarity(needle_set, chunks, [model], top=5, index="faiss", variants=["onehop"])
    by_chroma = needle_haystack_similarity(needle_set, chunks, [model], top=5, index="chroma", variants=["onehop"])
    np.testing.assert_allclose(by_faiss["mean"], by_chroma["mean"], atol=1e-5)
    chunk_vectors = minilm.embed([c.text for c in chunks])
    needle_vectors = minilm.embed(by_faiss["needle"].tolist(), kind="query")
    expected = np.sort(needle_vectors @ chunk_vectors.T, axis=1)[:, -5:].mean(axis=1)
    np.testing.assert_allclose(by_faiss["st:all-MiniLM-L6-v2"], expected, atol=1e-5)
    assert by_faiss["std"].isna().all()  # one embedder: no spread


@pytest.mark.slow
def test_absence_flags_chunks_with_the_keyword(needle_set, small_corpus, tmp_path):
    planted = Book("planted", "The old bridge in Dresden was rebuilt after the war. Nobody remembered why.")
    corpus = Corpus("mix", small_corpus.books + (planted,))
    chunks = chunk_corpus(corpus, "sentences:1")
    model = load_embedder("st:all-MiniLM-L6-v2", cache_dir=tmp_path)
    table = answer_absence(needle_set, chunks, model, top=10, path=tmp_path / "chroma")
    assert len(table) == 4 * 10 and (tmp_path / "chroma").is_dir()
    dresden = table[table["needles"] == "loc-dresden"]
    hit = dresden[dresden["chunk"].str.contains("Dresden")]
    assert len(hit) == 1 and hit["contains_keyword"].item() and hit["rank"].item() <= 3
    assert (table["n_needles"] == 1).all() and table["contains_character"].notna().all()
    assert table.groupby("needles")["similarity"].apply(lambda s: s.is_monotonic_decreasing).all()


@pytest.mark.slow
def test_cli_similarity_commands(fake, tmp_path, small_corpus, books_dir):
    from test_nolima import SMALL_GROUPS

    groups = ",".join(SMALL_GROUPS)
    corpus = small_corpus.source
    runner = CliRunner()
    result = runner.invoke(app, ["similarity", "needle-question", "--groups", groups, "-e", "st:all-MiniLM-L6-v2",
                                 "-e", "openai:text-embedding-3-small", "--out", str(tmp_path / "nq.csv"), "-q"])
    assert result.exit_code == 0, result.output
    nq = pd.read_csv(tmp_path / "nq.csv")
    assert {"st:all-MiniLM-L6-v2", "openai:text-embedding-3-small", "mean", "std"} <= set(nq.columns)
    result = runner.invoke(app, ["similarity", "needle-haystack", "--groups", groups, "--corpus", corpus, "--min-books", "3",
                                 "--index", "chroma", "--top-k", "5", "--out", str(tmp_path / "nh.parquet"), "-q"])
    assert result.exit_code == 0, result.output
    assert len(pd.read_parquet(tmp_path / "nh.parquet")) == 3 * 4
    result = runner.invoke(app, ["similarity", "absence", "--groups", groups, "--corpus", corpus, "--min-books", "3",
                                 "--out", str(tmp_path / "absence.csv"), "-q"])
    assert result.exit_code == 0, result.output
    assert "questions have a top-10 chunk" in result.output
    PAIRS.to_csv(tmp_path / "pairs.csv", index=False)
    result = runner.invoke(app, ["similarity", "absence", "--pairs", str(tmp_path / "pairs.csv"), "--corpus", corpus, "--min-books", "3",
                                 "--out", str(tmp_path / "absence-pairs.csv"), "-q"])
    assert result.exit_code == 0, result.output
    assert "3 distinct questions, top-10 chunks each; a pair file names no keywords or characters" in result.output
    assert pd.read_csv(tmp_path / "absence-pairs.csv")["needles"].drop_duplicates().tolist() == ["w1;w2", "s1", "c1"]
    bad = runner.invoke(app, ["similarity", "needle-haystack", "--index", "annoy", "--out", str(tmp_path / "x.csv")])
    assert bad.exit_code == 1 and "--index must be one of faiss, chroma" in bad.output


def test_bm25_is_refused_where_vectors_are_needed(tmp_path):
    result = CliRunner().invoke(app, ["similarity", "needle-question", "-e", "bm25", "--out", str(tmp_path / "nq.csv"), "-q"])
    assert result.exit_code == 1 and not (tmp_path / "nq.csv").exists()
    assert result.output.startswith("error: bm25 is a lexical baseline scorer, not an embedding model")


def _write_pairs(folder):
    PAIRS.to_csv(folder / "pairs.csv", index=False)
    PAIRS.to_json(folder / "pairs.jsonl", orient="records", lines=True)
    PAIRS.to_parquet(folder / "pairs.parquet", index=False)
    return [folder / f"pairs.{ext}" for ext in ("csv", "jsonl", "parquet")]


def test_pair_files_match_sentence_transformers_in_every_format(tmp_path):
    from sentence_transformers import SentenceTransformer

    from embedeval.embedders.models import resolve_model_path

    tables = []
    for path in _write_pairs(tmp_path):
        out = tmp_path / f"nq-{path.suffix[1:]}.csv"
        result = CliRunner().invoke(app, ["similarity", "needle-question", "--pairs", str(path), "-e", "st:all-MiniLM-L6-v2",
                                          "--out", str(out), "-q"])
        assert result.exit_code == 0, result.output
        tables.append(pd.read_csv(out, keep_default_na=False))
    for other in tables[1:]:
        pd.testing.assert_frame_equal(tables[0], other)
    table = tables[0]
    assert list(table.columns[:5]) == ["id", "topic", "question", "needle", "shared_words"]
    assert table["id"].tolist() == PAIRS["id"].tolist() and table["topic"].tolist() == PAIRS["topic"].tolist()
    assert table["shared_words"].tolist() == ["write", "", "study", ""]  # reported, not refused
    model = SentenceTransformer(str(resolve_model_path("all-MiniLM-L6-v2")), device="cpu")
    q = model.encode_query(PAIRS["question"].tolist())
    n = model.encode_document(PAIRS["needle"].tolist())
    cosine = np.sum(q * n, axis=1) / (np.linalg.norm(q, axis=1) * np.linalg.norm(n, axis=1))
    np.testing.assert_allclose(table["st:all-MiniLM-L6-v2"], cosine, atol=1e-5)


def test_needle_haystack_takes_pairs(tmp_path):
    chunks = [Chunk(f"c{i}", "b", text) for i, text in enumerate(["The opera house.", "A novel.", "Rome at night.", "Bread."])]
    pairs = load_pairs(_write_pairs(tmp_path)[0])
    table = needle_haystack_similarity(pairs, chunks, [CountingEmbedder()], top=2)
    assert table.columns[:4].tolist() == ["id", "topic", "needle", "shared_words"] and len(table) == 4
    assert table["std"].isna().all()


def _shared_question_set(needle_set):
    """Three groups asking one question (with their own characters and needles), one asking another."""
    groups = []
    for group in needle_set.groups[:4]:
        groups.append({"id": group.id, "category": group.category, "question": group.question, "character": group.character,
                       "keyword": group.keyword, "needles": dict(group.needles)})
    for group in groups[1:3]:
        group["question"], group["keyword"] = groups[0]["question"], groups[0]["keyword"]
        for variant in ("literal", "literal_inverted"):
            group["needles"][variant] = f"{group['character']} has been to {groups[0]['keyword']}."
    return parse_needle_set({"name": "shared", "groups": groups})


def test_absence_lists_each_distinct_question_once(needle_set, tmp_path):
    chunks = [Chunk(f"c{i}", "b", text) for i, text in
              enumerate(["Dresden is on the Elbe.", "Peru is far.", "Yuki waved.", "Rain.", "Snow.", "Sun."])]
    shared = _shared_question_set(needle_set)
    model = CountingEmbedder()
    table = answer_absence(shared, chunks, model, top=3, index="faiss")
    assert model.calls[1] == [shared.groups[0].question, shared.groups[3].question]  # each question embedded once
    assert len(table) == 2 * 3 and table["question"].nunique() == 2
    first = table[table["question"] == shared.groups[0].question]
    ids = ";".join(g.id for g in shared.groups[:3])
    assert (first["needles"] == ids).all() and (first["n_needles"] == 3).all() and (first["keyword"] == "Dresden").all()
    for row in table.itertuples():
        assert row.contains_keyword == (row.keyword in row.chunk)
        assert row.contains_character == any(g.character in row.chunk for g in shared.groups)
    pairs = load_pairs(_write_pairs(tmp_path)[1])
    by_pairs = answer_absence(pairs, chunks, CountingEmbedder(), top=2, index="faiss")
    assert by_pairs.drop_duplicates("question")[["needles", "n_needles"]].values.tolist() == [["w1;w2", 2], ["s1", 1], ["c1", 1]]
    assert by_pairs["contains_keyword"].isna().all() and by_pairs["contains_character"].isna().all()


def test_absence_flags_compare_words_as_the_needle_checks_do():
    """A keyword or name is found whatever its case, accents or invisible characters,
    and only as whole words ("rich" is not in "Zürich")."""
    groups = [{"id": "cafe", "category": "t", "question": "Which character runs a cafe?", "character": "Yuki", "keyword": "cafe",
               "needles": {"onehop": "Yuki pours espresso at dawn."}},
              {"id": "rich", "category": "t", "question": "Which character is rich?", "character": "Ines", "keyword": "rich",
               "needles": {"onehop": "Ines inherited a vineyard."}}]
    chunks = [Chunk("c0", "b", "YÜKI's CAF\u00adÉ opened."), Chunk("c1", "b", "Snow fell on Zürich and Inesville.")]
    table = answer_absence(parse_needle_set({"name": "n", "groups": groups}), chunks, CountingEmbedder(), top=2, index="faiss")
    flags = {(row.keyword, row.chunk_id): (row.contains_keyword, row.contains_character) for row in table.itertuples()}
    assert flags == {("cafe", "c0"): (True, True), ("cafe", "c1"): (False, False),
                     ("rich", "c0"): (False, True), ("rich", "c1"): (False, False)}


def test_needle_haystack_prints_the_mean_per_topic_and_leaves_std_empty_with_one_embedder(tmp_path):
    """The command printed only "wrote 4 rows", and std was NaN with one embedder."""
    books = tmp_path / "books"
    books.mkdir()
    for name, text in (("a", "Ana writes novels at night. Her book deal is with Penguin."), ("b", "Cleo studied Latin in Rome."),
                       ("c", "The Semper Opera House stands in Dresden. Bread is baked daily.")):
        (books / f"{name}.txt").write_text(text + "\n", encoding="utf-8")
    pairs = _write_pairs(tmp_path)[0]
    out = tmp_path / "nh.csv"
    result = CliRunner().invoke(app, ["similarity", "needle-haystack", "--pairs", str(pairs), "--corpus", f"dir:{books}",
                                      "--min-books", "3", "--top-k", "2", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out, keep_default_na=False)
    assert (table["std"] == "").all()  # an empty cell, not NaN
    by_topic = pd.read_csv(out).fillna({"topic": "-"}).groupby("topic", sort=False)["st:all-MiniLM-L6-v2"].mean()
    lines = result.stdout.splitlines()  # the table; what it embeds first is said on stderr
    assert lines[:3] == [f"wrote 4 rows to {out}", "mean needle-haystack similarity (mean cosine of the top-2 chunks) by topic:",
                         "  topic  n  st:all-MiniLM-L6-v2"]
    assert [line.split() for line in lines[3:]] == [[topic, str(n), f"{by_topic[topic]:.3f}"]
                                                    for topic, n in (("writing", 2), ("study", 1), ("-", 1))]
    library = needle_haystack_similarity(load_pairs(pairs), [Chunk("c", "b", "Bread."), Chunk("d", "b", "Rome.")], [CountingEmbedder()], top=1)
    assert library["std"].dtype == "Float64" and all(value is pd.NA for value in library["std"])


def test_means_by_topic_with_several_embedders():
    from embedeval.experiments.context_rot import across_embedders, means_by_topic

    base = pd.DataFrame({"group_id": ["g1", "g2", "g3"], "category": ["loc", "loc", "food"], "variant": ["onehop"] * 3})
    table = across_embedders({"a": [0.2, 0.4, 0.9], "b": [0.4, 0.6, 0.5]}, base)
    summary = means_by_topic(table, ["a", "b"])
    assert summary.index.name == "category" and summary.index.tolist() == ["loc", "food"]
    np.testing.assert_allclose(summary.to_numpy(float), [[2, 0.3, 0.5, 0.4], [1, 0.9, 0.5, 0.7]])
    assert table["std"].dtype == np.float64  # several embedders: a number per row, as before

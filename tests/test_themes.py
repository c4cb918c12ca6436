"""Corpus themes (issue 23): three topics written here recovered by UMAP + HDBSCAN, MMR by hand,
needles that blend in and needles that do not, reruns, and bad input as one line."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import adjusted_rand_score
from typer.testing import CliRunner

from conftest import own_cache
from embedeval.cli import app
from embedeval.metrics import mmr

TOPICS = {
    "cooking": {
        "who": ["The cook", "My grandmother", "The chef", "A baker", "The kitchen porter", "Our host"],
        "did": ["simmered", "chopped", "seasoned", "roasted", "kneaded", "stirred", "baked", "whisked"],
        "what": ["the onions with garlic", "a pot of lentil soup", "the bread dough", "fresh basil and tomatoes",
                 "a tray of potatoes", "the butter into the flour", "a rich beef stew", "the eggs with sugar"],
        "where": ["in the warm kitchen", "over a low flame", "in a cast iron pan", "before the dinner guests arrived",
                  "for the Sunday lunch", "until the sauce thickened"],
    },
    "astronomy": {
        "who": ["The astronomer", "A young stargazer", "The observatory team", "The telescope operator", "Our guide", "The physicist"],
        "did": ["observed", "measured", "photographed", "tracked", "catalogued", "studied", "calculated", "mapped"],
        "what": ["the rings of Saturn", "a distant spiral galaxy", "the orbit of a comet", "the phases of the moon",
                 "a cluster of young stars", "the light of a supernova", "the moons of Jupiter", "a faint nebula"],
        "where": ["through the large telescope", "on a clear winter night", "from the mountain observatory",
                  "with a sensitive camera", "above the dark horizon", "across the night sky"],
    },
    "sailing": {
        "who": ["The captain", "An old sailor", "The deckhand", "Our skipper", "The navigator", "The crew"],
        "did": ["hoisted", "trimmed", "reefed", "steered", "anchored", "tacked", "coiled", "lowered"],
        "what": ["the mainsail", "the small wooden boat", "the jib against the wind", "the ropes on deck",
                 "the schooner into the harbour", "the heavy anchor chain", "the tiller through the waves", "the storm sails"],
        "where": ["as the tide turned", "in the rough open sea", "near the rocky coast", "before the gale hit",
                  "along the windy shore", "under a grey sky"],
    },
}
#: The study's settings but 5 UMAP dimensions (quicker), 5 representatives, and three books.
SMALL = ["--umap-components", "5", "--representatives", "5", "--min-books", "3"]


def sentences(topic: str, n: int, rng) -> list[str]:
    parts = TOPICS[topic]
    return [f"{rng.choice(parts['who'])} {rng.choice(parts['did'])} {rng.choice(parts['what'])} {rng.choice(parts['where'])}."
            for _ in range(n)]


@pytest.fixture(scope="module")
def topic_books(tmp_path_factory):
    """Three books, one topic each, of 400 sentences (about 200 chunks each at 1-3 sentences: dense
    enough that a new sentence of a topic lands inside its cluster)."""
    rng = np.random.default_rng(5)
    folder = tmp_path_factory.mktemp("topics")
    for topic in TOPICS:
        (folder / f"{topic}.txt").write_text(" ".join(sentences(topic, 400, rng)) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def themes_run(topic_books, tmp_path_factory):
    out = tmp_path_factory.mktemp("themes") / "run"
    with own_cache(tmp_path_factory):
        result = CliRunner().invoke(app, ["themes", "--corpus", f"dir:{topic_books}", *SMALL, "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return out


def test_three_written_topics_come_back_as_three_clusters_with_representatives_of_one_topic(themes_run):
    chunks = pd.read_parquet(themes_run / "chunks.parquet")
    assert list(chunks.columns) == ["chunk_id", "book", "text", "cluster", "probability", "x", "y"]
    clustered = chunks[chunks["cluster"] >= 0]
    assert len(clustered) >= 0.9 * len(chunks)
    assert adjusted_rand_score(clustered["book"], clustered["cluster"]) >= 0.8
    clusters = pd.read_csv(themes_run / "clusters.csv")
    assert len(clusters) == 3 and clusters["size"].is_monotonic_decreasing and clusters["cluster"].tolist() == [0, 1, 2]
    assert clusters["share"].sum() == pytest.approx(len(clustered) / len(chunks))
    book_of = dict(zip(chunks["chunk_id"], chunks["book"]))
    for row in clusters.itertuples():
        picks = row.representatives.split(";")
        assert len(picks) == len(set(picks)) == 5 and len({book_of[p] for p in picks}) == 1
        assert set(picks) <= set(chunks.loc[chunks["cluster"] == row.cluster, "chunk_id"])
    for row in clusters.itertuples():  # top terms: words of the cluster's own topic only
        topic = book_of[row.representatives.split(";")[0]]
        vocabulary = {w.lower().strip(".") for phrase in sum(TOPICS[topic].values(), []) for w in phrase.split()}
        terms = row.top_terms.split(";")
        assert len(terms) == 8 and set(terms) <= vocabulary, (topic, terms)
    report = (themes_run / "report.md").read_text()
    assert "## Cluster 0" in report and "noise (cluster -1)" in report
    assert (themes_run / "figures" / "map.png").stat().st_size > 10_000


def test_mmr_by_hand():
    # four unit vectors; relevance to a centroid; pairwise cosine
    vectors = np.array([[1.0, 0.0], [0.8, 0.6], [0.6, 0.8], [0.0, 1.0]])
    relevance = np.array([0.9, 0.95, 0.8, 0.3])
    similarity = vectors @ vectors.T  # [[1, .8, .6, 0], [.8, 1, .96, .6], [.6, .96, 1, .8], [0, .6, .8, 1]]
    # lam 0.5: pick 1 (0.475); then 0: 0.45-0.4 = 0.05, 2: 0.4-0.48 = -0.08, 3: 0.15-0.3 = -0.15 -> 0;
    # then 2: 0.4 - 0.48 = -0.08, 3: 0.15 - 0.3 = -0.15 -> 2; then 3
    assert mmr(relevance, similarity, 4, 0.5) == [1, 0, 2, 3]
    # lam 0.3 favours diversity: 1 (0.285); 0: .27-.56=-.29, 2: .24-.672=-.432, 3: .09-.42=-.33 -> 0;
    # then 2: .24-.672 = -.432, 3: .09-.42 = -.33 -> 3
    assert mmr(relevance, similarity, 3, 0.3) == [1, 0, 3]
    assert mmr(relevance, similarity, 4, 1.0) == list(np.argsort(-relevance))  # lambda 1: plain relevance
    with pytest.raises(ValueError):
        mmr(relevance, similarity[:3], 2)


def test_needles_written_in_a_topic_blend_in_and_others_do_not(themes_run, tmp_path):
    chunks = pd.read_parquet(themes_run / "chunks.parquet")
    largest = chunks[chunks["cluster"] == 0]["book"].mode()[0]
    rng = np.random.default_rng(99)
    on_topic = sentences(largest, 4, rng)
    off_topic = ["The quarterly invoice lists the software licence fees for the accounting department.",
                 "Please reset your password with the link in the security email from the bank.",
                 "The election committee counted the postal votes in the town hall on Tuesday.",
                 "Her knee injury needed physiotherapy and a scan at the orthopaedic clinic."]
    pairs = tmp_path / "pairs.csv"
    pd.DataFrame({"id": [f"on{i}" for i in range(4)] + [f"off{i}" for i in range(4)], "question": ["What happened?"] * 8,
                  "needle": on_topic + off_topic}).to_csv(pairs, index=False)
    out = tmp_path / "membership.csv"
    result = CliRunner().invoke(app, ["themes", "membership", str(themes_run), "--pairs", str(pairs), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out).set_index("id")
    assert (table.loc[[f"on{i}" for i in range(4)], "target_probability"] > 0.9).all()
    assert (table.loc[[f"off{i}" for i in range(4)], "probability"] < 0.5).all()  # placed, but at the fringe of any theme
    assert table.loc[[f"on{i}" for i in range(4)], "blends_in"].all()
    assert not table.loc[[f"off{i}" for i in range(4)], "blends_in"].any()
    assert "4 of 8 needles blend into cluster 0" in result.output


def test_corpus_chunks_placed_again_keep_their_cluster_alone_or_together(themes_run):
    import joblib

    from embedeval.embedders.registry import load_embedder
    from embedeval.experiments.themes import place

    chunks = pd.read_parquet(themes_run / "chunks.parquet")
    core = chunks[chunks["probability"] == 1.0].groupby("cluster").head(3)
    reducer = joblib.load(themes_run / "umap.joblib")
    vectors = load_embedder("st:all-MiniLM-L6-v2").embed(core["text"].tolist())
    together = place(reducer, vectors)
    alone = np.concatenate([place(reducer, vectors[i:i + 1]) for i in range(len(vectors))])
    np.testing.assert_allclose(together, alone, atol=1e-5)  # a text's place does not depend on the others placed with it
    table = pd.read_csv(themes_run / "clusters.csv")
    rows = pd.DataFrame({"needle": core["text"].tolist()})
    from embedeval.experiments.themes import theme_membership

    placed = theme_membership(themes_run, rows)
    assert placed["predicted_cluster"].tolist() == core["cluster"].tolist() and len(table) == 3
    assert (placed["probability"] > 0.9).all()


def test_a_rerun_gives_the_same_clusters_and_tables(themes_run, topic_books, tmp_path):
    again = tmp_path / "again"
    result = CliRunner().invoke(app, ["themes", "--corpus", f"dir:{topic_books}", *SMALL, "--out", str(again), "-q"])
    assert result.exit_code == 0, result.output
    pd.testing.assert_frame_equal(pd.read_parquet(themes_run / "chunks.parquet"), pd.read_parquet(again / "chunks.parquet"))
    assert (themes_run / "clusters.csv").read_bytes() == (again / "clusters.csv").read_bytes()


def test_similarity_absence_reads_the_themes_chunks(themes_run, tmp_path):
    out = tmp_path / "absence.csv"
    result = CliRunner().invoke(app, ["similarity", "absence", "--themes", str(themes_run), "--top-k", "3", "--groups",
                                      "loc-dresden", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out)
    chunks = pd.read_parquet(themes_run / "chunks.parquet")
    assert len(table) == 3 and set(table["chunk_id"]) <= set(chunks["chunk_id"])


def test_bad_theme_inputs_are_one_line(themes_run, topic_books, tmp_path):
    def run(*args):
        return CliRunner().invoke(app, ["themes", *args])

    tiny = tmp_path / "tiny"
    tiny.mkdir()
    for name in ("a", "b", "c"):
        (tiny / f"{name}.txt").write_text("One sentence here. Another one there.\n")
    result = run("--corpus", f"dir:{tiny}", *SMALL, "--out", str(tmp_path / "t"))
    assert result.exit_code != 0 and "error: corpus dir:" in result.output and "needs at least 17" in result.output
    assert not (tmp_path / "t").exists()
    result = run("--corpus", f"dir:{topic_books}", *SMALL, "--min-cluster-size", "400", "--min-samples", "100",
                 "--out", str(tmp_path / "n"))
    assert result.exit_code != 0 and "is noise to HDBSCAN: no theme found; try smaller --min-cluster-size" in result.output
    result = run("membership", str(tmp_path / "missing"), "--pairs", str(tmp_path / "p.csv"), "--out", str(tmp_path / "m.csv"))
    assert result.exit_code != 0 and "does not exist" in result.output
    pairs = tmp_path / "p.csv"
    pd.DataFrame({"question": ["Q?"], "needle": ["The cook stirred the soup."]}).to_csv(pairs, index=False)
    result = run("membership", str(themes_run), "--pairs", str(pairs), "--embedder", "st:other-model", "--out", str(tmp_path / "m.csv"))
    assert result.exit_code != 0 and "was made with st:all-MiniLM-L6-v2, not st:other-model" in result.output
    manifest = json.loads((themes_run / "themes.json").read_text())
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    for name in ("umap.joblib", "hdbscan.joblib", "chunks.parquet"):
        (tampered / name).write_bytes((themes_run / name).read_bytes())
    (tampered / "themes.json").write_text(json.dumps({**manifest, "embedder_fingerprint": "another"}))
    result = run("membership", str(tampered), "--pairs", str(pairs), "--out", str(tmp_path / "m.csv"))
    assert result.exit_code != 0 and "was made with another st:all-MiniLM-L6-v2" in result.output
    (tampered / "themes.json").write_text(json.dumps({**manifest, "packages": {**manifest["packages"], "hdbscan": "0.0.1"}}))
    result = run("membership", str(tampered), "--pairs", str(pairs), "--out", str(tmp_path / "m.csv"))
    assert result.exit_code != 0 and "was fitted with hdbscan 0.0.1" in result.output
    assert not (tmp_path / "m.csv").exists()

"""Corpus themes: three topics written here recovered by UMAP + HDBSCAN, MMR by hand,
needles that blend in and needles that do not (also judged by their distance to the theme
in the embedding space, percentiles by hand), reruns, and bad input as one line."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import adjusted_rand_score
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.metrics.neighbours import mmr

from conftest import own_cache
from fakes import said_first

#: Most tests here need a themes run (chunks embedded, UMAP and HDBSCAN): the module is the slow tier.
pytestmark = pytest.mark.slow

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
#: The study's settings but 5 UMAP dimensions (quicker), 5 representatives, three books, and the chunk sizes drawn with
#: seed 42 (as before chunk_seed was its own setting: the measurements in docs/themes.md are of these chunks).
SMALL = ["--umap-components", "5", "--representatives", "5", "--min-books", "3", "--chunk-seed", "42"]


def sentences(topic: str, n: int, rng) -> list[str]:
    parts = TOPICS[topic]
    return [f"{rng.choice(parts['who'])} {rng.choice(parts['did'])} {rng.choice(parts['what'])} {rng.choice(parts['where'])}."
            for _ in range(n)]


def small_themes_run(tmp_path_factory, name: str, per_topic: int, runs: int = 3):
    """A themes run (with :data:`SMALL` settings and ``runs`` clusterings, its own cache) of three
    books written here, ``per_topic`` sentences of one topic each: the fixture of the modules that
    need a run but do not test the clustering."""
    rng = np.random.default_rng(5)
    books = tmp_path_factory.mktemp(f"{name}-books")
    for topic in TOPICS:
        (books / f"{topic}.txt").write_text(" ".join(sentences(topic, per_topic, rng)) + "\n", encoding="utf-8")
    out = tmp_path_factory.mktemp(f"{name}-themes") / "run"
    with own_cache(tmp_path_factory):
        result = CliRunner().invoke(app, ["themes", "--corpus", f"dir:{books}", *SMALL, "--runs", str(runs), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return out


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
def themes_cli(topic_books, tmp_path_factory):
    """The run (without --quiet) and what the command printed."""
    out = tmp_path_factory.mktemp("themes") / "run"
    with own_cache(tmp_path_factory):
        result = CliRunner().invoke(app, ["themes", "--corpus", f"dir:{topic_books}", *SMALL, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out, result


@pytest.fixture(scope="module")
def themes_run(themes_cli):
    return themes_cli[0]


def test_three_written_topics_come_back_as_three_clusters_with_representatives_of_one_topic(themes_run):
    chunks = pd.read_parquet(themes_run / "chunks.parquet")
    assert list(chunks.columns) == ["chunk_id", "book", "text", "cluster", "probability", "stability", "x", "y"]
    clustered = chunks[chunks["cluster"] >= 0]
    assert len(clustered) >= 0.9 * len(chunks)
    assert adjusted_rand_score(clustered["book"], clustered["cluster"]) >= 0.8
    clusters = pd.read_csv(themes_run / "clusters.csv")
    assert len(clusters) == 3 and clusters["size"].is_monotonic_decreasing and clusters["cluster"].tolist() == [0, 1, 2]
    assert clusters["share"].sum() == pytest.approx(len(clustered) / len(chunks))
    book_of = dict(zip(chunks["chunk_id"], chunks["book"], strict=True))
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


#: Needles about subjects none of the three topics touches (the surgeon and the lawyer land in the
#: middle of the sailing cluster at probability 1.0: only the distance test keeps them out).
UNRELATED = ["The quarterly invoice lists the software licence fees for the accounting department.",
             "Please reset your password with the link in the security email from the bank.",
             "The election committee counted the postal votes in the town hall on Tuesday.",
             "Her knee injury needed physiotherapy and a scan at the orthopaedic clinic.",
             "The surgeon replaced the patient's hip in a three-hour operation.",
             "The lawyer filed an appeal against the insurance company.",
             "The stock market fell sharply after the interest rate decision.",
             "The striker scored twice in the second half and the fans sang until midnight."]


def topic_of(chunks: pd.DataFrame, cluster: int) -> str:
    return chunks[chunks["cluster"] == cluster]["book"].mode()[0]


def membership(themes_run, tmp_path, needles: list[str], cluster: int, *options: str):
    pairs = tmp_path / f"pairs{cluster}.csv"
    pd.DataFrame({"id": [f"n{i}" for i in range(len(needles))], "question": ["What happened?"] * len(needles),
                  "needle": needles}).to_csv(pairs, index=False)
    out = tmp_path / f"membership{cluster}.csv"
    result = CliRunner().invoke(app, ["themes", "membership", str(themes_run), "--pairs", str(pairs), "--cluster", str(cluster),
                                      *options, "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return pd.read_csv(out), result.output


def test_needles_of_a_topic_blend_into_its_theme_and_needles_about_another_subject_into_none(themes_run, tmp_path):
    chunks = pd.read_parquet(themes_run / "chunks.parquet")
    rng = np.random.default_rng(99)
    confident = 0  # unrelated needles that HDBSCAN's probability alone would have let in
    for cluster in range(3):
        on_topic = sentences(topic_of(chunks, cluster), 3, rng)
        table, output = membership(themes_run, tmp_path, on_topic + UNRELATED, cluster)
        assert {"predicted_cluster", "probability", "target_cluster", "target_probability", "neighbour_similarity",
                "outside_percentile", "inside_percentile", "blends_in"} <= set(table.columns)
        on, off = table.iloc[:3], table.iloc[3:]
        assert (on["target_probability"] > 0.9).all() and (on["outside_percentile"] >= 95).all() and on["blends_in"].all()
        assert not off["blends_in"].any(), off
        assert (off["outside_percentile"] < 95).all() and (off["neighbour_similarity"] < 0.2).all()
        assert (on["neighbour_similarity"] > 0.5).all()
        confident += int((off["target_probability"] > 0.9).sum())
        assert f"3 of 11 needles blend into cluster {cluster} (probability > 0.9 and outside percentile >= 95)" in output
    assert confident >= 2


def test_a_pair_file_names_each_needles_target_and_every_needle_gets_its_best_theme(themes_run, tmp_path):
    """Needles of several themes were all compared with the largest cluster unless
    one run per --cluster; now a cluster (or theme) column names each needle's target, and each row
    shows the theme the needle is nearest beside its target's."""
    chunks = pd.read_parquet(themes_run / "chunks.parquet")
    rng = np.random.default_rng(21)
    topics = [topic_of(chunks, c) for c in range(3)]
    needles = [text for topic in topics for text in sentences(topic, 2, rng)] + sentences(topics[2], 1, rng)
    targets = [0, 0, 1, 1, 2, 2, 0]  # the last needle is about topic 2 but written "for" cluster 0
    pairs = tmp_path / "pairs.csv"
    pd.DataFrame({"id": [f"n{i}" for i in range(7)], "question": ["What happened?"] * 7, "needle": needles,
                  "theme": targets}).to_csv(pairs, index=False)
    out = tmp_path / "membership.csv"
    args = ["themes", "membership", str(themes_run), "--pairs", str(pairs), "--out", str(out), "-q"]
    planned = CliRunner().invoke(app, [*args, "--plan", "--json"])
    assert planned.exit_code == 0 and not out.exists(), planned.output
    (plan,) = json.loads(planned.stdout)["embedders"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    # what it embeds, said first: the run's chunks and the needles, as documents (this test's cache holds none)
    distinct = len(set(pd.read_parquet(themes_run / "chunks.parquet")["text"]) | set(needles))
    assert said_first(result.stderr) == (distinct, 0, distinct) == (plan["to_embed"], plan["cached"], plan["texts"])
    table = pd.read_csv(out)
    assert table["target_cluster"].tolist() == targets
    assert table["best_cluster"].tolist() == [0, 0, 1, 1, 2, 2, 2]  # the theme each needle reads like
    assert table["blends_in"].tolist() == [True] * 6 + [False]
    mismatched = table.iloc[6]
    assert mismatched["best_probability"] > 0.9 and mismatched["best_outside_percentile"] >= 95
    assert mismatched["target_probability"] == 0 and mismatched["outside_percentile"] < 95
    on = table.iloc[:6]  # best theme = target: the same measures twice
    np.testing.assert_allclose(on["best_neighbour_similarity"], on["neighbour_similarity"])
    np.testing.assert_allclose(on["best_outside_percentile"], on["outside_percentile"])
    np.testing.assert_allclose(on["best_probability"], on["target_probability"])
    assert result.stdout.splitlines() == [  # what it embeds first is said on stderr
        f"wrote 7 rows to {out}",
        "6 of 7 needles blend into their target clusters (probability > 0.9 and outside percentile >= 95): "
        "cluster 0: 2 of 3; cluster 1: 2 of 2; cluster 2: 2 of 2",
        f"1 needle(s) sit nearer another theme than their target (best_cluster in {out})"]
    # rows without a target take --cluster; a target the run does not have is one line
    pd.DataFrame({"question": ["Q?", "Q?"], "needle": needles[4:6], "cluster": [None, 2]}).to_csv(pairs, index=False)
    result = CliRunner().invoke(app, ["themes", "membership", str(themes_run), "--pairs", str(pairs), "--cluster", "2",
                                      "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert pd.read_csv(out)["target_cluster"].tolist() == [2, 2] and "2 of 2 needles blend into cluster 2" in result.output
    pd.DataFrame({"question": ["Q?"], "needle": needles[:1], "cluster": [7]}).to_csv(pairs, index=False)
    result = CliRunner().invoke(app, ["themes", "membership", str(themes_run), "--pairs", str(pairs), "--out", str(tmp_path / "x.csv")])
    assert result.exit_code == 1 and result.output.strip() == (
        f"error: target cluster of needle 1 (7) is not a cluster of {themes_run} (0..2; see its clusters.csv)")
    assert not (tmp_path / "x.csv").exists()


#: Top terms of three themes, two of them sharing "language" (as the essays' Lisp and languages themes do).
NAMED = {0: ("lisp", "language", "syntax", "macros"), 1: ("language", "languages", "programming", "program"),
         2: ("essay", "essays", "writing", "write")}


def test_a_theme_is_named_by_its_number_or_by_a_term_of_its_top_terms():
    """Cluster numbers follow sizes, which can change between machines; a term names the
    subject. Resolved once, in the library, for --themes-ids, --cluster and a pair file's column."""
    from embedeval.errors import InputError
    from embedeval.experiments.themes.names import resolve_theme

    assert [resolve_theme(name, NAMED, "runs/t") for name in (2, "2", " 2 ", "2.0", np.int64(1))] == [2, 2, 2, 2, 1]
    assert [resolve_theme(name, NAMED, "runs/t") for name in ("writing", " Writing ", "lisp", "languages")] == [2, 2, 0, 1]

    def refused(name, **kwargs) -> InputError:
        with pytest.raises(InputError) as caught:
            resolve_theme(name, NAMED, "runs/t", **kwargs)
        assert "\n" not in str(caught.value)
        return caught.value

    assert str(refused(3)) == "theme 3 is not a theme of runs/t (its themes: 0..2; see its clusters.csv)"
    assert str(refused("-1")) == "theme -1 is not a theme of runs/t (its themes: 0..2; see its clusters.csv)"
    assert str(refused("writnig")) == ("no theme of runs/t has 'writnig' among its top terms; closest: writing (theme 2), write "
                                       "(theme 2) (see its clusters.csv)")
    assert str(refused("startup")) == "no theme of runs/t has 'startup' among its top terms (see its clusters.csv)"
    assert str(refused("language")) == ("'language' is a top term of 2 themes of runs/t: 0 (lisp, language, syntax, macros); "
                                        "1 (language, languages, programming, program); name one by its number or by a term "
                                        "only it has")
    error = refused("Language", parameter="cluster")
    assert str(error).startswith("`cluster`: 'Language' is a top term of 2 themes") and error.parameters == ("cluster",)
    assert str(refused("", parameter="theme_ids")).startswith("`theme_ids`: an empty name")
    for other_digits in ("٢", "२", "𝟐"):  # a number is ASCII digits only, as every number of a command line: a term here
        assert str(refused(other_digits)).startswith(f"no theme of runs/t has {other_digits!r} among its top terms")


def test_theme_terms_are_read_from_clusters_csv_checked(tmp_path, monkeypatch):
    """An edited clusters.csv: a cluster that is no whole number, or listed twice, is one line naming
    the file and line (was a traceback, or the second row's terms silently replacing the first's);
    a term written in capitals in the file is still named in any case."""
    from embedeval.errors import InputError
    from embedeval.experiments.themes import names
    from embedeval.experiments.themes.names import resolve_themes

    def with_clusters(clusters: list[str], terms: list[str]):
        (tmp_path / "clusters.csv").write_text("cluster,top_terms\n" + "".join(f"{c},{t}\n" for c, t in zip(clusters, terms, strict=True)))

    monkeypatch.setattr(names, "read_manifest", lambda out: {})  # a finished run's record: not what is tested here
    with_clusters(["0", "1"], ["Kitchen;bread", "sea;Navigator"])
    assert resolve_themes(tmp_path, ["kitchen", "1"]) == [0, 1] and resolve_themes(tmp_path, ["NAVIGATOR"]) == [1]
    for clusters, says in ((["0", "one"], "line 3: cluster 'one' is not a theme number"),
                           (["0", "0.5"], "line 3: cluster '0.5' is not a theme number"),
                           (["0", "0"], "line 3: theme 0 is listed twice")):
        with_clusters(clusters, ["kitchen", "sea"])
        with pytest.raises(InputError, match=f"clusters.csv, {says}"):
            resolve_themes(tmp_path, ["0"])


def test_accented_and_other_script_words_are_whole_terms():
    """Letter words in any script: "café" was cut to the term "caf", so it could never name a theme."""
    from embedeval.text import topic_terms

    assert topic_terms("Café naïve résumé Straße école Москва x2 3d") == ["café", "naïve", "résumé", "straße", "école", "москва"]


def test_membership_takes_terms_for_the_target_theme_and_refuses_no_match_and_ambiguous_ones(themes_run, tmp_path):
    clusters = pd.read_csv(themes_run / "clusters.csv")
    terms = {row.cluster: row.top_terms.split(";") for row in clusters.itertuples()}
    unique = {c: next(t for t in ts if all(t not in terms[o] for o in terms if o != c)) for c, ts in terms.items()}
    chunks = pd.read_parquet(themes_run / "chunks.parquet")
    rng = np.random.default_rng(3)
    needles = [text for c in range(3) for text in sentences(topic_of(chunks, c), 1, rng)]
    pairs = tmp_path / "pairs.csv"
    pd.DataFrame({"question": ["Q?"] * 3, "needle": needles, "theme": [unique[0].upper(), str(1), ""]}).to_csv(pairs, index=False)
    out = tmp_path / "membership.csv"

    def membership(*options, output=out):
        return CliRunner().invoke(app, ["themes", "membership", str(themes_run), "--pairs", str(pairs), "--out", str(output),
                                        "-q", *options])

    result = membership("--cluster", unique[2])  # the row with no target takes --cluster, here a term
    assert result.exit_code == 0, result.output
    assert pd.read_csv(out)["target_cluster"].tolist() == [0, 1, 2]
    assert result.stdout.splitlines()[1].endswith("cluster 0: 1 of 1; cluster 1: 1 of 1; cluster 2: 1 of 1")

    def refused(*options, run=themes_run) -> str:
        result = CliRunner().invoke(app, ["themes", "membership", str(run), "--pairs", str(pairs), "--out",
                                          str(tmp_path / "x.csv"), *options])
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: "), result.output
        assert not (tmp_path / "x.csv").exists()
        return lines[0]

    assert refused("--cluster", "nosuchterm") == (f"error: --cluster: no theme of {themes_run} has 'nosuchterm' among its "
                                                  "top terms (see its clusters.csv)")
    assert refused("--cluster", "9").startswith(f"error: --cluster: theme 9 is not a theme of {themes_run} (its themes: 0..2")
    pd.DataFrame({"question": ["Q?"] * 3, "needle": needles, "cluster": ["nosuchterm", "0", "nosuchterm"]}).to_csv(pairs, index=False)
    assert refused() == (f"error: target of needle 1, needle 3: no theme of {themes_run} has 'nosuchterm' among its top terms "
                         "(see its clusters.csv)")
    shared = tmp_path / "shared-term"  # the run with a term two themes share
    shutil.copytree(themes_run, shared)
    doctored = clusters.assign(top_terms=[f"{t};shared" if c < 2 else t for c, t in zip(clusters["cluster"], clusters["top_terms"], strict=True)])
    doctored.to_csv(shared / "clusters.csv", index=False)
    assert refused("--cluster", "shared", run=shared) == (
        f"error: --cluster: 'shared' is a top term of 2 themes of {shared}: 0 ({', '.join(terms[0][:4])}); "
        f"1 ({', '.join(terms[1][:4])}); name one by its number or by a term only it has")


def test_the_percentiles_by_hand(themes_run, tmp_path):
    from embedeval.embedders.registry import load_embedder

    chunks = pd.read_parquet(themes_run / "chunks.parquet")
    rng = np.random.default_rng(7)
    needles = sentences(topic_of(chunks, 1), 2, rng) + UNRELATED[:2] + [chunks["text"].iloc[0]]
    table, _ = membership(themes_run, tmp_path, needles, 1)
    model = load_embedder("st:all-MiniLM-L6-v2")
    corpus, vectors = model.embed(chunks["text"].tolist()), model.embed(needles)
    theme, outside = corpus[chunks["cluster"].to_numpy() == 1], corpus[chunks["cluster"].to_numpy() != 1]
    k = 30  # the run's UMAP n_neighbors

    def mean_of_nearest(v, reference):
        return np.sort(reference @ v)[::-1][:k].mean()

    needle = np.array([mean_of_nearest(v, theme) for v in vectors])
    out_stat = np.array([mean_of_nearest(v, theme) for v in outside])
    in_stat = np.array([mean_of_nearest(theme[i], np.delete(theme, i, axis=0)) for i in range(len(theme))])
    np.testing.assert_allclose(table["neighbour_similarity"], needle, atol=1e-6)
    for column, reference in (("outside_percentile", out_stat), ("inside_percentile", in_stat)):
        # ties (within 1e-6: the corpus chunk among the needles scores as itself) counted half
        by_hand = [100 * ((reference < s - 1e-6).mean() + 0.5 * (abs(reference - s) <= 1e-6).mean()) for s in needle]
        np.testing.assert_allclose(table[column], by_hand, atol=1e-9)
    assert table["outside_percentile"].iloc[:2].eq(100).all() and table["outside_percentile"].iloc[2:4].lt(30).all()
    # the outside chunks' own spread: far below a needle of the topic
    assert np.percentile(out_stat, 95) < 0.4 < needle[:2].min()


def test_nearest_cosines_and_percentile_rank_by_hand(monkeypatch):
    from embedeval.metrics import neighbours
    from embedeval.metrics.neighbours import nearest_cosines, neighbour_similarity, percentile_rank

    reference = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 2.0], [-1.0, 0.0]])  # cosines to (1, 0): 1, .6, 0, -1
    cosines, rows = nearest_cosines([[3.0, 0.0], [0.0, 1.0]], reference, 2)
    np.testing.assert_allclose(cosines, [[1.0, 0.6], [1.0, 0.8]])
    assert rows.tolist() == [[0, 1], [2, 1]]
    np.testing.assert_allclose(neighbour_similarity([[1.0, 0.0]], reference, 3), [(1 + 0.6 + 0) / 3])
    np.testing.assert_allclose(neighbour_similarity([[1.0, 0.0]], reference, 10), [0.6 / 4])  # fewer than k: all of them
    # leave-one-out: row 0's nearest others are 1 (.6) and 2 (0); row 2's are 1 (.8) and 0 (0)
    np.testing.assert_allclose(neighbour_similarity(reference, reference, 2, exclude_self=True)[[0, 2]], [0.3, 0.4])
    np.testing.assert_allclose(neighbour_similarity(reference, reference, 10, exclude_self=True)[0], (0.6 + 0 - 1) / 3)
    rng = np.random.default_rng(0)
    queries, many = rng.normal(size=(50, 8)), rng.normal(size=(40, 8))
    whole = nearest_cosines(queries, many, 5)
    monkeypatch.setattr(neighbours, "_BLOCK_BYTES", 8 * 40 * 3)  # three queries a block
    blocked = nearest_cosines(queries, many, 5)
    # The same neighbours; the cosines to float64 rounding only: BLAS picks its kernel by the
    # shape of the product, so a block of three rows and the whole may add in other orders
    # (1.1e-16 apart in 36 of 250 cosines with OpenBLAS 0.3.31).
    np.testing.assert_array_equal(blocked[1], whole[1])
    np.testing.assert_allclose(blocked[0], whole[0], rtol=0, atol=1e-12)
    unit = many / np.linalg.norm(many, axis=1, keepdims=True)
    np.testing.assert_allclose(whole[0], np.sort(queries / np.linalg.norm(queries, axis=1, keepdims=True) @ unit.T)[:, ::-1][:, :5])
    # ties counted half: 0.2 is above one of four and equal to two
    assert percentile_rank([0.05, 0.2, 0.3, 0.5], [0.1, 0.2, 0.2, 0.4]).tolist() == [0.0, 50.0, 75.0, 100.0]
    assert percentile_rank([0.2 + 1e-9], [0.1, 0.2, 0.2, 0.4], tolerance=1e-6).tolist() == [50.0]  # ties within 1e-6
    for call, message in ((lambda: nearest_cosines([[0.0, 0.0]], reference, 1), "norm 0"),
                          (lambda: nearest_cosines([[1.0, 0.0, 0.0]], reference, 1), "different dimensions"),
                          (lambda: nearest_cosines([[1.0, 0.0]], reference, 0), "k must be"),
                          (lambda: percentile_rank([0.5], []), "reference is empty")):
        with pytest.raises(ValueError, match=message):
            call()


def test_corpus_chunks_placed_again_land_on_their_own_position_and_a_text_is_placed_alone(themes_run):
    import joblib

    from embedeval.embedders.registry import load_embedder
    from embedeval.experiments.themes.membership import theme_membership
    from embedeval.experiments.themes.placement import place

    chunks = pd.read_parquet(themes_run / "chunks.parquet")
    core = chunks[chunks["probability"] >= 0.95].groupby("cluster").head(3)  # in their theme at about 1 in every clustering
    reducer = joblib.load(themes_run / "umap.joblib")
    model = load_embedder("st:all-MiniLM-L6-v2")
    corpus = model.embed(chunks["text"].tolist())
    np.testing.assert_array_equal(place(reducer, model.embed(core["text"].tolist()), corpus), reducer.embedding_[core.index])
    new = model.embed(sentences("sailing", 4, np.random.default_rng(3)))
    together = place(reducer, new, corpus)
    alone = np.concatenate([place(reducer, new[i:i + 1], corpus) for i in range(len(new))])
    np.testing.assert_allclose(together, alone, atol=1e-5)  # a text's place does not depend on the others placed with it
    placed = theme_membership(themes_run, pd.DataFrame({"needle": core["text"].tolist()}))
    assert placed["predicted_cluster"].tolist() == core["cluster"].tolist()
    assert (placed["probability"] > 0.9).all()


@pytest.fixture(scope="module")
def quiet_rerun(topic_books, tmp_path_factory):
    """The run of :func:`themes_cli` again, with ``-q``, into another folder with a cache of its own:
    its folder and what the command printed."""
    again = tmp_path_factory.mktemp("again") / "run"
    with own_cache(tmp_path_factory):
        result = CliRunner().invoke(app, ["themes", "--corpus", f"dir:{topic_books}", *SMALL, "--out", str(again), "-q"])
    assert result.exit_code == 0, result.output
    return again, result


def test_a_rerun_gives_the_same_clusters_and_tables(themes_run, quiet_rerun):
    again = quiet_rerun[0]
    pd.testing.assert_frame_equal(pd.read_parquet(themes_run / "chunks.parquet"), pd.read_parquet(again / "chunks.parquet"))
    assert (themes_run / "clusters.csv").read_bytes() == (again / "clusters.csv").read_bytes()


def test_each_long_step_says_what_it_does_on_stderr_and_quiet_silences_it(themes_cli, quiet_rerun):
    """After the embedding bar, UMAP, HDBSCAN, the 2-D map and the figure each show
    a step line with the time it took; --quiet shows none; stdout is the same. without a
    terminal (as here) each step is one line, once, with no cursor movement, and umap-learn's epoch
    bars (cleared in a terminal) are not shown; what the run embeds is said first, even with --quiet."""
    out, loud = themes_cli
    lines = loud.stderr.splitlines()
    assert "\r" not in loud.stderr and "\x1b[" not in loud.stderr and len(lines) == len(set(lines)), lines
    done = r" \.\.\. done in \d+\.\d s"
    steps = [rf"corpus dir:\S+ cut into sentences:1-3 chunks{done}",
             rf"UMAP \(5 dimensions\) \+ HDBSCAN of \d+ points: 9 clusterings{done}", rf"consensus of 9 clusterings{done}",
             rf"UMAP for the map: \d+ points to 2 dimensions{done}",
             rf"top terms and representatives of 3 clusters{done}", rf"the map and report.md{done}"]
    found = [next(i for i, line in enumerate(lines) if re.fullmatch(step, line)) for step in steps]
    assert found == sorted(found), lines  # in the order they ran
    chunks = pd.read_parquet(out / "chunks.parquet")
    n = chunks["text"].nunique()
    said = f"st:all-MiniLM-L6-v2: {n:,} texts to embed, 0 found in the cache: the {n:,} distinct texts the command needs"
    embedded = next(i for i, line in enumerate(lines) if line.startswith("embedding documents (st:all-MiniLM-L6-v2): "))
    assert found[0] < lines.index(said) < embedded, lines  # said once the corpus is cut, before anything is embedded
    assert "UMAP epochs" not in loud.stderr  # umap-learn's bars: only in a terminal
    assert "Construct fuzzy simplicial set" not in loud.output  # not umap-learn's verbose lines
    quiet = quiet_rerun[1]
    assert quiet.stderr.splitlines() == [said]
    without_times = [line for line in loud.stdout.splitlines() if not line.startswith(("time:", "wrote"))]
    assert without_times == [line for line in quiet.stdout.splitlines() if not line.startswith(("time:", "wrote"))]
    assert len(loud.stdout.splitlines()) == 3 and loud.stdout.splitlines()[-1] == f"wrote {out}/report.md"


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
    assert result.exit_code != 0 and "no theme found in the" in result.output and "try smaller --min-cluster-size" in result.output
    result = run("membership", str(tmp_path / "missing"), "--pairs", str(tmp_path / "p.csv"), "--out", str(tmp_path / "m.csv"))
    assert result.exit_code != 0 and "does not exist" in result.output
    pairs = tmp_path / "p.csv"
    pd.DataFrame({"question": ["Q?"], "needle": ["The cook stirred the soup."]}).to_csv(pairs, index=False)
    result = run("membership", str(themes_run), "--pairs", str(pairs), "--embedder", "st:other-model", "--out", str(tmp_path / "m.csv"))
    assert result.exit_code != 0 and "was made with st:all-MiniLM-L6-v2, not st:other-model" in result.output
    manifest = json.loads((themes_run / "themes.json").read_text())
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    for name in ("umap.joblib", "hdbscan.joblib", "clusterings.npz", "chunks.parquet", "clusters.csv"):
        (tampered / name).write_bytes((themes_run / name).read_bytes())
    (tampered / "themes.json").write_text(json.dumps({**manifest, "embedder_fingerprint": "another"}))
    result = run("membership", str(tampered), "--pairs", str(pairs), "--out", str(tmp_path / "m.csv"))
    assert result.exit_code != 0 and "was made with another st:all-MiniLM-L6-v2" in result.output
    (tampered / "themes.json").write_text(json.dumps({**manifest, "packages": {**manifest["packages"], "hdbscan": "0.0.1"}}))
    result = run("membership", str(tampered), "--pairs", str(pairs), "--out", str(tmp_path / "m.csv"))
    assert result.exit_code != 0 and "was fitted with hdbscan 0.0.1" in result.output
    result = run("membership", str(themes_run), "--pairs", str(pairs), "--min-outside-percentile", "101", "--out", str(tmp_path / "m.csv"))
    assert result.exit_code != 0 and "--min-outside-percentile must be in [0, 100], not 101.0" in result.output
    # a themes run edited or damaged by hand is one line each, not a traceback
    (tampered / "themes.json").write_text(json.dumps(manifest))
    for damage, says in ((lambda: (tampered / "themes.json").write_text("[1, 2]"), "themes.json is not a themes run's manifest (it is not a JSON object"),
                         (lambda: (tampered / "themes.json").write_text(json.dumps({k: v for k, v in manifest.items() if k != "settings"})),
                          "its 'settings' is missing or not an object"),
                         (lambda: (tampered / "umap.joblib").write_bytes(b"garbage, not a pickle"), "umap.joblib does not load"),
                         (lambda: (tampered / "hdbscan.joblib").unlink(), "hdbscan.joblib is missing: run embedeval themes again"),
                         (lambda: (tampered / "clusterings.npz").write_bytes(b"PK\x03\x04 damaged"), "clusterings.npz does not load"),
                         (lambda: (tampered / "clusterings.npz").unlink(), "clusterings.npz is missing"),
                         (lambda: (tampered / "themes.json").write_text(json.dumps({**manifest, "run_seeds": [42]})),
                          "disagree on the number of clusterings"),
                         (lambda: (tampered / "themes.json").write_text(json.dumps({k: v for k, v in manifest.items() if k != "run_seeds"})),
                          "was written before themes were a consensus")):
        damage()
        result = run("membership", str(tampered), "--pairs", str(pairs), "--out", str(tmp_path / "m.csv"))
        assert result.exit_code == 1 and result.output.startswith("error: ") and says in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1
        (tampered / "themes.json").write_text(json.dumps(manifest))
        for name in ("umap.joblib", "hdbscan.joblib", "clusterings.npz"):
            (tampered / name).write_bytes((themes_run / name).read_bytes())
    assert not (tmp_path / "m.csv").exists()


#: 25 clusters of 10-18 chunks, sizes tied in threes and twos: cluster c has 10 + c % 9 chunks.
TIED_SIZES = {c: 10 + c % 9 for c in range(25)}
#: Their order by size, ties to the smaller number (written out by hand); tab20 colours the first 18.
BY_SIZE = [8, 17, 7, 16, 6, 15, 24, 5, 14, 23, 4, 13, 22, 3, 12, 21, 2, 11, 20, 1, 10, 19, 0, 9, 18]


def test_the_largest_clusters_get_the_palettes_colours_and_the_rest_grey():
    """198 clusters no longer cycle through 20 colours."""
    from embedeval.report.themes import NOISE_COLOUR, OTHER_COLOUR, cluster_colours, palette_colours

    palette = palette_colours("tab20")
    assert len(palette) == 18 and len(set(palette)) == 18  # tab20 less its two greys
    assert all(not r == g == b for r, g, b, _ in palette) and OTHER_COLOUR not in palette and NOISE_COLOUR not in palette
    shuffled = dict(reversed({-1: 40, **TIED_SIZES}.items()))
    colours = cluster_colours(shuffled, "tab20")
    assert colours == cluster_colours({**TIED_SIZES, -1: 40}, "tab20")  # the order of the mapping does not matter
    assert [colours[c] for c in BY_SIZE[:18]] == palette  # one colour each, the largest first
    assert {colours[c] for c in BY_SIZE[18:]} == {OTHER_COLOUR} and colours[-1] == NOISE_COLOUR
    assert cluster_colours({3: 5, 1: 5}, "tab20") == {1: palette[0], 3: palette[1]}
    assert cluster_colours({}, "tab20") == {}


def test_the_map_draws_and_names_only_the_coloured_clusters():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from embedeval.report.themes import NOISE_COLOUR, OTHER_COLOUR, draw_map, palette_colours

    rng = np.random.default_rng(0)
    labels = np.repeat([*TIED_SIZES, -1], [*TIED_SIZES.values(), 40])
    table = pd.DataFrame({"cluster": labels, "x": rng.normal(size=labels.size), "y": rng.normal(size=labels.size)})
    fig, ax = plt.subplots()
    try:
        draw_map(ax, table.sample(frac=1, random_state=1), "tab20")
        drawn = {c.get_label(): (tuple(c.get_facecolors()[0]), len(c.get_offsets())) for c in ax.collections}
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        numbers = [t.get_text() for t in ax.texts]
    finally:
        plt.close(fig)
    grey = BY_SIZE[18:]
    assert drawn.pop("noise (40 chunks)") == (NOISE_COLOUR, 40)
    assert sum(TIED_SIZES[c] for c in grey) == 75
    assert drawn.pop("7 smaller clusters (75 chunks)") == (OTHER_COLOUR, 75)
    coloured = zip(BY_SIZE, palette_colours("tab20"), strict=False)  # the largest, one per palette colour; the rest grey
    assert drawn == {f"{c}: {TIED_SIZES[c]} chunks": (colour, TIED_SIZES[c]) for c, colour in coloured}
    assert legend == ["noise (40 chunks)", "7 smaller clusters (75 chunks)", *(f"{c}: {TIED_SIZES[c]} chunks" for c in BY_SIZE[:18])]
    assert numbers == [str(c) for c in BY_SIZE[:18]]  # only the coloured clusters are numbered on the map


def test_a_themes_plan_counts_the_chunks_the_run_embeds_and_writes_nothing(themes_run, topic_books, tmp_path):
    out = tmp_path / "planned"
    result = CliRunner().invoke(app, ["themes", "--corpus", f"dir:{topic_books}", *SMALL, "--out", str(out), "--plan", "--json", "-q"])
    assert result.exit_code == 0, result.output
    (plan,) = json.loads(result.output)["embedders"]
    texts = pd.read_parquet(themes_run / "chunks.parquet")["text"]
    assert plan["texts"] == plan["to_embed"] == texts.nunique() and plan["cached"] == 0  # this test's cache is empty
    assert plan["tokens"] > plan["texts"] and plan["seconds"] > 0 and not out.exists()


def test_theme_terms_hold_no_contraction_fragments_and_no_stop_words():
    """"Don't", "they've", "aren't" were cut into the terms "don", "ve", "aren"."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    from embedeval.experiments.themes.describing import top_terms

    texts = ["You don't need a startup to be rich, they've said.", "Founders aren't investors; we'll see what they'd do.",
             "I'm sure it's the founders' startup that won't fail.", "Graham's essays: you can't write well unless you rewrite.",
             "Essays aren't written, they're rewritten; don't stop.", "I've found that writing an essay isn't easy."]
    terms = top_terms(texts, np.array([0, 0, 0, 1, 1, 1]), [0, 1], n=20)
    found = set(terms[0]) | set(terms[1])
    assert not found & {"don", "ve", "aren", "ll", "re", "won", "isn", "can", "t", "s", "d", "m"}, found
    assert not found & ENGLISH_STOP_WORDS
    assert {"startup", "founders", "investors"} <= set(terms[0]) and {"essays", "graham", "rewrite", "writing"} <= set(terms[1])


def test_the_legend_names_each_coloured_theme_by_its_top_terms():
    """The legend showed only sizes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from embedeval.report.themes import draw_map

    labels = np.repeat([0, 1, 2, -1], [30, 20, 10, 5])
    rng = np.random.default_rng(1)
    table = pd.DataFrame({"cluster": labels, "x": rng.normal(size=labels.size), "y": rng.normal(size=labels.size)})
    fig, ax = plt.subplots()
    try:
        draw_map(ax, table, "tab20", {0: ["startup", "founders", "investors", "money"], 1: ["lisp", "macros"], 2: []})
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
    finally:
        plt.close(fig)
    assert legend == ["noise (5 chunks)", "0: 30 chunks - startup, founders, investors", "1: 20 chunks - lisp, macros", "2: 10 chunks"]


def test_themes_and_the_similarity_commands_cut_a_corpus_alike_and_embed_its_chunks_once(tmp_path):
    """Themes drew chunk sizes with seed 42 and the similarity commands with 0, so
    one corpus was cut twice and its chunks embedded twice. Now one chunking (the chunk cache), and
    a needle-haystack run after themes finds every chunk in the embedding cache."""
    rng = np.random.default_rng(11)
    books = tmp_path / "books"
    books.mkdir()
    for topic in TOPICS:
        (books / f"{topic}.txt").write_text(" ".join(sentences(topic, 40, rng)) + "\n", encoding="utf-8")
    small = ["--umap-components", "3", "--representatives", "3", "--min-books", "3", "--min-cluster-size", "5", "--min-samples", "5"]
    result = CliRunner().invoke(app, ["themes", "--corpus", f"dir:{books}", *small, "--out", str(tmp_path / "themes"), "-q"])
    assert result.exit_code == 0, result.output
    themes_texts = pd.read_parquet(tmp_path / "themes" / "chunks.parquet")["text"]
    assert len(list(_cache_dir().glob("chunks/*.arrow"))) == 1  # one cut, kept
    pairs = tmp_path / "pairs.csv"
    pd.DataFrame({"question": ["Who cooked?"], "needle": ["The cook simmered the onions."]}).to_csv(pairs, index=False)
    result = CliRunner().invoke(app, ["similarity", "needle-haystack", "--corpus", f"dir:{books}", "--min-books", "3", "--pairs", str(pairs),
                                      "--out", str(tmp_path / "nh.csv"), "--plan", "--json", "-q"])
    assert result.exit_code == 0, result.output
    (plan,) = json.loads(result.output)["embedders"]
    # the plan embeds the chunks and the needle: every chunk is cached, only the needle is new
    assert plan["texts"] == themes_texts.nunique() + 1 and plan["to_embed"] == 1, plan
    assert len(list(_cache_dir().glob("chunks/*.arrow"))) == 1  # read back, not cut again


def _cache_dir():
    import os
    from pathlib import Path

    return Path(os.environ["EMBEDEVAL_CACHE"])


def test_a_cut_corpus_is_read_back_from_the_chunk_cache(tmp_path, monkeypatch):
    from embedeval import chunking
    from embedeval.corpus import load_corpus

    (tmp_path / "a.txt").write_text("One. Two. Three. Four. Five.\n")
    (tmp_path / "b.txt").write_text("Six. Seven. Eight.\n")
    corpus = load_corpus(f"dir:{tmp_path}")
    first = chunking.corpus_chunks(corpus, "sentences:1-3", seed=3)
    assert first == chunking.chunk_corpus(corpus, "sentences:1-3", seed=3)
    monkeypatch.setattr(chunking, "chunk_corpus", lambda *args: pytest.fail("cut again"))
    assert chunking.corpus_chunks(corpus, "sentences:1-3", seed=3) == first
    with pytest.raises(pytest.fail.Exception):  # another seed, another chunking
        chunking.corpus_chunks(corpus, "sentences:1-3", seed=4)


@pytest.mark.parametrize("place", ["foreign", "link", "figures-link"])
def test_themes_out_into_a_foreign_folder_or_through_a_link_is_one_line_before_any_work(topic_books, tmp_path, place):
    """`themes --out` writes only into a folder of its own: a folder of the user's, a link
    to one, and a themes folder whose figures/ links to the user's folder are each one error line
    before the corpus is read, and nothing is written."""
    victims = tmp_path / "mine"
    victims.mkdir()
    (victims / "map.png").write_text("MINE")
    out = tmp_path / "out"
    if place == "foreign":
        out = victims
    elif place == "link":
        out.symlink_to(victims)
    else:
        out.mkdir()
        (out / "themes.json").write_text(json.dumps({"settings": {}, "embedder_fingerprint": "x"}))  # a themes run's record
        (out / "figures").symlink_to(victims)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = CliRunner().invoke(app, ["themes", "--corpus", f"dir:{topic_books}", *SMALL, "--out", str(out), "-q"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert ("is a link or not a folder" if place == "figures-link" else "holds files and is not a run folder") in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.rglob("*")) == before and (victims / "map.png").read_text() == "MINE"


def test_a_themes_rerun_into_the_folder_a_crashed_run_left_works(topic_books, tmp_path, monkeypatch):
    """Audit 2: a themes run that dies after writing its tables and map, before themes.json, leaves a
    folder the rerun writes into (it claimed the folder first); the same files in a folder of the user's stay refused."""
    from embedeval.experiments.themes import run

    def crash(*args):
        raise RuntimeError("crashed before the manifest")
    out = tmp_path / "out"
    args = ["themes", "--corpus", f"dir:{topic_books}", *SMALL, "-q", "--out"]
    monkeypatch.setattr(run, "themes_report", crash)
    assert isinstance(CliRunner().invoke(app, [*args, str(out)]).exception, RuntimeError)
    monkeypatch.undo()
    assert (out / "chunks.parquet").is_file() and (out / "figures" / "map.png").is_file() and not (out / "themes.json").exists()
    mine = tmp_path / "mine"
    shutil.copytree(out, mine, ignore=shutil.ignore_patterns(".embedeval-claim"))
    result = CliRunner().invoke(app, [*args, str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "themes.json").is_file() and not (out / ".embedeval-claim").exists()
    result = CliRunner().invoke(app, [*args, str(mine)])
    assert result.exit_code == 1 and "holds files and is not a run folder" in result.output
    # a folder another command claimed (a report killed half-way) is not the themes run's to take
    claimed = tmp_path / "claimed"
    shutil.copytree(mine, claimed)
    from embedeval.report.compare import REPORT_FOLDER_RECORD
    from embedeval.run_folder import _claim_text

    (claimed / ".embedeval-claim").write_text(_claim_text(REPORT_FOLDER_RECORD))
    result = CliRunner().invoke(app, [*args, str(claimed)])
    assert result.exit_code == 1 and "holds files and is not a run folder" in result.output

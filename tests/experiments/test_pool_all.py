"""The ``all`` retrieval pool: each needle haystack ranked among every haystack of
its length and depth that does not answer its question, checked by hand on a score matrix, and by
another project's evaluator: MTEB's, run on the same haystacks with the bundled model through
:mod:`embedeval.mteb_task`, gives the numbers of the run's rank table and metrics.csv."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.defaults import DEFAULT_NEEDLES
from embedeval.export import dataset_revision
from embedeval.needles import load_needle_set
from embedeval.run import NolimaRun
from embedeval.similarity import HaystackScores, retrieval_rows
from embedeval.strategies.scoring import Scores

from conftest import own_cache
from fakes import MatrixScorer, write_word_books

#: The tests here read sweeps of both pools (a sweep each): the slow tier.
pytestmark = pytest.mark.slow

# --- by hand: two questions (A, B), a handful of haystacks --------------------------------------------------------------
# columns: id, group, variant, length, target depth, needles held (own first)
HAYSTACKS = [
    ("A@0", "A", "onehop", 128, 0.0, ["A"]),
    ("A@1", "A", "onehop", 128, 1.0, ["A"]),
    ("B@0", "B", "onehop", 128, 0.0, ["B"]),
    ("B@1", "B", "onehop", 128, 1.0, ["B"]),
    ("A:control", "A", "control", 128, None, []),
    ("B:control", "B", "control", 128, None, []),
    ("neg0", "A", "negative", 128, None, []),
    ("neg1", "A", "negative", 128, None, []),
    ("B@0:n2", "B", "onehop", 128, 0.0, ["B", "A"]),  # two needles: answers A too
    ("B:control:n2", "B", "control", 128, None, ["A"]),  # holds A's needle: in no pool
    ("A@0:256", "A", "onehop", 256, 0.0, ["A"]),
    ("neg:256", "A", "negative", 256, None, []),
]
# SCORES[q][h]: question q's score for haystack h (rows A, B; columns as HAYSTACKS)
SCORES = np.array([
    [0.90, 0.50, 0.70, 0.20, 0.60, 0.10, 0.30, 0.80, 0.65, 0.40, 0.55, 0.45],
    [0.65, 0.75, 0.60, 0.40, 0.20, 0.50, 0.10, 0.35, 0.80, 0.70, 0.90, 0.95],
])
# worked by hand. all: the needle-free haystacks of the length (A:control, B:control, neg0, neg1) and the
# needle haystacks of the same variant, needle count and target depth, less those holding the question's needle;
# needle-free: the four needle-free ones alone (at 256: neg:256)
EXPECTED = {  # (haystack, question): (all: rank, candidates incl. itself, query_auc), (needle-free: rank, candidates)
    ("A@0", "A"): ((1, 6, 5 / 5), (1, 5)),  # pool + B@0 (0.70)
    ("A@1", "A"): ((3, 6, 3 / 5), (3, 5)),  # pool + B@1 (0.20); above it: A:control 0.60, neg1 0.80
    ("B@0", "B"): ((2, 6, 4 / 5), (1, 5)),  # A@0 (0.65) beats B@0 (0.60) for B's question
    ("B@1", "B"): ((3, 6, 3 / 5), (2, 5)),  # A@1 (0.75) and B:control (0.50) above 0.40
    ("B@0:n2", "B"): ((1, 5, 4 / 4), (1, 5)),  # the only other two-needle haystack is itself
    ("B@0:n2", "A"): ((2, 5, 3 / 4), (2, 5)),  # neg1 (0.80) above 0.65
    ("A@0:256", "A"): ((1, 2, 1 / 1), (1, 2)),  # B has no haystack at 256
}


@pytest.fixture(scope="module")
def hand_made():
    full = load_needle_set(DEFAULT_NEEDLES)
    needle_set = full.subset([g.id for g in full.groups[:2]])
    name = {"A": needle_set.groups[0].id, "B": needle_set.groups[1].id}
    rows = []
    for haystack_id, group, variant, length, depth, held in HAYSTACKS:
        needled = variant not in ("control", "negative")
        groups = [name[g] for g in held]
        rows.append({"id": haystack_id, "group_id": name[group], "variant": variant, "length": length,
                     "depth": depth, "target_depth": depth, "needle_start": 0 if needled else None, "character": None,
                     "n_needles": len(held) if (needled or len(held)) else 0, "needle_groups": groups,
                     "needle_characters": [needle_set.group(g).character for g in groups], "needle_starts": [0] * len(groups),
                     "needle_depths": [depth or 0.0] * len(groups), "text": haystack_id})
    frame = pd.DataFrame(rows)
    frame.loc[frame["variant"] == "control", "n_needles"] = [0, 0, 2]  # a K-needle haystack's control carries its K
    zeros = np.zeros(SCORES.shape, dtype=np.int64)
    scored = HaystackScores(MatrixScorer(), frame, {"question": [g.question for g in needle_set.groups]},
                            {"question": Scores(SCORES, zeros, zeros, zeros)}, frame["text"].str.len().to_numpy())
    return scored, needle_set, {v: k for k, v in name.items()}


@pytest.mark.parametrize("pool", ["all", "needle-free"])
def test_each_pool_ranks_as_worked_by_hand(hand_made, pool):
    scored, needle_set, letter = hand_made
    ranks = retrieval_rows(scored, needle_set, pool=pool)
    got = {(row.haystack_id, letter[row.group_id]): row for row in ranks.itertuples()}
    assert set(got) == set(EXPECTED)
    for key, (everything, needle_free) in EXPECTED.items():
        row = got[key]
        rank, candidates = (everything if pool == "all" else needle_free)[:2]
        assert (row.rank, row.n_candidates, row.ties) == (rank, candidates, 0), (pool, key)
        assert row.mrr == pytest.approx(1 / rank)
        measures = ranks.set_index(["haystack_id", "group_id"]).loc[(key[0], needle_set.groups["AB".index(key[1])].id)]
        assert measures["ndcg@1"] == measures["recall@1"] == (rank == 1) and measures["recall@5"] == (rank <= 5)
        assert measures["ndcg@10"] == pytest.approx(1 / np.log2(rank + 1))
        assert measures["mrr@10"] == pytest.approx(1 / rank)
        if pool == "all":
            assert measures["query_auc"] == pytest.approx(everything[2])
    if pool == "needle-free":  # the default is the needle-free pool, unchanged
        pd.testing.assert_frame_equal(ranks, retrieval_rows(scored, needle_set))


def test_an_unknown_pool_is_one_error_line(tmp_path):
    result = CliRunner().invoke(app, ["nolima", "--pool", "everything", "--out", str(tmp_path / "run"), "-q"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == ["error: --pool must be one of needle-free, all, not 'everything'"]


# --- MTEB's evaluator on the same haystacks -------------------------------------------------------------------------
GROUPS = "loc-dresden,loc-peru,diet-vegan,med-asthma"
WORDS = ("harbour lantern meadow orchard bridge river candle window garden market winter morning quiet ancient "
         "narrow distant gentle wooden silver golden patient careful crowded heavy").split()


@pytest.fixture(scope="module")
def all_run(tmp_path_factory):
    """A small run ranked with ``--pool all``: two lengths inside the model's 256-token window
    (nothing truncated, so no two haystacks read alike and no score ties) and one past it (512: a
    needle past the window is cut off, so its haystack reads and scores as its control: ties)."""
    books = write_word_books(tmp_path_factory.mktemp("pool-books"), WORDS, (8, 20), seed=5)
    out = tmp_path_factory.mktemp("pool") / "run"
    with own_cache(tmp_path_factory):
        result = CliRunner().invoke(app, ["nolima", "--groups", GROUPS, "--corpus", f"dir:{books}", "--lengths", "128,192,512",
                                          "--depths", "3", "--negatives", "3", "--n-bootstrap", "20", "--variants", "onehop",
                                          "--pool", "all", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return out


def test_mtebs_evaluator_gives_the_all_pools_numbers(all_run):
    import mteb
    from sentence_transformers import SentenceTransformer

    from embedeval.embedders.models import resolve_model_path
    from embedeval.mteb_task import nolima_task

    run = NolimaRun.open(all_run)
    assert run.config["pool"] == "all"
    ranks = run.retrieval()
    assert (ranks.loc[ranks["length"] < 256, "ties"] == 0).all()
    assert (ranks.loc[ranks["length"] == 512, "ties"] > 0).any()  # past the window: tied with the control, as MTEB must see too
    groups = len(GROUPS.split(","))
    assert (ranks["n_candidates"] == 3 + groups + groups).all()  # negatives + controls + the depth's needle haystacks
    task = nolima_task(all_run)
    assert task.metadata.dataset["revision"] == dataset_revision(run)  # the `all` pool's revision
    model = SentenceTransformer(resolve_model_path("all-MiniLM-L6-v2"), device="cpu")
    result = mteb.evaluate(model, task, cache=None, show_progress_bar=False)
    scores = result.task_results[0].scores
    assert set(scores) == {"test_128", "test_192", "test_512"}
    metrics = run.metrics()
    overall = metrics[(metrics["category"] == "all") & (metrics["depth_bucket"] == "all")].set_index(["length", "metric"])["value"]
    compared = 0
    for split, entries in scores.items():
        length = int(split.removeprefix("test_"))
        assert sorted(e["hf_subset"] for e in entries) == ["onehop-d0", "onehop-d0.5", "onehop-d1"]
        for entry in entries:
            depth = float(entry["hf_subset"].removeprefix("onehop-d"))
            rows = ranks[(ranks["length"] == length) & np.isclose(ranks["haystack_id"].map(target_depth(run)), depth)]
            assert len(rows) == groups
            for mteb_name, ours in (("ndcg_at_1", "ndcg@1"), ("recall_at_5", "recall@5"), ("mrr_at_10", "mrr@10"),
                                    ("ndcg_at_10", "ndcg@10"), ("recall_at_1", "recall@1")):
                assert entry[mteb_name] == pytest.approx(rows[ours].mean(), abs=5e-6), (split, entry["hf_subset"], mteb_name)  # MTEB keeps 5 decimals
                compared += 1
        for mteb_name, ours in (("ndcg_at_1", "ndcg@1"), ("recall_at_5", "recall@5"), ("mrr_at_10", "mrr@10")):
            mean = np.mean([e[mteb_name] for e in entries])  # every depth subset has one query per group
            assert mean == pytest.approx(overall[(length, ours)], abs=5e-6), (split, mteb_name)
    assert compared == 3 * 3 * 5
    assert min(e["ndcg_at_1"] for entries in scores.values() for e in entries) < 1  # not a perfect score everywhere


def target_depth(run: NolimaRun) -> dict:
    haystacks = run.haystacks()
    return dict(zip(haystacks["id"], haystacks["target_depth"].astype(float), strict=True))


def test_a_run_from_before_the_pool_choice_reads_as_needle_free(all_run, tmp_path):
    import shutil

    old = tmp_path / "old"
    shutil.copytree(all_run, old)
    config = json.loads((old / "config.json").read_text())
    del config["pool"]
    (old / "config.json").write_text(json.dumps(config))
    assert NolimaRun.open(old).config["pool"] == "needle-free"


def test_the_pool_is_part_of_the_mteb_dataset_revision(all_run):
    run = NolimaRun.open(all_run)
    needle_free = replace(run, config={**run.config, "pool": "needle-free"})
    assert dataset_revision(run) != dataset_revision(needle_free)  # the same haystacks ranked among other candidates
    by_hand = hashlib.sha256(run.haystack_settings_bytes() + b"\0pool=needle-free").hexdigest()[:16]
    assert dataset_revision(needle_free) == by_hand
    # the MTEB task always ranks the `all` pool: its revision is an --pool all run's, never a default run's
    assert dataset_revision(needle_free, "all") == dataset_revision(run) != dataset_revision(needle_free)


def test_the_report_shows_the_share_of_needle_haystacks_tied_with_their_control(all_run):
    from embedeval.report.tables import control_tie_table

    run = NolimaRun.open(all_run)
    ties = control_tie_table(run.similarities()).set_index("length").iloc[:, 0]
    ranks = run.retrieval()
    assert ties.loc[128] == ties.loc[192] == 0 and ties.loc[512] > 0
    assert ties.loc[512] <= ranks.loc[ranks["length"] == 512, "ties"].gt(0).mean()  # a tie with its control is a tie in its rank
    report = (all_run / "report.md").read_text()
    assert "Share of needle haystacks tied with their control" in report

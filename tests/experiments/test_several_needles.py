"""Several needles per haystack: what a K-needle haystack holds, its rank rows
(one per question whose needle it holds, recomputed here from the score matrix), and the K = 1
grid unchanged beside it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from embedeval.aggregate import nolima_metrics
from embedeval.cli import app
from embedeval.corpus import load_corpus
from embedeval.defaults import DEFAULT_NEEDLES
from embedeval.embedders.tokens import load_token_counter
from embedeval.grid import HaystackGrid
from embedeval.haystacks import build_haystacks
from embedeval.labels import CONTROL, NEGATIVE, is_blind
from embedeval.needles import load_needle_set
from embedeval.similarity import HaystackScores, retrieval_rows, similarity_rows
from embedeval.strategies.scoring import Scores

from fakes import MatrixScorer


@pytest.fixture(scope="module")
def needle_set():
    full = load_needle_set(DEFAULT_NEEDLES)
    return full.subset([g.id for g in full.groups[:5]])


@pytest.fixture(scope="module")
def grid(needle_set, books_dir):
    frame = build_haystacks(needle_set, HaystackGrid(lengths=[256, 1024], depths=4, variants=["onehop", "inverted"], negatives=3,
            needles_per_haystack=[1, 3]), load_corpus(f"dir:{books_dir}"))
    return frame


def test_each_three_needle_haystack_holds_three_groups_needles_own_first(needle_set, grid):
    counter = load_token_counter()
    three = grid[(grid["n_needles"] == 3) & (grid["variant"] != CONTROL)]
    assert len(three) == 5 * 2 * 4 * 2  # groups x lengths x depths x variants
    assert (grid["n_needles"] == 3).sum() == 2 * len(three)  # and a control each
    for row in three.itertuples():
        assert len(row.needle_groups) == len(set(row.needle_groups)) == 3 and row.needle_groups[0] == row.group_id
        assert row.needle_characters[0] == row.character and len(set(row.needle_characters)) == 3
        for group_id, name, start in zip(row.needle_groups, row.needle_characters, row.needle_starts, strict=True):
            needle = needle_set.group(group_id).needle(row.variant, name)
            assert row.text[start:start + len(needle)] == needle and row.text.count(needle) == 1
        assert row.needle_starts[0] == row.needle_start and row.depth == row.needle_depths[0]
        for start, depth in zip(row.needle_starts, row.needle_depths, strict=True):  # every needle's depth, counted here
            before = counter.count([row.text[:start].strip()])[0]
            assert depth == pytest.approx(before / row.n_tokens, abs=2 / row.n_tokens)
        assert row.n_tokens <= row.length
        assert row.control_id == f"{row.group_id}:{CONTROL}:{row.length}:{row.variant}:d{row.id.split(':d')[1]}"
    names = {name for g in needle_set.groups for name in g.characters}
    for row in grid[grid["variant"].isin([CONTROL, NEGATIVE]) & (grid["n_needles"] == 0)].itertuples():
        assert not any(name in row.text for name in names) and len(row.needle_groups) == 0


def test_a_three_needle_haystack_has_a_control_with_the_other_two_needles_where_they_were(needle_set, grid):
    counter = load_token_counter()
    by_id = grid.set_index("id")
    three = grid[(grid["n_needles"] == 3) & (grid["variant"] != CONTROL)]
    assert three["control_id"].is_unique
    for row in three.itertuples():
        control = by_id.loc[row.control_id]
        assert control["variant"] == CONTROL and control["n_needles"] == 3 and control["n_tokens"] <= row.length
        assert list(control["needle_groups"]) == list(row.needle_groups[1:])
        own = needle_set.group(row.group_id).needle(row.variant, row.character)
        assert own not in control["text"]
        own_tokens = counter.count([own])[0]
        for k, (group_id, name) in enumerate(zip(row.needle_groups[1:], row.needle_characters[1:], strict=True)):
            needle = needle_set.group(group_id).needle(row.variant, name)
            start = control["needle_starts"][k]
            assert control["text"][start:start + len(needle)] == needle and control["text"].count(needle) == 1
            # at the same sentence boundary: the tokens before it are the haystack's, less the own needle's if it came first
            in_haystack = counter.count([row.text[:row.needle_starts[k + 1]].strip()])[0]
            in_control = counter.count([control["text"][:start].strip()])[0]
            expected = in_haystack - (own_tokens if row.needle_start < row.needle_starts[k + 1] else 0)
            assert abs(in_control - expected) <= 2
            assert control["needle_depths"][k] == pytest.approx(in_control / control["n_tokens"], abs=2 / control["n_tokens"])


def test_the_one_needle_grid_is_the_same_beside_several_needles(needle_set, books_dir, grid):
    alone = build_haystacks(needle_set, HaystackGrid(lengths=[256, 1024], depths=4, variants=["onehop", "inverted"], negatives=3),
            load_corpus(f"dir:{books_dir}"))
    beside = grid[grid["n_needles"] != 3].reset_index(drop=True)
    pd.testing.assert_frame_equal(alone, beside)
    assert (alone.loc[~alone["variant"].isin([CONTROL, NEGATIVE]), "n_needles"] == 1).all()


def _scored(needle_set, grid, values: np.ndarray) -> HaystackScores:
    """The grid scored by a matrix: ``values[g, h]`` is group g's question's score for haystack h."""
    zeros = np.zeros(values.shape, dtype=np.int64)
    return HaystackScores(MatrixScorer(), grid, {"question": [g.question for g in needle_set.groups]},
                          {"question": Scores(values, zeros, zeros, zeros)}, grid["text"].str.len().to_numpy())


def _overall(metrics: pd.DataFrame, n_needles: int) -> pd.DataFrame:
    """The own question's overall cells (every category and depth) of haystacks with ``n_needles`` needles."""
    return metrics[(metrics["n_needles"] == n_needles) & metrics["own_question"] & (metrics["category"] == "all")
                   & (metrics["depth_bucket"] == "all")]


def test_a_haystack_is_ranked_by_every_question_whose_needle_it_holds(needle_set, grid):
    rng = np.random.default_rng(3)
    values = rng.integers(0, 20, size=(len(needle_set.groups), len(grid))).astype(float)  # integers: ties happen
    scored = _scored(needle_set, grid, values)
    ranks = retrieval_rows(scored, needle_set)
    three = ranks[(ranks["n_needles"] == 3) & ~ranks["variant"].map(is_blind)]
    assert three.groupby("haystack_id").size().eq(3).all()
    assert len(three) == 3 * ((grid["n_needles"] == 3) & (grid["variant"] != CONTROL)).sum()
    assert three.groupby("haystack_id")["own_question"].sum().eq(1).all()
    # recomputed by hand: rank = 1 + the pool's candidates scoring at least as high (pessimistic on ties)
    group_row = {g.id: i for i, g in enumerate(needle_set.groups)}
    column = {haystack_id: i for i, haystack_id in enumerate(grid["id"])}
    free = (grid["variant"].isin([CONTROL, NEGATIVE]) & (grid["n_needles"] == 0)).to_numpy()  # no needle in a candidate
    for row in three.itertuples():
        haystack = grid.iloc[column[row.haystack_id]]
        assert row.group_id in haystack["needle_groups"] and row.own_question == (row.group_id == haystack["group_id"])
        assert row.depth == haystack["needle_depths"][list(haystack["needle_groups"]).index(row.group_id)]  # its needle's
        pool = np.flatnonzero(free & (grid["length"] == row.length).to_numpy())
        scores = values[group_row[row.group_id]]
        assert row.score == scores[column[row.haystack_id]]
        assert row.rank == 1 + int((scores[pool] >= row.score).sum())
        assert row.n_candidates == pool.size + 1
    # the similarity table: one row per question asked; only the own question's row has a control
    table = similarity_rows(scored, needle_set)
    asked = table[(table["n_needles"] == 3) & (table["variant"] != CONTROL)]
    assert len(asked) == len(three) and asked["control_id"].isna().eq(~asked["own_question"]).all()
    np.testing.assert_array_equal(asked.sort_values(["haystack_id", "group_id"])["depth"],
                                  three.sort_values(["haystack_id", "group_id"])["depth"])


def test_the_own_questions_needle_blind_level_is_its_own_controls_rank(needle_set, grid):
    from embedeval.aggregate import retrieval_metrics
    from embedeval.breaks import BreakRule, break_points

    # scores: noise in [0, 1), +0.5 for the question's own needle, +0.15 for each other needle the text holds
    asked_of = [set(groups) for groups in grid["needle_groups"]]
    rng = np.random.default_rng(5)
    values = np.array([[rng.random() + (0.5 if g.id in held else 0.0) + 0.15 * len(held - {g.id}) for held in asked_of]
                       for g in needle_set.groups])
    ranks = retrieval_rows(_scored(needle_set, grid, values), needle_set)
    blind = ranks[ranks["variant"].map(is_blind)]
    own = ranks[(ranks["n_needles"] == 3) & ranks["own_question"] & ~ranks["variant"].map(is_blind)]
    assert len(blind) == len(own) and set(blind["variant"]) == {"blind:onehop", "blind:inverted"}
    by_id = grid.set_index("id")
    column = {haystack_id: i for i, haystack_id in enumerate(grid["id"])}
    group_row = {g.id: i for i, g in enumerate(needle_set.groups)}
    free = (grid["variant"].isin([CONTROL, NEGATIVE]) & (grid["n_needles"] == 0)).to_numpy()
    for row in blind.itertuples():  # by hand: the control's rank among its needle haystack's pool
        assert by_id.loc[row.haystack_id, "variant"] == CONTROL and by_id.loc[row.haystack_id, "n_needles"] == 3
        scores = values[group_row[row.group_id]]
        pool = np.flatnonzero(free & (grid["length"] == row.length).to_numpy())
        assert row.rank == 1 + int((scores[pool] >= scores[column[row.haystack_id]]).sum())
    chance = (1 / blind["n_candidates"]).mean()
    assert blind["recall@1"].mean() > chance + 0.1  # the other needles alone lift the control well above k/n
    metrics = retrieval_metrics(ranks, n_resamples=20)
    breaks = break_points(metrics, ranks, BreakRule(k=1), n_resamples=50).set_index(["variant", "n_needles", "own_question"])
    assert not any(v.startswith("blind:") for v in breaks.index.get_level_values("variant"))  # a level, not a series
    three_own = breaks.loc[("onehop", 3, True)]
    assert three_own["chance_level"] == "needle-blind control" and breaks.loc[("onehop", 1, True), "chance_level"] == "k/n"
    # the base (256, the shorter half of two lengths) is recall@1 corrected against the control's own level there
    rows = own[(own["variant"] == "onehop") & (own["length"] == 256)]
    level = blind[(blind["variant"] == "blind:onehop") & (blind["length"] == 256)]["recall@1"].mean()
    assert 0 < rows["recall@1"].mean() < 1
    assert three_own["base_value"] == pytest.approx((rows["recall@1"].mean() - level) / (1 - level))
    assert three_own["base_value"] < (rows["recall@1"].mean() - chance) / (1 - chance)  # k/n would overstate it


def test_the_own_questions_separation_measures_its_own_needle_alone(needle_set, grid):
    # a scorer that adds 1 for the question's needle and 0.1 for every other needle in the text
    asked_of = [set(groups) for groups in grid["needle_groups"]]
    values = np.array([[(1.0 if g.id in held else 0.0) + 0.1 * len(held - {g.id}) for held in asked_of]
                       for g in needle_set.groups])
    metrics = nolima_metrics(similarity_rows(_scored(needle_set, grid, values), needle_set), n_resamples=20)
    own = _overall(metrics, 3)
    diff = own[own["metric"] == "mean_diff"]["value"]
    np.testing.assert_allclose(diff, 1.0)  # the two other needles' 0.2 is in the control too
    one = _overall(metrics, 1)
    np.testing.assert_allclose(one[one["metric"] == "mean_diff"]["value"], 1.0)


def test_the_separation_uses_the_controls_of_the_cells_own_variant(needle_set, grid):
    # the other needles count only in the inverted wording (and in its controls): each variant's
    # separation must still be the own needle's 1.0, not mixed with the other variant's controls
    inverted = (grid["variant"] == "inverted") | grid["id"].str.contains(":inverted:")
    values = np.array([[(1.0 if g.id in held else 0.0) + (0.5 * len(held - {g.id}) if inv else 0.0)
                        for held, inv in zip(map(set, grid["needle_groups"]), inverted, strict=True)] for g in needle_set.groups])
    cells = _overall(nolima_metrics(similarity_rows(_scored(needle_set, grid, values), needle_set), n_resamples=20), 3)
    np.testing.assert_allclose(cells[cells["metric"] == "mean_diff"]["value"], 1.0)
    np.testing.assert_allclose(cells[cells["metric"] == "auc"]["value"], 1.0)


@pytest.mark.slow
def test_the_sweep_reports_several_needles(needle_set, books_dir, tmp_path):
    out = tmp_path / "run"
    groups = ",".join(g.id for g in needle_set.groups)
    result = CliRunner().invoke(app, ["nolima", "--embedder", "bm25", "--groups", groups, "--corpus", f"dir:{books_dir}",
                                      "--lengths", "256,512", "--depths", "3", "--negatives", "3", "--needles-per-haystack", "1,3",
                                      "--variants", "onehop", "--n-bootstrap", "50", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    metrics = pd.read_csv(out / "metrics.csv")
    assert {(1, True), (3, True), (3, False)} <= set(zip(metrics["n_needles"], metrics["own_question"], strict=True))
    report = (out / "report.md").read_text()
    assert "## Several needles" in report and "3 needles, other questions" in report
    assert "own control (needle-blind)" in report  # the level the own question's break point is read against


@pytest.mark.parametrize("args, message", [
    (["--needles-per-haystack", "1,3", "--n-distractors", "1"], "error: --needles-per-haystack above 1 goes with --n-distractors 0"),
    (["--needles-per-haystack", "0"], "error: needles-per-haystack count 0 is invalid: counts are whole numbers >= 1"),
    (["--needles-per-haystack", "3", "--groups", "loc-dresden,loc-peru"], "error: --needles-per-haystack 3 needs at least 3 groups"),
])
@pytest.mark.slow
def test_bad_needle_counts_are_one_line(args, message, tmp_path):
    result = CliRunner().invoke(app, ["haystacks", "build", "--out", str(tmp_path / "h.parquet"), *args])
    assert result.exit_code != 0 and message in result.output, result.output
    assert not (tmp_path / "h.parquet").exists()

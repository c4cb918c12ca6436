"""Several needles per haystack (issue 24, item 1): what a K-needle haystack holds, its rank rows
(one per question whose needle it holds, recomputed here from the score matrix), and the K = 1
grid unchanged beside it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.corpus import load_corpus
from embedeval.defaults import DEFAULT_NEEDLES
from embedeval.embedders.base import Scores
from embedeval.haystacks import build_haystacks
from embedeval.labels import CONTROL, NEGATIVE
from embedeval.needles import load_needle_set
from embedeval.similarity import HaystackScores, retrieval_rows, similarity_rows
from embedeval.tokens import load_token_counter


@pytest.fixture(scope="module")
def needle_set():
    full = load_needle_set(DEFAULT_NEEDLES)
    return full.subset([g.id for g in full.groups[:5]])


@pytest.fixture(scope="module")
def grid(needle_set, books_dir):
    frame = build_haystacks(needle_set, load_corpus(f"dir:{books_dir}"), [256, 1024], depths=4, variants=["onehop", "inverted"],
                            negatives=3, needles_per_haystack=[1, 3])
    return frame


def test_each_three_needle_haystack_holds_three_groups_needles_own_first(needle_set, grid):
    counter = load_token_counter()
    three = grid[grid["n_needles"] == 3]
    assert len(three) == 5 * 2 * 4 * 2  # groups x lengths x depths x variants
    for row in three.itertuples():
        assert len(row.needle_groups) == len(set(row.needle_groups)) == 3 and row.needle_groups[0] == row.group_id
        assert row.needle_characters[0] == row.character and len(set(row.needle_characters)) == 3
        for group_id, name, start in zip(row.needle_groups, row.needle_characters, row.needle_starts):
            needle = needle_set.group(group_id).needle(row.variant, name)
            assert row.text[start:start + len(needle)] == needle and row.text.count(needle) == 1
        assert row.needle_starts[0] == row.needle_start
        before = counter.count([row.text[:row.needle_start].strip()])[0]
        assert row.depth == pytest.approx(before / row.n_tokens, abs=2 / row.n_tokens)
        assert row.n_tokens <= row.length and row.control_id == f"{row.group_id}:{CONTROL}:{row.length}"
    names = {name for g in needle_set.groups for name in g.characters}
    for row in grid[grid["variant"].isin([CONTROL, NEGATIVE])].itertuples():
        assert row.n_needles == 0 and not any(name in row.text for name in names)


def test_the_one_needle_grid_is_the_same_beside_several_needles(needle_set, books_dir, grid):
    alone = build_haystacks(needle_set, load_corpus(f"dir:{books_dir}"), [256, 1024], depths=4, variants=["onehop", "inverted"],
                            negatives=3)
    beside = grid[grid["n_needles"] != 3].reset_index(drop=True)
    pd.testing.assert_frame_equal(alone, beside)
    assert (alone.loc[~alone["variant"].isin([CONTROL, NEGATIVE]), "n_needles"] == 1).all()


@dataclass
class _MatrixScorer:
    name: str = "matrix"
    strategy: str = "full-text"
    windows_exact: bool = True
    normalizable: bool = False


def test_a_haystack_is_ranked_by_every_question_whose_needle_it_holds(needle_set, grid):
    rng = np.random.default_rng(3)
    values = rng.integers(0, 20, size=(len(needle_set.groups), len(grid))).astype(float)  # integers: ties happen
    zeros = np.zeros(values.shape, dtype=np.int64)
    questions = [g.question for g in needle_set.groups]
    scored = HaystackScores(_MatrixScorer(), grid, {"question": questions}, {"question": Scores(values, zeros, zeros, zeros)},
                            grid["text"].str.len().to_numpy())
    ranks = retrieval_rows(scored, needle_set)
    three = ranks[ranks["n_needles"] == 3]
    assert three.groupby("haystack_id").size().eq(3).all()
    assert len(three) == 3 * (grid["n_needles"] == 3).sum()
    assert three.groupby("haystack_id")["own_question"].sum().eq(1).all()
    # recomputed by hand: rank = 1 + the pool's candidates scoring at least as high (pessimistic on ties)
    group_row = {g.id: i for i, g in enumerate(needle_set.groups)}
    column = {haystack_id: i for i, haystack_id in enumerate(grid["id"])}
    free = grid["variant"].isin([CONTROL, NEGATIVE]).to_numpy()
    for row in three.itertuples():
        haystack = grid.iloc[column[row.haystack_id]]
        assert row.group_id in haystack["needle_groups"] and row.own_question == (row.group_id == haystack["group_id"])
        pool = np.flatnonzero(free & (grid["length"] == row.length).to_numpy())
        scores = values[group_row[row.group_id]]
        assert row.score == scores[column[row.haystack_id]]
        assert row.rank == 1 + int((scores[pool] >= row.score).sum())
        assert row.n_candidates == pool.size + 1
    # the similarity table: one row per question asked; only the own question's row has a control
    table = similarity_rows(scored, needle_set)
    asked = table[table["n_needles"] == 3]
    assert len(asked) == len(three) and asked["control_id"].isna().eq(~asked["own_question"]).all()


def test_the_sweep_reports_several_needles(needle_set, books_dir, tmp_path):
    out = tmp_path / "run"
    groups = ",".join(g.id for g in needle_set.groups)
    result = CliRunner().invoke(app, ["nolima", "--embedder", "bm25", "--groups", groups, "--corpus", f"dir:{books_dir}",
                                      "--lengths", "256,512", "--depths", "3", "--negatives", "3", "--needles-per-haystack", "1,3",
                                      "--variants", "onehop", "--n-bootstrap", "50", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    metrics = pd.read_csv(out / "metrics.csv")
    assert {(1, True), (3, True), (3, False)} <= set(zip(metrics["n_needles"], metrics["own_question"]))
    report = (out / "report.md").read_text()
    assert "## Several needles" in report and "3 needles, other questions" in report


@pytest.mark.parametrize("args, message", [
    (["--needles-per-haystack", "1,3", "--n-distractors", "1"], "error: --needles-per-haystack above 1 goes with --n-distractors 0"),
    (["--needles-per-haystack", "0"], "error: needles-per-haystack count 0 is invalid: counts are whole numbers >= 1"),
    (["--needles-per-haystack", "3", "--groups", "loc-dresden,loc-peru"], "error: --needles-per-haystack 3 needs at least 3 groups"),
])
def test_bad_needle_counts_are_one_line(args, message, tmp_path):
    result = CliRunner().invoke(app, ["haystacks", "build", "--out", str(tmp_path / "h.parquet"), *args])
    assert result.exit_code != 0 and message in result.output, result.output
    assert not (tmp_path / "h.parquet").exists()

"""Distractors in haystacks: where they go, the controls and negatives that
carry them, the tables split by their count, and the CLI's grid options."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.corpus import load_corpus
from embedeval.defaults import DEFAULT_NEEDLES
from embedeval.embedders.tokens import load_token_counter
from embedeval.grid import HaystackGrid
from embedeval.haystacks import DISTRACTOR_ZONE, build_haystacks
from embedeval.labels import CONTROL, NEGATIVE
from embedeval.messages import EmbedevalWarning
from embedeval.needles import load_needle_set
from embedeval.similarity import HaystackScores, retrieval_rows
from embedeval.strategies.scoring import Scores

GROUPS = ["loc-dresden", "loc-peru"]
# Distractors written for these tests: each shares its question's keyword and names no character.
DISTRACTORS = {
    "loc-dresden": ["The old guidebook praised Dresden for its bridges and its bread.",
                    "Nobody in the village had ever been as far as Dresden, they said.",
                    "A letter from Dresden arrived late in the winter, unopened.",
                    "Maps of Dresden hung beside the door of the inn."],
    "loc-peru": ["The merchant spoke of silver brought from Peru by ship.",
                 "A painting of Peru hung crooked in the hall.",
                 "Peru was only a word on a crate in the cellar.",
                 "The sailors argued about the coast of Peru all night."],
}


@pytest.fixture(scope="module")
def needle_file(tmp_path_factory):
    data = json.loads(DEFAULT_NEEDLES.read_text())
    data["groups"] = [dict(g, distractors=DISTRACTORS[g["id"]]) for g in data["groups"] if g["id"] in GROUPS]
    path = tmp_path_factory.mktemp("needles") / "with-distractors.json"
    path.write_text(json.dumps(data))
    return path


@pytest.fixture(scope="module")
def grid(needle_file, books_dir):
    needle_set = load_needle_set(needle_file)
    frame = build_haystacks(needle_set, HaystackGrid(lengths=[512, 1024], depths=4, variants=["onehop", "inverted"], negatives=3, n_distractors=[0,
            2]), load_corpus(f"dir:{books_dir}"))
    return needle_set, frame


def _strip(text: str, spans) -> str:
    """``text`` without the (start, end) spans and the space after each."""
    for start, end in sorted(spans, reverse=True):
        text = text[:start] + text[end + 1:]
    return text


def _assert_outside_zone(row, counter) -> None:
    """Each distractor of ``row`` more than 0.2 of the haystack's tokens away from its needle,
    counted in the haystack's own text (whatever lies between included)."""
    decoys = DISTRACTORS[row.group_id][:row.n_distractors]
    for start, decoy in zip(row.distractor_starts, decoys, strict=True):
        lo, hi = sorted([(start, start + len(decoy)), (row.needle_start, row.needle_end)])
        between = row.text[lo[1]:hi[0]].strip()
        assert counter.count([between])[0] > DISTRACTOR_ZONE * row.n_tokens, (row.id, start)


def test_each_needle_haystack_holds_k_distractors_outside_the_needle_zone(grid):
    needle_set, frame = grid
    counter = load_token_counter()
    positives = frame[~frame["variant"].isin([CONTROL, NEGATIVE])]
    assert set(positives["n_distractors"]) == {0, 2}
    for row in positives.itertuples():
        decoys = DISTRACTORS[row.group_id][:row.n_distractors]
        assert len(row.distractor_starts) == row.n_distractors
        assert [row.text[s:s + len(d)] for s, d in zip(row.distractor_starts, decoys, strict=True)] == decoys
        assert all(row.text.count(d) == 1 for d in decoys)
        assert not any(d in row.text for d in DISTRACTORS[row.group_id][row.n_distractors:])
        _assert_outside_zone(row, counter)
        assert row.n_tokens <= row.length
        # depth counts every token before the needle, distractors included
        assert row.depth == pytest.approx(counter.count([row.text[:row.needle_start].strip()])[0] / row.n_tokens, abs=2 / row.n_tokens)


@pytest.mark.slow
def test_short_haystacks_keep_the_zone_where_they_can_and_refuse_what_cannot_hold_the_distractors(needle_file, books_dir):
    from embedeval.errors import ConfigError

    needle_set = load_needle_set(needle_file)
    corpus = load_corpus(f"dir:{books_dir}")
    counter = load_token_counter()
    frame = build_haystacks(needle_set, HaystackGrid(lengths=[160, 256], depths=5, variants=["onehop"], negatives=1, n_distractors=[4]), corpus)
    positives = frame[frame["variant"] == "onehop"]
    assert (positives["distractors_in_zone"] == 0).all()
    for row in positives.itertuples():
        assert len(row.distractor_starts) == 4
        _assert_outside_zone(row, counter)
    # 100 tokens: the needle and 4 distractors leave few boundaries; what cannot keep the zone is placed and counted
    with pytest.warns(EmbedevalWarning) as caught:
        frame = build_haystacks(needle_set, HaystackGrid(lengths=[100, 256], depths=5, variants=["onehop"], negatives=1, n_distractors=[0, 4]), corpus)
    short = frame[(frame["variant"] == "onehop") & (frame["length"] == 100) & (frame["n_distractors"] == 4)]
    assert len(short) and (short["n_tokens"] <= 100).all()
    assert all(len(starts) == 4 for starts in short["distractor_starts"])
    missed = int((frame.loc[frame["variant"] == "onehop", "distractors_in_zone"] > 0).sum())
    assert missed > 0 and set(short["distractors_in_zone"]) <= {0, 4}
    assert str(caught.pop(EmbedevalWarning).message).startswith(f"{missed} of {len(short) + 5 * 2} needle haystacks with distractors have no sentence boundary")
    for row in short[short["distractors_in_zone"] == 0].itertuples():
        _assert_outside_zone(row, counter)
    taken = max(counter.count([g.needle("onehop", c) for g in needle_set.groups for c in g.characters]))
    with pytest.raises(ConfigError, match="haystacks of 40 tokens are too short for group 'loc-dresden': its needle and 4 distractor"):
        build_haystacks(needle_set, HaystackGrid(lengths=[40, 256], depths=5, variants=["onehop"], negatives=1, n_distractors=[0, 4]), corpus)
    assert taken < 40 < taken + sum(counter.count(DISTRACTORS["loc-dresden"]))


def test_controls_hold_the_same_distractors_at_the_same_places(grid):
    _, frame = grid
    by_id = frame.set_index("id")
    positives = frame[~frame["variant"].isin([CONTROL, NEGATIVE]) & (frame["n_distractors"] > 0)]
    assert len(positives) == 2 * 2 * 4 * 2  # groups x lengths x depths x variants
    assert positives["control_id"].is_unique
    for row in positives.itertuples():
        control = by_id.loc[row.control_id]
        assert control["variant"] == CONTROL and control["n_distractors"] == row.n_distractors
        assert control["distractors_of"] == row.group_id
        without_needle = _strip(row.text, [(row.needle_start, row.needle_end)])
        # the group lists more distractors than a haystack holds: its first n_distractors are the ones placed
        for mine, theirs, decoy in zip(row.distractor_starts, control["distractor_starts"], DISTRACTORS[row.group_id], strict=False):
            shift = (row.needle_end - row.needle_start + 1) if row.needle_start < mine else 0
            assert theirs == mine - shift
            assert control["text"][:theirs] == without_needle[:theirs]
            assert control["text"][theirs:theirs + len(decoy)] == decoy
    plain = frame[~frame["variant"].isin([CONTROL, NEGATIVE]) & (frame["n_distractors"] == 0)]
    assert (plain["control_id"] == plain["group_id"] + ":control:" + plain["length"].astype(str)).all()


def test_needle_free_haystacks_never_hold_a_needle(grid):
    needle_set, frame = grid
    needles = {g.needle(v, c) for g in needle_set.groups for v in g.needles for c in g.characters}
    free = frame[frame["variant"].isin([CONTROL, NEGATIVE])]
    assert len(free) > 0
    for text in free["text"]:
        assert not any(n in text for n in needles)
        assert not any(c in text for g in needle_set.groups for c in g.characters)


def test_negatives_carry_each_questions_distractors(grid):
    _, frame = grid
    negatives = frame[frame["variant"] == NEGATIVE]
    assert len(negatives[negatives["n_distractors"] == 0]) == 2 * 3  # lengths x negatives
    with_decoys = negatives[negatives["n_distractors"] == 2]
    assert len(with_decoys) == 2 * 3 * 2  # lengths x negatives x groups
    for row in with_decoys.itertuples():
        assert all(d in row.text for d in DISTRACTORS[row.distractors_of][:2])
        plain = negatives[(negatives["n_distractors"] == 0) & (negatives["length"] == row.length)
                          & (negatives["id"] == row.id.split(f":{row.distractors_of}")[0])].iloc[0]
        # the first two of the group's distractors are the ones placed
        assert _strip(row.text, [(s, s + len(d)) for s, d in zip(row.distractor_starts, DISTRACTORS[row.distractors_of], strict=False)])[:200] \
            == plain["text"][:200]  # the same filler


@dataclass
class _DecoyCounter:
    """A scorer whose score for (question, text) is how many of the question's distractors the
    text holds: a needle haystack ties with exactly the candidates that hold its decoys too."""

    decoys: dict
    name: str = "decoy-counter"
    strategy: str = "full-text"
    windows_exact: bool = True
    normalizable: bool = False


def test_a_question_is_ranked_among_candidates_with_its_own_distractors(grid):
    needle_set, frame = grid
    questions = [g.question for g in needle_set.groups]
    values = np.array([[sum(d in text for d in DISTRACTORS[g.id]) for text in frame["text"]] for g in needle_set.groups], float)
    zeros = np.zeros(values.shape, dtype=np.int64)
    scored = HaystackScores(_DecoyCounter(DISTRACTORS), frame, {"question": questions},
                            {"question": Scores(values, zeros, zeros, zeros)}, frame["text"].str.len().to_numpy())
    ranks = retrieval_rows(scored, needle_set)
    with_decoys = ranks[ranks["n_distractors"] == 2]
    assert len(with_decoys) == 2 * 2 * 4 * 2
    # pool: the question's 3 negatives holding its 2 distractors and the haystack's own control
    assert (with_decoys["n_candidates"] == 3 + 1 + 1).all()
    assert (with_decoys["ties"] == with_decoys["n_candidates"] - 1).all()
    plain = ranks[ranks["n_distractors"] == 0]
    assert (plain["n_candidates"] == 3 + 2 + 1).all()  # negatives + every group's control
    assert (plain["ties"] == plain["n_candidates"] - 1).all()  # nothing holds a decoy at K = 0
    # the all pool: every needle-free haystack of the length and K (every group's negatives and the
    # controls of every needle haystack), and the other group's needle haystack at the same variant and depth
    everything = retrieval_rows(scored, needle_set, pool="all")
    with_decoys = everything[everything["n_distractors"] == 2]
    assert (with_decoys["n_candidates"] == 2 * 3 + 2 * 4 * 2 + 1 + 1).all()
    # ties: the candidates holding the question's decoys (its 3 negatives, its group's 8 controls), and no more
    assert (with_decoys["ties"] == 3 + 4 * 2).all()
    plain = everything[everything["n_distractors"] == 0]
    assert (plain["n_candidates"] == 3 + 2 + 1 + 1).all() and (plain["ties"] == plain["n_candidates"] - 1).all()


@pytest.mark.slow
def test_haystacks_build_and_nolima_build_identical_haystacks(needle_file, books_dir, tmp_path):
    grid_args = ["--needles", str(needle_file), "--corpus", f"dir:{books_dir}", "--lengths", "256", "--depths", "3",
                 "--negatives", "2", "--n-distractors", "0,1", "--seed", "7", "--variants", "onehop", "-q"]
    built = CliRunner().invoke(app, ["haystacks", "build", "--out", str(tmp_path / "h.parquet"), *grid_args])
    assert built.exit_code == 0, built.output
    ran = CliRunner().invoke(app, ["nolima", "--embedder", "bm25", "--out", str(tmp_path / "run"), *grid_args])
    assert ran.exit_code == 0, ran.output
    a, b = pd.read_parquet(tmp_path / "h.parquet"), pd.read_parquet(tmp_path / "run" / "haystacks.parquet")
    # groups x (K=0: depths + a control; K=1: depths + a control each) + negatives x (plain + one per group)
    assert len(a) == 2 * (3 + 1 + 3 + 3) + 2 * (1 + 2)
    pd.testing.assert_frame_equal(a, b)
    metrics = pd.read_csv(tmp_path / "run" / "metrics.csv")
    assert set(metrics["n_distractors"]) == {0, 1}
    report = (tmp_path / "run" / "report.md").read_text()
    assert "## Distractors" in report and "1 distractors" in report


@pytest.mark.slow
def test_similarity_rows_pair_each_needle_haystack_with_its_own_control(needle_file, books_dir, tmp_path):
    from embedeval.aggregate import pair_with_controls
    from embedeval.experiments.nolima import NolimaConfig, run_nolima
    from embedeval.grid import HaystackGrid

    config = NolimaConfig(needles=str(needle_file), out=str(tmp_path / "run"), n_bootstrap=50, grid=HaystackGrid(corpus=f"dir:{books_dir}",
            lengths=[256, 512], depths=3, variants=["onehop"], negatives=3, n_distractors=[0, 2]))
    result = run_nolima(config, progress=False, cache_dir=tmp_path / "cache")
    table = result.similarities
    assert set(table["n_distractors"]) == {0, 2}
    pairs = pair_with_controls(table)
    assert len(pairs) == len(table[table["variant"] != CONTROL])
    controls = table[table["variant"] == CONTROL].set_index("haystack_id")["sim_qh"]
    np.testing.assert_allclose(pairs["neg"], controls.loc[pairs["control_id"]].to_numpy())
    ratio = result.metrics[(result.metrics["metric"] == "comparative_ratio") & (result.metrics["category"] == "all")
                           & (result.metrics["depth_bucket"] == "all")]
    for (length, count), cell in pairs.groupby(["length", "n_distractors"]):
        expected = np.mean((cell["sim_qh"] > cell["neg"]) + 0.5 * (cell["sim_qh"] == cell["neg"]))
        got = ratio[(ratio["length"] == length) & (ratio["n_distractors"] == count)]["value"]
        assert got.tolist() == pytest.approx([expected])
    assert set(result.retrieval["n_distractors"]) == {0, 2}


def test_distractors_file_replaces_the_needle_files(needle_file, tmp_path):
    from embedeval.needles import grid_needle_set

    table = tmp_path / "decoys.csv"
    pd.DataFrame({"group_id": ["loc-peru"] * 2, "distractor": ["Peru, said the map.", "Peru again."]}).to_csv(table, index=False)
    needle_set = grid_needle_set(needle_file, distractor_counts=[2], distractors_file=table)
    assert needle_set.group("loc-peru").distractor_texts == ("Peru, said the map.", "Peru again.")
    assert needle_set.group("loc-dresden").distractor_texts == tuple(DISTRACTORS["loc-dresden"])
    as_json = tmp_path / "decoys.json"
    as_json.write_text(json.dumps({"loc-dresden": ["Dresden, once."]}))
    assert grid_needle_set(needle_file, distractor_counts=[1], distractors_file=as_json).group("loc-dresden").distractor_texts == ("Dresden, once.",)


@pytest.mark.parametrize("extra, files, says", [
    (["--n-distractors", "5"], {}, "5 distractors per haystack asked for, but needle set"),
    (["--n-distractors", "-1"], {}, "distractor count -1 is invalid"),
    (["--n-distractors", "1,1"], {}, "a distractor count is given more than once"),
    (["--n-distractors", "one"], {}, "--n-distractors takes comma-separated whole numbers"),
    (["--distractors-file", "d.csv"], {"d.csv": "group,distractor\nloc-peru,Peru.\n"}, "d.csv lacks the column(s) group_id"),
    (["--distractors-file", "d.csv"], {"d.csv": "group_id,distractor\nloc-nowhere,Peru.\n"},
            "distractors file d.csv: group 'loc-nowhere' is not in needle set"),
    (["--distractors-file", "d.csv"], {"d.csv": "group_id,distractor\nloc-peru,\n"}, "row 1: empty distractor"),
    (["--distractors-file", "d.json"], {"d.json": '{"loc-peru": ["{1} in Peru"]}'}, "has a placeholder {1}"),
    (["--n-distractors", "1", "--distractors-file", "d.json"], {"d.json": '{"loc-peru": ["Yuki saw Peru."]}'},
     "a distractor of group 'loc-peru' names a character (Yuki)"),
    (["--distractors-file", "d.txt"], {"d.txt": "x"}, "must end in .json, .csv, .jsonl or .parquet"),
    (["--distractors-file", "none.csv"], {}, "none.csv does not exist"),
])
def test_bad_distractor_settings_are_one_line(needle_file, tmp_path, monkeypatch, isolated_cache, extra, files, says):
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    for command in (["nolima", "--out", "run"], ["haystacks", "build", "--out", "h.parquet"]):
        result = CliRunner().invoke(app, [*command, "--needles", str(needle_file), "-q", *extra])
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 1, result.output
        assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], result.output
        assert not (tmp_path / "run").exists() and not (tmp_path / "h.parquet").exists()
    assert not (isolated_cache / "embeddings.sqlite").exists()


def test_distractor_question_reads_a_distractors_file(needle_file, tmp_path, minilm):
    table = tmp_path / "decoys.jsonl"
    table.write_text('{"group_id": "loc-peru", "distractor": "Peru, said the map."}\n')
    out = tmp_path / "dq.csv"
    result = CliRunner().invoke(app, ["similarity", "distractor-question", "--needles", str(needle_file),
                                      "--distractors-file", str(table), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    rows = pd.read_csv(out)
    assert rows.groupby("group_id").size().to_dict() == {"loc-dresden": 4, "loc-peru": 1}
    peru = rows[rows["group_id"] == "loc-peru"].iloc[0]
    assert peru["distractor"] == "Peru, said the map."
    q = minilm.model.encode_query(["Which character has been to Peru?"], normalize_embeddings=True)
    d = minilm.model.encode_document(["Peru, said the map."], normalize_embeddings=True)
    assert peru["st:all-MiniLM-L6-v2"] == pytest.approx(float(q[0] @ d[0]), abs=1e-5)


def test_haystacks_show_reads_files_made_before_distractors(grid, tmp_path):
    from embedeval.schema import LATER_HAYSTACK_COLUMNS

    _, frame = grid
    old = tmp_path / "old.parquet"
    frame.drop(columns=list(LATER_HAYSTACK_COLUMNS)).to_parquet(old)
    row = frame[frame["variant"] == "onehop"].iloc[0]
    result = CliRunner().invoke(app, ["haystacks", "show", str(old), "--id", row["id"]])
    assert result.exit_code == 0, result.output
    assert f"[[{row['text'][row['needle_start']:row['needle_end']]}]]" in result.output


def _own_control_table(needle_sims: dict, control_sims: dict) -> pd.DataFrame:
    """A similarity table by hand: per (group, depth) a needle haystack with its own control
    (1 distractor each, as a K-distractor haystack has), scores as given."""
    rows = []
    for (group, depth), sim in needle_sims.items():
        control = f"{group}:control:{depth}"
        common = {"embedder": "m", "strategy": "truncate", "query_form": "question", "group_id": group, "category": "c",
                  "length": 128, "n_distractors": 1, "distractors_in_zone": 0, "n_needles": 1, "own_question": True,
                  "target_depth": depth, "sim_qn": 1.0, "normalized_by": "standard", "n_tokens": 128, "truncated": False,
                  "windows_exact": True, "best_chunk": 0}
        rows.append({**common, "haystack_id": f"{group}@{depth}", "control_id": control, "variant": "onehop", "depth": depth,
                     "sim_qh": sim, "normalized": sim, "needle_visible": True, "chunk_has_needle": True})
        rows.append({**common, "haystack_id": control, "control_id": None, "variant": CONTROL, "depth": np.nan,
                     "sim_qh": control_sims[(group, depth)], "normalized": np.nan, "needle_visible": pd.NA,
                     "chunk_has_needle": pd.NA})
    return pd.DataFrame(rows)


def test_each_depth_bucket_compares_its_haystacks_with_their_own_controls():
    from embedeval.aggregate import nolima_metrics

    groups = [f"g{i}" for i in range(4)]
    # beginning (depth 0): the needle lifts each haystack well above its own control;
    # end (depth 1): the needle is past the window, so each haystack equals its own control
    needle = {**{(g, 0.0): 0.6 + 0.01 * i for i, g in enumerate(groups)}, **{(g, 1.0): 0.2 + 0.01 * i for i, g in enumerate(groups)}}
    control = {**{(g, 0.0): 0.1 + 0.01 * i for i, g in enumerate(groups)}, **{(g, 1.0): 0.2 + 0.01 * i for i, g in enumerate(groups)}}
    metrics = nolima_metrics(_own_control_table(needle, control), n_resamples=20)
    auc = metrics[(metrics["metric"] == "auc") & (metrics["category"] == "all")].set_index("depth_bucket")
    # own controls: the end's four needle haystacks tie their four controls; every pair compared -> AUC 0.5 exactly
    end_pos, end_neg = np.array([needle[(g, 1.0)] for g in groups]), np.array([control[(g, 1.0)] for g in groups])
    expected_end = float(np.mean((end_pos[:, None] > end_neg) + 0.5 * (end_pos[:, None] == end_neg)))
    assert auc.loc["end", "value"] == pytest.approx(expected_end) and auc.loc["end", "n"] == 8  # 4 haystacks, 4 controls
    assert auc.loc["beginning", "value"] == pytest.approx(1.0) and auc.loc["beginning", "n"] == 8
    # (before: every control of the cell, the beginning's low ones included, lifted the end to 0.75 with n = 12)
    assert auc.loc["all", "n"] == 16


def test_the_recall_figure_draws_each_series_own_chance_level(tmp_path, monkeypatch):
    from embedeval.report import figures
    from embedeval.report.tables import recall_chance_table, scorer_view

    # rank rows of two pools: 17 candidates without distractors (every control and the negatives),
    # 12 with one distractor (the question's negatives holding it and its own control)
    rows = [{"embedder": "m", "strategy": "truncate", "query_form": "question", "variant": "onehop", "n_distractors": count,
             "n_needles": 1, "own_question": True, "length": length, "n_candidates": n}
            for count, n in ((0, 17), (1, 12)) for length in (128, 256) for _ in range(3)]
    chance = scorer_view(recall_chance_table(pd.DataFrame(rows)))
    at10 = chance[chance["k"] == 10].set_index("embedder")["chance"]
    assert at10["m · 0 distractors"].tolist() == pytest.approx([10 / 17] * 2)
    assert at10["m · 1 distractors"].tolist() == pytest.approx([10 / 12] * 2)
    metrics = pd.DataFrame([{"embedder": e, "query_form": "question", "variant": "onehop", "category": "all", "depth_bucket": "all",
                             "metric": f"recall@{k}", "length": length, "value": 0.5}
                            for e in at10.index.unique() for k in (1, 5, 10) for length in (128, 256)])
    drawn = {}
    monkeypatch.setattr(figures, "save_figure", lambda fig, path, laid_out=False: drawn.update(
        {line.get_gid(): line.get_ydata().tolist() for ax in fig.axes for line in ax.get_lines() if line.get_gid()}))
    figures.recall_figure(metrics, tmp_path / "recall.png", chance)
    assert drawn["chance recall@10 m · 0 distractors"] == pytest.approx([10 / 17] * 2)
    assert drawn["chance recall@10 m · 1 distractors"] == pytest.approx([10 / 12] * 2)  # not 10/17: its own pool
    assert drawn["chance recall@1 m · 1 distractors"] == pytest.approx([1 / 12] * 2)

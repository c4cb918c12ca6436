"""Which to use, at every length: the decision table on hand-made rank tables,
worked by hand and by an independent bootstrap loop; its costs; ``--price``; and runs of two local
models and of a scripted API server whose decision.csv and "Which to use" agree with the tables."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from embedeval.aggregate import retrieval_metrics
from embedeval.breaks import BreakRule, break_points
from embedeval.cli import app
from embedeval.decision import (
    about_the_same_time,
    bracketing_lengths,
    decision_table,
    dominates,
    length_summary,
    reading_costs,
    reading_mode,
    same_readings,
    timing_table,
    vectors_per_document,
    with_earlier_speeds,
)
from embedeval.errors import InputError
from embedeval.metrics.bootstrap import cluster_resamples
from embedeval.run import read_breaks, read_decision
from embedeval.schema import DECISION_COLUMNS, TIMING_COLUMNS

from test_breaks import _rank_rows

N = 25  # candidates per ranking: k/n = 5/25 = 0.2 at recall@5


def dominated_recommendations(decision: pd.DataFrame) -> pd.DataFrame:
    """The rows of a decision table recommended (``best``) at their length although another
    series of the table dominates them (:func:`~embedeval.decision.dominates`: at least as good at
    every length, better at one), with that series (``by_embedder``, ``by_strategy``): empty for a
    table made by :func:`~embedeval.decision.decision_table`. A series that is the same reading as
    the recommended one at its length (``same_as``) is not another reading there."""
    wide = decision.pivot_table(index=["embedder", "strategy"], columns="length", values="recall", aggfunc="first")
    same = decision.set_index(["embedder", "strategy", "length"])["same_as"] if "same_as" in decision.columns else pd.Series(dtype=str)
    found = []
    for row in decision[decision["best"].astype(bool)].itertuples():
        mine = wide.loc[(row.embedder, row.strategy)].to_numpy(float)
        for (embedder, strategy), other in wide.iterrows():
            if embedder == row.embedder and same.get((embedder, strategy, row.length)) == row.strategy:
                continue
            if (embedder, strategy) != (row.embedder, row.strategy) and dominates(other.to_numpy(float), mine):
                found.append({"length": row.length, "embedder": row.embedder, "strategy": row.strategy,
                              "by_embedder": embedder, "by_strategy": strategy})
    return pd.DataFrame(found, columns=["length", "embedder", "strategy", "by_embedder", "by_strategy"])


def _ranks(series: dict[tuple[str, str], dict[int, list[list[int]]]], n_candidates: int = N,
           scores: dict[tuple[str, str], float] | None = None) -> pd.DataFrame:
    """A rank table of several series from ranks[length] = per group, its depths' ranks; every
    needle haystack scored 0, plus the series' offset in ``scores``."""
    frames = []
    for (embedder, strategy), by_length in series.items():
        ranks = {length: np.array(groups) for length, groups in by_length.items()}
        frames.append(_rank_rows(ranks, n_candidates).assign(embedder=embedder, strategy=strategy,
                                                             score=(scores or {}).get((embedder, strategy), 0.0)))
    return pd.concat(frames, ignore_index=True)


def _cc(hit: float) -> float:
    """Chance-corrected recall@5 of one ranking among N: (hit - 5/N) / (1 - 5/N)."""
    return (hit - 5 / N) / (1 - 5 / N)


# --- vectors per document ------------------------------------------------------------------------------------------------
def test_vectors_per_document_is_one_or_one_per_chunk():
    assert vectors_per_document("chunks-max@128", 1000) == 8  # ceil(1000 / 128)
    assert [vectors_per_document("late-chunking@256", n) for n in (1, 256, 257, 2048)] == [1, 1, 2, 8]
    for strategy in ("truncate", "windows-mean", "extend-gp@4096", "rope-ntk@8192+logscale", "full-text"):
        assert vectors_per_document(strategy, 8192) == 1
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="whole number of tokens"):
            vectors_per_document("truncate", bad)
    with pytest.raises(ValueError, match="names no chunk size"):
        vectors_per_document("chunks-max@x", 100)


# --- the statistics, by hand ---------------------------------------------------------------------------------------------
#: Two readings of three groups (two depths each) at two lengths: rank 1 finds the needle, 20 misses it.
HAND = {("m", "truncate"): {128: [[1, 1], [1, 20], [20, 20]], 512: [[20, 20], [1, 20], [20, 20]]},
        ("m", "windows-mean"): {128: [[1, 1], [1, 20], [20, 20]], 512: [[1, 20], [1, 1], [20, 20]]}}


@pytest.mark.slow
def test_recall_and_its_interval_by_hand_and_by_an_independent_bootstrap_loop():
    retrieval = _ranks(HAND)
    table = decision_table(retrieval, n_resamples=400, seed=3)
    assert list(table.columns) == DECISION_COLUMNS and len(table) == 4
    row = table.set_index(["length", "strategy"])
    # 128: 3 of 6 rankings find the needle in both: recall = mean of (hit - 0.2) / 0.8 = (3 x 1 + 3 x -0.25) / 6 = 0.375
    assert row.loc[(128, "truncate"), "recall"] == pytest.approx(0.375) == pytest.approx(np.mean([_cc(1)] * 3 + [_cc(0)] * 3))
    assert row.loc[(512, "truncate"), "recall"] == pytest.approx((_cc(1) + 5 * _cc(0)) / 6)
    assert row.loc[(512, "windows-mean"), "recall"] == pytest.approx((3 * _cc(1) + 3 * _cc(0)) / 6)
    # the bootstrap by hand: each resample's rows are those of the groups it drew, every series and length alike
    retrieval["cc"] = (retrieval["recall@5"] - 0.2) / 0.8
    groups = sorted(retrieval["group_id"].unique())
    draws, _ = cluster_resamples(len(groups), 400, 3)
    means = {key: [] for key in [(512, "truncate"), (512, "windows-mean")]}
    for draw in draws:
        sample = pd.concat([retrieval[retrieval["group_id"] == groups[g]] for g in draw])
        for length, strategy in means:
            means[(length, strategy)].append(sample[(sample["length"] == length) & (sample["strategy"] == strategy)]["cc"].mean())
    for key, values in means.items():
        assert (row.loc[key, "recall_lo"], row.loc[key, "recall_hi"]) == pytest.approx(tuple(np.quantile(values, [0.025, 0.975])))
    paired = np.array(means[(512, "truncate")]) - np.array(means[(512, "windows-mean")])
    assert row.loc[(512, "windows-mean"), "best"] and row.loc[(512, "windows-mean"), "diff_to_best"] == 0.0
    assert row.loc[(512, "truncate"), "diff_to_best"] == pytest.approx(-2 * (_cc(1) - _cc(0)) / 6)  # two hits fewer of 6
    assert (row.loc[(512, "truncate"), "diff_lo"], row.loc[(512, "truncate"), "diff_hi"]) == pytest.approx(
        tuple(np.quantile(paired, [0.025, 0.975])))
    assert row.loc[(512, "truncate"), "tied_with_best"] == (np.quantile(paired, 0.025) <= 0 <= np.quantile(paired, 0.975))
    assert (row["n_groups"] == 3).all() and (row["vectors_per_document"] == 1).all()


def test_equal_readings_recommend_the_one_no_other_beats_at_every_length():
    """At 128 both readings rank alike but score otherwise (other vectors, the same recall):
    windows-mean is named, for truncate never beats it and falls behind at 512; the two cannot be
    told apart there (no difference on any resample)."""
    table = decision_table(_ranks(HAND, scores={("m", "windows-mean"): 1e-3}), n_resamples=200).set_index(["length", "strategy"])
    assert (table["same_as"] == table.index.get_level_values("strategy")).all()  # two readings at every length
    assert table.loc[(128, "windows-mean"), "best"] and not table.loc[(128, "truncate"), "best"]
    assert tuple(table.loc[(128, "truncate"), ["diff_to_best", "diff_lo", "diff_hi"]]) == (0.0, 0.0, 0.0)
    assert table.loc[(128, "truncate"), "tied_with_best"]
    assert dominates([0.375, 0.125], [0.375, -0.0417]) and not dominates([0.375, 0.1], [0.375, 0.1])
    assert not dominates([0.5, 0.1], [0.4, 0.2]) and dominates([np.nan, 0.3], [0.9, 0.2])  # lengths both have
    assert dominated_recommendations(table.reset_index()).empty


def test_equal_everywhere_the_cheaper_is_named():
    same = {("a", "truncate"): HAND[("m", "truncate")], ("b", "truncate"): HAND[("m", "truncate")]}
    readings = [{"embedder": e, "strategy": "truncate", "length": np.array([128, 512]), "document_tokens": np.array([128, 512]),
                 "tokens_read": np.array([128, 254]), "seconds": seconds, "tokens": 382} for e, seconds in (("a", 2.0), ("b", 1.0))]
    table = decision_table(_ranks(same), n_resamples=50, timings=timing_table(readings))
    assert set(table[table["best"]]["embedder"]) == {"b"}  # the same recall at every length, half the seconds
    priced = decision_table(_ranks(same), n_resamples=50, timings=timing_table(readings), prices={"a": 0.01, "b": 0.02})
    assert set(priced[priced["best"]]["embedder"]) == {"a"}  # where both have a price, the price decides


def test_one_group_one_series_and_nothing_to_read():
    one_group = {("m", "truncate"): {128: [[1, 20]], 256: [[20, 20]]}, ("m", "windows-mean"): {128: [[20, 20]], 256: [[1, 1]]}}
    table = decision_table(_ranks(one_group), n_resamples=100)
    assert table["recall_lo"].isna().all() and table.loc[~table["best"], "diff_lo"].isna().all()  # no interval from one group
    assert table["tied_with_best"].all()  # so nothing can be told apart
    assert table["recall"].notna().all() and table["best"].sum() == 2
    alone = decision_table(_ranks({("m", "truncate"): HAND[("m", "truncate")]}), n_resamples=100)
    assert alone["best"].all() and (alone["diff_to_best"] == 0).all() and alone["tied_with_best"].all()
    other_variant = _ranks(HAND).assign(variant="inverted", query_form="expanded-100")
    assert decision_table(other_variant).empty and list(decision_table(other_variant).columns) == DECISION_COLUMNS
    uncorrectable = decision_table(_ranks(HAND, n_candidates=5))  # k >= n: recall@5 says nothing
    assert uncorrectable.empty
    with pytest.raises(ValueError, match="lacks the column"):
        decision_table(_ranks(HAND).drop(columns="n_candidates"))
    with pytest.raises(ValueError, match="n_resamples"):
        decision_table(_ranks(HAND), n_resamples=0)
    with pytest.raises(ValueError, match="price of m"):
        decision_table(_ranks(HAND), prices={"m": -1.0})


def test_decision_csv_reads_back_with_or_without_rows(tmp_path):
    from embedeval.io import write_table

    table = decision_table(_ranks(HAND), n_resamples=50)
    write_table(table, tmp_path / "decision.csv")
    pd.testing.assert_frame_equal(read_decision(tmp_path / "decision.csv"), table, check_dtype=False)
    write_table(decision_table(_ranks(HAND, n_candidates=5)), tmp_path / "nothing.csv")  # nothing to decide: a header
    assert read_decision(tmp_path / "nothing.csv").empty
    pd.DataFrame({"length": [128]}).to_csv(tmp_path / "old.csv", index=False)
    with pytest.raises(InputError, match="lacks the column"):
        read_decision(tmp_path / "old.csv")



def test_an_edited_decision_csv_is_one_error_line_not_a_traceback(tmp_path):
    """share_read or needle_visible outside [0, 1] (before: "the needle in -50% of haystacks"), a
    reading twice at a length (before: a pandas traceback from the report's table, after its figures
    were drawn), a same_as naming no reading of the embedder at that length (before: "(same as
    windows-mean)" in a run that never read windows-mean): one line naming the file, line and column."""
    from embedeval.io import write_table

    table = decision_table(_ranks(HAND), n_resamples=50)
    table = table.assign(share_read=1.0, needle_visible=0.5)
    write_table(table, tmp_path / "decision.csv")
    assert len(read_decision(tmp_path / "decision.csv")) == len(table)
    edits = {"share_read": (3.5, r"line 3, column share_read: 3.5 is not a number from 0 to 1"),
             "needle_visible": (-0.5, r"line 3, column needle_visible: -0.5 is not a number from 0 to 1"),
             "same_as": ("late-chunking@128", r"line 3, column same_as: 'late-chunking@128' is not a reading of the same embedder")}
    for column, (value, message) in edits.items():
        edited = table.astype({column: object})
        edited.loc[1, column] = value
        write_table(edited, tmp_path / "edited.csv")
        with pytest.raises(InputError, match=message):
            read_decision(tmp_path / "edited.csv")
    write_table(pd.concat([table, table.iloc[[0]]], ignore_index=True), tmp_path / "edited.csv")
    with pytest.raises(InputError, match=rf"line {len(table) + 2}, column strategy: .* once per length"):
        read_decision(tmp_path / "edited.csv")
    for best in ([False, False, True, False], [True, True, True, False]):  # 128 names no reading; 128 names two
        write_table(table.assign(best=best), tmp_path / "edited.csv")  # before: StopIteration (none) or two readings named
        with pytest.raises(InputError, match=r"line 2, column best: .* is not the one reading named best at its length"):
            read_decision(tmp_path / "edited.csv")
    write_table(table.assign(length=table["length"].replace({512: 100000})), tmp_path / "edited.csv")  # "at 100,000 tokens"
    assert len(read_decision(tmp_path / "edited.csv")) == len(table)
    with pytest.raises(InputError, match=r"line 4, column length: 100000 is not a length of the run"):
        read_decision(tmp_path / "edited.csv", [128, 512])
    write_table(table.assign(share_read=np.nan, needle_visible=np.nan), tmp_path / "unmeasured.csv")  # empty: not measured
    assert read_decision(tmp_path / "unmeasured.csv")["share_read"].isna().all()

def test_the_recall_is_breaks_csv_s_best_value():
    retrieval = _ranks({("m", "truncate"): {128: [[1, 1], [1, 20], [1, 1], [20, 1]], 256: [[1, 20], [20, 20], [1, 1], [20, 20]],
                                            512: [[20, 20], [20, 20], [1, 20], [20, 20]]}})
    breaks = break_points(retrieval_metrics(retrieval, n_resamples=20), retrieval, n_resamples=100)
    table = decision_table(retrieval, n_resamples=100)
    best = breaks.iloc[0]
    assert table.set_index("length").loc[int(best["best_length"]), "recall"] == pytest.approx(best["best_value"])
    table_k1 = decision_table(retrieval, BreakRule(k=1), n_resamples=100)  # the rule's k
    assert table_k1.set_index("length").loc[128, "recall"] == pytest.approx((6 / 8 - 1 / N) / (1 - 1 / N))


# --- costs ---------------------------------------------------------------------------------------------------------------
def test_timings_and_costs_by_hand():
    lengths = np.array([128, 128, 2048, 2048])
    documents = np.array([128, 120, 2048, 2000])
    readings = [
        {"embedder": "m", "strategy": "truncate", "length": lengths, "document_tokens": documents,
         "tokens_read": np.array([128, 120, 254, 254]), "seconds": 3.0, "tokens": 1000},
        {"embedder": "m", "strategy": "windows-mean", "length": lengths, "document_tokens": documents,
         "tokens_read": documents, "seconds": 1.0, "tokens": 1000},  # its first windows were truncate's
        {"embedder": "m", "strategy": "late-chunking@128", "length": lengths, "document_tokens": documents,
         "tokens_read": np.array([128, 120, 2300, 2240]), "seconds": 8.0, "tokens": 4000},
        {"embedder": "bm25", "strategy": "full-text", "length": lengths, "document_tokens": documents,
         "tokens_read": documents, "seconds": None, "tokens": None},
    ]
    timings = timing_table(readings)
    assert list(timings.columns) == TIMING_COLUMNS and len(timings) == 8
    row = timings.set_index(["embedder", "strategy", "length"])
    assert tuple(row.loc[("m", "truncate", 2048), ["documents", "document_tokens", "tokens_read"]]) == (2, 4048, 508)
    assert (row.loc[("m", "truncate", 128), "model_seconds"], row.loc[("m", "truncate", 128), "model_tokens"]) == (4.0, 2000)
    assert row.loc[("m", "windows-mean", 2048), "model_seconds"] == 4.0  # plain inputs: one speed for both
    assert row.loc[("m", "late-chunking@128", 2048), "model_seconds"] == 8.0  # another kind of pass: its own
    assert pd.isna(row.loc[("bm25", "full-text", 128), "model_seconds"])
    costs = reading_costs(timings, {"m": 0.5}).set_index(["embedder", "strategy", "length"])
    # 2 ms per token; truncate reads 508 of 4,048 tokens at 2,048
    assert costs.loc[("m", "truncate", 2048), "seconds_per_million_tokens"] == pytest.approx(4.0 / 2000 * 508 / 4048 * 1e6)
    assert costs.loc[("m", "windows-mean", 2048), "seconds_per_million_tokens"] == pytest.approx(2000.0)
    assert costs.loc[("m", "late-chunking@128", 2048), "seconds_per_million_tokens"] == pytest.approx(2e-3 * 4540 / 4048 * 1e6)
    assert costs.loc[("m", "truncate", 2048), "usd_per_million_tokens"] == pytest.approx(0.5 * 508 / 4048)
    assert pd.isna(costs.loc[("bm25", "full-text", 2048), "seconds_per_million_tokens"])
    assert pd.isna(costs.loc[("bm25", "full-text", 2048), "usd_per_million_tokens"])  # no price given: none assumed
    assert [reading_mode(s) for s in ("truncate", "chunks-max@256", "late-chunking@128", "extend-gp@4096")] == [
        "plain", "plain", "late-chunking@128", "extend-gp@4096"]


def test_a_rerun_from_the_cache_keeps_the_speed_measured_when_the_vectors_were_embedded():
    first = timing_table([{"embedder": "m", "strategy": "truncate", "length": np.array([128]), "document_tokens": np.array([128]),
                           "tokens_read": np.array([128]), "seconds": 0.5, "tokens": 128}])
    rerun = timing_table([{"embedder": "m", "strategy": "truncate", "length": np.array([128]), "document_tokens": np.array([128]),
                           "tokens_read": np.array([128]), "seconds": 0.0, "tokens": 0}])  # every vector from the cache
    assert rerun["model_seconds"].isna().all()
    kept = with_earlier_speeds(rerun, first)
    pd.testing.assert_frame_equal(kept, first, check_dtype=False)
    assert with_earlier_speeds(rerun, None) is rerun


def test_corpus_lengths_and_the_grid_lengths_that_bracket_them():
    assert length_summary([100, 200, 300, 400, 10_000]) == {"documents": 5, "median": 300, "p90": 6160}
    assert bracketing_lengths([128, 256, 512, 1024, 2048, 4096, 8192], [1830, 5200]) == [1024, 2048, 4096, 8192]
    assert bracketing_lengths([128, 512], [512, 40_000, 50]) == [512, 128]  # on the grid, past it, before it
    with pytest.raises(ValueError):
        length_summary([])


# --- --price ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, says", [
    (["--price", "st:all-MiniLM-L6-v2=abc"], "error: --price takes SPEC=USD per million tokens"),
    (["--price", "st:all-MiniLM-L6-v2=-1"], "error: --price takes SPEC=USD per million tokens"),
    (["--price", "=0.1"], "error: --price takes SPEC=USD per million tokens"),
    (["--price", "openai:text-embedding-3-small=0.02"],
     "error: --price names openai:text-embedding-3-small, which this run does not embed with (its embedders: st:all-MiniLM-L6-v2)"),
])
def test_bad_prices_are_one_line_before_any_work(args, says, tmp_path):
    result = CliRunner().invoke(app, ["nolima", "--corpus", f"dir:{tmp_path / 'no-such-folder'}", "--out", str(tmp_path / "run"), *args])
    assert result.exit_code == 1 and result.output.startswith(says) and result.output.count("\n") == 1, result.output
    assert not (tmp_path / "run").exists()


def test_a_price_alone_means_nothing_to_a_command_without_a_decision(tmp_path):
    result = CliRunner().invoke(app, ["similarity", "needle-question", "--out", str(tmp_path / "nq.csv"),
                                      "--price", "st:all-MiniLM-L6-v2=1"])
    assert result.exit_code == 1 and result.output.startswith("error: --price goes with --plan or --max-cost")


# --- runs ----------------------------------------------------------------------------------------------------------------
GRID = ["--groups", "loc-dresden,diet-vegan,lang-dutch", "--variants", "onehop", "--lengths", "128,256", "--depths", "2",
        "--negatives", "6", "--n-bootstrap", "100", "-q"]


def _sentences(report: str) -> list[str]:
    section = report.split("## Which to use\n\n", 1)[1].split("\n## ", 1)[0]
    return [line[2:] for line in section.splitlines() if line.startswith("- For documents of about ")]


def _check_run(out, embedders: list[str], prices: dict[str, float], lengths=(128, 256)) -> pd.DataFrame:
    """What every run's decision must hold: a row per length and reading, one best per length that
    no reading dominates, costs from timings.csv and the prices, and "Which to use" opening the report."""
    decision, timings = read_decision(out / "decision.csv"), pd.read_csv(out / "timings.csv")
    assert set(decision["embedder"]) == set(embedders) and set(decision["length"]) == set(lengths)
    assert (decision.groupby("length")["best"].sum() == 1).all() and dominated_recommendations(decision).empty
    assert (decision.loc[decision["best"], "diff_to_best"] == 0).all()
    both = decision.merge(timings, on=["embedder", "strategy", "length"])
    assert len(both) == len(decision) and both["model_tokens"].gt(0).all()  # a fresh cache: every speed measured
    share = both["tokens_read"] / both["document_tokens"]
    np.testing.assert_allclose(both["seconds_per_million_tokens"], both["model_seconds"] / both["model_tokens"] * share * 1e6)
    np.testing.assert_allclose(both["usd_per_million_tokens"], both["embedder"].map(prices) * share)
    assert json.loads((out / "config.json").read_text())["prices"] == prices
    report = (out / "report.md").read_text(encoding="utf-8")
    assert re.findall(r"^## (.+)$", report, re.M)[:2] == ["Which to use", "The answer per embedder and strategy"]
    sentences = _sentences(report)
    assert len(sentences) == len(lengths)
    for row in decision[decision["best"]].itertuples():
        said = [s for s in sentences if s.startswith(f"For documents of about {row.length:,} tokens: ")]
        interval = f"{row.recall:.2f} [{row.recall_lo:.2f}, {row.recall_hi:.2f}]"
        expected = (f"read them with {row.embedder} as `{row.strategy}` (recall {interval})" if row.recall_lo > 0 else
                    f"no reading is shown to find these needles above chance (the best, {row.embedder} as `{row.strategy}`, "
                    f"has recall {interval}")  # a tiny grid: its interval may reach 0
        assert len(said) == 1 and said[0].startswith(f"For documents of about {row.length:,} tokens: {expected}"), said
    assert report.count("- Which to use: ") == decision[["embedder", "strategy"]].drop_duplicates().shape[0]  # each answer box
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.index('<h2 id="which-to-use">') < page.index('<aside class="answer">')
    return decision


@pytest.mark.slow
def test_two_local_models_the_bundled_one_and_a_random_weight_copy(tmp_path, books_dir):
    from fakes import small_model_folder

    random_model = small_model_folder(tmp_path / "random", "bert", positions=512, max_seq_length=256)
    other = f"st:{random_model}"
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["nolima", "-e", "st:all-MiniLM-L6-v2", "-e", other, "--corpus", f"dir:{books_dir}",
                                      "--strategy", "truncate,chunks-max", "--chunk-tokens", "128", *GRID, "--out", str(out),
                                      "--price", "st:all-MiniLM-L6-v2=0.01", "--price", f"{other}=0.002",
                                      "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    decision = _check_run(out, ["st:all-MiniLM-L6-v2", other], {"st:all-MiniLM-L6-v2": 0.01, other: 0.002})
    assert set(decision["strategy"]) == {"truncate", "chunks-max@128"}
    chunked = decision[decision["strategy"] == "chunks-max@128"]
    assert set(zip(chunked["length"], chunked["vectors_per_document"], strict=True)) == {(128, 2), (256, 3)}  # 126 content tokens a chunk
    assert json.loads((out / "config.json").read_text())["frame_tokens"] == {"st:all-MiniLM-L6-v2": 2, other: 2}
    similarities = pd.read_parquet(out / "similarities.parquet")
    won = similarities[similarities["strategy"] == "chunks-max@128"].groupby(["embedder", "length"])["best_chunk"].max()
    for row in chunked.itertuples():  # no chunk past the count ever wins
        assert won[(row.embedder, row.length)] + 1 <= row.vectors_per_document == math.ceil(row.length / 126)
    assert (decision.loc[decision["strategy"] == "truncate", "vectors_per_document"] == 1).all()
    haystacks = pd.read_parquet(out / "haystacks.parquet")
    read = pd.read_csv(out / "timings.csv").set_index(["embedder", "strategy", "length"])["tokens_read"]
    for length, rows in haystacks.groupby("length"):  # chunks read every token, truncate the first 254 (its tokenizer's)
        assert read[("st:all-MiniLM-L6-v2", "chunks-max@128", length)] == rows["n_tokens"].sum()
        assert read[("st:all-MiniLM-L6-v2", "truncate", length)] == rows["n_tokens"].clip(upper=254).sum()
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "switching to " in report  # the other model, at every length
    # one answer, said once: the command line ends with the report's summary, and its chunks are breaks.csv's
    summary = [line.removeprefix("which to use: ") for line in result.output.splitlines() if line.startswith("which to use: ")]
    assert summary and all(f"\n- {line}\n" in report.replace("**", "") for line in summary), (summary, report)
    for row in read_breaks(out / "breaks.csv").query("query_form == 'question'").itertuples():
        said = next(line for line in result.output.splitlines() if line.startswith(f"{row.embedder} [{row.strategy}, {row.variant}"))
        chunk = None if pd.isna(row.recommended_chunk_tokens) else int(row.recommended_chunk_tokens)
        assert re.findall(r"recommended chunk (\d+) tokens", said) == ([] if chunk is None else [str(chunk)]), said
    corpus = json.loads((out / "config.json").read_text())["corpus_lengths"]
    assert corpus["documents"] == 12 and corpus["median"] > 8192  # the plays: tens of thousands of tokens each
    assert f"its 12 documents are about {corpus['median']:,} tokens long at the median" in report
    assert _sentences(report)[0].startswith("For documents of about 256 tokens")  # the longest length brackets them: first
    # embedeval report regenerates the same section from the folder; a rerun from the cache keeps the measured speeds
    again = CliRunner().invoke(app, ["report", str(out), "--out", str(tmp_path / "again")])
    assert again.exit_code == 0, again.output
    assert (tmp_path / "again" / "report.md").read_text(encoding="utf-8") == report
    timings = (out / "timings.csv").read_bytes()
    rerun = CliRunner().invoke(app, ["nolima", "-e", "st:all-MiniLM-L6-v2", "-e", other, "--corpus", f"dir:{books_dir}",
                                     "--strategy", "truncate,chunks-max", "--chunk-tokens", "128", *GRID, "--out", str(out),
                                     "--price", "st:all-MiniLM-L6-v2=0.01", "--price", f"{other}=0.02",  # a new price
                                     "--cache-dir", str(tmp_path / "cache")])
    assert rerun.exit_code == 0 and "0 texts newly embedded" in rerun.output, rerun.output
    assert (out / "timings.csv").read_bytes() == timings
    repriced = read_decision(out / "decision.csv")
    pd.testing.assert_series_equal(repriced["seconds_per_million_tokens"], decision["seconds_per_million_tokens"])
    np.testing.assert_allclose(repriced.loc[repriced["embedder"] == other, "usd_per_million_tokens"],
                               10 * decision.loc[decision["embedder"] == other, "usd_per_million_tokens"])


@pytest.mark.slow
def test_a_decision_is_made_again_from_a_run_folder_without_decision_csv(tmp_path, books_dir):
    from embedeval.run import NolimaRun

    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["nolima", "--corpus", f"dir:{books_dir}", "--strategy", "truncate,windows-mean", *GRID,
                                      "--out", str(out), "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    written = read_decision(out / "decision.csv")
    (out / "decision.csv").unlink()
    pd.testing.assert_frame_equal(NolimaRun.open(out).decision(), written, check_dtype=False)


@pytest.mark.slow
def test_a_scripted_api_server_priced(monkeypatch, tmp_path, books_dir):
    from fake_api import serving

    spec = "openai:text-embedding-3-small"
    with serving(monkeypatch, {"OPENAI": "sk-test"}) as server:
        out = tmp_path / "run"
        result = CliRunner().invoke(app, ["nolima", "-e", spec, "-e", "bm25", "--corpus", f"dir:{books_dir}", *GRID,
                                          "--strategy", "truncate,windows-mean", "--out", str(out), "--price", f"{spec}=0.02"])
        assert result.exit_code == 0, result.output
        assert server.embedding_requests()
    decision = read_decision(out / "decision.csv")
    assert set(decision["embedder"]) == {spec, "bm25"} and (decision.groupby("length")["best"].sum() == 1).all()
    api = decision[decision["embedder"] == spec]
    assert api["seconds_per_million_tokens"].gt(0).all() and api["usd_per_million_tokens"].between(0, 0.02 * 1.01).all()
    assert decision.loc[decision["embedder"] == "bm25", "usd_per_million_tokens"].isna().all()  # no price: none assumed
    assert decision.loc[decision["embedder"] == "bm25", "seconds_per_million_tokens"].gt(0).all()  # timed, no cache
    assert dominated_recommendations(decision).empty
    report = (out / "report.md").read_text(encoding="utf-8")
    assert len(_sentences(report)) == 2 and report.index("## Which to use") < report.index("> **With ")
    assert math.isclose(json.loads((out / "config.json").read_text())["prices"][spec], 0.02)


def test_readings_that_tie_at_equal_cost_recommend_the_models_own_reading():
    """Short haystacks every reading sees alike tie; the best named is the model's own reading
    (``truncate``), not the first name in the alphabet (``chunks-max@128``)."""
    ranks = {128: [[1, 3, 9], [2, 8, 1]], 256: [[4, 12, 1], [1, 1, 7]]}
    same = {("m", "chunks-max@128"): ranks, ("m", "truncate"): ranks, ("m", "extend-gp@1026"): ranks}
    table = decision_table(_ranks(same), n_resamples=50)
    assert table.loc[table["best"], "strategy"].tolist() == ["truncate", "truncate"]
    assert table["tied_with_best"].all() and (table["diff_to_best"] == 0).all()
    # measured seconds that differ by noise do not outrank the model's own reading (the audit's late-chunking case)
    readings = [{"embedder": "m", "strategy": name, "length": np.array([128, 256]), "document_tokens": np.array([128, 256]),
                 "tokens_read": np.array([128, 256]), "seconds": seconds, "tokens": 384}
                for name, seconds in (("truncate", 2.0), ("chunks-max@128", 1.0), ("extend-gp@1026", 1.5))]
    timed = decision_table(_ranks(same), n_resamples=50, timings=timing_table(readings))
    assert timed.loc[timed["best"], "strategy"].tolist() == ["truncate", "truncate"]


def test_a_length_where_no_reading_is_above_chance_recommends_nothing():
    """A scorer at chance gets no recommendation, only the best's recall and its interval (a
    rule that gives its best answer to a useless input is wrong)."""
    from embedeval.report.which import which_sentences

    rng = np.random.default_rng(4)
    at_chance = {128: rng.integers(1, N + 1, (12, 5)).tolist(), 256: rng.integers(1, N + 1, (12, 5)).tolist()}
    found = {128: [[1] * 5] * 12, 256: rng.integers(1, N + 1, (12, 5)).tolist()}
    table = decision_table(_ranks({("m", "truncate"): at_chance, ("m", "windows-mean"): found}), n_resamples=200)
    sentences = which_sentences(table)
    assert table.set_index("length").loc[256, "recall_lo"].max() <= 0
    assert "For documents of about 256 tokens: no reading is shown to find these needles above chance" in sentences[1]
    assert "read them with" not in sentences[1] and "read them with" in sentences[0]


# --- one reading per length, content tokens per chunk, costs that noise does not decide ---------------------------
@pytest.mark.slow
def test_vectors_per_document_is_the_chunks_the_reader_cuts_counted_by_the_real_tokenizer(minilm):
    """chunks-max@128 keeps a vector per 126 content tokens of all-MiniLM-L6-v2 ([CLS] and [SEP] count
    in its 128), late-chunking@128 one per 128: counted here from the tokenizer and from the reader's own cut."""
    from embedeval.strategies import EmbeddingScorer, Strategy

    tokenizer = minilm.model.tokenizer
    frame = len(tokenizer("")["input_ids"])  # [CLS] [SEP]: what every input holds beside its content
    words = " ".join(f"word{i}" for i in range(800))
    texts = [tokenizer.decode(tokenizer(words, add_special_tokens=False)["input_ids"][:n]) for n in (64, 126, 127, 252, 300, 1024)]
    counts = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    assert frame == 2 and counts[1] == 126 and counts[2] == 127
    for label, content in (("chunks-max@128", 128 - frame), ("late-chunking@128", 128)):
        scorer = EmbeddingScorer(minilm, Strategy.parse(label))
        assert scorer.frame_tokens == frame
        cut = np.bincount(scorer.cut(texts).owner, minlength=len(texts))
        expected = [math.ceil(n / content) for n in counts]
        assert cut.tolist() == expected == [vectors_per_document(label, n, scorer.frame_tokens) for n in counts], label
    assert [vectors_per_document("chunks-max@128", n, 2) for n in (128, 256, 512, 1024)] == [2, 3, 5, 9]  # the 1/2/4/8 were one short
    with pytest.raises(ValueError, match="frame"):
        vectors_per_document("chunks-max@128", 100, -1)
    with pytest.raises(ValueError, match="no content tokens"):
        vectors_per_document("chunks-max@2", 100, 2)


#: Two lengths of one embedder: at 128 the readings rank every haystack alike, at 512 they do not.
SAME_AT_128 = {128: [[1, 1], [1, 20], [20, 20]], 512: [[20, 20], [1, 20], [20, 20]]}
OTHER_AT_512 = {128: SAME_AT_128[128], 512: [[1, 20], [1, 1], [20, 20]]}


@pytest.mark.parametrize("offset, same", [(0.0, True), (9e-6, True), (1.1e-5, False), (1e-3, False)])
def test_readings_whose_scores_agree_within_the_tolerance_are_one_reading_named_by_the_simplest(offset, same):
    """extend-gp@1026 and windows-mean scoring every 128-token haystack within 1e-5 of truncate, with
    its ranks, are truncate there (the model's own reading named); just past 1e-5 they are readings
    of their own, and windows-mean, as good there and better at 512, is named."""
    series = {("m", "truncate"): SAME_AT_128, ("m", "windows-mean"): OTHER_AT_512, ("m", "extend-gp@1026"): OTHER_AT_512}
    retrieval = _ranks(series, scores={("m", "windows-mean"): offset, ("m", "extend-gp@1026"): offset})
    found = same_readings(retrieval).set_index(["strategy", "length"])["same_as"]
    assert found[("truncate", 128)] == "truncate" and found[("truncate", 512)] == "truncate"
    assert found[("windows-mean", 512)] == "windows-mean"  # other ranks: never the same
    assert found[("extend-gp@1026", 512)] == "windows-mean"  # the same ranks and scores within the tolerance: the simpler one
    assert found[("windows-mean", 128)] == ("truncate" if same else "windows-mean")
    assert found[("extend-gp@1026", 128)] == ("truncate" if same else "windows-mean")
    table = decision_table(retrieval, n_resamples=50).set_index(["length", "strategy"])
    assert table.loc[(128, "truncate" if same else "windows-mean"), "best"]
    assert (table["same_as"] == pd.Series(found).reindex(table.index.swaplevel()).to_numpy()).all()
    assert dominated_recommendations(table.reset_index()).empty


def test_identical_computations_cost_the_same_and_noise_names_no_reading():
    """truncate and extend-gp@1026 read the same vectors at 128 tokens: they cost truncate's seconds
    there, whatever extend-gp@1026's own speed (measured on its long inputs); at 512 each its own.
    Two chunk readings as good as each other: a speed 1.3 x another's is noise (by name), 2 x is not."""
    series = {("m", "truncate"): SAME_AT_128, ("m", "extend-gp@1026"): OTHER_AT_512}
    readings = [{"embedder": "m", "strategy": name, "length": np.array([128, 512]), "document_tokens": np.array([128, 512]),
                 "tokens_read": np.array([128, 254 if name == "truncate" else 512]), "seconds": seconds, "tokens": 1000}
                for name, seconds in (("truncate", 1.0), ("extend-gp@1026", 1.3))]
    timings = timing_table(readings)
    table = decision_table(_ranks(series), n_resamples=50, timings=timings).set_index(["length", "strategy"])
    assert table.loc[(128, "extend-gp@1026"), "same_as"] == "truncate" and table.loc[(128, "truncate"), "best"]
    seconds = table["seconds_per_million_tokens"]
    assert seconds[(128, "extend-gp@1026")] == seconds[(128, "truncate")] == pytest.approx(1.0 / 1000 * 1e6)
    assert seconds[(512, "extend-gp@1026")] == pytest.approx(1.3 / 1000 * 1e6)  # another computation: its own speed
    assert table.loc[(512, "truncate"), "share_read"] == pytest.approx(254 / 512) and table.loc[(512, "extend-gp@1026"), "share_read"] == 1
    assert not about_the_same_time(1.0, 1.5) and about_the_same_time(1.0, 1.49) and about_the_same_time(1.3, 1.0)
    ranks = {128: [[1, 3], [2, 9]], 256: [[4, 1], [1, 7]]}
    pair = {("m", "chunks-max@128"): ranks, ("m", "late-chunking@128"): ranks}
    for chunks, late, named in ((1.3, 1.0, "chunks-max@128"), (1.0, 1.3, "chunks-max@128"), (2.0, 1.0, "late-chunking@128")):
        timed = [{"embedder": "m", "strategy": name, "length": np.array([128, 256]), "document_tokens": np.array([128, 256]),
                  "tokens_read": np.array([128, 256]), "seconds": seconds, "tokens": 384}
                 for name, seconds in (("chunks-max@128", chunks), ("late-chunking@128", late))]
        decided = decision_table(_ranks(pair, scores={("m", "late-chunking@128"): 0.01}), n_resamples=20, timings=timing_table(timed))
        assert decided.loc[decided["best"], "strategy"].tolist() == [named, named], (chunks, late)


def _breaks(strategy: str, point, chunk, censored=False) -> pd.DataFrame:
    """A headline breaks.csv row of embedder m, its base reading ``strategy``."""
    return pd.DataFrame([{"embedder": "m", "strategy": strategy, "query_form": "question", "variant": "onehop",
                          "n_distractors": 0, "n_needles": 1, "own_question": True, "break_point": point,
                          "recommended_chunk_tokens": chunk, "break_censored": censored, "base_strategy": strategy}])


def test_a_run_of_one_reading_says_so_once_and_its_summary_reads_breaks_csv():
    from embedeval.report.which import summary_sentences, which_sentences, which_table

    rng = np.random.default_rng(5)
    ranks = {64: [[1] * 4] * 12, 128: [[1, 1, 1, 9]] * 12, 512: [[1, 9, 9, 9]] * 12, 2048: rng.integers(1, N + 1, (12, 4)).tolist()}
    table = decision_table(_ranks({("m", "truncate"): ranks}), n_resamples=100)
    table["share_read"] = table["length"].map({64: 1.0, 128: 1.0, 512: 0.496, 2048: 0.124})
    table["needle_visible"] = table["length"].map({64: 1.0, 128: 1.0, 512: 0.5, 2048: 0.2})
    assert which_sentences(table) == []  # nothing to choose between at any length
    lines = summary_sentences(table, _breaks("truncate", 128, 102), "onehop")
    recall = table.set_index("length").loc[512]
    assert lines[0] == (f"Documents up to about 128 tokens: embed them whole (`truncate`). Longer: split them into chunks of <= 102 "
                        f"tokens; embedded whole, `truncate` has recall {recall['recall']:.2f} [{recall['recall_lo']:.2f}, "
                        f"{recall['recall_hi']:.2f}] at 512 tokens (reads 50% of each document, the needle in 50% of haystacks). "
                        "At 2,048 tokens no reading of m is shown to find the needle above chance (recall intervals that reach 0).")
    assert lines[1].startswith("This run read documents one way (`truncate`)") and "`--strategy truncate,windows-mean," in lines[1]
    assert not which_table(table).iloc[0, 1:].str.contains(r"\(").any()  # no "(best)" where there is no other reading
    whole = summary_sentences(table[table["length"] <= 128], _breaks("truncate", 128, 102, censored=True), "onehop")
    assert whole[0] == "Documents up to 128 tokens (the longest measured): embed them whole (`truncate`)."


def test_a_run_of_one_reading_without_a_headline_break_point_has_no_empty_summary_line():
    """A one-reading run whose base reading has no headline (fewer than 10 question groups, or no length
    60% of the resamples reach): the summary said "" (an empty bullet, an empty 'which to use:' line)."""
    from embedeval.report.which import summary_sentences

    ranks = {64: [[1] * 4] * 12, 128: [[1, 1, 1, 9]] * 12, 512: [[1, 1, 9, 9]] * 12}
    table = decision_table(_ranks({("m", "truncate"): ranks}), n_resamples=100)
    assert (table["recall_lo"] > 0).all()
    lines = summary_sentences(table, _breaks("truncate", None, None), "onehop")
    assert all(line.strip() for line in lines)
    assert lines[0].startswith("This run recommends no length to embed documents whole and no chunk size: `truncate` has no headline")


def test_a_chunk_reading_as_the_base_is_not_said_to_embed_documents_whole():
    """A run of chunks-max@128 alone (or chunk readings only: each is its own base): the summary said
    "Documents up to 512 tokens (the longest measured): embed them whole (`chunks-max@128`)" beside an
    answer box "reading each document as 128-token chunks"."""
    from embedeval.report.which import summary_sentences

    ranks = {64: [[1] * 4] * 12, 128: [[1, 1, 1, 9]] * 12, 512: [[1, 1, 9, 1]] * 12}
    table = decision_table(_ranks({("m", "chunks-max@128"): ranks}), n_resamples=100)
    lines = summary_sentences(table, _breaks("chunks-max@128", 512, None, censored=True), "onehop")
    assert lines[0] == "Documents up to 512 tokens (the longest measured): read them by taking the best of its 128-token chunks (`chunks-max@128`)."
    assert "whole" not in lines[0]
    chunks = {64: [[1] * 4] * 12, 128: [[1, 1, 1, 9]] * 12, 256: [[1, 1, 9, 1]] * 12, 512: [[1, 9, 9, 9]] * 12}
    windows = {64: [[1] * 4] * 12, 128: [[1, 1, 9, 9]] * 12, 256: [[1, 9, 9, 9]] * 12, 512: [[1, 1, 9, 1]] * 12}
    both = decision_table(_ranks({("m", "chunks-max@128"): chunks, ("m", "windows-mean"): windows}, scores={("m", "windows-mean"): 0.01}),
                          n_resamples=100)
    said = summary_sentences(both, _breaks("chunks-max@128", 128, None), "onehop")[0]
    assert said.startswith("Documents up to about 128 tokens: read them by taking the best of its 128-token chunks (`chunks-max@128`). "
                           "Longer: read them with `windows-mean`") and "; read that way, `chunks-max@128` has recall" in said, said
    assert "whole" not in said
    alone = summary_sentences(table, _breaks("chunks-max@128", 512, None, censored=True), "onehop")[1]
    assert "`--strategy chunks-max@128,truncate,windows-mean,late-chunking`" in alone  # not chunks-max a second time


# --- every table `report` reads is checked against its schema ------------------------------------------
@pytest.fixture(scope="module")
def lexical_run(tmp_path_factory):
    """A small bm25 run (no model to load): its decision.csv has a row per length, one reading
    (full-text), its recall below chance."""
    from conftest import own_cache
    from fakes import write_word_books

    books = write_word_books(tmp_path_factory.mktemp("lexical-books"), "harbour lantern meadow orchard bridge river candle "
                             "window garden market winter morning quiet ancient narrow distant gentle wooden".split(), (8, 20), seed=11)
    out = tmp_path_factory.mktemp("lexical") / "run"
    with own_cache(tmp_path_factory):
        result = CliRunner().invoke(app, _lexical_sweep(f"dir:{books}", out, 50))
    assert result.exit_code == 0, result.output
    return out


def _lexical_sweep(corpus: str, out, n_bootstrap: int) -> list[str]:
    """The command line of :func:`lexical_run`'s sweep."""
    return ["nolima", "-e", "bm25", "--groups", "loc-dresden,loc-peru,diet-vegan", "--corpus", corpus, "--lengths", "128,256",
            "--depths", "2", "--negatives", "8", "--n-bootstrap", str(n_bootstrap), "--variants", "onehop", "--out", str(out), "-q"]


def _edit_cell(row: int, column: str, value: str):
    """An edit of a CSV's text: ``column`` of data row ``row`` (1: the line after the header) set to ``value``."""
    def edit(lines: list[str]) -> list[str]:
        import csv

        header = lines[0].split(",")
        cells = next(csv.reader([lines[row]]))
        cells[header.index(column)] = value
        lines[row] = ",".join(f'"{c}"' if "," in c else c for c in cells)
        return lines
    return edit


def _second_best(lines: list[str]) -> list[str]:
    """A row for another reading at the first line's length, also named best."""
    return [lines[0], lines[1], lines[1].replace(",bm25,full-text,", ",bm25,truncate,", 1), *lines[2:]]


@pytest.mark.slow
@pytest.mark.parametrize("table, edit, says", [
    ("decision.csv", _edit_cell(1, "best", ""), "decision.csv, line 2, column best: an empty cell is not true or false"),
    ("decision.csv", _edit_cell(1, "best", "False"),
     "decision.csv, line 2, column best: False is not the one reading named best at its length (a length names none, or several)"),
    ("decision.csv", _second_best,
     "decision.csv, line 2, column best: True is not the one reading named best at its length (a length names none, or several)"),
    ("decision.csv", lambda lines: [*lines[:2], *lines[1:]],
     "decision.csv, line 3, column strategy: 'full-text' is not a reading once per length (the row is there twice)"),
    ("decision.csv", _edit_cell(1, "length", "1e20"), "decision.csv, line 2, column length: 1e+20 is not a whole number from 1 "
                                                      "to 1,000,000,000"),
    ("decision.csv", _edit_cell(2, "length", "-256"), "decision.csv, line 3, column length: -256 is not a whole number from 1 "
                                                      "to 1,000,000,000"),
    ("decision.csv", _edit_cell(1, "length", ""), "decision.csv, line 2, column length: an empty cell is not a whole number"),
    ("decision.csv", _edit_cell(2, "n_groups", ""), "decision.csv, line 3, column n_groups: an empty cell is not a whole number"),
    ("decision.csv", _edit_cell(2, "n_groups", "0"), "decision.csv, line 3, column n_groups: 0 is not a whole number >= 1"),
    ("decision.csv", _edit_cell(1, "recall", "inf"), "decision.csv, line 2, column recall: inf is not a number <= 1"),
    ("decision.csv", _edit_cell(1, "recall_hi", "1.5"), "decision.csv, line 2, column recall_hi: 1.5 is not a number <= 1"),
    ("decision.csv", _edit_cell(1, "diff_lo", "-inf"), "decision.csv, line 2, column diff_lo: -inf is not a finite number"),
    ("decision.csv", _edit_cell(1, "usd_per_million_tokens", "-2"),
     "decision.csv, line 2, column usd_per_million_tokens: -2.0 is not a number >= 0"),
    ("metrics.csv", _edit_cell(1, "metric", "bogus"), "metrics.csv, line 2, column metric: 'bogus' is not a metric a run writes"),
    ("metrics.csv", lambda lines: [lines[0], *(line.replace(",all,all,", ",all,all,x", 1) for line in lines[1:])],
     "metrics.csv, line 2, column metric: 'xcomparative_ratio' is not a metric a run writes"),
    ("metrics.csv", _edit_cell(3, "value", "inf"), "metrics.csv, line 4, column value: inf is not a finite number"),
    ("metrics.csv", _edit_cell(2, "n_distractors", "-3"), "metrics.csv, line 3, column n_distractors: -3 is not a whole number from 0 to"),
    ("breaks.csv", _edit_cell(1, "n_needles", "-1"), "breaks.csv, line 2, column n_needles: -1 is not a whole number from 0 to"),
    ("metrics.csv", _edit_cell(2, "ci_hi", "1.5"), "metrics.csv, line 3, column ci_hi: 1.5 is not in the range of its metric"),
    ("metrics.csv", lambda lines: [*lines[:3], lines[2], *lines[3:]],
     "metrics.csv, line 4, column metric: 'auc' is not a metric once per cell (the row is there twice)"),
    # a blank line (pandas skips it) moved the line named by one
    ("metrics.csv", lambda lines: _edit_cell(2, "value", "inf")([lines[0], "", *lines[1:]]),
     "metrics.csv, line 3, column value: inf is not a finite number"),  # line 2 before
    ("metrics.csv", lambda lines: _edit_cell(1, "ci_hi", "0.25")(_edit_cell(1, "ci_lo", "0.5")(lines)),
     "metrics.csv, line 2, column ci_hi: 0.25 is not at least its ci_lo"),
    # the fuzz tier: an empty embedder was a TypeError where the figure sorts the embedders
    ("metrics.csv", _edit_cell(1, "embedder", ""), "metrics.csv, line 2, column embedder: an empty cell is not a text"),
    ("breaks.csv", _edit_cell(1, "strategy", ""), "breaks.csv, line 2, column strategy: an empty cell is not a text"),
    ("breaks.csv", _edit_cell(1, "break_point", "-64"), "breaks.csv, line 2, column break_point: -64 is not a whole number from 0"),
])
def test_report_on_an_edited_table_is_one_error_line_naming_file_line_and_column(lexical_run, tmp_path, table, edit, says):
    """Part 5 (a hostile run): a hand-edited decision.csv was a StopIteration (no best at a
    length, a length of 1e20), a pandas ValueError (a row twice), 'cannot convert float NaN to
    integer' (an empty length or n_groups), or taken silently (an empty best as true, two bests at a
    length, recall=inf, negative lengths); metrics.csv with unknown metric names a max() traceback.
    Every table `report` reads is checked against its schema (embedeval.run.TABLE_SCHEMAS): one line
    naming the file, the line as the CSV counts it and the column; nothing in the folder is written."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(lexical_run, run)
    path = run / table
    path.write_text("\n".join(edit(path.read_text().splitlines())) + "\n")
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.exit_code == 1 and result.output.startswith(f"error: {path}, ") and says in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == before


@pytest.mark.slow
def test_a_table_of_a_run_of_several_strategies_without_its_strategy_column_is_refused(lexical_run, tmp_path):
    """A run of several strategies writes a strategy column; its metrics.csv edited without one
    read as one strategy's (the strategies' rows averaged in the report, exit 0): one error line."""
    import shutil

    from embedeval.run import NolimaRun

    run = tmp_path / "run"
    shutil.copytree(lexical_run, run)
    metrics = pd.read_csv(run / "metrics.csv").drop(columns="strategy")
    metrics.to_csv(run / "metrics.csv", index=False)
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "strategies": ["truncate", "windows-mean"]}))
    with pytest.raises(InputError, match=r"metrics\.csv lacks the column strategy, which a run of 2 strategies writes"):
        NolimaRun.open(run).metrics()
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.exit_code == 1 and result.output.startswith("error: ") and "lacks the column strategy" in result.output, result.output


@pytest.mark.slow
def test_a_decision_csv_of_its_header_only_is_said_in_the_report(lexical_run, tmp_path):
    """A decision.csv without rows (a run whose pools hold k candidates or fewer
    writes one; or an edit) dropped "Which to use" from the report without a word; it says that no
    reading is named and why a run names none."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(lexical_run, run)
    (run / "decision.csv").write_text((run / "decision.csv").read_text().splitlines()[0] + "\n")
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    report = (run / "report.md").read_text()
    assert "## Which to use\n\nNo reading is named at any length: `decision.csv` has no rows." in report
    assert "pools hold more than 5 candidates" in report


@pytest.mark.slow
def test_an_edited_report_is_kept_aside_with_a_note_when_report_or_a_run_writes_it_again(lexical_run, tmp_path):
    """A report.md edited by hand in a run folder was overwritten without a word by
    `embedeval report` and by a rerun. The file is compared with what embedeval wrote (derived.json's
    sha256); the edited one is kept as report.md.edited-TIME, said in one note line, and the report
    written again; a report embedeval wrote itself is replaced without a copy or a note."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(lexical_run, run)
    written = (run / "report.md").read_text()
    (run / "report.md").write_text(written + "\nMy notes on this run.\n")
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if line.startswith("note: ")]
    kept = sorted(run.glob("report.md.edited-*"))
    assert len(kept) == 1 and kept[0].read_text() == written + "\nMy notes on this run.\n"
    assert notes == [f"note: {run / 'report.md'} was changed since embedeval wrote it; that version is kept as {kept[0].name} "
                     "before it is written again"], result.output
    assert (run / "report.md").read_text() == written
    result = CliRunner().invoke(app, ["report", str(run)])  # what embedeval wrote: replaced, no copy, no note
    assert result.exit_code == 0 and "note:" not in result.output and len(list(run.glob("report.md.edited-*"))) == 1
    (run / "report.html").write_text("<p>mine</p>")
    corpus = json.loads((run / "config.json").read_text())["grid"]["corpus"]
    result = CliRunner().invoke(app, _lexical_sweep(corpus, run, 60))  # another setting: every output written again
    assert result.exit_code == 0, result.output
    assert [p.read_text() for p in run.glob("report.html.edited-*")] == ["<p>mine</p>"]
    assert sum(line.startswith("note: ") and "report.html" in line for line in result.output.splitlines()) == 1


def test_an_edited_output_is_never_copied_through_a_link_named_as_its_copy(tmp_path, monkeypatch):
    """A link to nothing named as the copy of an edited report.md
    (``report.md.edited-TIME``) was written through, outside the run folder. The copy takes the next
    free name and the link's target is never made."""
    import datetime as real_dt
    import types

    from embedeval import derived

    run = tmp_path / "run"
    run.mkdir()
    (run / "report.md").write_text("what embedeval wrote\n")
    derived.record_outputs(run, "digest", ["report.md"])
    (run / "report.md").write_text("my notes\n")
    moment = real_dt.datetime(2026, 11, 29, 8, 30, 0)
    monkeypatch.setattr(derived, "dt", types.SimpleNamespace(datetime=types.SimpleNamespace(now=lambda: moment)))
    outside = tmp_path / "outside"
    (run / "report.md.edited-20261129T083000").symlink_to(outside)
    kept = derived.keep_edited(run, ["report.md"])
    assert [path.name for path in kept] == ["report.md.edited-20261129T083000-2"]
    assert kept[0].read_text() == "my notes\n" and not kept[0].is_symlink()
    assert not outside.exists()

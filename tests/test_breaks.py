"""The break point on hand-made rank tables: chance-corrected, no headline for a scorer at chance,
a base over the shortest lengths, and an interval from resampled question groups."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.isotonic import IsotonicRegression

from embedeval.aggregate import retrieval_metrics
from embedeval.breaks import BreakRule, break_points, parse_shares
from embedeval.errors import InputError
from embedeval.metrics.bootstrap import cluster_resamples
from embedeval.metrics.break_estimators import base_length_count, break_lengths, break_point, relative_break_lengths, relative_break_point
from embedeval.metrics.ranking import chance_corrected_recall
from embedeval.report.break_words import break_sentence, interval_text
from embedeval.run import read_breaks
from embedeval.schema import BREAK_COLUMNS

LENGTHS = (128, 256, 512, 1024, 2048, 4096, 8192)
N_CANDIDATES = 125  # 24 controls + 100 negatives + the needle haystack
GROUPS = 24
DEPTHS = 10


def _rank_rows(ranks: dict[int, np.ndarray], n_candidates: int = N_CANDIDATES, strategy: str = "truncate") -> pd.DataFrame:
    """A rank table from ranks[length] of shape (GROUPS, DEPTHS), with every measure derived from
    the rank by its definition (recall@k = 1[rank <= k], mrr = 1/rank, ...)."""
    rows = []
    for length, table in ranks.items():
        for g, group_ranks in enumerate(table):
            for d, rank in enumerate(group_ranks):
                rank = int(rank)
                rows.append({"embedder": "m", "strategy": strategy, "query_form": "question", "group_id": f"g{g:02d}",
                             "category": "c", "variant": "onehop", "length": length, "n_distractors": 0, "n_needles": 1,
                             "own_question": True, "depth": d / (DEPTHS - 1), "haystack_id": f"g{g}:{length}:{d}",
                             "score": 0.0, "rank": rank, "n_candidates": n_candidates, "ties": 0,
                             "recall@1": float(rank <= 1), "recall@5": float(rank <= 5), "recall@10": float(rank <= 10),
                             "mrr": 1 / rank, "mrr@10": 1 / rank if rank <= 10 else 0.0, "ndcg@1": float(rank <= 1),
                             "ndcg@10": 1 / np.log2(rank + 1) if rank <= 10 else 0.0,
                             "query_auc": (n_candidates - rank) / (n_candidates - 1)})
    return pd.DataFrame(rows)


def _with_hits(shares: dict[int, float], seed: int = 0) -> dict[int, np.ndarray]:
    """Ranks per length where a share of the rows (spread over the groups) ranks 1 and the rest
    ranks past the top 10."""
    rng = np.random.default_rng(seed)
    out = {}
    for length, share in shares.items():
        hits = rng.permutation(GROUPS * DEPTHS) < round(share * GROUPS * DEPTHS)
        out[length] = np.where(hits, 1, rng.integers(11, N_CANDIDATES + 1, GROUPS * DEPTHS)).reshape(GROUPS, DEPTHS)
    return out


def _breaks(ranks: dict[int, np.ndarray], rule: BreakRule | None = None, n_resamples: int = 1000,
            n_candidates: int = N_CANDIDATES) -> pd.Series:
    retrieval = _rank_rows(ranks, n_candidates)
    metrics = retrieval_metrics(retrieval, n_resamples=20)
    table = break_points(metrics, retrieval, rule, n_resamples=n_resamples)
    assert list(table.columns) == BREAK_COLUMNS and len(table) == 1
    return table.iloc[0]


def test_chance_corrected_recall_by_hand():
    np.testing.assert_allclose(chance_corrected_recall([1.0, 0.0, 0.04, 0.52], 5, 125), [1.0, -0.04 / 0.96, 0.0, 0.5])
    np.testing.assert_allclose(chance_corrected_recall([1.0, 0.5], 1, [2, 11]), [1.0, 0.45])
    assert np.isnan(chance_corrected_recall(1.0, 5, 5))  # every ranking finds it: nothing to correct against
    with pytest.raises(ValueError):
        chance_corrected_recall(1.0, 0, 10)


def test_relative_break_point_by_hand():
    assert relative_break_point([128, 256, 512], [0.60, 0.52, 0.49]) == 256  # one base length: bar 0.85 x 0.60 = 0.51
    assert relative_break_point([512, 128, 256], [0.49, 0.60, 0.52]) == 256  # order does not matter
    assert relative_break_point([128, 256, 512], [0.60, 0.40, 0.59]) == 128  # stays: the first miss ends it
    assert relative_break_point([128, 256], [0.0, 0.0]) is None
    assert relative_break_point([128, 256], [0.5, 0.5], fraction=1.0) == 256
    with pytest.raises(ValueError):
        relative_break_point([128, 128], [0.5, 0.5])


def test_both_rules_side_by_side():
    # recall@5 holds its base to 512 and falls off at 1024; query_auc keeps 0.8 to 1024
    ranks = _with_hits({128: 0.5, 256: 0.5, 512: 0.45, 1024: 0.2}, seed=1)
    ranks = {length: np.minimum(r, 20) for length, r in ranks.items()}  # misses rank 11..20: query_auc stays high
    retrieval = _rank_rows(ranks)
    metrics = retrieval_metrics(retrieval, n_resamples=20)
    relative = next(break_points(metrics, retrieval, n_resamples=200).itertuples())
    assert (relative.break_point, relative.relative_break_point, relative.absolute_break_point) == (512, 512, 1024)
    assert relative.recommended_chunk_tokens == 409 and relative.base_lengths == "128,256"
    assert break_sentence(relative).startswith("break point 512 tokens (")
    assert "by chance-corrected recall@5 >= 0.85 x the model's own mean over the shortest lengths" in break_sentence(relative)
    absolute = next(break_points(metrics, retrieval, BreakRule("absolute"), n_resamples=200).itertuples())
    assert (absolute.break_point, absolute.recommended_chunk_tokens) == (1024, 819)
    assert "relative rule: 512 tokens" in break_sentence(absolute, BreakRule("absolute"))
    without_ranks = next(break_points(metrics, None).itertuples())  # a run without a rank table: no relative rule
    assert pd.isna(without_ranks.break_point) and without_ranks.absolute_break_point == 1024


def test_the_base_is_the_shortest_lengths_up_to_three_and_never_more_than_half():
    assert [base_length_count(n) for n in range(1, 10)] == [1, 1, 1, 2, 2, 3, 3, 3, 3]
    # eight lengths: the base is the mean of three (1.0, 0.9, 0.8 -> 0.9, bar 0.765)
    assert relative_break_point(LENGTHS + (16384,), [1.0, 0.9, 0.8, 0.77, 0.76, 0.9, 0.9, 0.9]) == 1024
    # four lengths: two (0.6, 0.52 -> 0.56, bar 0.476)
    assert relative_break_point([128, 256, 512, 1024], [0.60, 0.52, 0.49, 0.40]) == 512


def test_vectorised_break_points_equal_the_scalar_rule():
    rng = np.random.default_rng(3)
    scores = rng.uniform(-0.2, 1, (200, len(LENGTHS)))
    expected = [relative_break_point(LENGTHS, row) or 0 for row in scores]
    np.testing.assert_array_equal(relative_break_lengths(LENGTHS, scores), expected)
    np.testing.assert_array_equal(break_lengths(LENGTHS, scores, 0.5), [break_point(LENGTHS, row, 0.5) or 0 for row in scores])


def test_flat_at_chance_has_no_break_point():
    # recall@5 exactly at chance (5 in 120) at every length: ranks 1, 6, ..., 116 in turn, one in 24 in the top 5
    exact = {length: (np.arange(GROUPS * DEPTHS).reshape(GROUPS, DEPTHS) % 24) * 5 + 1 for length in LENGTHS}
    row = _breaks(exact, n_candidates=120)
    assert row["base_value"] == pytest.approx(0.0, abs=1e-12)
    assert row["at_chance"] and pd.isna(row["break_point"]) and pd.isna(row["recommended_chunk_tokens"])
    assert pd.isna(row["break_point_lo"]) and pd.isna(row["break_point_hi"])
    assert break_sentence(row).startswith("at chance from the shortest length: this scorer does not find these needles")
    # the rule before this change kept every length of a flat curve: 8192, "recommended chunk 6553"
    raw = _rank_rows(exact, 120).groupby("length")["recall@5"].mean()
    assert relative_break_point(raw.index, raw.to_numpy()) == 8192


@pytest.mark.slow
def test_a_random_ranker_almost_never_gets_a_break_point():
    found = 0
    for seed in range(60):
        rng = np.random.default_rng(seed)
        ranks = {length: rng.integers(1, N_CANDIDATES + 1, (GROUPS, DEPTHS)) for length in LENGTHS}
        found += not pd.isna(_breaks(ranks, n_resamples=200)["break_point"])
    assert found <= 6  # the base's 95% interval excludes 0 for about 1 in 40 random rankers


def test_rising_from_chance_has_no_break_point():
    row = _breaks(_with_hits({128: 0.0, 256: 0.0, 512: 0.02, 1024: 0.3, 2048: 0.6, 4096: 0.8, 8192: 0.9}))
    assert row["at_chance"] and pd.isna(row["break_point"])


def test_a_strong_curve_with_a_lasting_dip_breaks_before_the_dip():
    shares = {128: 1.0, 256: 0.95, 512: 0.9, 1024: 0.6, 2048: 0.55, 4096: 0.5, 8192: 0.5}
    row = _breaks(_with_hits(shares))
    retrieval = _rank_rows(_with_hits(shares))
    corrected = chance_corrected_recall(retrieval["recall@5"], 5, retrieval["n_candidates"])
    by_length = pd.Series(corrected).groupby(retrieval["length"]).mean()
    assert row["base_value"] == pytest.approx(by_length.iloc[:3].mean())  # 0.95 (near enough: hits are counts)
    assert row["base_lengths"] == "128,256,512" and not row["at_chance"]
    assert row["break_point"] == 512 and row["recommended_chunk_tokens"] == 409  # 1024 falls below 0.85 x base
    assert row["break_point_lo"] <= 512 <= row["break_point_hi"]
    assert row["base_ci_lo"] <= row["base_value"] <= row["base_ci_hi"]


def test_one_length_alone_cannot_break_the_curve_the_monotone_fit_pools_it_with_its_neighbours():
    shares = {128: 1.0, 256: 0.95, 512: 0.9, 1024: 0.6, 2048: 0.9, 4096: 0.9, 8192: 0.9}
    row = _breaks(_with_hits(shares))
    retrieval = _rank_rows(_with_hits(shares))
    corrected = pd.Series(chance_corrected_recall(retrieval["recall@5"], 5, retrieval["n_candidates"]))
    by_length = corrected.groupby(retrieval["length"]).agg(["mean", "count"])
    fit = IsotonicRegression(increasing=False).fit_transform(by_length.index, by_length["mean"], sample_weight=by_length["count"])
    assert fit[3:].min() >= 0.85 * row["base_value"]  # 1024's dip, pooled with the lengths after it, keeps the bar
    assert row["break_point"] == 8192 and row["break_censored"]  # before the monotone fit: 512, one noisy length decided it
    # a curve that rises from its shortest length is not broken by it either (before: none, 128 under 0.85 x a base it is part of)
    rising = _breaks(_with_hits({128: 0.3, 256: 0.5, 512: 0.5, 1024: 0.6}))
    assert rising["relative_status"] == "ok" and rising["break_point"] == 1024 and rising["break_censored"]


@pytest.mark.slow
def test_the_interval_is_the_break_point_on_resampled_groups():
    shares = {128: 0.7, 256: 0.66, 512: 0.62, 1024: 0.6, 2048: 0.55, 4096: 0.45, 8192: 0.3}
    ranks = _with_hits(shares, seed=5)
    row = _breaks(ranks, n_resamples=300)
    retrieval = _rank_rows(ranks)
    retrieval["cc"] = chance_corrected_recall(retrieval["recall@5"], 5, retrieval["n_candidates"])
    groups = sorted(retrieval["group_id"].unique())
    draws, _ = cluster_resamples(len(groups), 300, 0)
    points = []
    for draw in draws:  # by hand: each resample's rows, every length from the same groups, through scikit-learn's isotonic fit
        sample = pd.concat([retrieval[retrieval["group_id"] == groups[g]] for g in draw])
        means = sample.groupby("length")["cc"].agg(["mean", "count"])
        fit = IsotonicRegression(increasing=False).fit_transform(means.index, means["mean"], sample_weight=means["count"])
        bar = 0.85 * means["mean"].iloc[:3].mean()
        kept = np.cumprod(fit >= bar - 1e-12).sum()
        points.append(int(means.index[kept - 1]) if kept else 0)
    lo, hi = np.quantile(points, [0.05, 0.95], method="inverted_cdf")
    assert (row["break_point_lo"], row["break_point_hi"]) == (lo, hi)
    # the headline: the longest length at least 60% of the resamples reach
    assert row["break_point"] == max(length for length in set(points) | {0} if np.mean(np.asarray(points) >= length) >= 0.6)
    assert lo <= row["break_point"] <= hi
    assert interval_text(row.to_frame().T.itertuples().__next__()) == f"{int(row['break_point'])} tokens ({lo}-{hi})"
    # the spread over the same resamples, counted by hand
    found, counts = np.unique(points, return_counts=True)
    assert parse_shares(row["break_shares"]) == {(int(p) or None): round(c / 300, 3) for p, c in zip(found, counts, strict=True)}
    assert row["break_shares"] == ";".join(f"{int(p) or 'none'}:{c / 300:.3f}" for p, c in zip(found, counts, strict=True))
    assert row["break_point_share"] == pytest.approx(np.mean(np.asarray(points) == row["break_point"]))
    assert len(found) > 1  # this curve's resamples do disagree
    said = break_sentence(row.to_frame().T.itertuples().__next__())
    likely = [(p, c / 300) for p, c in zip(found, counts, strict=True) if c / 300 >= 0.2]
    assert row["break_point_share"] < 0.6 and len(likely) > 1  # no clear majority: the likely lengths, and the one reached by 60%
    assert (f", split between {', '.join(f'{p:,}' for p, _ in likely[:-1])} or {likely[-1][0]:,} tokens ("
            + " / ".join(f"{share:.0%}" for _, share in likely) + " of resamples of the question groups); "
            f"{int(row['break_point']):,} tokens is the longest that {np.mean(np.asarray(points) >= row['break_point']):.0%} of them reach") in said
    assert "act on this one" not in said


def test_one_answer_when_every_resample_agrees_and_none_without_a_break_point():
    agreed = _breaks(_with_hits({length: 0.9 for length in LENGTHS[:3]} | {length: 0.0 for length in LENGTHS[3:]}, seed=1))
    assert agreed["break_point"] == 512 and agreed["break_shares"] == "512:1.000" and agreed["break_point_share"] == 1.0
    flat = {length: (np.arange(GROUPS * DEPTHS).reshape(GROUPS, DEPTHS) % 24) * 5 + 1 for length in LENGTHS}
    at_chance = _breaks(flat, n_candidates=120)
    assert pd.isna(at_chance["break_point"]) and pd.isna(at_chance["break_shares"]) and pd.isna(at_chance["break_point_share"])


def test_absolute_rule_interval_and_breaks_csv_round_trip(tmp_path):
    ranks = _with_hits({128: 0.9, 256: 0.9, 512: 0.85, 1024: 0.5}, seed=2)
    retrieval = _rank_rows(ranks)
    rule = BreakRule("absolute", metric="recall@5", threshold=0.8)
    table = break_points(retrieval_metrics(retrieval, n_resamples=20), retrieval, rule, n_resamples=200)
    row = table.iloc[0]
    assert row["break_point"] == 512 and row["break_point_lo"] <= 512 <= row["break_point_hi"]
    table.to_csv(tmp_path / "breaks.csv", index=False)
    back = read_breaks(tmp_path / "breaks.csv")
    assert list(back.columns) == BREAK_COLUMNS and back.iloc[0]["break_point"] == 512
    assert break_sentence(next(back.itertuples()), rule).startswith("break point 512 tokens (")
    assert back.iloc[0]["break_shares"] == row["break_shares"] and back.iloc[0]["break_point_share"] == row["break_point_share"]
    for edited in ("abc", "128:x", "128:1.5", "512:0.5;512:0.5", "0:1.0", ";;;", "128:-0.5;256:1.5", "128:0.9;256:0.9"):
        table.assign(break_shares=edited).to_csv(tmp_path / "edited.csv", index=False)  # edited by hand: one line, no traceback
        with pytest.raises(InputError, match=r"edited.csv, line 2, column break_shares: .*(is not LENGTH:SHARE|sum to 1.800, not 1)"):
            read_breaks(tmp_path / "edited.csv")
    table.drop(columns=["break_shares", "break_point_share"]).to_csv(tmp_path / "older.csv", index=False)
    assert read_breaks(tmp_path / "older.csv")["break_shares"].isna().all()  # a file from before the columns


@pytest.mark.slow
def test_few_question_groups_do_not_pass_a_scorer_at_chance():
    one = _rank_rows({length: np.full((1, DEPTHS), 3) for length in LENGTHS})  # one group, always in the top 5
    row = break_points(retrieval_metrics(one, n_resamples=20), one, n_resamples=200).iloc[0]
    assert row["relative_status"] == "too few groups" and pd.isna(row["break_point"])
    assert break_sentence(row).startswith("too few question groups")
    found = 0
    for seed in range(80):  # three groups ranked at random: the bootstrap alone passed about 1 in 17 (measured before the floor)
        rng = np.random.default_rng(seed)
        ranks = _rank_rows({length: rng.integers(1, N_CANDIDATES + 1, (3, DEPTHS)) for length in LENGTHS[:4]})
        found += not pd.isna(break_points(retrieval_metrics(ranks, n_resamples=10), ranks, n_resamples=200).iloc[0]["break_point"])
    assert found == 0


def test_below_ten_question_groups_there_is_no_headline_and_groups_alike_give_no_p_of_zero():
    def perfect(groups: int) -> pd.Series:  # every group finds every needle up to 512 tokens, none after
        ranks = {length: np.full((groups, DEPTHS), 1 if length <= 512 else 100) for length in LENGTHS[:5]}
        rows = _rank_rows(ranks)
        return break_points(retrieval_metrics(rows, n_resamples=10), rows, n_resamples=100).iloc[0]

    two = perfect(2)  # before: "break point 512 tokens ... t-test p = 0" and a box "keep chunks <= 409 tokens"
    assert two["relative_status"] == "too few groups" and pd.isna(two["break_point"]) and pd.isna(two["recommended_chunk_tokens"])
    assert pd.isna(two["base_p"]) and two["base_value"] == pytest.approx(1.0)
    said = break_sentence(two)
    assert said.startswith("too few question groups (2)") and "a headline needs at least 10" in said and "p = 0" not in said
    assert "every group's base alike (no t-test)" in said
    assert pd.isna(perfect(9)["break_point"])
    ten = perfect(10)
    assert ten["relative_status"] == "ok" and ten["break_point"] == 512 and pd.isna(ten["base_p"])
    assert "p = 0" not in break_sentence(ten)


def test_a_pool_too_small_to_correct_for_chance_ends_the_run_or_says_so():
    ranks = _with_hits({128: 1.0, 256: 1.0, 512: 1.0, 1024: 1.0})
    retrieval = _rank_rows(ranks)
    retrieval.loc[retrieval["length"] == 512, "n_candidates"] = 5  # recall@5 is 1 for any ranking there
    row = break_points(retrieval_metrics(retrieval, n_resamples=10), retrieval, n_resamples=100).iloc[0]
    assert row["base_lengths"] == "128,256" and row["break_point"] == 256  # 512 is not measured: the run ends there
    retrieval["n_candidates"] = 5
    row = break_points(retrieval_metrics(retrieval, n_resamples=10), retrieval, n_resamples=100).iloc[0]
    assert row["relative_status"] == "cannot correct for chance" and pd.isna(row["break_point"])
    assert break_sentence(row).startswith("recall@5 cannot be corrected for chance")


def test_no_interval_without_a_break_point_and_the_best_length_reads_what_the_rule_reads():
    strong = _rank_rows(_with_hits({128: 0.9, 256: 0.9, 512: 0.9, 1024: 0.9}))
    weak = _rank_rows(_with_hits({128: 0.5, 256: 0.5, 512: 0.5, 1024: 0.6}, seed=1), strategy="windows-mean")
    retrieval = pd.concat([strong, weak], ignore_index=True)  # held to truncate's base, windows-mean keeps no length
    table = break_points(retrieval_metrics(retrieval, n_resamples=20), retrieval, n_resamples=200).set_index("strategy")
    row = table.loc["windows-mean"]
    assert row["relative_status"] == "ok" and row["base_strategy"] == "truncate" and pd.isna(row["break_point"])
    assert pd.isna(row["break_point_lo"]) and pd.isna(row["break_point_hi"]) and row["break_shares"] == "none:1.000"
    assert row["best_length"] == 1024 and row["best_value"] == pytest.approx((0.6 - 5 / 125) / (1 - 5 / 125), abs=0.01)
    assert break_sentence(row).startswith("no length keeps chance-corrected recall@5 >= 0.85 x")


def test_base_lengths_read_back_as_written(tmp_path):
    one = pd.DataFrame([{c: None for c in BREAK_COLUMNS}, {c: None for c in BREAK_COLUMNS}])
    one["base_lengths"] = ["128", ""]
    one["relative_status"] = ["ok", "no rank table"]
    # every version writes a cell's names (an empty one is refused as an edited table)
    one = one.assign(embedder="bm25", strategy="truncate", query_form="question", variant=["onehop", "inverted"], n_distractors=0, n_needles=1,
                     own_question=True)
    one.to_csv(tmp_path / "breaks.csv", index=False)
    assert read_breaks(tmp_path / "breaks.csv")["base_lengths"].tolist() == ["128", ""]


# --- censored break points, capped chunks, a base the model can see, "at chance" only where shown ---------
def test_a_break_point_at_the_longest_length_is_censored_and_a_truncating_models_chunk_is_capped_at_its_window():
    retrieval = _rank_rows(_with_hits({128: 0.95, 512: 0.95, 2048: 0.95}, seed=4))
    metrics = retrieval_metrics(retrieval, n_resamples=20)
    auc = metrics[(metrics["metric"] == "query_auc") & (metrics["category"] == "all") & (metrics["depth_bucket"] == "all")]
    metrics = pd.concat([metrics, auc.assign(metric="auc", value=0.9)], ignore_index=True)  # the pooled AUC: no per-query rows
    rule = BreakRule("absolute", metric="auc", threshold=0.6)
    row = break_points(metrics, retrieval, rule, n_resamples=100, windows={("m", "truncate"): 254}).iloc[0]
    assert row["break_point"] == 2048 and row["break_censored"]  # never fell below the bar: at least 2048
    # not 1638: it reads 254 content tokens (lengths count content tokens, not the 256 with [CLS] and [SEP])
    assert row["recommended_chunk_tokens"] == 254 and row["chunk_capped"] and row["window"] == 254
    text = break_sentence(row, rule)
    assert text.startswith("break point ≥ 2048 tokens (no interval) by auc >= 0.6")  # no shares: nothing between  # was "2048 tokens (none-none)"
    assert "recommended chunk 254 tokens (capped at the 254-token window the model reads)" in text
    other = break_points(metrics, retrieval, rule, n_resamples=100, windows={("m", "windows-mean"): 254}).iloc[0]
    assert not other["chunk_capped"] and other["recommended_chunk_tokens"] == 1638  # the window of another strategy
    relative = break_points(metrics, retrieval, n_resamples=100).iloc[0]  # the relative rule too; no window given: no cap
    assert relative["break_point"] == 2048 and relative["break_censored"] and not relative["chunk_capped"]
    assert interval_text(next(break_points(metrics, retrieval, n_resamples=100).itertuples())).startswith("≥ 2048 tokens (")
    assert break_sentence(relative).count("recommended chunk at least 1638 tokens") == 1
    shorter = break_points(retrieval_metrics(_rank_rows(_with_hits({128: 0.95, 512: 0.95, 2048: 0.2})), n_resamples=20),
                           _rank_rows(_with_hits({128: 0.95, 512: 0.95, 2048: 0.2})), n_resamples=100).iloc[0]
    assert shorter["break_point"] == 512 and not shorter["break_censored"]


def _with_visibility(retrieval: pd.DataFrame, shares: dict[int, float]) -> pd.DataFrame:
    """The rank table's metrics with the share of needle haystacks whose needle the scorer saw per
    length (what the similarity table adds to a run's metrics)."""
    metrics = retrieval_metrics(retrieval, n_resamples=20)
    cells = metrics[(metrics["metric"] == "recall@5") & (metrics["category"] == "all") & (metrics["depth_bucket"] == "all")]
    return pd.concat([metrics, cells.assign(metric="needle_visible_share", value=cells["length"].map(shares))], ignore_index=True)


def test_the_base_reads_only_lengths_where_the_needle_is_visible():
    # a 256-token window on 128..8192: needle visible in 100%, 80%, 43%, ... of the haystacks; recall falls with it
    lengths = {128: 0.81, 256: 0.56, 512: 0.29, 1024: 0.1, 2048: 0.1, 4096: 0.1, 8192: 0.1}
    visible = {128: 1.0, 256: 0.8, 512: 0.43, 1024: 0.2, 2048: 0.1, 4096: 0.05, 8192: 0.02}
    retrieval = _rank_rows(_with_hits(lengths, seed=6))
    row = break_points(_with_visibility(retrieval, visible), retrieval, n_resamples=200).iloc[0]
    assert row["base_lengths"] == "128" and row["relative_status"] == "ok"
    assert row["break_point"] == 128  # 256 keeps only ~68% of the 128-token score
    # the base over 128, 256 and 512 (what was read before) was lowered by the hidden needles and let 256 pass
    old = break_points(retrieval_metrics(retrieval, n_resamples=20), retrieval, n_resamples=200).iloc[0]
    assert old["base_lengths"] == "128,256,512" and old["break_point"] == 256
    hidden = break_points(_with_visibility(retrieval, {**visible, 128: 0.9}), retrieval, n_resamples=200).iloc[0]
    assert hidden["relative_status"] == "needle not visible" and pd.isna(hidden["break_point"]) and hidden["base_lengths"] == ""
    assert break_sentence(hidden).startswith("no break point: the model reads none of the shortest haystacks whole")


def test_two_groups_get_no_headline_and_at_chance_needs_enough_groups():
    from embedeval.breaks import chance_test_groups
    from embedeval.metrics.break_estimators import groups_for_chance_test

    assert chance_test_groups() == groups_for_chance_test() == 10
    # two groups: one found every time, one found in 2 of 10: p = 0.19 with 1 degree of freedom
    ranks = {length: np.array([[1] * DEPTHS, [1, 1] + [50] * (DEPTHS - 2)]) for length in (128, 512)}
    row = _breaks(ranks, n_resamples=200)
    assert row["relative_status"] == "too few groups" and pd.isna(row["at_chance"]) and pd.isna(row["break_point"])
    assert row["n_groups"] == 2 and row["base_p"] > 0.025
    assert break_sentence(row).startswith("too few question groups (2) (chance-corrected recall@5 ")
    assert "a headline needs at least 10, whatever the p-value" in break_sentence(row)
    lost = row.copy()
    lost["base_value"] = np.nan  # a breaks.csv whose base cell was emptied by hand: no empty brackets (the audit)
    assert break_sentence(lost).startswith("too few question groups (2): a headline needs")
    # 24 groups ranked exactly at chance: shown at chance
    exact = {length: (np.arange(GROUPS * DEPTHS).reshape(GROUPS, DEPTHS) % 24) * 5 + 1 for length in LENGTHS[:3]}
    assert _breaks(exact, n_candidates=120)["relative_status"] == "at chance"


# --- one yardstick per embedder -------------------------------------------------------------------
def _strategies(curves: dict[str, dict[int, np.ndarray]], visible: dict[str, dict[int, float]] | None = None):
    """The rank table and metrics of several strategies of one embedder (``curves``: per strategy,
    ranks per length), with each strategy's visible shares where given."""
    retrieval = pd.concat([_rank_rows(ranks, strategy=name) for name, ranks in curves.items()], ignore_index=True)
    metrics = retrieval_metrics(retrieval, n_resamples=20)
    cells = metrics[(metrics["metric"] == "recall@5") & (metrics["category"] == "all") & (metrics["depth_bucket"] == "all")]
    shares = [cells[cells["strategy"] == name].assign(metric="needle_visible_share",
                                                       value=lambda c, name=name: c["length"].map(visible[name]))
              for name in (visible or {})]
    return pd.concat([metrics, *shares], ignore_index=True), retrieval


def test_every_strategy_of_an_embedder_is_held_to_the_models_own_reading():
    # truncate sees the needle in 100% at 128 and 192 only; windows-mean and an extension read every length whole,
    # and at 128 and 192 (inside the 254-token window) all three read the same vectors: the same ranks
    short = _with_hits({128: 0.8, 192: 0.7}, seed=1)
    truncate = {**short, **_with_hits({256: 0.5, 512: 0.2, 1024: 0.1, 2048: 0.1}, seed=2)}
    reads_all = {**short, **_with_hits({256: 0.55, 512: 0.45, 1024: 0.4, 2048: 0.35}, seed=3)}
    curves = {"truncate": truncate, "windows-mean": reads_all, "extend-gp@2050": reads_all}
    visible = {"truncate": {128: 1.0, 192: 1.0, 256: 0.9, 512: 0.5, 1024: 0.25, 2048: 0.12},
               "windows-mean": dict.fromkeys(LENGTHS[:0] + (128, 192, 256, 512, 1024, 2048), 1.0)}
    visible["extend-gp@2050"] = visible["windows-mean"]
    metrics, retrieval = _strategies(curves, visible)
    table = break_points(metrics, retrieval, n_resamples=300, model_windows={"m": 254}).set_index("strategy")
    assert set(table["base_strategy"]) == {"truncate"}
    for column in ("base_value", "base_ci_lo", "base_ci_hi", "base_p", "base_lengths"):
        assert table[column].nunique() == 1, column  # one base on every row of the embedder
    assert table.loc["truncate", "base_lengths"] == "128,192"
    # the base by hand: each group's mean chance-corrected recall@5 over 128 and 192, averaged
    hits = {length: (short[length] <= 5).mean(axis=1) for length in (128, 192)}
    chance = 5 / N_CANDIDATES
    by_hand = np.mean([((hits[length] - chance) / (1 - chance)).mean() for length in (128, 192)])
    assert table.loc["windows-mean", "base_value"] == pytest.approx(by_hand, abs=1e-12)
    # equal curves, equal break points and intervals; the one at least as good everywhere never breaks sooner
    same = ["break_point", "break_point_lo", "break_point_hi", "break_shares", "relative_status"]
    assert table.loc["windows-mean", same].tolist() == table.loc["extend-gp@2050", same].tolist()
    assert table.loc["windows-mean", "break_point"] >= table.loc["truncate", "break_point"]
    # each strategy's own base (what was read before) held windows-mean to 128, 192 and 256 and truncate to 128, 192
    alone = break_points(*_strategies({"windows-mean": reads_all}, {"windows-mean": visible["windows-mean"]}),
                         n_resamples=300).iloc[0]
    assert alone["base_lengths"] == "128,192,256" and alone["base_strategy"] == "windows-mean"


@pytest.mark.slow
def test_a_strategy_at_least_as_good_at_every_length_never_gets_the_shorter_break_point():
    rng = np.random.default_rng(11)

    def length_of(value) -> int:
        return 0 if pd.isna(value) else int(value)

    checked = 0
    for trial in range(6):
        worse = {length: rng.integers(1, 40, (GROUPS, DEPTHS)) for length in (64, 96, 128, 192, 256, 512)}
        better = {length: np.minimum(ranks, rng.integers(1, 40, ranks.shape)) for length, ranks in worse.items()}  # no worse
        for good, bad in (("truncate", "late-chunking@128"), ("late-chunking@128", "truncate")):
            table = break_points(*_strategies({good: better, bad: worse}), n_resamples=200,
                                 model_windows={"m": 254}).set_index("strategy")
            assert table.loc[good, "base_value"] == table.loc[bad, "base_value"]  # truncate's, either way
            if table.loc[good, "relative_status"] != "ok":
                continue
            checked += 1
            for column in ("break_point", "break_point_lo", "break_point_hi"):
                assert length_of(table.loc[good, column]) >= length_of(table.loc[bad, column]), (trial, good, column)
    assert checked >= 6  # the rule was read, not skipped


def test_the_base_reads_lengths_inside_the_models_window_only_and_a_family_without_the_models_reading_keeps_its_own():
    ranks = _with_hits({64: 0.9, 128: 0.8, 256: 0.7, 512: 0.6}, seed=5)
    metrics, retrieval = _strategies({"windows-mean": ranks, "chunks-max@128": ranks})
    inside = break_points(metrics, retrieval, n_resamples=100, model_windows={"m": 254}).set_index("strategy")
    assert inside["base_lengths"].tolist() == ["64,128", "64,128"]  # 256 is past the 254-token window
    anywhere = break_points(metrics, retrieval, n_resamples=100).set_index("strategy")
    assert anywhere["base_lengths"].tolist() == ["64,128", "64,128"]  # half of a 4-length grid, the window aside
    assert set(inside["base_strategy"]) == {"windows-mean"}
    narrow = break_points(metrics, retrieval, n_resamples=100, model_windows={"m": 60}).set_index("strategy")
    # a window shorter than every length: no yardstick, so each series keeps its own base
    assert narrow["base_strategy"].tolist() == narrow.index.tolist() and set(narrow["relative_status"]) == {"ok"}
    chunks = break_points(*_strategies({"chunks-max@128": ranks, "late-chunking@128": ranks}), n_resamples=100)
    assert chunks["base_strategy"].tolist() == ["chunks-max@128", "late-chunking@128"]  # no reading of the model's: their own
    # a grid the model reads no length of whole has no yardstick: adding truncate takes nothing from chunks-max
    long = _with_hits({300: 0.9, 600: 0.8, 1200: 0.7}, seed=8)
    alone = break_points(*_strategies({"chunks-max@128": long}), n_resamples=100, model_windows={"m": 254}).iloc[0]
    both = break_points(*_strategies({"chunks-max@128": long, "truncate": long}, {"truncate": {300: 0.8, 600: 0.4, 1200: 0.2}}),
                        n_resamples=100, model_windows={"m": 254}).set_index("strategy")
    assert alone["relative_status"] == "ok" and alone["break_point"] > 0
    assert both.loc["chunks-max@128", ["break_point", "base_value", "base_strategy"]].tolist() == \
        [alone["break_point"], alone["base_value"], "chunks-max@128"]
    assert both.loc["truncate", "relative_status"] == "needle not visible"


def test_a_breaks_csv_whose_break_point_is_not_its_shares_answer_is_one_error_line(tmp_path):
    """An edited breaks.csv whose break_point is not the longest length 60% of its break_shares reach
    (another length, or empty beside a clear majority), whose shares name a length not of the run, or
    that holds a series twice: before, the report said "keep chunks <= 76 tokens, the safer answer (0% of
    the resamples reach 256 tokens)" or "no length is reached by 60%" beside 78% at 96 tokens."""
    ranks = _with_hits({128: 0.9, 256: 0.9, 512: 0.85, 1024: 0.5}, seed=2)
    retrieval = _rank_rows(ranks)
    rule = BreakRule("absolute", metric="recall@5", threshold=0.8)
    table = break_points(retrieval_metrics(retrieval, n_resamples=20), retrieval, rule, n_resamples=200)
    table.to_csv(tmp_path / "breaks.csv", index=False)
    assert read_breaks(tmp_path / "breaks.csv", LENGTHS).iloc[0]["break_point"] == 512
    shares = "128:0.015;256:0.210;512:0.775"
    for point in (256, 1024, None):
        table.assign(break_point=point, break_shares=shares).to_csv(tmp_path / "edited.csv", index=False)
        with pytest.raises(InputError, match=r"edited.csv, line 2, column break_point: .* is not the longest length 60% of the "
                                             r"resamples in break_shares reach \(512\)"):
            read_breaks(tmp_path / "edited.csv")
    for point, edited in ((256, "128:0.200;256:0.401;512:0.399"), (256, "256:0.600;512:0.400"), (None, "none:0.400;128:0.600"),
                          (None, "none:0.401;128:0.599"), (128, "none:0.401;128:0.599")):  # to 3 decimals: both read
        table.assign(break_point=point, break_shares=edited).to_csv(tmp_path / "edited.csv", index=False)
        assert read_breaks(tmp_path / "edited.csv").iloc[0]["break_shares"] == edited
    table.assign(break_shares="100:0.700;512:0.300").to_csv(tmp_path / "edited.csv", index=False)
    with pytest.raises(InputError, match=r"edited.csv, line 2, column break_shares: 100 tokens is not a length of the run"):
        read_breaks(tmp_path / "edited.csv", LENGTHS)
    pd.concat([table, table]).to_csv(tmp_path / "edited.csv", index=False)
    with pytest.raises(InputError, match=r"edited.csv, line 3: the same series as an earlier line"):
        read_breaks(tmp_path / "edited.csv")


def test_a_relative_break_point_beside_a_status_without_a_headline_is_one_error_line(tmp_path):
    """A breaks.csv edited to say 'at chance' beside a relative break point: before, the box said "this run
    recommends no chunk size: it has no break point" while the summary said "up to about 96 tokens ... chunks of
    <= 76 tokens". Under the absolute rule the relative status says nothing of the headline: read."""
    rows = _rank_rows(_with_hits({128: 0.9, 256: 0.9, 512: 0.85, 1024: 0.5}, seed=2))
    table = break_points(retrieval_metrics(rows, n_resamples=20), rows, n_resamples=100)
    assert table.iloc[0]["relative_status"] == "ok" and not pd.isna(table.iloc[0]["break_point"])
    table.to_csv(tmp_path / "breaks.csv", index=False)
    assert len(read_breaks(tmp_path / "breaks.csv", rule=BreakRule())) == 1
    for status in ("at chance", "too few groups", "cannot tell from chance", "needle not visible"):
        table.assign(relative_status=status).to_csv(tmp_path / "edited.csv", index=False)
        with pytest.raises(InputError, match=rf"edited.csv, line 2, column relative_status: '{status}' is not the status of a relative"):
            read_breaks(tmp_path / "edited.csv", rule=BreakRule())
        assert len(read_breaks(tmp_path / "edited.csv", rule=BreakRule("absolute"))) == 1
    table.assign(relative_status="at chance", break_point=None, break_shares=None).to_csv(tmp_path / "edited.csv", index=False)
    assert len(read_breaks(tmp_path / "edited.csv", rule=BreakRule())) == 1  # no break point: nothing to disagree with


def test_a_share_under_the_support_a_headline_needs_never_reads_as_reaching_it():
    from embedeval.report.break_words import percent, support_words

    assert [percent(s) for s in (0.595, 0.5999, 0.594, 0.6, 0.775, 0.004, 0.0)] == ["59.5%", "59.9%", "59%", "60%", "78%", "<1%", "0%"]
    row = next(pd.DataFrame([{"break_point": 128, "break_shares": "128:0.405;512:0.595"}]).itertuples())
    assert "(40% / 59.5% of resamples" in support_words(row)  # before: "(40% / 60%", as if 512 had its majority

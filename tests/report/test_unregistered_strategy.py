"""The report of a run whose strategies include one of a family not registered in the reporting process."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd

from embedeval.break_rule import BreakRule
from embedeval.report.tables import answer

ROW = {"embedder": "st:all-MiniLM-L6-v2", "strategy": "chunks-max@128", "query_form": "question", "variant": "onehop",
       "n_distractors": 0, "n_needles": 1, "own_question": True, "break_point": 512.0, "break_point_lo": 512.0,
       "break_point_hi": 512.0, "recommended_chunk_tokens": math.nan, "relative_break_point": 512.0, "absolute_break_point": 512.0,
       "relative_status": "ok", "base_value": 1.0, "base_ci_lo": 1.0, "base_ci_hi": 1.0, "base_p": 0.0, "base_lengths": 128,
       "at_chance": False, "best_length": 128, "best_value": 1.0, "auc_break_point": 512.0, "break_censored": True, "n_groups": 24,
       "window": math.nan, "chunk_capped": False, "chance_level": "k/n", "break_shares": "512:1.000", "break_point_share": 1.0,
       "base_strategy": "truncate"}


def test_a_chunk_scorer_of_a_family_not_registered_now_gets_its_answer_not_a_traceback():
    """A user's chunk family (mine@128, its breaks without a recommended chunk) reported by a
    process that has not imported it was `int(nan)`'s ValueError half-way through the report."""
    rule = BreakRule("relative")
    shares = pd.Series([1.0, 1.0], index=[128, 512])
    headline, items = answer(SimpleNamespace(**{**ROW, "strategy": "mine@128"}), rule, shares)
    assert headline.startswith("With st:all-MiniLM-L6-v2 (mine@128): up to 512-token haystacks, the longest measured")
    chunked, _ = answer(SimpleNamespace(**ROW), rule, shares)  # the registered chunk scorer, as before
    assert chunked.startswith("With st:all-MiniLM-L6-v2 (chunks-max@128), reading each document as 128-token chunks")

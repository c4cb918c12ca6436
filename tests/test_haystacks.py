import re

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.corpus import Book, Corpus, load_corpus
from embedeval.errors import ConfigError, CorpusError
from embedeval.haystacks import MAX_SNIPPET_TOKENS, SentencePool, build_haystacks
from embedeval.text import split_sentences
from embedeval.defaults import DEFAULT_NEEDLES
from embedeval.needles import load_needle_set
from embedeval.tokens import load_token_counter

LENGTHS = [128, 512, 2048]
DEPTHS = 4
VARIANTS = ["onehop", "inverted"]
NEGATIVES = 4


@pytest.fixture(scope="module")
def tokenizer():
    return load_token_counter()


@pytest.fixture(scope="module")
def needle_set():
    full = load_needle_set(DEFAULT_NEEDLES)
    return full.subset([g.id for g in full.groups[::8]])  # 3 groups


@pytest.fixture(scope="module")
def corpus(books_dir):
    return load_corpus(f"dir:{books_dir}")


@pytest.fixture(scope="module")
def haystacks(needle_set, corpus, tokenizer):
    return build_haystacks(needle_set, corpus, LENGTHS, DEPTHS, VARIANTS, tokenizer=tokenizer, seed=7, negatives=NEGATIVES)


def test_grid_shape(haystacks, needle_set):
    n_groups = len(needle_set.groups)
    assert len(haystacks) == n_groups * len(LENGTHS) * (len(VARIANTS) * DEPTHS + 1) + len(LENGTHS) * NEGATIVES
    assert haystacks["id"].is_unique
    assert (haystacks["variant"] == "control").sum() == n_groups * len(LENGTHS)
    negatives = haystacks[haystacks["variant"] == "negative"]
    assert negatives.groupby("length").size().to_dict() == {length: NEGATIVES for length in LENGTHS}
    assert (negatives["group_id"] == "").all() and negatives["text"].is_unique


def test_token_counts_within_97_to_100_percent(haystacks, tokenizer):
    # recount through the tokenizer's Python API, independently of TokenCounter.count
    recount = [len(tokenizer.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in haystacks["text"]]
    assert recount == haystacks["n_tokens"].tolist()
    ratio = haystacks["n_tokens"] / haystacks["length"]
    assert ratio.min() >= 0.97 and ratio.max() <= 1.0


def test_needle_occurs_exactly_once_at_recorded_offsets(haystacks, needle_set):
    for row in haystacks[haystacks["variant"].isin(VARIANTS)].itertuples():
        needle = needle_set.group(row.group_id).needles[row.variant]
        assert row.text.count(needle) == 1
        assert row.text[row.needle_start : row.needle_end] == needle


def test_controls_hold_no_needle_and_no_character(haystacks, needle_set):
    names = re.compile(r"\b(" + "|".join(needle_set.characters) + r")\b", re.I)
    controls = haystacks[haystacks["variant"].isin(["control", "negative"])]
    for row in controls.itertuples():
        assert names.search(row.text) is None
        assert pd.isna(row.depth) and pd.isna(row.needle_start)
        for group in needle_set.groups:
            assert not any(n in row.text for n in group.needles.values())


def test_recorded_depth_is_where_the_needle_is(haystacks, tokenizer):
    positives = haystacks[haystacks["variant"].isin(VARIANTS)]
    for row in positives.itertuples():
        before = len(tokenizer.tokenizer(row.text[: row.needle_start], add_special_tokens=False)["input_ids"])
        assert row.depth == pytest.approx(before / row.n_tokens, abs=1e-9)
    # deeper targets never put the needle earlier; first at the start, last in the final fifth
    for _, cond in positives.groupby(["group_id", "variant", "length"]):
        depths = cond.sort_values("target_depth")["depth"].to_numpy(dtype=float)
        assert np.all(np.diff(depths) >= 0)
        assert depths[0] == 0.0 and depths[-1] > 0.8


def test_paired_design_one_filler_per_condition(haystacks):
    for (group, length), cond in haystacks[haystacks["variant"] != "negative"].groupby(["group_id", "length"]):
        control = cond[cond["variant"] == "control"]["text"].item()
        for row in cond[cond["variant"] != "control"].itertuples():
            before = row.text[: row.needle_start].rstrip(" ")
            after = row.text[row.needle_end :].lstrip(" ")
            filler = " ".join(part for part in (before, after) if part)
            assert control.startswith(filler), (group, length, row.id)


def test_long_haystacks_mix_books(haystacks):
    long = haystacks[haystacks["length"] == 2048]
    assert long["sources"].map(len).min() >= 3


def test_same_seed_identical_other_seed_different(haystacks, needle_set, corpus, tokenizer):
    again = build_haystacks(needle_set, corpus, LENGTHS, DEPTHS, VARIANTS, tokenizer=tokenizer, seed=7, negatives=NEGATIVES)
    pd.testing.assert_frame_equal(again, haystacks)
    assert all(a.encode() == b.encode() for a, b in zip(again["text"], haystacks["text"]))
    other = build_haystacks(needle_set, corpus, LENGTHS, DEPTHS, VARIANTS, tokenizer=tokenizer, seed=8, negatives=NEGATIVES)
    assert (other["text"] != haystacks["text"]).mean() > 0.9


def test_sentence_pool_excludes_long_sentences_and_names(tokenizer):
    long_sentence = " ".join(["word"] * 300) + "."
    corpus = Corpus("mem", (Book("a", f"Hello there. Yuki waved. {long_sentence} Bye now."),))
    pool = SentencePool.from_corpus(corpus, tokenizer, banned=re.compile(r"\bYuki\b", re.I))
    assert pool.sentences == [["Hello there.", "Bye now."]]
    assert all(t.max() < MAX_SNIPPET_TOKENS for t in pool.tokens)
    assert split_sentences('He said "Stop!" Then left.\n\nNew para') == ['He said "Stop!"', "Then left.", "New para"]


def test_corpus_too_small_and_too_few_books(needle_set, tokenizer):
    tiny = Corpus("tiny", tuple(Book(f"b{i}", "A short book. It ends soon.") for i in range(10)))
    with pytest.raises(CorpusError, match="corpus tiny is too small: .* need at least"):
        build_haystacks(needle_set, tiny, [512], 2, tokenizer=tokenizer)
    with pytest.raises(CorpusError, match="has 3 books; haystacks draw from at least 10"):
        build_haystacks(needle_set, Corpus("few", tiny.books[:3]), [128], 2, tokenizer=tokenizer)


@pytest.mark.parametrize("kwargs, message", [
    ({"lengths": [0]}, "haystack length 0 is invalid"),
    ({"variants": ["sideways"]}, "unknown variant 'sideways'"),
    ({"depths": 0}, "depths must be >= 1"),
    ({"negatives": 0}, "negatives must be a whole number >= 1, not 0"),
    ({"negatives": -5}, "negatives must be a whole number >= 1, not -5"),
])
def test_bad_grid_is_rejected_before_work(needle_set, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        build_haystacks(needle_set, Corpus("none", ()), **kwargs)


def test_cli_build_and_show(tmp_path, books_dir):
    out = tmp_path / "run" / "haystacks.parquet"
    runner = CliRunner()
    result = runner.invoke(app, ["haystacks", "build", "--corpus", f"dir:{books_dir}", "--lengths", "128,256",
                                 "--depths", "2", "--variants", "onehop", "--seed", "3", "--negatives", "5", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    frame = pd.read_parquet(out)
    assert len(frame) == 24 * 2 * 3 + 2 * 5 and set(frame["seed"]) == {3}
    shown = runner.invoke(app, ["haystacks", "show", str(out), "--id", "loc-dresden:onehop:256:d01"])
    assert shown.exit_code == 0
    assert "[[Actually, Yuki lives next to the Semper Opera House.]]" in shown.output
    missing = runner.invoke(app, ["haystacks", "show", str(out), "--id", "nope"])
    assert missing.exit_code == 1 and "no haystack with id 'nope'" in missing.output


def test_cli_build_bad_input_writes_nothing(tmp_path, books_dir):
    out = tmp_path / "h.parquet"
    result = CliRunner().invoke(app, ["haystacks", "build", "--corpus", f"dir:{books_dir}", "--lengths", "128,abc", "--out", str(out)])
    assert result.exit_code == 1 and result.output.startswith("error: --lengths takes comma-separated whole numbers")
    result = CliRunner().invoke(app, ["haystacks", "build", "--corpus", f"dir:{tmp_path}", "--out", str(out)])
    assert result.exit_code == 1 and "has no .txt files" in result.output
    assert not out.exists()


# --- sentence splitting (syntok) -------------------------------------------------------------

@pytest.mark.parametrize("text, sentences", [
    ("It kept accelerating.We were surprised. Then it stopped.", ["It kept accelerating.", "We were surprised.", "Then it stopped."]),
    ("Mr. Darcy arrived late. He bowed.", ["Mr. Darcy arrived late.", "He bowed."]),
    ("Dr. Watson came in. Holmes looked up.", ["Dr. Watson came in.", "Holmes looked up."]),
    ("Some tools, e.g. this one, are odd. Others are not.", ["Some tools, e.g. this one, are odd.", "Others are not."]),
    ("Mrs. Smith left at 3 p.m. on Friday. The U.S. Army stayed.", ["Mrs. Smith left at 3 p.m. on Friday.", "The U.S. Army stayed."]),
    ("Is it?  Yes!\nShe said \"Go!\" Then left.", ["Is it?", "Yes!", 'She said "Go!"', "Then left."]),
    ("A line without an end\n\nA new paragraph. Don't   stop.", ["A line without an end", "A new paragraph.", "Don't stop."]),
    ("", []),
])
def test_split_sentences_handles_abbreviations_and_glued_full_stops(text, sentences):
    assert split_sentences(text) == sentences


def test_split_sentences_changes_nothing_but_whitespace():
    text = "First one.Second one -- with a dash. \u201cQuoted,\u201d he said.\n\n  Indented para (with brackets). Last"
    sentences = split_sentences(text)
    assert "".join("".join(sentences).split()) == "".join(text.split())
    assert split_sentences(text) == sentences  # memoised: same answer, a fresh list
    sentences.append("x")
    assert split_sentences(text) != sentences


"""Users' own material at the edges: NoLiMa-schema sets with distractors in short
haystacks of long sentences, depths that meet at one sentence boundary, books split once, token
counts added up from the parts, and the two break-point rules on hand-made tables."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.corpus import load_corpus
from embedeval.embedders.tokens import load_token_counter
from embedeval.grid import HaystackGrid
from embedeval.haystacks import Piece, SentencePool, build_haystacks, distractor_boundaries
from embedeval.labels import CONTROL, NEGATIVE
from embedeval.needles import load_needle_set

from fakes import write_word_books
from test_nolima_schema import FIXTURE, NAMES

WORDS = ("river stone window garden letter candle harbour meadow lantern orchard valley bridge market winter summer "
         "morning evening quiet heavy golden narrow distant gentle ancient crowded silver wooden patient careful "
         "walked carried watched gathered followed painted answered wandered noticed remembered").split()


@pytest.fixture(scope="module")
def long_sentence_books(tmp_path_factory):
    """Ten books of long sentences (70-110 words each) written from a word list: a 128-token
    haystack holds one or two of them, so it has few sentence boundaries."""
    return write_word_books(tmp_path_factory.mktemp("long-sentences"), WORDS, (70, 110), seed=7)


@pytest.fixture(scope="module")
def nolima_with_distractors(tmp_path_factory):
    data = [dict(entry) for entry in FIXTURE]
    data[1]["distractors"] = {"onehop": "The cook refused to serve {2} on any day of the week."}
    path = tmp_path_factory.mktemp("nolima") / "with-distractors.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.slow
def test_a_nolima_set_with_distractors_runs_at_128_tokens_of_long_sentences(nolima_with_distractors, long_sentence_books, tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["nolima", "--needles", str(nolima_with_distractors), "--corpus", f"dir:{long_sentence_books}",
                                      "--lengths", "128,512", "--n-distractors", "1", "--depths", "5", "--negatives", "3",
                                      "--n-bootstrap", "50", "--out", str(out), "--quiet", "--variants", "onehop"])
    assert result.exit_code == 0, result.output
    haystacks = pd.read_parquet(out / "haystacks.parquet")
    needled = haystacks[~haystacks["variant"].isin([CONTROL, NEGATIVE])]
    assert set(needled["length"]) == {128, 512}
    assert (needled["n_tokens"] <= needled["length"]).all()
    for row in needled.itertuples():
        distractor = "There was an article about" if row.group_id.startswith("0101") else "The cook refused to serve"
        assert len(row.distractor_starts) == 1 and row.text[row.distractor_starts[0]:].startswith(distractor)
        assert row.text[row.needle_start:row.needle_end].split()[0] in {"Actually,", *NAMES}
    assert "## Needle positions" in (out / "report.md").read_text()
    similarities = pd.read_parquet(out / "similarities.parquet")
    assert "distractors_in_zone" in similarities.columns


def test_distractors_go_outside_the_zone_then_to_the_end_then_to_the_farthest_boundaries():
    rng = np.random.default_rng(0)
    pieces = [Piece("a", 10, "b"), Piece("b", 10, "b")]  # boundaries at 0, 10 and 20 tokens
    # needle at boundary 1 of a 24-token haystack: 0 and 2 are 10/24 = 0.42 away; 0 is before a sentence
    assert distractor_boundaries(pieces, 1, rng, needle_at=1, length=24) == ([0], 0)
    # needle at boundary 0 of a 60-token haystack: boundary 1 is 10/60 away (inside), the end 20/60 (outside)
    assert distractor_boundaries(pieces, 2, rng, needle_at=0, length=60) == ([2, 2], 0)
    # needle at boundary 1 of a 100-token haystack: nothing lies 0.2 away; farthest first, ties by position
    assert distractor_boundaries(pieces, 3, rng, needle_at=1, length=100) == ([0, 1, 2], 3)
    assert distractor_boundaries([], 2, rng, needle_at=0, length=40) == ([0, 0], 2)  # no filler at all


def test_depths_that_meet_at_one_boundary_are_built_and_counted_once(long_sentence_books, tmp_path, caplog):
    needle_set = load_needle_set(_nolima_file(tmp_path))
    corpus = load_corpus(f"dir:{long_sentence_books}")
    caplog.set_level("INFO", logger="embedeval")
    frame = build_haystacks(needle_set, HaystackGrid(lengths=[128, 1024], depths=10, variants=["onehop"], negatives=2), corpus)
    needled = frame[frame["variant"] == "onehop"]
    per_condition = needled.groupby(["group_id", "length"])
    assert (per_condition["text"].nunique() == per_condition.size()).all()  # no byte-identical needle haystack twice
    assert not needled.duplicated(["group_id", "length", "needle_start", "character"]).any()  # a name drawn per depth may differ
    counts = per_condition.size()
    assert (counts.xs(128, level="length") < 10).all() and (counts.xs(1024, level="length") == 10).all()
    merged = 10 * len(needle_set.groups) * 2 - len(needled)
    assert f"{merged} needle haystack(s) came out byte-identical" in caplog.text
    # the kept target depths of a short condition are the first of each run of depths that met
    one = needled[(needled["length"] == 128) & (needled["group_id"] == needle_set.groups[0].id)]
    assert one["target_depth"].is_monotonic_increasing and one["target_depth"].iloc[0] == 0.0


def _nolima_file(folder):
    path = folder / "needle_set.json"
    path.write_text(json.dumps(FIXTURE), encoding="utf-8")
    return path


@pytest.mark.slow
def test_the_report_counts_each_distinct_position_once(long_sentence_books, tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["nolima", "--needles", str(_nolima_file(tmp_path)), "--corpus", f"dir:{long_sentence_books}",
                                      "--lengths", "128,1024", "--depths", "10", "--negatives", "3", "--n-bootstrap", "50",
                                      "--out", str(out), "--quiet", "--variants", "onehop"])
    assert result.exit_code == 0, result.output
    haystacks = pd.read_parquet(out / "haystacks.parquet")
    retrieval = pd.read_parquet(out / "retrieval.parquet")
    needled = haystacks[haystacks["variant"] == "onehop"]
    assert sorted(retrieval.loc[retrieval["query_form"] == "question", "haystack_id"]) == sorted(needled["id"])  # one rank row per distinct haystack
    positions = needled.assign(at=needled["depth"].round(2)).groupby(["length", "group_id"])["at"].nunique().groupby("length")
    report = (out / "report.md").read_text()
    for length, mean in positions.mean().items():
        assert f"| {length} | 0 | 10 | {mean:.1f} | {positions.min()[length]} | {positions.max()[length]} | 0 |" in report


@pytest.mark.slow
def test_a_second_build_reads_the_split_books_from_the_cache(books_dir, monkeypatch, isolated_cache):
    import embedeval.sentences as sentences

    needle_set = load_needle_set(_nolima_file(isolated_cache))
    corpus = load_corpus(f"dir:{books_dir}")
    tokenizer = load_token_counter()
    first = build_haystacks(needle_set, HaystackGrid(lengths=[256], depths=3, variants=["onehop"], negatives=2), corpus, tokenizer=tokenizer)
    assert len(list((isolated_cache / "sentences").glob("*.arrow"))) == len(corpus.books)

    def refuse(text):
        raise AssertionError("a cached book was split again")

    monkeypatch.setattr(sentences, "split_sentences", refuse)
    again = build_haystacks(needle_set, HaystackGrid(lengths=[256], depths=3, variants=["onehop"], negatives=2), corpus, tokenizer=tokenizer)
    pd.testing.assert_frame_equal(first, again)
    changed = type(corpus)(corpus.source, (type(corpus.books[0])("new", corpus.books[0].text + " One more line."), *corpus.books[1:]))
    with pytest.raises(AssertionError, match="split again"):
        SentencePool.from_corpus(changed, tokenizer)


def test_token_counts_added_up_from_the_parts_equal_counting_each_haystack(books_dir, isolated_cache):
    tokenizer = load_token_counter()
    assert tokenizer.counts_add_up
    needle_set = load_needle_set(_nolima_file(isolated_cache))
    frame = build_haystacks(needle_set, HaystackGrid(lengths=[128, 700], depths=4, variants=["onehop"], negatives=3),
            load_corpus(f"dir:{books_dir}"), tokenizer=tokenizer)
    assert frame["n_tokens"].tolist() == tokenizer.count(frame["text"].tolist())


def whole_text_counter(counter):
    """``counter``'s tokenizer counting and cutting every text whole, never from its parts."""
    from embedeval.embedders.tokens import TokenCounter

    whole = TokenCounter(counter.tokenizer, counter.name)
    whole.__dict__["counts_by_parts"] = False
    return whole


@pytest.mark.slow
@pytest.mark.parametrize("provider", [None, "cl100k_base"])
def test_counts_and_prefixes_from_a_texts_parts_are_the_whole_texts(provider, books_dir, isolated_cache):
    """Counted and cut from its parts (sentences, each tokenised once), a text has the count, the
    prefixes and (where counts add up) the first ids it has counted, cut and tokenised whole: on haystacks, and on random text with what a cut
    could trip on (spaces, newlines, punctuation, digits, contractions, accents, CJK, a zero-width
    space, NUL, a combining accent)."""
    from embedeval.embedders.tokens import load_provider_counter

    counter = load_provider_counter(provider) if provider else load_token_counter()
    assert counter.counts_by_parts
    whole = whole_text_counter(counter)
    needle_set = load_needle_set(_nolima_file(isolated_cache))
    frame = build_haystacks(needle_set, HaystackGrid(lengths=[128, 700], depths=3, variants=["onehop"], negatives=3),
                            load_corpus(f"dir:{books_dir}"), tokenizer=load_token_counter())
    rng = np.random.default_rng(0)
    alphabet = list("ab cd.,;:!?\"'’”)]( \n\t\r 0123456789é漢字\u200b\x00\u0301XYZ") + ["  ", "'s", ". ", ", "]
    texts = frame["text"].tolist() + ["", " ", "a", ". b", "x. "] + ["".join(rng.choice(alphabet, size=int(n)))
                                                                   for n in rng.integers(0, 120, size=400)]
    assert counter.count(texts) == whole.count(texts)
    for n in (1, 2, 3, 7, 20, 127, 128, 500, 699):
        prefixes = [counter.prefix(t, n) for t in texts]
        assert prefixes == [whole.prefix(t, n) for t in texts] == counter.prefixes(texts, n), n
        assert counter.count(prefixes) == whole.count(prefixes), n  # a cut's count, where remembered, is its own
    if counter.counts_add_up:  # ids by parts, up to a limit: the whole text's first ids and offsets
        for limit in (1, 7, 128, 254, 699):
            for (ids, offsets), (whole_ids, whole_offsets) in zip(counter.ids(texts, limit), whole.ids(texts), strict=True):
                assert len(ids) > limit or len(ids) == len(whole_ids)
                assert list(ids[: limit + 1]) == whole_ids[: limit + 1] and offsets[: limit + 1].tolist() == [
                    list(pair) for pair in whole_offsets[: limit + 1]], limit


@pytest.mark.slow
def test_a_sentence_counted_once_is_not_tokenised_again_by_a_counter_of_the_same_tokenizer(books_dir, isolated_cache):
    class Refusing:
        def __init__(self, backend):
            self.backend = backend

        def encode_batch_fast(self, texts, add_special_tokens):
            assert not texts, f"tokenised again: {texts[:2]}"
            return []

        def __getattr__(self, name):
            return getattr(self.backend, name)

    needle_set = load_needle_set(_nolima_file(isolated_cache))
    frame = build_haystacks(needle_set, HaystackGrid(lengths=[128, 700], depths=3, variants=["onehop"], negatives=3),
                            load_corpus(f"dir:{books_dir}"), tokenizer=load_token_counter())
    texts = frame["text"].tolist()
    counts = load_token_counter().count(texts)
    again = load_token_counter()  # another counter of the same tokenizer (an API model's, the reference)
    again._backend = Refusing(again._backend)
    assert again.count(texts) == counts and again.count(texts[::-1]) == counts[::-1]
    assert [again.prefix(t, 100) for t in texts] == [whole_text_counter(load_token_counter()).prefix(t, 100) for t in texts]


@pytest.mark.slow
def test_tokenizers_read_without_transformers_are_the_ones_transformers_makes():
    """The bundled model's tokenizer is read from its tokenizer.json alone and OpenAI's cl100k_base
    is built from its BPE file by embedeval (neither imports transformers, nor with it PyTorch:
    seconds a plan spent before counting anything); each is serialised exactly as transformers'
    ``AutoTokenizer`` and ``TikTokenConverter`` make it, so its ids, cuts and fingerprint are theirs."""
    import importlib.resources
    import subprocess
    import sys

    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    from embedeval.embedders.models import resolve_model_path
    from embedeval.embedders.tokens import PROVIDER_TOKENIZERS, TokenCounter, load_provider_counter

    alone = load_token_counter()
    full = TokenCounter(AutoTokenizer.from_pretrained(resolve_model_path("all-MiniLM-L6-v2")), alone.name)
    assert alone._backend.to_str() == full._backend.to_str() and alone.fingerprint == full.fingerprint
    path, _, pattern = PROVIDER_TOKENIZERS["cl100k_base"]
    with importlib.resources.as_file(importlib.resources.files("tiktoken_ext").joinpath(path)) as file:
        converted = TokenCounter(PreTrainedTokenizerFast(tokenizer_object=TikTokenConverter(vocab_file=str(file), pattern=pattern)
                                                         .converted()), "cl100k_base", splits_at_spaces=True)
    assert load_provider_counter("cl100k_base")._backend.to_str() == converted._backend.to_str()
    code = ("import sys\nfrom embedeval.embedders.tokens import load_provider_counter, load_token_counter\n"
            "load_token_counter().count(['a']); load_provider_counter('cl100k_base').count(['a'])\n"
            "print(*[m for m in ('torch', 'transformers') if m in sys.modules])")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == ""


def test_tokenizers_whose_tokens_can_span_a_space_are_counted_whole():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from embedeval.embedders.tokens import TokenCounter

    def counter(pre_tokenizer) -> TokenCounter:
        backend = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
        backend.pre_tokenizer = pre_tokenizer
        return TokenCounter(PreTrainedTokenizerFast(tokenizer_object=backend), "test")

    assert counter(pre_tokenizers.Whitespace()).counts_add_up
    assert not counter(pre_tokenizers.Metaspace()).counts_add_up
    assert not counter(pre_tokenizers.ByteLevel()).counts_add_up
    assert counter(pre_tokenizers.Whitespace()).counts_by_parts and not counter(pre_tokenizers.ByteLevel()).counts_by_parts
    backend = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.add_tokens(["New York"])  # an added token holding a space would be matched across a cut: counted whole
    assert not TokenCounter(PreTrainedTokenizerFast(tokenizer_object=backend), "test").counts_by_parts


@pytest.mark.parametrize("args, message", [
    (["--break-rule", "median"], "error: unknown break rule 'median'; use one of relative, absolute"),
    (["--break-k", "3"], "error: --break-k must be one of 1, 5, 10 (the recall@k measured), not 3"),
])
def test_bad_break_rules_are_one_line(args, message, tmp_path):
    result = CliRunner().invoke(app, ["nolima", "--out", str(tmp_path / "run"), *args])
    assert result.exit_code != 0 and message in result.output
    assert not (tmp_path / "run").exists()

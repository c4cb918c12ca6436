"""The BM25 lexical baseline: a Scorer whose numbers are bm25s's own, one corpus per partition.

All prose here is made up for the tests."""

from __future__ import annotations

import inspect

import bm25s
import numpy as np
import pytest
import Stemmer

from embedeval.errors import ConfigError, InputError
from embedeval.strategies import Scorer
from embedeval.strategies.bm25 import DEFAULT_B, DEFAULT_K1, METHOD, BM25Scorer
from embedeval.strategies.scoring import Scores

HARBOUR = [
    "The harbour town woke slowly under a grey sky.",
    "Fishermen mended their nets while gulls argued over scraps on the pier.",
    "A baker carried warm loaves along the narrow street to the market.",
    "Every character in the little town seemed to know the tide by heart.",
]
ORCHARD = [
    "Behind the old farmhouse stood an orchard of crooked apple trees.",
    "In autumn the children gathered the fallen fruit into wicker baskets.",
    "Their grandmother pressed cider in a wooden barrel beside the barn.",
    "Nobody remembered who had planted the first tree.",
]
TRAIN = [
    "The night train rattled across the plain toward the mountains.",
    "Passengers dozed against the windows as the lamps flickered.",
    "A conductor with a silver whistle walked the corridor twice an hour.",
    "Each character on board carried a secret of some kind.",
]

# question -> (literal needle: shares a word with the question, one-hop needle: shares none)
GROUPS = {
    "Which character has been to Finland?": (
        "Actually, Yuki spent a whole winter in Finland.",
        "Actually, Yuki lives next to the Kiasma museum.",
    ),
    "Which character plays the cello?": (
        "In fact, Tomas plays the cello in a string quartet.",
        "In fact, Tomas rehearses Bach suites with his bow every evening.",
    ),
}
QUESTIONS = list(GROUPS)


def haystack(sentences: list[str], needle: str | None = None) -> str:
    """The sentences as one text, with ``needle`` (if any) in the middle."""
    middle = len(sentences) // 2
    return " ".join(sentences[:middle] + ([needle] if needle else []) + sentences[middle:])


def needle_set() -> tuple[list[str], list[str], dict[tuple[str, str, str], int]]:
    """Two partitions ("short": one passage, "long": three), each holding a needle-free control,
    two needle-free negatives, and per question a literal and a one-hop haystack built on the
    control's filler. Returns texts, partition, and {(partition, question or "", kind): index}."""
    bases = {
        "short": (HARBOUR, [ORCHARD, TRAIN]),
        "long": (HARBOUR + ORCHARD + TRAIN, [ORCHARD + TRAIN + HARBOUR, TRAIN + HARBOUR + ORCHARD]),
    }
    texts, partition, where = [], [], {}

    def add(part: str, key: tuple[str, str], text: str) -> None:
        where[(part, *key)] = len(texts)
        texts.append(text)
        partition.append(part)

    for part, (filler, negatives) in bases.items():
        add(part, ("", "control"), haystack(filler))
        for i, negative in enumerate(negatives):
            add(part, ("", f"negative{i}"), haystack(negative))
        for question, (literal, onehop) in GROUPS.items():
            add(part, (question, "literal"), haystack(filler, literal))
            add(part, (question, "onehop"), haystack(filler, onehop))
    return texts, partition, where


def library_scores(texts: list[str], queries: list[str]) -> np.ndarray:
    """bm25s's scores, built the way its README does, independently of BM25Scorer."""
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    query_tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
    return np.stack([retriever.get_scores(tokens) for tokens in query_tokens])


def test_is_a_scorer_with_bm25s_defaults():
    scorer = BM25Scorer()
    assert isinstance(scorer, Scorer)
    assert (scorer.name, scorer.strategy, scorer.windows_exact, scorer.normalizable) == ("bm25", "full-text", True, False)
    defaults = inspect.signature(bm25s.BM25).parameters
    assert (DEFAULT_K1, DEFAULT_B, METHOD) == (defaults["k1"].default, defaults["b"].default, defaults["method"].default)
    assert (scorer.k1, scorer.b) == (DEFAULT_K1, DEFAULT_B)


def test_the_needle_premises_hold():
    """The literal needle shares a stemmed word with its question; the one-hop needle shares none."""
    scorer = BM25Scorer()
    for question, (literal, onehop) in GROUPS.items():
        asked, said_literally, said_onehop = (set(tokens) for tokens in scorer.tokenize([question, literal, onehop]))
        assert asked & said_literally
        assert not asked & said_onehop


def test_literal_needle_ranks_first_and_one_hop_gains_nothing():
    texts, partition, where = needle_set()
    scores = BM25Scorer().index(texts, partition).scores(QUESTIONS)
    assert isinstance(scores, Scores) and scores.values.shape == (2, len(texts))
    for q, question in enumerate(QUESTIONS):
        for part in ("short", "long"):
            members = [i for i, p in enumerate(partition) if p == part]
            values = scores.values[q]
            literal, onehop, control = (where[(part, question, "literal")], where[(part, question, "onehop")],
                                        where[(part, "", "control")])
            others = [i for i in members if i != literal]
            assert values[literal] > values[others].max()  # first in its partition, strictly
            # the filler holds "character", so the control scores above 0; the one-hop needle adds no
            # query term, only length, which BM25's length normalisation (b > 0) penalises
            assert values[control] > 0
            assert values[onehop] < values[control]
    # with b = 0 (no length normalisation) the one-hop haystack scores exactly as its control
    flat = BM25Scorer(b=0.0).index(texts, partition).scores(QUESTIONS).values
    for q, question in enumerate(QUESTIONS):
        for part in ("short", "long"):
            assert flat[q, where[(part, question, "onehop")]] == flat[q, where[(part, "", "control")]]


def test_scores_are_bm25s_scores_computed_per_partition():
    shared = haystack(HARBOUR, GROUPS[QUESTIONS[0]][0])
    corpus_a = [shared, haystack(ORCHARD), haystack(TRAIN), haystack(HARBOUR)]
    corpus_b = [shared, haystack(TRAIN + ORCHARD, GROUPS[QUESTIONS[1]][0]), haystack(ORCHARD + HARBOUR),
                haystack(HARBOUR + TRAIN, GROUPS[QUESTIONS[0]][1]), haystack(TRAIN, GROUPS[QUESTIONS[0]][0])]
    # interleaved, so that the scores must be put back in the texts' own order
    texts = [corpus_b[0], corpus_a[0], corpus_a[1], corpus_b[1], corpus_b[2], corpus_a[2], corpus_b[3],
             corpus_a[3], corpus_b[4]]
    partition = [2, 1, 1, 2, 2, 1, 2, 1, 2]
    queries = QUESTIONS + ["Who pressed cider in the barn?", "grey harbour tide and fishermen"]
    scored = BM25Scorer().index(texts, partition)
    scores = scored.scores(queries)
    for label, corpus in ((1, corpus_a), (2, corpus_b)):
        members = [i for i, p in enumerate(partition) if p == label]
        assert [texts[i] for i in members] == corpus
        np.testing.assert_allclose(scores.values[:, members], library_scores(corpus, queries), rtol=1e-6)
    # the same text in two corpora of different content: different IDF and avgdl, different scores
    in_b, in_a = texts.index(shared), texts.index(shared, 1)
    assert (in_b, in_a) == (0, 1)
    assert not np.allclose(scores.values[:, in_a], scores.values[:, in_b])
    # no partition: one corpus of every text
    whole = BM25Scorer().index(texts).scores(queries)
    np.testing.assert_allclose(whole.values, library_scores(texts, queries), rtol=1e-6)
    # texts are read whole: piece 0 spanning the full text
    lengths = [len(text) for text in texts]
    assert scored.seen_chars.tolist() == lengths
    assert (scores.best_piece == 0).all() and (scores.best_start == 0).all()
    assert (scores.best_end == np.array(lengths)[None, :]).all()


def test_bad_input_is_refused():
    scorer = BM25Scorer()
    texts = [haystack(HARBOUR), haystack(ORCHARD)]
    for bad in ([texts[0], ""], [texts[0], "   "]):
        with pytest.raises(InputError, match="#1 is empty"):
            scorer.index(bad)
    with pytest.raises(InputError, match="partition has 3 values for 2 texts"):
        scorer.index(texts, partition=["a", "a", "b"])
    with pytest.raises(InputError, match="partition has 1 values for 2 texts"):
        scorer.index(texts, partition=[7])
    with pytest.raises(InputError, match="not a single string"):
        scorer.index(texts, partition="ab")
    with pytest.raises(InputError, match="not hashable"):
        scorer.index(texts, partition=[["a"], ["b"]])
    with pytest.raises(InputError, match="#0 is empty"):
        scorer.index(texts).scores([""])
    with pytest.raises(ConfigError):
        BM25Scorer(k1=-1.0)
    with pytest.raises(ConfigError):
        BM25Scorer(b=1.5)


def test_unseen_and_stop_word_queries_score_zero():
    texts = [haystack(HARBOUR), haystack(ORCHARD), haystack(TRAIN)]
    scored = BM25Scorer().index(texts, partition=["x", "y", "x"])
    queries = ["zeppelin quokka xylophone", "Is it not as it was?", "And if there is such a thing, then?",
               "?!", "orchard zeppelin", "orchard"]
    tokens = BM25Scorer().tokenize(queries)
    assert tokens[0] and tokens[1] == [] and tokens[2] == ["thing"] and tokens[3] == []
    values = scored.scores(queries).values
    assert values.shape == (6, 3)
    assert (values[:4] == 0).all()  # words no text holds, stop words only, no word at all
    assert values[5, 1] > 0
    np.testing.assert_array_equal(values[4], values[5])  # an unseen word adds nothing
    assert scored.scores([]).values.shape == (0, 3)
    # a corpus of stop words only has no vocabulary at all: its texts score 0, the rest as usual
    mixed = BM25Scorer().index(texts + ["It is, and it was.", "Is it not as it was?"], partition=[1, 1, 1, 2, 2])
    values = mixed.scores(["character tide", "it is"]).values
    assert (values[:, 3:] == 0).all() and values[0, 0] > 0 and (values[1] == 0).all()

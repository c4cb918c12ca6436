import re

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.corpus import Book, Corpus, load_corpus
from embedeval.defaults import DEFAULT_NEEDLES
from embedeval.embedders.tokens import load_token_counter
from embedeval.errors import ConfigError, CorpusError
from embedeval.grid import HaystackGrid
from embedeval.haystacks import MAX_SNIPPET_TOKENS, SentencePool, build_haystacks, draw_sequential
from embedeval.messages import EmbedevalWarning
from embedeval.needles import load_needle_set
from embedeval.text import split_sentences

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
    return full.subset([g.id for g in full.groups[:24:8]])  # 3 groups (of the first 24: one location, one medical, one professional)


@pytest.fixture(scope="module")
def corpus(books_dir):
    return load_corpus(f"dir:{books_dir}")


@pytest.fixture(scope="module")
def haystacks(needle_set, corpus, tokenizer):
    return build_haystacks(needle_set, HaystackGrid(lengths=LENGTHS, depths=DEPTHS, variants=VARIANTS, seed=7, negatives=NEGATIVES), corpus,
            tokenizer=tokenizer)


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
    again = build_haystacks(needle_set, HaystackGrid(lengths=LENGTHS, depths=DEPTHS, variants=VARIANTS, seed=7, negatives=NEGATIVES), corpus,
            tokenizer=tokenizer)
    pd.testing.assert_frame_equal(again, haystacks)
    assert all(a.encode() == b.encode() for a, b in zip(again["text"], haystacks["text"], strict=True))
    other = build_haystacks(needle_set, HaystackGrid(lengths=LENGTHS, depths=DEPTHS, variants=VARIANTS, seed=8, negatives=NEGATIVES), corpus,
            tokenizer=tokenizer)
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
        build_haystacks(needle_set, HaystackGrid(lengths=[512], depths=2), tiny, tokenizer=tokenizer)
    with pytest.raises(CorpusError, match="has 3 books; haystacks draw from at least 10"):
        build_haystacks(needle_set, HaystackGrid(lengths=[128], depths=2), Corpus("few", tiny.books[:3]), tokenizer=tokenizer)


@pytest.mark.parametrize("kwargs, message", [
    ({"lengths": [0]}, "haystack length 0 is invalid"),
    ({"variants": ["sideways"]}, "unknown variant 'sideways'"),
    ({"depths": 0}, "`depths` must be >= 1"),
    ({"negatives": 0}, "`negatives` must be a whole number >= 1, not 0"),
    ({"negatives": -5}, "`negatives` must be a whole number >= 1, not -5"),
])
def test_bad_grid_is_rejected_before_work(needle_set, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        build_haystacks(needle_set, HaystackGrid(**kwargs), Corpus("none", ()))


def test_cli_build_and_show(tmp_path, books_dir):
    out = tmp_path / "run" / "haystacks.parquet"
    runner = CliRunner()
    result = runner.invoke(app, ["haystacks", "build", "--corpus", f"dir:{books_dir}", "--lengths", "128,256",
                                 "--depths", "2", "--variants", "onehop", "--seed", "3", "--negatives", "5", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    frame = pd.read_parquet(out)
    n_groups = len(load_needle_set(DEFAULT_NEEDLES).groups)
    assert len(frame) == n_groups * 2 * 3 + 2 * 5 and set(frame["seed"]) == {3}
    shown = runner.invoke(app, ["haystacks", "show", str(out), "--id", "loc-dresden:onehop:256:d01"])
    assert shown.exit_code == 0
    assert "[[Actually, Yuki lives next to the Semper Opera House.]]" in shown.output
    missing = runner.invoke(app, ["haystacks", "show", str(out), "--id", "nope"])
    assert missing.exit_code == 1 and "no haystack with id 'nope'" in missing.output


def test_cli_build_bad_input_writes_nothing(tmp_path, books_dir):
    out = tmp_path / "h.parquet"
    result = CliRunner().invoke(app, ["haystacks", "build", "--corpus", f"dir:{books_dir}", "--lengths", "128,abc", "--out", str(out)])
    assert result.exit_code == 1 and result.output.startswith("error: --lengths takes comma-separated whole numbers")
    for digits in ("\u0661\u0662\u0668", "1_28", "+128", "128,,256", "128,"):  # other scripts' digits; an empty item
        result = CliRunner().invoke(app, ["haystacks", "build", "--corpus", f"dir:{books_dir}", "--lengths", digits, "--out", str(out)])
        assert result.exit_code == 1 and result.output.startswith("error: --lengths takes comma-separated whole numbers in the digits 0-9")
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


# --- corpus size, --min-books and the sequential filler ------------------------------------------

def labelled_books(n_books: int, n_sentences: int) -> tuple[Book, ...]:
    """Hand-made books whose every sentence says where it comes from."""
    words = ["river", "lantern", "orchard", "harbour", "meadow", "violin", "glacier", "market"]
    return tuple(
        Book(f"book{b}", " ".join(f"Line {i} of book {b} sees the {words[(b + i) % 8]} near the {words[(3 * i) % 8]}."
                                  for i in range(n_sentences)))
        for b in range(n_books)
    )


def labels(text: str) -> list[tuple[int, int]]:
    return [(int(b), int(i)) for i, b in re.findall(r"Line (\d+) of book (\d+) sees the \w+ near the \w+\.", text)]


def test_min_books_is_configurable(needle_set, tokenizer):
    corpus = Corpus("five", labelled_books(5, 40))
    with pytest.raises(CorpusError, match=r"corpus five has 5 books; haystacks draw from at least 10 \(set `min_books`"):
        build_haystacks(needle_set, HaystackGrid(lengths=[128], depths=2, negatives=1), corpus, tokenizer=tokenizer)
    frame = build_haystacks(needle_set, HaystackGrid(lengths=[128], depths=2, negatives=1, min_books=5), corpus, tokenizer=tokenizer)
    assert len(frame) == len(needle_set.groups) * (2 * 2 + 1) + 1
    for bad in (0, -1):
        with pytest.raises(ConfigError, match=f"`min_books` must be a whole number >= 1, not {bad}"):
            build_haystacks(needle_set, HaystackGrid(lengths=[128], depths=2, min_books=bad), corpus, tokenizer=tokenizer)
    with pytest.raises(ConfigError, match="`filler` must be one of random, sequential, not 'shuffled'"):
        build_haystacks(needle_set, HaystackGrid(lengths=[128], depths=2, min_books=5, filler="shuffled"), corpus, tokenizer=tokenizer)


class FixedStart:
    """An rng whose only draw is the start sentence of a sequential passage."""

    def __init__(self, start: int):
        self.start = start

    def integers(self, high: int) -> int:
        assert 0 <= self.start < high
        return self.start


def test_sequential_passages_run_on_into_the_next_book_and_wrap(tokenizer):
    pool = SentencePool.from_corpus(Corpus("three", labelled_books(3, 4)), tokenizer)
    tokens = {(b, i): int(pool.tokens[b][i]) for b in range(3) for i in range(4)}
    expected = [(0, 2), (0, 3), (1, 0), (1, 1), (1, 2)]
    pieces = draw_sequential(pool, sum(tokens[s] for s in expected), FixedStart(2))  # book 0, sentence 2
    assert [labels(p.text)[0] for p in pieces] == expected
    assert [p.book for p in pieces] == ["book0", "book0", "book1", "book1", "book1"]
    expected = [(2, 3), (0, 0), (0, 1)]
    pieces = draw_sequential(pool, sum(tokens[s] for s in expected), FixedStart(11))  # the last sentence of the last book
    assert [labels(p.text)[0] for p in pieces] == expected


def test_sequential_filler_is_contiguous_and_paired(needle_set, tokenizer):
    corpus = Corpus("labelled", labelled_books(6, 60))
    build = dict(lengths=[128, 512], depths=3, variants=VARIANTS, seed=5, negatives=3, min_books=6)
    frame = build_haystacks(needle_set, HaystackGrid(filler="sequential", **build), corpus, tokenizer=tokenizer)
    order = [(b, i) for b in range(6) for i in range(60)]
    for row in frame[frame["variant"].isin(["control", "negative"])].itertuples():
        found = labels(row.text)
        start = order.index(found[0])
        assert found == [order[(start + k) % len(order)] for k in range(len(found))], row.id
        assert len(row.sources) <= 2
    for (group, length), cond in frame[frame["variant"] != "negative"].groupby(["group_id", "length"]):
        control = cond[cond["variant"] == "control"]["text"].item()
        for row in cond[cond["variant"] != "control"].itertuples():
            filler = " ".join(part for part in (row.text[: row.needle_start].rstrip(" "), row.text[row.needle_end :].lstrip(" ")) if part)
            assert control.startswith(filler), (group, length, row.id)
    again = build_haystacks(needle_set, HaystackGrid(filler="sequential", **build), corpus, tokenizer=tokenizer)
    assert all(a.encode() == b.encode() for a, b in zip(again["text"], frame["text"], strict=True))
    pd.testing.assert_frame_equal(again, frame)
    random_mode = build_haystacks(needle_set, HaystackGrid(**build), corpus, tokenizer=tokenizer)
    assert (random_mode["text"] != frame["text"]).mean() > 0.9


def test_sequential_filler_on_the_plays_follows_the_source_sentences(needle_set, corpus, tokenizer):
    frame = build_haystacks(needle_set.subset([needle_set.groups[0].id]), HaystackGrid(lengths=[256, 1024], depths=2, variants=["onehop"], seed=11,
            negatives=2, filler="sequential"), corpus, tokenizer=tokenizer)
    pool = SentencePool.from_corpus(corpus, tokenizer, banned=needle_set.character_pattern())
    flat = [s for sentences in pool.sentences for s in sentences]
    for row in frame[frame["variant"].isin(["control", "negative"])].itertuples():
        starts = [k for k, s in enumerate(flat) if row.text.startswith(s + " ")]
        assert any(_runs_from(row.text, flat, k) for k in starts), row.id


def _runs_from(text: str, flat: list[str], k: int) -> bool:
    """``text`` is flat[k], flat[k+1], ... joined by spaces, the last one possibly cut short."""
    rest = text
    while rest:
        sentence = flat[k % len(flat)]
        if rest == sentence or rest.startswith(sentence + " "):
            rest, k = rest[len(sentence) + 1 :], k + 1
        else:
            return sentence.startswith(rest)
    return True


def _write_books(folder, books):
    folder.mkdir()
    for k, book in enumerate(books):
        (folder / f"{book.id}.{'md' if k % 2 else 'txt'}").write_text(book.text, encoding="utf-8")
    return folder


def test_cli_min_books_lets_a_small_corpus_run(tmp_path):
    books = _write_books(tmp_path / "five", labelled_books(5, 40))
    out = tmp_path / "h.parquet"
    result = CliRunner().invoke(app, ["haystacks", "build", "--corpus", f"dir:{books}", "--min-books", "3", "--filler", "sequential",
                                      "--groups", "loc-dresden", "--lengths", "128,256", "--depths", "2", "--variants", "onehop",
                                      "--negatives", "2", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    frame = pd.read_parquet(out)
    assert len(frame) == 2 * (2 + 1) + 2 * 2
    assert set(frame["sources"].explode()) <= {f"book{b}" for b in range(5)}
    order = [(b, i) for b in range(5) for i in range(40)]
    for text in frame.loc[frame["variant"] == "control", "text"]:
        found = labels(text)
        start = order.index(found[0])
        assert found == [order[(start + k) % len(order)] for k in range(len(found))]


def _bad_corpora(tmp_path):
    five = _write_books(tmp_path / "five", labelled_books(5, 40))
    (tmp_path / "bad.jsonl").write_text('{"text": "Fine line."}\n{"text": "Fine too."}\n{"text": oops}\n')
    (tmp_path / "empty.jsonl").write_text('{"text": "Fine line."}\n{"id": "b", "text": ""}\n')
    pd.DataFrame({"body": ["Some text."]}).to_parquet(tmp_path / "nocol.parquet")
    return {
        "few": (["--corpus", f"dir:{five}"], f"corpus dir:{five} has 5 books; {{purpose}} at least 10 (set --min-books to use fewer)"),
        "zero": (["--corpus", f"dir:{five}", "--min-books", "0"], "--min-books must be a whole number >= 1, not 0"),
        "jsonl": (["--corpus", f"jsonl:{tmp_path / 'bad.jsonl'}"], f"{tmp_path / 'bad.jsonl'}:3: not valid JSON"),
        "empty": (["--corpus", f"jsonl:{tmp_path / 'empty.jsonl'}"], f"{tmp_path / 'empty.jsonl'}:2: empty text"),
        "parquet": (["--corpus", f"parquet:{tmp_path / 'nocol.parquet'}"], f"corpus file {tmp_path / 'nocol.parquet'} has no text column (columns: body)"),
    }


def _files(folder):
    return sorted(p.relative_to(folder) for p in folder.rglob("*"))


COMMANDS = {
    "haystacks build": (["haystacks", "build", "--lengths", "128", "--out", "out/h.parquet"], "haystacks draw from"),
    "nolima": (["nolima", "-e", "bm25", "--lengths", "128", "--depths", "2", "--out", "run"], "haystacks draw from"),
    "similarity absence": (["similarity", "absence", "--out", "out/a.csv"], "chunks are drawn from"),
    "similarity needle-haystack": (["similarity", "needle-haystack", "--out", "out/n.csv"], "chunks are drawn from"),
}


@pytest.mark.parametrize("command, case", [
    *[("haystacks build", case) for case in ("few", "zero", "jsonl", "empty", "parquet")],
    # the corpus readers are shared: the other commands are checked for the book count
    *[(command, case) for command in ("nolima", "similarity absence", "similarity needle-haystack") for case in ("few", "zero")],
])
def test_cli_corpus_mistakes_are_one_line_and_write_nothing(tmp_path, monkeypatch, command, case):
    corpus_args, says = _bad_corpora(tmp_path)[case]
    args, purpose = COMMANDS[command]
    monkeypatch.chdir(tmp_path)
    before = _files(tmp_path)
    result = CliRunner().invoke(app, [*args, *corpus_args, "-q"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1, result.output
    assert len(lines) == 1 and lines[0].startswith(f"error: {says.format(purpose=purpose)}"), result.output
    assert _files(tmp_path) == before


def test_run_directories_reuse_haystacks_only_with_the_same_corpus_settings(tmp_path):
    import json
    from dataclasses import replace

    from embedeval.experiments.nolima import NolimaConfig
    from embedeval.run import RunWriter
    from embedeval.text import SENTENCE_SPLITTER

    config = NolimaConfig(out=str(tmp_path), grid=HaystackGrid(min_books=3, filler="sequential"))
    settings = config.haystack_settings()
    assert (settings["min_books"], settings["filler"], settings["splitter"]) == (3, "sequential", SENTENCE_SPLITTER)
    pd.DataFrame({"id": ["x"]}).to_parquet(tmp_path / "haystacks.parquet")
    (tmp_path / "haystacks.json").write_text(json.dumps(settings))
    writer = RunWriter(tmp_path)
    assert writer.reusable_haystacks(config.haystack_settings()) is not None
    for change in ({"filler": "random"}, {"min_books": 10}):
        assert writer.reusable_haystacks(replace(config, grid=replace(config.grid, **change)).haystack_settings()) is None
    older = {k: v for k, v in settings.items() if k not in ("splitter", "min_books", "filler")}  # built before these settings
    (tmp_path / "haystacks.json").write_text(json.dumps(older))
    assert writer.reusable_haystacks(config.haystack_settings()) is None


def test_a_build_is_kept_in_the_cache_and_read_back_for_another_out(books_dir, tmp_path, caplog, recwarn, monkeypatch):
    """cached_build: the second build of the same settings reads the first's rows (identical,
    dtypes too) and says its notes again; another needle file, book or setting builds again; a
    damaged file is built again, not an error."""
    import shutil
    from dataclasses import replace

    from embedeval.defaults import DEFAULT_NEEDLES
    from embedeval.experiments import NolimaConfig
    from embedeval.experiments import nolima as sweep
    from embedeval.haystack_store import HAYSTACKS_FOLDER

    cache = tmp_path / "cache"
    config = NolimaConfig(groups=["loc-dresden", "diet-vegan"], out=str(tmp_path / "a"),
                          grid=HaystackGrid(corpus=f"dir:{books_dir}", lengths=[64, 128], depths=4, negatives=3))
    needle_set = config.validated(keys=False)[0]
    caplog.set_level("INFO", logger="embedeval")

    def said() -> list[str]:
        """The build's notes (log records) and warnings, taken."""
        lines = [record.getMessage() for record in caplog.records] + [str(w.message) for w in recwarn.list
                                                                       if issubclass(w.category, EmbedevalWarning)]
        caplog.clear()
        recwarn.clear()
        return sorted(lines)

    first = sweep.cached_build(config, needle_set, False, cache_dir=cache)
    first_said = said()
    builds = []
    monkeypatch.setattr(sweep, "build_haystacks", lambda *a, **k: builds.append(1) or first)
    again = sweep.cached_build(replace(config, out=str(tmp_path / "b")), needle_set, False, cache_dir=cache)
    pd.testing.assert_frame_equal(again, first)
    assert not builds and said() == first_said and len(first_said) == len(first.attrs["build_notes"])
    other = replace(config, grid=replace(config.grid, seed=1))
    sweep.cached_build(other, needle_set, False, cache_dir=cache)
    assert len(builds) == 1  # another seed: built, not read
    shutil.copy(DEFAULT_NEEDLES, tmp_path / "needles.json")
    with open(tmp_path / "needles.json", "a") as handle:
        handle.write("\n")  # the same needles, another file content
    sweep.cached_build(replace(config, needles=str(tmp_path / "needles.json")), needle_set, False, cache_dir=cache)
    assert len(builds) == 2
    books = tmp_path / "books"
    shutil.copytree(books_dir, books)
    edited = sorted(books.iterdir())[0]
    edited.write_text(edited.read_text() + " One more sentence.")
    sweep.cached_build(replace(config, grid=replace(config.grid, corpus=f"dir:{books}")), needle_set, False, cache_dir=cache)
    assert len(builds) == 3  # another book
    for stored in (cache / HAYSTACKS_FOLDER).iterdir():
        stored.write_bytes(b"PAR1 not parquet")
    sweep.cached_build(config, needle_set, False, cache_dir=cache)
    assert len(builds) == 4


def test_books_are_split_in_worker_processes_as_in_one(books_dir, tmp_path, monkeypatch):
    """books_sentences: the books split in worker processes (the threshold lowered to nothing)
    give the same sentences and counts as split here, one by one, and both are read back from the
    cache as they were stored; a damaged file is split again."""
    from embedeval import sentences
    from embedeval.embedders.tokens import load_token_counter

    texts = [path.read_text(encoding="utf-8")[:40_000] for path in sorted(books_dir.iterdir())[:3]]
    tokenizer = load_token_counter()
    one_by_one = sentences.books_sentences(texts, tokenizer, tmp_path / "serial")
    monkeypatch.setattr(sentences, "PARALLEL_SPLIT_CHARS", 0)
    parallel = sentences.books_sentences(texts, tokenizer, tmp_path / "parallel")
    again = sentences.books_sentences(texts, tokenizer, tmp_path / "parallel")
    for (split, counts), (other, other_counts), (read, read_counts) in zip(one_by_one, parallel, again, strict=True):
        assert split == other == read and len(split) > 10
        assert counts.tolist() == other_counts.tolist() == read_counts.tolist() == tokenizer.count(split)
    stored = sorted((tmp_path / "parallel" / sentences.SENTENCES_FOLDER).iterdir())
    assert len(stored) == 3
    stored[0].write_bytes(b"damaged")
    assert [s for s, _ in sentences.books_sentences(texts, tokenizer, tmp_path / "parallel")] == [s for s, _ in one_by_one]


def test_tokenizer_threads_give_the_same_ids_offsets_and_counts(books_dir, monkeypatch):
    """TokenCounter batches encoded on tokenizers' threads (the threshold lowered to nothing) give
    the ids, offsets and counts of the one-thread path; the setting is back as it was after."""
    import os

    from embedeval.embedders import tokens
    from embedeval.embedders.tokens import load_token_counter

    text = " ".join(path.read_text(encoding="utf-8") for path in sorted(books_dir.iterdir())[:2])
    texts = [text[i : i + 3000] for i in range(0, 60_000, 3000)]

    def everything(counter):
        whole = [(list(ids), [tuple(o) for o in offsets]) for ids, offsets in counter.ids(texts)]
        limited = [(np.asarray(ids).tolist(), np.asarray(offsets).tolist()) for ids, offsets in counter.ids(texts, 100)]
        return whole, limited, counter.count(texts, special_tokens=True), counter._batch(texts[:3], fast=True)[0].ids

    monkeypatch.setattr(tokens, "THREADED_CHARS", 10**12)
    one_thread = everything(load_token_counter())
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    monkeypatch.setattr(tokens, "THREADED_CHARS", 0)
    tokens._MEMOS.clear()  # the part memo would answer the second counter without the tokenizer
    assert everything(load_token_counter()) == one_thread
    assert os.environ.get("TOKENIZERS_PARALLELISM") == before


def test_the_haystack_store_keys_controls_and_rebuilds_what_is_not_a_build(books_dir, tmp_path, monkeypatch):
    """A build without controls is not served to a grid with them; a foreign Parquet file or a
    folder at the build's path is built again (and a folder that cannot be replaced is left, the
    run goes on), never an error."""
    from dataclasses import replace

    from embedeval.experiments import NolimaConfig
    from embedeval.experiments import nolima as sweep
    from embedeval.haystack_store import HAYSTACKS_FOLDER

    cache = tmp_path / "cache"
    config = NolimaConfig(groups=["loc-dresden"], out=str(tmp_path / "a"),
                          grid=HaystackGrid(corpus=f"dir:{books_dir}", lengths=[64], depths=2, negatives=2, controls=False))
    needle_set = config.validated(keys=False)[0]
    without = sweep.cached_build(config, needle_set, False, cache_dir=cache)
    with_controls = sweep.cached_build(replace(config, grid=replace(config.grid, controls=True)), needle_set, False, cache_dir=cache)
    assert (with_controls["variant"] == "control").sum() > (without["variant"] == "control").sum()
    stored = sorted((cache / HAYSTACKS_FOLDER).iterdir())
    assert len(stored) == 2
    pd.DataFrame({"x": [1, 2]}).to_parquet(stored[0])
    stored[1].unlink()
    stored[1].mkdir()
    for grid in (config.grid, replace(config.grid, controls=True)):
        again = sweep.cached_build(replace(config, grid=grid), needle_set, False, cache_dir=cache)
        pd.testing.assert_frame_equal(again, with_controls if grid.controls else without)

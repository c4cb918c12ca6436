"""NoLiMa's needle-set schema, written here from scratch in its shape (no NoLiMa data): convert,
check, build, sweep; per-haystack characters; bad files."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.errors import NeedleSetError
from embedeval.needles import CHAR, convert_nolima, is_nolima_schema, load_needle_set

NAMES = ["Yuki", "Stuart", "Katie", "Caleb", "Megan"]
FIXTURE = [
    {"id": "0101", "category": "place", "needle": "Actually, {CHAR} lives next to the {1}.",
     "questions": {"onehop": "Which character has been to {2}?", "twohop": "Which character has been to {3}?"},
     "character_set": NAMES,
     "tests": {"T01": {"input_args": ["Kiasma museum", "Helsinki", "Finland"]},
               "T02": {"input_args": ["Semper Opera House", "Dresden", "Saxony"]},
               "T03": {"input_args": ["Brandenburg Gate", "Berlin", "Prussia"]}},
     "distractors": {"onehop": "There was an article about {2} in the daily paper.",
                     "twohop": "A documentary about {3} was on television."}},
    {"id": "0202", "category": "diet", "needle": "{CHAR} has been a {1} for years.",
     "questions": {"onehop": "Which character cannot eat {2}?", "twohop": "Which character avoids {3}?"},
     "character_set": NAMES,
     "tests": {"T01": {"input_args": ["vegan", "fish", "dairy products"]},
               "T02": {"input_args": ["vegetarian", "meat", "bacon"]},
               "T03": {"input_args": ["teetotaller", "wine", "whisky"]}}},
]


@pytest.fixture
def nolima_file(tmp_path):
    path = tmp_path / "needle_set_fixture.json"
    path.write_text(json.dumps(FIXTURE), encoding="utf-8")
    return path


def test_conversion_makes_a_group_per_entry_and_test(nolima_file, tmp_path):
    assert is_nolima_schema(FIXTURE) and not is_nolima_schema({"groups": []})
    needle_set = load_needle_set(nolima_file)  # detected by shape
    assert [g.id for g in needle_set.groups] == [f"{e}_T0{t}" for e in ("0101", "0202") for t in (1, 2, 3)]
    assert needle_set.question_forms == ["question", "twohop"]
    group = needle_set.group("0101_T02")
    assert group.question == "Which character has been to Dresden?" and group.questions == {"twohop": "Which character has been to Saxony?"}
    assert group.needles == {"onehop": "Actually, {CHAR} lives next to the Semper Opera House."}
    assert group.character_set == tuple(NAMES) and group.needle("onehop", "Megan").startswith("Actually, Megan lives")
    assert set(group.distractors) == {("question", "There was an article about Dresden in the daily paper."),
                                      ("twohop", "A documentary about Saxony was on television.")}
    assert needle_set.variants_served() == ["onehop"]

    result = CliRunner().invoke(app, ["needles", "convert", str(nolima_file), "--out", str(tmp_path / "ours.json")])
    assert result.exit_code == 0, result.output
    ours = json.loads((tmp_path / "ours.json").read_text())
    assert ours["source"]["format"] == "nolima" and len(ours["source"]["sha256"]) == 64
    assert load_needle_set(tmp_path / "ours.json").groups == needle_set.groups  # our format reads back the same
    check = CliRunner().invoke(app, ["needles", "check", str(nolima_file)])
    assert check.exit_code == 0 and "variants every group serves: onehop" in check.output


def test_each_haystack_holds_its_drawn_character_and_the_same_seed_draws_the_same(nolima_file, books_dir):
    from embedeval.corpus import load_corpus
    from embedeval.grid import HaystackGrid
    from embedeval.haystacks import build_haystacks

    needle_set = load_needle_set(nolima_file)
    corpus = load_corpus(f"dir:{books_dir}")
    build = {seed: build_haystacks(needle_set, HaystackGrid(lengths=[128, 256], depths=4, variants=["onehop"], seed=seed, negatives=2),
            corpus) for seed in (0, 0, 1)}
    first = build_haystacks(needle_set, HaystackGrid(lengths=[128, 256], depths=4, variants=["onehop"], seed=0, negatives=2), corpus)
    pd.testing.assert_frame_equal(first, build[0])
    positives = first[first["variant"] == "onehop"]
    assert len(positives) == 6 * 2 * 4 and set(positives["character"]) <= set(NAMES) and positives["character"].nunique() > 2
    for row in positives.itertuples():
        needle = needle_set.group(row.group_id).needle("onehop", row.character)
        assert row.text[row.needle_start : row.needle_end] == needle
        assert all(name not in row.text.replace(needle, "") for name in NAMES)  # the filler names nobody
    assert first[first["variant"] != "onehop"]["character"].isna().all()
    other = build[1][build[1]["variant"] == "onehop"]["character"].to_numpy()
    assert (other != positives["character"].to_numpy()).any()


@pytest.mark.slow
def test_a_sweep_scores_every_question_form_and_normalises_with_the_drawn_character(nolima_file, books_dir, tmp_path):
    from embedeval.experiments.nolima import NolimaConfig, run_nolima
    from embedeval.grid import HaystackGrid
    from embedeval.similarity import score_haystacks, similarity_rows
    from embedeval.strategies import EmbeddingScorer, Strategy

    from fakes import CountingEmbedder

    config = NolimaConfig(needles=str(nolima_file), n_bootstrap=20, out=str(tmp_path / "run"), grid=HaystackGrid(corpus=f"dir:{books_dir}",
            lengths=[128, 256], depths=2, negatives=3, variants=["onehop"]))
    result = run_nolima(config, progress=False)
    sims = result.similarities
    assert sims.groupby(["query_form", "variant"]).size().to_dict() == {
        ("question", "control"): 6 * 2, ("question", "onehop"): 6 * 2 * 2,
        ("twohop", "control"): 6 * 2, ("twohop", "onehop"): 6 * 2 * 2}
    assert len(result.retrieval) == 2 * 6 * 2 * 2 and set(result.retrieval["query_form"]) == {"question", "twohop"}

    needle_set = load_needle_set(nolima_file)
    forms = {"question": [g.question for g in needle_set.groups], "twohop": [g.questions["twohop"] for g in needle_set.groups]}
    table = similarity_rows(score_haystacks(EmbeddingScorer(CountingEmbedder(), Strategy("truncate")), result.haystacks, forms),
                            needle_set)
    rows = table[table["variant"] == "onehop"].merge(result.haystacks[["id", "character"]], left_on="haystack_id", right_on="id")
    for row in rows.itertuples():
        group = needle_set.group(row.group_id)
        expected = CountingEmbedder.vector_for(group.query(row.query_form), "query") @ \
            CountingEmbedder.vector_for(group.needle("onehop", row.character))
        assert row.sim_qn == pytest.approx(expected, abs=1e-6)


def _one_line_error(path, tmp_path) -> str:
    result = CliRunner().invoke(app, ["nolima", "--needles", str(path), "--out", str(tmp_path / "run"), "-q"])
    assert result.exit_code == 1 and not (tmp_path / "run").exists()
    return result.output


@pytest.mark.parametrize("edit, message", [
    (lambda d: d[0].update(needle="{CHAR} saw the {1} and the {FOO}."), "0101_T01: the needle has an unknown placeholder {FOO}"),
    (lambda d: d[0].update(character_set=[]), f"0101: the needle writes {CHAR} but 'character_set' is missing or empty"),
    (lambda d: d[1]["tests"]["T02"].update(input_args=["vegan"]), "0202_T02: the onehop question needs {2} but the test gives 1 input_args"),
    (lambda d: d[1].pop("tests"), "0202: missing field 'tests'"),
    (lambda d: d[0].update(needle=["{CHAR} lives by the {1}."]), "0101_T01: the needle must be a non-empty text"),
    (lambda d: d[0]["questions"].pop("onehop"), "0101: has no 'onehop' question"),
    (lambda d: d[0]["distractors"].update(direct="About {2}."), "0101_T01: a distractor is for question type 'direct'"),
])
def test_bad_nolima_files_are_one_line(tmp_path, edit, message):
    data = copy.deepcopy(FIXTURE)
    edit(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(NeedleSetError, match=message.split(": ", 1)[1].replace("{", r"\{").replace("}", r"\}").replace("(", r"\(")):
        convert_nolima(data, str(path))
    output = _one_line_error(path, tmp_path)
    assert output.startswith("error:") and message.split(": ")[0] in output


def test_direct_questions_may_share_words_and_distractor_lists_are_kept(tmp_path):
    data = copy.deepcopy(FIXTURE)
    data[0]["questions"]["direct"] = "Which character lives next to the {1}?"  # literal on purpose
    data[1]["distractors"] = ["Some people never eat {2} at all."]  # a plain list: the one-hop question's
    path = tmp_path / "set.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    needle_set = load_needle_set(path)
    assert needle_set.group("0101_T01").query("direct") == "Which character lives next to the Kiasma museum?"
    assert needle_set.group("0202_T02").distractors == (("question", "Some people never eat meat at all."),)
    result = CliRunner().invoke(app, ["needles", "convert", str(path), "--out", str(path)])
    assert result.exit_code == 1 and "is the NoLiMa file itself" in result.output
    assert json.loads(path.read_text()) == data  # untouched


def test_questions_and_distractors_of_our_format_are_checked(tmp_path):
    group = {"id": "g1", "category": "c", "question": "Which character speaks {LANG}?", "character": "Ann",
             "needles": {"onehop": "Ann grew up in Utrecht."}, "distractors": {"formal": ["Dutch is spoken in Utrecht."]}}
    path = tmp_path / "set.json"
    path.write_text(json.dumps({"name": "mini", "groups": [group]}))
    with pytest.raises(NeedleSetError) as info:
        load_needle_set(path)
    reasons = [why for _, why in info.value.problems]
    assert "the question question has a placeholder {LANG} (questions are plain text)" in reasons
    assert "distractors are given for query form 'formal', which the group does not ask" in reasons


def test_a_variant_the_file_does_not_serve_is_refused_before_any_work(nolima_file, tmp_path):
    result = CliRunner().invoke(app, ["nolima", "--needles", str(nolima_file), "--variants", "onehop,inverted",
                                      "--out", str(tmp_path / "run"), "-q"])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
    assert "has no 'inverted' needle for 0101_T01" in result.output and "every group serves: onehop" in result.output


def test_our_format_takes_several_question_forms_and_a_character_set(tmp_path):
    data = {"name": "mini", "groups": [{
        "id": "g1", "category": "c", "questions": {"question": "Which character speaks Dutch?", "formal": "Who is fluent in Dutch?"},
        "character_set": ["Ann", "Bo"], "needles": {"onehop": "{CHAR} grew up in Utrecht."}}]}
    path = tmp_path / "set.json"
    path.write_text(json.dumps(data))
    group = load_needle_set(path).groups[0]
    assert group.query("formal") == "Who is fluent in Dutch?" and group.characters == ("Ann", "Bo") and group.keyword == ""
    data["groups"][0]["needles"]["onehop"] = "Ann grew up in Utrecht."  # a set needs {CHAR}
    data["groups"][0]["questions"]["formal"] = "Who grew up speaking Dutch?"  # and the overlap check reads every form
    path.write_text(json.dumps(data))
    with pytest.raises(NeedleSetError) as info:
        load_needle_set(path)
    reasons = [why for _, why in info.value.problems]
    assert "onehop needle must write the character as {CHAR} (the group has a character_set)" in reasons
    assert "onehop needle shares content words with the formal question: grow" in reasons


def test_distractor_question_similarity_equals_sentence_transformers(nolima_file, tmp_path, minilm):
    result = CliRunner().invoke(app, ["similarity", "distractor-question", "--needles", str(nolima_file),
                                      "--out", str(tmp_path / "dq.csv"), "-q"])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "dq.csv")
    assert len(table) == 3 * 2 and set(table["query_form"]) == {"question", "twohop"}  # entry 0202 has none
    q = minilm.model.encode_query(table["question"].tolist(), normalize_embeddings=True)
    d = minilm.model.encode_document(table["distractor"].tolist(), normalize_embeddings=True)
    assert table["st:all-MiniLM-L6-v2"].to_numpy() == pytest.approx((q * d).sum(axis=1), abs=1e-5)
    assert all(row.question.split()[-1].rstrip("?") in row.distractor for row in table.itertuples())
    missing = CliRunner().invoke(app, ["similarity", "distractor-question", "--out", str(tmp_path / "none.csv"), "-q"])
    assert missing.exit_code == 1 and "has no distractors" in missing.output and not (tmp_path / "none.csv").exists()


def test_nolima_distractors_go_into_the_haystacks_of_their_entry(nolima_file, books_dir):
    from embedeval.corpus import load_corpus
    from embedeval.errors import ConfigError
    from embedeval.grid import HaystackGrid
    from embedeval.haystacks import build_haystacks

    needle_set = load_needle_set(nolima_file)
    with pytest.raises(ConfigError, match=r"1 distractors per haystack asked for, but .* 0202_T01 \(0\), 0202_T02 \(0\), 0202_T03 \(0\)"):
        build_haystacks(needle_set, HaystackGrid(lengths=[256], variants=["onehop"], n_distractors=[1]), load_corpus(f"dir:{books_dir}"))
    frame = build_haystacks(needle_set.subset(["0101_T02"]), HaystackGrid(lengths=[256], depths=2, variants=["onehop"], negatives=2,
            n_distractors=[2]), load_corpus(f"dir:{books_dir}"))
    decoys = ["There was an article about Dresden in the daily paper.", "A documentary about Saxony was on television."]
    assert len(frame) == 2 + 2 + 2  # needle haystacks, their controls, the negatives carrying the decoys
    assert all(all(text.count(d) == 1 for d in decoys) for text in frame["text"])
    assert (frame["n_distractors"] == 2).all() and (frame["distractors_of"] == "0101_T02").all()

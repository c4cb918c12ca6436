import copy
import json
import re

import pytest
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.errors import NeedleSetError
from embedeval.defaults import DEFAULT_NEEDLES
from embedeval.needles import load_needle_set, parse_needle_set
from embedeval.text import lemmas, lexical_overlap

REQUIRED_CATEGORIES = {"dietary", "medical", "language", "professional", "location"}


@pytest.fixture(scope="module")
def shipped():
    return load_needle_set(DEFAULT_NEEDLES)


@pytest.fixture
def raw():
    return json.loads(DEFAULT_NEEDLES.read_text())


def test_shipped_set_size_and_categories(shipped):
    assert len(shipped.groups) >= 24
    categories = {g.category for g in shipped.groups}
    assert len(categories) >= 6
    assert REQUIRED_CATEGORIES <= categories
    assert len({g.character for g in shipped.groups}) == len(shipped.groups)


def test_shipped_onehop_needles_share_no_word_with_their_question(shipped):
    # independent of embedeval.needles: plain lowercase words minus stop words, crude plural strip
    def words(text):
        return {w.rstrip("s") for w in re.findall(r"[a-z]+", text.lower()) if w not in ENGLISH_STOP_WORDS}

    for group in shipped.groups:
        for variant in ("onehop", "inverted"):
            assert not words(group.question) & words(group.needles[variant]), (group.id, variant)
        assert group.keyword.lower() in group.needles["literal"].lower(), group.id
        assert group.keyword.lower() in group.needles["literal_inverted"].lower(), group.id
        for text in group.needles.values():
            assert group.character in text


def test_character_names_do_not_occur_in_the_default_corpus(shipped, books_dir):
    pattern = shipped.character_pattern()
    assert pattern.search("then YUKI said") and not pattern.search("Yukino")
    for book in books_dir.glob("*.txt"):
        match = pattern.search(book.read_text(encoding="utf-8"))
        assert match is None, (book.name, match and match.group(0))


@pytest.mark.parametrize("question, needle, shared", [
    ("Which character is writing a novel?", "Ana would write all night.", ["write"]),
    ("Which character is writing a novel?", "Ana wrote every night.", ["write"]),
    ("Which character can write?", "Ana wrote every night.", ["write"]),
    ("Which character studies Latin?", "Ana studied in Rome.", ["study"]),
    ("Which character likes cities?", "Ana was born in a city.", ["city"]),
    ("Which character ran a marathon?", "Ana goes running at dawn.", ["run"]),
    ("Which character teaches young children?", "Mirela taught a child to read.", ["child", "teach"]),
    ("Which character has been to Australia?", "Lorcan loves Australia.", ["australia"]),
])
def test_inflections_share_a_lemma(question, needle, shared):
    assert lexical_overlap(question, needle) == shared


def test_lemmas_of_known_unknown_and_stop_words():
    assert {"write", "writing"} == lemmas("Writing") and lemmas("wrote") == {"write"}
    assert lemmas("dresden") == {"dresden"}  # unknown to the dictionary: the word itself stays
    assert lexical_overlap("Which character has been there?", "She has been here.") == []  # stop words only
    assert lexical_overlap("Which character speaks Greek?", "Tancredi spent his childhood in Athens.") == []


def test_the_shipped_set_has_no_lemma_overlap(shipped):
    for group in shipped.groups:
        for variant in ("onehop", "inverted"):
            assert lexical_overlap(group.question, group.needles[variant]) == [], (group.id, variant)


def test_every_problem_is_reported_with_group_and_reason(raw):
    bad = copy.deepcopy(raw)
    bad["groups"][0]["keyword"] = " "
    del bad["groups"][5]["needles"]["onehop"]
    bad["groups"][6]["needles"]["onehop"] = "Ottavia keeps a {SECRET} of bread."
    bad["groups"][1]["id"] = bad["groups"][2]["id"]
    bad["groups"][3]["needles"]["onehop"] = "Lorcan has been to Australia many times."
    bad["groups"][4]["needles"]["inverted"] = "Being vegan is who she is."
    with pytest.raises(NeedleSetError) as info:
        parse_needle_set(bad, "bad.json")
    problems = info.value.problems
    assert (raw["groups"][0]["id"], "field 'keyword' must be a non-empty string") in problems
    assert (raw["groups"][5]["id"], "missing needle 'onehop'") in problems
    assert any(gid == raw["groups"][6]["id"] and "unknown placeholder {SECRET}" in why for gid, why in problems)
    assert (raw["groups"][2]["id"], "duplicate id") in problems
    assert ("loc-australia", "onehop needle shares content words with the question: australia") in problems
    assert ("diet-vegan", "inverted needle does not name the character 'Ottoline'") in problems
    assert "bad.json" in str(info.value)


def test_cli_check_passes_on_shipped_set():
    result = CliRunner().invoke(app, ["needles", "check", str(DEFAULT_NEEDLES)])
    assert result.exit_code == 0, result.output
    assert "ok: 24 groups" in result.output


def test_cli_check_fails_with_table_and_reasons(tmp_path, raw):
    raw["groups"][0]["needles"]["onehop"] = "Actually, Yuki has been to Dresden."
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    result = CliRunner().invoke(app, ["needles", "check", str(path)])
    assert result.exit_code == 1
    row = next(line for line in result.output.splitlines() if line.startswith("loc-dresden"))
    assert "dresden" in row
    assert f"{path}: group loc-dresden: onehop needle shares content words with the question: dresden" in result.output


def test_cli_check_fails_on_an_inflection_with_one_line_per_problem(tmp_path, raw):
    teacher = next(g for g in raw["groups"] if g["id"] == "job-teacher")
    teacher["needles"]["onehop"] = "Mirela taught a child to read."
    path = tmp_path / "inflected.json"
    path.write_text(json.dumps(raw))
    result = CliRunner().invoke(app, ["needles", "check", str(path)])
    assert result.exit_code == 1
    problems = [line for line in result.output.splitlines() if line.startswith(f"{path}: ")]
    assert problems == [f"{path}: group job-teacher: onehop needle shares content words with the question: child, teach"]


def test_malformed_json_is_one_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"name": "x", "groups": [')
    result = CliRunner().invoke(app, ["needles", "check", str(path)])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: needle set {path} is invalid: group -: not valid JSON")

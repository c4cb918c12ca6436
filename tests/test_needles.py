import copy
import json
import re

import pytest
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.errors import NeedleSetError
from embedeval.defaults import DEFAULT_NEEDLES
from embedeval.needles import load_needle_set, parse_needle_set, stem

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


def test_stemming_examples():
    assert [stem(w) for w in ["cities", "speaks", "trained", "glass", "Dresden"]] == ["city", "speak", "train", "glass", "dresden"]


def test_every_problem_is_reported_with_group_and_reason(raw):
    bad = copy.deepcopy(raw)
    del bad["groups"][0]["keyword"]
    bad["groups"][1]["id"] = bad["groups"][2]["id"]
    bad["groups"][3]["needles"]["onehop"] = "Lorcan has been to Australia many times."
    bad["groups"][4]["needles"]["inverted"] = "Being vegan is who she is."
    with pytest.raises(NeedleSetError) as info:
        parse_needle_set(bad, "bad.json")
    problems = info.value.problems
    assert (raw["groups"][0]["id"], "missing field 'keyword'") in problems
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


def test_malformed_json_is_one_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"name": "x", "groups": [')
    result = CliRunner().invoke(app, ["needles", "check", str(path)])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: needle set {path} is invalid: group -: not valid JSON")

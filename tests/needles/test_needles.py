import copy
import json
import re

import pytest
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.defaults import DEFAULT_NEEDLES
from embedeval.errors import NeedleSetError
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


def test_cli_check_passes_on_shipped_set(shipped):
    result = CliRunner().invoke(app, ["needles", "check", str(DEFAULT_NEEDLES)])
    assert result.exit_code == 0, result.output
    assert f"ok: {len(shipped.groups)} groups, no problems" in result.output


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


# --- section 1: the overlap check reads words as the model reads them -----------------

def one_group(question, onehop, inverted=None, **fields):
    """A group of our format with the given question and needles (character Yuki, keyword none)."""
    needles = {"onehop": onehop, **({"inverted": inverted} if inverted is not None else {})}
    return {"id": "g1", "category": "test", "question": question, "character": "Yuki", "needles": needles, **fields}


def problems_of(group) -> list[str]:
    from embedeval.needles import group_problems

    return group_problems(group, 0)[1]


@pytest.mark.parametrize("word", ["fire", "mill", "fifty", "back", "find", "call", "system", "bill"])
def test_content_words_on_scikit_learns_stop_list_are_compared(word):
    assert word in ENGLISH_STOP_WORDS  # why they were dropped before
    assert lexical_overlap(f"Which character remembers the {word}?", f"Yuki never forgot that {word}.") == [word]


def test_a_shared_fire_is_refused_by_needles_check(tmp_path):
    group = one_group("Which character survived a fire?", "Yuki barely escaped when the fire swept through her street.")
    assert problems_of(group) == ["onehop needle shares content words with the question: fire"]
    path = tmp_path / "fire.json"
    path.write_text(json.dumps({"name": "fire", "groups": [group]}))
    result = CliRunner().invoke(app, ["needles", "check", str(path)])
    assert result.exit_code == 1 and f"{path}: group g1: onehop needle shares content words with the question: fire" in result.output


def test_function_words_and_the_question_frame_are_not_content_words():
    assert lexical_overlap("Which of the characters would have been with them?",
                           "They could not have been with her, and yet they were there.") == []
    assert lexical_overlap("Whose character's cat is it?", "It is his own, isn't it? She'd say so.") == []


@pytest.mark.parametrize("invisible, name", [("\u00ad", "SOFT HYPHEN"), ("\u200b", "ZERO WIDTH SPACE"), ("\u2060", "WORD JOINER")])
def test_an_invisible_character_hides_no_shared_word_and_is_refused_with_one_line(invisible, name):
    needle = f"Yuki grew up in Swe{invisible}den."
    assert lexical_overlap("Which character has been to Sweden?", needle) == ["sweden"]
    code = f"U+{ord(invisible):04X}"
    assert problems_of(one_group("Which character has been to Norway?", needle)) == [
        f"onehop needle holds an invisible character {code} ({name}), which a tokenizer drops: write the text without it"]


@pytest.mark.parametrize("spelling, plain", [("Swe\u00adden", "Sweden"), ("Swe\u200bden", "Sweden"), ("Swe\u2060den", "Sweden"),
                                             ("Swe\ufeffden", "Sweden"), ("Swe\x07den", "Sweden"), ("CAFÉ", "cafe"), ("Zürich", "zurich")])
def test_spellings_the_reference_tokenizer_reads_alike_are_one_word(spelling, plain):
    from embedeval.embedders.tokens import load_token_counter
    from embedeval.text import words

    tokenizer = load_token_counter().tokenizer  # all-MiniLM-L6-v2's: it drops these characters and accents
    assert tokenizer.tokenize(spelling) == tokenizer.tokenize(plain)
    assert words(spelling) == words(plain)


def test_invisible_characters_are_refused_in_the_question_and_keyword_too():
    group = one_group("Which character has been to Nor\u200bway?", "Yuki climbed a fjord.", keyword="Nor\u200bway")
    assert problems_of(group) == [
        "the question holds an invisible character U+200B (ZERO WIDTH SPACE), which a tokenizer drops: write the text without it",
        "the keyword holds an invisible character U+200B (ZERO WIDTH SPACE), which a tokenizer drops: write the text without it"]


def test_an_invisible_control_character_is_named_as_one_not_as_unassigned():
    """The hostile a NUL in a drafted question was 'U+0000 (unassigned)'."""
    assert problems_of(one_group("Which character has been to Norway?\x00", "Yuki climbed a fjord.")) == [
        "the question holds an invisible character U+0000 (a control character), which a tokenizer drops: write the text without it"]


def test_words_of_any_script_are_compared():
    assert lexical_overlap("Which character has lived in Москва?", "Yuki spent ten winters in Москва.") == ["москва"]
    assert lexical_overlap("Which character has been to Αθήνα?", "Yuki loved the light of αθηνα.") == ["αθηνα"]


def test_a_word_mixing_scripts_is_refused_as_a_homoglyph():
    needle = "Yuki grew up in Sw\u0435den."  # a Cyrillic е among Latin letters
    assert problems_of(one_group("Which character has been to Sweden?", needle)) == [
        "onehop needle's word 'Sw\u0435den' mixes scripts (Cyrillic, Latin): a look-alike letter hides the word it imitates"]
    assert problems_of(one_group("Which character has been to Moscow?", "Yuki lived near Red Square, in Москва.")) == []
    assert problems_of(one_group("Which character has been to Tokyo?", "Yuki bought a book in 東京の本屋.")) == []
    assert problems_of(one_group("Which character dresses casually?", "Yuki wore a Tシャツ to a 5µm lecture.")) == []


@pytest.mark.parametrize("question, needle, shared", [
    ("Which character's sister is a doctor?", "Yuki's brother treats patients.", []),
    ("Which character’s sister is a doctor?", "Yuki’s brother treats patients.", []),  # curly apostrophes
    ("Which character 's sister is a doctor?", "Yuki 's brother treats patients.", []),  # written apart
    ("Which character is rich?", "Yuki grew up in Zürich.", []),
    ("Which character runs a café?", "Yuki opened a cafe downtown.", ["cafe"]),
    ("Which character runs a cafe?", "Yuki opened a CAFÉ downtown.", ["cafe"]),
    ("Which character's dog is old?", "Yuki's dog sleeps all day.", ["dog"]),
    ("Which character knows Straße names?", "Yuki walked every strasse.", ["strasse"]),
])
def test_possessives_are_not_words_and_words_are_compared_whole(question, needle, shared):
    assert lexical_overlap(question, needle) == shared


def test_a_keyword_and_a_character_are_found_after_normalisation():
    assert problems_of(one_group("Which character runs a cafe?", "Yüki poured espresso all morning.", keyword="café")) == []
    assert problems_of(one_group("Which character runs a cafe?", "Yukino poured espresso.", keyword="caf")) == [
        "onehop needle does not name the character 'Yuki'", "question does not contain its keyword 'caf'"]


@pytest.mark.parametrize("question, keyword, read", [("Which character has lived in the US?", "US", "'us'"),
                                                     ("Which character works in IT?", "IT", "'it'"),
                                                     ("Which character has been to the sea?", "to the", "'to', 'the'")])
def test_a_keyword_of_function_words_only_is_refused(question, keyword, read):
    """A known gap, found by a hostile audit: the overlap check skips function words, so a
    keyword such as US or IT (read as us, it) was never tested and passed ``needles check``."""
    group = one_group(question, "Yuki has a flat near the lake.", keyword=keyword)
    assert problems_of(group) == [f"keyword {keyword!r} is only function words (as the checks read it: {read}), which the overlap "
                                  "check skips: a needle could share it with the question unseen; choose a content word of the question"]
    assert problems_of(one_group("Which character has lived in the USA?", "Yuki has a flat near the lake.", keyword="USA")) == []


@pytest.mark.parametrize("inverted", ["Yuki lives next to the Semper Opera House.", "yuki lives next to the semper opera house",
                                      "Yuki lives next to  the Semper-Opera House!"])
def test_an_inverted_needle_that_repeats_the_onehop_needle_is_refused(inverted):
    group = one_group("Which character has been to Dresden?", "Yuki lives next to the Semper Opera House.", inverted)
    assert problems_of(group) == ["inverted needle is the onehop needle word for word: it must say the same fact in another order"]

"""A key is scrubbed in every encoding a server or a client may write it (plain,
URL-encoded once or twice, HTML character references, JSON-escaped, base64 as Basic auth sends it), every key of the run by every scrub, and
a key too plain to tell from words (``local``, ``k``) masked where embedeval prints it but never
replaced inside texts. The encodings here are built by hand with ``urllib.parse``, ``json`` and
``base64``, not with the code under test."""

from __future__ import annotations

import base64
import json
import re
from urllib.parse import quote, quote_plus

import pytest

from embedeval.messages import EmbedevalWarning
from embedeval.net.keys import APIKey, forget_run_keys, key_patterns, scrub_all, scrub_printed, too_plain_to_scrub

JUDGE = "sk-BBBB/judge+key=2"  # the hostile run's judge key: '/', '+' and '=' change under every encoding
WIDE = "sk-clé/ключ 42"  # a key beyond ASCII, with a space: ensure_ascii, UTF-8 percent-escapes, '+'


@pytest.fixture(autouse=True)
def no_run_keys():
    forget_run_keys()
    yield
    forget_run_keys()


def lower_hex(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), text)


def all_escaped(key: str, upper: bool = False) -> str:
    """Every character of ``key`` as a JSON ``\\uXXXX`` escape (a surrogate pair beyond the BMP)."""
    units = key.encode("utf-16-be")
    hexes = [units[i:i + 2].hex() for i in range(0, len(units), 2)]
    return "".join(f"\\u{h.upper() if upper else h}" for h in hexes)


def encodings(key: str) -> dict[str, str]:
    """The forms of ``key`` a server or a client may write, each made by the library that writes it."""
    raw = key.encode("utf-8")
    return {
        "plain": key,
        "quote": quote(key),
        "quote, nothing safe": quote(key, safe=""),
        "quote, lower-case hex": lower_hex(quote(key, safe="")),
        "quote_plus": quote_plus(key),
        "quote_plus, lower-case hex": lower_hex(quote_plus(key)),
        "every byte percent-escaped": "".join(f"%{b:02X}" for b in raw),
        "quote twice (a URL in a URL)": quote(quote(key, safe=""), safe=""),
        "every character a decimal reference": "".join(f"&#{ord(c)};" for c in key),
        "every character a hex reference": "".join(f"&#x{ord(c):x};" for c in key),
        "one character a hex reference, upper-case": key.replace("/", "&#X2F;"),
        "json.dumps": json.dumps(key)[1:-1],
        "json.dumps, ensure_ascii=False": json.dumps(key, ensure_ascii=False)[1:-1],
        "json with \\/": json.dumps(key).replace("/", "\\/")[1:-1],
        "every character \\u-escaped": all_escaped(key),
        "every character \\u-escaped, upper-case hex": all_escaped(key, upper=True),
        "one character \\u-escaped": key.replace("-", "\\u002d"),
        "base64 of key": base64.b64encode(raw).decode(),
        "base64 of :key": base64.b64encode(b":" + raw).decode(),
        "base64 of user:key": base64.b64encode(b"user:" + raw).decode(),
        "base64 of a:key": base64.b64encode(b"a:" + raw).decode(),
        "base64url of user:key, unpadded": base64.urlsafe_b64encode(b"me:" + raw).decode().rstrip("="),
    }


@pytest.mark.parametrize("key", [JUDGE, WIDE])
@pytest.mark.parametrize("form", list(encodings(JUDGE)))
def test_a_key_is_scrubbed_in_every_encoding(key, form):
    APIKey("JUDGE_KEY", key)
    written = encodings(key)[form]
    for scrub in (scrub_all, scrub_printed):
        said = scrub(f"the judge refused ({written}) twice")
        assert written not in said and key not in said, (form, said)
        assert said.startswith("the judge refused (") and said.endswith(") twice") and "***" in said


def test_every_scrub_scrubs_every_key_of_the_run():
    """Text from one server is scrubbed of the other servers' keys too: a judge's key in a drafting
    server's words, an embedder's in a chat model's error."""
    chat, judge = APIKey("CHAT_KEY", "sk-chat/AAAA+1"), APIKey("JUDGE_KEY", JUDGE)
    text = f"chat {quote(chat.value, safe='')} judge {quote_plus(judge.value)} Basic {base64.b64encode(b'u:' + chat.value.encode()).decode()}"
    for said in (chat.scrub(text), judge.scrub(text), scrub_all(text), scrub_printed(text)):
        assert said == "chat *** judge *** Basic ***"
    assert APIKey.optional("NO_SUCH_VARIABLE_56").value == "" and scrub_all("a text") == "a text"  # no key: nothing scrubbed


def test_the_patterns_of_a_key_are_built_once():
    assert key_patterns(JUDGE) is key_patterns(JUDGE) and key_patterns(JUDGE, whole_token=True) is key_patterns(JUDGE, whole_token=True)


@pytest.mark.parametrize("key, plain", [("k", True), ("local", True), ("password", True), ("LocalKeyName", True),
                                        ("123456", True), ("sk-abc", False), ("abc123", False), ("sk-test", False),
                                        ("a" * 20, False), ("9" * 20, False)])
def test_a_key_too_short_or_a_word_or_a_number_is_too_plain_to_scrub(key, plain):
    assert (too_plain_to_scrub(key) is not None) == plain


def test_a_key_that_is_a_word_is_masked_where_printed_never_inside_texts(recwarn):
    APIKey("LOCALKEY", "local")
    APIKey("LOCALKEY", "local")  # read again: said once
    needle = '{"keyword": "broth", "onehop": "Yuki simmered the local broth."}'
    assert scrub_all(needle) == needle
    assert scrub_printed("the key local (Bearer local, %6Cocal) was refused by localhost") == \
        "the key *** (Bearer ***, ***) was refused by localhost"
    warned = [str(w.message) for w in recwarn.list if issubclass(w.category, EmbedevalWarning)]
    assert warned == ["the key in LOCALKEY is too short to scrub from texts safely (5 character(s), fewer than 6); it "
                      "is masked where embedeval prints it, never replaced inside texts"]
    APIKey("ONE_LETTER_KEY", "k")
    assert scrub_all(needle) == needle and scrub_printed("key: k") == "key: ***"
    APIKey("WORD_KEY", "password")
    assert "a word" in str(recwarn.list[-1].message) and scrub_all("the password is swordfish") == "the password is swordfish"


def test_drafted_groups_are_scrubbed_text_by_text_not_as_one_json_text():
    """The drafted groups are scrubbed as read, each text on its own: a key holding a quote (which
    the JSON text writes as ``\\"``) is found, a name holding a key (written among a group's
    ``ignored_fields``) too, and a key that is a word mangles neither ``keyword`` nor a needle."""
    from embedeval.experiments.drafting.prompts import scrubbed

    with pytest.warns(EmbedevalWarning, match="too short to scrub"):
        APIKey("LOCALKEY", "k")
    APIKey("JUDGE_KEY", JUDGE)
    quoted = APIKey("QUOTED_KEY", 'sk-"quoted"-56').value
    groups = [{"keyword": "kitchen", "needles": {"onehop": f"Kenji baked bread ({quoted}).", "inverted": "Bread was baked by Kenji."},
               quote(JUDGE, safe=""): ["ok", 5, None]}]
    assert scrubbed(groups, scrub_all) == [{"keyword": "kitchen", "needles": {"onehop": "Kenji baked bread (***).",
                                                                              "inverted": "Bread was baked by Kenji."}, "***": ["ok", 5, None]}]


@pytest.mark.parametrize("prose", ["He learned basic arithmetic.", "Noor taught basic first-aid skills.",
                                   "Yuki cooked a basic three-course meal.", "The standard bearer 1st-class.",
                                   "Basic first-aid-certified-cooks.", "Bearer instruments"])
def test_prose_with_basic_or_bearer_is_never_taken_for_credentials_inside_texts(prose):
    """With no key set, a drafted needle "... in basic cast-iron." was written
    as "... in basic ***" (any "basic" followed by a word holding a sign was taken for credentials)
    and passed ``needles check``. Inside texts only a header's shape is credentials."""
    assert scrub_all(prose) == prose


@pytest.mark.parametrize("header", ["Authorization: Bearer sk-abcdef1234567890XYZ",
                                    "Authorization: Basic " + base64.b64encode(b"user:sk-secret-123456").decode(),
                                    "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc123"])
def test_credentials_a_header_carries_are_scrubbed_whoever_holds_them(header):
    """Credentials of a key the run does not hold, quoted as a header writes them: scrubbed from
    texts and from what is printed."""
    for scrub in (scrub_all, scrub_printed):
        assert scrub(header).endswith(("Bearer ***", "Basic ***")), scrub(header)


def test_a_key_an_http_header_cannot_carry_is_one_line_that_does_not_show_it(monkeypatch):
    """A key beyond ASCII was a UnicodeEncodeError traceback at the first
    request. It is refused when read, in words that do not show it."""
    from embedeval.errors import ConfigError

    monkeypatch.setenv("WIDE_KEY", "ключ-секрет-12345")
    for read in (lambda: APIKey.optional("WIDE_KEY"), lambda: APIKey.from_env("WIDE_KEY", "no key")):
        with pytest.raises(ConfigError, match="the key in WIDE_KEY holds a character an HTTP header cannot carry") as refused:
            read()
        assert "ключ" not in str(refused.value)
    monkeypatch.setenv("WIDE_KEY", "  sk-plain-ascii-123  ")
    assert APIKey.optional("WIDE_KEY").value == "sk-plain-ascii-123"


def test_a_caller_whose_warnings_raise_is_told_of_a_plain_key_on_every_read():
    """With warnings turned into errors, reading a key too plain to scrub raises each time it is
    read, not once and then silently (the key is kept only after the warning was said)."""
    import warnings

    forget_run_keys()
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmbedevalWarning)
        for _ in range(2):
            with pytest.raises(EmbedevalWarning, match="too short to scrub"):
                APIKey("PLAIN_KEY", "k2")
    with pytest.warns(EmbedevalWarning, match="too short to scrub"):
        APIKey("PLAIN_KEY", "k2")
    forget_run_keys()

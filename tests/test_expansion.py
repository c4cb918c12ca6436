import copy
import json
import re

import pandas as pd
import pytest
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.defaults import DEFAULT_NEEDLES
from embedeval.errors import APIError, ConfigError, InputError
from embedeval.expansion import expand_question, expanded_query_texts, load_expansions, parse_terms, validate_expansions
from embedeval.llm import ChatLLM, parse_chat_spec
from embedeval.needles import load_needle_set

from fake_api import FakeEmbeddingServer, finishes_within, serving

SHIPPED = DEFAULT_NEEDLES.parent / "expansions" / "nolima-onehop.json"


@pytest.fixture
def chat(monkeypatch):
    with serving(monkeypatch, {"OPENAI": "sk-chat-SECRET"}, max_attempts=3) as server:
        yield server


@pytest.mark.parametrize("answer, expected", [
    ('["opera", "Saxony", "Elbe"]', ["opera", "Saxony", "Elbe"]),
    ('Here you go:\n```json\n["opera", "opera", "Elbe"]\n```', ["opera", "Elbe"]),
    ('{"terms": ["a b", "c"]}', ["a b", "c"]),
    ("**Places:**\n1. Zwinger\n2) Elbe\n- Saxony\n* Meissen", ["Zwinger", "Elbe", "Saxony", "Meissen"]),
    ("opera, Elbe,  Saxony ,opera", ["opera", "Elbe", "Saxony"]),
    ("I cannot help with that.", ["I cannot help with that."]),
])
def test_parse_terms(answer, expected):
    assert parse_terms(answer) == expected


def test_well_formed_answer_is_trimmed_to_n(chat):
    chat.script.chat_replies = [json.dumps([f"term {i}" for i in range(7)])]
    terms = expand_question("Which character has been to Dresden?", 5, ChatLLM("fake-model"))
    assert terms == [f"term {i}" for i in range(5)]
    request = chat.requests[-1]
    assert request["path"] == "/v1/chat/completions" and request["model"] == "fake-model"
    assert "exactly 5" in request["body"]["messages"][0]["content"]


def test_too_few_terms_asks_again_for_the_rest(chat):
    chat.script.chat_replies = ['["a", "b"]', '["b", "c", "d"]']
    assert expand_question("Q?", 4, ChatLLM("m")) == ["a", "b", "c", "d"]
    follow_up = chat.requests[-1]["body"]["messages"][0]["content"]
    assert "2 more are needed" in follow_up and "a, b" in follow_up


def test_garbage_gives_up_after_bounded_rounds_naming_the_question(chat):
    chat.script.chat_replies = ["", "", "", ""]
    with pytest.raises(APIError, match=r"expansion of 'Which character plays chess\?' has 0 usable terms after 3 requests"):
        expand_question("Which character plays chess?", 10, ChatLLM("m"))
    assert len(chat.requests) == 3


def test_429_then_200(chat):
    chat.script.fail_with = [429]
    chat.script.chat_replies = ['["x", "y"]']
    assert expand_question("Q?", 2, ChatLLM("m")) == ["x", "y"]
    assert len(chat.requests) == 2


def test_chat_errors_never_show_the_key(chat):
    chat.script.echo_auth = True
    chat.script.fail_with = [429] * 5
    with pytest.raises(APIError, match=r"chat model m: gave up after 3 attempts") as info:
        ChatLLM("m").complete("Q?")
    assert "SECRET" not in str(info.value) and "***" in str(info.value)


@pytest.mark.slow
def test_chat_honours_retry_after(chat):
    chat.script.fail_with = [503]
    chat.script.fail_headers = {"Retry-After": "1"}
    chat.script.chat_replies = ['["x"]']
    assert ChatLLM("m").complete("Q?") == '["x"]'
    first, second = chat.requests
    assert second["time"] - first["time"] >= 0.95


def test_cli_expand_writes_a_valid_file_without_the_key(chat, tmp_path):
    from test_nolima import SMALL_GROUPS

    chat.script.chat_replies = [json.dumps([f"w{k}-{i}" for i in range(n)]) for n in (3, 5) for k in range(3)]
    out = tmp_path / "exp.json"
    result = CliRunner().invoke(app, ["expand", "--groups", ",".join(SMALL_GROUPS), "--sizes", "3,5", "--llm", "fake-model",
                                      "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    data = load_expansions(out, load_needle_set(DEFAULT_NEEDLES).subset(SMALL_GROUPS))
    assert {k: len(next(iter(v.values()))) for k, v in data["sizes"].items()} == {"3": 3, "5": 5}
    assert data["model"] == "fake-model" and data["temperature"] == 0.7 and "created" in data and "prompt" in data
    assert "SECRET" not in out.read_text()


def test_missing_key_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = CliRunner().invoke(app, ["expand", "--llm", "m", "--out", str(tmp_path / "x.json")])
    assert result.exit_code == 1 and "needs an API key in OPENAI_API_KEY" in result.output
    assert not (tmp_path / "x.json").exists()


def test_shipped_expansions_have_exact_sizes_and_do_not_leak():
    needle_set = load_needle_set(DEFAULT_NEEDLES)
    data = load_expansions(SHIPPED, needle_set)
    assert sorted(map(int, data["sizes"])) == [100, 150, 250]
    for size, groups in data["sizes"].items():
        assert set(groups) == {g.id for g in needle_set.groups}
        for group in needle_set.groups:
            terms = groups[group.id]
            assert len(terms) == int(size) == len({t.lower() for t in terms})
            text = " ".join(terms).lower()
            assert all(g.character.lower() not in text for g in needle_set.groups)
            assert all(needle.lower().rstrip(".") not in text for needle in group.needles.values())
    assert "hand-written" in data["model"] and "compose_nolima_onehop.py" in data["how"]


def test_validation_errors_name_file_and_problem(tmp_path):
    needle_set = load_needle_set(DEFAULT_NEEDLES)
    good = json.loads(SHIPPED.read_text())
    wrong_size = copy.deepcopy(good)
    wrong_size["sizes"]["100"]["loc-dresden"] = wrong_size["sizes"]["100"]["loc-dresden"][:99]
    with pytest.raises(InputError, match="group loc-dresden at size 100 has 99 terms, not 100"):
        validate_expansions(wrong_size, needle_set, "x.json")
    no_meta = {k: v for k, v in good.items() if k != "model"}
    with pytest.raises(InputError, match="x.json: missing metadata model"):
        validate_expansions(no_meta, needle_set, "x.json")
    leaking = copy.deepcopy(good)
    leaking["sizes"]["100"]["loc-dresden"][5] = "Yuki"
    with pytest.raises(InputError, match="leaks the answer in term 'Yuki'"):
        validate_expansions(leaking, needle_set, "x.json")
    path = tmp_path / "broken.json"
    path.write_text("{")
    with pytest.raises(InputError, match="is not valid JSON"):
        load_expansions(path)


def test_expanded_query_texts():
    needle_set = load_needle_set(DEFAULT_NEEDLES)
    forms = expanded_query_texts([str(SHIPPED)], needle_set)
    assert list(forms) == ["expanded-100", "expanded-150", "expanded-250"]
    first = forms["expanded-100"][0]
    assert first.startswith(needle_set.groups[0].question + " ") and len(first.split(", ")) == 1


@pytest.mark.slow
def test_sweep_with_two_expansion_sizes(tmp_path, books_dir):
    from test_nolima import SMALL_GROUPS

    ns = load_needle_set(DEFAULT_NEEDLES).subset(SMALL_GROUPS)
    shipped = json.loads(SHIPPED.read_text())
    shipped["needle_set"] = ns.name
    shipped["sizes"] = {s: {g.id: shipped["sizes"][s][g.id] for g in ns.groups} for s in ("100", "150")}
    expansions = tmp_path / "exp.json"
    expansions.write_text(json.dumps(shipped))
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["nolima", "--groups", ",".join(SMALL_GROUPS), "--corpus", f"dir:{books_dir}",
                                      "--lengths", "128,256", "--depths", "3", "--expansions", str(expansions),
                                      "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    sims = pd.read_parquet(out / "similarities.parquet")
    assert sorted(sims["query_form"].unique()) == ["expanded-100", "expanded-150", "question"]
    per_form = sims.groupby("query_form").size()
    assert per_form.nunique() == 1  # same haystacks for every form
    question = sims[sims["query_form"] == "question"].set_index("haystack_id")["sim_qh"]
    expanded = sims[sims["query_form"] == "expanded-100"].set_index("haystack_id")["sim_qh"]
    assert not question.equals(expanded)
    assert (out / "figures" / "query_expansion.png").read_bytes()[:4] == b"\x89PNG"
    report = (out / "report.md").read_text()
    assert "## Query expansion" in report and "best_query_form" in report


def test_an_interrupted_expand_keeps_finished_questions_and_a_rerun_asks_only_for_the_rest(chat, tmp_path):
    from test_nolima import SMALL_GROUPS

    out = tmp_path / "exp.json"
    args = ["expand", "--groups", ",".join(SMALL_GROUPS), "--sizes", "3,5", "--llm", "fake-model", "--out", str(out), "-q"]
    replies = [json.dumps([f"w{k}-{i}" for i in range(n)]) for n in (3, 5) for k in range(3)]
    chat.script.chat_replies = replies[:4]  # four questions answered, then the server fails
    chat.script.fail_with = [200] * 4 + [500] * 20
    failed = CliRunner().invoke(app, args)
    assert failed.exit_code == 1 and "gave up after 3 attempts" in failed.output
    assert not out.exists()
    partial = json.loads((tmp_path / ".exp.json.partial").read_text())
    assert len(partial["done"]) == 4
    chat.script.fail_with, chat.script.chat_replies = [], replies[4:]
    before = len(chat.requests)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert len(chat.requests) - before == 2  # only the two questions that were missing
    data = load_expansions(out, load_needle_set(DEFAULT_NEEDLES).subset(SMALL_GROUPS))
    assert [data["sizes"][s][g] for s, g in (("3", SMALL_GROUPS[0]), ("5", SMALL_GROUPS[2]))] == \
        [[f"w0-{i}" for i in range(3)], [f"w2-{i}" for i in range(5)]]
    assert not (tmp_path / ".exp.json.partial").exists()


@pytest.mark.slow
def test_chat_requests_have_a_timeout(chat, monkeypatch):
    import time

    from embedeval.llm import ChatLLM

    monkeypatch.setenv("EMBEDEVAL_RETRY_MAX_SECONDS", "1")
    chat.script.delay = 3
    start = time.monotonic()
    with pytest.raises(APIError, match="chat model m: gave up"):
        ChatLLM("m", timeout=0.3).complete("Q?")
    assert time.monotonic() - start < 10  # a 1-s budget: not 3-s hangs times 30 attempts


@pytest.mark.slow
def test_a_chat_server_that_trickles_its_answer_is_timed_out_as_a_whole(chat, monkeypatch):
    import time

    monkeypatch.setenv("EMBEDEVAL_REQUEST_TIMEOUT", "0.5")
    monkeypatch.setenv("EMBEDEVAL_RETRY_MAX_SECONDS", "1")
    chat.script.chat_replies = ["x" * 5000] * 10  # 5,000 bytes at 20 ms each: minutes, each read within 0.5 s
    chat.script.trickle = 0.02
    llm = ChatLLM("m")
    assert llm.timeout == 0.5
    start = time.monotonic()
    with pytest.raises(APIError, match="chat model m: gave up after .*request timeout of 0.5 s"):
        finishes_within(60, lambda: llm.complete("Q?"))
    assert time.monotonic() - start < 10


def test_a_chat_server_of_ones_own_gets_only_the_key_its_spec_names_and_no_account_headers(chat, monkeypatch):
    monkeypatch.setenv("OPENAI_ORG_ID", "org-SECRET")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-SECRET")
    monkeypatch.setenv("MY_CHAT_KEY", "local-key")
    chat.script.chat_replies = ['["x"]', '["y"]']
    assert ChatLLM(f"openai:m?base_url={chat.url}/v1&key_env=MY_CHAT_KEY").complete("Q?") == '["x"]'
    assert ChatLLM(f"openai:m?base_url={chat.url}/v1").complete("Q?") == '["y"]'
    assert [(r["model"], r["auth"]) for r in chat.requests] == [("m", "Bearer local-key"), ("m", "")]  # no key_env: no Authorization header
    sent = {name.lower() for r in chat.requests for name in r["headers"]}
    assert not sent & {"openai-organization", "openai-project"}


def test_the_deprecated_base_url_follows_the_same_rules(chat, monkeypatch, tmp_path):
    from test_nolima import SMALL_GROUPS

    monkeypatch.setenv("OPENAI_ORG_ID", "org-SECRET")
    chat.script.chat_replies = [json.dumps([f"w{k}-{i}" for i in range(3)]) for k in range(3)]
    out = tmp_path / "exp.json"
    result = CliRunner().invoke(app, ["expand", "--groups", ",".join(SMALL_GROUPS), "--sizes", "3", "--llm", "fake-model",
                                      "--base-url", f"{chat.url}/v1", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert "warning: --base-url is deprecated" in result.output
    assert {r["auth"] for r in chat.requests} == {""}  # never OPENAI_API_KEY, nor a stand-in key
    assert not any("openai-organization" in {name.lower() for name in r["headers"]} for r in chat.requests)
    assert json.loads(out.read_text())["model"] == "fake-model"


def test_the_providers_own_url_still_gets_its_key(chat):
    chat.script.chat_replies = ['["x"]']
    assert ChatLLM("openai:m").complete("Q?") == '["x"]'  # OPENAI_BASE_URL: the provider's URL (a proxy may take it)
    assert chat.requests[-1]["auth"] == "Bearer sk-chat-SECRET" and parse_chat_spec("m") == parse_chat_spec("openai:m")


@pytest.mark.parametrize("spec, base_url, says", [
    ("openai:m?base_url=http://127.0.0.1:1/v1&key_env=OPENAI_API_KEY", None, "`key_env` must not be OPENAI_API_KEY"),
    ("openai:m?key_env=MY_KEY", None, "goes with `base_url`"),
    ("openai:m?base_url=http://127.0.0.1:1/v1;token=abc", None, ";parameters"),
    ("openai:m?base_url=http://127.0.0.1:99999/v1", None, "port from 1 to 65535"),
    ("openai:m", "http://127.0.0.1:abc/v1", "port from 1 to 65535"),
    ("openai:m?base_url=http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1", "'base_url' is given twice"),
    ("openai:m?max_tokens=5", None, "unknown option 'max_tokens' of a chat model; use base_url, key_env"),
    ("m?base_url=http://127.0.0.1:1/v1", None, "chat model options go with openai:MODEL"),
    ("openai:", None, "names no model"),
])
def test_a_bad_chat_spec_is_one_error_before_any_request(chat, spec, base_url, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        ChatLLM(spec, base_url)
    assert chat.requests == []


def test_cli_expand_refuses_the_openai_key_for_a_server_of_ones_own_in_one_line(chat, tmp_path):
    out = tmp_path / "x.json"
    result = CliRunner().invoke(app, ["expand", "--llm", f"openai:m?base_url={chat.url}/v1&key_env=OPENAI_API_KEY",
                                      "--out", str(out)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: spec option key_env must not be OPENAI_API_KEY")
    assert chat.requests == [] and not out.exists()


def test_a_chat_redirect_to_another_origin_is_refused_and_the_other_host_gets_nothing(chat):
    with FakeEmbeddingServer() as elsewhere:
        chat.script.redirect_to = elsewhere.url
        with pytest.raises(APIError, match=f"{chat.url} redirected to {elsewhere.url} \\(HTTP 307\\)"):
            ChatLLM("openai:m").complete("Q?")
        assert elsewhere.requests == []


@pytest.mark.parametrize("fault", ["malformed_json", "missing_data"])
def test_a_chat_server_answering_200_with_no_answer_is_given_up_after_two_tries(chat, monkeypatch, fault):
    """A 200 that holds no answer is not a transient fault: tried twice under the default policy."""
    monkeypatch.delenv("EMBEDEVAL_MAX_ATTEMPTS")
    chat.script.faults = [fault] * 40
    with pytest.raises(APIError, match=r"^chat model m: gave up after 2 attempts \(malformed response") as info:
        ChatLLM("m").complete("Q?")
    assert "\n" not in str(info.value) and len(chat.requests) == 2


@pytest.mark.slow
def test_a_chat_server_that_is_down_is_given_up_within_the_connect_budget(chat, monkeypatch):
    import socket
    import time

    with socket.socket() as probe:  # a port of this machine that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.delenv("EMBEDEVAL_MAX_ATTEMPTS")
    monkeypatch.setenv("EMBEDEVAL_RETRY_BASE_DELAY", "0.05")
    monkeypatch.setenv("EMBEDEVAL_RETRY_CONNECT_SECONDS", "1")
    monkeypatch.setenv("EMBEDEVAL_RETRY_MAX_SECONDS", "15")  # bounds the test on code without the connect budget
    start = time.monotonic()
    with pytest.raises(APIError, match=r"^chat model m: gave up after \d+ attempts within 1 s \(APIConnectionError"):
        ChatLLM(f"openai:m?base_url=http://127.0.0.1:{port}/v1").complete("Q?")
    assert time.monotonic() - start < 8


def test_a_chat_answer_past_the_size_cap_is_refused_with_one_line(chat, monkeypatch):
    """A gzip bomb: a few KB sent, megabytes once inflated; the cap (EMBEDEVAL_MAX_ANSWER_MB) is
    counted on the inflated answer, and the answer is refused, not asked for again."""
    monkeypatch.setenv("EMBEDEVAL_MAX_ANSWER_MB", "1")
    chat.script.gzip = True
    chat.script.chat_replies = ['["small"]', '["bomb"]']
    assert ChatLLM("m").complete("Q?") == '["small"]'  # a compressed answer under the cap is read
    chat.script.padding = 5_000_000
    with pytest.raises(APIError) as info:
        finishes_within(60, lambda: ChatLLM("m").complete("Q?"))
    message = str(info.value)
    assert message.startswith("chat model m: ") and "larger than 1 MB" in message and "\n" not in message, message
    assert len(chat.requests) == 2


@pytest.mark.parametrize("status", [400, 500])
def test_a_chat_server_quoting_its_key_url_encoded_never_reaches_the_error_line(monkeypatch, tmp_path, status):
    """A chat server's 400/500 body holding its key URL-encoded was printed in the ``error:`` line."""
    from urllib.parse import quote

    key = "sk-chat/key+56="
    with serving(monkeypatch, {"OPENAI": key}, max_attempts=2) as server:
        server.script.fail_with = [status] * 10
        server.script.echo_key_as = lambda sent: quote(sent, safe="")
        result = CliRunner().invoke(app, ["expand", "--groups", "loc-dresden", "--sizes", "3", "--llm", "fake-model",
                                          "--out", str(tmp_path / "exp.json"), "-q"])
        assert server.requests, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and "the key *** was refused" in lines[0], result.output
    assert quote(key, safe="") not in lines[0] and key not in lines[0]


# ---- every paid attempt counted


class _Words:
    """A token counter that counts words and records how many characters it was given."""

    name = "words"

    def __init__(self):
        self.given: list[int] = []

    def count(self, texts):
        self.given += [len(t) for t in texts]
        return [len(t.split()) for t in texts]


def test_every_retry_is_checked_against_the_ceiling_before_it_is_sent_and_counted_at_its_prompt(chat, monkeypatch):
    """The hostile run of retries were not metered; a failing server got 30 full prompts.
    Each attempt's worst case (prompt + max_tokens) is checked before it is sent, and each refused
    attempt (an HTTP error status: no answer written) is counted at its prompt's tokens."""
    from embedeval.plan import ChatMeter, CostCeilingReached

    monkeypatch.setenv("EMBEDEVAL_MAX_ATTEMPTS", "30")
    chat.script.fail_with = [500] * 30
    prompt = "word " * 1000  # 1,250 tokens (a quarter of its 5,000 bytes); each attempt up to 2,250 with its answer
    meter = ChatMeter(max_cost=5.0, counter=_Words())  # $1,000 per million tokens: $2.25 an attempt at worst
    with pytest.raises(CostCeilingReached) as info:
        meter.ask(ChatLLM("m"), "chat", 1000.0, prompt, 1000, "request 1")
    assert len(chat.requests) == 3  # $1.25 + $1.25 spent, the third's $2.25 fits; the fourth's does not
    assert meter.usage("chat") == {"requests": 3, "tokens_sent": 3 * 1250, "tokens_received": 0}
    assert str(info.value).startswith("stopped before request 1 (its attempt 4): it could cost up to $2.2500")
    assert "with the $3.7500 spent so far (3,750 tokens in 3 request(s)) passes `max_cost` $5.0000" in str(info.value)


def test_max_attempts_bounds_what_is_sent_whatever_the_retry_policy(chat, monkeypatch):
    """`needles draft --attempts 1` still sent 11 and 30 prompts to a failing server (the chat
    client's retries): ``max_attempts`` now bounds the attempts sent, the retries included."""
    monkeypatch.setenv("EMBEDEVAL_MAX_ATTEMPTS", "30")
    chat.script.fail_with = [500] * 30
    with pytest.raises(APIError, match=r"^chat model m: gave up after 1 attempts \(HTTP 500"):
        ChatLLM("m").ask("Q?", 10, max_attempts=1)
    assert len(chat.requests) == 1


class _Failing:
    """A chat model whose every attempt fails with ``error`` (what :meth:`ChatLLM.ask` tells its watchers)."""

    def __init__(self, error, attempts: int = 2):
        self.error, self.attempts = error, attempts

    def ask(self, prompt, max_tokens, sending, failed, max_attempts):
        for attempt in range(1, self.attempts + 1):
            sending(attempt)
            failed(self.error)
        raise APIError("gave up")


@pytest.mark.parametrize("error, received", [
    (__import__("embedeval.net.errors", fromlist=["x"]).status_error(429, "slow down", "K"), 0),
    (__import__("embedeval.net.errors", fromlist=["x"]).ConnectionFailedError("refused"), 0),
    (__import__("embedeval.net.errors", fromlist=["x"]).RetryableError("APITimeoutError: Request timed out."), 100),
    (__import__("embedeval.net.errors", fromlist=["x"]).MalformedResponseError("malformed response (cut off)"), 100),
])
def test_an_attempt_without_an_answer_is_counted_as_the_provider_may_bill_it(error, received):
    """Refused with a status or never connected: its prompt. Timed out, or an answer that broke
    off: its worst case, the model may have written (and billed) all of its max_tokens."""
    from embedeval.plan import ChatMeter

    meter = ChatMeter(counter=_Words())
    with pytest.raises(APIError):
        meter.ask(_Failing(error), "judge", 1.0, "one two three four", 100, "a request")
    assert meter.usage("judge") == {"requests": 2, "tokens_sent": 2 * 5, "tokens_received": 2 * received}


def test_an_answer_past_its_max_tokens_is_counted_whole_and_stops_the_run(chat):
    """The hostile run of a server that ignores max_tokens spent $2.51 against a ceiling
    of $0.05 in one request. Its answer is counted by what arrived (or its usage, if larger), and
    the run stops at the ceiling before another request."""
    from embedeval.plan import ChatMeter, CostCeilingReached

    chat.script.chat_replies = ["x" * 400_000]  # 100,000 tokens at a quarter of its bytes (more: TOKENIZED_BYTES), 50 asked for
    meter = ChatMeter(max_cost=0.05)
    reply = meter.ask(ChatLLM("m"), "chat", 10.0, "Q?", 50, "request 1 for theme 0")
    assert reply.text == "x" * 400_000 and meter.usage("chat")["tokens_received"] >= 100_000
    with pytest.raises(CostCeilingReached, match=r"^stopped: the answer to request 1 for theme 0 was [\d,]+ tokens, past its "
                                                 r"max_tokens of 50 \(a server that ignores it\): \$[12]\.\d+ spent"):
        meter.stop_if_over()
    chat.script.chat_replies, chat.script.chat_usage = ["short"], {"prompt_tokens": 1, "completion_tokens": 900_000}
    meter = ChatMeter(max_cost=0.05)
    meter.ask(ChatLLM("m"), "chat", 10.0, "Q?", 50, "request 2")
    assert meter.usage("chat")["tokens_received"] == 900_000  # its usage, larger than the text
    with pytest.raises(CostCeilingReached, match=r"^stopped: the answer to request 2 was 900,000 tokens"):
        meter.stop_if_over()
    assert len(chat.requests) == 2


def test_a_usage_past_any_answer_is_taken_at_its_bound_and_still_stops_the_run(chat):
    """A usage of 10**400 completion tokens was an OverflowError in the meter
    (the paid answer lost), or, unpriced, an integer no float holds in the needle set's provenance,
    which embedeval then could not read. It counts as MAX_REPORTED_TOKENS, which stops the run."""
    import json

    from embedeval.bounds import MAX_REPORTED_TOKENS
    from embedeval.plan import ChatMeter, CostCeilingReached

    chat.script.chat_replies, chat.script.chat_usage = ["short"], {"prompt_tokens": 1, "completion_tokens": 10**400}
    meter = ChatMeter(max_cost=0.05)
    meter.ask(ChatLLM("m"), "chat", 10.0, "Q?", 50, "request 1")
    assert meter.usage("chat")["tokens_received"] == MAX_REPORTED_TOKENS
    json.loads(json.dumps(meter.usage("chat")), parse_int=float)  # its provenance holds a number a float holds
    with pytest.raises(CostCeilingReached, match=r"^stopped: the answer to request 1 was 1,000,000,000 tokens"):
        meter.stop_if_over()


def test_a_long_answer_is_counted_without_tokenising_all_of_it():
    """The hostile run of a 30 MB answer took the tokenizer past 5.7 GB and aborted the
    process. Only TOKENIZED_BYTES are tokenised; the rest counts one token a byte, an upper bound."""
    from embedeval.plan import TOKENIZED_BYTES, ChatMeter

    counter = _Words()
    meter = ChatMeter(counter=counter, margin=0.0)
    text = "ab " * 1_000_000 + "é"  # 3 MB
    tokens = meter.tokens(text)
    assert counter.given == [TOKENIZED_BYTES]
    rest = len(text.encode()) - TOKENIZED_BYTES
    assert tokens == len(text[:TOKENIZED_BYTES].split()) + rest  # the head's words (a quarter of its bytes is fewer), the rest by bytes
    assert tokens >= len(text.split())  # never fewer than the text holds
    assert meter.tokens("ab " * 10) == 10 and counter.given[-1] == 30  # a short text as it always was


def test_a_chat_answer_has_a_cap_of_its_own_far_below_every_answers(chat, monkeypatch):
    """A chat answer is read, scrubbed, parsed and counted whole: capped at
    EMBEDEVAL_MAX_CHAT_ANSWER_MB (16), not at the embeddings' 256 MB; refused with one line that
    names the variable, and not asked for again."""
    from embedeval.defaults import DEFAULT_MAX_ANSWER_MB, DEFAULT_MAX_CHAT_ANSWER_MB

    assert DEFAULT_MAX_CHAT_ANSWER_MB * 16 <= DEFAULT_MAX_ANSWER_MB
    monkeypatch.setenv("EMBEDEVAL_MAX_CHAT_ANSWER_MB", "1")
    chat.script.chat_replies = ["x" * 2_000_000]
    with pytest.raises(APIError) as info:
        ChatLLM("m").complete("Q?")
    message = str(info.value)
    assert "larger than 1 MB once decompressed (EMBEDEVAL_MAX_CHAT_ANSWER_MB)" in message and len(chat.requests) == 1, message

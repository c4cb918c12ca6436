"""`embedeval needles draft`: needles drafted by a chat model (a scripted server on
127.0.0.1) for the themes of a small themes run, each draft kept only when every check passes, each
rejected one for its own reason; bad input, a garbage answer and a network failure as one line
that loses no accepted draft, and a rerun that resumes."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import re
import select
import shutil
import socket
import subprocess
import sys

import pandas as pd
import pytest
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.errors import InputError
from embedeval.experiments.drafting.prompts import parse_drafts
from embedeval.needles import group_problems, load_needle_set

from conftest import REPO_ROOT
from fake_api import serving
from fakes import said_first, without_said_first
from test_themes import small_themes_run

#: Every test here needs a themes run (chunks embedded, UMAP and HDBSCAN): the slow tier.
pytestmark = pytest.mark.slow

KEY = "sk-draft-SECRET"


@pytest.fixture(scope="module")
def themes_run(tmp_path_factory):
    """A themes run of three written topics, 150 sentences each (about 220 chunks: UMAP stays quick),
    3 clusterings, not 9: these tests are about drafting (tests/experiments/test_themes.py runs the default)."""
    return small_themes_run(tmp_path_factory, "draft", 150)


def theme_of(run, topic: str) -> int:
    clusters = pd.read_csv(run / "clusters.csv")
    return int(next(row.cluster for row in clusters.itertuples() if row.representatives.startswith(f"{topic}:")))


def term_of(run, cluster: int) -> str:
    """A term of the theme's top terms that no other theme of the run has: what names it."""
    terms = {row.cluster: row.top_terms.split(";") for row in pd.read_csv(run / "clusters.csv").itertuples()}
    return next(t for t in terms[cluster] if all(t not in others for c, others in terms.items() if c != cluster))


def group(question, character, keyword, onehop, inverted):
    return {"question": question, "character": character, "keyword": keyword, "needles": {"onehop": onehop, "inverted": inverted}}


GOOD = group("Which character prepared supper?", "Yuki", "supper", "Yuki simmered a pot of lentil soup over a low flame.",
             "Over a low flame, a pot of lentil soup was simmered by Yuki.")
SHARES_A_WORD = group("Which character has cooked for a wedding?", "Ana", "wedding", "Ana roasted a tray of potatoes for the wedding guests.",
                      "For the wedding guests, a tray of potatoes was roasted by Ana.")
ANSWERED = group("Which character worked with dough?", "Marco", "dough", "Marco kneaded something soft in the warm kitchen.",
                 "In the warm kitchen, Marco kneaded something soft.")  # the corpus holds "the bread dough"
OFF_TOPIC = group("Which character went to court?", "Lena", "court", "Lena filed an appeal against the insurance company.",
                  "An appeal against the insurance company was filed by Lena.")
DUPLICATE = group("Which character prepared an evening meal?", "Ravi", "evening", "Ravi simmered a pot of lentil soup over a low flame.",
                  "Over a low flame, a pot of lentil soup was simmered by Ravi.")  # GOOD's needle about another character
REDRAFT = group("Which character made a dessert?", "Noor", "dessert", "Noor whisked the eggs with sugar in the warm kitchen.",
                "In the warm kitchen, the eggs were whisked with sugar by Noor.")
SAILING = [group("Which character has been on a yacht?", "Kenji", "yacht", "Kenji hoisted the mainsail as the tide turned.",
                 "As the tide turned, the mainsail was hoisted by Kenji."),
           group("Which character has served on a ship?", "Priya", "ship", "Priya coiled the ropes on deck before the gale hit.",
                 "Before the gale hit, the ropes on deck were coiled by Priya.")]


@pytest.fixture
def chat(monkeypatch):
    with serving(monkeypatch, {"OPENAI": KEY}, max_attempts=2) as server:
        yield server


def draft(run, out, *options):
    return CliRunner().invoke(app, ["needles", "draft", "--themes", str(run), "--llm", "fake-model", "--out", str(out), "-q", *options])


def prompts_sent(server) -> list[str]:
    return [r["body"]["messages"][0]["content"] for r in server.requests if r["path"].endswith("/chat/completions")]


def test_scripted_drafts_each_rejected_for_its_reason_and_redrafts_accepted(themes_run, chat, tmp_path):
    cooking, sailing = theme_of(themes_run, "cooking"), theme_of(themes_run, "sailing")
    chat.script.chat_replies = [
        # five groups where three are asked for: the first three are checked, the other two cut unread
        "Here you are:\n```json\n" + json.dumps({"groups": [GOOD, SHARES_A_WORD, ANSWERED, OFF_TOPIC, DUPLICATE]}) + "\n```",
        '{"groups": [{"question": "Which character',  # malformed JSON
        json.dumps({"groups": [OFF_TOPIC, DUPLICATE]}),
        json.dumps({"groups": [REDRAFT]}),  # a bare object: the redraft is accepted
        "I'm sorry, but I can't help with writing these.",  # a refusal
        json.dumps({"groups": SAILING}),
    ]  # then "[]", the fake server's answer once its replies are used up
    out = tmp_path / "needles.json"
    result = draft(themes_run, out, "--themes-ids", f"{term_of(themes_run, cooking)},{sailing}", "--per-theme", "3",
                   "--attempts", "4")  # a term, a number
    assert result.exit_code == 0, result.output
    chunks = pd.read_parquet(themes_run / "chunks.parquet")["text"].nunique()  # what it embeds first, said first
    assert said_first(result.stderr) == (chunks, 0, chunks)  # the themes run's chunks, none in this test's cache
    assert "distinct chunks of the themes run (the drafted needles are embedded as they are drafted)" in result.stderr.splitlines()[0]
    assert f"theme {cooking}: 2 of 3 groups accepted, 7 draft(s) rejected" in result.output
    assert f"theme {sailing}: 2 of 3 groups accepted, 3 draft(s) rejected" in result.output
    assert "(8 chat request(s); no judge: nothing checked whether a needle answers its question)" in result.output
    needle_set = load_needle_set(out)  # what nolima --needles reads, as it is
    assert [g.character for g in needle_set.groups] == ["Yuki", "Noor", "Kenji", "Priya"]
    assert needle_set.variants_served() == ["onehop", "inverted"]
    assert "No check tested whether a needle answers its question" in needle_set.description
    assert CliRunner().invoke(app, ["needles", "check", str(out)]).exit_code == 0

    rejected = pd.read_csv(tmp_path / "needles.rejected.csv", keep_default_na=False)
    reason = dict(zip(rejected["character"], rejected["reason"], strict=True))
    assert reason["Ana"].startswith("onehop needle shares content words with the question: wedding")
    assert reason["Marco"].startswith("the corpus may already answer it: chunk cooking:") and "holds its keyword 'dough'" in reason["Marco"]
    assert reason["Lena"].startswith(f"onehop needle does not blend into theme {cooking}")
    assert reason["Ravi"].startswith("onehop needle is a near-duplicate of group") and "cosine 1.000" in reason["Ravi"]
    answers = rejected[rejected["character"] == ""]
    said = ["the answer held 5 groups, 3 asked for", "the answer is malformed JSON (Unterminated string", "the answer holds no JSON (a refusal?)",
            'the answer is not a JSON object {"groups"', 'the answer is not a JSON object {"groups"']
    assert len(answers) == len(said) and all(r.startswith(s) for r, s in zip(answers["reason"], said, strict=True)), answers["reason"].tolist()
    assert answers["reason"].iloc[0] == "the answer held 5 groups, 3 asked for: the other 2 were cut unread"
    assert answers["attempt"].tolist() == [1, 2, 1, 3, 4] and answers["theme"].tolist() == [cooking, cooking, sailing, sailing, sailing]
    assert "I'm sorry" in answers["answer"].iloc[2]

    sent = prompts_sent(chat)
    assert len(sent) == 8
    assert "Write 3 needle groups" in sent[0] and "Write 3 needle groups" in sent[4]
    assert "Ana roasted a tray of potatoes" in sent[1] and "rejected: onehop needle shares content words" in sent[1]
    assert "Lena filed an appeal" not in sent[1]  # cut unread: not sent back either
    assert "Write 2 new groups" in sent[1] and "rejected: the answer is malformed JSON" in sent[2]
    bodies = [r["body"] for r in chat.requests if r["path"].endswith("/chat/completions")]
    assert [b["max_tokens"] for b in bodies] == [200 + 3 * 300, 200 + 2 * 300, 200 + 2 * 300, 200 + 2 * 300,
                                                 200 + 3 * 300, 200 + 3 * 300, 200 + 300, 200 + 300]
    data = json.loads(out.read_text())
    provenance = data["provenance"]
    assert provenance["chat_model"] == "openai:fake-model" and provenance["themes_run"] == str(themes_run)
    assert provenance["checks"]["nq_band"] is None and provenance["checks"]["threshold"] == 0.9
    assert provenance["judge"] is None and provenance["usage"]["chat"]["requests"] == 8
    assert provenance["usage"]["chat"]["tokens_sent"] > 8 * 300 and provenance["usage"]["judge"]["requests"] == 0
    for text_sha, text in provenance["prompts"].items():
        assert hashlib.sha256(text.encode()).hexdigest() == text_sha
    assert [g["attempt"] for g in data["groups"]] == [1, 4, 2, 2]
    assert all(g["prompt_sha256"] in provenance["prompts"] for g in data["groups"])
    assert provenance["theme_prompts"][str(cooking)] == data["groups"][0]["prompt_sha256"]
    for g in data["groups"]:
        for values in g["checks"]["needles"].values():
            assert values["shared_words"] == [] and values["blends_in"] and values["target_probability"] > 0.9
            assert 0 < values["nq_similarity"]["st:all-MiniLM-L6-v2"] < 1
        assert g["checks"]["absence"]["flagged_chunks"] == []
    assert data["groups"][1]["checks"]["needles"]["onehop"]["nearest_accepted"].startswith(f"{data['groups'][0]['id']}:")
    assert KEY not in out.read_text() and KEY not in (tmp_path / "needles.rejected.csv").read_text()


def test_a_network_failure_loses_no_accepted_draft_and_a_rerun_resumes(themes_run, chat, tmp_path):
    cooking, sailing = theme_of(themes_run, "cooking"), theme_of(themes_run, "sailing")
    out = tmp_path / "needles.json"
    chat.script.chat_replies = [json.dumps({"groups": [GOOD]})]
    chat.script.fail_with = [200, 500, 500]  # the second theme's request fails twice: retries spent
    result = draft(themes_run, out, "--themes-ids", f"{cooking},{sailing}", "--per-theme", "1")
    assert result.exit_code == 1
    lines = without_said_first(result.output)  # what it embeds first was said before the request failed
    assert len(lines) == 1 and lines[0].startswith("error: chat model fake-model: gave up after 2 attempts"), result.output
    assert [g.character for g in load_needle_set(out).groups] == ["Yuki"]

    before = len(chat.requests)
    chat.script.chat_replies = [json.dumps({"groups": SAILING[:1]})]
    result = draft(themes_run, out, "--themes-ids", f"{cooking},{sailing}", "--per-theme", "1")
    assert result.exit_code == 0, result.output
    (prompt,) = prompts_sent(chat)[len(prompts_sent(chat)) - (len(chat.requests) - before):]
    assert f"Theme {sailing}:" in prompt and "Write 1 needle groups" in prompt
    assert [g.character for g in load_needle_set(out).groups] == ["Yuki", "Kenji"]
    assert f"theme {cooking}: 1 of 1 groups accepted, 0 draft(s) rejected" in result.output

    other = draft(themes_run, out, "--llm", "another-model")  # the last --llm counts
    assert other.exit_code == 1 and "was drafted with another chat model: its model was fake-model, now another-model; " \
        "to resume, draft with --llm 'openai:fake-model', or choose another output" in other.output, other.output
    before = len(chat.requests)
    elsewhere = draft(themes_run, out, "--llm", "openai:fake-model?base_url=http://127.0.0.1:9/v1")  # the same name, another server
    lines = [line for line in elsewhere.output.splitlines() if line.strip()]
    assert elsewhere.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: "), elsewhere.output
    assert "its base_url was none, now http://127.0.0.1:9/v1 (a server's URL, its port included, is part of the model's " \
        "identity" in lines[0] and "needs the same fixed port to resume" in lines[0], lines[0]
    assert "to resume, draft with --llm 'openai:fake-model'" in lines[0] and len(chat.requests) == before


def test_bad_input_is_one_line_before_any_request(themes_run, chat, tmp_path):
    def refused(*options, out=None):
        result = draft(*options) if out else draft(themes_run, tmp_path / "n.json", *options)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: "), result.output
        return lines[0]

    assert "does not exist" in refused(tmp_path / "missing", tmp_path / "n.json", out=True)
    (tmp_path / "not-themes").mkdir()
    (tmp_path / "not-themes" / "notes.txt").write_text("mine")
    assert "is not a finished themes run" in refused(tmp_path / "not-themes", tmp_path / "n.json", out=True)
    assert f"--themes-ids: theme 7 is not a theme of {themes_run} (its themes: 0..2" in refused("--themes-ids", "0,7")
    assert refused("--themes-ids", "0,nosuchterm") == (f"error: --themes-ids: no theme of {themes_run} has 'nosuchterm' among "
                                                       "its top terms (see its clusters.csv)")
    assert "--themes-ids names theme 0 twice in 0,0: each theme is drafted once (--per-theme sets how many groups)" in \
        refused("--themes-ids", "0,0")
    assert refused("--themes-ids", f"{term_of(themes_run, 0)},0") == (
        f"error: --themes-ids names theme 0 twice ({term_of(themes_run, 0)}, 0): name each theme once")
    shared = tmp_path / "shared-term"  # a run in which two themes share a top term
    shutil.copytree(themes_run, shared)
    clusters = pd.read_csv(shared / "clusters.csv")
    clusters.assign(top_terms=clusters["top_terms"].where(clusters["cluster"] == 2, clusters["top_terms"] + ";shared")).to_csv(
        shared / "clusters.csv", index=False)
    assert refused(shared, tmp_path / "n.json", "--themes-ids", "shared", out=True).startswith(
        f"error: --themes-ids: 'shared' is a top term of 2 themes of {shared}: 0 (")
    assert "name one by its number or by a term only it has" in refused(shared, tmp_path / "n.json", "--themes-ids", "shared", out=True)
    assert "--nq-band takes LO,HI" in refused("--nq-band", "0.4")
    assert "--nq-band must be LO,HI with -1 <= LO <= HI <= 1" in refused("--nq-band", "0.8,0.2")
    assert "--per-theme must be a whole number of needle groups from 1 to 50" in refused("--per-theme", "0")
    mine = tmp_path / "mine.json"
    mine.write_text('{"name": "my own set"}')
    assert "it is never replaced" in refused(themes_run, mine, out=True)
    assert mine.read_text() == '{"name": "my own set"}'
    assert chat.requests == [] and not (tmp_path / "n.json").exists() and not (tmp_path / "n.rejected.csv").exists()


def test_a_model_that_answers_garbage_or_drafts_that_all_fail_are_one_line_with_the_reasons_kept(themes_run, chat, tmp_path):
    cooking = theme_of(themes_run, "cooking")
    chat.script.chat_replies = ["lorem ipsum", "", "[1, 2, 3]"]
    result = draft(themes_run, tmp_path / "g.json", "--themes-ids", str(cooking), "--per-theme", "1")
    lines = without_said_first(result.output)  # what it embeds first was said before the requests
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: chat model openai:fake-model answered no usable JSON in 3 request(s)")
    rejected = pd.read_csv(tmp_path / "g.rejected.csv", keep_default_na=False)
    assert rejected["reason"].str[:22].tolist() == ["the answer holds no JS", "the answer is empty", 'the answer is not a JS']
    assert not (tmp_path / "g.json").exists()

    chat.script.chat_replies = [json.dumps({"groups": [GOOD]})]  # fine, but outside a band no one-hop needle reaches
    result = draft(themes_run, tmp_path / "b.json", "--themes-ids", str(cooking), "--per-theme", "1", "--attempts", "1",
                   "--nq-band", "0.9,1")
    assert result.exit_code == 1 and "error: no drafted group passed every check (1 rejected" in result.output
    (reason,) = pd.read_csv(tmp_path / "b.rejected.csv")["reason"]
    assert reason.startswith("onehop needle's needle-question similarity 0.") and "is outside [0.9, 1]" in reason


def test_a_plan_sends_nothing_and_max_cost_refuses_before_any_request(themes_run, chat, tmp_path):
    out = tmp_path / "p.json"
    result = draft(themes_run, out, "--plan", "--per-theme", "2")
    assert result.exit_code == 0, result.output
    assert "openai:fake-model: 3 to 9 chat request(s), at most" in result.output and "nothing was sent or written" in result.output
    chunks = pd.read_parquet(themes_run / "chunks.parquet")["text"].nunique()  # and what it would embed first: part of the plan
    assert said_first(result.stdout) == (chunks, 0, chunks) and result.stderr == ""
    rows = [line.split() for line in result.output.splitlines()[1:4]]
    assert [int(r[0]) for r in rows] == [0, 1, 2] and all(int(r[1]) == 2 and int(r[2].replace(",", "")) > 300 for r in rows)
    result = draft(themes_run, out, "--max-cost", "0.0001", "--chat-price", "100")
    assert result.exit_code == 1 and "error: the draft would cost up to $" in result.output and "over --max-cost $0.0001" in result.output
    result = draft(themes_run, out, "--max-cost", "1")
    assert result.exit_code == 1 and "no price known for chat model openai:fake-model" in result.output and "--chat-price" in result.output
    assert chat.requests == [] and not out.exists()


@pytest.mark.parametrize("answer, groups", [
    ('{"groups": [{"question": "Q?"}]}', [{"question": "Q?"}]),
    ('Sure!\n```json\n{"groups": [{"a": 1}]}\n```\nGood luck.', [{"a": 1}]),
    ('Here: {"groups": [{"a": 1}]} - done', [{"a": 1}]),
])
def test_drafts_are_read_from_a_bare_object_or_a_fence(answer, groups):
    assert parse_drafts(answer) == groups


@pytest.mark.parametrize("answer, says", [
    ("", "the answer is empty"),
    ("I cannot help with that.", "holds no JSON (a refusal?)"),
    ('{"groups": [', "malformed JSON"),
    ('Here they are: {"groups": [', "malformed JSON"),  # cut off amid prose: not "the answer is empty"
    ('Here they are:\n```json\n{"groups": [{"question": "Q?"', "malformed JSON"),  # an unclosed fence too
    ("[" * 100_000 + "]" * 100_000, "nests its JSON too deep to read"),  # a RecursionError before
    ('{"needles": []}', 'not a JSON object {"groups": [...]}'),
    ('{"groups": []}', "holds no groups"),
])
def test_unusable_answers_say_why(answer, says):
    with pytest.raises(InputError, match=__import__("re").escape(says)):
        parse_drafts(answer)


EXAMPLES = REPO_ROOT / "examples"


@contextlib.contextmanager
def example_chat_server(drafts):
    """``examples/scripted_chat.py`` serving ``drafts`` as a user starts it (port 0: a free one),
    yielding (its base URL, a function returning what it has printed); stopped afterwards."""
    server = subprocess.Popen([sys.executable, str(EXAMPLES / "scripted_chat.py"), str(drafts), "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        ready, _, _ = select.select([server.stdout], [], [], 60)
        first = server.stdout.readline() if ready else ""
        match = re.search(r"serving \d+ scripted replies(?: for the themes [^;]*?)? at (http://127\.0\.0\.1:\d+/v1);", first)
        assert match, f"the example server did not start: {first!r}"

        def printed() -> str:
            server.terminate()
            return server.communicate(timeout=30)[0]

        yield match.group(1), printed
    finally:
        if server.poll() is None:
            server.terminate()
            server.communicate(timeout=30)


def test_the_example_chat_server_drives_a_draft_through_the_cli_until_its_replies_are_used_up(themes_run, tmp_path, monkeypatch):
    monkeypatch.setenv("EMBEDEVAL_MAX_ATTEMPTS", "2")
    cooking, sailing = theme_of(themes_run, "cooking"), theme_of(themes_run, "sailing")
    drafts = tmp_path / "drafts.json"
    drafts.write_text(json.dumps({"description": "cooking, then sailing", "replies": [
        "Two groups:\n```json\n" + json.dumps({"groups": [GOOD, SHARES_A_WORD]}) + "\n```",
        {"groups": [REDRAFT]},
        {"groups": SAILING[:1]},
    ]}), encoding="utf-8")
    out = tmp_path / "needles.json"
    with example_chat_server(drafts) as (url, printed):
        spec = f"openai:scripted?base_url={url}"
        result = CliRunner().invoke(app, ["needles", "draft", "--themes", str(themes_run), "--llm", spec, "--out", str(out),
                                          "--themes-ids", f"{cooking},{sailing}", "--per-theme", "2", "-q"])
        assert result.exit_code == 1, result.output  # the third request used the last reply; the fourth gets a 410
        lines = without_said_first(result.output)
        assert len(lines) == 1 and lines[0].startswith("error: chat model scripted: HTTP 410")
        assert "all 3 scripted replies are used up" in lines[0]
        log = printed()
    assert [g.character for g in load_needle_set(out).groups] == ["Yuki", "Noor", "Kenji"]  # nothing accepted is lost
    assert CliRunner().invoke(app, ["needles", "check", str(out)]).exit_code == 0
    rejected = pd.read_csv(tmp_path / "needles.rejected.csv", keep_default_na=False)
    assert rejected["character"].tolist() == ["Ana"] and rejected["reason"].iloc[0].startswith("onehop needle shares content words")
    requests = re.findall(r"request (\d+) \(Theme (\d+):.*\): (.*)", log)
    assert requests == [("1", str(cooking), "reply 1 of 3"), ("2", str(cooking), "reply 2 of 3"), ("3", str(sailing), "reply 3 of 3"),
                        ("4", str(sailing), "HTTP 410, the replies are used up")]


def test_the_example_chat_server_answers_each_theme_from_its_own_replies_named_by_a_term(themes_run, tmp_path, monkeypatch):
    """Replies scripted per theme, the theme named by a term of its top terms, so the
    script holds whatever numbers the clusters get; asked in either order, each theme gets its own."""
    monkeypatch.setenv("EMBEDEVAL_MAX_ATTEMPTS", "1")
    cooking, sailing, stars = (theme_of(themes_run, topic) for topic in ("cooking", "sailing", "astronomy"))
    drafts = tmp_path / "drafts.json"
    drafts.write_text(json.dumps({"themes": {term_of(themes_run, cooking): [{"groups": [GOOD]}],
                                             term_of(themes_run, sailing).upper(): [{"groups": SAILING[:1]}]}}), encoding="utf-8")
    out = tmp_path / "needles.json"
    with example_chat_server(drafts) as (url, printed):
        result = CliRunner().invoke(app, ["needles", "draft", "--themes", str(themes_run), "--llm", f"openai:scripted?base_url={url}",
                                          "--out", str(out), "--themes-ids", f"{sailing},{cooking},{stars}", "--per-theme", "1", "-q"])
        lines = without_said_first(result.output)
        assert result.exit_code == 1 and len(lines) == 1, result.output  # the third theme has no scripted replies
        assert lines[0].startswith("error: chat model scripted: HTTP 422") and "no scripted replies for this prompt: theme " in lines[0]
        log = printed()
    assert [g.character for g in load_needle_set(out).groups] == ["Kenji", "Yuki"]
    requests = re.findall(r"request (\d+) \(Theme (\d+):.*\): (.*)", log)
    assert requests == [("1", str(sailing), f"{term_of(themes_run, sailing)} reply 1 of 1"),
                        ("2", str(cooking), f"{term_of(themes_run, cooking)} reply 1 of 1"),
                        ("3", str(stars), "HTTP 422, no scripted theme")]


def test_the_shipped_pg_essays_drafts_are_well_formed_and_show_a_rejection_and_its_redraft():
    spec = importlib.util.spec_from_file_location("scripted_chat", EXAMPLES / "scripted_chat.py")
    scripted_chat = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scripted_chat)
    per_theme = scripted_chat.load_replies(EXAMPLES / "pg-essays-drafts.json")
    assert list(per_theme) == ["essay", "starting"]  # the themes named by terms, not by numbers that can change
    replies = [parse_drafts(reply) for texts in per_theme.values() for reply in texts]
    groups = [g for reply in replies for g in reply]

    def problems(index: int) -> list[str]:  # the validator's, with the id and category the draft fills in
        return group_problems({"id": f"g{index}", "category": "draft", **groups[index]}, index)[1]

    rejected, redraft = groups[1], groups[2]  # the first answer's second group, sent back and redrafted
    assert problems(1) == ["onehop needle shares content words with the question: write",
                           "inverted needle shares content words with the question: write"]
    assert redraft["character"] == rejected["character"] and redraft["needles"] == rejected["needles"]
    assert len(replies[0]) == 2 and len(groups) == 9 and [i for i in range(len(groups)) if problems(i)] == [1]
    verdicts = scripted_chat.load_verdicts(EXAMPLES / "pg-essays-drafts.json")  # the judge: a verdict on every needle it may be asked about
    asked = {(g["question"], text) for i, g in enumerate(groups) if not problems(i) for text in g["needles"].values()}
    assert asked == set(verdicts)
    said = {needle: json.loads(verdict)["answers"] for (_, needle), verdict in verdicts.items() if _ == "Which character has been to Munich?"}
    assert said[groups[4]["needles"]["onehop"]] is False and said[groups[6]["needles"]["onehop"]] is True  # an allusion, then the link


@pytest.mark.parametrize("content, says", [
    (None, "cannot read drafts file"),
    ("{", "is not JSON"),
    ('{"replies": []}', "holds no replies"),
    ('{"replies": [3]}', "reply 1 of drafts file"),
    ('{"themes": {"Kitchen": ["{}"], "kitchen ": ["{}"]}}', "theme 'kitchen ' is given twice"),  # one list was silently lost
    ('{"themes": {" ": ["{}"]}}', "theme ' ' is empty"),
    ('{"themes": {"kitchen": ["{}"]}, "replies": ["{}"]}', 'holds both "themes" and "replies"'),
    ('{"replies": ["{}"], "verdicts": [{"needle": "N.", "answers": true, "reason": "r"}]}', "verdict 1 of drafts file"),  # no question
    ('{"replies": ["{}"], "verdicts": {"N.": true}}', '"verdicts" of drafts file'),
])
def test_the_example_server_refuses_a_bad_drafts_file_with_one_line(tmp_path, content, says):
    drafts = tmp_path / "drafts.json"
    if content is not None:
        drafts.write_text(content)
    result = subprocess.run([sys.executable, str(EXAMPLES / "scripted_chat.py"), str(drafts)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: ") and says in result.stderr and len(result.stderr.splitlines()) == 1


def test_the_example_server_refuses_a_port_in_use_with_one_line(tmp_path):
    drafts = tmp_path / "drafts.json"
    drafts.write_text('{"replies": ["no JSON here"]}')
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, str(EXAMPLES / "scripted_chat.py"), str(drafts), "--port", str(port)],
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == "" and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port}: ")


def test_the_scripted_servers_help_says_a_resumable_draft_needs_a_fixed_port():
    shown = subprocess.run([sys.executable, str(EXAMPLES / "scripted_chat.py"), "--help"], capture_output=True, text=True,
                           timeout=60, check=True).stdout
    assert "a draft that is to be resumed needs a fixed port" in " ".join(shown.split()), shown


# --- checks that spelling cannot fool (section 1) over the whole corpus (section 2) -----

def no_nan(constant):
    raise ValueError(f"{constant} in the needle set: not valid JSON")


def test_every_draft_is_checked_on_its_own_words_and_against_the_whole_corpus(themes_run, chat, tmp_path):
    cooking = theme_of(themes_run, "cooking")
    first = group("Which character made supper with dough?", "Yuki", "supper", GOOD["needles"]["onehop"], GOOD["needles"]["inverted"])
    twin = group("Which  character made\tsupper with dough?", "Noor", "dough",  # the same question, spaced otherwise
                 REDRAFT["needles"]["onehop"], REDRAFT["needles"]["inverted"])
    named = group("Which character cooked for a crowd?", "Saturn", "crowd",  # "the rings of Saturn": astronomy, not in the top 10
                  "Saturn seasoned a rich beef stew in a cast iron pan.", "In a cast iron pan, a rich beef stew was seasoned by Saturn.")
    fire = group("Which character survived a fire?", "Ines", "survived", "Ines barely escaped when the fire swept through her kitchen.",
                 "When the fire swept through her kitchen, Ines barely escaped.")
    hidden = group("Which character owns a bakery?", "Tomas", "bakery", "Tomas sells bread from his bake\u00adry in the old town.",
                   "In the old town, bread is sold by Tomas from his bake\u00adry.")
    same = group("Which character baked for a party?", "Omar", "party", "Omar stirred the butter into the flour for the Sunday lunch.",
                 "Omar stirred the butter into the flour for the Sunday lunch!")
    again = group("Which character cooked lunch at noon?", "YÜKI", "noon", "YÜKI stirred the onions with garlic until the sauce thickened.",
                  "Until the sauce thickened, the onions were stirred with garlic by YÜKI.")  # first's character, spelt otherwise
    drafts = [first, twin, named, fire, hidden, same, again]
    chat.script.chat_replies = [json.dumps({"groups": drafts})]
    out = tmp_path / "needles.json"
    result = draft(themes_run, out, "--themes-ids", str(cooking), "--per-theme", str(len(drafts)), "--attempts", "1")
    assert result.exit_code == 0, result.output
    assert f"theme {cooking}: 1 of {len(drafts)} groups accepted, {len(drafts) - 1} draft(s) rejected" in result.output

    data = json.loads(out.read_text(), parse_constant=no_nan)  # valid JSON: no NaN written
    (kept,) = data["groups"]
    assert kept["character"] == "Yuki" and 0 < kept["checks"]["absence"]["top_similarity"] < 1
    assert kept["checks"]["absence"]["corpus_chunks"] == {}
    rejected = pd.read_csv(tmp_path / "needles.rejected.csv", keep_default_na=False)
    reason = dict(zip(rejected["character"], rejected["reason"], strict=True))
    reasons = {name: text.split("; ") for name, text in reason.items()}
    assert any(r.startswith("the corpus may already answer it: chunk cooking:") and r.endswith("holds its keyword 'dough'")
               for r in reasons["Noor"]), reason["Noor"]
    assert f"asks the question of group {kept['id']}: two groups asking one question are duplicates" in reasons["Noor"]
    (saturn,) = [r for r in reasons["Saturn"] if r.startswith("the corpus may already answer it")]
    assert re.fullmatch(r"the corpus may already answer it: chunk astronomy:\d+ holds its character name 'Saturn' \(outside the "
                        r"question's top 10: \d+ of the corpus's \d+ chunks hold it\)", saturn), saturn
    assert reasons["Ines"] == ["onehop needle shares content words with the question: fire",
                               "inverted needle shares content words with the question: fire"]
    assert reasons["Tomas"][0] == ("onehop needle holds an invisible character U+00AD (SOFT HYPHEN), which a tokenizer drops: "
                                   "write the text without it")
    assert "onehop needle shares content words with the question: bakery" in reasons["Tomas"]
    assert reasons["Omar"] == ["inverted needle is the onehop needle word for word: it must say the same fact in another order"]
    assert reasons["YÜKI"] == [f"character 'yuki' is already used by group {kept['id']}"]

"""Per-provider request/token budgets of the API embedders, against the loopback fake server.

The budgets are per minute; ``EMBEDEVAL_BUDGET_PERIOD=2`` scales the window down to 2 s so a
test sees several windows in a few seconds.
"""

import threading
import time

import numpy as np
import pytest
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.embedders import budget
from embedeval.embedders.budget import Budget, BudgetError, ProviderLimiter
from embedeval.embedders.jina import JinaEmbedder
from embedeval.embedders.openai import OpenAIEmbedder
from embedeval.embedders.registry import load_embedder
from embedeval.embedders.voyage import VoyageEmbedder
from embedeval.errors import ConfigError

from fake_api import serving

KEYS = {"OPENAI": "sk-test-SECRET-openai", "VOYAGE": "pa-SECRET-voyage", "JINA": "jina_SECRET_key"}
PERIOD = 2.0


@pytest.fixture
def fake(monkeypatch):
    with serving(monkeypatch, KEYS) as server:
        yield server


def most_tokens_in_a_window(requests, counter, window: float) -> int:
    """The most tokens (reference tokenizer, as the budget counts them) that arrived at the server
    within any ``window`` seconds."""
    arrivals = sorted((r["time"], sum(counter.count(r["inputs"]))) for r in requests)
    return max(sum(n for t, n in arrivals if start <= t < start + window) for start, _ in arrivals)


@pytest.mark.slow
def test_tokens_sent_in_any_window_stay_within_the_tpm_budget(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("EMBEDEVAL_BUDGET_PERIOD", str(PERIOD))
    monkeypatch.setattr("embedeval.progress.live", lambda: True)  # bars drawn as in a terminal: the sending bar shows its rate
    texts = [f"passage number {i} about the river that runs past the old mill" for i in range(40)]
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n")
    counter = JinaEmbedder("jina-embeddings-v3").token_counter
    total = sum(counter.count(texts))
    tpm = 150
    assert total > 3 * tpm  # several windows' worth: sent all at once, it would break the budget
    result = CliRunner().invoke(app, ["embed", "-i", str(tmp_path / "texts.txt"), "-o", str(tmp_path / "v.npy"),
                                      "-e", "jina:jina-embeddings-v3", "--tpm", f"jina={tpm}", "--api-workers", "4",
                                      "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    assert np.load(tmp_path / "v.npy").shape == (40, 1024)
    sent = [t for r in fake.embedding_requests() for t in r["inputs"]]
    assert sorted(sent) == sorted(texts)
    # Arrival at the server lags the limiter's admission by the request's own latency (ms on an
    # idle loopback, more on a loaded CI machine), so windows a quarter shorter than the period are
    # checked: all at once, or at twice the budget, the tokens would still overflow one of them.
    assert most_tokens_in_a_window(fake.requests, counter, 0.75 * PERIOD) <= tpm
    assert max(sum(counter.count(r["inputs"])) for r in fake.requests) <= tpm  # batches cut to the budget
    assert f"tok/{PERIOD:g} s of {tpm}" in result.output  # the live sending bar shows the rate against the budget, per its period


@pytest.mark.slow
def test_the_request_budget_spaces_requests(fake, monkeypatch):
    monkeypatch.setenv("EMBEDEVAL_BUDGET_PERIOD", str(PERIOD))
    model = OpenAIEmbedder("text-embedding-3-small", rpm=2, max_workers=4)
    for i in range(3):  # three calls: the third must wait for the first to leave the window
        model.embed([f"text {i}"])
    times = [r["time"] for r in fake.requests]
    assert len(times) == 3 and times[2] - times[0] >= PERIOD - 0.15


@pytest.mark.slow
def test_a_retry_after_pauses_every_request_to_the_provider(fake):
    first = load_embedder("voyage:voyage-3-large", cache=False)
    second = load_embedder("voyage:voyage-3-large", cache=False)
    assert first.limiter is second.limiter  # one limiter per provider in the process
    fake.script.fail_with = [429]
    fake.script.fail_headers = {"Retry-After": "2"}
    before = len(fake.requests)
    worker = threading.Thread(target=first.embed, args=(["told to wait"],))
    worker.start()
    deadline = time.monotonic() + 10
    while first.limiter.paused_until <= time.monotonic() and time.monotonic() < deadline:
        time.sleep(0.01)  # until the 429 has come back and paused the provider
    assert first.limiter.paused_until > time.monotonic(), "the 429 did not pause the provider"
    second.embed(["another worker"])  # a different call, never refused itself
    worker.join(timeout=30)
    assert not worker.is_alive()
    refused, *later = fake.requests[before:]
    assert refused["inputs"] == ["told to wait"] and len(later) == 2
    assert {tuple(r["inputs"]) for r in later} == {("told to wait",), ("another worker",)}
    assert all(r["time"] - refused["time"] >= 2.0 for r in later), [r["time"] - refused["time"] for r in later]


@pytest.mark.slow
def test_twenty_consecutive_429s_end_in_one_error_line_within_the_time_budget(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("EMBEDEVAL_MAX_ATTEMPTS", "20")
    monkeypatch.setenv("EMBEDEVAL_RETRY_MAX_SECONDS", "30")
    (tmp_path / "texts.txt").write_text("never embedded\n")
    fake.script.fail_with = [429] * 20
    fake.script.fail_headers = {"Retry-After": "0.05"}
    start = time.monotonic()
    result = CliRunner().invoke(app, ["embed", "-i", str(tmp_path / "texts.txt"), "-o", str(tmp_path / "v.npy"),
                                      "-e", "openai:text-embedding-3-small", "--tpm", "openai=100000", "-q"])
    elapsed = time.monotonic() - start
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: openai:text-embedding-3-small request failed: gave up after 20 attempts (HTTP 429")
    assert len(fake.requests) == 20 and not (tmp_path / "v.npy").exists()
    assert elapsed < 30 + 15  # the configured total time (plus start-up), not 20 unbounded waits
    gaps = np.diff([r["time"] for r in fake.requests])
    assert (gaps >= 0.05).all()  # each retry waited as Retry-After asked


def test_an_input_over_the_token_budget_is_refused_before_sending(fake, tmp_path):
    model = JinaEmbedder("jina-embeddings-v3", tpm=50)
    long_text = " ".join(f"word{i}" for i in range(200))
    with pytest.raises(BudgetError, match=r"one request of [\d,]+ tokens is over the jina budget of 50 tokens per minute"):
        model.embed(["short", long_text])
    assert fake.requests == []  # refused before any request, not waited on forever
    (tmp_path / "texts.txt").write_text(long_text + "\n")
    result = CliRunner().invoke(app, ["embed", "-i", str(tmp_path / "texts.txt"), "-o", str(tmp_path / "v.npy"),
                                      "-e", "jina:jina-embeddings-v3", "--tpm", "50", "-q"])
    assert result.exit_code == 1 and "error: jina:jina-embeddings-v3: one request of" in result.output
    assert [r["inputs"] for r in fake.requests] == [["embedeval connection check"]]


def test_a_limiter_refuses_what_can_never_fit_and_times_out_what_cannot_fit_yet():
    limiter = ProviderLimiter("openai", Budget(rpm=10, tpm=100, period=60))
    try:
        with pytest.raises(BudgetError):
            limiter.acquire(101, timeout=5)
        assert limiter.acquire(100, timeout=0)  # fits now: admitted even with no time to wait
        start = time.monotonic()
        assert not limiter.acquire(1, timeout=0.3)  # the window is full for a minute
        assert time.monotonic() - start >= 0.29
        assert limiter.tokens_last_period() == 100
    finally:
        limiter.close()


def test_budgets_come_from_arguments_cli_settings_environment_then_tier_1_defaults(fake, monkeypatch):
    assert OpenAIEmbedder("text-embedding-3-small").budget == Budget(rpm=3_000, tpm=1_000_000)
    assert VoyageEmbedder("voyage-3-large").budget == Budget(rpm=2_000, tpm=3_000_000)
    assert JinaEmbedder("jina-embeddings-v3").budget == Budget(rpm=500, tpm=2_000_000)
    monkeypatch.setenv("EMBEDEVAL_OPENAI_TPM", "123456")
    monkeypatch.setenv("EMBEDEVAL_BUDGET_PERIOD", "2")
    assert OpenAIEmbedder("text-embedding-3-small").budget == Budget(rpm=3_000, tpm=123_456, period=2.0)
    budget.configure(tpm={"*": 1000, "openai": 2000}, rpm={"jina": 7}, workers=2)
    assert OpenAIEmbedder("text-embedding-3-small").budget.tpm == 2000
    jina = JinaEmbedder("jina-embeddings-v3")
    assert (jina.budget.rpm, jina.budget.tpm, jina.max_workers) == (7, 1000, 2)
    assert JinaEmbedder("jina-embeddings-v3", tpm=5, max_workers=1).budget.tpm == 5
    budget.configure()
    assert JinaEmbedder("jina-embeddings-v3").max_workers == 4
    monkeypatch.setenv("EMBEDEVAL_VOYAGE_RPM", "lots")
    with pytest.raises(ConfigError, match="EMBEDEVAL_VOYAGE_RPM must be a whole number"):
        VoyageEmbedder("voyage-3-large")


@pytest.mark.parametrize("args, says", [(["--tpm", "mistral=5"], "--tpm: unknown provider 'mistral'"),
                                        (["--rpm", "openai=0"], "--rpm takes N or provider=N"),
                                        (["--tpm", "lots"], "--tpm takes N or provider=N"),
                                        (["--api-workers", "0"], "--api-workers must be >= 1")])
def test_bad_budget_options_are_one_error_line(fake, tmp_path, args, says):
    (tmp_path / "texts.txt").write_text("text\n")
    result = CliRunner().invoke(app, ["embed", "-i", str(tmp_path / "texts.txt"), "-o", str(tmp_path / "v.npy"),
                                      "-e", "openai:text-embedding-3-small", *args])
    assert result.exit_code == 1 and f"error: {says}" in result.output, result.output
    assert fake.requests == []

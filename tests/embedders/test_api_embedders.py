import json
import logging

import numpy as np
import pytest
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.embedders.base import l2_normalize
from embedeval.embedders.registry import load_embedder
from embedeval.errors import APIError, EmbedderUnavailableError, UnknownEmbedderError
from embedeval.net.errors import RetryableError
from embedeval.net.retry import RetryPolicy
from embedeval.net.retry_after import parse_retry_after

from fake_api import DIM, FAULTS, FakeEmbeddingServer, fake_vector, finishes_within, serving

KEYS = {"OPENAI": "sk-test-SECRET-openai", "VOYAGE": "pa-SECRET-voyage", "JINA": "jina_SECRET_key"}
SPECS = ["openai:text-embedding-3-small", "openai:text-embedding-3-large", "voyage:voyage-3-large", "jina:jina-embeddings-v3"]


@pytest.fixture
def fake(monkeypatch):
    with serving(monkeypatch, KEYS) as server:
        yield server


@pytest.mark.slow
@pytest.mark.parametrize("spec", SPECS)
def test_vectors_come_back_in_order_and_normalised(fake, spec, tmp_path):
    model_name = spec.split(":")[1]
    texts = ["first text", "second text", "a third one"]
    model = load_embedder(spec, cache_dir=tmp_path)
    vectors = model.embed(texts, kind="query")
    expected = l2_normalize(np.array([fake_vector(t, DIM[model_name]) for t in texts]))
    np.testing.assert_allclose(vectors, expected, atol=1e-6)
    request = fake.embedding_requests()[-1]
    assert request["path"] == "/v1/embeddings" and request["model"] == model_name
    assert request["auth"] == f"Bearer {KEYS[spec.split(':')[0].upper()]}"
    if spec.startswith("jina"):
        assert request["body"]["task"] == "text-matching" and request["body"]["late_chunking"] is False
    if spec.startswith("voyage"):
        assert request["body"]["input_type"] is None and request["body"]["truncation"] is True


def test_cached_texts_are_not_sent_again(fake, tmp_path):
    model = load_embedder("jina:jina-embeddings-v3", cache_dir=tmp_path)
    model.embed(["alpha", "beta"])
    model.embed(["beta", "gamma", "alpha"])
    sent = [t for r in fake.embedding_requests() for t in r["inputs"]]
    assert sorted(sent) == ["alpha", "beta", "gamma"]
    again = load_embedder("jina:jina-embeddings-v3", cache_dir=tmp_path)  # a new process would do the same
    again.embed(["gamma", "alpha"])
    assert sorted(t for r in fake.embedding_requests() for t in r["inputs"]) == ["alpha", "beta", "gamma"]


@pytest.mark.slow
def test_batches_stay_within_input_and_token_limits(fake, tmp_path):
    model = load_embedder("openai:text-embedding-3-small", cache=False)
    texts = [f"short text number {i}" for i in range(2500)]
    model.embed(texts)
    sizes = [len(r["inputs"]) for r in fake.embedding_requests()]
    assert max(sizes) <= 2048 and sum(sizes) == 2500 and len(sizes) == 2

    voyage = load_embedder("voyage:voyage-3-large", cache=False)
    long_texts = [" ".join(f"w{i}x{j}" for j in range(4000)) for i in range(40)]
    start = len(fake.requests)
    voyage.embed(long_texts)
    counter = voyage.token_counter
    for request in fake.requests[start:]:
        assert sum(counter.count(request["inputs"])) <= 120_000
        assert len(request["inputs"]) <= 1000
    assert sum(len(r["inputs"]) for r in fake.requests[start:]) == 40


def test_over_long_inputs_are_cut_to_the_window(fake):
    model = load_embedder("openai:text-embedding-3-small", cache=False)
    text = " ".join(["lorem"] * 9000)
    model.embed([text])
    sent = fake.embedding_requests()[-1]["inputs"][0]
    assert text.startswith(sent) and model.token_counter.count([sent])[0] <= 8191
    assert model.count_tokens([text])[0] > model.max_tokens  # reported as truncated


def test_429_and_5xx_are_retried_then_succeed(fake):
    model = load_embedder("openai:text-embedding-3-small", cache=False)
    fake.script.fail_with = [429, 500, 503]
    vectors = model.embed(["retry me"])
    assert vectors.shape == (1, 1536)
    assert [r["inputs"] for r in fake.requests[-4:]] == [["retry me"]] * 4


@pytest.mark.parametrize("spec", SPECS[1:])
def test_a_429_storm_gives_up_after_bounded_attempts(fake, spec):
    model = load_embedder(spec, cache=False)
    before = len(fake.requests)
    fake.script.fail_with = [429] * 10
    with pytest.raises(APIError, match=r"gave up after 4 attempts .*429"):
        model.embed(["storm"])
    assert len(fake.requests) - before == 4


def failed(attempt_number: int, error: Exception, elapsed: float = 0.0):
    """A tenacity retry state after ``attempt_number`` attempts, the last failing with ``error``."""
    from tenacity import RetryCallState

    state = RetryCallState(None, None, (), {})
    state.start_time -= elapsed
    state.attempt_number = attempt_number
    state.set_exception((type(error), error, None))
    return state


def test_backoff_grows_and_is_bounded():
    policy = RetryPolicy(max_attempts=8, base_delay=1.0, max_delay=5.0)
    wait = policy.wait()
    delays = [[wait(failed(a + 1, RetryableError("HTTP 503"))) for _ in range(200)] for a in range(6)]
    assert all(0 <= d <= min(5.0, 2**a) for a, ds in enumerate(delays) for d in ds)
    assert np.mean(delays[2]) > np.mean(delays[0])


def test_retry_after_replaces_the_backoff_capped_by_max_delay_and_time_left():
    wait = RetryPolicy(base_delay=0.01, max_delay=5.0, max_seconds=60).wait()
    assert wait(failed(1, RetryableError("HTTP 429", retry_after=2.5))) == pytest.approx(2.5)
    assert wait(failed(1, RetryableError("HTTP 429", retry_after=100))) == pytest.approx(5.0)
    assert wait(failed(3, RetryableError("HTTP 429", retry_after=4), elapsed=58.5)) == pytest.approx(1.5, abs=0.1)
    assert wait(failed(1, RetryableError("HTTP 503"))) <= 0.01


def test_parse_retry_after_reads_seconds_and_http_dates():
    import datetime as dt

    now = dt.datetime(2025, 3, 1, 12, 0, 0, tzinfo=dt.UTC)
    assert parse_retry_after("7") == 7.0 and parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("Sat, 01 Mar 2025 12:00:30 GMT", now=now) == 30.0
    assert parse_retry_after("Sat, 01 Mar 2025 11:00:00 GMT", now=now) == 0.0  # in the past: no wait
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None and parse_retry_after("") is None


@pytest.mark.slow
@pytest.mark.parametrize("spec", SPECS[1:])
def test_retry_after_header_sets_the_wait(fake, spec):
    model = load_embedder(spec, cache=False)  # retries would otherwise wait ~0.01 s
    fake.script.fail_with = [429]
    fake.script.fail_headers = {"Retry-After": "1"}
    model.embed(["wait for me"])
    first, second = fake.requests[-2:]
    assert first["inputs"] == second["inputs"] == ["wait for me"]
    assert second["time"] - first["time"] >= 0.95


@pytest.mark.slow
@pytest.mark.parametrize("headers", [{}, {"Retry-After": "30"}])
def test_retries_are_bounded_in_total_time(fake, monkeypatch, headers):
    import time

    monkeypatch.setenv("EMBEDEVAL_MAX_ATTEMPTS", "1000")
    monkeypatch.setenv("EMBEDEVAL_RETRY_BASE_DELAY", "0.2")
    monkeypatch.setenv("EMBEDEVAL_RETRY_MAX_SECONDS", "1")
    model = load_embedder("jina:jina-embeddings-v3", cache=False)
    before = len(fake.requests)
    fake.script.fail_with = [500] * 10_000
    fake.script.fail_headers = headers
    start = time.monotonic()
    with pytest.raises(APIError, match=r"gave up after \d+ attempts within 1 s \(HTTP 500"):
        model.embed(["endless 500s"])
    assert time.monotonic() - start < 10  # bounded by the 1-s budget, not by 1000 attempts or a 30-s Retry-After
    assert 2 <= len(fake.requests) - before < 1000


@pytest.mark.parametrize("status", [429, 400])
@pytest.mark.parametrize("spec", SPECS[1:])
def test_keys_are_scrubbed_from_error_messages(fake, spec, status):
    model = load_embedder(spec, cache=False)
    fake.script.echo_auth = True  # the server quotes the key back in its error
    fake.script.fail_with = [status] * 10
    with pytest.raises(APIError) as info:
        model.embed(["leak"])
    message = str(info.value)
    assert KEYS[spec.split(":")[0].upper()] not in message and "SECRET" not in message
    assert "***" in message  # the quoted key reached the message and was replaced


def test_fingerprints_name_model_and_settings_but_no_key(fake):
    from embedeval.embedders.jina import JinaEmbedder
    from embedeval.embedders.voyage import VoyageEmbedder

    prints = {spec: load_embedder(spec, cache=False, verify=False).fingerprint for spec in SPECS}
    assert len(set(prints.values())) == len(SPECS)
    assert prints == {spec: load_embedder(spec, cache=False, verify=False).fingerprint for spec in SPECS}
    assert "dimensions=native" in prints["openai:text-embedding-3-small"]
    voyage, jina = prints["voyage:voyage-3-large"], prints["jina:jina-embeddings-v3"]
    assert "input_type=None" in voyage and "truncation=True" in voyage
    assert "task=text-matching" in jina and "late_chunking=False" in jina and "truncate=True" in jina
    for fingerprint in prints.values():
        assert "SECRET" not in fingerprint and fake.url not in fingerprint
    assert VoyageEmbedder("voyage-3-large", input_type="query").fingerprint != voyage
    assert JinaEmbedder("jina-embeddings-v3", task="retrieval.query").fingerprint != jina
    assert fake.requests == []


@pytest.mark.parametrize("spec, env", [("openai:text-embedding-3-small", "OPENAI_API_KEY"),
                                       ("voyage:voyage-3-large", "VOYAGE_API_KEY"),
                                       ("jina:jina-embeddings-v3", "JINA_API_KEY")])
def test_401_is_one_clear_error_at_load_without_the_key(fake, monkeypatch, spec, env):
    monkeypatch.setenv(env, "bad-key")
    with pytest.raises(APIError) as info:
        load_embedder(spec)
    assert f"authentication failed (HTTP 401); check {env}" in str(info.value)
    assert "bad-key" not in str(info.value)
    assert len(fake.requests) == 1  # not retried


def test_missing_key_and_unknown_model_fail_before_any_request(fake, monkeypatch):
    monkeypatch.delenv("VOYAGE_API_KEY")
    with pytest.raises(EmbedderUnavailableError, match="needs an API key in the environment variable VOYAGE_API_KEY"):
        load_embedder("voyage:voyage-3-large")
    with pytest.raises(UnknownEmbedderError, match="unknown openai model 'text-embedding-9'.*text-embedding-3-small"):
        load_embedder("openai:text-embedding-9")
    assert fake.requests == []
    fake.script.unknown_models = {"jina-embeddings-v3"}
    with pytest.raises(APIError, match="unknown model or wrong base URL"):
        load_embedder("jina:jina-embeddings-v3")


@pytest.mark.slow
def test_keys_never_reach_outputs(fake, tmp_path, books_dir, isolated_cache):
    from test_nolima import SMALL_GROUPS

    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "nolima", "-e", "openai:text-embedding-3-small", "-e", "voyage:voyage-3-large",
        "--groups", ",".join(SMALL_GROUPS), "--corpus", f"dir:{books_dir}",
        "--lengths", "128,256", "--depths", "3", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    sims = __import__("pandas").read_parquet(out / "similarities.parquet")
    assert set(sims["embedder"]) == {"openai:text-embedding-3-small", "voyage:voyage-3-large"}
    blobs = [result.output.encode()] + [p.read_bytes() for p in out.rglob("*") if p.is_file()]
    blobs += [p.read_bytes() for p in isolated_cache.rglob("*") if p.is_file()]
    for key in KEYS.values():
        assert not any(key.encode() in blob for blob in blobs), key
    assert "SECRET" not in json.dumps(json.loads((out / "config.json").read_text()))


@pytest.mark.slow
def test_skip_unavailable_runs_what_it_can(fake, monkeypatch, tmp_path, books_dir):
    from test_nolima import SMALL_GROUPS

    monkeypatch.delenv("VOYAGE_API_KEY")
    monkeypatch.delenv("JINA_API_KEY")
    args = ["nolima", "-e", "context-rot-5", "--groups", ",".join(SMALL_GROUPS),
            "--corpus", f"dir:{books_dir}", "--lengths", "128", "--depths", "3", "--out", str(tmp_path / "run"), "-q"]
    failed = CliRunner().invoke(app, args)
    assert failed.exit_code == 1 and "JINA_API_KEY" in failed.output
    result = CliRunner().invoke(app, [*args, "--skip-unavailable"])
    assert result.exit_code == 0, result.output
    assert "skipped jina:jina-embeddings-v3 (JINA_API_KEY is not set)" in result.output
    assert "skipped voyage:voyage-3-large (VOYAGE_API_KEY is not set)" in result.output
    sims = __import__("pandas").read_parquet(tmp_path / "run" / "similarities.parquet")
    assert set(sims["embedder"]) == {"openai:text-embedding-3-small", "openai:text-embedding-3-large", "st:all-MiniLM-L6-v2"}


@pytest.mark.slow
def test_requests_run_concurrently_and_results_keep_order(fake):
    model = load_embedder("jina:jina-embeddings-v3", cache=False)
    fake.script.delay = 0.2
    texts = [f"text {i}" for i in range(512 * 4)]  # 4 requests of 512 inputs
    vectors = model.embed(texts)
    assert fake.script.max_in_flight >= 2
    expected = l2_normalize(np.array([fake_vector(t, 1024) for t in texts[::97]]))
    np.testing.assert_allclose(vectors[::97], expected, atol=1e-6)


def expected_vectors(texts, spec):
    return l2_normalize(np.array([fake_vector(t, DIM[spec.split(":")[1]]) for t in texts]))


@pytest.mark.parametrize("spec", SPECS[1:])
def test_vectors_are_matched_to_texts_by_index_not_arrival_order(fake, spec):
    fake.script.always_shuffle = True
    texts = [f"text number {i}" for i in range(7)]
    vectors = load_embedder(spec, cache=False).embed(texts)
    np.testing.assert_allclose(vectors, expected_vectors(texts, spec), atol=1e-5)


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("spec", SPECS[1:])
def test_a_bad_response_is_retried_and_never_used(fake, spec, fault):
    model = load_embedder(spec, cache=False)
    before = len(fake.requests)
    fake.script.faults = [fault]
    texts = ["first text", "second text"]
    vectors = model.embed(texts)
    np.testing.assert_allclose(vectors, expected_vectors(texts, spec), atol=1e-5)
    assert len(fake.requests) - before == 2  # the spoiled answer, then a good one


@pytest.mark.parametrize("spec", SPECS[1:])
@pytest.mark.parametrize("fault, says", [("nan", "NaN"), ("inf", ""), ("null", "null"), ("zero", "all-zero"),
                                         ("short", "a vector of 1 values (#0), expected"), ("count", "1 vectors"),
                                         ("duplicate_index", "indices [0, 0]"), ("missing_data", ""),
                                         ("malformed_json", "malformed response"), ("huge_integer", "malformed response (ValueError"),
                                         ("deep_nesting", "malformed response (RecursionError"),
                                         ("true", "not a number (#0 holds true)"), ("string", 'not a number (#0 holds "0.5")'),
                                         ("overflow", "1e+39 (#0), which is beyond float32")])
def test_a_server_that_keeps_answering_badly_is_one_error_after_two_tries_and_nothing_is_cached(fake, tmp_path, monkeypatch,
                                                                                                 spec, fault, says):
    """A malformed 200 is not a transient fault: tried twice under the default policy (not 30 times)."""
    from embedeval.embedders.cache import EmbeddingCache

    monkeypatch.delenv("EMBEDEVAL_MAX_ATTEMPTS")  # the defaults, as a user has them (base delay kept small)
    model = load_embedder(spec, cache_dir=tmp_path)
    before = len(fake.requests)
    fake.script.faults = [fault] * 40
    with pytest.raises(APIError) as info:
        model.embed(["first text", "second text"])
    message = str(info.value)
    assert message.startswith(f"{spec} request failed: gave up after 2 attempts (") and says in message, message
    assert "\n" not in message and len(fake.requests) - before == 2
    assert EmbeddingCache(tmp_path).info()["vectors"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("spec", SPECS[1:])
def test_a_server_that_is_down_is_given_up_within_the_connect_budget(fake, monkeypatch, spec):
    """Connection refused is retried with backoff for EMBEDEVAL_RETRY_CONNECT_SECONDS (30 s by
    default; 1 s here), not for the 300 s that 429s and 5xx get."""
    import socket
    import time

    assert RetryPolicy().connect_seconds <= 30 and RetryPolicy().malformed_attempts <= 2
    with socket.socket() as probe:  # a port of this machine that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = spec.split(":")[0].upper()
    monkeypatch.setenv(f"{provider}_BASE_URL", f"http://127.0.0.1:{port}/v1")
    monkeypatch.delenv("EMBEDEVAL_MAX_ATTEMPTS")
    monkeypatch.setenv("EMBEDEVAL_RETRY_BASE_DELAY", "0.05")
    monkeypatch.setenv("EMBEDEVAL_RETRY_CONNECT_SECONDS", "1")
    monkeypatch.setenv("EMBEDEVAL_RETRY_MAX_SECONDS", "15")  # bounds the test on code without the connect budget
    start = time.monotonic()
    with pytest.raises(APIError) as info:
        load_embedder(spec, cache=False).embed(["nobody home"])  # the connection check at load, or the request
    elapsed = time.monotonic() - start
    assert "within 1 s" in str(info.value) and "\n" not in str(info.value), str(info.value)
    assert elapsed < 12  # the 1-s budget (and loading the tokenizer), not the 15-s one of 5xx


@pytest.mark.parametrize("offset", range(185, 205))
def test_a_key_straddling_the_cut_of_an_error_body_never_shows(fake, offset):
    model = load_embedder("jina:jina-embeddings-v3", cache=False)
    fake.script.echo_key_at = offset
    fake.script.fail_with = [400]
    with pytest.raises(APIError) as info:
        model.embed(["leak"])
    message = str(info.value)
    assert all(KEYS["JINA"][:n] not in message for n in range(6, len(KEYS["JINA"]) + 1)), message  # "jina_S" on


@pytest.mark.slow
def test_the_default_retry_budget_rides_out_a_429_storm(fake, monkeypatch):
    import time

    monkeypatch.delenv("EMBEDEVAL_MAX_ATTEMPTS")  # the defaults, as a user has them (base delay kept small)
    model = load_embedder("voyage:voyage-3-large", cache=False)
    fake.script.fail_headers = {"Retry-After": "1"}
    fake.script.storm_until = time.monotonic() + 3.5
    before = len(fake.requests)
    vectors = model.embed(["after the storm"])
    np.testing.assert_allclose(vectors, expected_vectors(["after the storm"], "voyage:voyage-3-large"), atol=1e-5)
    waits = np.diff([r["time"] for r in fake.requests[before:]])
    assert len(waits) >= 3 and (waits >= 0.95).all()  # every retry waited as the server asked


@pytest.mark.slow
def test_a_hung_server_is_timed_out_and_retried_within_bounds(fake, monkeypatch):
    import time

    from embedeval.embedders.openai import OpenAIEmbedder

    monkeypatch.setenv("EMBEDEVAL_RETRY_MAX_SECONDS", "1.5")
    model = OpenAIEmbedder("text-embedding-3-small", timeout=0.3)
    fake.script.delay = 2
    start = time.monotonic()
    with pytest.raises(APIError, match="openai:text-embedding-3-small request failed: gave up after"):
        model.embed(["hang"])
    assert time.monotonic() - start < 10  # a 1.5-s budget: not the 2-s hang times 30 attempts


@pytest.mark.slow
@pytest.mark.parametrize("spec", SPECS[1:])
def test_a_server_that_trickles_its_answer_is_timed_out_as_a_whole(fake, monkeypatch, spec):
    """A 200 sent a byte at a time keeps every read within the read timeout, so only a deadline on
    the whole answer (EMBEDEVAL_REQUEST_TIMEOUT) ends it: a timeout, retried and given up by the
    policy (1.5 s here), not a wait of one byte per 20 ms for the whole body."""
    import time

    monkeypatch.setenv("EMBEDEVAL_REQUEST_TIMEOUT", "0.5")
    monkeypatch.setenv("EMBEDEVAL_RETRY_MAX_SECONDS", "1.5")
    model = load_embedder(spec, cache=False)
    assert model.timeout == 0.5
    fake.script.trickle = 0.02  # far inside the 0.5-s read timeout; a body of 20,000+ bytes takes minutes
    start = time.monotonic()
    with pytest.raises(APIError) as info:
        finishes_within(60, lambda: model.embed(["trickle"]))
    message = str(info.value)
    assert message.startswith(f"{spec} request failed: gave up after ") and "within 1.5 s" in message, message
    assert "\n" not in message and time.monotonic() - start < 10
    assert len(fake.embedding_requests()) >= 2  # a timeout is retried, as the retry policy says


@pytest.mark.slow
def test_embed_against_a_trickling_server_of_ones_own_ends_in_one_error_line(fake, monkeypatch, tmp_path):
    import time

    monkeypatch.setenv("EMBEDEVAL_REQUEST_TIMEOUT", "0.5")
    monkeypatch.setenv("EMBEDEVAL_RETRY_MAX_SECONDS", "1")
    (tmp_path / "texts.txt").write_text("one text\n")
    fake.script.trickle = 0.02
    spec = f"openai:fake?base_url={fake.url}/v1&max_tokens=512"
    start = time.monotonic()
    result = finishes_within(60, lambda: CliRunner().invoke(app, ["embed", "-i", str(tmp_path / "texts.txt"), "-o",
                                                                  str(tmp_path / "v.npy"), "-e", spec, "--cache-dir",
                                                                  str(tmp_path / "cache")]))
    lines = result.output.strip().splitlines()
    assert result.exit_code != 0 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "request timeout of 0.5 s" in lines[0] and time.monotonic() - start < 15, result.output
    assert not (tmp_path / "v.npy").exists()


def test_openais_tokenizer_offline_gives_tiktokens_ids_and_exact_cuts(fake):
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    from embedeval.embedders.tokens import PROVIDER_TOKENIZERS, load_provider_counter

    path, sha256, pattern = PROVIDER_TOKENIZERS["cl100k_base"]
    data = __import__("importlib.resources").resources.files("tiktoken_ext").joinpath(path)
    tiktoken_pattern = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
    encoding = tiktoken.Encoding("cl100k", pat_str=tiktoken_pattern,  # tiktoken's own, as tiktoken_ext.openai_public has it
                                 mergeable_ranks=load_tiktoken_bpe(str(data), expected_hash=sha256), special_tokens={})
    counter = load_provider_counter("cl100k_base")
    texts = ["Hello world!", "naïve café 12345 — ÄÖÜ 日本語 🙂", "  spaces   and\ttabs\n\nnew lines ", "x" * 300,
             " ".join(f"w{i}x{i * 7}" for i in range(2000))]
    rng = np.random.default_rng(0)
    alphabet = list("abcXYZ 0123456789.,;'!?-\n\t\u00e9\u00fc\u65e5\u0416") + ["'s", "'ll", "  ", "\r\n"]
    texts += ["".join(rng.choice(alphabet, size=400)) for _ in range(30)]
    for text in texts:
        assert counter.ids([text])[0][0] == encoding.encode(text, disallowed_special=()), text
    fake.script.count_tokens = counter.count
    fake.script.max_input_tokens = 8191  # as OpenAI refuses a longer input
    model = load_embedder("openai:text-embedding-3-small", cache=False)
    assert model.tokenizer_name == "cl100k_base" and model.exact_tokens and "tokenizer=cl100k_base" in model.fingerprint
    long_text = " ".join(f"w{i}x{i * 7}" for i in range(6000))  # about 24,000 cl100k tokens
    model.embed([long_text])
    (sent,) = fake.embedding_requests()[-1]["inputs"]
    assert 8191 - 64 < len(encoding.encode(sent)) <= 8191 and long_text.startswith(sent)


@pytest.mark.parametrize("spec", ["openai:text-embedding-3-small", "voyage:voyage-3-large", "jina:jina-embeddings-v3"])
def test_a_redirect_to_another_origin_is_refused_and_the_other_host_gets_nothing(fake, spec, tmp_path):
    with FakeEmbeddingServer() as elsewhere:  # another port of 127.0.0.1: another origin
        fake.script.redirect_to = elsewhere.url
        with pytest.raises(APIError, match=f"{fake.url} redirected to {elsewhere.url} \\(HTTP 307\\); embedeval follows no "
                                           "redirect to another origin") as caught:
            load_embedder(spec, cache_dir=tmp_path)
        assert elsewhere.requests == [] and "SECRET" not in str(caught.value)


def test_the_clients_keep_the_proxy_of_the_environment_and_their_connection_limits(fake, monkeypatch):
    """The whole-answer deadline is event hooks, not a transport: an ``httpx`` client given a
    transport ignores ``HTTPS_PROXY`` and its ``limits``, and users behind a proxy could not reach
    the APIs."""
    from openai._constants import DEFAULT_CONNECTION_LIMITS

    from embedeval.embedders.jina import JinaEmbedder
    from embedeval.net.keys import APIKey
    from embedeval.net.openai_client import openai_client

    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # never connected to: the clients are only built
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    openai_http = openai_client(APIKey.optional(None), "https://api.openai.com/v1", False, 5.0)._client
    jina_http = JinaEmbedder("jina-embeddings-v3")._client
    for client, url in [(openai_http, "https://api.openai.com/v1/embeddings"), (jina_http, "https://api.jina.ai/v1/embeddings"),
                        (openai_http, "http://example.invalid/v1")]:
        transport = client._transport_for_url(client._merge_url(url))
        assert type(transport._pool).__name__ == "HTTPProxy", (client, url)
    assert openai_http._transport._pool._max_connections == DEFAULT_CONNECTION_LIMITS.max_connections
    assert fake.requests == []


@pytest.mark.parametrize("spec", SPECS[1:])
def test_a_malformed_answer_after_a_503_gets_its_own_second_try(fake, monkeypatch, spec):
    """Malformed answers are counted on their own: a 503 then one malformed answer is not the two
    malformed tries of the default policy."""
    monkeypatch.delenv("EMBEDEVAL_MAX_ATTEMPTS")  # the defaults, as a user has them (base delay kept small)
    model = load_embedder(spec, cache=False)
    before = len(fake.requests)
    fake.script.fail_with = [503]
    fake.script.faults = ["nan"]  # the first 200
    vectors = model.embed(["after a 503"])
    np.testing.assert_allclose(vectors, expected_vectors(["after a 503"], spec), atol=1e-5)
    assert len(fake.requests) - before == 3  # the 503, the malformed 200, a good one


@pytest.mark.slow
@pytest.mark.parametrize("spec", SPECS[1:])
def test_a_connection_reset_after_429s_longer_than_the_connect_budget_is_retried(fake, monkeypatch, spec):
    """The connect budget runs from the first of consecutive connection failures, not from the
    call's start: a keep-alive reset after a second of 429s is retried, not given up at once."""
    monkeypatch.setenv("EMBEDEVAL_MAX_ATTEMPTS", "10")
    monkeypatch.setenv("EMBEDEVAL_RETRY_CONNECT_SECONDS", "0.5")
    model = load_embedder(spec, cache=False)
    before = len(fake.requests)
    fake.script.fail_with = [429, 429, 429, 0]  # 0: the server hangs up without an answer
    fake.script.fail_headers = {"Retry-After": "0.3"}
    vectors = model.embed(["after the storm, a reset"])
    np.testing.assert_allclose(vectors, expected_vectors(["after the storm, a reset"], spec), atol=1e-5)
    assert len(fake.requests) - before == 5


# -- what a server sends is checked before it is cached ---------------------------


@pytest.mark.parametrize("spec", SPECS[1:])
def test_huge_but_finite_components_are_normalised_not_called_all_zero(fake, spec, tmp_path):
    """[1e20, ...] squared overflows float32: the norm is taken in float64, so the direction is kept."""
    fake.script.scale = 1e20
    texts = ["first text", "second text"]
    vectors = load_embedder(spec, cache_dir=tmp_path).embed(texts)
    np.testing.assert_allclose(vectors, expected_vectors(texts, spec), atol=1e-5)
    fake.script.scale = 1e-30  # squares underflow float32 to zero
    vectors = load_embedder(spec, cache=False).embed(["third text"])
    np.testing.assert_allclose(vectors, expected_vectors(["third text"], spec), atol=1e-5)


def test_the_norm_is_safe_for_any_float32():
    big = np.array([[3e38, 3e38, -3e38], [1e20, 0, 0], [1e-40, 1e-40, 0], [0, 0, 0]], dtype=np.float32)
    unit = l2_normalize(big)
    np.testing.assert_allclose(np.linalg.norm(unit[:3].astype(np.float64), axis=1), 1.0, atol=1e-6)
    assert unit[1].tolist() == [1.0, 0.0, 0.0] and not unit[3].any()


@pytest.mark.parametrize("spec", SPECS[1:])
def test_a_reply_naming_the_key_as_its_model_never_prints_or_stores_the_key(fake, spec, tmp_path, capsys, caplog):
    """The model name an answer gives is the server's text: the key is scrubbed out of it before
    the note prints it and the cache keys vectors under it (the audit: the note printed the key)."""
    from embedeval.embedders.cache import EmbeddingCache

    key = KEYS[spec.split(":")[0].upper()]
    fake.script.reply_model = f"proxy-{key}"
    caplog.set_level(logging.INFO, logger="embedeval")
    model = load_embedder(spec, cache_dir=tmp_path)
    model.embed(["alpha", "beta"])
    notes = [record.getMessage() for record in caplog.records if record.name == "embedeval"]
    assert len(notes) == 1 and "'proxy-***'" in notes[0] and key not in caplog.text and key not in capsys.readouterr().err
    assert key not in model.fingerprint
    EmbeddingCache(tmp_path).close()
    assert not any(key.encode() in path.read_bytes() for path in tmp_path.rglob("*") if path.is_file())  # names, facts, WAL


@pytest.mark.parametrize("spec", SPECS[1:])
def test_a_reply_naming_another_model_is_said_once_keyed_apart_and_never_mixed(fake, spec, tmp_path, caplog):
    from embedeval.embedders.cache import EmbeddingCache

    asked = spec.split(":")[1]
    fake.script.reply_model = "some-other-model"
    caplog.set_level(logging.INFO, logger="embedeval")
    model = load_embedder(spec, cache_dir=tmp_path)
    model.embed(["alpha", "beta"])
    model.embed(["gamma"])
    notes = [record.getMessage() for record in caplog.records if "some-other-model" in record.getMessage()]
    assert len(notes) == 1 and repr(asked) in notes[0] and "'some-other-model'" in notes[0], notes
    assert "replied=some-other-model" in model.fingerprint
    stored = EmbeddingCache(tmp_path).info()["vectors"]

    # a plan (nothing sent) and a process that reads the fingerprint before any answer find the recorded name
    before = len(fake.requests)
    assert "replied=some-other-model" in load_embedder(spec, cache_dir=tmp_path, plan=True).fingerprint
    assert "replied=some-other-model" in load_embedder(spec, cache_dir=tmp_path, verify=False).fingerprint
    assert len(fake.requests) == before

    # the server now answers as the model asked for: the other model's vectors are not returned
    fake.script.reply_model = None
    again = load_embedder(spec, cache_dir=tmp_path)
    assert "replied=" not in again.fingerprint
    again.embed(["alpha"])
    assert [r["inputs"] for r in fake.embedding_requests()][-1] == ["alpha"]

    # within one process: a reply under a third name is refused, and nothing of it is cached
    fake.script.reply_model = "a-third-model"
    count = EmbeddingCache(tmp_path).info()["vectors"]
    with pytest.raises(APIError) as info:
        again.embed(["delta"])
    message = str(info.value)
    assert "a-third-model" in message and repr(asked) in message and "\n" not in message, message
    assert EmbeddingCache(tmp_path).info()["vectors"] == count > stored


def test_a_reply_naming_another_model_after_the_keys_were_made_is_refused(fake, tmp_path):
    """Keys made before any answer (no check) name the model as asked; an answer under another
    name is then refused, not cached under them, and the name is remembered for the next run."""
    from embedeval.embedders.cache import EmbeddingCache

    spec = "openai:text-embedding-3-small"
    model = load_embedder(spec, cache_dir=tmp_path, verify=False)
    assert "replied=" not in model.fingerprint
    fake.script.reply_model = "text-embedding-ada-002"
    with pytest.raises(APIError, match="text-embedding-ada-002.*never mixed"):
        model.embed(["alpha"])
    assert EmbeddingCache(tmp_path).info()["vectors"] == 0
    rerun = load_embedder(spec, cache_dir=tmp_path, verify=False)
    assert "replied=text-embedding-ada-002" in rerun.fingerprint
    rerun.embed(["alpha"])
    assert EmbeddingCache(tmp_path).info()["vectors"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("behaviour", ["trickle", "delay"])
@pytest.mark.parametrize("spec", SPECS[1:])
def test_a_slow_server_is_given_up_at_the_request_deadline_with_the_time_said(fake, monkeypatch, spec, behaviour):
    """Each attempt may take the request timeout (0.5 s here), but one request's attempts take at
    most the request deadline (0.8 s here) in all, however long the retry budget for 429s is: a
    server that trickles its body (cut by the whole-answer deadline) or says nothing before its
    status line (cut by the client's read timeout, which the deadline lowers for the last attempt)."""
    import time

    monkeypatch.setenv("EMBEDEVAL_REQUEST_TIMEOUT", "0.5")
    monkeypatch.setenv("EMBEDEVAL_REQUEST_DEADLINE", "0.8")
    monkeypatch.setenv("EMBEDEVAL_RETRY_MAX_SECONDS", "60")
    monkeypatch.setenv("EMBEDEVAL_MAX_ATTEMPTS", "30")
    model = load_embedder(spec, cache=False)
    setattr(fake.script, behaviour, 0.02 if behaviour == "trickle" else 3)
    start = time.monotonic()
    with pytest.raises(APIError) as info:
        finishes_within(60, lambda: model.embed(["slow"]))
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert "within the request deadline of 0.8 s" in message and " s in all" in message and "\n" not in message, message
    assert elapsed < 3 and len(fake.embedding_requests()) == 2, (elapsed, message)


def test_the_default_deadline_ends_one_batch_in_under_two_minutes():
    from embedeval.defaults import DEFAULT_REQUEST_DEADLINE, DEFAULT_REQUEST_TIMEOUT
    from embedeval.net.retry import retry_policy_from_env

    policy = retry_policy_from_env()
    assert policy.request_deadline == DEFAULT_REQUEST_DEADLINE >= DEFAULT_REQUEST_TIMEOUT
    assert policy.request_deadline + policy.max_delay < 120  # the attempts, and at most one wait between them


@pytest.mark.parametrize("spec", SPECS[1:])
def test_a_compressed_answer_is_read_and_a_gzip_bomb_is_refused_with_one_line(fake, monkeypatch, spec, tmp_path):
    from embedeval.embedders.cache import EmbeddingCache

    monkeypatch.setenv("EMBEDEVAL_MAX_ANSWER_MB", "1")
    fake.script.gzip = True
    model = load_embedder(spec, cache_dir=tmp_path)
    np.testing.assert_allclose(model.embed(["zipped"]), expected_vectors(["zipped"], spec), atol=1e-5)
    fake.script.padding = 5_000_000  # 5 MB of spaces: about 5 KB sent
    before = len(fake.requests)
    with pytest.raises(APIError) as info:
        finishes_within(60, lambda: model.embed(["bomb"]))
    message = str(info.value)
    assert "larger than 1 MB" in message and "EMBEDEVAL_MAX_ANSWER_MB" in message and "\n" not in message, message
    assert len(fake.requests) - before == 1  # refused, not asked again
    assert EmbeddingCache(tmp_path).info()["vectors"] == 1


def test_the_answer_cap_is_well_above_the_largest_real_answer():
    from embedeval.defaults import DEFAULT_MAX_ANSWER_MB
    from embedeval.embedders.openai import OpenAIEmbedder

    largest = OpenAIEmbedder.models["text-embedding-3-large"]  # 2,048 vectors of 3,072 floats, ~20 bytes each as JSON
    assert DEFAULT_MAX_ANSWER_MB * 2**20 >= 2 * largest.max_inputs_per_request * largest.dim * 20


@pytest.mark.parametrize("encoding, compress", [
    ("gzip", lambda raw: __import__("gzip").compress(raw)),
    ("deflate", lambda raw: __import__("zlib").compress(raw)),
    ("deflate", lambda raw: (lambda c: c.compress(raw) + c.flush())(__import__("zlib").compressobj(wbits=-15))),  # raw deflate
])
def test_answers_are_inflated_a_piece_at_a_time(encoding, compress):
    from embedeval.net.answers import inflate
    from embedeval.net.errors import MalformedResponseError

    raw = b'{"data": []}' + b" " * 3_000_000
    body = compress(raw)
    chunks = [body[i:i + 4096] for i in range(0, len(body), 4096)]
    pieces = list(inflate(chunks, encoding, piece=65536))
    assert b"".join(pieces) == raw and max(map(len, pieces)) <= 65536
    with pytest.raises(MalformedResponseError, match=f"its {encoding} body does not decompress"):
        list(inflate([b"not compressed at all"], encoding))


@pytest.mark.parametrize("value", ["inf", "-1", "lots"])
def test_a_bad_answer_cap_is_one_config_error(monkeypatch, value):
    from embedeval.errors import ConfigError
    from embedeval.net.settings import max_answer_bytes_from_env

    monkeypatch.setenv("EMBEDEVAL_MAX_ANSWER_MB", value)
    with pytest.raises(ConfigError, match="EMBEDEVAL_MAX_ANSWER_MB must be a"):
        max_answer_bytes_from_env()


def test_one_error_tree_and_a_valueerror_of_our_own_is_a_bug_not_a_malformed_answer():
    """Retryable and fatal API errors are EmbedevalErrors (the command line says them in one line);
    inside :func:`openai_errors` only what the server's body causes (its JSON, its text, the client's
    validation) is a malformed answer: a ValueError raised by our own code goes up as it is."""
    from embedeval.errors import EmbedevalError
    from embedeval.net.errors import FatalAPIError, MalformedResponseError, openai_errors

    assert issubclass(RetryableError, EmbedevalError) and issubclass(FatalAPIError, EmbedevalError)
    with pytest.raises(ValueError, match="our own bug") as caught, openai_errors("OPENAI_API_KEY"):
        raise ValueError("our own bug")
    assert not isinstance(caught.value, MalformedResponseError)
    with pytest.raises(MalformedResponseError, match="malformed response"), openai_errors("OPENAI_API_KEY"):
        json.loads("<html>not json</html>")
    with pytest.raises(MalformedResponseError, match="malformed response"), openai_errors("OPENAI_API_KEY"):
        b"\xff\xfe".decode("utf-8")
    with pytest.raises(MalformedResponseError, match="malformed response"), openai_errors("OPENAI_API_KEY"):
        json.loads("[" + "1" * 5000 + "]")  # a ValueError of the parser's (more digits than Python converts), not ours (the audit)


@pytest.mark.parametrize("index", [0.5, True, "x", None])
def test_an_index_that_is_no_whole_number_is_a_malformed_answer(index):
    """``int`` reads 0.5 as 0 and true as 1: an answer's vectors would land on the wrong texts."""
    from embedeval.embedders.api import vectors_by_index
    from embedeval.net.errors import MalformedResponseError

    vector = [1.0, 0.0]
    with pytest.raises(MalformedResponseError, match="malformed response"):
        vectors_by_index([(index, vector), (1, vector)], 2, 2)
    assert vectors_by_index([(1.0, [0.0, 1.0]), ("0", vector)], 2, 2).tolist() == [[1.0, 0.0], [0.0, 1.0]]  # whole numbers as given


#: Forms of a key a careless server quotes back (tests/test_key_scrubbing.py builds them by hand).
QUOTED_FORMS = ["quote, nothing safe", "quote_plus, lower-case hex", "every character \\u-escaped", "base64 of :key"]


@pytest.mark.parametrize("status", [400, 500])
@pytest.mark.parametrize("form", QUOTED_FORMS)
def test_a_key_a_server_quotes_in_any_encoding_never_reaches_the_error_line(monkeypatch, tmp_path, form, status):
    """An embedding server's 400/500 body holding the URL-encoded key (or any encoding of
    it) was printed in the ``error:`` line."""
    from test_key_scrubbing import encodings

    key = "sk-EMBED/key+56="
    (tmp_path / "texts.txt").write_text("one text\n")
    with serving(monkeypatch, {"OPENAI": key}, max_attempts=2) as server:
        server.script.fail_with = [status] * 10
        server.script.echo_key_as = lambda sent: encodings(sent)[form]
        result = CliRunner().invoke(app, ["embed", "-i", str(tmp_path / "texts.txt"), "-o", str(tmp_path / "v.npy"),
                                          "-e", "openai:text-embedding-3-small", "-q"])
        assert server.requests, result.output  # the server was asked, and quoted the key back
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "*** was refused" in lines[0], lines[0]  # base64 of ':key' keeps its first letter: the ':' alone decides it
    assert not any(quoted in lines[0] for quoted in encodings(key).values())


def test_a_key_that_is_a_word_is_masked_in_the_error_line_and_said_once(monkeypatch, tmp_path):
    """A key too plain to scrub from texts (``LOCALKEY=local``) is still masked where
    embedeval prints it, where it stands alone (not inside ``localhost``), with one warning line."""
    monkeypatch.setenv("LOCALKEY", "local")
    (tmp_path / "texts.txt").write_text("one text\n")
    with serving(monkeypatch, {}, max_attempts=2) as server:
        server.script.fail_with = [400] * 10
        server.script.echo_key_as = lambda sent: f"{sent} (Bearer {sent}) from localhost"
        result = CliRunner().invoke(app, ["embed", "-i", str(tmp_path / "texts.txt"), "-o", str(tmp_path / "v.npy"), "-q", "-e",
                                          f"openai:m?base_url={server.url}/v1&key_env=LOCALKEY&max_tokens=512"])
        assert {r["auth"] for r in server.requests if r.get("method") != "GET"} == {"Bearer local"}
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 2, result.output
    assert lines[0] == ("warning: the key in LOCALKEY is too short to scrub from texts safely (5 character(s), fewer than 6); it is "
                        "masked where embedeval prints it, never replaced inside texts")
    assert lines[1].startswith("error: ") and "the key *** (Bearer ***) from localhost was refused" in lines[1], lines[1]

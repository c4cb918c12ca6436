"""Any OpenAI-compatible server (``openai:MODEL?base_url=...``), against a server on 127.0.0.1 that
behaves as text-embeddings-inference, vLLM and Ollama do: batches capped (413), over-long inputs
refused (400), no usage field, a model list that names what it loaded."""

import re

import numpy as np
import pytest
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.embedders import budget
from embedeval.embedders.base import l2_normalize
from embedeval.embedders.cache import cache_spec
from embedeval.embedders.models import resolve_model_path
from embedeval.embedders.registry import PRESETS, availability, canonical_spec, load_embedder
from embedeval.embedders.tokens import load_token_counter
from embedeval.errors import APIError, ConfigError, UnknownEmbedderError

from fake_api import FakeEmbeddingServer, fake_vector

TOKENIZER = f"st:{resolve_model_path('all-MiniLM-L6-v2')}"


@pytest.fixture
def server(monkeypatch):
    """A compatible server serving ``bge-m3`` (vectors of 12 values, loaded from a folder), capped
    at 3 inputs per request and 64 tokens per input (counted with MiniLM's tokenizer)."""
    budget.reset()
    counter = load_token_counter(TOKENIZER)
    monkeypatch.setenv("EMBEDEVAL_RETRY_BASE_DELAY", "0.01")
    monkeypatch.setenv("EMBEDEVAL_MAX_ATTEMPTS", "3")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-SECRET-openai")
    with FakeEmbeddingServer() as fake:
        fake.script.served = [{"id": "bge-m3", "root": "/models/BAAI/bge-m3"}]
        fake.script.dims = {"bge-m3": 12}
        fake.script.max_batch, fake.script.max_input_tokens, fake.script.no_usage = 3, 64, True
        fake.script.count_tokens = lambda texts: counter.count(texts, special_tokens=True)
        yield fake
    budget.reset()


def spec_of(server, **extra) -> str:
    options = {"base_url": f"{server.url}/v1", "max_tokens": 64, "tokenizer": TOKENIZER, **extra}
    return "openai:bge-m3?" + "&".join(f"{k}={v}" for k, v in options.items())


def test_any_model_on_a_server_of_ones_own(server, tmp_path):
    model = load_embedder(spec_of(server), cache_dir=tmp_path)
    texts = [f"text number {i} " + "word " * (i * 20) for i in range(8)]  # the longer ones over 64 tokens
    vectors = model.embed(texts)
    sent = [t for r in server.embedding_requests() for t in r["inputs"]]
    fitted, _ = model.inner.fit(texts)
    assert set(sent) == set(fitted) and fitted != texts  # cut below the window, with the served tokenizer
    np.testing.assert_allclose(vectors, l2_normalize(np.array([fake_vector(t, 12) for t in fitted])), atol=1e-6)
    assert model.dim == 12  # learned from the first answer
    sizes = [len(r["inputs"]) for r in server.embedding_requests()]
    assert sizes[0] == 8 and sum(n for n in sizes if n <= 3) == 8  # refused whole (413), answered in halves of halves
    assert model.inner.limits.max_inputs_per_request == 2  # kept for the next batches
    assert all(r["auth"] != "Bearer sk-SECRET-openai" for r in server.requests)  # the provider's key stays home


def test_the_fingerprint_names_the_server_and_what_it_serves_never_a_key(server, monkeypatch, tmp_path):
    monkeypatch.setenv("MY_SERVER_KEY", "tei-SECRET")
    model = load_embedder(spec_of(server, key_env="MY_SERVER_KEY"), cache_dir=tmp_path)
    assert f"server={server.url}/v1" in model.fingerprint and "served=bge-m3 from /models/BAAI/bge-m3" in model.fingerprint
    assert "SECRET" not in model.fingerprint and "SECRET" not in model.name
    assert {r["auth"] for r in server.requests} == {"Bearer tei-SECRET"}
    model.embed(["the same text"])
    server.script.served = [{"id": "bge-m3", "root": "/models/other-weights"}]  # the same name, other weights
    other = load_embedder(spec_of(server, key_env="MY_SERVER_KEY"), cache_dir=tmp_path)
    assert other.fingerprint != model.fingerprint
    other.embed(["the same text"])
    assert [r["inputs"] for r in server.embedding_requests()] == [["the same text"], ["the same text"]]  # not taken from the cache


def test_a_model_the_server_does_not_serve_is_one_error_naming_what_it_does(server):
    server.script.served = [{"id": "nomic-embed-text"}, {"id": "all-minilm"}]
    with pytest.raises(APIError, match="does not serve 'bge-m3'; it serves all-minilm, nomic-embed-text"):
        load_embedder(spec_of(server), cache=False)
    assert server.embedding_requests() == []


def test_a_server_without_a_model_list_is_named_unlisted(server):
    server.script.served = None
    model = load_embedder(spec_of(server), cache=False)
    assert "served=unlisted" in model.fingerprint


def test_one_input_the_server_still_refuses_is_one_error_naming_its_tokens(server):
    server.script.max_batch = 0  # refuses everything with 413
    with pytest.raises(APIError, match=r"one input of \d+ tokens is too large for the server .*lower max_tokens"):
        load_embedder(spec_of(server), cache=False)


def test_without_the_served_tokenizer_an_over_long_input_is_the_servers_400(server):
    server.script.count_tokens = lambda texts: [3 * len(t.split()) for t in texts]  # a tokenizer three times as fine
    spec = f"openai:bge-m3?base_url={server.url}/v1&max_tokens=64"
    model = load_embedder(spec, cache=False)
    with pytest.raises(APIError, match="HTTP 400: .*maximum context length of 64 tokens"):
        model.embed(["word " * 60])


def test_spec_options_are_checked_before_any_request(server):
    assert canonical_spec(f"openai:bge-m3?max_tokens=64&base_url={server.url}/v1/") == f"openai:bge-m3?base_url={server.url}/v1&max_tokens=64"
    for spec, error, says in [
        ("openai:bge-m3", UnknownEmbedderError, r"any model with \?base_url="),
        (f"openai:bge-m3?base_url={server.url}/v1", ConfigError, "needs `max_tokens`"),
        ("openai:bge-m3?base_url=ftp://x&max_tokens=5", ConfigError, "`base_url` must be an http"),
        ("openai:text-embedding-3-small?max_tokens=9000", ConfigError, "at most 8191"),
        ("openai:text-embedding-3-small?key_env=X", ConfigError, "goes with `base_url`"),
        (f"openai:bge-m3?base_url={server.url}/v1&max_tokens=5&tokenizer=/no/such/folder", ConfigError, "not a folder"),
        ("voyage:voyage-3-large?base_url=http://127.0.0.1:1&max_tokens=5", ConfigError, "is for OpenAI-compatible servers"),
        ("voyage:some-model", UnknownEmbedderError, "unknown voyage model"),
        (f"openai:bge-m3?base_url={server.url}/v1?token=abc&max_tokens=5", ConfigError, "must not hold a user, password, query"),
        (f"openai:bge-m3?base_url={server.url}/v1;token=abc&max_tokens=5", ConfigError, "must not hold .*;parameters"),
        (f"openai:bge-m3?base_url={server.url}/v1&max_tokens=5&key_env=OPENAI_API_KEY", ConfigError,
         "`key_env` must not be OPENAI_API_KEY: that key goes to the provider's own URL only"),
        ("openai:bge-m3?base_url=http://127.0.0.1:abc/v1&max_tokens=5", ConfigError, "port from 1 to 65535, not 'abc'"),
        ("openai:bge-m3?base_url=http://127.0.0.1:99999/v1&max_tokens=5", ConfigError, "port from 1 to 65535, not '99999'"),
        ("openai:bge-m3?base_url=http://127.0.0.1:0/v1&max_tokens=5", ConfigError, "port from 1 to 65535, not '0'"),
        (f"openai:bge-m3?base_url={server.url}/v1%0D%0AX-Injected:%201&max_tokens=5", ConfigError, "control characters"),
        (f"openai:bge-m3?base_url={server.url}/v1\r\nX-Injected: 1&max_tokens=5", ConfigError, "control characters"),
        ("openai:bge-m3?base_url=http://[::1/v1&max_tokens=5", ConfigError, "must be an http:// or https:// URL in ASCII"),
        ("openai:bge-m3?base_url=http://\uff11\uff12\uff17.0.0.1:18081/v1&max_tokens=5", ConfigError, "in ASCII"),
        (f"openai:bge-m3?base_url={server.url}/v1?&max_tokens=5", ConfigError, "must not hold a user, password, query"),
        (f"openai:bge-m3?base_url={server.url}/v1#&max_tokens=5", ConfigError, "must not hold a user, password, query"),
    ]:
        with pytest.raises(error, match=says):
            canonical_spec(spec)
    assert server.requests == []
    assert availability(spec_of(server)) == (True, f"a server of your own at {server.url}/v1")
    assert availability(spec_of(server, key_env="UNSET_KEY_VARIABLE")) == (False, "UNSET_KEY_VARIABLE is not set")


def test_ollamas_latest_tag_is_the_untagged_name(server):
    server.script.served = [{"id": "nomic-embed-text:latest"}]  # what Ollama lists for `ollama pull nomic-embed-text`
    model = load_embedder(f"openai:nomic-embed-text?base_url={server.url}/v1&max_tokens=512", cache=False)
    assert "served=nomic-embed-text:latest" in model.fingerprint


def test_a_refused_key_names_the_variable_the_spec_names(server, monkeypatch):
    server.script.served = [{"id": "m"}]
    monkeypatch.setenv("MY_KEY", "bad-key")
    with pytest.raises(APIError, match="check MY_KEY") as caught:
        load_embedder(f"openai:m?base_url={server.url}/v1&max_tokens=64&key_env=MY_KEY", cache=False)
    assert "OPENAI_API_KEY" not in str(caught.value) and "bad-key" not in str(caught.value)


def test_a_tokenizer_folder_without_a_tokenizer_or_a_password_in_the_url_is_one_error(server, tmp_path):
    with pytest.raises(ConfigError, match="holds no tokenizer"):
        canonical_spec(f"openai:m?base_url={server.url}/v1&max_tokens=64&tokenizer=st:{tmp_path}")
    with pytest.raises(ConfigError, match="must not hold a user, password"):
        canonical_spec("openai:m?base_url=http://user:hunter2@127.0.0.1:8080/v1&max_tokens=64")
    assert server.requests == []


def test_a_bad_port_is_one_error_line_before_any_request(server, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("a text\n")
    for port in ("abc", "99999"):
        result = CliRunner().invoke(app, ["embed", "-i", str(texts), "-o", str(tmp_path / "v.npy"), "-q",
                                          "-e", f"openai:bge-m3?base_url=http://127.0.0.1:{port}/v1&max_tokens=64"])
        assert result.exit_code == 1 and result.output.strip().splitlines() == [
            f"error: spec option base_url must have a port from 1 to 65535, not '{port}'"]
    assert not (tmp_path / "v.npy").exists()


def test_renaming_the_key_variable_re_embeds_nothing(server, monkeypatch, tmp_path):
    monkeypatch.setenv("KEY_A", "tei-SECRET")
    monkeypatch.setenv("KEY_B", "tei-SECRET")
    first = load_embedder(spec_of(server, key_env="KEY_A"), cache_dir=tmp_path)
    first.embed(["the same text"])
    again = load_embedder(spec_of(server, key_env="KEY_B"), cache_dir=tmp_path)
    np.testing.assert_array_equal(again.embed(["the same text"]), first.embed(["the same text"]))
    assert [r["inputs"] for r in server.embedding_requests()] == [["the same text"]]  # the second came from the cache


def test_specs_without_key_env_keep_their_cache_keys_byte_for_byte(server):
    for spec in [*PRESETS["context-rot-5"], "st:all-MiniLM-L6-v2?dtype=float16&max_seq_length=128", spec_of(server)]:
        assert cache_spec(canonical_spec(spec)) == canonical_spec(spec)
    assert cache_spec(canonical_spec(spec_of(server, key_env="KEY_A"))) == canonical_spec(spec_of(server))


def test_org_and_project_ids_never_reach_a_server_of_ones_own(server, monkeypatch):
    monkeypatch.setenv("OPENAI_ORG_ID", "org-SECRET")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-SECRET")
    load_embedder(spec_of(server), cache=False).embed(["a text"])
    sent = {name.lower() for request in server.requests for name in request["headers"]}
    assert len(server.requests) >= 3 and not sent & {"openai-organization", "openai-project"}
    assert "authorization" not in sent  # no key_env: no key, and no header standing for one


def test_a_key_named_by_key_env_is_the_only_authorization_sent(server, monkeypatch):
    monkeypatch.setenv("MY_SERVER_KEY", "sk-MINE")
    load_embedder(spec_of(server, key_env="MY_SERVER_KEY"), cache=False).embed(["a text"])
    sent = {value for request in server.requests for name, value in request["headers"].items() if name.lower() == "authorization"}
    assert sent == {"Bearer sk-MINE"}


def test_a_redirect_to_another_origin_is_one_error_naming_both_and_nothing_goes_there(server, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("a text\n")
    with FakeEmbeddingServer() as elsewhere:  # another port of 127.0.0.1: another origin
        elsewhere.script.served = server.script.served
        server.script.redirect_to = elsewhere.url
        result = CliRunner().invoke(app, ["embed", "-i", str(texts), "-o", str(tmp_path / "v.npy"), "-e", spec_of(server),
                                          "--cache-dir", str(tmp_path / "cache"), "-q"])
        assert elsewhere.requests == []
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: ")
    assert f"{server.url} redirected to {elsewhere.url} (HTTP 307); embedeval follows no redirect to another origin" in lines[0]
    assert not (tmp_path / "v.npy").exists()


@pytest.mark.parametrize("status", [404, 405, 501])
def test_a_server_without_a_model_list_is_unlisted_at_once(server, status):
    server.script.models_answer = (status, "application/json", b'{"error": "no such route"}')
    model = load_embedder(spec_of(server), cache=False)
    assert "served=unlisted" in model.fingerprint
    assert [r["path"] for r in server.requests if r.get("method") == "GET"] == ["/v1/models"]  # asked once, not retried


def test_a_model_list_that_fails_transiently_is_retried_within_bounds(server):
    server.script.models_answer = (503, "application/json", b'{"error": "loading"}')
    with pytest.raises(APIError, match="asking the server its models: gave up after 3 attempts"):
        load_embedder(spec_of(server), cache=False)
    assert len(server.requests) == 3 and server.embedding_requests() == []


@pytest.mark.parametrize("content_type, body, says", [
    ("text/html", b"<html><body>Welcome to nginx!</body></html>", "HTTP 200 (text/html), not a JSON model list: '<html>"),
    ("application/json", b'{"data": [{"object": "model"}]}', 'entries are not objects with an `id`: [{"object": "model"}]'),
    ("application/json", b'{"data": ["bge-m3"]}', 'entries are not objects with an `id`: ["bge-m3"]'),
    ("application/json", b'{"models": []}', 'not a model list (no `data` list): {"models": []}'),
])
def test_a_model_list_that_is_not_one_is_one_error_naming_the_url_and_what_came_back(server, content_type, body, says):
    server.script.models_answer = (200, content_type, body)
    with pytest.raises(APIError, match=re.escape(f"GET {server.url}/v1/models answered ") + ".*" + re.escape(says)):
        load_embedder(spec_of(server), cache=False)
    assert len(server.requests) == 1  # not retried, nothing embedded

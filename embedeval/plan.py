"""What a run would embed, send, cost and take, worked out before it starts (``--plan``).

A command's embedding steps run as they would, through models loaded with ``plan=True``
(:func:`~embedeval.embedders.registry.load_embedder`): each is a
:class:`~embedeval.embedders.recorder.Recorder` behind a read-only cache, so the plan sees exactly
the distinct inputs the run would ask for, which of them the cache holds, and what the rest
would cost, while nothing is sent or stored (a local model embeds a small sample to time itself:
in a process of its own where the plan counted without its weights, :func:`timed_apart`).
:func:`plan_of` turns one such model into an :class:`EmbedderPlan`:

- ``texts``: the distinct vectors the run needs (one per item its requests ask a vector for: a
  text, a token-id sequence for a local model, a chunk; :mod:`embedeval.embedders.requests`),
  ``cached`` of them in the cache (``None`` for a server of one's own: its cache key needs the
  server's answer), ``to_embed`` the rest; ``inputs``: what the model is given to make them (the
  requests' ``units``: a window of chunks read again for each group of ``commit_every`` chunks
  that needs it);
- ``tokens``: for an API model the tokens sent (inputs cut to the window, plus the connection
  check), counted with ``tokenizer``; exact with the served model's own tokenizer, else an
  estimate within ``token_margin`` (:data:`~embedeval.defaults.API_TOKEN_MARGIN`); for a local
  model the content tokens it reads, at most its window per input (special tokens and prompt left
  out; :meth:`~embedeval.embedders.recorder.TokenIdRecorder.tokens_read`);
- ``requests`` (API) and ``seconds``: for an API model ``period * max(tokens / tpm, requests /
  rpm)`` at its budget (a lower bound: latency aside); for a local model the time per input of
  a timed sample of its inputs times ``inputs`` (``calibrate``);
- ``usd = tokens / 1e6 * price`` and ``usd_high = usd * (1 + token_margin)``, the price in USD per
  million tokens from the provider's table or ``--price`` (keyed by the embedder's name,
  :func:`~embedeval.embedders.registry.embedder_name`, however its spec writes the options that do
  not change a vector); ``None`` where no price is known, and then the total is unknown too;
- ``key_env``: the environment variable whose API key the run will send (None: none), and
  ``key_set`` whether it is set here. A plan sends nothing, so it is made without the key: it
  prices a run before anyone buys access.

A command that embeds with models it loads itself plans through :func:`plan_work` (the models
loaded, its steps recorded, :func:`record_plans`); one whose models are loaded already, through
:func:`record_plans`. Every command that embeds a corpus plans so before it embeds, ``--plan`` or
not: without it the plan is not printed but said in a line per embedder on stderr
(:func:`forecast_line`), so that a run never embeds thousands of texts without saying so first.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import asdict, dataclass

import numpy as np

from embedeval.bounds import MemoryEstimate
from embedeval.defaults import API_TOKEN_MARGIN, DEFAULT_PLAN_CALIBRATION_TEXTS, DEFAULT_SEED
from embedeval.embedders.api import CHECK_TEXT
from embedeval.embedders.cached import CachedEmbedder
from embedeval.embedders.recorder import Recorder
from embedeval.embedders.registry import embedder_name, load_embedder
from embedeval.embedders.speed import device_setting, known_speed
from embedeval.embedders.timing import close_early, time_sample, timer_for
from embedeval.embedders.tokens import load_token_counter
from embedeval.errors import ConfigError
from embedeval.io import json_text
from embedeval.net.errors import refused_by_server
from embedeval.net.keys import key_is_set
from embedeval.progress import step


@dataclass(frozen=True)
class EmbedderPlan:
    """One embedder's share of a plan (see the module docstring)."""

    embedder: str
    texts: int
    cached: int | None
    to_embed: int
    inputs: int
    tokens: int
    tokenizer: str
    token_margin: float
    requests: int | None
    seconds: float | None
    time_basis: str
    usd_per_million: float | None
    price_source: str
    usd: float | None
    usd_high: float | None
    key_env: str | None = None
    key_set: bool = True


def parse_prices(items: list[str] | None) -> dict[str, float]:
    """``["openai:text-embedding-3-small=0.02", ...]`` -> {embedder name: USD per million tokens},
    each spec named as its embedder is (:func:`~embedeval.embedders.registry.embedder_name`:
    ``st:M?device=cpu`` and ``st:M`` are one embedder, named once). A price is a finite number >= 0
    in the digits 0-9 (``1_0`` and other scripts' digits, which ``float`` would read, are refused)."""
    prices: dict[str, float] = {}
    for item in items or []:
        spec, sep, value = item.rpartition("=")
        plain = value.isascii() and "_" not in value  # a number as written in the digits 0-9, no separators
        try:
            price = float(value) if plain else -1.0
        except ValueError:
            price = -1.0
        if not sep or not spec or not 0 <= price < math.inf:
            raise ConfigError(f"`prices` takes SPEC=USD per million tokens (e.g. openai:text-embedding-3-small=0.02), not {item!r}",
                              "prices")
        name = embedder_name(spec)
        if name in prices:
            raise ConfigError(f"`prices` names {name} twice ({item!r}): give one price per embedder", "prices")
        prices[name] = price
    return prices


def _timed_seconds(recorder: Recorder, n_sample: int, seed: int) -> tuple[float, int]:
    """Seconds the recorded model would take for all its inputs: a random sample of them embedded
    for real (after two to warm up; nothing stored), its time per input times their number; in
    the process its :attr:`~embedeval.embedders.recorder.Recorder.timer` loaded it in
    (:func:`timed_apart`), else here."""
    items = list(recorder.items)
    rng = np.random.default_rng(seed)  # the sample's time per input, times the inputs the run gives the model
    sample = [items[i] for i in rng.choice(len(items), size=min(n_sample + 2, len(items)), replace=False)]
    warm, timed = sample[:2], sample[2:] or sample
    seconds = recorder.timer.seconds(warm, timed) if recorder.timer is not None else time_sample(recorder.inner, warm, timed)
    return seconds / len(timed) * recorder.inputs, len(timed)


@contextlib.contextmanager
def timed_apart(models: dict[str, object], calibrate: bool = True):
    """While the block runs, each local model of ``models`` ({spec: model loaded with
    ``plan=True``}) whose weights this process has not loaded (a plan counts without them) loads
    in a process of its own (:class:`~embedeval.embedders.timing.SampleTimer`; the one the command
    started as it read its options, :func:`~embedeval.embedders.timing.start_early`), so that
    :func:`plan_of` times it there without waiting for the load: the seconds of importing PyTorch
    and reading the weights pass while the plan counts. Those processes end with the block.
    Nothing where ``calibrate`` is false (nothing is timed)."""
    recorders = [model.inner if isinstance(model, CachedEmbedder) else model for model in models.values()] if calibrate else []
    started = []
    try:
        for (spec, model), recorder in zip(models.items(), recorders, strict=False):  # no recorders (nothing timed) without calibrate
            if recorder.api is None and getattr(recorder.inner, "loaded", True) is False \
                    and known_speed(getattr(model, "cache", None), model.name, device_setting(recorder.inner)) is None:
                recorder.timer = timer_for(spec)
                started.append(recorder)
        yield
    finally:
        for recorder in started:
            recorder.timer.close()
            recorder.timer = None
        close_early()


def plan_of(model, prices: dict[str, float] | None = None, calibrate: bool = True, seed: int = DEFAULT_SEED,
            progress: bool = False) -> EmbedderPlan:
    """The plan of one model loaded with ``plan=True`` after the run's steps went through it
    (``progress``: a step line on stderr while a local model times itself)."""
    cache = model if isinstance(model, CachedEmbedder) else None
    recorder: Recorder = cache.inner if cache is not None else model
    api = recorder.api
    texts = cache.distinct_texts if cache is not None else len(recorder.items)
    cached = len(cache.found_keys) if cache is not None and not recorder.asks_server else None
    to_embed = texts - (cached or 0)
    given = (prices or {}).get(model.name)
    if api is None:
        seconds, basis = (0.0, "nothing to embed") if not to_embed else (None, "not estimated")
        known = known_speed(getattr(cache, "cache", None), model.name, device_setting(recorder.inner)) if calibrate else None
        if known is not None and to_embed:
            seconds = known["seconds"] / known["tokens"] * recorder.tokens
            basis = (f"at the pace an earlier run measured here ({known['tokens']:,} document tokens in "
                     f"{known['seconds']:.1f} s, {known['date']}; nothing loaded)")
        elif calibrate and to_embed and recorder.items:
            with step(f"{model.name}: timing a sample of its {recorder.inputs:,} inputs", progress):
                seconds, n = _timed_seconds(recorder, DEFAULT_PLAN_CALIBRATION_TEXTS, seed)
            basis = f"from {n} of its inputs timed here"
        price = given if given is not None else 0.0
        return EmbedderPlan(model.name, texts, cached, to_embed, recorder.inputs, recorder.tokens, f"{model.name} (its own)", 0.0, None,
                            seconds, basis, price, "--price" if given is not None else "a local model",
                            recorder.tokens / 1e6 * price, recorder.tokens / 1e6 * price)
    _, check_tokens = api.fit([CHECK_TEXT])
    tokens, requests, inputs = recorder.tokens + check_tokens[0], recorder.requests + 1, recorder.inputs + 1
    budget = api.budget
    seconds = budget.period * max(tokens / budget.tpm, requests / budget.rpm)
    margin = 0.0 if api.exact_tokens else API_TOKEN_MARGIN
    listed = None if api.options.own_server else api.prices.get(api.model)
    price = given if given is not None else listed
    source = "--price" if given is not None else api.prices_read if listed is not None else "no price known (give --price SPEC=USD)"
    usd = None if price is None else tokens / 1e6 * price
    own = "the served model's own" if api.options.tokenizer else "the provider's own"
    tokenizer = f"{api.tokenizer_name} ({own if api.exact_tokens else 'the reference, an estimate'})"
    key_env = api.request_key_env
    return EmbedderPlan(model.name, texts, cached, to_embed, inputs, tokens, tokenizer, margin, requests, seconds,
                        f"at its budget of {budget.rpm:,} requests and {budget.tpm:,} tokens per {budget.period:g} s", price, source, usd,
                        None if usd is None else usd * (1 + margin), key_env, key_env is None or key_is_set(key_env))


def record_plans(models: list, work, prices: dict[str, float] | None = None, calibrate: bool = True, seed: int = DEFAULT_SEED,
                 progress: bool = False) -> list[EmbedderPlan]:
    """The plans of ``models`` (loaded with ``plan=True``) after ``work(models)``, the command's
    embedding steps, went through them; a price for an embedder not among them is refused first
    (:func:`check_prices_used`). No models (a run whose embedders are lexical scorers, or all
    skipped): no plans, and ``work`` is not run."""
    check_prices_used([model.name for model in models], prices or {})
    if not models:
        return []
    work(models)
    return [plan_of(model, prices, calibrate, seed, progress) for model in models]


def plan_work(specs, work, cache_dir=None, prices: dict[str, float] | None = None, calibrate: bool = True,
              seed: int = DEFAULT_SEED, progress: bool = False) -> list[EmbedderPlan]:
    """The plans of the embedders ``specs`` (each once) for ``work(models)``, the embedding steps of
    a command, recorded on models loaded with ``plan=True`` from the cache in ``cache_dir``
    (:func:`record_plans`); local models are timed in processes of their own (:func:`timed_apart`)."""
    models = {spec: load_embedder(spec, cache_dir=cache_dir, plan=True) for spec in dict.fromkeys(specs)}
    with timed_apart(models, calibrate):
        return record_plans(list(models.values()), work, prices, calibrate, seed, progress)


def plan_documents(spec: str, texts: list[str], cache_dir=None, prices: dict[str, float] | None = None, calibrate: bool = True,
                   seed: int = DEFAULT_SEED, progress: bool = False) -> list[EmbedderPlan]:
    """:func:`plan_work` of one embedder whose work is embedding ``texts`` as documents (a corpus's chunks)."""
    return plan_work([spec], lambda models: models[0].embed(texts, kind="document"), cache_dir, prices, calibrate, seed, progress)


def forecast_line(plan: EmbedderPlan, what: str = "texts the command needs") -> str:
    """What a command says on stderr before it embeds (its plan, not printed: see the module
    docstring): ``st:all-MiniLM-L6-v2: 31,923 texts to embed, 120 found in the cache: the 32,043
    distinct texts the command needs``, the words of the run's last line (``newly embedded``); an
    API model's adds the tokens, requests, cost and least time of sending them; ``what`` names the
    texts counted."""
    if plan.cached is None:
        line = f"{plan.embedder}: {plan.texts:,} distinct {what}; which of them the cache holds is known once its server answers"
    else:
        line = f"{plan.embedder}: {plan.to_embed:,} texts to embed, {plan.cached:,} found in the cache: the {plan.texts:,} distinct {what}"
    if plan.requests is None or not plan.to_embed:  # a local model, or nothing to send
        return line
    tokens = f"{plan.tokens:,} tokens" + (f" ±{plan.token_margin:.0%}" if plan.token_margin else "")
    cost = "cost unknown (no price known)" if plan.usd is None else f"${plan.usd:,.4f}" + (
        f" (≤ ${plan.usd_high:,.4f})" if plan.usd_high != plan.usd else "")
    return f"{line}; {tokens} in {plan.requests:,} requests, {cost}, at least {_duration(plan.seconds)} at its budget"


def check_max_cost(plans: list[EmbedderPlan], max_cost: float | None) -> None:
    """One :class:`~embedeval.errors.ConfigError` when the plans' high cost estimate exceeds
    ``max_cost`` USD, or when an embedder that sends tokens has no price to tell."""
    if max_cost is None:
        return
    check_ceiling(max_cost)
    unpriced = [p.embedder for p in plans if p.usd_high is None and p.tokens]
    if unpriced:
        raise ConfigError(f"no price known for {', '.join(unpriced)}, so `max_cost` cannot be kept: give `prices` SPEC=USD", "prices")
    total = sum(p.usd_high or 0.0 for p in plans)
    if total > max_cost:
        margin = max(p.token_margin for p in plans)
        high = f" (the estimated tokens +{margin:.0%})" if margin else ""
        raise ConfigError(f"the run would cost up to ${total:,.4f}{high}, over `max_cost` ${max_cost:,.4f}; nothing was sent", "max_cost")


def check_ceiling(max_cost: float | None, written: str | None = None) -> None:
    """A cost ceiling is a number of USD >= 0 (or None: no ceiling); else one error (quoting it as
    ``written``, when it was text)."""
    if max_cost is not None and not 0 <= max_cost < math.inf:
        raise ConfigError(f"`max_cost` must be a number of USD >= 0, not {written or max_cost}", "max_cost")


def check_price(price: float | None, parameter: str) -> None:
    """A price in USD per million tokens is a finite number >= 0 (or None: not known); else one
    error naming ``parameter`` (``nan`` would switch a cost ceiling off, ``inf`` print ``$inf``)."""
    if price is not None and (isinstance(price, bool) or not isinstance(price, (int, float)) or not 0 <= price < math.inf):
        said = f"{price:g}" if isinstance(price, float) else repr(price)
        raise ConfigError(f"`{parameter}` must be a number of USD per million tokens >= 0, not {said}", parameter)


class CostCeilingReached(ConfigError):
    """A request not sent because it could take the spending past ``max_cost`` (:class:`ChatMeter`),
    or a run stopped because an answer took the spending past it."""


#: Bytes of a text :meth:`ChatMeter.tokens` tokenises; the rest of a longer text is counted by its
#: bytes (a server that ignores ``max_tokens`` and answers 30 MB took the tokenizer past 5 GB).
TOKENIZED_BYTES = 256 * 1024


class ChatMeter:
    """The tokens a command sends to chat models and receives from them while it runs, and what
    they cost, kept under a cost ceiling. Every attempt sent counts, the retries of a request
    included (:meth:`ask`):

    - before each attempt, one :class:`CostCeilingReached` naming ``max_cost`` if its worst case
      (its prompt and ``max_tokens`` of answer) could take the spending past ``max_cost``: that
      attempt is not sent;
    - an attempt answered is counted by what arrived: its prompt and its answer, each at least
      what the server says it counted (its ``usage``), an answer longer than ``max_tokens`` at its
      whole length; :meth:`stop_if_over` then stops the run when the spending passed ``max_cost``;
    - an attempt not answered is counted as the provider may bill it: the server refused it with
      an HTTP status (429, 5xx) or the connection failed: its prompt; it timed out or its answer
      broke off, was malformed or too large: its worst case, prompt and ``max_tokens`` (the model
      may have written, and billed, a whole answer that did not arrive).

    A text's tokens are the most of the reference tokenizer's count plus ``margin`` (an estimate of
    another model's tokens) and a quarter of its UTF-8 bytes (the reference tokenizer reads a long
    run of characters without spaces as one unknown token); of a text longer than
    :data:`TOKENIZED_BYTES`, only that many bytes are tokenised and the rest is counted as one
    token a byte (every token is at least one byte: an upper bound, and no tokenizer's memory is
    spent on it). A server that counted a prompt as more tokens than that has the next prompts'
    estimates raised by the same ratio."""

    def __init__(self, max_cost: float | None = None, margin: float = API_TOKEN_MARGIN, counter=None):
        check_ceiling(max_cost)
        self.max_cost, self.margin = max_cost, margin
        self.counter = counter or load_token_counter()
        self.usd = 0.0
        self.ratio: dict[str, float] = {}  # per server: the most its count of a prompt exceeded ours
        self.requests: dict[str, int] = {}
        self.sent: dict[str, int] = {}
        self.received: dict[str, int] = {}
        self.over: str | None = None  # the last answer that passed its max_tokens, in words

    def tokens(self, text: str) -> int:
        """The tokens ``text`` is counted as (the class docstring)."""
        data = text.encode("utf-8", "surrogatepass")
        head = data[:TOKENIZED_BYTES].decode("utf-8", "ignore")  # a character cut at the bound is counted with the rest
        counted = self.counter.count([head])[0] if head else 0
        rest = len(data) - len(head.encode("utf-8", "surrogatepass"))
        return max(math.ceil(counted * (1 + self.margin)), math.ceil((len(data) - rest) / 4)) + rest

    def ask(self, llm, who: str, price: float | None, prompt: str, max_tokens: int, what: str, max_attempts: int | None = None,
            on_attempt=None):
        """``llm.ask(prompt, max_tokens)`` (a :class:`~embedeval.llm.ChatLLM`) metered as ``who``
        (``chat``, ``judge``) at ``price``: every attempt checked before it is sent and counted
        after (the class docstring); ``what`` names the request in the ceiling's message.
        ``max_attempts`` bounds the attempts sent (None: the retry policy's); ``on_attempt()`` is
        called before each one that is sent."""
        sent = self.tokens(prompt)

        def sending(attempt: int) -> None:
            self.check(who, price, sent, max_tokens, what if attempt == 1 else f"{what} (its attempt {attempt})")
            if on_attempt is not None:
                on_attempt()

        def failed(error: BaseException) -> None:
            self._count(who, price, sent, 0 if refused_by_server(error) else max_tokens)

        reply = llm.ask(prompt, max_tokens, sending=sending, failed=failed, max_attempts=max_attempts)
        self.after(who, price, sent, reply, max_tokens, what)
        return reply

    def check(self, who: str, price: float | None, sent: int, max_tokens: int, what: str) -> None:
        """One :class:`CostCeilingReached` when sending ``sent`` tokens (:meth:`tokens` of the
        prompt) to ``who`` at ``price`` for up to ``max_tokens`` of answer could take the spending
        past ``max_cost``; ``what`` names the request in it."""
        if self.max_cost is None or price is None:
            return
        expected = math.ceil(sent * self.ratio.get(who, 1.0))
        worst = (expected + max_tokens) / 1e6 * price
        if self.usd + worst > self.max_cost:
            raise CostCeilingReached(f"stopped before {what}: it could cost up to ${worst:,.4f} ({expected:,} tokens sent, up "
                                     f"to {max_tokens:,} received), which with the ${self.usd:,.4f} spent so far "
                                     f"({self._spent_tokens()}) passes `max_cost` ${self.max_cost:,.4f}; nothing more was sent",
                                     "max_cost")

    def after(self, who: str, price: float | None, sent: int, reply, max_tokens: int | None = None, what: str = "a request") -> None:
        """Count one answered attempt of ``who``: ``sent`` (:meth:`tokens` of its prompt) and
        ``reply``'s tokens (:class:`~embedeval.llm.ChatReply`), each at least what the server says
        it counted; an answer longer than ``max_tokens`` is noted for :meth:`stop_if_over`."""
        if sent and (reply.prompt_tokens or 0) > sent:
            self.ratio[who] = max(self.ratio.get(who, 1.0), reply.prompt_tokens / sent)
        received = max(self.tokens(reply.text), reply.completion_tokens or 0)
        self._count(who, price, max(sent, reply.prompt_tokens or 0), received)
        if max_tokens is not None and received > max_tokens:
            self.over = f"the answer to {what} was {received:,} tokens, past its max_tokens of {max_tokens:,} (a server that ignores it)"

    def stop_if_over(self) -> None:
        """One :class:`CostCeilingReached` when what was counted passed ``max_cost`` (an answer
        longer than its ``max_tokens``): the run stops here, before another request."""
        if self.max_cost is not None and self.usd > self.max_cost:
            said = f"{self.over}: " if self.over else ""
            raise CostCeilingReached(f"stopped: {said}${self.usd:,.4f} spent ({self._spent_tokens()}) passes `max_cost` "
                                     f"${self.max_cost:,.4f}; nothing more was sent", "max_cost")

    def _count(self, who: str, price: float | None, sent: int, received: int) -> None:
        self.requests[who] = self.requests.get(who, 0) + 1
        self.sent[who] = self.sent.get(who, 0) + sent
        self.received[who] = self.received.get(who, 0) + received
        if price is not None:
            self.usd += (sent + received) / 1e6 * price

    def _spent_tokens(self) -> str:
        total = sum(self.sent.values()) + sum(self.received.values())
        return f"{total:,} tokens in {sum(self.requests.values())} request(s)"

    def usage(self, who: str) -> dict:
        """What was sent to ``who`` and received, as a needle draft's provenance records it."""
        return {"requests": self.requests.get(who, 0), "tokens_sent": self.sent.get(who, 0),
                "tokens_received": self.received.get(who, 0)}


def parse_ceiling(text: str | None) -> float | None:
    """A cost ceiling as written (``"5"``, ``"0.25"``) in USD, None for none; anything but a
    number >= 0 in ASCII digits (``abc``, ``nan``, ``-1``) is one error (:func:`check_ceiling`)."""
    if text is None:
        return None
    try:
        value = float(text) if _plain_number(text) else math.nan
    except ValueError:
        value = math.nan
    check_ceiling(value, repr(text))
    return value


def _plain_number(text: str) -> bool:
    """Whether ``text`` is written in ASCII without ``_``: ``float`` also reads ``1_0`` (10) and
    other scripts' digits, which a number of USD is not written with."""
    return text.isascii() and "_" not in text


def parse_price(text: str | None, parameter: str) -> float | None:
    """A price as written (``"2.5"``) in USD per million tokens, None for none; anything but a
    finite number >= 0 in ASCII digits (``1_0``, ``nan``, ``-1``) is one error (:func:`check_price`)."""
    if text is None:
        return None
    try:
        value = float(text) if _plain_number(text) else None
    except ValueError:
        value = None
    if value is None:
        raise ConfigError(f"`{parameter}` must be a number of USD per million tokens >= 0, not {text!r}", parameter)
    check_price(value, parameter)
    return value


def check_prices_used(embedders: list[str], prices: dict[str, float]) -> None:
    """A price for an embedder the run does not have is a mistake: one error naming it, before any
    planning (``embedders``: the names of the run's embedders, as
    :func:`~embedeval.embedders.registry.embedder_name` gives them)."""
    unused = sorted(set(prices) - set(embedders))
    if unused:
        raise ConfigError(f"`prices` names {', '.join(unused)}, which this run does not embed with "
                          f"(its embedders: {', '.join(embedders)})", "prices")


def unpriced(plans: list[EmbedderPlan]) -> list[str]:
    """The embedders whose cost is unknown (no price known): the total is unknown with them."""
    return [p.embedder for p in plans if p.usd is None]


def total_usd(plans: list[EmbedderPlan]) -> float | None:
    """The plans' cost in USD; None when one of them has no price (:func:`unpriced`)."""
    return None if unpriced(plans) else sum(p.usd for p in plans)


def keys_needed(plans: list[EmbedderPlan]) -> dict[str, bool]:
    """The environment variables whose API keys the run will send, each with whether it is set
    here (a plan itself needs none)."""
    return {p.key_env: p.key_set for p in plans if p.key_env}


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def format_plans(plans: list[EmbedderPlan], memory: MemoryEstimate | None = None) -> str:
    """The plans as a text table with a line per embedder on how its numbers were had, and the
    run's estimated peak memory where the command estimates it (:class:`~embedeval.bounds.MemoryEstimate`)."""
    header = ("embedder", "texts", "cached", "to embed", "tokens", "requests", "time", "cost (USD)")
    rows = []
    for p in plans:
        tokens = f"{p.tokens:,}" + (f" ±{p.token_margin:.0%}" if p.token_margin else "")
        cost = "unknown" if p.usd is None else f"{p.usd:,.4f}" + (f" (≤ {p.usd_high:,.4f})" if p.usd_high != p.usd else "")
        rows.append((p.embedder, f"{p.texts:,}", "?" if p.cached is None else f"{p.cached:,}", f"{p.to_embed:,}", tokens,
                     "-" if p.requests is None else f"{p.requests:,}", _duration(p.seconds), cost))
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]
    lines.append("")
    for p in plans:
        price = p.price_source if p.usd_per_million is None else f"${p.usd_per_million:g} per million tokens ({p.price_source})"
        lines.append(f"{p.embedder}: tokens counted by {p.tokenizer}; time {p.time_basis}; {price}")
    keys = keys_needed(plans)
    if keys:
        lines.append("the run will need " + ", ".join(f"{env} ({'set' if is_set else 'not set here'})" for env, is_set in keys.items())
                     + "; this plan needed no key")
    total, missing = total_usd(plans), unpriced(plans)
    if total is None:
        known = sum(p.usd for p in plans if p.usd is not None)
        lines.append(f"total: unknown: no price known for {', '.join(missing)} (give --price SPEC=USD); the others "
                     f"${known:,.4f} (nothing was sent or stored)")
    else:
        lines.append(f"total: ${total:,.4f} (nothing was sent or stored)")
    if memory is not None:
        lines.append(memory.line())
    return "\n".join(lines)


def plans_json(plans: list[EmbedderPlan], memory: MemoryEstimate | None = None) -> str:
    """The plans for scripts: ``{"embedders": [...], "total_usd": ..., "unpriced": [...],
    "keys_needed": {...}}``; ``total_usd`` is null when an embedder has no price, and ``unpriced``
    names those; ``keys_needed``: :func:`keys_needed`; ``peak_memory`` where the command
    estimates it (:meth:`~embedeval.bounds.MemoryEstimate.as_dict`: bytes, its parts, the memory here)."""
    found = {"embedders": [asdict(p) for p in plans], "total_usd": total_usd(plans), "unpriced": unpriced(plans),
             "keys_needed": keys_needed(plans)}
    if memory is not None:
        found["peak_memory"] = memory.as_dict()
    return json_text(found)

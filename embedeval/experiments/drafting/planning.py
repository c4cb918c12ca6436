"""What a draft would spend, before anything is sent (``needles draft --plan``, ``--max-cost``):
per theme the prompt's tokens and at most ``attempts`` requests, each sending its prompt (a
redraft also the rejected groups back) and getting at most its ``max_tokens``:

    tokens_max(theme) = attempts * (prompt_tokens + answer_tokens(N)) + (attempts - 1) * N * GROUP_TOKENS_ESTIMATE

with N the theme's missing groups; with a judge, at most two needles of every group checked, each a
request. The cost is the tokens at the price per million, plus the tokenizer's margin
(:func:`plan_draft`, :func:`check_draft_cost`)."""

from __future__ import annotations

from dataclasses import dataclass

from embedeval.defaults import API_TOKEN_MARGIN
from embedeval.embedders.tokens import load_token_counter
from embedeval.errors import ConfigError
from embedeval.experiments.drafting.config import DraftConfig
from embedeval.experiments.drafting.prompts import ANSWER_TOKENS_BASE, ANSWER_TOKENS_PER_GROUP, answer_tokens, draft_prompt, read_themes
from embedeval.experiments.drafting.storage import open_draft
from embedeval.experiments.judging import JUDGE_ANSWER_TOKENS, JUDGE_PROMPT, JUDGE_TEXT_TOKENS
from embedeval.experiments.themes.chunks import themes_chunks
from embedeval.experiments.themes.files import read_manifest
from embedeval.io import Force
from embedeval.llm import parse_chat_spec
from embedeval.needles import NO_OVERLAP_VARIANTS
from embedeval.plan import EmbedderPlan, check_ceiling, check_price, plan_documents

#: A plan's estimate of the tokens of one drafted group as JSON (question, character, keyword, two
#: or three needles) with its reason: what a redraft sends back per rejected one.
GROUP_TOKENS_ESTIMATE = 150


@dataclass(frozen=True)
class DraftPlan:
    """What a draft would send to the chat model (``--plan``): per theme the prompt's tokens, and
    in all the requests (one per theme at least, ``attempts`` at most) and the tokens sent and
    received at most (answers at most their ``max_tokens``, :func:`~embedeval.experiments.drafting.prompts.answer_tokens`; redrafts carry
    the rejected groups back, estimated at :data:`GROUP_TOKENS_ESTIMATE` each), counted with the
    reference tokenizer: an estimate within ``token_margin``. With a judge, ``judge_requests_max`` and ``judge_tokens_max`` (two
    needles of every group an answer may hold, each a prompt and up to
    :data:`~embedeval.experiments.judging.JUDGE_ANSWER_TOKENS` of answer), at ``judge_usd_per_million``."""

    chat_model: str
    themes: list[dict]
    requests_min: int
    requests_max: int
    tokens_max: int
    tokenizer: str
    token_margin: float
    usd_per_million: float | None
    usd_high: float | None
    judge_model: str | None = None
    judge_requests_max: int = 0
    judge_tokens_max: int = 0
    judge_usd_per_million: float | None = None


#: What :func:`plan_draft_embedding` counts, as its lines name it (:func:`~embedeval.plan.forecast_line`).
EMBEDDED_FIRST = "chunks of the themes run (the drafted needles are embedded as they are drafted)"


def plan_draft_embedding(config: DraftConfig, cache_dir=None, prices: dict[str, float] | None = None, calibrate: bool = True,
                         progress: bool = False) -> list[EmbedderPlan]:
    """What a draft embeds whatever is drafted (:mod:`embedeval.plan`): the themes run's chunks, by
    its embedder (the absence check searches them and theme membership reads them: from the cache,
    where the themes run left them). The drafted needles are not known before they are drafted.
    Nothing is sent or stored."""
    chunks, _ = themes_chunks(config.themes)
    spec = read_manifest(config.themes)["settings"]["embedder"]
    return plan_documents(spec, [chunk.text for chunk in chunks], cache_dir, prices, calibrate, progress=progress)


def plan_draft(config: DraftConfig, chat_model: str, usd_per_million: float | None = None,
               judge_usd_per_million: float | None = None, force: Force | bool = False) -> DraftPlan:
    """What :func:`~embedeval.experiments.drafting.loop.run_draft` would send (:class:`DraftPlan`), without sending or writing anything:
    the groups an existing draft at ``config.out`` already holds are not asked for again (``force``:
    an output it may replace, as :func:`~embedeval.experiments.drafting.storage.open_draft`). The judge's price defaults to the chat model's."""
    config.validate()
    check_price(usd_per_million, "chat_price")
    check_price(judge_usd_per_million, "judge_price")
    themes = read_themes(config.themes, config.theme_ids, config.prompt_chunks)
    embedder = read_manifest(config.themes)["settings"]["embedder"]
    judge = parse_chat_spec(config.judge).name if config.judge else None
    data, _ = open_draft(config, chat_model, embedder, judge, force)
    counter = load_token_counter()
    judge_request = counter.count([JUDGE_PROMPT.format(question="", needle="", character="")])[0] + JUDGE_TEXT_TOKENS + JUDGE_ANSWER_TOKENS
    rows, sent_max, judge_requests = [], 0, 0
    for theme in themes:
        missing = config.per_theme - sum(g.get("theme") == theme.cluster for g in data["groups"])
        if missing <= 0:
            continue
        tokens = counter.count([draft_prompt(theme, missing)])[0]
        # every request sends the prompt and gets an answer of up to max_tokens; a redraft also sends back the rejected groups
        theme_max = config.attempts * (tokens + answer_tokens(missing)) + (config.attempts - 1) * missing * GROUP_TOKENS_ESTIMATE
        asked = config.attempts * missing * len(NO_OVERLAP_VARIANTS) if judge else 0  # the judge: two needles of every group checked
        rows.append({"theme": theme.cluster, "groups": missing, "prompt_tokens": tokens, "tokens_max": theme_max,
                     "judge_requests_max": asked})
        sent_max += theme_max
        judge_requests += asked
    judge_price = usd_per_million if judge_usd_per_million is None else judge_usd_per_million
    usd = None
    if usd_per_million is not None and (judge_price is not None or not judge):
        usd = (sent_max * usd_per_million + judge_requests * judge_request * (judge_price or 0)) / 1e6 * (1 + API_TOKEN_MARGIN)
    return DraftPlan(chat_model, rows, len(rows), len(rows) * config.attempts, sent_max, f"{counter.name} (the reference, an estimate)",
                     API_TOKEN_MARGIN, usd_per_million, usd, judge, judge_requests, judge_requests * judge_request, judge_price)


def format_draft_plan(plan: DraftPlan) -> str:
    """The plan as lines of text: one per theme, then the totals."""
    lines = [f"{'theme':<6} {'groups':>6} {'prompt tokens':>13} {'tokens at most':>14}"]
    lines += [f"{r['theme']:<6} {r['groups']:>6} {r['prompt_tokens']:>13,} {r['tokens_max']:>14,}" for r in plan.themes]
    cost = ("cost unknown (give a price per million tokens)" if plan.usd_high is None
            else f"at most ${plan.usd_high:,.4f} at ${plan.usd_per_million:g} per million tokens"
            + (f" (the judge's ${plan.judge_usd_per_million:g})" if plan.judge_model and plan.judge_usd_per_million != plan.usd_per_million
               else ""))
    judge = (f"; the judge {plan.judge_model}: 0 to {plan.judge_requests_max} request(s) (each one-hop and inverted needle of "
             f"every group checked), at most {plan.judge_tokens_max:,} tokens" if plan.judge_model
             else "; no judge (nothing checks whether a needle answers its question)")
    lines.append(f"{plan.chat_model}: {plan.requests_min} to {plan.requests_max} chat request(s), at most {plan.tokens_max:,} tokens "
                 f"±{plan.token_margin:.0%} (counted by {plan.tokenizer}; answers at most their max_tokens, {ANSWER_TOKENS_BASE} + "
                 f"{ANSWER_TOKENS_PER_GROUP} a group; rejected groups sent back estimated at {GROUP_TOKENS_ESTIMATE} tokens each)"
                 f"{judge}; {cost}; nothing was sent or written")
    return "\n".join(lines)


def check_draft_cost(plan: DraftPlan, max_cost: float | None) -> None:
    """One :class:`~embedeval.errors.ConfigError` when the plan's high cost estimate exceeds
    ``max_cost`` USD, or when the chat model has no price to tell it by."""
    if max_cost is None:
        return
    check_ceiling(max_cost)
    if plan.usd_high is None:
        raise ConfigError(f"no price known for chat model {plan.chat_model}, so `max_cost` cannot be kept: give `chat_price` "
                          "(USD per million tokens)", "chat_price")
    if plan.usd_high > max_cost:
        raise ConfigError(f"the draft would cost up to ${plan.usd_high:,.4f} (the estimated tokens +{plan.token_margin:.0%}), "
                          f"over `max_cost` ${max_cost:,.4f}; nothing was sent", "max_cost")

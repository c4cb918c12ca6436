"""The drafting loop (:func:`run_draft`): per theme, requests to the chat model until its groups
are kept or its ``attempts`` are spent, each answer written before it is checked, the spending
held under ``max_cost`` as it runs (:class:`~embedeval.plan.ChatMeter`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from embedeval.errors import APIError, ConfigError, EmbedevalError, InputError
from embedeval.experiments.drafting.checks import DraftChecker
from embedeval.experiments.drafting.config import DraftConfig
from embedeval.experiments.drafting.planning import plan_draft_embedding
from embedeval.experiments.drafting.prompts import (
    SENT_BACK_CHARS,
    Theme,
    answer_tokens,
    cut_text,
    draft_prompt,
    draft_text,
    parse_drafts,
    read_themes,
    redraft_prompt,
    scrubbed,
    sha256_text,
)
from embedeval.experiments.drafting.storage import (
    RECHECKED,
    REJECTED_COLUMNS,
    UNCHECKED,
    is_unchecked,
    open_draft,
    rejected_path_of,
    rejected_row,
    save_draft,
    usage_of,
)
from embedeval.experiments.judging import JUDGE_TEMPERATURE, NeedleJudge
from embedeval.experiments.themes.files import read_manifest
from embedeval.io import Force, check_output_file, output_file_lock
from embedeval.llm import ChatLLM, ChatReply
from embedeval.plan import ChatMeter, CostCeilingReached, check_ceiling, check_price


@dataclass
class DraftResult:
    """What a draft produced: the output needle set (as written), the rejected table, and per theme
    the groups accepted (in all, this run included) and the drafts rejected in this run."""

    needle_set: dict
    rejected: pd.DataFrame
    accepted: dict[int, int]
    rejected_now: dict[int, int]
    requests: int
    out: Path
    rejected_path: Path
    judge_requests: int = 0


def run_draft(config: DraftConfig, llm, progress: bool = False, cache_dir=None, judge=None, max_cost: float | None = None,
              chat_price: float | None = None, judge_price: float | None = None, say_first=None,
              force: Force | bool = False) -> DraftResult:
    """Draft, check and keep needles per theme (:mod:`embedeval.experiments.drafting`); ``llm``: a
    :class:`~embedeval.llm.ChatLLM`; ``judge``: the judge's (default: ``config.judge``'s, None: no
    judge). ``max_cost`` (USD) holds while the draft runs, counted at ``chat_price`` and
    ``judge_price`` (USD per million tokens; the judge's default: ``chat_price``): a request that
    could pass it is not sent (one :class:`~embedeval.plan.CostCeilingReached`, all accepted kept).
    Everything a user can get wrong (settings, themes run, theme ids, the output, a second draft
    writing it) is refused before the first request; then ``say_first``, if given, is called with
    :func:`~embedeval.experiments.drafting.planning.plan_draft_embedding`'s plans (what the draft embeds first), before anything is embedded
    or sent; ``force`` (``embedeval --force``) lets the draft replace an output it did not write. A
    chat model (or judge) that answers no usable JSON at all, or a draft in which no group passes, is one :class:`~embedeval.errors.APIError` /
    :class:`~embedeval.errors.InputError` after the rejected table is written."""
    config.validate()
    check_ceiling(max_cost)
    check_price(chat_price, "chat_price")
    check_price(judge_price, "judge_price")
    judge_price = chat_price if judge_price is None else judge_price
    if max_cost is not None and chat_price is None:
        raise ConfigError(f"no price known for chat model {llm.chat.name}, so `max_cost` cannot be kept: give `chat_price` "
                          "(USD per million tokens)", "chat_price")
    if judge is None and config.judge is not None:
        judge = ChatLLM(config.judge, temperature=JUDGE_TEMPERATURE)  # a missing key: one line before any work
    themes = read_themes(config.themes, config.theme_ids, config.prompt_chunks)
    embedder = read_manifest(config.themes)["settings"]["embedder"]
    out = check_output_file(config.out, (".json",), force)
    with output_file_lock(out):
        data, rejected = open_draft(config, llm.chat.name, embedder, judge.chat.name if judge else None, force)
        if say_first is not None:
            say_first(plan_draft_embedding(config, cache_dir, calibrate=False, progress=progress))
        meter = ChatMeter(max_cost)
        provenance = data["provenance"]
        judging = NeedleJudge(judge, meter, judge_price, provenance["prompts"], cache_dir) if judge else None
        checker = DraftChecker(config, cache_dir=cache_dir, progress=progress, judge=judging)
        draft = _Draft(config, llm, chat_price, meter, checker, judging, data, rejected, out)
        try:
            for theme in themes:
                draft.theme(theme)
        except CostCeilingReached as exc:
            draft.save()
            kept, unchecked = len(data["groups"]), sum(map(is_unchecked, draft.rows))
            said = [f"{kept} accepted group(s) are kept in {out}" if kept else "no group was accepted yet"]
            if unchecked:
                said.append(f"{unchecked} answer(s) not checked yet are kept in {rejected_path_of(out)}, for a rerun to check "
                            "without asking again")
            go_on = ": run the command again to go on (the ceiling holds per run: a rerun may spend up to `max_cost` more)"
            raise CostCeilingReached(f"{exc}; {'; '.join(said)}{go_on if kept or unchecked else ''}", "max_cost") from None
        except APIError:
            draft.save()  # a judge's request that failed: the answer it was judging is in the rejected table
            raise
        draft.save()
        table = pd.DataFrame(draft.rows, columns=REJECTED_COLUMNS)
    if draft.requests and not draft.usable:
        raise APIError(f"chat model {llm.chat.name} answered no usable JSON in {draft.requests} request(s) (first: "
                       f"{table['reason'].iloc[-draft.requests]}); its answers are in {rejected_path_of(out)}")
    if judging is not None and judging.requests and not judging.usable:
        raise APIError(f"the judge {judging.name} gave no usable verdict in {judging.requests} request(s) (first: "
                       f"{judging.verdicts[0]['reason']}); the reasons are in {rejected_path_of(out)}")
    if not data["groups"]:
        raise InputError(f"no drafted group passed every check ({len(table)} rejected, reasons in {rejected_path_of(out)}); "
                         "nothing written to " + str(out))
    return DraftResult(data, table, draft.accepted, draft.rejected_now, draft.requests, out, rejected_path_of(out),
                       judging.requests if judging else 0)


class _Draft:
    """One run of :func:`run_draft` inside its lock: the requests per theme, the rejected rows,
    what is written after every request."""

    def __init__(self, config, llm, price, meter, checker, judging, data, rejected, out):
        self.config, self.llm, self.price, self.meter, self.checker, self.judging = config, llm, price, meter, checker, judging
        self.data, self.out = data, out
        self.rows = rejected.to_dict("records")
        self.accepted = {}
        self.rejected_now = {}
        self.requests = self.usable = 0
        usage = data["provenance"]["usage"]
        self.usage_before = {who: usage_of(usage.get(who)) for who in ("chat", "judge")}

    def theme(self, theme: Theme) -> None:
        """Check the answers for ``theme`` an earlier run left unchecked (:data:`~embedeval.experiments.drafting.storage.UNCHECKED`), then
        ask for its missing groups: up to ``attempts`` requests sent, retries included, each
        answer on disk before it is checked."""
        data, config, cluster = self.data, self.config, theme.cluster
        prompts = data["provenance"]["prompts"]
        self.accepted[cluster] = sum(g.get("theme") == cluster for g in data["groups"])
        self.rejected_now[cluster] = 0
        missing = config.per_theme - self.accepted[cluster]
        if missing <= 0:
            return
        first = draft_prompt(theme, missing)
        data["provenance"]["theme_prompts"][str(cluster)] = sha256_text(first)
        prompt, sent = first, 0
        for row in [r for r in self.rows if r["theme"] == cluster and is_unchecked(r)]:
            if missing <= 0:
                break
            self.rows = [r for r in self.rows if r is not row]  # paid for in an earlier run: checked now, not asked for again
            missing, sent_back = self._answer(cluster, row["attempt"], missing, row["prompt_sha256"], ChatReply(row["answer"]))
            prompt = redraft_prompt(first, missing, sent_back)

        def sending() -> None:
            nonlocal sent
            sent += 1

        while missing > 0 and sent < config.attempts:
            sha = sha256_text(prompt)
            prompts[sha] = prompt
            # a network failure ends the draft here: everything accepted is written
            reply = self.meter.ask(self.llm, "chat", self.price, prompt, answer_tokens(missing), f"request {sent + 1} for theme "
                                   f"{cluster}", max_attempts=config.attempts - sent, on_attempt=sending)
            self.requests += 1
            missing, sent_back = self._answer(cluster, sent, missing, sha, reply)
            prompt = redraft_prompt(first, missing, sent_back)

    def _answer(self, theme: int, attempt: int, missing: int, sha: str, reply: ChatReply) -> tuple[int, list[tuple[str, str]]]:
        """Write the answer to request ``attempt`` (its prompt's sha256 ``sha``) to disk, then check
        it: (the groups still missing, what a redraft sends back). An answer that took the
        spending past ``max_cost`` (longer than its ``max_tokens``) stops the draft once it is
        written (:meth:`~embedeval.plan.ChatMeter.stop_if_over`): a rerun checks it."""
        try:
            raws = scrubbed(parse_drafts(reply), self.llm.scrub)
        except InputError as exc:
            self.rows.append(rejected_row(theme, attempt, None, str(exc), sha, reply.text))
            self.rejected_now[theme] += 1
            self.save()
            self.meter.stop_if_over()
            return missing, [(cut_text(reply.text, SENT_BACK_CHARS), str(exc))]
        self.usable += 1
        unchecked = rejected_row(theme, attempt, None, f"{UNCHECKED}: the draft stopped while checking it{RECHECKED}", sha, reply.text)
        self.rows.append(unchecked)
        self.save()  # on disk before any check: a kill while the judge works loses nothing paid for
        self.meter.stop_if_over()
        kept, refused = self._check(raws, theme, attempt, missing, sha, unchecked)
        self.save()
        return missing - len(kept), [(draft_text(raw), reason) for raw, reason in refused]

    def _check(self, raws: list, theme: int, attempt: int, missing: int, sha: str, unchecked: dict):
        """Check an answer's groups (the first ``missing``: the rest are cut unread) and keep those
        that pass; (kept, refused). ``unchecked``: the answer's row while it is checked, taken out
        when the checks end, else saying why they did not (:data:`~embedeval.experiments.drafting.storage.UNCHECKED`)."""
        if len(raws) > missing:
            cut = rejected_row(theme, attempt, None, f"the answer held {len(raws)} groups, {missing} asked for: the other "
                                f"{len(raws) - missing} were cut unread", sha)
            if cut not in self.rows:  # an answer checked again (:data:`UNCHECKED`) is cut once
                self.rows.append(cut)
                self.rejected_now[theme] += len(raws) - missing
            raws = raws[:missing]
        heard = len(self.judging.verdicts) if self.judging else 0
        try:
            kept, refused = self.checker.check(raws, theme, self.data["groups"])
        except BaseException as exc:  # the judge was not asked about every group, Ctrl-C, a failure: the paid answer is kept
            said = str(exc) if isinstance(exc, EmbedevalError) else f"interrupted ({type(exc).__name__}{f': {exc}' if str(exc) else ''})"
            unchecked["reason"] = f"{UNCHECKED}: {said}{RECHECKED}"
            if not isinstance(exc, (CostCeilingReached, APIError)):  # those two are saved by run_draft, with their message
                self.save()
            raise
        finally:
            if self.judging:
                self.data["provenance"]["judge"]["verdicts"] += [{"theme": theme, "attempt": attempt, **v}
                                                                 for v in self.judging.verdicts[heard:]]
        self.rows = [r for r in self.rows if r is not unchecked]
        for group in kept:
            self.data["groups"].append({**group, "theme": theme, "attempt": attempt, "prompt_sha256": sha})
        self.rows += [rejected_row(theme, attempt, raw, reason, sha) for raw, reason in refused]
        self.rejected_now[theme] += len(refused)
        self.accepted[theme] += len(kept)
        return kept, refused

    def save(self) -> None:
        """Write the draft and its rejected table as they are now, with what was spent."""
        if not self.rows and not self.data["groups"] and not rejected_path_of(self.out).exists():
            return  # nothing answered yet (the first request failed): no empty table is left behind
        self.data["provenance"]["usage"] = {who: {k: self.usage_before[who][k] + v for k, v in self.meter.usage(who).items()}
                                            for who in ("chat", "judge")}
        save_draft(self.data, pd.DataFrame(self.rows, columns=REJECTED_COLUMNS), self.out)

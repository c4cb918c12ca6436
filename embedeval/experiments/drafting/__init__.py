"""Needles for a corpus of one's own, drafted by a chat model per theme and kept only when every
check passes (Context Rot wrote its needles by hand inside a theme; this closes the loop).

:func:`~embedeval.experiments.drafting.loop.run_draft` reads a themes run (:mod:`embedeval.experiments.themes`: its clusters, each one's
MMR representatives and top terms) and, for each chosen theme, asks the chat model
(:class:`~embedeval.llm.ChatLLM`, named as ``expand`` names it) for ``per_theme`` needle groups in
the needle-set group format, answered as JSON ``{"groups": [...]}`` (a bare object, or one inside a
```json fence). Every drafted group goes through the existing checks, and each value is recorded
per needle (:class:`~embedeval.experiments.drafting.checks.DraftChecker`):

1. the needle-set validator (``needles check``, :func:`~embedeval.needles.group_problems`): fields,
   the character in every needle, the keyword in the question, and no content lemma shared by the
   question and the one-hop or inverted needle; a draft must give the one-hop and inverted needles
   (``nolima``'s default variants) and a keyword, and no character of an accepted group;
2. the absence check: no chunk of the whole corpus (the themes run's chunks) holds the group's
   keyword or one of its character names as whole words (compared as every check compares words,
   :func:`~embedeval.text.words`), and the question's top k chunks
   (:func:`~embedeval.experiments.context_rot.answer_absence`, exact search) are recorded, so the
   corpus does not already answer it; the reason names the chunk (its rank when it is among the
   top k);
3. theme membership (:func:`~embedeval.experiments.themes.membership.theme_membership`, the theme as target):
   every needle blends in (probability > threshold and outside percentile >= its minimum);
4. needle-question similarity (:func:`~embedeval.experiments.context_rot.needle_question_similarity`)
   for ``embedder`` (default: the themes run's), recorded for every needle; with ``nq_band``
   (lo, hi) the one-hop and inverted needles must lie in it (literal needles share the question's
   words on purpose, so the band is not theirs);
5. no needle is a near-duplicate of a needle of an accepted group: cosine (the themes run's
   embedder, every character written as "someone") below ``duplicate_cosine``; and no accepted
   group asks the same question (the same words).

A theme's rejected drafts go back to the model with their reasons, for the groups still missing,
up to ``attempts`` requests per theme. Every rejected draft (and every answer that is no JSON, such
as a refusal) is a row of the rejected table with its reason: nothing is dropped silently. The
output is a needle set ``nolima --needles`` takes as it is, with provenance: the chat model, every
prompt sent (by sha256), the themes run (path, the sha256 of its ``themes.json`` and the key of
what defines its themes, :func:`~embedeval.experiments.themes.loading.themes_key`), each check's
settings and each needle's values. It is written after every request, so an interrupted draft
(a network failure) loses no accepted group, and a rerun with the same themes run and chat model
resumes, asking only for the groups still missing. One draft at a time writes an output (a lock
beside it, :func:`~embedeval.io.output_file_lock`).

With a judge (``DraftConfig.judge``, :mod:`embedeval.experiments.judging`) a group that passed
checks 1-4 is also refused when the judge says its one-hop or inverted needle does not let a
careful reader answer the question; without one, no check tests that, and the needle set's
description says so.

What the draft spends is bounded as it runs, not only in the plan: an answer is asked for with
``max_tokens`` (:func:`~embedeval.experiments.drafting.prompts.answer_tokens`), holds at most the groups asked for (the rest are cut
before any check), a redraft quotes back only the known fields of the rejected groups, cut
(:func:`~embedeval.experiments.drafting.prompts.draft_text`), ``attempts`` bounds the requests sent per theme, a retry of a failed one
included, and with ``max_cost`` every attempt sent (of the chat model and of the judge, retries
included) is counted (:meth:`~embedeval.plan.ChatMeter.ask`): none is sent that could take the
spending past it, and an answer longer than its ``max_tokens`` that took it past stops the draft
once the answer is written. Every answer is written before it is checked (a row of the rejected
table whose reason begins :data:`~embedeval.experiments.drafting.storage.UNCHECKED` until its checks end), so a draft stopped, failed or
killed (SIGTERM, ``kill -9``) while it checks an answer, the judge's requests included, loses
nothing paid for: a rerun checks that answer first, without asking for it again. What was spent
(``provenance.usage``) is written with the needle set, so it does not count a run that ended before
any group was accepted (no needle set yet; the rejected table keeps answers, not usage), nor the
judge's requests on an answer a kill cut short (docs/needles.md).

The package's modules, one job each (import a name from its module): :mod:`~embedeval.experiments.drafting.config`
(the settings), :mod:`~embedeval.experiments.drafting.prompts` (what is sent and how an answer is
read), :mod:`~embedeval.experiments.drafting.checks` (what a group must pass),
:mod:`~embedeval.experiments.drafting.storage` (the needle set, its rejected table, resuming),
:mod:`~embedeval.experiments.drafting.loop` (the requests per theme) and
:mod:`~embedeval.experiments.drafting.planning` (``--plan`` and ``--max-cost`` before anything is sent).
"""

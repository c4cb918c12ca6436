"""A local model's speed on this machine, remembered in the cache so that a plan need not load it.

A run measures what a local model took for the documents it embedded (``EmbedStats``:
``document_seconds`` and ``document_tokens``, the weights loaded before the clock starts). The
cache keeps the last such measure per model, device setting and machine, keyed by

    sha256("speed" \\0 the model's name \\0 its device setting (``auto`` when none is given) \\0
    this machine: host name, CPU count, architecture),

so ``--plan`` estimates a later run as seconds per token x the tokens it will embed, without
importing PyTorch or loading the weights to time a sample; another machine, device or model
times itself as before. A measure of fewer than :data:`LEAST_TOKENS` tokens is not kept (a few
windows say little of a sweep's pace). It is a pace, not a promise: longer inputs cost more per
token than short ones (attention, padding), as they do for the sample a plan times.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import platform

#: Tokens a measure must cover to be remembered: about what a plan's own sample of 32 inputs holds.
LEAST_TOKENS = 2_000


def machine_id() -> str:
    """This machine as the speed key names it: host name, CPU count and architecture."""
    return f"{platform.node()}|{os.cpu_count()}|{platform.machine()}"


def device_setting(model) -> str:
    """The device a local model was asked for (its options' ``device``), ``auto`` when none was."""
    options = getattr(model, "options", None)
    return getattr(options, "device", None) or "auto"


def speed_key(name: str, device: str) -> bytes:
    """The cache key of ``name``'s speed on ``device`` on this machine (see the module docstring)."""
    return hashlib.sha256("\0".join(("speed", name, device, machine_id())).encode("utf-8")).digest()


def remember_speed(store, name: str, device: str, seconds: float, tokens: int) -> None:
    """Keep ``seconds`` for ``tokens`` document tokens as ``name``'s speed in ``store`` (a cache's
    model facts: ``put_facts``), when the measure covers :data:`LEAST_TOKENS` tokens or more."""
    if tokens >= LEAST_TOKENS and seconds > 0:
        store.put_facts(speed_key(name, device), {"seconds": float(seconds), "tokens": int(tokens),
                                                  "date": datetime.date.today().isoformat()})


def known_speed(store, name: str, device: str) -> dict | None:
    """The speed remembered for ``name`` on ``device`` on this machine: ``seconds``, ``tokens``
    and ``date`` of the measure, or None (nothing kept, or a row that is not one)."""
    facts = store.get_facts(speed_key(name, device)) if store is not None else None
    if not isinstance(facts, dict):
        return None
    seconds, tokens = facts.get("seconds"), facts.get("tokens")
    if not isinstance(seconds, (int, float)) or not isinstance(tokens, int) or seconds <= 0 or tokens <= 0:
        return None
    return facts

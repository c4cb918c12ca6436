"""The wait a server asks for before the next request: ``Retry-After`` (seconds or an HTTP date,
RFC 9110 §10.2.3) or OpenAI's ``retry-after-ms``."""

from __future__ import annotations

import datetime as dt
import email.utils
from collections.abc import Mapping


def parse_retry_after(value: str | None, now: dt.datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value: a number of seconds or an HTTP date
    (RFC 9110 §10.2.3); ``None`` when absent or unreadable. Never negative."""
    if value is None or not str(value).strip():
        return None
    value = str(value).strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        seconds = (when - (now or dt.datetime.now(dt.UTC))).total_seconds()
    return max(0.0, seconds) if seconds == seconds else None  # NaN -> None


def retry_after_from_headers(headers: Mapping[str, str] | None) -> float | None:
    """The wait a response's headers ask for: ``retry-after-ms`` (OpenAI) or ``Retry-After``,
    looked up case-insensitively."""
    if not headers:
        return None
    lower = {str(k).lower(): v for k, v in headers.items()}
    if "retry-after-ms" in lower:
        ms = parse_retry_after(lower["retry-after-ms"])
        if ms is not None:
            return ms / 1000
    return parse_retry_after(lower.get("retry-after"))

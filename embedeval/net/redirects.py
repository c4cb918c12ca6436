"""Where a request may go: a URL's origin (scheme, host, port), and the response hook that refuses
a redirect to another origin before any client follows it."""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit

from embedeval.net.errors import FatalAPIError


def origin(url: str) -> tuple[str, str, int | None]:
    """A URL's origin: scheme, host (lower case) and port (the scheme's default when none is written)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(parts.scheme)


def origin_text(url: str) -> str:
    """``scheme://host:port`` of a URL, for messages (never its path or query)."""
    scheme, host, port = origin(url)
    return f"{scheme}://{host}:{port}"


def refuse_cross_origin_redirect(response, *args, **kwargs) -> None:
    """A response hook of ``httpx``, ``httpx2`` and ``requests`` clients: a redirect to another
    origin (scheme, host, port) is a :class:`FatalAPIError` naming both, raised before the client
    follows it, so the texts (and a key) never reach the other host and its vectors are never cached
    under the first URL. A redirect within the origin is followed."""
    location = response.headers.get("location")
    if not location or not 300 <= response.status_code < 400:
        return
    here = str(response.request.url)
    there = urljoin(here, location)
    if origin(here) != origin(there):
        raise FatalAPIError(f"{origin_text(here)} redirected to {origin_text(there)} (HTTP {response.status_code}); embedeval "
                            "follows no redirect to another origin (scheme, host, port), so nothing was sent there")

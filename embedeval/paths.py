"""Where embedeval keeps its caches."""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_cache_dir

CACHE_ENV = "EMBEDEVAL_CACHE"


def default_cache_dir() -> Path:
    """``$EMBEDEVAL_CACHE`` if set, else the platform's user cache dir for embedeval."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path(user_cache_dir("embedeval"))

"""Package versions, read one way everywhere: a run's ``config.json``, a themes manifest and the
fingerprints of local models all record them with :func:`package_version`."""

from __future__ import annotations

import platform
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version

#: What a package that is not installed records as its version.
ABSENT = "absent"


def package_version(name: str) -> str:
    """The installed version of the distribution ``name`` (its pip name), or :data:`ABSENT`."""
    try:
        return version(name)
    except PackageNotFoundError:
        return ABSENT


def package_versions(names: Iterable[str], python: bool = True) -> dict[str, str]:
    """``{name: package_version(name)}`` for ``names``, led by the Python version unless not ``python``."""
    found = {"python": platform.python_version()} if python else {}
    return found | {name: package_version(name) for name in names}

"""The headless browser the HTML report's test renders report.html in: Chromium, Chrome or Edge.

``find_browser()``: ``CHROME_PATH`` when it is set (an executable, or a name on ``PATH``), else the
first of :data:`BROWSERS` on ``PATH``; none found is :class:`NoBrowser`, whose message is the one
line of what to install. ``python tests/browser.py`` (README's test command and ``.ci/run``) prints
the browser found, or installs Debian's/Ubuntu's Chromium with apt-get (through sudo when not
root) when there is none, and fails with that line when it cannot."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

#: Looked up on PATH in this order.
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "microsoft-edge")
#: What apt-get installs when none is found: the first package with an install candidate.
APT_PACKAGES = ("chromium", "chromium-browser")
INSTALL_HINT = ("no Chromium, Chrome or Edge found (on PATH: " + ", ".join(BROWSERS) + "; or CHROME_PATH): "
                "install one, e.g. `sudo apt-get install chromium` (or run `python tests/browser.py` as root or with sudo)")


class NoBrowser(RuntimeError):
    """No browser to render the report in (its message: what to install)."""


def find_browser(environ: dict | None = None) -> str:
    """The browser's executable: ``CHROME_PATH``, else the first of :data:`BROWSERS` on ``PATH``
    (both from ``environ``, default ``os.environ``)."""
    environ = os.environ if environ is None else environ
    path = environ.get("PATH", "")
    chosen = environ.get("CHROME_PATH")
    if chosen:
        found = shutil.which(chosen, path=path)
        if not found:
            raise NoBrowser(f"CHROME_PATH is {chosen}, which is not an executable; {INSTALL_HINT}")
        return found
    for name in BROWSERS:
        if found := shutil.which(name, path=path):
            return found
    raise NoBrowser(INSTALL_HINT)


def _apt_package() -> str | None:
    """The first of :data:`APT_PACKAGES` apt can install (after ``apt-get update``), or None."""
    for package in APT_PACKAGES:
        policy = subprocess.run(["apt-cache", "policy", package], capture_output=True, text=True).stdout
        if "Candidate:" in policy and "Candidate: (none)" not in policy:
            return package
    return None


def install_browser() -> str:
    """The browser found, or Chromium installed with apt-get (sudo when not root) and then found."""
    try:
        return find_browser()
    except NoBrowser:
        if not shutil.which("apt-get"):
            raise
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    if sudo and not shutil.which("sudo"):
        raise NoBrowser(INSTALL_HINT)
    subprocess.run([*sudo, "apt-get", "update", "-qq"], check=True)
    package = _apt_package()
    if package is None:
        raise NoBrowser(INSTALL_HINT)
    subprocess.run([*sudo, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq", package],
                   check=True, stdout=subprocess.DEVNULL)
    return find_browser()


if __name__ == "__main__":
    try:
        print(f"browser for the HTML report's test: {install_browser()}")
    except (NoBrowser, subprocess.CalledProcessError) as error:
        sys.exit(f"error: {error}")

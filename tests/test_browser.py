"""The browser of the HTML report's test (tests/browser.py) is found as Chromium,
Chrome or Edge on PATH or in CHROME_PATH; none found is one line saying what to install (a failure,
not a skip); README's test command installs Chromium with apt-get when none is found. Fake
executables in temporary folders stand in for the browsers, apt-get and sudo."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import browser
from browser import BROWSERS, NoBrowser, find_browser, install_browser
from conftest import TESTS_DIR


def fake(folder: Path, name: str, body: str = "echo fake", executable: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755 if executable else 0o644)
    return path


def test_every_browser_name_is_found_on_path(tmp_path):
    for name in BROWSERS:
        made = fake(tmp_path / name, name)
        assert find_browser({"PATH": str(made.parent)}) == str(made)


def test_chromium_before_chrome_before_edge_and_the_first_folder_of_path_first(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    edge = fake(first, "microsoft-edge")
    chrome = fake(second, "google-chrome")
    assert find_browser({"PATH": f"{first}{os.pathsep}{second}"}) == str(chrome)  # the name's order, then the folders'
    chromium = fake(second, "chromium")
    assert find_browser({"PATH": f"{first}{os.pathsep}{second}"}) == str(chromium)
    earlier = fake(first, "chromium")
    assert find_browser({"PATH": f"{first}{os.pathsep}{second}"}) == str(earlier)
    assert find_browser({"PATH": f"{second}{os.pathsep}{first}"}) == str(chromium)
    fake(tmp_path / "third", "chromium", executable=False)  # not executable: not a browser
    assert find_browser({"PATH": f"{tmp_path / 'third'}{os.pathsep}{first}"}) == str(earlier)
    assert edge.exists()


def test_chrome_path_comes_first_as_a_path_or_a_name(tmp_path):
    on_path = fake(tmp_path / "bin", "chromium")
    mine = fake(tmp_path / "opt", "my-chrome")
    assert find_browser({"PATH": str(tmp_path / "bin"), "CHROME_PATH": str(mine)}) == str(mine)
    assert find_browser({"PATH": f"{tmp_path / 'bin'}{os.pathsep}{tmp_path / 'opt'}", "CHROME_PATH": "my-chrome"}) == str(mine)
    assert find_browser({"PATH": str(tmp_path / "bin"), "CHROME_PATH": ""}) == str(on_path)  # empty: unset
    with pytest.raises(NoBrowser, match=f"CHROME_PATH is {tmp_path / 'nowhere'}, which is not an executable"):
        find_browser({"PATH": str(tmp_path / "bin"), "CHROME_PATH": str(tmp_path / "nowhere")})


def test_none_found_is_one_line_saying_what_to_install(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(NoBrowser) as raised:
        find_browser({"PATH": str(tmp_path / "empty")})
    message = str(raised.value)
    assert "\n" not in message and "apt-get install chromium" in message and "CHROME_PATH" in message
    assert all(name in message for name in BROWSERS)


@pytest.mark.slow
def test_the_report_test_fails_and_does_not_skip_without_a_browser(tmp_path):
    """The helper test_report_html renders with, run by pytest where no browser exists."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "test_no_browser.py").write_text(
        "from test_report_html import chromium\n\n\ndef test_render(tmp_path):\n    chromium('--version', cwd=tmp_path)\n")
    path = os.pathsep.join([str(TESTS_DIR), str(TESTS_DIR / "report"), os.environ.get("PYTHONPATH", "")])  # the helper's folder
    env = {**os.environ, "COLUMNS": "1000", "PATH": str(tmp_path / "empty"), "PYTHONPATH": path}
    env.pop("CHROME_PATH", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", str(tmp_path / "test_no_browser.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout[-2000:]
    assert "1 failed" in done.stdout and "skipped" not in done.stdout
    failure = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failure) == 1 and "no Chromium, Chrome or Edge found" in failure[0] and "apt-get install chromium" in failure[0]


def test_the_install_step_prints_the_browser_found_or_one_line(tmp_path):
    fake(tmp_path / "bin", "google-chrome-stable")
    script = str(TESTS_DIR / "browser.py")
    found = subprocess.run([sys.executable, script], env={"PATH": str(tmp_path / "bin")}, capture_output=True, text=True)
    assert found.returncode == 0 and found.stdout == f"browser for the HTML report's test: {tmp_path / 'bin' / 'google-chrome-stable'}\n"
    (tmp_path / "empty").mkdir()  # no browser and no apt-get: nothing to install with
    missing = subprocess.run([sys.executable, script], env={"PATH": str(tmp_path / "empty")}, capture_output=True, text=True)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.count("\n") == 1 and missing.stderr.startswith("error: no Chromium, Chrome or Edge found")


@pytest.mark.parametrize("root", [True, False])
def test_chromium_is_installed_with_apt_get_when_none_is_found(tmp_path, monkeypatch, root):
    """apt-get update, then the first package with a candidate (Debian's chromium; Ubuntu's
    chromium-browser when chromium has none), non-interactively, through sudo when not root."""
    bin_ = tmp_path / "bin"
    log = tmp_path / "calls.log"
    fake(bin_, "apt-cache", 'if [ "$2" = chromium ]; then echo "  Candidate: (none)"; else echo "  Candidate: 1.0"; fi')
    fake(bin_, "apt-get", f'echo "apt-get $* DEBIAN_FRONTEND=$DEBIAN_FRONTEND" >> {log}\n'
                          f'if [ "$1" = install ]; then printf "#!/bin/sh\\n" > {bin_}/chromium-browser; /bin/chmod +x {bin_}/chromium-browser; fi')
    fake(bin_, "sudo", f'echo "sudo $1" >> {log}\nexec "$@"')
    os.symlink("/usr/bin/env", bin_ / "env")
    monkeypatch.setenv("PATH", str(bin_))
    monkeypatch.delenv("CHROME_PATH", raising=False)
    monkeypatch.delenv("DEBIAN_FRONTEND", raising=False)
    monkeypatch.setattr(browser.os, "geteuid", lambda: 0 if root else 1000)
    assert install_browser() == str(bin_ / "chromium-browser")
    calls = log.read_text().splitlines()
    installs = ["apt-get update -qq DEBIAN_FRONTEND=", "apt-get install -y -qq chromium-browser DEBIAN_FRONTEND=noninteractive"]
    assert calls == (installs if root else ["sudo apt-get", installs[0], "sudo env", installs[1]])
    assert install_browser() == str(bin_ / "chromium-browser") and len(log.read_text().splitlines()) == len(calls)  # found now: nothing run

"""A real browser for the tests: Debian's Chromium, driven by Playwright, and a local server.

Chromium is installed with apt-get where it is missing and we are root (as on CI); elsewhere the
browser tests say plainly that they did not run (and fail on CI).
"""

import contextlib
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from pdf import served  # noqa: E402,F401  (the site's server, shared with the PDF printer)

SCREENSHOTS = ROOT / "_build" / "screenshots"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--disable-quic", "--hide-scrollbars"]


def chromium_or_install():
    """Debian's chromium, installed with apt-get where it is missing and we are root."""
    found = shutil.which("chromium")
    if not found and os.geteuid() == 0 and shutil.which("apt-get"):
        environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=environment, check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], env=environment,
                       check=False, stdout=subprocess.DEVNULL)
        found = shutil.which("chromium")
    if not found:
        message = ("Debian's chromium is not installed and could not be installed here (that "
                   "needs root and apt-get): the browser tests did NOT run")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


@contextlib.contextmanager
def launched():
    """A headless Chromium (Playwright's API, Debian's binary)."""
    from playwright.sync_api import sync_playwright

    executable = chromium_or_install()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        try:
            yield browser
        finally:
            browser.close()


def open_page(browser, url, width, height):
    """A page at the given window size, loaded, with MathJax's typesetting finished."""
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url, wait_until="load")
    page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
    return page


def screenshot(page, name, full_page=False):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path

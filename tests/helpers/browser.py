"""A real browser for the tests: Debian's Chromium, driven by Playwright, and a local server.

`make system` installs Chromium (as root, as on CI); where it is missing, the browser tests say
plainly that they did not run (and fail on CI).
"""

import contextlib
import os

import pytest

from tools import ROOT, pdf, system

SCREENSHOTS = ROOT / "_build" / "screenshots"
CHROMIUM_FLAGS = pdf.CHROMIUM_FLAGS


def did_not_run(message):
    """Skip the test, saying `message`; on CI (CI set), fail it."""
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def require_chromium():
    """Debian's chromium; where it is missing, the test says that it did not run."""
    found = pdf.chromium()
    if not found:
        did_not_run(
            f"Debian's chromium is not installed: the browser tests did NOT run; "
            f"install it with {system.how_to_install([system.CHROMIUM])}"
        )
    return found


@contextlib.contextmanager
def launched():
    """A headless Chromium (Playwright's API, Debian's binary)."""
    from playwright.sync_api import sync_playwright

    executable = require_chromium()
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

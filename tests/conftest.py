import os
import pathlib

import matplotlib
import pytest
from filelock import FileLock

from helpers.browser import launched
from tools import ROOT, book, pdf
from tools.pdf import served

matplotlib.use("Agg")


def build_site():
    """`make book`'s build into _build/html. COURSE_REUSE_BUILD=1 tests the last build in
    _build/html as it is (while working on the site's tests; never on CI)."""
    if os.environ.get("COURSE_REUSE_BUILD") and not os.environ.get("CI"):
        html = ROOT / "_build" / "html"
        assert (html / "intro.html").is_file(), "COURSE_REUSE_BUILD: no build in _build/html"
        return html
    printable = not pdf.missing_printer_packages()
    return book.build(pdfs=tuple(pdf.EDITIONS) if printable else ())


@pytest.fixture(scope="session")
def site(tmp_path_factory, worker_id):
    """The book built once for the whole test run (test_site_layout, test_site_links,
    test_site_controls and test_pdf share it), into _build/html; its PDFs are printed where
    Chromium and a font with Chinese characters are installed (the PDF tests say when not).
    Under pytest-xdist the first process to need it builds it; the other waits and reuses it."""
    if worker_id == "master":  # one process: no one to share with
        return build_site()
    run_folder = tmp_path_factory.getbasetemp().parent  # the same for every process of a run
    built = run_folder / "site-built"
    with FileLock(run_folder / "site.lock"):
        if not built.exists():
            built.write_text(str(build_site()))
    return pathlib.Path(built.read_text())


@pytest.fixture(scope="module")
def base_url(site):
    """The built site served on 127.0.0.1 (a free port) for one test module."""
    with served(site) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium, driven by Playwright, for one test module."""
    with launched() as chromium:
        yield chromium

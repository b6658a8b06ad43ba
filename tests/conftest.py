import os

import matplotlib
import pytest

from tools import ROOT, book, pdf

matplotlib.use("Agg")


@pytest.fixture(scope="session")
def site():
    """The book built once for the whole test session (test_site_layout, test_site_links and
    test_pdf share it) by `make book`'s command, into _build/html; its PDFs are printed where
    Chromium and a font with Chinese characters are installed (the PDF tests say when not).
    COURSE_REUSE_BUILD=1 tests the last build in _build/html as it is (while working on the
    site's tests; never on CI)."""
    if os.environ.get("COURSE_REUSE_BUILD") and not os.environ.get("CI"):
        html = ROOT / "_build" / "html"
        assert (html / "intro.html").is_file(), "COURSE_REUSE_BUILD: no build in _build/html"
        return html
    printable = not pdf.missing_printer_packages()
    return book.build(pdfs=tuple(pdf.EDITIONS) if printable else ())

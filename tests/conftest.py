import matplotlib
import pytest

from tools import book, pdf

matplotlib.use("Agg")


@pytest.fixture(scope="session")
def site():
    """The book built once for the whole test session (test_site_layout, test_site_links and
    test_pdf share it) by `make book`'s command, into _build/html; its PDFs are printed where
    Chromium and a font with Chinese characters are installed (the PDF tests say when not)."""
    printable = not pdf.missing_printer_packages()
    return book.build(pdfs=tuple(pdf.EDITIONS) if printable else ())

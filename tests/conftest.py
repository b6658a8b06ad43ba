import pathlib

import matplotlib
import pytest
from filelock import FileLock

from tools import book, pdf

matplotlib.use("Agg")


def build_site():
    printable = not pdf.missing_printer_packages()
    return book.build(pdfs=tuple(pdf.EDITIONS) if printable else ())


@pytest.fixture(scope="session")
def site(tmp_path_factory, worker_id):
    """The book built once for the whole test run (test_site_layout, test_site_links and
    test_pdf share it) by `make book`'s command, into _build/html; its PDFs are printed where
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

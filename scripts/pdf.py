"""The book as PDF files, printed from the built website by Chromium (`make book` calls it).

    python scripts/pdf.py [SITE_DIR] [--editions learner instructor]

Each page of the book (the home page, every chapter, the references) is printed on A4 by
Debian's Chromium, driven by Playwright, with the site's print stylesheet (`_static/course.css`:
no navigation, code and output in a smaller font and wrapped rather than clipped, figures whole),
then the pages are joined into one file with a bookmark per page:

    SITE_DIR/pdf/attention-course.pdf             the learner edition: no solutions
    SITE_DIR/pdf/attention-course-instructor.pdf  every solution unfolded

Chromium is found, or installed with apt-get where we are root (as on CI); without it the PDFs
are not written and this says so.
"""

import argparse
import contextlib
import functools
import http.server
import io
import os
import pathlib
import shutil
import subprocess
import sys
import threading

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
EDITIONS = {"learner": "attention-course.pdf", "instructor": "attention-course-instructor.pdf"}
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--disable-quic", "--hide-scrollbars"]
UNFOLD = """(edition) => {
  document.documentElement.classList.add('print-' + edition);
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  document.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden'));
}"""


def chromium(install=True):
    """Debian's chromium: found on PATH, or installed with apt-get where we are root."""
    found = shutil.which("chromium")
    if not found and install and os.geteuid() == 0 and shutil.which("apt-get"):
        environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=environment, check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], env=environment,
                       check=False, stdout=subprocess.DEVNULL)
        found = shutil.which("chromium")
    return found


def pages(source=ROOT):
    """The names of the book's pages in reading order, from _toc.yml."""
    toc = yaml.safe_load((source / "_toc.yml").read_text())
    names = [toc["root"]] + [chapter["file"] for part in toc["parts"]
                             for chapter in part["chapters"]]
    return names


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def _served(folder):
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()


def _print_page(browser, url, edition):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(url, wait_until="load")
    page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
    page.evaluate(UNFOLD, edition)
    page.emulate_media(media="print")
    title = page.title().split(" — ")[0]
    pdf = page.pdf(format="A4", print_background=True, display_header_footer=True,
                   header_template="<span></span>",
                   footer_template='<div style="font-size:8px;width:100%;text-align:center;">'
                                   f'{title} · <span class="pageNumber"></span></div>',
                   margin={"top": "14mm", "bottom": "16mm", "left": "14mm", "right": "14mm"})
    page.close()
    return title, pdf


def write_pdfs(site, editions=tuple(EDITIONS), source=ROOT):
    """Print the built site `site` (its _build/html folder) into site/pdf/; the paths written."""
    from playwright.sync_api import sync_playwright
    from pypdf import PdfReader, PdfWriter

    executable = chromium()
    if not executable:
        print("PDF not written: Debian's chromium is missing and cannot be installed here")
        return []
    (site / "pdf").mkdir(exist_ok=True)
    written = []
    with _served(site) as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        for edition in editions:
            book = PdfWriter()
            for name in pages(source):
                title, pdf = _print_page(browser, f"{base}{name}.html", edition)
                start = len(book.pages)
                book.append(PdfReader(io.BytesIO(pdf)))
                book.add_outline_item(title=title, page_number=start)
            book.add_metadata({"/Title": yaml.safe_load(
                (source / "_config.yml").read_text())["title"]})
            path = site / "pdf" / EDITIONS[edition]
            with open(path, "wb") as out:
                book.write(out)
            written.append(path)
            print(f"{path.relative_to(site)}: {len(book.pages)} pages")
        browser.close()
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", nargs="?", type=pathlib.Path, default=ROOT / "_build" / "html")
    parser.add_argument("--editions", nargs="+", choices=list(EDITIONS), default=list(EDITIONS))
    args = parser.parse_args(argv)
    write_pdfs(args.site.resolve(), args.editions)


if __name__ == "__main__":
    sys.exit(main())

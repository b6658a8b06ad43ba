"""The book as PDF handouts, printed from the built website by Chromium (`make book` calls it).

    python -m tools.pdf [SITE_DIR] [--editions learner instructor]

Each page of the book (the home page, every chapter, the back matter) is printed on A4 by
Debian's Chromium, driven by Playwright, with the site's print stylesheet (`_static/course.css`:
no navigation, code in 8.5-pt type, short blocks kept whole on a page). A page is laid out at
the printed column's width first (`prepare`), and there every display equation wider than its
column is scaled down until it fits. In print a chapter's title keeps its number, links to the
book's pages go to the website (html.baseurl) rather than to the local server that prints,
wording that only makes sense on the website ("this website", a folded solution, a button) is
reworded (PRINT_WORDING), and the home page says which edition the reader holds.

A title page (the course's title, the edition, the release: its version, the date it was
released and whether changes have landed since, as every page of the website says; the date of
the sources printed, where to read what changed and the errata; the licences, the website) and a
table of contents with page numbers come first. The pages are numbered from the title page
on, so a printed number is also the PDF viewer's; each page has a running head (the chapter,
the edition) and a footer crediting the work as CC BY-SA asks of copies (title, authors,
licences, website). They are printed as one more document and laid over the book's pages. A
bookmark leads to every page of the site and to each of its sections:

    SITE_DIR/pdf/attention-course.pdf             the learner edition: no solutions
    SITE_DIR/pdf/attention-course-instructor.pdf  every solution unfolded

Chromium and a font with Chinese characters (references cite Chinese sources) must be installed
(`make system`, tools/system.py); where one is missing this stops and says how to install it.
"""

import argparse
import concurrent.futures
import contextlib
import dataclasses
import datetime
import functools
import html
import http.server
import io
import pathlib
import re
import shutil
import subprocess
import sys
import threading

import yaml

from tools import ROOT, release, system

EDITIONS = {"learner": "attention-course.pdf", "instructor": "attention-course-instructor.pdf"}
EDITION_LABELS = {
    "learner": "Learner edition (no solutions)",
    "instructor": "Instructor edition (with solutions)",
}
IN_THIS_PDF = {  # the first item of the home page's "How to read it", in print only
    "learner": "The learner edition: every chapter and its exercises, without their solutions.",
    "instructor": "The instructor edition: every chapter and its exercises, each exercise "
    "followed by its solution.",
}
# What only makes sense on the website, as the PDF words it: [JavaScript regular expression,
# replacement] applied to the text of the page (not to code or maths). Solutions are not folded
# in print (the learner edition has none, the instructor edition prints them all), and the
# buttons are not printed.
PRINT_WORDING = [
    [r"\b([Tt])his(\s+)website\b", "$1he course$2website"],
    [r"\bthe(\s+)folded(\s+)solution\b", "the$1solution"],
    [r"\s*\(folded\s+on\s+the\s+website\)", ""],
    [
        r"\bUnder(\s+)each(\s+)chapter\u2019s(\s+)title,",
        "On the website, under$1each$2chapter\u2019s$3title,",
    ],
    [r"\(every(\s+)page\u2019s(\s+)GitHub", "(on the website, every$1page\u2019s$2GitHub"],
]
A4_MM = (210, 297)
MARGIN_MM = {"top": 18, "bottom": 18, "left": 14, "right": 14}
MM_PX = 96 / 25.4  # CSS pixels per millimetre
# The printed column in CSS pixels: a page is laid out at this width before it is printed, so
# that what is measured there (an equation's width, a block's height) is what is printed.
COLUMN_PX = int((A4_MM[0] - MARGIN_MM["left"] - MARGIN_MM["right"]) * MM_PX)
PAGE_PX = int((A4_MM[1] - MARGIN_MM["top"] - MARGIN_MM["bottom"]) * MM_PX)
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--hide-scrollbars",
]

# Before the print media: the edition's solutions shown or not, folded cells opened, the
# chapter's number in its printed title, links to the website, the PDF's own wording, and a
# named destination for every anchor (Chromium names those that a link of the page leads to).
UNFOLD = """([edition, local, website, inThisPdf, wording]) => {
  document.documentElement.classList.add('print-' + edition);
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  document.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden'));
  const numbered = document.querySelector('article.bd-article h1');
  const printed = document.querySelector('#jb-print-docs-body h1');
  if (numbered && printed) {
    const title = numbered.cloneNode(true);
    title.querySelectorAll('.headerlink').forEach(e => e.remove());
    printed.innerHTML = title.innerHTML;
  }
  document.querySelectorAll('a[href]').forEach(a => {
    if (!a.getAttribute('href').startsWith('#') && a.href.startsWith(local))
      a.href = website + a.href.slice(local.length);
  });
  const texts = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = texts.nextNode(); node; node = texts.nextNode())
    if (!node.parentElement.closest('pre, code, mjx-container'))
      for (const [pattern, replacement] of wording)
        node.nodeValue = node.nodeValue.replace(new RegExp(pattern, 'g'), replacement);
  const ways = document.querySelector('#how-to-read-it ul');
  if (ways) {
    const item = document.createElement('li');
    item.innerHTML = '<p><strong>In this PDF.</strong> ' + inThisPdf + '</p>';
    ways.prepend(item);
  }
  const anchors = document.createElement('div');  // links to every anchor, so that Chromium
  anchors.style.display = 'none';                 // names each one in the PDF
  document.querySelectorAll('article [id]').forEach(e => {
    const link = document.createElement('a');
    link.href = '#' + e.id;
    anchors.append(link);
  });
  document.body.append(anchors);
}"""

# In the print media: display equations wider than their column scaled down to fit it (MathJax
# sizes them in em), blocks shorter than a third of a page kept whole (class print-keep).
FIT = """(pageHeight) => {
  const block = e => {
    while (/^(inline|contents)/.test(getComputedStyle(e).display)) e = e.parentElement;
    return e;
  };
  const room = e => {
    const style = getComputedStyle(e);
    return e.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  };
  const size = e => parseFloat(getComputedStyle(e).fontSize);
  const scaled = [];
  for (const box of document.querySelectorAll('mjx-container[display="true"]')) {
    const math = box.querySelector('mjx-math'), column = block(box.parentElement);
    const before = size(box);
    for (let step = 0; step < 6; step++) {
      const width = math.getBoundingClientRect().width, fits = room(column);
      if (width <= fits) break;
      box.style.fontSize = (size(box) * fits / width * 0.99) + 'px';
    }
    if (size(box) < before) scaled.push([box.textContent.slice(0, 50), size(box) / before]);
  }
  const keep = 'article .cell, article .cell_input, article .cell_output, article .output, ' +
               'article div[class*="highlight"], article .admonition, article table, article dl';
  document.querySelectorAll(keep).forEach(e => {
    if (e.getBoundingClientRect().height < pageHeight / 3) e.classList.add('print-keep');
  });
  return scaled;
}"""


def chromium():
    """Debian's chromium on PATH, or None (`make system` installs it)."""
    return shutil.which("chromium")


def cjk_fonts():
    """The families of the installed fonts that have Chinese characters (fontconfig's list)."""
    if not shutil.which("fc-list"):
        return []
    listed = subprocess.run(
        ["fc-list", ":lang=zh", "family"], capture_output=True, text=True, check=False
    ).stdout
    return sorted({line.split(",")[0].strip() for line in listed.splitlines() if line.strip()})


class MissingSystemPackages(RuntimeError):
    """Chromium or a font with Chinese characters is not installed."""


def missing_printer_packages():
    """The Debian packages that printing needs and that are missing: chromium, and a font with
    Chinese characters (without one Chromium prints the references' Chinese titles as boxes)."""
    return ([] if chromium() else [system.CHROMIUM]) + ([] if cjk_fonts() else [system.CJK_FONT])


def require_printer():
    """Debian's chromium, where it and a font with Chinese characters are installed; otherwise
    MissingSystemPackages, saying how to install them."""
    needed = missing_printer_packages()
    if needed:
        raise MissingSystemPackages(
            f"the PDFs cannot be printed; install with {system.how_to_install(needed)}"
        )
    return chromium()


def pages(source=ROOT):
    """The names of the book's pages in reading order, from _toc.yml."""
    toc = yaml.safe_load((source / "_toc.yml").read_text())
    names = [toc["root"]] + [
        chapter["file"] for part in toc["parts"] for chapter in part["chapters"]
    ]
    return names


def parts(source=ROOT):
    """{page name: caption of the part it opens} from _toc.yml."""
    toc = yaml.safe_load((source / "_toc.yml").read_text())
    return {part["chapters"][0]["file"]: part["caption"] for part in toc["parts"]}


def book_info(source=ROOT):
    """What the title page and the footers say: title, authors, year, website, version, the
    release's line (tools/release.py), the date of the sources printed."""
    config = yaml.safe_load((source / "_config.yml").read_text())
    status = release.status()
    dated = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%cs"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {
        "title": config["title"].replace("'", "\u2019"),
        "author": config["author"],
        "year": config.get("copyright", ""),
        "url": config["html"]["baseurl"],
        "version": status.version,
        "release": status.line,
        "date": dated or datetime.date.today().isoformat(),
    }


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def served(folder):
    """`folder` served on 127.0.0.1 at a free port, quietly; yields its base URL (the tests'
    browser serves the site with it too)."""
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()


def open_for_print(browser, url):
    """A page of the site loaded at the printed column's width, MathJax's typesetting done."""
    page = browser.new_page(viewport={"width": COLUMN_PX, "height": PAGE_PX})
    page.goto(url, wait_until="load")
    page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
    return page


def prepare(page, edition, local, website):
    """Make a page opened by `open_for_print` (from the site served at `local`) what the
    `edition`'s PDF prints; the display equations scaled down to fit: [[text, scale]]."""
    page.evaluate(
        UNFOLD, [edition, local, website, html.escape(IN_THIS_PDF[edition]), PRINT_WORDING]
    )
    page.emulate_media(media="print")
    return page.evaluate(FIT, PAGE_PX)


def _pdf(page, **options):
    margin = {side: f"{mm}mm" for side, mm in MARGIN_MM.items()}
    return page.pdf(format="A4", print_background=True, margin=margin, **options)


@dataclasses.dataclass
class Printed:
    """One page of the site printed: its title, its sections (anchor, HTML title, plain title,
    the page it starts on counted from 0), the PDF, and {anchor: (page, height)} for the
    anchors Chromium names (those that links of the page lead to)."""

    name: str
    title: str
    title_html: str
    sections: list
    reader: object
    anchors: dict


def plain(title_html):
    """A heading's text for a bookmark or a running head: TeX left as written, less its
    delimiters and markup commands."""
    from bs4 import BeautifulSoup

    text = BeautifulSoup(title_html, "html.parser").get_text()
    text = re.sub(r"\\(?:text|mathrm|operatorname|mathbf)\{([^}]*)\}", r"\1", text)
    text = re.sub(r"\\[()\[\]]|\\[,;!]", " ", text)
    return " ".join(text.replace("{", "").replace("}", "").split())


def headings(site, name):
    """The page's title and its sections, [(anchor, HTML title)], from the built page. A
    heading's own links (the changelog's versions lead to their commits) keep their text
    only: in the printed contents each entry is a link, and a link inside it would take its
    place (a browser does not nest links)."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup((site / f"{name}.html").read_text(), "html.parser")
    article = soup.select_one("article.bd-article")
    for link in article.select("a.headerlink"):
        link.decompose()
    for heading in article.find_all(["h1", "h2"]):
        for link in heading.find_all("a"):
            link.unwrap()
    title = article.find("h1")
    sections = [
        (h2.parent.get("id"), h2.decode_contents().strip())
        for h2 in article.find_all("h2")
        if h2.parent.get("id")
    ]
    return title.decode_contents().strip(), sections


def _print_page(browser, base, site, name, edition, website):
    from pypdf import PdfReader

    page = open_for_print(browser, f"{base}{name}.html")
    prepare(page, edition, base, website)
    reader = PdfReader(io.BytesIO(_pdf(page)))
    page.close()
    title_html, sections = headings(site, name)
    anchors = {
        key.lstrip("/"): (reader.get_destination_page_number(value), value.top)
        for key, value in reader.named_destinations.items()
    }
    found = [
        (anchor, title, plain(title), anchors[anchor][0])
        for anchor, title in sections
        if anchor in anchors
    ]
    return Printed(name, plain(title_html), title_html, found, reader, anchors)


FRONT_STYLE = """
body { margin: 0 !important; padding: 0 !important; background: #fff; }
.course-front { color: #000; font-size: 11pt; }
.course-title-page { height: %(page)dpx; display: flex; flex-direction: column;
  text-align: center; break-after: page; }
.course-title-page h1 { font-size: 28pt; line-height: 1.2; margin: 30%% 0 1.2em; }
.course-title-page .edition { font-size: 16pt; font-weight: 600; margin: 0 0 2.5em; }
.course-title-page p { margin: 0.3em 0; }
.course-title-page .sources { font-size: 9pt; margin-bottom: 1.2em; }
.course-title-page .licence { margin-top: auto; font-size: 9pt; text-align: left;
  border-top: 0.5pt solid #999; padding-top: 0.8em; }
.course-toc h2 { font-size: 20pt; margin: 0 0 0.8em; }
.course-toc p { margin: 0; }
.course-toc .part { font-weight: 700; font-size: 10.5pt; margin: 0.9em 0 0.2em; }
.course-toc .entry { display: flex; align-items: baseline; break-inside: avoid;
  color: inherit; text-decoration: none; }
.course-toc .chapter { font-weight: 600; font-size: 10.5pt; margin-top: 0.45em; }
.course-toc .section { font-size: 9.5pt; padding-left: 2.2em; }
.course-toc .leader { flex: 1 1 auto; border-bottom: 1pt dotted #888; margin: 0 0.4em;
  min-width: 1.5em; transform: translateY(-0.3em); }
.course-toc .number { flex: none; font-variant-numeric: tabular-nums; }
.course-toc code { font-size: 0.9em; }
"""


def _front_html(info, edition, entries):
    """The title page and the table of contents; `entries`: (kind, HTML title, page, link)."""
    e = html.escape
    licence = (
        f"© {e(str(info['year']))} {e(info['author'])}. The text and figures are licensed "
        "under the Creative Commons Attribution-ShareAlike 4.0 International licence "
        "(CC BY-SA 4.0, https://creativecommons.org/licenses/by-sa/4.0/), the code "
        "under the MIT licence, each data file under its own licence (see <i>Licences "
        f"and citing</i>, {e(info['url'])}licences.html). Copies and adaptations must "
        "credit the course and share alike."
    )
    title_page = (
        f"<section class='course-title-page'><h1>{e(info['title'])}</h1>"
        f"<p class='edition'>{e(EDITION_LABELS[edition])}</p>"
        f"<p>{e(info['author'])}</p>"
        f"<p>{e(info['release'])}</p>"
        f"<p class='sources'>Printed from the sources of {e(info['date'])}. What changed: "
        f"{e(info['url'])}changes.html; errata: {e(info['url'])}errata.html</p>"
        f"<p><a href='{e(info['url'])}'>{e(info['url'])}</a></p>"
        f"<p class='licence'>{licence}</p></section>"
    )
    lines = []
    for kind, title, number, link in entries:
        if kind == "part":
            lines.append(f"<p class='part'>{title}</p>")
        else:
            lines.append(
                f"<a class='entry {kind}' href='{e(link)}'><span class='title'>"
                f"{title}</span><span class='leader'></span>"
                f"<span class='number'>{number}</span></a>"
            )
    return (
        f"<div class='course-front'>{title_page}<section class='course-toc'>"
        f"<h2>Contents</h2>{''.join(lines)}</section></div>"
    )


def _contents(printed, captions, first, website):
    """The table of contents' entries when the first page of the site is page `first`."""
    entries, start = [], first
    for page in printed:
        if page.name in captions:
            entries.append(("part", html.escape(captions[page.name]), None, None))
        link = f"{website}{page.name}.html"
        entries.append(("chapter", page.title_html, start, link))
        entries += [
            ("section", title, start + at, f"{link}#{anchor}")
            for anchor, title, _, at in page.sections
        ]
        start += len(page.reader.pages)
    return entries


def _print_front(browser, base, edition, info, printed, captions):
    """The title page and the contents printed, their page numbers counting their own pages."""
    from pypdf import PdfReader

    page = open_for_print(browser, f"{base}{printed[0].name}.html")
    count = 2
    for _ in range(4):
        content = _front_html(info, edition, _contents(printed, captions, count + 1, info["url"]))
        page.evaluate(
            """async ([content, style]) => {
          document.body.innerHTML = content;
          const sheet = document.createElement('style');
          sheet.textContent = style;
          document.head.append(sheet);
          await MathJax.typesetPromise([document.body]);
        }""",
            [content, FRONT_STYLE % {"page": PAGE_PX - 8}],
        )
        page.emulate_media(media="print")
        reader = PdfReader(io.BytesIO(_pdf(page)))
        if len(reader.pages) == count:
            break
        count = len(reader.pages)
    page.close()
    return reader


OVERLAY_STYLE = """
@page { size: A4; margin: 0; }
body { margin: 0; font-family: sans-serif; color: #444; }
.sheet { position: relative; height: 290mm; break-after: page; }
.sheet:last-child { break-after: auto; }
.head, .foot { position: absolute; left: %(left)smm; right: %(right)smm; display: flex;
  justify-content: space-between; align-items: flex-end; gap: 4mm; }
.head { top: 8mm; height: 5mm; font-size: 7.5pt; border-bottom: 0.4pt solid #bbb; }
.foot { top: 282mm; font-size: 6.5pt; line-height: 1.35; }
.number { font-size: 9pt; color: #000; }
"""


def _overlay(browser, sheets):
    """A PDF whose pages hold only the running heads and footers: `sheets`: (head, number)."""
    from pypdf import PdfReader

    body = []
    for (left, right), number, credit in sheets:
        head = (
            f"<div class='head'><span>{html.escape(left)}</span>"
            f"<span>{html.escape(right)}</span></div>"
            if left
            else ""
        )
        body.append(
            f"<div class='sheet'>{head}<div class='foot'><span>{credit}</span>"
            f"<span class='number'>{number}</span></div></div>"
        )
    page = browser.new_page()
    page.set_content(
        f"<html><head><style>{OVERLAY_STYLE % MARGIN_MM}</style></head>"
        f"<body>{''.join(body)}</body></html>"
    )
    reader = PdfReader(
        io.BytesIO(
            page.pdf(format="A4", margin={"top": "0", "bottom": "0", "left": "0", "right": "0"})
        )
    )
    page.close()
    assert len(reader.pages) == len(sheets), (len(reader.pages), len(sheets))
    return reader


def _credit(info):
    """The footer's attribution: title, authors, licences, source."""
    e = html.escape
    return (
        f"{e(info['title'])} · © {e(str(info['year']))} {e(info['author'])}<br>"
        f"Text and figures CC BY-SA 4.0 · code MIT · {e(info['url'])}"
    )


def _sheets(front, printed, info, edition):
    """Each page's (running head, page number, credit): none on the title page, no running
    head on a page's first sheet."""
    label, credit = EDITION_LABELS[edition], _credit(info)
    sheets = [(("", ""), "", credit)]
    sheets += [(("Contents", label), n + 2, credit) for n in range(len(front.pages) - 1)]
    for page in printed:
        for at in range(len(page.reader.pages)):
            sheets.append(((page.title if at else "", label), len(sheets) + 1, credit))
    return sheets


def _places(printed, first):
    """{(page name, anchor): (index of the PDF page, height or None)}; anchor "": its top."""
    places, start = {}, first
    for page in printed:
        places[page.name, ""] = (start, None)
        for anchor, (at, top) in page.anchors.items():
            places[page.name, anchor] = (start + at, top)
        start += len(page.reader.pages)
    return places


def _target(annotation, name, places, website):
    """Where a link annotation of page `name` leads inside the book, or None."""
    destination = annotation.get("/Dest")
    if isinstance(destination, str):  # Chromium's named destination: an anchor of the page
        return places.get((name, destination.lstrip("/")))
    uri = str(annotation.get("/A", {}).get("/URI", ""))
    if not uri.startswith(website):
        return None
    path, _, anchor = uri[len(website) :].partition("#")
    return places.get((path.removesuffix(".html"), anchor))


def _links_inside(book, printed, first, website):
    """Links between pages of the book jump inside the PDF: the contents', Chromium's to an
    anchor of the same page (its names recur from page to page: each is resolved in its own
    page) and those written as links to the website; a link to an anchor whose page is not
    known (a citation) stays a link to the website."""
    from pypdf.generic import ArrayObject, FloatObject, NameObject, NullObject

    places = _places(printed, first)
    owners = [None] * first + [page.name for page in printed for _ in range(len(page.reader.pages))]
    for page, name in zip(book.pages, owners):
        for reference in page.get("/Annots", []):
            annotation = reference.get_object()
            target = _target(annotation, name, places, website)
            if target is None:
                continue
            index, top = target
            annotation[NameObject("/Dest")] = ArrayObject(
                [
                    book.pages[index].indirect_reference,
                    NameObject("/XYZ"),
                    NullObject(),
                    FloatObject(top) if top is not None else NullObject(),
                    NullObject(),
                ]
            )
            annotation.pop("/A", None)


def _bookmarks(book, printed, first):
    start = first
    for page in printed:
        parent = book.add_outline_item(title=page.title, page_number=start)
        for _, _, title, at in page.sections:
            book.add_outline_item(title=title, page_number=start + at, parent=parent)
        start += len(page.reader.pages)


def write_edition(browser, base, site, edition, source=ROOT):
    """One edition printed into site/pdf/; its path."""
    from pypdf import PdfWriter

    info = book_info(source)
    printed = [
        _print_page(browser, base, site, name, edition, info["url"]) for name in pages(source)
    ]
    front = _print_front(browser, base, edition, info, printed, parts(source))
    book = PdfWriter()
    book.append(front)
    for page in printed:
        book.append(page.reader)
    overlay = _overlay(browser, _sheets(front, printed, info, edition))
    for page, sheet in zip(book.pages, overlay.pages):
        page.merge_page(sheet)
    _links_inside(book, printed, len(front.pages), info["url"])
    book.add_outline_item(title="Title page", page_number=0)  # the home page has the title
    book.add_outline_item(title="Contents", page_number=1)
    _bookmarks(book, printed, len(front.pages))
    book.add_metadata(
        {
            "/Title": f"{info['title']}, {EDITION_LABELS[edition].lower()}",
            "/Author": info["author"],
            "/Subject": info["release"],
        }
    )
    path = site / "pdf" / EDITIONS[edition]
    with open(path, "wb") as out:
        book.write(out)
    print(f"{path.relative_to(site)}: {len(book.pages)} pages")
    return path


def write_pdfs(site, editions=tuple(EDITIONS), source=ROOT):
    """Print the built site `site` (its _build/html folder) into site/pdf/; the paths written."""
    from playwright.sync_api import sync_playwright

    executable = require_printer()
    (site / "pdf").mkdir(exist_ok=True)

    def print_editions():
        with served(site) as base, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
            written = [write_edition(browser, base, site, edition, source) for edition in editions]
            browser.close()
        return written

    # Playwright's sync API refuses to start in a thread whose asyncio loop is
    # running (as in a test process after a Jupyter kernel client): a new
    # thread has no loop
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(print_editions).result()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", nargs="?", type=pathlib.Path, default=ROOT / "_build" / "html")
    parser.add_argument("--editions", nargs="+", choices=list(EDITIONS), default=list(EDITIONS))
    args = parser.parse_args(argv)
    write_pdfs(args.site.resolve(), args.editions)


if __name__ == "__main__":
    sys.exit(main())

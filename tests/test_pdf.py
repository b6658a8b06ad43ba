"""The two PDFs that the book's build prints (tests/conftest.py builds the book once per test
session): their title page, contents, page numbers, footers, links and Chinese characters, every
chapter with every code line and figure, no solution in the learner edition and the solutions in
the instructor edition."""

import re

import nbformat
import pytest
import tomllib
import yaml
from bs4 import BeautifulSoup

from helpers.browser import did_not_run
from helpers.site import CHAPTERS, CONFIG, chapter_title, lecture_and_prompt_cells
from helpers.solution_text import solution_fragments
from tools import ROOT, exercises, pdf, system

EDITION_LABELS = {
    "learner": "Learner edition (no solutions)",
    "instructor": "Instructor edition (with solutions)",
}


@pytest.fixture(scope="module")
def pdf_pages(site):
    """{edition: (the PDF read by pypdf, the text of each page read by PDFium)}."""
    import pypdfium2
    from pypdf import PdfReader

    missing = pdf.missing_printer_packages()
    if missing:
        did_not_run(
            "the build printed no PDF: the PDF tests did NOT run; install with "
            + system.how_to_install(missing)
        )

    books = {}
    for edition, name in pdf.EDITIONS.items():
        reader = PdfReader(site / "pdf" / name)
        # the text through PDFium, Chromium's own PDF library: 16 times faster than pypdf's;
        # it ends lines with \r\n and reads some hyphens as U+FFFE
        document = pypdfium2.PdfDocument(site / "pdf" / name)
        texts = [
            page.get_textpage().get_text_range().replace("\r\n", "\n").replace("\ufffe", "-")
            for page in document
        ]
        assert len(texts) == len(reader.pages)
        books[edition] = (reader, texts)
        print(f"{name}: {len(reader.pages)} pages")
    return books


@pytest.fixture(scope="module")
def pdf_texts(pdf_pages):
    """{edition: (page count, text without whitespace, image count)}."""
    return {
        edition: (
            len(texts),
            squeezed("".join(texts)),
            sum(image_count(page) for page in reader.pages),
        )
        for edition, (reader, texts) in pdf_pages.items()
    }


def image_count(resource_holder):
    """The images a page (or a form inside it) draws, counted from its resources without
    decoding them (pypdf's page.images decodes every picture: minutes for a whole book)."""
    resources = resource_holder.get("/Resources")
    objects = resources.get_object().get("/XObject") if resources is not None else None
    if objects is None:
        return 0
    count = 0
    for reference in objects.get_object().values():
        drawn = reference.get_object()
        if drawn.get("/Subtype") == "/Image":
            count += 1
        elif drawn.get("/Subtype") == "/Form":
            count += image_count(drawn)
    return count


# A PDF's text has typographic ligatures and apostrophes where the sources have letters and '.
PRINTED_LETTERS = str.maketrans(
    {
        "\ufb01": "fi",
        "\ufb02": "fl",
        "\ufb00": "ff",
        "\ufb03": "ffi",
        "\ufb04": "ffl",
        "\u2019": "'",
    }
)


def squeezed(text):
    return "".join(text.split()).translate(PRINTED_LETTERS)


def numbered_title(chapter):
    return f"{int(chapter.name[:2])}. {chapter_title(chapter)}"


def bookmarks(reader):
    """{title: page counted from 1} of the PDF's top-level bookmarks, in their order; no two
    bookmarks have the same title."""
    marks = [
        (item.title, reader.get_destination_page_number(item) + 1)
        for item in reader.outline
        if not isinstance(item, list)
    ]
    assert len(dict(marks)) == len(marks), f"bookmarks with the same title: {marks[:4]}"
    return dict(marks)


def contents_pages(reader):
    """The indices of the pages of the printed contents: from its bookmark to the next."""
    starts = list(bookmarks(reader).items())
    at = [title for title, _ in starts].index("Contents")
    return range(starts[at][1] - 1, starts[at + 1][1] - 1)


def contents(reader, texts):
    """The printed table of contents: [(number or "", title, page)]."""
    lines = [
        line.strip().translate(PRINTED_LETTERS)
        for index in contents_pages(reader)
        for line in texts[index].splitlines()
        if "CC BY-SA" not in line
    ]  # the footer's licence line ends in the page number
    # the text of a title's maths can come out after the page number: "4.2. Why : ... 85√d"
    entries = [
        re.fullmatch(r"(?:(\d+(?:\.\d+)*\.) )?(.+?) (\d+)(?:[^\d\s]\S*)?", line) for line in lines
    ]
    return [(m[1] or "", m[2], int(m[3])) for m in entries if m]


def link_targets(reader, page):
    """The pages (counted from 1) that the page's links jump to, and its web links."""
    numbers = {p.indirect_reference.idnum: n for n, p in enumerate(reader.pages, start=1)}
    jumps, web = [], []
    for annotation in page.get("/Annots") or []:
        annotation = annotation.get_object()
        destination = annotation.get("/Dest")
        if destination is not None and not isinstance(destination, str):
            jumps.append(numbers[destination[0].idnum])
        elif "/A" in annotation and "/URI" in annotation["/A"]:
            web.append(str(annotation["/A"]["/URI"]))
    return jumps, web


@pytest.mark.parametrize("edition", list(pdf.EDITIONS))
def test_the_pdf_opens_with_a_title_page(edition, pdf_pages):
    """The course's title, the edition, the release (the package's version and the date
    CITATION.cff gives it, as every page of the website states it), where the changes and the
    errata are, the licences and the website."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    released = yaml.safe_load((ROOT / "CITATION.cff").read_text())["date-released"]
    first = squeezed(pdf_pages[edition][1][0])
    for expected in [
        CONFIG["title"],
        EDITION_LABELS[edition],
        f"Version {version} of {released}",
        CONFIG["html"]["baseurl"] + "changes.html",
        CONFIG["html"]["baseurl"] + "errata.html",
        "CC BY-SA 4.0",
        "MIT licence",
        CONFIG["html"]["baseurl"],
    ]:
        assert squeezed(expected) in first, expected
    (other,) = set(EDITION_LABELS) - {edition}
    assert squeezed(EDITION_LABELS[other]) not in first


@pytest.mark.parametrize("edition", list(pdf.EDITIONS))
def test_the_contents_give_the_page_of_every_chapter_and_section(edition, pdf_pages):
    """Each chapter's page in the printed contents is the page that opens with its numbered
    title, as its bookmark says; each section's is a page showing the section's title; the
    contents' links jump to those pages."""
    reader, texts = pdf_pages[edition]
    entries = contents(reader, texts)
    chapters = {f"{n} {title}": page for n, title, page in entries if n.count(".") == 1}
    marks = bookmarks(reader)
    for chapter in CHAPTERS:
        title = numbered_title(chapter)
        page = chapters[title]
        assert squeezed(texts[page - 1]).startswith(squeezed(title)), (title, page)
        assert marks[title] == page
    sections = [(f"{n} {title}", page) for n, title, page in entries if n.count(".") == 2]
    plain = [(title, page) for title, page in sections if re.fullmatch(r"[\w .,:;?!'()–-]+", title)]
    assert len(sections) >= 5 * len(CHAPTERS) and len(plain) >= 4 * len(CHAPTERS)
    assert not [(t, p) for t, p in plain if squeezed(t) not in squeezed(texts[p - 1])]
    pages = {page for _, _, page in entries}
    jumps = {
        page
        for index in contents_pages(reader)
        for page in link_targets(reader, reader.pages[index])[0]
    }
    assert jumps == pages, sorted(jumps ^ pages)[:10]


@pytest.mark.parametrize("edition", list(pdf.EDITIONS))
def test_every_page_is_numbered_in_sequence_and_credits_the_licence(edition, pdf_pages):
    """Page numbers run on from the title page (a page's number is its place in the file) and
    every page names the work, its licence and its source, as CC BY-SA asks of copies."""
    unnumbered, uncredited = [], []
    for number, text in enumerate(pdf_pages[edition][1], start=1):
        if number > 1 and not re.search(rf"(?<![\d.]){number}\s*$", text):
            unnumbered.append(number)
        if not all(
            squeezed(s) in squeezed(text)
            for s in [CONFIG["title"], "CC BY-SA 4.0", CONFIG["html"]["baseurl"]]
        ):
            uncredited.append(number)
    assert not unnumbered, f"pages without their number: {unnumbered[:10]}"
    assert not uncredited, f"pages without the licence: {uncredited[:10]}"


@pytest.mark.parametrize("edition", list(pdf.EDITIONS))
def test_the_pdf_links_within_itself_or_to_the_website(edition, pdf_pages):
    """No link leads to the local server that printed the pages; links between the book's
    pages jump inside the PDF; a chapter's title is printed with its number on every page;
    the website's wording (folded cells, buttons, "this website") is reworded for print."""
    reader, texts = pdf_pages[edition]
    jumps, web = 0, []
    for page in reader.pages:
        inside, outside = link_targets(reader, page)
        jumps += len(inside)
        web += outside
    assert not [url for url in web if "127.0.0.1" in url or "localhost" in url]
    assert jumps > 20 * len(CHAPTERS)
    text = squeezed("".join(texts))
    for phrase in [
        "Show code cell",
        "Hide code cell",
        "this website",
        "This website",
        "folded on the website",
        "the folded solution",
        "Under each chapter\u2019s title",
        "(every page\u2019s GitHub button",
    ]:
        assert squeezed(phrase) not in text, phrase
    assert (
        squeezed(
            "In this PDF. "
            + {"learner": "The learner edition", "instructor": "The instructor edition"}[edition]
        )
        in text
    )


def test_the_pdf_prints_the_chinese_titles_of_references(site, pdf_texts):
    """Chinese characters need a font with them; without one, Chromium prints empty boxes
    (and the PDF's text has no characters there)."""
    page = BeautifulSoup((site / "bibliography.html").read_text(), "html.parser").get_text()
    chinese = re.findall(r"[\u4e00-\u9fff]+", page)
    assert "注意力机制详解" in chinese
    for edition, (_, text, _) in pdf_texts.items():
        assert not [c for c in chinese if c not in text], edition


@pytest.mark.parametrize("edition", list(pdf.EDITIONS))
def test_the_pdf_has_every_chapter_every_code_line_and_figure(edition, pdf_texts):
    pages, text, images = pdf_texts[edition]
    assert pages > 100
    figures = 0
    for chapter in CHAPTERS:
        notebook = nbformat.read(chapter, as_version=4)
        assert squeezed(chapter_title(chapter)) in text, chapter.name
        cells = list(lecture_and_prompt_cells(notebook)) if edition == "learner" else notebook.cells
        for cell in cells:
            if cell.cell_type == "code" and "remove-cell" not in cell.metadata.get("tags", []):
                for line in cell.source.splitlines():
                    if line.strip() and "SOLUTION" not in line:
                        assert squeezed(line) in text, f"{chapter.name}: cut {line!r}"
            figures += any("image/png" in o.get("data", {}) for o in cell.get("outputs", []))
    assert images >= figures


def test_the_learner_pdf_has_no_solution_and_the_instructor_pdf_has_them(pdf_texts):
    """Whitespace is lost in a PDF's text, so a solution line is looked for without it, and
    only lines that, without it, appear in no learner notebook count."""
    public = squeezed(
        " ".join(
            path.read_text().replace("\\n", " ") for path in (ROOT / "notebooks").glob("*.ipynb")
        )
    )
    shown = 0
    for chapter in CHAPTERS:
        fragments = [
            f
            for f in map(squeezed, solution_fragments(nbformat.read(chapter, as_version=4)))
            if f not in public
        ]
        assert not [f for f in fragments if f in pdf_texts["learner"][1]], chapter.name
        shown += sum(f in pdf_texts["instructor"][1] for f in fragments)
    assert shown > 10 * len(CHAPTERS)


def test_the_instructor_pdf_shows_every_rubric_and_the_learner_pdf_none(pdf_texts):
    """A rubric's title, "Rubric (N written points)", is printed once per written part, in the
    order of the book, in the instructor edition only (its criteria are solution lines, checked
    above)."""
    titles = [
        squeezed(exercises.rubric_title(exercise.rubric))
        for chapter in CHAPTERS
        for exercise in exercises.exercises(nbformat.read(chapter, as_version=4))
        if exercise.written_points
    ]
    printed = {
        edition: re.findall(r"Rubric\(\d+(?:\.\d+)?writtenpoints?\)", pdf_texts[edition][1])
        for edition in pdf.EDITIONS
    }
    assert printed["instructor"] == titles and len(titles) > 2 * len(CHAPTERS)
    assert printed["learner"] == []


def test_a_headings_link_does_not_take_the_place_of_its_contents_entry(tmp_path):
    """A heading with a link of its own (the changelog's "[0.1.0] - 2026-11-24" leads to its
    commit) is one link in the printed contents, to its page: a link nested inside the entry's
    would take the entry's place (the contents test found the changelog's 0.1.0 entry leading
    to GitHub instead of its page). The page's HTML and the contents' HTML, without a
    browser."""
    (tmp_path / "page.html").write_text(
        "<article class='bd-article'><section id='page'><h1>Changes"
        "<a class='headerlink' href='#page'>#</a></h1><section id='id1'><h2>"
        "<a class='reference external' href='https://example.org/tree/1'>0.1.0</a>"
        " - 2026-11-24<a class='headerlink' href='#id1'>#</a></h2></section></section>"
        "</article>"
    )
    title, sections = pdf.headings(tmp_path, "page")
    assert (title, sections) == ("Changes", [("id1", "0.1.0 - 2026-11-24")])
    entries = [("chapter", title, 3, "site/page.html")]
    entries += [("section", t, 3, f"site/page.html#{a}") for a, t in sections]
    front = pdf._front_html(pdf.book_info(), "learner", entries)
    contents = front.split("<h2>Contents</h2>")[1]
    assert contents.count("<a ") == len(entries) and "example.org" not in contents

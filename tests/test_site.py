"""The website as a reader sees it: the book is built and served on 127.0.0.1, Debian's Chromium
opens every chapter at a laptop's 1280 x 800 and 1440 x 900 and a phone's 400 x 800, with every
folded solution opened, and measures what the page shows. Screenshots go to _build/screenshots/.
Every page is measured again as it is printed (A4's column, print media). Then every internal
link and image of the site, and every link of the learner edition; the instructors' tables and
reading times against the notebooks; the licence on every page; the index, the glossary and the
references; and the two PDFs the build prints: their title page, contents, page numbers,
footers, links and Chinese characters."""

import base64
import hashlib
import pathlib
import re
import sys
import tomllib
import urllib.parse
import urllib.request

import nbformat
import pytest
import yaml
from bs4 import BeautifulSoup
from docutils.nodes import make_id

from browser import launched, open_page, screenshot, served

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import book  # noqa: E402  (the same build command as `make book`)
import exercises  # noqa: E402
import learner  # noqa: E402
import pdf  # noqa: E402
from solution_text import solution_fragments  # noqa: E402

CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
LAPTOPS = [(1280, 800), (1440, 900)]
PHONE = (400, 800)
SMALLEST_TEXT_PX = 8
RAW_MYST = re.compile(r":::\{|```\{|\{(?:cite|ref|numref|doc|eq|term|index)(?::\w+)?\}`"
                      r"|^:(?:label|class|name):", re.M)
GRADER_MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS")

OPEN_FOLDED = """() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  document.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden'));
}"""

# What does not fit: a code or output block, a table or a display equation whose content is
# wider than its box (it scrolls sideways), or that reaches past the article's right edge.
MEASURE = """() => {
  const article = document.querySelector('article.bd-article');
  const right = article.getBoundingClientRect().right + 1;
  const cut = e => e.scrollWidth > e.clientWidth + 1 || e.getBoundingClientRect().right > right;
  const scrolls = e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);
  const text = e => e.textContent.trim().slice(0, 70);
  const tables = [...article.querySelectorAll('table')].map(
    t => t.closest('.pst-scrollable-table-container') || t);
  const maths = [...article.querySelectorAll('mjx-container[display="true"]')];
  return {
    pre: [...article.querySelectorAll('pre')].filter(cut).map(text),
    tables: tables.filter(cut).map(text),
    maths: maths.filter(cut).map(text),
    unreachable: [...tables, ...maths].filter(e => cut(e) && !scrolls(e)).map(text),
    pageWidth: document.documentElement.scrollWidth,
    windowWidth: window.innerWidth,
    text: article.innerText,
    images: [...article.querySelectorAll('img')].map(
      i => [i.getAttribute('src'), i.naturalWidth, i.clientWidth]),
  };
}"""


def page_name(chapter):
    return f"chapters/{chapter.stem}"


def chapter_title(chapter):
    """The notebook's first heading, as the page's h1 should show it."""
    notebook = nbformat.read(chapter, as_version=4)
    first = next(cell for cell in notebook.cells if cell.cell_type == "markdown")
    return first.source.splitlines()[0].lstrip("# ").strip()


def learner_colab_url(chapter):
    repository = urllib.parse.urlparse(CONFIG["repository"]["url"]).path.strip("/")
    return (f"https://colab.research.google.com/github/{repository}/blob/"
            f"{CONFIG['repository']['branch']}/notebooks/{chapter.name}")


def figure_text_sizes(chapter):
    """{image file name: (smallest text in points, dpi)} of the chapter's stored figures,
    as `make execute` recorded them (scripts/figure_text.py)."""
    sizes = {}
    for cell in nbformat.read(chapter, as_version=4).cells:
        for output in cell.get("outputs", []):
            if "image/png" in output.get("data", {}):
                name = hashlib.sha256(base64.b64decode(output.data["image/png"])).hexdigest()
                text = output.metadata.get("figure_text", {})
                sizes[f"{name}.png"] = (text.get("smallest_pt"), text.get("dpi"))
    return sizes


@pytest.fixture(scope="module")
def site():
    return book.build()


@pytest.fixture(scope="module")
def base_url(site):
    with served(site) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with launched() as chromium:
        yield chromium


@pytest.fixture(scope="module")
def measured(browser, base_url):
    """Each chapter measured at each window size, its folded solutions opened; a screenshot of
    the top of each chapter at 1280 px and of chapter 5 in full."""
    results = {}
    for chapter in CHAPTERS:
        for width, height in LAPTOPS + [PHONE]:
            page = open_page(browser, f"{base_url}{page_name(chapter)}.html", width, height)
            if (width, height) == LAPTOPS[0]:
                screenshot(page, f"{chapter.stem}-{width}")
            page.evaluate(OPEN_FOLDED)
            results[chapter, width] = page.evaluate(MEASURE)
            if (width, height) == LAPTOPS[0] and chapter.name.startswith("05"):
                screenshot(page, f"{chapter.stem}-{width}-full", full_page=True)
            page.close()
    return results


def test_home_page_in_browser(browser, base_url):
    page = open_page(browser, base_url + "intro.html", *LAPTOPS[0])
    assert CONFIG["title"] in page.inner_text("h1").replace("\u2019", "'")  # Sphinx's ’
    links = page.eval_on_selector_all("nav a", "links => links.map(a => a.href)")
    assert any(page_name(CHAPTERS[0]) in link for link in links), "no link to chapter 1"
    assert not RAW_MYST.search(page.inner_text("article"))
    screenshot(page, "home")


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_chapter_page_shows_its_parts(chapter, browser, base_url):
    page = open_page(browser, f"{base_url}{page_name(chapter)}.html", *LAPTOPS[0])
    assert chapter_title(chapter) in page.inner_text("h1")
    figures = page.query_selector_all("article figure")
    assert len(figures) >= 3
    for figure in figures:
        assert figure.query_selector("img").get_attribute("alt")
        assert figure.query_selector("figcaption").text_content().strip()
    maths = page.query_selector_all("article .math")
    assert len(maths) > 10
    assert all(m.query_selector("mjx-container") for m in maths), "MathJax did not typeset"
    assert len(page.query_selector_all(".exercise")) >= 4
    solutions = page.query_selector_all(".solution")
    assert len(solutions) >= 4 and all("dropdown" in s.get_attribute("class") for s in solutions)

    colab = learner_colab_url(chapter)
    badge = page.query_selector("article .course-launch a.course-colab")
    assert badge and badge.is_visible() and badge.get_attribute("href") == colab
    hrefs = page.eval_on_selector_all("a", "links => links.map(a => a.getAttribute('href'))")
    assert not [h for h in hrefs if h and "colab" in h and h != colab]
    download = page.query_selector("article .course-launch a.course-download")
    with urllib.request.urlopen(urllib.parse.urljoin(page.url, download.get_attribute("href"))
                                ) as served_notebook:
        assert served_notebook.read() == (ROOT / "notebooks" / chapter.name).read_bytes()


@pytest.mark.parametrize("width", [w for w, _ in LAPTOPS])
@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_nothing_is_cut_on_a_laptop(chapter, width, measured):
    """No code, output, table or equation scrolls sideways, no raw markup, no grader marker."""
    result = measured[chapter, width]
    assert not result["pre"], f"code or output wider than its box: {result['pre'][:4]}"
    assert not result["tables"], f"tables cut: {result['tables'][:3]}"
    assert not result["maths"], f"equations cut: {result['maths'][:3]}"
    assert result["pageWidth"] <= result["windowWidth"]
    assert not RAW_MYST.search(result["text"]), RAW_MYST.search(result["text"])[0]
    assert not [m for m in GRADER_MARKERS if m in result["text"]]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_figure_text_is_readable_at_1280_px(chapter, measured):
    """Figure text at its displayed size: points x dpi / 72 x (shown width / image width)."""
    sizes = figure_text_sizes(chapter)
    small = []
    for source, natural, shown in measured[chapter, LAPTOPS[0][0]]["images"]:
        name = pathlib.PurePosixPath(source).name
        if name not in sizes:
            continue  # the theme's own images (the Colab logo)
        points, dpi = sizes[name]
        assert points and dpi, f"{name}: no figure_text metadata: re-run `make execute`"
        pixels = points * dpi / 72 * shown / natural
        if pixels < SMALLEST_TEXT_PX:
            small.append(f"{name[:8]}: {pixels:.1f} px ({points} pt, {natural} px at {shown})")
    assert len(sizes) >= 3 and not small, small


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_a_phone_scrolls_tables_and_equations_in_their_own_box(chapter, measured):
    result = measured[chapter, PHONE[0]]
    assert result["pageWidth"] <= result["windowWidth"], "the whole page scrolls sideways"
    assert not result["unreachable"], result["unreachable"][:3]


# In the printed layout: display equations (their rendered math, and their box) that reach past
# their column's or the article's text, and code or output boxes whose lines, all of at most 80
# characters, would not fit unwrapped.
PRINT_MEASURE = """() => {
  const article = document.querySelector('article.bd-article');
  const inside = e => {
    const r = e.getBoundingClientRect(), s = getComputedStyle(e);
    return [r.left + parseFloat(s.borderLeftWidth) + parseFloat(s.paddingLeft),
            r.right - parseFloat(s.borderRightWidth) - parseFloat(s.paddingRight)];
  };
  const [left, right] = inside(article);
  const shown = e => e.getClientRects().length > 0;
  const maths = [...article.querySelectorAll('mjx-container[display="true"]')].filter(shown);
  const wide = maths.filter(box => {
    let column = box.parentElement;
    while (getComputedStyle(column).display.startsWith('inline')) column = column.parentElement;
    const [from, to] = inside(column);
    return [box, box.querySelector('mjx-math')].some(e => {
      const r = e.getBoundingClientRect();
      return r.left < Math.max(left, from) - 1 || r.right > Math.min(right, to) + 1;
    });
  }).map(box => box.textContent.slice(0, 60));
  const codes = [...article.querySelectorAll('pre')].filter(shown).filter(
    pre => Math.max(...pre.textContent.split('\\n').map(line => line.length)) <= 80);
  const wrapped = codes.filter(pre => {
    pre.style.setProperty('white-space', 'pre', 'important');
    const wider = pre.scrollWidth > pre.clientWidth + 1;
    pre.style.removeProperty('white-space');
    return wider;
  }).map(pre => pre.textContent.slice(0, 60));
  return {equations: maths.length, wide, codes: codes.length, wrapped};
}"""


@pytest.mark.parametrize("name", pdf.pages(ROOT))
def test_pdf_equations_and_code_fit_the_printed_column(name, browser, base_url, site):
    """Each page as scripts/pdf.py prints it (the instructor edition: every solution shown),
    laid out at A4's column in print media: no display equation is wider than its column (a
    wide one was cut off at its left), and code lines fit the 8.5-pt type unwrapped."""
    page = pdf.open_for_print(browser, f"{base_url}{name}.html")
    pdf.prepare(page, "instructor", base_url, CONFIG["html"]["baseurl"])
    result = page.evaluate(PRINT_MEASURE)
    page.close()
    built = (site / f"{name}.html").read_text()
    assert result["equations"] or '<div class="math' not in built
    assert result["codes"] or not name.startswith("chapters/")
    assert not result["wide"], f"equations wider than the printed column: {result['wide']}"
    assert not result["wrapped"], f"code wrapped in print: {result['wrapped'][:3]}"


# ------------------------------------------------------------------------ static checks

def html_pages(site):
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.relative_to(site).parts)


def element_ids(page, cache):
    if page not in cache:
        soup = BeautifulSoup(page.read_text(), "html.parser")
        cache[page] = {tag["id"] for tag in soup.find_all(id=True)}
    return cache[page]


def internal_targets(page, site):
    """(description, path, fragment) for every relative href/src of a built page."""
    soup = BeautifulSoup(page.read_text(), "html.parser")
    for tag in soup.find_all(["a", "img", "link", "script"]):
        reference = tag.get("href") or tag.get("src")
        if not reference or urllib.parse.urlparse(reference).scheme or reference.startswith("//"):
            continue
        parsed = urllib.parse.urlparse(reference)
        target = page if not parsed.path else (page.parent / urllib.parse.unquote(parsed.path))
        yield f"{page.relative_to(site)} -> {reference}", target.resolve(), parsed.fragment


def test_no_broken_internal_link_or_image(site):
    ids, broken = {}, []
    for page in html_pages(site):
        for description, target, fragment in internal_targets(page, site):
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(description)
            elif fragment and target.suffix == ".html" and fragment not in element_ids(target, ids):
                broken.append(description)
    assert len(html_pages(site)) >= 4
    assert not broken, broken[:10]


def test_no_page_shows_raw_markup(site):
    for page in html_pages(site):
        soup = BeautifulSoup(page.read_text(), "html.parser")
        for hidden in soup.select("script, style"):
            hidden.decompose()
        raw = RAW_MYST.search(soup.get_text())
        assert not raw, f"{page.relative_to(site)}: raw MyST {raw[0]!r}"


def test_every_link_of_the_learner_edition_reaches_the_website(site):
    """The learner notebooks link to solutions, references and pages of the website (at
    html.baseurl): each of those pages and anchors exists in the built site."""
    ids, broken, count = {}, [], 0
    base = learner.website()
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for url in re.findall(rf"\]\(({re.escape(base)}[^)\s]*)\)", notebook.read_text()):
            count += 1
            path, _, fragment = url[len(base):].partition("#")
            target = site / (path or "index.html")
            if not target.is_file() or (fragment and fragment not in element_ids(target, ids)):
                broken.append(f"{notebook.name}: {url}")
    assert count > 100 and not broken, broken[:10]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_learner_edition_numbers_and_cites_as_the_website_does(chapter, site):
    page = BeautifulSoup((site / f"{page_name(chapter)}.html").read_text(), "html.parser")
    text = (ROOT / "notebooks" / chapter.name).read_text()
    key_of = {make_id(f"cite-{key}"): key for key in learner.bibliography()}
    citations = {(a["href"].split("#")[1], a.get_text()) for a in
                 page.select('a[href*="bibliography.html#cite-"]')}
    assert citations
    for anchor, shown in citations:
        assert learner.citation_text(key_of[anchor]) == shown, (anchor, shown)
    smart = str.maketrans("‘’“”", "''\"\"")  # Sphinx's smart quotes, undone
    figures = [" ".join(c.get_text().split()).translate(smart)
               for c in page.select("figure figcaption")]
    notebook = nbformat.read(ROOT / "notebooks" / chapter.name, as_version=4)
    learner_figures = [c.source for c in notebook.cells if c.source.startswith("*Figure ")]
    assert learner_figures  # the figures of the lecture (those of solutions stay online)
    for caption in learner_figures:
        number, words = re.match(r"\*Figure (\d+\.\d+)\. (\S+ \S+)", caption).groups()
        assert any(f.startswith(f"Fig. {number} {words}") for f in figures), (number, words)
    exercises = [" ".join(t.get_text().split()) for t in
                 page.select(".exercise > .admonition-title")]
    headings = re.findall(r"### Exercise (\d+\.\d+): ", text)
    assert [e.split(" (")[0] for e in exercises] == [f"Exercise {n}" for n in headings]
    points = r"\(★+, [\d.]+ points?\)"
    assert [re.findall(points, e)[-1] for e in exercises] == re.findall(
        rf"### Exercise \d+\.\d+: .*?({points})", text), "the points differ"


# ------------------------------------------------------- the instructors' guide and back matter

def lecture_and_prompt_cells(notebook):
    """What a reader reads: everything but the solutions and the hidden setup cells
    (computed with scripts/exercises.py's reading of the chapter)."""
    for item in exercises.parse(notebook):
        cell = item.prompt if isinstance(item, exercises.Exercise) else item
        if "remove-cell" not in cell.metadata.get("tags", []):
            yield cell


def table_rows(table):
    return [[" ".join(td.get_text().split()) for td in tr.find_all(["td", "th"])]
            for tr in table.find_all("tr")]


def test_reading_times_are_counted_from_the_chapters(site):
    page = BeautifulSoup((site / "intro.html").read_text(), "html.parser")
    rows = {row[0].split(".")[0]: row for row in table_rows(page.select("table")[0])[1:-1]}
    assert len(rows) == len(CHAPTERS)
    for chapter in CHAPTERS:
        cells = list(lecture_and_prompt_cells(nbformat.read(chapter, as_version=4)))
        words = sum(len(c.source.split()) for c in cells if c.cell_type == "markdown")
        lines = sum(len([x for x in c.source.splitlines() if x.strip()])
                    for c in cells if c.cell_type == "code")
        minutes = max(5, 5 * round((words / 125 + lines / 20) / 5))
        row = rows[str(int(chapter.name[:2]))]
        assert row[1:4] == [f"{words:,}", f"{lines:,}", f"{minutes} min"], (chapter.name, row)


def test_the_instructors_tables_are_the_grading_records(site):
    page = BeautifulSoup((site / "instructors.html").read_text(), "html.parser")
    tables = {rubric.get_text().split(":")[0]: rubric.find_next("table")
              for rubric in page.select("p.rubric") if rubric.get_text().startswith("Chapter")}
    assert len(tables) == len(CHAPTERS)
    for chapter in CHAPTERS:
        found = exercises.exercises(nbformat.read(chapter, as_version=4))
        rows = table_rows(tables[f"Chapter {int(chapter.name[:2])}"])[1:-1]
        assert len(rows) == len(found)
        for row, exercise in zip(rows, found):
            record, title = exercise.record, exercise.prompt.source.splitlines()[0]
            stars = re.search(r"\((★+)\)", title)[1]
            expected_kind = ("code + written" if exercise.is_coding and exercise.written_points
                             else "code" if exercise.is_coding else "written")
            assert row[2:5] == [stars, expected_kind, str(record.get("points") or "–")], row
            assert row[5].startswith(str(record.get("hidden_points") or "–"))
            assert row[6] == str(exercise.written_points or "–")


def test_every_page_shows_the_licence(site):
    for page in html_pages(site):
        soup = BeautifulSoup(page.read_text(), "html.parser")
        if soup.select_one('meta[http-equiv="Refresh"], meta[http-equiv="refresh"]'):
            continue  # index.html: a redirect to the home page
        footer = soup.select_one(".course-licence")
        assert footer and "CC BY-SA 4.0" in footer.get_text(), page.relative_to(site)


def test_the_index_holds_every_glossary_term_and_the_glossary_every_symbol(site):
    index = BeautifulSoup((site / "genindex.html").read_text(), "html.parser").get_text()
    glossary = (ROOT / "glossary.md").read_text()
    terms = re.findall(r"^(\w[^\n]*)\n  \S", glossary.split("```{glossary}")[1], re.M)
    assert len(terms) >= 40 and all(term in index for term in terms)
    notation = (ROOT / "intro.md").read_text().split("## Notation")[1]
    symbols = [s for cell in re.findall(r"^\| (\$[^|]+) \|", notation, re.M)
               for s in re.findall(r"\$[^$]+\$", cell)]
    assert len(symbols) > 25
    missing = [s for s in symbols if s not in glossary]
    assert not missing, f"notation symbols not in the glossary: {missing}"


def test_the_index_points_into_the_chapters(site):
    """Terms where chapters define or first use them, the package's names where each chapter
    first uses them; the sidebar links to the index on every page."""
    page = BeautifulSoup((site / "genindex.html").read_text(), "html.parser")
    entries = {}
    for item in page.select("table.indextable > tr > td > ul > li"):
        name = " ".join(item.find(string=True, recursive=True).split())
        entries[name] = [a["href"] for a in item.select("ul a")]
    for term, chapter in [("softmax", "03_"), ("padding mask", "05_"),
                          ("permutation equivariance", "07_"), ("FlashAttention", "12_"),
                          ("masked_softmax (attention_course)", "05_"),
                          ("flash_attention (attention_course)", "12_")]:
        assert any(f"chapters/{chapter}" in href for href in entries.get(term, [])), (
            term, entries.get(term))
    assert sum(name.endswith("(attention_course)") for name in entries) >= 20
    home = BeautifulSoup((site / "chapters" / f"{CHAPTERS[0].stem}.html").read_text(),
                         "html.parser")
    assert home.select_one('.course-index-link a[href="../genindex.html"]')


def test_references_link_to_their_papers(site):
    page = BeautifulSoup((site / "bibliography.html").read_text(), "html.parser")
    linked = 0
    for key, entry in learner.bibliography().items():
        target = entry.fields.get("url") or entry.fields.get("doi")
        if target:
            hrefs = [a["href"] for a in page.select(f"#{make_id('cite-' + key)} a")]
            assert any(target in href for href in hrefs), (key, hrefs)
            linked += 1
    assert linked >= 40


def test_the_map_links_every_chapter(site):
    page = BeautifulSoup((site / "intro.html").read_text(), "html.parser")
    section = page.find(id="the-map")
    hrefs = {a["href"].split("#")[0] for a in section.find_all("a")}
    assert all(f"chapters/{chapter.stem}.html" in hrefs for chapter in CHAPTERS)


# ----------------------------------------------------------------------------------- the PDFs

EDITION_LABELS = {"learner": "Learner edition (no solutions)",
                  "instructor": "Instructor edition (with solutions)"}


@pytest.fixture(scope="module")
def pdf_pages(site):
    """{edition: (the PDF read by pypdf, the text of each page)}."""
    from pypdf import PdfReader

    books = {}
    for edition, name in pdf.EDITIONS.items():
        reader = PdfReader(site / "pdf" / name)
        books[edition] = (reader, [page.extract_text() for page in reader.pages])
        print(f"{name}: {len(reader.pages)} pages")
    return books


@pytest.fixture(scope="module")
def pdf_texts(pdf_pages):
    """{edition: (page count, text without whitespace, image count)}."""
    return {edition: (len(texts), squeezed("".join(texts)),
                      sum(len(page.images) for page in reader.pages))
            for edition, (reader, texts) in pdf_pages.items()}


# A PDF's text has typographic ligatures and apostrophes where the sources have letters and '.
PRINTED_LETTERS = str.maketrans({"\ufb01": "fi", "\ufb02": "fl", "\ufb00": "ff",
                                 "\ufb03": "ffi", "\ufb04": "ffl", "\u2019": "'"})


def squeezed(text):
    return "".join(text.split()).translate(PRINTED_LETTERS)


def numbered_title(chapter):
    return f"{int(chapter.name[:2])}. {chapter_title(chapter)}"


def bookmarks(reader):
    """{title: page counted from 1} of the PDF's top-level bookmarks, in their order; no two
    bookmarks have the same title."""
    marks = [(item.title, reader.get_destination_page_number(item) + 1)
             for item in reader.outline if not isinstance(item, list)]
    assert len(dict(marks)) == len(marks), f"bookmarks with the same title: {marks[:4]}"
    return dict(marks)


def contents_pages(reader):
    """The indices of the pages of the printed contents: from its bookmark to the next."""
    starts = list(bookmarks(reader).items())
    at = [title for title, _ in starts].index("Contents")
    return range(starts[at][1] - 1, starts[at + 1][1] - 1)


def contents(reader, texts):
    """The printed table of contents: [(number or "", title, page)]."""
    lines = [line.strip().translate(PRINTED_LETTERS)
             for index in contents_pages(reader) for line in texts[index].splitlines()
             if "CC BY-SA" not in line]  # the footer's licence line ends in the page number
    entries = [re.fullmatch(r"(?:(\d+(?:\.\d+)*\.) )?(.+?) (\d+)", line) for line in lines]
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
    """The course's title, the edition, the package's version, the licences and the website."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    first = squeezed(pdf_pages[edition][1][0])
    for expected in [CONFIG["title"], EDITION_LABELS[edition], f"Version {version}",
                     "CC BY-SA 4.0", "MIT licence", CONFIG["html"]["baseurl"]]:
        assert squeezed(expected) in first, expected
    other, = set(EDITION_LABELS) - {edition}
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
    plain = [(title, page) for title, page in sections
             if re.fullmatch(r"[\w .,:;?!'()–-]+", title)]
    assert len(sections) >= 5 * len(CHAPTERS) and len(plain) >= 4 * len(CHAPTERS)
    assert not [(t, p) for t, p in plain if squeezed(t) not in squeezed(texts[p - 1])]
    pages = {page for _, _, page in entries}
    jumps = {page for index in contents_pages(reader)
             for page in link_targets(reader, reader.pages[index])[0]}
    assert jumps == pages, sorted(jumps ^ pages)[:10]


@pytest.mark.parametrize("edition", list(pdf.EDITIONS))
def test_every_page_is_numbered_in_sequence_and_credits_the_licence(edition, pdf_pages):
    """Page numbers run on from the title page (a page's number is its place in the file) and
    every page names the work, its licence and its source, as CC BY-SA asks of copies."""
    unnumbered, uncredited = [], []
    for number, text in enumerate(pdf_pages[edition][1], start=1):
        if number > 1 and not re.search(rf"(?<![\d.]){number}\s*$", text):
            unnumbered.append(number)
        if not all(squeezed(s) in squeezed(text) for s in
                   [CONFIG["title"], "CC BY-SA 4.0", CONFIG["html"]["baseurl"]]):
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
    for phrase in ["Show code cell", "Hide code cell", "this website", "This website",
                   "folded on the website", "the folded solution",
                   "Under each chapter\u2019s title", "(every page\u2019s GitHub button"]:
        assert squeezed(phrase) not in text, phrase
    assert squeezed("In this PDF. " + {"learner": "The learner edition",
                                        "instructor": "The instructor edition"}[edition]) in text


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
        cells = (list(lecture_and_prompt_cells(notebook)) if edition == "learner"
                 else notebook.cells)
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
    public = squeezed(" ".join(path.read_text().replace("\\n", " ")
                               for path in (ROOT / "notebooks").glob("*.ipynb")))
    shown = 0
    for chapter in CHAPTERS:
        fragments = [f for f in map(squeezed, solution_fragments(
            nbformat.read(chapter, as_version=4))) if f not in public]
        assert not [f for f in fragments if f in pdf_texts["learner"][1]], chapter.name
        shown += sum(f in pdf_texts["instructor"][1] for f in fragments)
    assert shown > 10 * len(CHAPTERS)

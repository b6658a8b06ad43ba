"""The website as a reader sees it: the book is built (once per test session, tests/conftest.py)
and served on 127.0.0.1, Debian's Chromium opens every chapter at a laptop's 1280 x 800 and
1440 x 900, a tablet's 768 x 1024 and a phone's 400 x 800, with every folded solution opened,
and measures what the page shows: nothing cut, figure text readable, the Colab badge and the
download button. Screenshots go to _build/screenshots/. Every page is measured again as it is
printed (A4's column, print media)."""

import base64
import hashlib
import pathlib
import urllib.parse
import urllib.request

import nbformat
import pytest

from _ext.course_guide import model_sentence
from helpers.browser import open_page, screenshot
from helpers.site import CHAPTERS, CONFIG, RAW_MYST, chapter_title, page_name
from tools import ROOT, pdf

LAPTOPS = [(1280, 800), (1440, 900)]
# A tablet held upright, or a window on half a projector's screen: the sidebar folds away and the
# article is about 740 px wide. Code may scroll sideways in its box there, as on a phone, but no
# display equation or table may be cut: chapter 16's equation (766 px, before it was split)
# fitted at 1280 px and was cut at this width, and so was one of chapter 8's.
TABLET = (768, 1024)
PHONE = (400, 800)
SMALLEST_TEXT_PX = 8
GRADER_MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS")

OPEN_FOLDED = """() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  document.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden'));
}"""

# What does not fit: a code or output block, a table or a display equation whose content is
# wider than its box (it scrolls sideways), or that reaches past the article's right edge; for
# an equation, its typeset maths too (it can spill out of a box that does not grow).
MEASURE = """() => {
  const article = document.querySelector('article.bd-article');
  const right = article.getBoundingClientRect().right + 1;
  const left = article.getBoundingClientRect().left - 1;
  const cut = e => e.scrollWidth > e.clientWidth + 1 || e.getBoundingClientRect().right > right;
  // an equation's typeset maths, not only its box, must lie inside the article
  const mathCut = e => cut(e) || [...e.querySelectorAll('mjx-math')].some(m => {
    const r = m.getBoundingClientRect();
    return r.right > right || r.left < left;
  });
  const scrolls = e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);
  const text = e => e.textContent.trim().slice(0, 70);
  const tables = [...article.querySelectorAll('table')].map(
    t => t.closest('.pst-scrollable-table-container') || t);
  const maths = [...article.querySelectorAll('mjx-container[display="true"]')];
  return {
    pre: [...article.querySelectorAll('pre')].filter(cut).map(text),
    tables: tables.filter(cut).map(text),
    maths: maths.filter(mathCut).map(text),
    unreachable: [...tables.filter(cut), ...maths.filter(mathCut)].filter(
      e => !scrolls(e)).map(text),
    pageWidth: document.documentElement.scrollWidth,
    windowWidth: window.innerWidth,
    text: article.innerText,
    images: [...article.querySelectorAll('img')].map(
      i => [i.getAttribute('src'), i.naturalWidth, i.clientWidth]),
  };
}"""


def learner_colab_url(chapter):
    repository = urllib.parse.urlparse(CONFIG["repository"]["url"]).path.strip("/")
    return (
        f"https://colab.research.google.com/github/{repository}/blob/"
        f"{CONFIG['repository']['branch']}/notebooks/{chapter.name}"
    )


def figure_text_sizes(chapter):
    """{image file name: (smallest text in points, dpi)} of the chapter's stored figures,
    as `make execute` recorded them (tools/figure_text.py)."""
    sizes = {}
    for cell in nbformat.read(chapter, as_version=4).cells:
        for output in cell.get("outputs", []):
            if "image/png" in output.get("data", {}):
                name = hashlib.sha256(base64.b64decode(output.data["image/png"])).hexdigest()
                text = output.metadata.get("figure_text", {})
                sizes[f"{name}.png"] = (text.get("smallest_pt"), text.get("dpi"))
    return sizes


@pytest.fixture(scope="module")
def measured(browser, base_url):
    """Each chapter measured at each window size, its folded solutions opened; a screenshot of
    the top of each chapter at 1280 px and of chapter 5 in full."""
    results = {}
    for chapter in CHAPTERS:
        for width, height in LAPTOPS + [TABLET, PHONE]:
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
    # The map's reading times say what they assume, and link to how the rates were chosen.
    assert model_sentence() in " ".join(page.inner_text("article").replace("\u2019", "'").split())
    assert page.locator("article a[href*='instructors.html#reading-time-model']").count() == 1
    screenshot(page, "home")
    # On a phone the map's last column (exercises, after the reading time) scrolls into view
    # inside the table's own box; the page itself does not scroll sideways.
    page.set_viewport_size({"width": 390, "height": 844})
    box = page.locator("article .pst-scrollable-table-container").first
    box.evaluate("b => { b.scrollLeft = b.scrollWidth; }")
    last = box.locator("tr").nth(1).locator("td").last
    assert last.is_visible() and last.evaluate(
        "c => { const r = c.getBoundingClientRect(); return r.left >= 0 && r.right <= 390; }"
    ), "the map's last column cannot be reached at 390 px"
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_chapter_page_shows_its_parts(chapter, browser, base_url):
    page = open_page(browser, f"{base_url}{page_name(chapter)}.html", *LAPTOPS[0])
    assert chapter_title(chapter) in page.inner_text("h1")
    figures = page.query_selector_all("article figure")
    assert len(figures) >= 3
    for figure in figures:
        assert figure.query_selector("img").get_attribute("alt")
        assert figure.query_selector("figcaption").text_content().strip()
    # Captions at the text's weight (400 or more), not the theme's light 300.
    weights = page.eval_on_selector_all(
        "article figcaption, article figcaption *",
        "els => els.map(e => Number(getComputedStyle(e).fontWeight))",
    )
    assert weights and min(weights) >= 400, f"a caption in a light weight: {min(weights)}"
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
    with urllib.request.urlopen(
        urllib.parse.urljoin(page.url, download.get_attribute("href"))
    ) as served_notebook:
        assert served_notebook.read() == (ROOT / "notebooks" / chapter.name).read_bytes()


# Lists of lettered steps, "- (a) ...": the letters number the items, so no bullet before them.
LETTERED_LISTS = """() => [...document.querySelectorAll('article ul')]
  .filter(ul => [...ul.children].every(li => /^\\([a-z]\\) /.test(li.innerText.trim())))
  .map(ul => [...ul.children].map(li => getComputedStyle(li).listStyleType))"""


@pytest.mark.parametrize("width", [1280, 390])
def test_lettered_steps_show_their_letter_without_a_bullet(width, browser, base_url):
    masking = next(c for c in CHAPTERS if c.name.startswith("05"))
    page = open_page(browser, f"{base_url}{page_name(masking)}.html", width, 844)
    styles = page.evaluate(LETTERED_LISTS)
    assert len(styles) >= 2, "the chapter's exercises have lettered lists"
    assert all(style == "none" for items in styles for style in items), styles
    exercise = page.locator("#ex-05-key-padding").first
    exercise.scroll_into_view_if_needed()
    page.evaluate("() => window.scrollBy(0, -60)")
    screenshot(page, f"exercise-5.3-{width}")
    page.close()


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
def test_no_equation_or_table_is_cut_on_a_tablet(chapter, measured):
    result = measured[chapter, TABLET[0]]
    assert not result["maths"], f"equations cut: {result['maths'][:3]}"
    assert not result["tables"], f"tables cut: {result['tables'][:3]}"
    assert result["pageWidth"] <= result["windowWidth"], "the whole page scrolls sideways"


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
    """Each page as tools/pdf.py prints it (the instructor edition: every solution shown),
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

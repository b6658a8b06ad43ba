"""The lecture slides (tools/slides.py): each chapter's deck holds what the chapter holds, and
opens in Chromium, offline, without an error.

The first tests read the decks written by tools/slides.py against the chapter notebooks, parsed
here on their own. The browser tests open every deck of the built website (tests/conftest.py's
`site`, built once per run), as a lecturer would: every slide shown in turn at 1280 x 720, every
request answered by the local server, MathJax's typesetting without an error, nothing past the
slide's edges; and the chapter page's link leads to its deck.
"""

import re

import nbformat
import pytest
from bs4 import BeautifulSoup
from test_site_controls import axe_violations

from helpers.browser import open_page, screenshot
from tools import CHAPTERS, concepts, exercises, slides
from tools.pdf import served

DECKS = [pytest.param(path, id=path.name[:2]) for path in CHAPTERS]


def lecture_part(path):
    """The chapter's cells before its summary, exercises left out (parsed here, not by
    tools/slides.py)."""
    cells = []
    for item in exercises.parse(nbformat.read(path, as_version=4)):
        if isinstance(item, exercises.Exercise):
            continue
        if item.cell_type == "markdown" and re.search(r"^## Summary\s*$", item.source, re.M):
            cells.append(nbformat.v4.new_markdown_cell(item.source.split("## Summary")[0]))
            break
        cells.append(item)
    return cells


def written_deck(path):
    return BeautifulSoup(slides.deck(path, {}), "html.parser")


@pytest.mark.parametrize("path", DECKS)
def test_a_deck_has_a_slide_per_section_figure_and_tagged_cell(path):
    soup = written_deck(path)
    cells = lecture_part(path)
    headings = [
        h.lstrip("#").strip()
        for c in cells
        if c.cell_type == "markdown"
        for h in re.findall(r"^#{2,3} .+$", c.source, re.M)
    ]
    figures = [c for c in cells if c.cell_type == "code" and c.metadata.get("mystnb")]
    tagged = [c for c in cells if "slide" in c.metadata.get("tags", [])]
    shown = [s.find(["h2", "h3"]) for s in soup.select("section:not(.figure):not(.code)")]
    # every section of the lecture has a slide, under its heading (maths and markup aside)
    shown_headings = {re.sub(r"\\\(.*?\\\)", "", h.get_text()).strip() for h in shown if h}
    for heading in headings:
        plain = re.sub(r"[`*]|\$[^$]*\$", "", heading).strip()
        assert plain in shown_headings, (path.name, heading, shown_headings)
    assert len(soup.select("section.figure")) == len(figures) >= 1, path.name
    assert len(soup.select("section.code")) == len(tagged) >= 1, path.name
    # the tagged cells' code is on the slides as it is in the notebook
    code = [pre.get_text() for pre in soup.select("section.code pre code")]
    assert code == [c.source for c in tagged]


@pytest.mark.parametrize("path", DECKS)
def test_a_deck_shows_no_solution(path):
    html = slides.deck(path, {})
    text = BeautifulSoup(html, "html.parser").get_text()  # the code as the slides show it
    lecture = "\n".join(cell.source for cell in lecture_part(path))
    for exercise in exercises.exercises(nbformat.read(path, as_version=4)):
        for cell in exercise.answers + exercise.verification:
            for line in cell.source.splitlines():
                # a distinctive line of a solution, not one it shares with the lecture
                if len(line.strip()) > 30 and line.strip() not in lecture:
                    assert line.strip() not in text, (path.name, exercise.label, line)
        solution = exercise.solution_text.strip().splitlines()
        if solution and len(solution[0]) > 30:
            assert solution[0] not in text, (path.name, exercise.label)
    assert "BEGIN SOLUTION" not in html


def test_the_summary_and_the_exercises_close_every_deck():
    for path in CHAPTERS:
        soup = written_deck(path)
        sections = soup.select("section")
        assert "title" in sections[0]["class"], path.name
        credit = sections[0].select_one(".course-licence").get_text()
        assert "CC BY-SA 4.0" in credit and "Version " in sections[0].get_text(), path.name
        assert sections[-1].find("h2").get_text() == "Exercises", path.name
        points = len(exercises.exercises(nbformat.read(path, as_version=4)))
        assert len(sections[-1].select("li")) == points, path.name
        checks = len(concepts.load(int(path.name[:2])))
        assert all("concept" in s["class"] for s in sections[-1 - checks : -1]), path.name
        assert "summary" in sections[-2 - checks]["class"], path.name


@pytest.mark.parametrize("path", DECKS)
def test_each_concept_check_has_a_slide_with_its_answer_in_the_notes(path):
    """For the room: the question and its options on the slide, the answer in the notes."""
    shown = written_deck(path).select("section.concept")
    questions = concepts.load(int(path.name[:2]))
    assert len(shown) == len(questions) >= 6, path.name
    for slide, question in zip(shown, questions):
        assert slide.select_one(".prompt").get_text() == question.prompt
        options = [li.get_text() for li in slide.select("li")]
        assert options == list(question.options), (path.name, question.id)
        notes = slide.select_one("aside.notes").get_text()
        assert notes.startswith(f"Answer: {question.shown_answer}. "), (path.name, notes)
        assert question.explanation in notes


NOTES_WORDS = 160  # what a lecturer can glance at: about a minute of speech


@pytest.mark.parametrize("path", DECKS)
def test_every_slide_has_short_notes_of_its_own(path):
    """Each slide after the title has speaker notes, short, and not the next slide's: a
    section's prose is not pasted whole, nor repeated on the slides it is split across."""
    sections = written_deck(path).select("section")[1:]
    notes = [s.select_one("aside.notes") for s in sections]
    assert all(notes), [s.get_text()[:60] for s, n in zip(sections, notes) if not n]
    texts = [n.get_text(" ") for n in notes]
    for text in texts:
        assert 3 <= len(text.split()) <= NOTES_WORDS, (path.name, text[:200])
    for one, other, section in zip(texts, texts[1:], sections[1:]):
        assert one != other, (path.name, section.get_text()[:80])
    # a figure's notes begin with its caption's words; the figure slide has its heading
    for section in written_deck(path).select("section.figure"):
        assert section.find("h3"), path.name
        caption = section.select_one("figcaption").get_text(" ").split(". ", 1)[1]
        notes = section.select_one("aside.notes").get_text()
        shown, said = letters(caption), letters(notes)  # the slide cuts a long caption short
        assert said.startswith(shown[:30]) and len(shown) >= 10, (path.name, notes, caption)


def letters(text):
    """The words of a text, without its maths and markup."""
    return re.sub(r"[^a-z]", "", re.sub(r"\\\(.*?\\\)|\$[^$]*\$", "", text.lower()))


# ---------------------------------------------------------------------------- in a browser

SHOW_EVERY_SLIDE = """() => {
  // each slide in turn: what lies outside the 1280 x 720 frame, and images not loaded
  const frame = document.querySelector('.reveal .slides').getBoundingClientRect();
  const problems = [];
  Reveal.getSlides().forEach((slide, k) => {
    Reveal.slide(k);
    for (const child of slide.children) {
      if (child.tagName === 'ASIDE') continue;
      const box = child.getBoundingClientRect();
      if (box.bottom > frame.bottom + 1 || box.right > frame.right + 1 ||
          box.top < frame.top - 1 || box.left < frame.left - 1)
        problems.push(`slide ${k + 1}: ${child.tagName} outside the slide`);
    }
    for (const img of slide.querySelectorAll('img'))
      if (!img.complete || img.naturalWidth === 0) problems.push(`slide ${k + 1}: ${img.src}`);
  });
  return problems;
}"""


# Each slide in turn at 1280 x 720: any element that clips its content (a scroll bar, or
# content cut off) or that lies outside the slide's frame; [] when all is shown.
NOTHING_CLIPPED = """() => {
  const frame = document.querySelector('.reveal .slides').getBoundingClientRect();
  const problems = [];
  const name = e => e.tagName.toLowerCase() + (e.className && e.className.baseVal === undefined
    ? '.' + String(e.className).split(' ').join('.') : '');
  Reveal.getSlides().forEach((slide, k) => {
    Reveal.slide(k);
    const scale = Reveal.getScale();
    for (const e of slide.querySelectorAll('*')) {
      // the notes are not shown; MathJax's formula is one box (its mjx-math)
      if (e.closest('aside.notes') || (e.closest('mjx-container') && e.tagName !== 'MJX-MATH'))
        continue;
      const style = getComputedStyle(e), box = e.getBoundingClientRect();
      if (style.display === 'none' || (box.width === 0 && box.height === 0)) continue;
      const text = (e.textContent || '').trim().slice(0, 40);
      if (style.overflowY !== 'visible' && e.scrollHeight > e.clientHeight + 1)
        problems.push(`slide ${k + 1}: ${name(e)} cuts its content's height: ${text}`);
      if (style.overflowX !== 'visible' && e.scrollWidth > e.clientWidth + 1)
        problems.push(`slide ${k + 1}: ${name(e)} cuts its content's width: ${text}`);
      if (box.bottom > frame.bottom + scale || box.right > frame.right + scale ||
          box.top < frame.top - scale || box.left < frame.left - scale)
        problems.push(`slide ${k + 1}: ${name(e)} outside the slide: ${text}`);
    }
  });
  return [...new Set(problems)];
}"""


@pytest.fixture(scope="module")
def decks(tmp_path_factory):
    """The decks alone (tools/slides.py, with the website's MathJax), served: for the tests
    that need no website around them."""
    site = tmp_path_factory.mktemp("slides-site")
    slides.build(site)
    with served(site) as url:
        yield url


def test_every_slide_shows_all_it_holds(decks, browser):
    """Every slide of every deck at 1280 x 720: no code, output or equation cut off or
    scrolled, and nothing outside the slide (one browser page for all the decks)."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    clipped = {}
    for path in CHAPTERS:
        page.goto(f"{decks}{slides.FOLDER}/{slides.deck_name(path)}", wait_until="load")
        page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise")
        page.evaluate("MathJax.startup.promise")
        page.evaluate("document.fonts.ready")
        clipped[path.name[:2]] = page.evaluate(NOTHING_CLIPPED)
    page.close()
    assert not errors, errors
    assert {deck: found for deck, found in clipped.items() if found} == {}


@pytest.mark.parametrize("path", DECKS)
def test_every_deck_opens_offline_and_every_slide_fits(path, browser, base_url, site):
    deck = site / slides.FOLDER / slides.deck_name(path)
    assert deck.is_file(), f"no deck {deck}"
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    errors, outside = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("requestfailed", lambda r: errors.append(f"failed: {r.url}"))
    page.on(
        "request",
        lambda r: None if r.url.startswith((base_url, "data:")) else outside.append(r.url),
    )
    page.goto(f"{base_url}{slides.FOLDER}/{deck.name}", wait_until="load")
    page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise")
    page.evaluate("MathJax.startup.promise")
    page.evaluate("document.fonts.ready")
    assert not errors, errors
    assert not outside, f"requests that left the site: {outside}"
    assert page.evaluate("Reveal.getTotalSlides()") == deck.read_text().count("<section")
    assert page.evaluate("document.querySelectorAll('mjx-merror').length") == 0
    assert page.evaluate(SHOW_EVERY_SLIDE) == []
    page.keyboard.press("Home")
    assert page.evaluate("Reveal.getIndices().h") == 0
    page.keyboard.press("ArrowRight")
    assert page.evaluate("Reveal.getIndices().h") == 1, "the arrow key does not move on"
    if path.name.startswith("12"):
        screenshot(page, "slides-12-second")
    page.close()


def test_a_chapter_page_links_to_its_deck(browser, base_url):
    page = open_page(browser, f"{base_url}chapters/{CHAPTERS[11].stem}.html", 1280, 800)
    link = page.locator("article .course-launch a.course-slides")
    assert link.inner_text() == "Lecture slides"
    link.click()
    page.wait_for_url(f"**/{slides.FOLDER}/{slides.deck_name(CHAPTERS[11])}")
    page.wait_for_function("window.Reveal && Reveal.isReady()")
    assert "Online softmax" in page.inner_text(".reveal section.present h1")
    page.close()


def test_the_instructors_page_lists_every_deck(site):
    soup = BeautifulSoup((site / "instructors.html").read_text(), "html.parser")
    links = [a["href"] for a in soup.select("a") if a.get("href", "").startswith("slides/")]
    assert links == [f"slides/{slides.deck_name(path)}" for path in CHAPTERS]
    for link in links:
        assert (site / link).is_file(), link


@pytest.mark.parametrize("number", ["04", "16"])
def test_no_axe_violation_on_a_deck(number, browser, base_url):
    path = next(p for p in CHAPTERS if p.name.startswith(number))
    page = open_page(browser, f"{base_url}{slides.FOLDER}/{slides.deck_name(path)}", 1280, 720)
    page.wait_for_function("window.Reveal && Reveal.isReady()")
    found = []
    for _ in range(4):  # the title slide and the next three
        found += axe_violations(page, ".reveal section.present")
        page.keyboard.press("ArrowRight")
        page.wait_for_timeout(400)
    assert found == [], found
    page.close()

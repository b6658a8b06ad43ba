"""The lecture slides (tools/slides.py): each chapter's deck holds what the chapter holds, and
opens in Chromium, offline, without an error.

The first tests read the decks written by tools/slides.py against the chapter notebooks, parsed
here on their own. The browser tests open every deck of the built website (tests/conftest.py's
`site`, built once per run), as a lecturer would: every slide shown in turn at 1280 x 720, every
request answered by the local server, MathJax's typesetting without an error, nothing past the
slide's edges; and the chapter page's link leads to its deck.
"""

import functools
import re

import nbformat
import pytest
from bs4 import BeautifulSoup
from test_site_controls import axe_violations

from helpers.browser import open_page, screenshot
from tools import CHAPTERS, concepts, exercises, plain_maths, slides
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


@functools.cache
def deck_html(path):
    return slides.deck(path, {})


def written_deck(path):
    """The deck's HTML, parsed afresh (a test may take its notes out)."""
    return BeautifulSoup(deck_html(path), "html.parser")


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
    assert len(soup.select("section.code:not(.continued)")) == len(tagged) >= 1, path.name
    # the tagged cells' code is on the slides as it is in the notebook: a long cell over two
    # slides or more (continued), cut between two lines
    code = []
    for section in soup.select("section.code"):
        text = section.select_one("pre code").get_text()
        if "continued" in section["class"]:
            code[-1] += "\n" + text
        else:
            code.append(text)
    sources = [c.source for c in tagged]
    assert [re.sub(r"\n\s*\n", "\n", c) for c in code] == [
        re.sub(r"\n\s*\n", "\n", c) for c in sources
    ]


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
        for sub in slide.select("sub"):  # W_Q shown as W<sub>Q</sub>: read back as W_Q
            sub.replace_with("_" + sub.get_text())
        assert slide.select_one(".prompt").get_text() == question.prompt
        options = [li.get_text() for li in slide.select("li")]
        assert options == list(question.options), (path.name, question.id)
        notes = slide.select_one("aside.notes").get_text()
        assert notes.startswith(f"Answer: {question.shown_answer}"), (path.name, notes)
        assert question.explanation in notes
        # the answer is one sentence, ended once ("... x.", never "... x..")
        answer = notes[len("Answer: ") : -len(question.explanation)].strip()
        assert answer.endswith((".", "?", "!")) and not answer.endswith(".."), answer


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
    # a figure's notes say what its slide does not: not the caption it shows
    for section in written_deck(path).select("section.figure"):
        assert section.find("h3"), path.name
        caption = section.select_one("figcaption").get_text(" ").split(". ", 1)[1]
        notes = section.select_one("aside.notes").get_text()
        shown, said = letters(caption), letters(notes)
        assert len(shown) >= 10 and shown not in said, (path.name, notes, caption)
        # nor any sentence of it
        for sentence in re.split(r"(?<=[.;])\s+", caption):
            if len(letters(sentence)) > 25:
                assert letters(sentence) not in said, (path.name, sentence)


@pytest.mark.parametrize(
    "latex, text",
    [  # written by hand, as a lecturer would say them
        (r"$\sqrt{d}$", "√d"),
        (r"$1/\sqrt{d}$", "1/√d"),
        (r"$\frac{1}{\sqrt{d}}$", "1/√d"),
        (r"$\frac{a + b}{2}$", "(a+b)/2"),
        (r"$\alpha_i$ and $\beta$", "αᵢ and β"),
        (r"$x^2$", "x²"),
        (r"$q^\top k$", "qᵀk"),
        (r"$q \cdot k$", "q·k"),
        (r"$x_j \in \mathbb{R}^{32}$", "xⱼ ∈ ℝ³²"),
        (r"$d_\text{model} = 8d$", "d_model = 8d"),
        (r"$\operatorname{softmax}(QK^\top/\sqrt{d_k})V$", "softmax(QKᵀ/√dₖ)V"),
        (r"$e^{-x}$", "e^(−x)"),
        (r"$\log \ell_n$", "log ℓₙ"),
        (r"$\|x\|_2 \le 1$", "‖x‖₂ ≤ 1"),
        (r"$O(n^2)$ time", "O(n²) time"),
        (r"$\text{head}_i W_O^{(i)}$", "headᵢW_O⁽ⁱ⁾"),
        (r"$\hat{y}$", "ŷ"),
        (r"$s \bmod B$", "s mod B"),  # 19's notes read "sbmod B"
        (r"$\texttt{BLOCK} - 1$", "BLOCK−1"),  # 18's read "texttt BLOCK"
        (r"$\unknowncommand{x}$", "unknowncommand x"),  # its name, never a backslash
    ],
)
def test_maths_becomes_plain_text(latex, text):
    assert plain_maths.unicode_maths(latex) == text


@pytest.mark.parametrize(
    "raw, tidied",
    [
        ("the weights printed above: 0.1 and 0.9", "The weights printed: 0.1 and 0.9"),
        ("The code below checks it:", "The code checks it."),
        ("Every entry above the diagonal is zero.", "Every entry above the diagonal is zero."),
        ("It falls below 0.2, as above.", "It falls below 0.2, as before."),
        ("It is exactly zero..", "It is exactly zero."),
        ("The sum is …", "The sum is."),
        ("k-NN regression averages.", "k-NN regression averages."),
        ("llama.cpp reorders the rows.", "llama.cpp reorders the rows."),
        (
            "One run on the machine that built this page.",
            "One run on the machine that built the chapter's page.",
        ),
        (
            "The notebook asserts a slope above 1.5.",
            "The chapter's code asserts a slope above 1.5.",
        ),
    ],
)
def test_a_note_is_tidied_for_reading_aloud(raw, tidied):
    assert slides.tidy(raw) == tidied


# a displayed equation too long to read aloud (over 100 characters as text), ending in `end`
LONG = "$$\n" + " + ".join(f"a_{{{k}}} b_{{{k}}}" for k in range(30)) + "END\n$$"


@pytest.mark.parametrize(
    "before, end, after, said",
    [
        # inside a sentence, after the noun it spells out: named in brackets, with the
        # equation's own comma, and the sentence goes on (chapter 10 read "at its own
        # frequency the equation on the slide, the same frequencies")
        (
            ["Each pair turns at its own frequency"],
            ",",
            ["the same frequencies as before."],
            "Each pair turns at its own frequency (the equation on the slide), the same "
            "frequencies as before.",
        ),
        (
            ["They proposed the weights"],
            "",
            ["where K is a kernel."],
            "They proposed the weights (the equation on the slide), where K is a kernel.",
        ),
        # after a verb it completes the sentence as the equation did: no brackets
        (
            ["The quotient rule gives"],
            "",
            ["where J is the Jacobian."],
            "The quotient rule gives the equation on the slide, where J is the Jacobian.",
        ),
        # at the end of its sentence, with nothing after it: a full stop
        (["They produce:"], "", [], "They produce: the equation on the slide."),
        (["Then"], "", ["."], "Then the equation on the slide."),
        # before the next sentence (chapter 9 read "... the equation on the slide The H
        # head outputs ..."): a full stop, and the next sentence is not run into it
        (
            ["It runs attention on what they produce:"],
            "",
            ["The H outputs are stacked."],
            "It runs attention on what they produce: the equation on the slide.",
        ),
    ],
)
def test_a_long_equation_is_named_inside_its_sentence(before, end, after, said):
    assert slides.equation_sentence(before, LONG.replace("END", end), after) == said


def test_a_short_equation_is_read_as_text_inside_its_sentence():
    said = slides.equation_sentence(
        ["The weights are"], "$$\n\\alpha_i = w_i / W,\n$$", ["where W sums them."]
    )
    assert said == "The weights are $\\alpha_i = w_i / W,$ where W sums them."


def test_no_named_equation_runs_into_the_next_sentence():
    notes = [n for _, n in ALL_NOTES]
    assert not [n for n in notes if re.search(r"the equation on the slide [A-Z]", n)]


def test_a_figure_the_chapter_says_nothing_more_of_is_pointed_out_from_its_alt_text():
    assert slides.pointing_out("Two panels against n. Left: a line.") == (
        "To point out: two panels against n. Left: a line."
    )
    assert slides.pointing_out("") == ""
    notes = [n for _, n in ALL_NOTES]
    assert not [n for n in notes if "no more of it than its caption" in n]
    assert sum(n.startswith("To point out: ") for n in notes) >= 5


@pytest.mark.parametrize(
    "text, shown",
    [
        ("Project X into XW_Q and XW_K.", "Project X into XW<sub>Q</sub> and XW<sub>K</sub>."),
        ("d_model and m_old, W_UK", "d<sub>model</sub> and m<sub>old</sub>, W<sub>UK</sub>"),
        ("num_heads, top_k(), is_causal", "num_heads, top_k(), is_causal"),  # names in code
        ("a < b & W_O", "a &lt; b &amp; W<sub>O</sub>"),
    ],
)
def test_a_concept_check_slide_shows_subscripts(text, shown):
    assert slides.concept_html(text) == shown


def test_later_summary_slides_number_their_points():
    groups = [["- a", "- b", "- c"], ["- d", "- e"], ["- f"]]
    assert [slides.shown_points(groups, k) for k in range(3)] == [(1, 3), (4, 5), (6, 6)]
    later = [n for _, n in ALL_NOTES if n.startswith("The summary, points")]
    assert later and not [n for _, n in ALL_NOTES if "The summary, continued" in n]
    for note in later:
        first, last, total = map(int, re.findall(r"\d+", note)[:3])
        assert 1 < first <= last <= total


def notes_of_every_deck():
    """(deck, slide number, the notes' text) for every slide with notes, in every deck."""
    for path in CHAPTERS:
        for k, section in enumerate(written_deck(path).select("section"), 1):
            aside = section.select_one("aside.notes")
            if aside:
                for line in aside.get_text("\n").splitlines():  # each equation's own line
                    yield f"{path.name[:2]} slide {k}", line.strip()


ALL_NOTES = list(notes_of_every_deck())


def test_no_latex_in_the_notes():
    """The speaker view typesets nothing: the notes' maths is text (√d, not $\\sqrt{d}$)."""
    latex = [(where, n) for where, n in ALL_NOTES if "$" in n or re.search(r"\\[A-Za-z]", n)]
    assert latex == []
    braces = [(where, n) for where, n in ALL_NOTES if re.search(r"[_^]\{|\\[{}]", n)]
    assert braces == []


def test_no_note_ends_or_starts_mid_thought():
    """A note is whole sentences: it does not end on a colon, on "…" or pointing at a page that
    is not there ("printed above", "the code below"); it starts with a capital (or a name
    written in lower case, such as k-NN or llama.cpp); no double full stop; "1 point"."""
    problems = []
    for where, note in ALL_NOTES:
        if note.endswith((":", "…", "...")) or re.search(r"\b(above|below)\W*$", note):
            problems.append((where, "end", note[-80:]))
        if re.search(r"\b(printed|code|function|explorer|table) (above|below)\b", note):
            problems.append((where, "points at the page", note))
        if re.match(r"[a-z]+\b(?![-.(_'’\w])", note):
            problems.append((where, "lower case", note[:80]))
        if re.search(r"[^.]\.\.(?!\.)", note):
            problems.append((where, "..", note))
        if re.search(r"(?<![\d.])1 points\b", note):
            problems.append((where, "1 points", note))
    assert problems == []


def test_a_lead_in_to_what_the_notes_leave_out_is_left_out():
    """Chapter 5's causal-mask section: a paragraph that leads in to a code cell ("... returns
    it, True meaning may attend:") is not joined to the next paragraph's sentence in the notes
    ("...may attend: With this mask ...")."""
    section = slides.Section("Causal masks")
    section.prose = [
        "A causal mask lets a query see its own position and the earlier ones.\n\n"
        "The package's `causal_mask(n)` returns it, True meaning may attend:\n",
        "With this mask the weights are lower triangular. The diagonal belongs to it.\n",
    ]
    notes = section.opening_notes()
    assert "attend:" not in notes and notes.startswith("With this mask"), notes
    assert slides.without_lead_in("One. Two leads in:") == "One."
    assert slides.without_lead_in("Only a lead-in:") == "Only a lead-in:"
    for where, note in ALL_NOTES:
        assert not re.search(r"\b(?:returns it|as follows|shows it):\s+[A-Z]", note), (where, note)


@pytest.mark.parametrize("number, points", [(1, "1 point"), (4, "4 points"), (2.5, "2.5 points")])
def test_points_are_counted_in_words(number, points):
    assert slides.points(number) == points


def test_the_summary_notes_say_what_to_do_next():
    """Not filler: the first summary slide's notes name the concept checks that follow and the
    chapter's first exercise, to set after the lecture."""
    for path in CHAPTERS:
        soup = written_deck(path)
        notes = soup.select_one("section.summary aside.notes").get_text()
        assert "leaves behind" not in notes, path.name
        first = exercises.exercises(nbformat.read(path, as_version=4))[0]
        # its title: the first line of its prompt, after ":::{exercise}" or "###"
        title = re.sub(r"\s*\(★+\)\s*$", "", first.prompt.source.partition("\n")[0])
        title = re.sub(r"^(:::\{\w+\}|#+)\s*", "", title)
        assert f"Exercise {int(path.name[:2])}.1" in notes, (path.name, notes)
        assert letters(title)[-12:] in letters(notes), (path.name, title, notes)
        checks = len(concepts.load(int(path.name[:2])))
        assert f"{checks} concept checks" in notes, path.name


@pytest.mark.parametrize(
    "chapter, heading, result",
    [
        ("04", "Can training recover", "does not make learning impossible"),
        ("15", "DeepSeek-V2's", "gives 82.2%, not 93.3%"),
    ],
)
def test_a_section_slide_shows_its_result(chapter, heading, result):
    """Where a section's point is a conclusion or a number, its slide shows it, not only the
    notes (the result as the chapter's own text words it)."""
    path = next(p for p in CHAPTERS if p.name.startswith(chapter))
    chapter_text = re.sub(r"\s+", " ", "\n".join(c.source for c in lecture_part(path)))
    assert result in chapter_text
    found = [
        s
        for s in written_deck(path).select("section")
        if s.find("h2") and s.find("h2").get_text().startswith(heading)
    ]
    assert len(found) == 1
    aside = found[0].select_one("aside.notes").extract()
    assert result in re.sub(r"\s+", " ", found[0].get_text()), found[0].get_text()
    assert result not in aside.get_text()


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


# Each slide in turn at 1280 x 720: code or output in type under 16 px on the screen (reveal.js
# shows the 1280 x 720 slide scaled into the window, less a margin), and figure captions that
# reach into the 80 px at the right where reveal.js draws its navigation arrows; [] when there
# are none.
READABLE = """() => {
  const frame = document.querySelector('.reveal .slides').getBoundingClientRect();
  const problems = [];
  Reveal.getSlides().forEach((slide, k) => {
    Reveal.slide(k);
    const scale = Reveal.getScale();
    for (const pre of slide.querySelectorAll('pre')) {
      // as shown: reveal.js scales the slide into the screen, less its margin
      const size = parseFloat(getComputedStyle(pre).fontSize) * scale;
      if (size < 15.9) problems.push(`slide ${k + 1}: ${size.toFixed(1)}px type on screen`);
    }
    for (const caption of slide.querySelectorAll('figcaption p')) {
      const range = document.createRange();
      range.selectNodeContents(caption);
      const right = Math.max(...[...range.getClientRects()].map(r => r.right));
      if (right > frame.right - 80 * scale)
        problems.push(`slide ${k + 1}: caption under the arrows (${frame.right - right}px)`);
    }
  });
  return problems;
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
    scrolled, nothing outside the slide, no code under 16 px and no caption under the
    navigation arrows (one browser page for all the decks)."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    clipped = {}
    for path in CHAPTERS:
        page.goto(f"{decks}{slides.FOLDER}/{slides.deck_name(path)}", wait_until="load")
        page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise")
        page.evaluate("MathJax.startup.promise")
        page.evaluate("document.fonts.ready")
        clipped[path.name[:2]] = page.evaluate(NOTHING_CLIPPED) + page.evaluate(READABLE)
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


# ------------------------------------------------------- what a lecturer reads and says (round 2)


@pytest.mark.parametrize(
    "text, sentences",
    [  # cut by hand
        ("One (see fig. A. It is b). Two.", ["One (see fig. A. It is b).", "Two."]),
        ("A is $x. Y$ here. B.", ["A is $x. Y$ here.", "B."]),
        ("A [1. B] c. D.", ["A [1. B] c.", "D."]),
        ("Plain. Two. Three.", ["Plain.", "Two.", "Three."]),
        # an abbreviation ends no sentence: "Xiao et al. (2024)" was a slide of its own
        (
            "As Xiao et al. (2024) saw. E.g. Fig. 3 shows it.",
            ["As Xiao et al. (2024) saw.", "E.g. Fig. 3 shows it."],
        ),
    ],
)
def test_sentences_are_never_cut_inside_brackets(text, sentences):
    assert slides.split_sentences(text) == sentences


@pytest.mark.parametrize(
    "text, opening, shown",
    [  # written by hand
        (
            "It has two phases:\n\n- **a**: one. More.\n- **b**: two.\n\nNext.",
            "It has two phases:",
            "- **a**: one.\n- **b**: two.",
        ),
        (
            "Steps:\n\n1. First. Then.\n\n   Its own paragraph.\n\n2. Second.",
            "Steps:",
            "1. First.\n2. Second.",
        ),
        ("No list here:\n\n```python\nx = 1\n```", "No list here:", ""),
        ("Ends. \n\n- a list that nothing announces", "Ends.", ""),
        (
            "Designs:\n\n"
            + "\n".join(f"- **Name {k}.** " + "word " * 40 + "end." for k in range(4)),
            "Designs:",
            "\n".join(f"- **Name {k}.**" for k in range(4)),
        ),
        # a table it announces, whole (chapter 3's "We compare three ...:" lost its table of
        # the three scores); a table too long for a slide stays in the chapter
        (
            "We compare three:\n\n| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n\nNext.",
            "We compare three:",
            "| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |",
        ),
        ("Long:\n\n| a |\n|---|\n" + "| 1 |\n" * 9, "Long:", ""),
    ],
)
def test_a_lead_in_shows_the_list_it_announces(text, opening, shown):
    """A slide whose text ends with ":" shows the list that follows (13 slides ended on a colon
    with their steps dropped): each item's first sentence, or only the items' bold names where
    the sentences would not fit."""
    assert slides.list_after(text, opening) == shown


def unclosed_in_the_chapter(path):
    """The chapter's own paragraphs whose round brackets do not balance (a slip of the text,
    not of the slides), as letters."""
    paragraphs = [
        p
        for cell in nbformat.read(path, as_version=4).cells
        if cell.cell_type == "markdown"
        for p in re.split(r"\n\s*\n|\n(?=- |\d+\. )", cell.source)  # paragraphs, list items
    ]
    return [letters(p) for p in paragraphs if p.count("(") != p.count(")")]


def test_no_note_is_cut_inside_brackets():
    """Every line of the notes closes the brackets it opens (12/10 ended inside "( ... )"),
    unless the chapter's own sentence leaves one open."""
    problems = []
    for path in CHAPTERS:
        slips = unclosed_in_the_chapter(path)
        for k, section in enumerate(written_deck(path).select("section"), 1):
            aside = section.select_one("aside.notes")
            for line in aside.get_text("\n").splitlines() if aside else []:
                if line.count("(") == line.count(")"):
                    continue
                opened = line.rfind("(") if line.count("(") > line.count(")") else len(line)
                before = letters(line[:opened])[-25:]
                if not any(before in slip for slip in slips):
                    problems.append((f"{path.name[:2]}/{k}", line[-120:]))
    assert problems == []


def deck_notes(path):
    """(slide number, its classes, the notes' text, the slide's text) of every slide."""
    for k, section in enumerate(written_deck(path).select("section"), 1):
        aside = section.select_one("aside.notes")
        notes = aside.extract().get_text(" ") if aside else ""
        yield k, section.get("class", []), notes, section.get_text(" ")


@pytest.mark.parametrize("path", DECKS)
def test_no_note_talks_of_cells_or_repeats_another(path):
    """The notes speak of the idea, not of the notebook ("the cell after this one checks",
    "printed"), and no sentence of them is read again on a later slide (12/15 repeated 12/14)."""
    said = {}
    for k, classes, notes, _ in deck_notes(path):
        if "concept" in classes:  # the question bank's explanations, written for the room
            continue
        assert not re.search(r"\bcells?\b|\bprinted\b|\bcode (below|above)\b", notes, re.I), (
            path.name,
            k,
            notes,
        )
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z])", notes):
            if len(sentence) >= 40:
                assert sentence not in said, (path.name, k, said.get(sentence), sentence)
                said[sentence] = k


@pytest.mark.parametrize("path", DECKS)
def test_no_slide_opens_by_pointing_at_the_page(path):
    """A section's slide does not open with "The table above ...", "The tables above change
    ...", "Proved above" (the deck holds no such table); nor is it a bare heading."""
    pointing = re.compile(r"^\W*(\S+\s+){0,4}(above|below)\b(?!\s+(the|zero|\d)\b)", re.I)
    for k, section in enumerate(written_deck(path).select("section"), 1):
        classes = section.get("class", [])
        if classes in ([], ["equations"]) and section.find("p"):
            first = re.split(r"(?<=[.!?])\s+", section.find("p").get_text(" ").strip())[0]
            assert not pointing.search(first), (path.name, k, first)
        if not classes:  # a section without equations: some text under its heading
            assert section.find(["p", "ul", "ol", "table"]), (path.name, k)
        for item in section.select("li") if "summary" in classes else []:
            for sentence in re.split(r"(?<=[.!?])\s+", item.get_text(" ")):
                assert not pointing.search(sentence), (path.name, k, sentence)


def test_the_title_slide_has_the_chapters_motivation_in_its_notes():
    """The title slide's notes say what its slide does not: the rest of the opening, or the
    lecture's road map (its sections' headings)."""
    for path in CHAPTERS:
        title = written_deck(path).select_one("section.title")
        aside = title.select_one("aside.notes")
        assert aside, path.name
        notes = aside.extract().get_text()
        assert 3 <= len(notes.split()) <= NOTES_WORDS, (path.name, notes)
        assert letters(notes)[:40] not in letters(title.get_text()), (path.name, notes)


@pytest.mark.parametrize("path", DECKS)
def test_numbered_steps_are_named_only_where_they_are_shown(path):
    """ "Steps 2, 3, 5 and 6 are sums over tiles" only where the slide shows a numbered list."""
    for k, _, notes, text in deck_notes(path):
        if re.search(r"\b[Ss]teps? \d", notes + text):
            assert written_deck(path).select("section")[k - 1].find("ol"), (path.name, k)


def test_a_long_summary_bullet_shows_its_first_sentence_only():
    """10/22 had one bullet of 130 words: a bullet of more than 40 words is one sentence on the
    slide (the rest in the notes)."""
    for path in CHAPTERS:
        for section in written_deck(path).select("section.summary"):
            for item in section.select("li"):
                text = re.sub(r"\\\(.*?\\\)", "x", item.get_text(" "))
                if len(text.split()) > 40:
                    assert len(re.findall(r"[.!?](\s|$)", text.strip())) == 1, (path.name, text)


@pytest.mark.parametrize("path", DECKS)
def test_an_order_question_asks_for_the_order_once(path):
    for section in written_deck(path).select("section.concept"):
        said = len(re.findall(r"\bin order\b", section.get_text(" "), re.I))
        assert said <= 1, (path.name, section.get_text(" ")[:80])
    questions = [q for q in concepts.load(int(path.name[:2])) if q.kind == "order"]
    shown = written_deck(path).select("section.concept")
    for question in questions:
        slide = shown[question.number - 1]
        assert re.search(r"\bin order\b", slide.get_text(" "), re.I), (path.name, question.id)


def test_exercises_are_numbered_with_their_chapter():
    """ "(exercise 4)" on chapter 12's slides is exercise 12.4."""
    problems = []
    for path in CHAPTERS:
        for k, _, notes, text in deck_notes(path):
            for found in re.finditer(r"\b[Ee]xercises? \d+(?![.\d])", notes + " " + text):
                problems.append((f"{path.name[:2]}/{k}", found[0]))
    assert problems == []
    deck = written_deck(CHAPTERS[11]).select_one("section.title").get_text()
    assert "(exercise 12.4)" in deck

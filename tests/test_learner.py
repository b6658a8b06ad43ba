"""The learner edition (notebooks/) as Jupyter shows it: up to date with chapters/, and, once
rendered by a real notebook Markdown renderer (nbconvert's HTML export) and typeset by MathJax 3
in Chromium, free of MyST markup, solutions and grader markers. (That each one runs from top to
bottom in Colab, its checks saying "Not yet answered", is tests/test_colab.py.)"""

import pathlib
import re
import sysconfig

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbconvert import HTMLExporter

from helpers.browser import launched, open_page, screenshot
from helpers.solution_text import hidden_test_lines, solution_fragments
from tools import ROOT, exercises, learner
from tools.pdf import served

CHAPTERS = learner.CHAPTERS
MYST_LEFTOVERS = (
    ":::{",
    "```{",
    "{cite}",
    "{ref}",
    "{numref}",
    "{doc}",
    ":label:",
    ":class:",
    "{solution",
    "{exercise",
)
GRADER_MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "BEGIN QUESTION")
# The MathJax 3 that sphinx-mathjax-offline ships for the website (no network needed).
MATHJAX = pathlib.Path(sysconfig.get_path("purelib"), "sphinx-mathjax-offline", "static")
# JupyterLab's own MathJax 3 settings: $...$ inline, $$...$$ displayed.
MATHJAX_3 = (
    '<script>window.MathJax = {tex: {inlineMath: [["$", "$"], ["\\\\(", "\\\\)"]], '
    'displayMath: [["$$", "$$"], ["\\\\[", "\\\\]"]], processEscapes: true}};</script>'
    '<script src="/mathjax/tex-chtml-full.js"></script>'
)


def rendered(chapter):
    """The learner notebook as nbconvert's JupyterLab template renders it, MathJax 3 local."""
    notebook = nbformat.read(ROOT / "notebooks" / chapter.name, as_version=4)
    html, _ = HTMLExporter(template_name="lab").from_notebook_node(notebook)
    return re.sub(
        r'<script src="https://cdnjs[^"]*mathjax[^"]*">\s*</script>', lambda _: MATHJAX_3, html
    )


def test_the_learner_edition_is_up_to_date():
    learner.main(["--check"])


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("learner-html")
    (folder / "mathjax").symlink_to(MATHJAX / "mathjax")
    for chapter in CHAPTERS:
        (folder / f"{chapter.stem}.html").write_text(rendered(chapter))
    return folder


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_rendered_notebook_has_no_markup_and_no_solution(chapter, pages):
    soup = BeautifulSoup((pages / f"{chapter.stem}.html").read_text(), "html.parser")
    markdown = "\n".join(cell.get_text() for cell in soup.select(".jp-MarkdownCell"))
    everything = soup.get_text()
    assert not [m for m in MYST_LEFTOVERS if m in markdown], [
        m for m in MYST_LEFTOVERS if m in markdown
    ]
    assert not [m for m in GRADER_MARKERS if m in everything]
    instructor = nbformat.read(chapter, as_version=4)
    for fragment in solution_fragments(instructor):
        assert fragment not in everything, f"solution text in the learner edition: {fragment!r}"
    for line in hidden_test_lines(instructor):
        assert line not in everything


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_every_exercise_is_a_heading_with_its_answer_cells(chapter):
    """Exercise N.k: its prompt, a link to its solution, a stub per coding answer, the check
    cells, an empty code cell where the model answer runs more code than the answer itself
    (after the checks for a coding exercise), and an answer cell for a written part, before
    the next exercise."""
    notebook = nbformat.read(ROOT / "notebooks" / chapter.name, as_version=4)
    found = exercises.exercises(nbformat.read(chapter, as_version=4))
    starts = [i for i, c in enumerate(notebook.cells) if c.source.startswith("### Exercise ")]
    assert len(starts) == len(found) >= 4
    for exercise, start, end in zip(found, starts, starts[1:] + [len(notebook.cells)]):
        cells = notebook.cells[start:end]
        assert f"#sol-{exercise.label.removeprefix('ex-')})" in cells[0].source
        record = exercise.record
        points = sum(record.get(k, 0) for k in ("points", "hidden_points", "written_points"))
        heading = cells[0].source.splitlines()[0]
        assert re.search(rf"\(★+, {points:g} points?\)$", heading), (heading, points)
        stubs = [c for c in cells if "raise NotImplementedError()" in c.source]
        checks = [c for c in cells if "check" in c.metadata.get("tags", [])]
        assert len(stubs) == len(exercise.answers) and len(checks) == len(exercise.checks)
        assert all(not c.outputs for c in stubs + checks)
        written = [c for c in cells if c.source == exercises.WRITTEN_ANSWER]
        assert len(written) == bool(exercise.written_points)
        scratch = [
            i
            for i, c in enumerate(cells)
            if c.cell_type == "code" and c.source.startswith("# Your code for")
        ]
        more_code = any(c.cell_type == "code" for c in exercise.verification)
        assert len(scratch) == more_code, exercise.label
        if exercise.is_coding and more_code:
            last_check = max(
                i for i, c in enumerate(cells) if "check" in c.metadata.get("tags", [])
            )
            assert scratch[0] > last_check, exercise.label


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_the_exercises_say_to_run_the_check_cell_and_nothing_about_the_website(chapter):
    """The notebook's own instruction, not the website's (where nothing runs) nor a grader's."""
    notebook = nbformat.read(ROOT / "notebooks" / chapter.name, as_version=4)
    (intro,) = [c.source for c in notebook.cells if "## Exercises" in c.source]
    intro = " ".join(intro.split())
    for edition, sentence in exercises.HOW_TO_CHECK.items():
        assert (" ".join(sentence.split()) in intro) == (edition == "notebook"), edition
    assert "folded" not in intro and "website" not in intro


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_every_figure_keeps_its_caption_as_text(chapter):
    notebook = nbformat.read(ROOT / "notebooks" / chapter.name, as_version=4)
    for index, cell in enumerate(notebook.cells):
        caption = cell.metadata.get("mystnb", {}).get("figure", {}).get("caption")
        if caption and any("image/png" in o.get("data", {}) for o in cell.get("outputs", [])):
            following = notebook.cells[index + 1]
            assert following.cell_type == "markdown"
            assert re.match(rf"\*Figure {int(chapter.name[:2])}\.\d+\. ", following.source)


def test_in_the_browser_the_maths_typesets_and_a_screenshot_is_saved(pages):
    with launched() as browser, served(pages) as base_url:
        for chapter in CHAPTERS:
            page = open_page(browser, f"{base_url}{chapter.stem}.html", 1280, 800)
            assert page.query_selector_all(".jp-MarkdownCell mjx-container"), chapter.name
            errors = page.query_selector_all("mjx-merror")
            assert not errors, f"{chapter.name}: MathJax errors {errors[0].inner_text()!r}"
            left = page.evaluate("""() => [...document.querySelectorAll('.jp-MarkdownCell')]
                .map(cell => { const c = cell.cloneNode(true);
                               c.querySelectorAll('code, pre, mjx-container')
                                .forEach(e => e.remove());
                               return c.innerText; })
                .filter(text => text.includes('$') || text.includes('`'))""")
            assert not left, f"{chapter.name}: maths or code left as text: {left[0][:200]!r}"
            if chapter == CHAPTERS[0]:
                screenshot(page, f"learner-{chapter.stem}")
                page.locator("h3", has_text="Exercise 1.1").scroll_into_view_if_needed()
                screenshot(page, f"learner-{chapter.stem}-exercise")
            page.close()

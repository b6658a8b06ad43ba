"""The classroom edition (`make classroom`): its website and its notebooks (the learner edition
without links to the solutions) keep no solution, and every written part has an answer cell.
(That the notebooks run with their stubs, each check saying "Not yet answered", is
tests/test_colab.py.) Also how tools/exercises.py stubs an answer and names an Otter test's
inputs."""

import nbformat
import pytest
from bs4 import BeautifulSoup

from helpers.solution_text import hidden_test_lines, solution_fragments
from tools import ROOT, classroom, exercises

CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    output = tmp_path_factory.mktemp("classroom")
    classroom.main(output, pdfs=())  # its PDF is the site's learner PDF, tested there
    return output


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.name)
def test_no_solution_is_left(chapter, edition):
    instructor = nbformat.read(chapter, as_version=4)
    fragments = solution_fragments(instructor)
    assert len(fragments) >= 4, "found too few solution lines to make this test meaningful"
    handout = (edition / "notebooks" / chapter.name).read_text()
    page = (edition / "_build" / "html" / "chapters" / f"{chapter.stem}.html").read_text()
    text = BeautifulSoup(page, "html.parser").get_text()
    for fragment in fragments:
        assert fragment not in handout, f"solution left in the classroom notebook: {fragment!r}"
        assert fragment not in text, f"solution left on the classroom website: {fragment!r}"
    assert "solution" not in " ".join(
        " ".join(tag.get("class", [])) for tag in BeautifulSoup(page, "html.parser").find_all(True)
    )
    assert "{solution" not in handout
    assert "course-rubric" not in page and exercises.RUBRIC not in handout, "a rubric is left"
    assert "#sol-" not in handout and "Classroom edition" in handout, "links to the solutions"
    assert "colab.research.google.com" not in page, "Colab opens the public notebooks"
    served = edition / "_build" / "html" / "_sources" / "chapters" / chapter.name
    assert served.read_text() == handout, "the download button serves another notebook"
    for line in hidden_test_lines(instructor):
        assert line not in handout and line not in text
    handed_out = nbformat.read(edition / "notebooks" / chapter.name, as_version=4)
    answers = [cell for cell in instructor.cells if "# BEGIN SOLUTION" in cell.source]
    stubs = [cell for cell in handed_out.cells if "raise NotImplementedError()" in cell.source]
    assert len(stubs) == len(answers) >= 2
    assert all("YOUR CODE HERE" in cell.source and not cell.outputs for cell in stubs)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.name)
def test_every_written_part_has_an_answer_cell_on_the_classroom_website(chapter, edition):
    instructor = nbformat.read(chapter, as_version=4)
    written = [e for e in exercises.exercises(instructor) if e.written_points]
    page = (edition / "_build" / "html" / "chapters" / f"{chapter.stem}.html").read_text()
    text = BeautifulSoup(page, "html.parser").get_text()
    assert text.count("Your answer. Write your answer here.") == len(written) >= 2


def test_the_classroom_website_does_not_promise_solutions(edition):
    home = BeautifulSoup(
        (edition / "_build" / "html" / "intro.html").read_text(), "html.parser"
    ).get_text()
    assert "classroom edition" in home
    assert "folded away" not in home and "For instructors" not in home


def test_stub_keeps_the_indentation_and_signature():
    source = (
        'def f(x):\n    """doc"""\n    # BEGIN SOLUTION\n    y = x + 1\n'
        "    return y\n    # END SOLUTION\n\nprint(f)"
    )
    assert exercises.stub_solutions(source) == (
        'def f(x):\n    """doc"""\n    # YOUR CODE HERE\n    raise NotImplementedError()\n'
        "\nprint(f)"
    )


def test_otter_tests_take_the_names_they_read_and_no_builtins():
    """A name that is also a dict method (update, copy) is the notebook's;
    print and len are Python's own, never looked up in the notebook."""
    source = "print(len(update(x)), copy)\ny = 1\nf(y)"
    assert set(exercises._free_names(source)) == {"update", "x", "copy", "f"}


def test_the_classroom_edition_copies_every_page_of_its_contents():
    """Each page the book's contents list is copied into the classroom edition's source (the
    chapters, rewritten, and classroom.BOOK_FILES), or left out as an instructors' page, and
    so is every file those pages include: a page added to _toc.yml alone would stop its build."""
    import re

    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [chapter["file"] for part in toc["parts"] for chapter in part["chapters"]]
    copied = {name.rsplit(".", 1)[0] for name in classroom.BOOK_FILES}
    for page in [toc["root"], *pages]:
        if page.startswith("chapters/") or page in classroom.INSTRUCTOR_PAGES:
            continue
        assert page in copied, f"{page} is not in tools/classroom.py's BOOK_FILES"
        included = re.findall(r"^```\{include\} (\S+)", (ROOT / f"{page}.md").read_text(), re.M)
        assert set(included) <= set(classroom.BOOK_FILES), (page, included)

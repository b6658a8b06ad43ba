"""The student edition: no solution survives, every written part has an answer cell, and every
self-check fails on its stub as it should."""

import pathlib
import sys

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import exercises  # noqa: E402
import student  # noqa: E402
from chapter_pool import for_each_chapter, result_for  # noqa: E402
from solution_text import hidden_test_lines, solution_fragments  # noqa: E402

CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    output = tmp_path_factory.mktemp("student")
    student.main(output)
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
        assert fragment not in handout, f"solution left in the student notebook: {fragment!r}"
        assert fragment not in text, f"solution left on the student website: {fragment!r}"
    assert "solution" not in " ".join(" ".join(tag.get("class", []))
                                      for tag in BeautifulSoup(page, "html.parser").find_all(True))
    assert "{solution" not in handout
    for line in hidden_test_lines(instructor):
        assert line not in handout and line not in text
    student_notebook = nbformat.read(edition / "notebooks" / chapter.name, as_version=4)
    answers = [cell for cell in instructor.cells if "# BEGIN SOLUTION" in cell.source]
    stubs = [cell for cell in student_notebook.cells if "raise NotImplementedError()" in cell.source]
    assert len(stubs) == len(answers) >= 2
    assert all("YOUR CODE HERE" in cell.source and not cell.outputs for cell in stubs)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.name)
def test_every_written_part_has_an_answer_cell(chapter, edition):
    instructor = nbformat.read(chapter, as_version=4)
    handout = nbformat.read(edition / "notebooks" / chapter.name, as_version=4)
    written = [e for e in exercises.exercises(instructor) if e.written_points]
    answer_cells = [c for c in handout.cells if c.source == exercises.WRITTEN_ANSWER]
    assert len(answer_cells) == len(written) >= 2
    prompts = [i for i, c in enumerate(handout.cells) if ":::{exercise}" in c.source]
    for exercise in written:  # the answer cell comes after its prompt, before the next prompt
        start = next(i for i in prompts if f":label: {exercise.label}" in handout.cells[i].source)
        end = min([i for i in prompts if i > start], default=len(handout.cells))
        assert any(c.source == exercises.WRITTEN_ANSWER for c in handout.cells[start:end])


def test_the_student_website_does_not_promise_solutions(edition):
    home = BeautifulSoup((edition / "_build" / "html" / "intro.html").read_text(),
                         "html.parser").get_text()
    assert "student edition" in home
    assert "folded away" not in home and "For instructors" not in home


@pytest.fixture(scope="module")
def executed_handouts(edition):
    """Every student notebook run to the end, errors kept in the outputs."""
    def execute(chapter):
        notebook = nbformat.read(edition / "notebooks" / chapter.name, as_version=4)
        NotebookClient(notebook, timeout=600, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": str(ROOT / "chapters")}}).execute()
        return notebook
    return for_each_chapter(execute, CHAPTERS)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.name)
def test_check_cells_fail_on_the_stubs_and_nothing_else_fails(chapter, executed_handouts):
    notebook = result_for(executed_handouts, chapter)
    check_cells = 0
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        errors = [output for output in cell.outputs if output.output_type == "error"]
        if "check" in cell.metadata.get("tags", []):
            check_cells += 1
            assert [e.ename for e in errors] == ["CheckFailed"], cell.source
            assert "NotImplementedError" in errors[0].evalue
        else:
            assert not errors, f"{cell.source[:80]!r} raised {errors[0].ename}" if errors else ""
    assert check_cells >= 1


def test_stub_keeps_the_indentation_and_signature():
    source = ("def f(x):\n    \"\"\"doc\"\"\"\n    # BEGIN SOLUTION\n    y = x + 1\n"
              "    return y\n    # END SOLUTION\n\nprint(f)")
    assert exercises.stub_solutions(source) == (
        "def f(x):\n    \"\"\"doc\"\"\"\n    # YOUR CODE HERE\n    raise NotImplementedError()\n"
        "\nprint(f)")


def test_otter_tests_take_the_names_they_read_and_no_builtins():
    """A name that is also a dict method (update, copy) is the notebook's;
    print and len are Python's own, never looked up in the notebook."""
    source = "print(len(update(x)), copy)\ny = 1\nf(y)"
    assert set(exercises._free_names(source)) == {"update", "x", "copy", "f"}

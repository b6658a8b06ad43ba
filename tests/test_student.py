"""The student edition: no solution survives, and every self-check fails on its stub as it should."""

import pathlib
import re
import sys

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import student  # noqa: E402

CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
SOLUTION_CODE = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S)


def solution_fragments(notebook):
    """Distinctive lines of every solution (answer code, and the text of gated solution cells)
    that do not also appear outside the solutions."""
    fragments, inside, public = set(), False, []
    for cell in notebook.cells:
        source = cell.source
        if cell.cell_type == "markdown" and "{solution-start}" in source:
            inside = True
            source = source.split("```", 2)[-1]  # the text after the directive
        elif cell.cell_type == "markdown" and "{solution-end}" in source:
            inside = False
            continue
        if cell.cell_type == "code":
            for block in SOLUTION_CODE.findall(source):
                fragments.update(line.strip() for line in block.splitlines())
        if inside and "check" not in cell.metadata.get("tags", []):
            body = SOLUTION_CODE.sub("", source) if cell.cell_type == "code" else source
            fragments.update(line.strip() for line in body.splitlines())
        elif not inside:
            public.append(source)
    public_text = "\n".join(public)
    return {f for f in fragments
            if len(f) > 25 and not f.startswith(("def ", '"""', "#")) and f not in public_text}


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
    student_notebook = nbformat.read(edition / "notebooks" / chapter.name, as_version=4)
    answers = [cell for cell in instructor.cells if "### BEGIN SOLUTION" in cell.source]
    stubs = [cell for cell in student_notebook.cells if "raise NotImplementedError()" in cell.source]
    assert len(stubs) == len(answers) >= 1
    assert all("YOUR CODE HERE" in cell.source and not cell.outputs for cell in stubs)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.name)
def test_check_cells_fail_on_the_stubs_and_nothing_else_fails(chapter, edition):
    notebook = nbformat.read(edition / "notebooks" / chapter.name, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(ROOT / "chapters")}}).execute()
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
    source = ("def f(x):\n    \"\"\"doc\"\"\"\n    ### BEGIN SOLUTION\n    y = x + 1\n"
              "    return y\n    ### END SOLUTION\n\nprint(f)")
    assert student.stub_solutions(source) == (
        "def f(x):\n    \"\"\"doc\"\"\"\n    # YOUR CODE HERE\n    raise NotImplementedError()\n"
        "\nprint(f)")
